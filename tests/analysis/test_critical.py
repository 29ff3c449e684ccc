"""Critical path and idle-gap causes: hand-derived timelines and random schedules."""

import math

import pytest
from hypothesis import given, settings

from pipesim.analysis.critical import (
    BUSY_LINK,
    DONE,
    DOWNSTREAM,
    GATHER,
    IN_ORDER,
    SENDING,
    UPSTREAM,
    describe_gap,
    explain,
    idle_gaps,
)
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Action, Chain, F, Schedule, schedule_from_lists
from pipesim.schedules.torch_csv import read_torch_csv
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import build_report
from pipesim.sim.trace import trace_from_frame
from tests.helpers import latency_topology, run_policy
from tests.sim.test_properties import random_schedules


def path_text(path):
    return [(e["name"], e["device"], e["start_ms"], e["end_ms"]) for e in path]


def test_gpipe_with_latency_follows_the_first_microbatch_down_and_the_last_back():
    # 4 devices, 4 microbatches, F 1 ms, B 2 ms, 0.5 ms per hop: the first microbatch
    # walks down the pipeline, the last device runs its four forwards back to back, the
    # last microbatch's gradient walks back up, then device 0 runs its remaining backwards.
    topology = latency_topology(4, 0.5)
    schedule, trace, report = run_policy(
        "gpipe", 4, 4, topology=topology, forward_ms=1, backward_ms=2
    )
    path = explain(trace, schedule, topology).critical_path
    assert report.makespan_ms == 24.0
    assert path_text(path) == [
        ("0F0", 0, 0.0, 1.0),
        ("0F0->1", 0, 1.0, 1.5),
        ("1F0", 1, 1.5, 2.5),
        ("1F0->2", 1, 2.5, 3.0),
        ("2F0", 2, 3.0, 4.0),
        ("2F0->3", 2, 4.0, 4.5),
        ("3F0", 3, 4.5, 5.5),
        ("3F1", 3, 5.5, 6.5),
        ("3F2", 3, 6.5, 7.5),
        ("3F3", 3, 7.5, 8.5),
        ("3B3", 3, 8.5, 10.5),
        ("3B3->2", 3, 10.5, 11.0),
        ("2B3", 2, 11.0, 13.0),
        ("2B3->1", 2, 13.0, 13.5),
        ("1B3", 1, 13.5, 15.5),
        ("1B3->0", 1, 15.5, 16.0),
        ("0B3", 0, 16.0, 18.0),
        ("0B2", 0, 18.0, 20.0),
        ("0B1", 0, 20.0, 22.0),
        ("0B0", 0, 22.0, 24.0),
    ]


def test_gpipe_gaps_have_their_causes_in_plain_words():
    topology = latency_topology(4, 0.5)
    schedule, trace, _ = run_policy("gpipe", 4, 4, topology=topology, forward_ms=1, backward_ms=2)
    sentences = explain(trace, schedule, topology).sentences()
    assert sentences == [
        "device 0 idles 12.0 ms before 0B3: waiting for the gradient of 1B3 on device 1",
        "device 1 idles 1.5 ms before 1F0: waiting for the activation of 0F0 on device 0",
        "device 1 idles 8.0 ms before 1B3: waiting for the gradient of 2B3 on device 2",
        "device 1 idles 2.5 ms after 1B0: its work is done; the step ends at 24.0 ms",
        "device 2 idles 3.0 ms before 2F0: waiting for the activation of 1F0 on device 1",
        "device 2 idles 4.0 ms before 2B3: waiting for the gradient of 3B3 on device 3",
        "device 2 idles 5.0 ms after 2B0: its work is done; the step ends at 24.0 ms",
        "device 3 idles 4.5 ms before 3F0: waiting for the activation of 2F0 on device 2",
        "device 3 idles 7.5 ms after 3B0: its work is done; the step ends at 24.0 ms",
    ]


def test_1f1b_with_latency_holds_back_a_ready_forward():
    # The steady state of 1F1B waits for a gradient while the next forward could run: the
    # reason 1F1B with latency is slower than GPipe (DESIGN.md, engine semantics).
    topology = latency_topology(4, 0.5)
    schedule, trace, report = run_policy(
        "1f1b", 4, 4, topology=topology, forward_ms=1, backward_ms=2
    )
    explanation = explain(trace, schedule, topology)
    assert report.makespan_ms == 26.0
    assert explanation.idle_by_cause()[1] == {
        UPSTREAM: 1.5,
        IN_ORDER: 6.0,
        DOWNSTREAM: 4.0,
        DONE: 2.5,
    }
    gap = next(g for g in explanation.gaps if g.cause == IN_ORDER and g.device == 1)
    assert describe_gap(gap) == (
        "device 1 idles 6.0 ms before 1B0: in-order blocking: 1F3 was ready at 4.5 ms but runs "
        "after 1B0, which waits for the gradient of 2B0 on device 2"
    )


def test_busy_link_and_blocking_sends():
    # Two forwards on device 0 send 1 MB each over a 1 GB/s link (1 ms per transfer). The
    # second transfer waits for the first; with comm_overlap off device 0 is also held.
    schedule = schedule_from_lists(
        [[Action(0, F, 0), Action(0, F, 1)], [Action(1, F, 0), Action(1, F, 1)]]
    )
    costs = uniform_costs(2, forward_ms=0.25, activation_bytes=1_000_000)
    link = Link(latency_us=0, bandwidth_gbps=1.0)
    overlap = Topology(2, default=link)
    trace = simulate(schedule, costs, overlap)
    gaps = idle_gaps(trace, schedule, overlap)
    busy = [g for g in gaps if g.cause == BUSY_LINK]
    assert [(g.device, g.start_ms, g.end_ms, g.via, g.other) for g in busy] == [
        (1, 1.5, 2.25, "0F1->1", "0F0->1")
    ]
    path = explain(trace, schedule, overlap).critical_path
    assert [e["name"] for e in path] == ["0F0", "0F0->1", "0F1->1", "1F1"]
    held = Topology(2, default=link, comm_overlap=False)
    trace = simulate(schedule, costs, held)
    sending = [g for g in idle_gaps(trace, schedule, held) if g.cause == SENDING]
    assert [(g.device, g.start_ms, g.end_ms, g.via) for g in sending] == [
        (0, 0.25, 1.25, "0F0->1"),
        (0, 1.5, 2.5, "0F1->1"),
    ]


def check_path_and_gaps(schedule, costs, topology):
    trace = simulate(schedule, costs, topology)
    report = build_report(trace, schedule, costs, topology=topology)
    explanation = explain(trace, schedule, topology)
    path = explanation.critical_path
    # From time 0 to the makespan, each element starting exactly where the one before ends.
    assert path[0]["start_ms"] == 0.0
    assert path[-1]["end_ms"] == report.makespan_ms
    for before, after in zip(path, path[1:], strict=False):
        assert before["end_ms"] == after["start_ms"]
    # Every element is a row of the trace; a transfer that another queued behind may end
    # early, when it left its channel (LogGP: latency follows the channel time).
    rows = {
        (name, int(d), float(s)): (float(e), lane)
        for name, d, s, e, lane in zip(
            trace.frame.name,
            trace.frame.device,
            trace.frame.start,
            trace.frame.end,
            trace.frame.lane,
            strict=True,
        )
    }
    for element in path:
        end, lane = rows[(element["name"], element["device"], element["start_ms"])]
        assert element["end_ms"] == end or (lane == "comm" and element["end_ms"] < end)
    assert len({e["name"] for e in path}) == len(path)
    # The gaps of each device add up to its idle time.
    for device in report.per_device:
        total = sum(g.duration_ms for g in explanation.gaps if g.device == device.device)
        assert math.isclose(total, device.idle_ms, abs_tol=1e-6)
        assert all(g.duration_ms > 0 for g in explanation.gaps)


@settings(max_examples=50, deadline=None)
@given(random_schedules())
def test_random_schedules_have_a_gapless_critical_path(case):
    check_path_and_gaps(*case)


def test_every_policy_has_a_gapless_critical_path():
    from pipesim.schedules import POLICIES, fit_virtual_stages

    topology = latency_topology(4, 0.25)
    for name in POLICIES:
        v = fit_virtual_stages(name, 2)
        schedule, trace, _ = run_policy(
            name,
            4,
            8,
            v,
            topology=topology,
            forward_ms=1,
            backward_input_ms=1,
            backward_weight_ms=0.5,
        )
        costs = uniform_costs(
            schedule.model_stages, forward_ms=1, backward_input_ms=1, backward_weight_ms=0.5
        )
        check_path_and_gaps(schedule, costs, topology)


def test_cli_explain_and_run_critical_path(tmp_path):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from pipesim.cli import main

    scenario = str(Path(__file__).parents[2] / "scenarios" / "gpipe-vs-1f1b.yaml")
    latency = ["--set", "pipeline.microbatches=4", "--set", "hardware.link={latency_us: 500}"]
    result = CliRunner().invoke(main, ["explain", scenario, *latency])
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "pipesim explain - gpipe-vs-1f1b (gpipe): makespan 24.0 ms"
    assert "  device 0: downstream gradient 12.0" in lines
    assert (
        "  device 0 idles 12.0 ms before 0B3: waiting for the gradient of 1B3 on device 1" in lines
    )
    data = json.loads(
        CliRunner().invoke(main, ["explain", scenario, *latency, "--format", "json"]).stdout
    )
    assert data["critical_path"][-1] == {
        "name": "0B0",
        "device": 0,
        "start_ms": 22.0,
        "end_ms": 24.0,
    }
    gantt = tmp_path / "g.png"
    args = ["run", scenario, *latency, "--critical-path", "--format", "json", "--gantt", str(gantt)]
    report = json.loads(CliRunner().invoke(main, args).stdout)
    assert [e["name"] for e in report["critical_path"]][:3] == ["0F0", "0F0->1", "1F0"]
    assert report["idle_by_cause"]["3"] == {"upstream activation": 4.5, "done": 7.5}
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_shared_channel_is_the_cause_on_the_path_and_in_the_gaps():
    # Devices 0 and 1 hang off one PCIe switch and send at 1.0 to devices 3 and 2 through
    # its one uplink (1 ms each, then 0.5 ms latency); device 0 goes first (same instant:
    # lower device first). Device 1's message leaves the queue when device 0's leaves the
    # channel (2.0), not when it arrives (2.5): the path holds 0F0->3 for its channel time
    # only, and device 2's wait for 2F1 is a busy link.
    chains = (Chain(0, 1, range(0, 1)), Chain(2, 3, range(1, 2)))
    lists = ((Action(0, F, 0),), (Action(2, F, 1),), (Action(3, F, 1),), (Action(1, F, 0),))
    schedule = Schedule(lists, (0, 3, 1, 2), chains)
    costs = uniform_costs(2, 1.0, activation_bytes=1e6)
    link = Link(latency_us=500, bandwidth_gbps=1)
    topology = Topology(4, default=link, channels={(0, 3): "up", (1, 2): "up"})
    trace = simulate(schedule, costs, topology)
    explanation = explain(trace, schedule, topology)
    assert path_text(explanation.critical_path) == [
        ("0F0", 0, 0.0, 1.0),
        ("0F0->3", 0, 1.0, 2.0),
        ("2F1->2", 1, 2.0, 3.5),
        ("3F1", 2, 3.5, 4.5),
    ]
    assert explanation.sentences() == [
        "device 0 idles 3.5 ms after 0F0: its work is done; the step ends at 4.5 ms",
        "device 1 idles 3.5 ms after 2F1: its work is done; the step ends at 4.5 ms",
        "device 2 idles 3.5 ms before 3F1: waiting for 2F1 on device 1: the link was busy "
        "(2F1->2, queued behind 0F0->3)",
        "device 3 idles 2.5 ms before 1F0: waiting for the activation of 0F0 on device 0",
        "device 3 idles 1.0 ms after 1F0: its work is done; the step ends at 4.5 ms",
    ]
    check_path_and_gaps(schedule, costs, topology)


def test_a_measured_trace_without_causes_is_refused():
    schedule, trace, _ = run_policy("gpipe", 2, 2)
    bare = trace_from_frame(trace.frame, 2, trace.actions)
    with pytest.raises(ValueError, match="records no causes"):
        explain(bare, schedule)


def test_end_of_step_collective_is_on_the_path_and_in_the_gaps():
    # GPipe 2 x 2, F 1 ms, B 2 ms (makespan 9 ms), then a 1.5 ms all-reduce on each device
    # after the flush: the step ends at 10.5 ms; the path runs from device 0's last backward
    # (the flush) into an all-reduce (both end together; the later trace row is taken).
    schedule, costs = get_schedule("gpipe", 2, 2), uniform_costs(2, forward_ms=1, backward_ms=2)
    trace = simulate(schedule, costs, tail_ms=[1.5, 1.5])
    explanation = explain(trace, schedule)
    assert path_text(explanation.critical_path)[-2:] == [
        ("0B0", 0, 7.0, 9.0),
        ("gradient all-reduce", 1, 9.0, 10.5),
    ]
    device1 = [(g.start_ms, g.end_ms, g.cause) for g in explanation.gaps if g.device == 1]
    assert device1 == [(0.0, 1.0, UPSTREAM), (7.0, 9.0, DONE), (9.0, 10.5, "end-of-step work")]
    check_path_and_gaps(schedule, costs, None)


def test_a_wait_for_an_fsdp_gather_is_its_own_idle_cause():
    # One rank, two stages; stage 1's parameters take 3 ms to gather after stage 0's 1 ms,
    # so 1F0 waits from 2.0 (0F0 ends) to 4.0 (its gather ends).
    schedule = read_torch_csv("0UNSHARD,1UNSHARD,0F0,1F0,1B0,1RESHARD,0B0,0RESHARD\r\n")
    costs = uniform_costs(2, 1, 2, unshard_ms=[1, 3])
    trace = simulate(schedule, costs)
    gaps = [g for g in idle_gaps(trace, schedule) if g.before == "1F0"]
    assert [(g.start_ms, g.end_ms, g.cause) for g in gaps] == [(2.0, 4.0, GATHER)]
    assert describe_gap(gaps[0]) == (
        "device 0 idles 2.0 ms before 1F0: waiting for its parameters (1UNSHARD)"
    )
