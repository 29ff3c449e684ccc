"""The Chrome trace: compact text with the dict form's events, exact small timelines."""

import gzip
import json

import pytest

from pipesim.schedules import get_schedule
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.export import chrome_trace_json, gzipped, to_chrome_trace
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines


def gpipe_with_latency(tail_ms=None, optimizer_ms=None):
    """GPipe on 2 devices, 2 microbatches, F 1 ms, B 2 ms, a 10 us hop."""
    schedule, costs = (
        get_schedule("gpipe", 2, 2),
        uniform_costs(2, 1.0, 2.0, activation_memory_bytes=4),
    )
    topology = Topology(2, default=Link(latency_us=10.0))
    trace = simulate(schedule, costs, topology, tail_ms=tail_ms, optimizer_ms=optimizer_ms)
    return trace, memory_timelines(trace, schedule, costs)


def test_the_text_holds_the_same_events_as_the_dict():
    schedule = get_schedule("interleaved-1f1b", 2, 4, 2)  # two chunks a device: args say which
    costs = uniform_costs(schedule.model_stages, 1.0, 2.0, activation_memory_bytes=1e6)
    topology = Topology(2, default=Link(latency_us=7.0, bandwidth_gbps=25.0))
    trace = simulate(schedule, costs, topology, tail_ms=[1.0, 2.0], optimizer_ms=[0.5, 2.0])
    memory = memory_timelines(trace, schedule, costs)
    text = chrome_trace_json(trace, label="x", memory=memory)
    assert json.loads(text) == to_chrome_trace(trace, label="x", memory=memory)
    assert '", "' not in text and '": ' not in text  # compact separators
    complete = [e for e in json.loads(text)["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(trace.start)
    assert {e["args"]["chunk"] for e in complete if "args" in e} == {0, 1}
    assert [e["name"] for e in complete if "args" not in e] == [
        "gradient all-reduce",
        "optimizer step",
        "optimizer step",
    ]


def test_a_small_trace_event_by_event():
    trace, memory = gpipe_with_latency(tail_ms=[0.5, 0.0], optimizer_ms=[0.25, 0.0])
    events = json.loads(chrome_trace_json(trace, memory=memory))["traceEvents"]
    complete = sorted(
        (e["pid"], e["tid"], e["ts"], e["dur"], e["name"], e["cat"])
        for e in events
        if e["ph"] == "X"
    )
    assert complete == [
        (0, 0, 0.0, 1000.0, "0F0", "F"),
        (0, 0, 1000.0, 1000.0, "0F1", "F"),
        (0, 0, 5020.0, 2000.0, "0B1", "B"),  # GPipe's backwards: the last microbatch first
        (0, 0, 7020.0, 2000.0, "0B0", "B"),
        (0, 1, 1000.0, 10.0, "0F0->1", "SEND_F"),
        (0, 1, 2000.0, 10.0, "0F1->1", "SEND_F"),
        (0, 1, 9020.0, 250.0, "gradient all-reduce", "ALLREDUCE"),
        (0, 1, 9270.0, 250.0, "optimizer step", "OPTIMIZER"),
        (1, 0, 1010.0, 1000.0, "1F0", "F"),
        (1, 0, 2010.0, 1000.0, "1F1", "F"),
        (1, 0, 3010.0, 2000.0, "1B1", "B"),
        (1, 0, 5010.0, 2000.0, "1B0", "B"),
        (1, 1, 5010.0, 10.0, "1B1->0", "SEND_B"),
        (1, 1, 7010.0, 10.0, "1B0->0", "SEND_B"),
    ]
    assert all("args" not in e for e in events if e["ph"] == "X")  # one chunk: names say all
    counters = [(e["pid"], e["ts"], e["args"]["bytes"]) for e in events if e["ph"] == "C"]
    # activation bytes 4 a microbatch, each change once (a repeated value is not drawn again)
    assert counters == [
        (0, 0.0, 4.0),
        (0, 1000.0, 8.0),
        (0, 7020.0, 4.0),
        (0, 9020.0, 0.0),
        (1, 1010.0, 4.0),
        (1, 2010.0, 8.0),
        (1, 5010.0, 4.0),
        (1, 7010.0, 0.0),
    ]


def test_times_are_kept_to_the_nanosecond_and_boxes_still_meet():
    schedule, costs = get_schedule("gpipe", 1, 2), uniform_costs(1, 1 / 3, 1 / 3)
    events = json.loads(chrome_trace_json(simulate(schedule, costs)))["traceEvents"]
    assert [(e["ts"], e["dur"]) for e in events if e["ph"] == "X"] == [
        (0.0, 333.333),
        (333.333, 333.334),  # ends at 666.667, where the next one starts
        (666.667, 333.333),
        (1000.0, 333.333),
    ]


def test_gzipped_is_the_same_text_and_the_same_bytes_each_time():
    trace, memory = gpipe_with_latency()
    text = chrome_trace_json(trace, memory=memory)
    packed = gzipped(text)
    assert gzip.decompress(packed).decode() == text and gzipped(text) == packed


@pytest.mark.parametrize("names", [None, ["r"] * 12])
def test_names_replace_the_rows_names(names):
    trace, _ = gpipe_with_latency()
    complete = [e for e in to_chrome_trace(trace, names=names)["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in complete] == (names or trace.names())
    assert trace.names() == [trace.name(r) for r in range(len(trace.start))]
