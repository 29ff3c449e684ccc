"""The engine against hand-derived timelines and closed forms."""

from fractions import Fraction

import pytest

from pipesim.schedules.ir import Action, B, F, schedule_from_lists
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import build_report
from tests.helpers import compute_rows, latency_topology, run_policy


def test_seed_whole_batch_takes_16_slots_and_pipelined_7():
    # 8 layers on 4 GPUs, a batch of 4: as one group each GPU needs 4 slots in turn.
    _, _, whole = run_policy("gpipe", 4, 1, forward=True, forward_ms=4)
    _, _, piped = run_policy("gpipe", 4, 4, forward=True, forward_ms=1)
    assert whole.makespan_ms == 16
    assert piped.makespan_ms == 7
    assert Fraction(whole.bubble_fraction).limit_denominator(100) == Fraction(3, 4)
    assert Fraction(piped.bubble_fraction).limit_denominator(100) == Fraction(3, 7)


def test_seed_pipelined_timeline_is_the_staircase():
    _, trace, _ = run_policy("gpipe", 4, 4, forward=True, forward_ms=1)
    expected = sorted(
        (d, f"{d}F{i}", float(d + i), float(d + i + 1)) for d in range(4) for i in range(4)
    )
    assert compute_rows(trace) == expected


@pytest.mark.parametrize("policy, peaks", [("gpipe", [8, 8, 8, 8]), ("1f1b", [4, 3, 2, 1])])
def test_gpipe_and_1f1b_p4_m8(policy, peaks):
    _, _, report = run_policy(policy, 4, 8, forward_ms=1, backward_ms=2)
    assert report.makespan_ms == 33
    assert report.bubble_fraction == pytest.approx(3 / 11, abs=1e-12)
    assert report.bubble_overhead == pytest.approx(3 / 8, abs=1e-12)
    assert [d.peak_inflight for d in report.per_device] == peaks
    assert report.analytic["makespan_ms"] == 33


def test_1f1b_small_timeline_exact():
    # p=2, m=2, F=1, B=2: rank 1 has no warm-up; rank 0 warms up with one forward.
    _, trace, _ = run_policy("1f1b", 2, 2, forward_ms=1, backward_ms=2)
    assert compute_rows(trace) == sorted(
        [
            (0, "0F0", 0.0, 1.0),
            (0, "0F1", 1.0, 2.0),
            (0, "0B0", 4.0, 6.0),
            (0, "0B1", 7.0, 9.0),
            (1, "1B0", 2.0, 4.0),
            (1, "1B1", 5.0, 7.0),
            (1, "1F0", 1.0, 2.0),
            (1, "1F1", 4.0, 5.0),
        ]
    )


def test_interleaved_p4_v2_m8_beats_1f1b_on_the_same_work():
    _, _, interleaved = run_policy("interleaved-1f1b", 4, 8, 2, forward_ms=1, backward_ms=2)
    _, _, plain = run_policy("1f1b", 4, 8, forward_ms=2, backward_ms=4)
    assert interleaved.makespan_ms == 57
    assert plain.makespan_ms == 66
    assert interleaved.analytic["makespan_ms"] == 57


@pytest.mark.parametrize("p, m, c", [(4, 8, 0.5), (2, 3, 0.25), (8, 16, 1.0), (3, 1, 2.0)])
def test_gpipe_with_pure_latency(p, m, c):
    _, _, report = run_policy(
        "gpipe", p, m, topology=latency_topology(p, c), forward_ms=1, backward_ms=2
    )
    assert report.makespan_ms == pytest.approx((m + p - 1) * 3 + 2 * (p - 1) * c, abs=1e-9)
    assert report.analytic["makespan_ms"] == pytest.approx(report.makespan_ms, abs=1e-9)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    # 2 stages, 1 microbatch, 1e6 bytes over 10 us + 2 GB/s = 0.01 + 0.5 ms each way.
    topology = Topology(2, default=Link(latency_us=10, bandwidth_gbps=2))
    _, trace, report = run_policy(
        "gpipe", 2, 1, topology=topology, forward_ms=1, backward_ms=1, activation_bytes=1e6
    )
    hop = 0.01 + 0.5
    assert report.makespan_ms == pytest.approx(4 + 2 * hop)
    comm = trace.frame[trace.frame.lane == "comm"]
    assert list(comm.name) == ["0F0->1", "1B0->0"]
    assert list(comm.end - comm.start) == pytest.approx([hop, hop])


def test_transfers_on_one_link_queue_and_on_different_links_overlap():
    # Device 0 sends two activations back to back: F takes 0 ms, each transfer 1 ms, so the
    # second waits for the first on link 0->1.
    topology = Topology(2, default=Link(latency_us=1000))
    _, trace, _ = run_policy("gpipe", 2, 2, topology=topology, forward=True, forward_ms=0)
    comm = trace.frame[trace.frame.lane == "comm"]
    assert list(zip(comm.start, comm.end, strict=True)) == [(0.0, 1.0), (1.0, 2.0)]
    # Stage 0 -> 1 and stage 1 -> 2 use different links: both busy during [1, 2).
    _, trace3, _ = run_policy(
        "gpipe",
        3,
        2,
        topology=Topology(3, default=Link(latency_us=1000)),
        forward=True,
        forward_ms=0,
    )
    comm3 = trace3.frame[trace3.frame.lane == "comm"].sort_values("start")
    spans = {(r.device, r.microbatch): (r.start, r.end) for r in comm3.itertuples()}
    assert spans[(0, 1)] == (1.0, 2.0) and spans[(1, 0)] == (1.0, 2.0)


def test_shared_channel_serialises_two_links():
    # Two devices each send to a third over links that share one channel.
    schedule = schedule_from_lists([[Action(0, F, 0)], [Action(1, F, 0)]])
    costs = uniform_costs(2, forward_ms=1, activation_bytes=1e6)
    link = Link(bandwidth_gbps=1)
    shared = Topology(2, default=link, channels={(0, 1): "switch"})
    assert simulate(schedule, costs, shared).makespan_ms == pytest.approx(3.0)


def test_comm_overlap_false_blocks_the_sender():
    overlap = latency_topology(2, 0.5)
    blocking = Topology(2, default=overlap.default, comm_overlap=False)
    _, t1, _ = run_policy("gpipe", 2, 2, topology=overlap, forward=True, forward_ms=1)
    _, t2, _ = run_policy("gpipe", 2, 2, topology=blocking, forward=True, forward_ms=1)
    f1 = t1.frame[(t1.frame.name == "0F1")].iloc[0]
    f2 = t2.frame[(t2.frame.name == "0F1")].iloc[0]
    assert (f1.start, f2.start) == (1.0, 1.5)
    assert t2.makespan_ms == 4.0


def test_cycle_of_waits_deadlock_names_both_devices():
    lists = [
        [Action(0, B, 0), Action(0, F, 0), Action(0, F, 1), Action(0, B, 1)],
        [Action(1, F, 1), Action(1, F, 0), Action(1, B, 0), Action(1, B, 1)],
    ]
    with pytest.raises(DeadlockError) as info:
        simulate(schedule_from_lists(lists), uniform_costs(2))
    text = str(info.value)
    assert text.startswith("deadlock: no device can make progress")
    assert "rank 1 step 0: 1F1 waits for the activation of 0F1 (device 0)" in text
    assert "rank 0 step 0: 0B0 waits for the gradient of 1B0 (device 1)" in text
    assert ">>1F1<<" in text and "ERROR HERE" in text


def test_deterministic():
    a = run_policy(
        "interleaved-1f1b", 4, 8, 2, topology=latency_topology(4, 0.1), forward_ms=1, backward_ms=2
    )[1]
    b = run_policy(
        "interleaved-1f1b", 4, 8, 2, topology=latency_topology(4, 0.1), forward_ms=1, backward_ms=2
    )[1]
    assert a.frame.equals(b.frame)


def test_forward_mode_releases_activations_after_each_forward():
    _, _, report = run_policy("gpipe", 4, 4, forward=True, forward_ms=1, activation_memory_bytes=10)
    assert [d.peak_activation_bytes for d in report.per_device] == [10] * 4


def test_report_memory_and_busy_sum():
    schedule, trace, report = run_policy(
        "1f1b", 4, 8, forward_ms=1, backward_ms=2, activation_memory_bytes=100
    )
    assert [d.peak_activation_bytes for d in report.per_device] == [400, 300, 200, 100]
    for d in report.per_device:
        assert d.busy_ms + d.idle_ms == pytest.approx(report.makespan_ms)
        assert d.busy_ms == 24
    assert report.samples_per_second == pytest.approx(8 / 0.033)
    assert build_report(trace, schedule, microbatch_size=4).samples_per_second == pytest.approx(
        32 / 0.033
    )
