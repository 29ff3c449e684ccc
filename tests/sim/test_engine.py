"""The engine against hand-derived timelines and closed forms."""

from fractions import Fraction

import pytest

import pipesim
from pipesim.cluster.hardware import build_topology
from pipesim.scenario.build import build_scenario, parse_spec
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Action, B, Chain, F, I, Schedule, W, schedule_from_lists
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import build_report
from pipesim.sim.trace import Cause
from tests.helpers import (
    assert_matches_oracle_and_round_trips,
    compute_rows,
    latency_topology,
    run_policy,
)


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
    assert report.analytic.makespan_ms == 33


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
    assert interleaved.analytic.makespan_ms == 57


@pytest.mark.parametrize("p, m, c", [(4, 8, 0.5), (2, 3, 0.25), (8, 16, 1.0), (3, 1, 2.0)])
def test_gpipe_with_pure_latency(p, m, c):
    _, _, report = run_policy(
        "gpipe", p, m, topology=latency_topology(p, c), forward_ms=1, backward_ms=2
    )
    assert report.makespan_ms == pytest.approx((m + p - 1) * 3 + 2 * (p - 1) * c, abs=1e-9)
    assert report.analytic.makespan_ms == pytest.approx(report.makespan_ms, abs=1e-9)


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


def test_latency_is_a_delay_and_bandwidth_is_the_queue():
    # Device 0 sends two activations back to back (F takes 0 ms). Pure latency (1 ms):
    # both messages are in flight on link 0->1 at once (LogGP), where the link model
    # before it made the second wait 1 ms for the first one's latency.
    _, trace, _ = run_policy(
        "gpipe", 2, 2, topology=latency_topology(2, 1.0), forward=True, forward_ms=0
    )
    comm = trace.frame[trace.frame.lane == "comm"]
    assert list(zip(comm.start, comm.end, strict=True)) == [(0.0, 1.0), (0.0, 1.0)]
    # 1 MB at 1 GB/s holds the channel 1 ms: the second message queues behind the first;
    # with 1 ms of latency on top each arrives 1 ms after leaving the channel.
    for latency_us, spans in ((0, [(0.0, 1.0), (1.0, 2.0)]), (1000, [(0.0, 2.0), (1.0, 3.0)])):
        topology = Topology(2, default=Link(latency_us=latency_us, bandwidth_gbps=1))
        _, trace, _ = run_policy(
            "gpipe", 2, 2, topology=topology, forward=True, forward_ms=0, activation_bytes=1e6
        )
        comm = trace.frame[trace.frame.lane == "comm"]
        assert list(zip(comm.start, comm.end, strict=True)) == spans


def test_transfers_on_different_links_overlap():
    # Stage 0 -> 1 and stage 1 -> 2 use different links: both busy during [1, 2).
    topology = Topology(3, default=Link(bandwidth_gbps=1))
    _, trace, _ = run_policy(
        "gpipe", 3, 2, topology=topology, forward=True, forward_ms=0, activation_bytes=1e6
    )
    comm = trace.frame[trace.frame.lane == "comm"]
    spans = {(r.device, r.microbatch): (r.start, r.end) for r in comm.itertuples()}
    assert spans == {(0, 0): (0.0, 1.0), (0, 1): (1.0, 2.0), (1, 0): (1.0, 2.0), (1, 1): (2.0, 3.0)}


def test_gap_us_adds_channel_time_per_message():
    # LogGP's g: 0.5 ms of channel time per message on top of 1 ms for the bytes.
    link = Link(latency_us=250, bandwidth_gbps=1, gap_us=500)
    _, trace, _ = run_policy(
        "gpipe",
        2,
        2,
        topology=Topology(2, default=link),
        forward=True,
        forward_ms=0,
        activation_bytes=1e6,
    )
    comm = trace.frame[trace.frame.lane == "comm"]
    assert list(zip(comm.start, comm.end, strict=True)) == [(0.0, 1.75), (1.5, 3.25)]
    assert link.transfer_ms(1e6) == 1.75


def test_a_scenario_link_carries_its_gap_to_the_engine():
    spec = {
        "schema_version": 1,
        "name": "gap",
        "pipeline": {"schedule": "gpipe", "devices": 2, "microbatches": 2},
        "costs": {"forward_ms": 0, "backward_ms": 0, "activation_bytes": 1e6},
        "hardware": {"link": {"latency_us": 250, "bandwidth_gbps": 1, "gap_us": 500}},
    }
    scenario = build_scenario(parse_spec(spec, "gap.yaml"), "gap.yaml")
    assert scenario.topology.default.gap_us == 500
    # Each message holds the channel 1.5 ms; the two gradients leave at 3.25 and 4.75.
    assert pipesim.run_scenario(scenario).report.makespan_ms == 6.5


def two_senders_into_one_device():
    """Devices 0 and 1 each run one forward (1 ms) and send its activation to device 2,
    which runs stage 3 of the second chain first, then stage 1 of the first."""
    chains = (Chain(0, 1, range(0, 1)), Chain(2, 3, range(1, 2)))
    lists = ((Action(0, F, 0),), (Action(2, F, 1),), (Action(3, F, 1), Action(1, F, 0)))
    return Schedule(lists, (0, 2, 1, 2), chains), uniform_costs(2, 1.0, activation_bytes=1e6)


def test_two_senders_contend_for_one_shared_channel():
    # 1 MB at 1 GB/s holds the channel 1 ms, then 0.5 ms latency. Both senders offer
    # their message at 1.0; the shared channel takes device 0's first (same instant: lower
    # device first), device 1's leaves the queue at 2.0 and arrives at 3.5.
    schedule, costs = two_senders_into_one_device()
    link = Link(latency_us=500, bandwidth_gbps=1)
    shared = Topology(3, default=link, channels={(0, 2): "switch/up", (1, 2): "switch/up"})
    trace = simulate(schedule, costs, shared)
    frame = trace.frame
    rows = list(zip(frame.name, frame.device, frame.start, frame.end, strict=True))
    assert sorted(rows, key=lambda r: (r[2], r[1])) == [
        ("0F0", 0, 0.0, 1.0),
        ("2F1", 1, 0.0, 1.0),
        ("0F0->2", 0, 1.0, 2.5),
        ("2F1->2", 1, 2.0, 3.5),
        ("3F1", 2, 3.5, 4.5),
        ("1F0", 2, 4.5, 5.5),
    ]
    queued = rows.index(("2F1->2", 1, 2.0, 3.5))
    assert trace.cause[queued] == Cause.CHANNEL
    assert trace.frame.name[trace.cause_row[queued]] == "0F0->2"
    # The trace CSV spells every cause out: what released each row, and which row.
    released = {
        n: (c, frame.name[r] if r >= 0 else None)
        for n, c, r in zip(frame.name, frame.cause, frame.cause_row, strict=True)
    }
    assert released == {
        "0F0": ("start", None),
        "2F1": ("start", None),
        "0F0->2": ("producer", "0F0"),
        "2F1->2": ("channel", "0F0->2"),
        "3F1": ("input", "2F1->2"),
        "1F0": ("device", "3F1"),
    }
    # Without the shared channel device 1's message does not wait: the step is 1 ms shorter.
    assert simulate(schedule, costs, Topology(3, default=link)).makespan_ms == 4.5
    # The same contention where devices 0 and 1 share a PCIe switch and device 2 hangs off
    # another: both reach device 2 through their switch's one upstream link.
    switch = build_topology(3, 4, link, link, pcie_switch_share=2)
    assert switch.channel(0, 2) == switch.channel(1, 2)
    assert simulate(schedule, costs, switch).makespan_ms == 5.5


def test_gpipe_with_latency_longer_than_a_forward_keeps_messages_in_flight():
    # GPipe, D=4, m=8, F=1, B=2, 1.5 ms latency on every hop (DESIGN.md, links are LogGP).
    # Forwards: device 0 runs 0F0..0F7 back to back from 0; device d receives microbatch i
    # 1.5 ms after device d-1 ends it, so dF_i starts at 2.5 d + i. Device 3 ends its last
    # forward at 7.5 + 8 = 15.5 and runs its backwards back to back in reverse order
    # (B7 first). Device d receives each gradient 1.5 ms after device d+1 ends it, and the
    # gradients come every 2 ms, so the k-th backward of device d starts at
    # 15.5 + 3.5 (3 - d) + 2 k. Device 0 ends at 15.5 + 10.5 + 14 + 2 = 42
    # = (m + D - 1)(F + B) + 2 (D - 1) latency.
    _, trace, report = run_policy(
        "gpipe", 4, 8, topology=latency_topology(4, 1.5), forward_ms=1, backward_ms=2
    )
    # Start times by hand: per device, forwards of microbatches 0..7 (1 ms each), then
    # backwards of microbatches 7..0 (2 ms each).
    hand = {
        0: ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [26, 28, 30, 32, 34, 36, 38, 40]),
        1: (
            [2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5],
            [22.5, 24.5, 26.5, 28.5, 30.5, 32.5, 34.5, 36.5],
        ),
        2: ([5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0], [19, 21, 23, 25, 27, 29, 31, 33]),
        3: (
            [7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5],
            [15.5, 17.5, 19.5, 21.5, 23.5, 25.5, 27.5, 29.5],
        ),
    }
    forwards = [(d, f"{d}F{i}", t, t + 1) for d, (f, _) in hand.items() for i, t in enumerate(f)]
    backwards = [
        (d, f"{d}B{7 - k}", t, t + 2) for d, (_, b) in hand.items() for k, t in enumerate(b)
    ]
    assert compute_rows(trace) == sorted(forwards + backwards)
    assert report.makespan_ms == 42
    assert report.analytic.makespan_ms == 42
    # Two messages on link 0->1 at once: 0F1->1 leaves while 0F0->1 is still on its way.
    comm = trace.frame[trace.frame.lane == "comm"].set_index("name")
    assert (comm.start["0F0->1"], comm.end["0F0->1"]) == (1.0, 2.5)
    assert (comm.start["0F1->1"], comm.end["0F1->1"]) == (2.0, 3.5)


@pytest.mark.parametrize(
    "name, devices, microbatches, v", [("dualpipe", 4, 10, 1), ("dualpipev", 4, 10, 2)]
)
def test_dualpipe_and_dualpipev_with_latency_agree_with_the_oracle(name, devices, microbatches, v):
    # Latency (1.5 ms) longer than a forward, and 1 MB at 2 GB/s: an overlapped F&B pair
    # sends both outputs to the same neighbour, and they are in flight together.
    topology = Topology(devices, default=Link(latency_us=1500, bandwidth_gbps=2))
    schedule = get_schedule(name, devices, microbatches, v)
    costs = uniform_costs(
        schedule.model_stages,
        1.0,
        backward_input_ms=1.0,
        backward_weight_ms=0.5,
        overlapped_fb_ms=1.75,
        activation_bytes=1e6,
    )
    assert_matches_oracle_and_round_trips(schedule, costs, topology)


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
    # Each device's own order is valid; together they wait for each other: device 0's
    # first backward needs 1B0, which device 1 runs only after 1F1, which needs 0F1.
    lists = [
        [Action(0, F, 0), Action(0, B, 0), Action(0, F, 1), Action(0, B, 1)],
        [Action(1, F, 1), Action(1, F, 0), Action(1, B, 0), Action(1, B, 1)],
    ]
    with pytest.raises(DeadlockError) as info:
        simulate(schedule_from_lists(lists), uniform_costs(2))
    text = str(info.value)
    assert text.startswith("deadlock: no device can make progress")
    assert "rank 1 step 0: 1F1 waits for the activation of 0F1 (device 0)" in text
    assert "rank 0 step 1: 0B0 waits for the gradient of 1B0 (device 1)" in text
    assert ">>1F1<<" in text and "ERROR HERE" in text


def test_simulate_never_runs_an_invalid_schedule():
    # Through the public API: a backward before its forward on one device, a W before
    # its I, a stage before the stage that feeds it on the same device, a missing action.
    costs = uniform_costs(2)
    bad = {
        "1B0 comes before 1F0": [
            [Action(0, F, 0), Action(0, B, 0)],
            [Action(1, B, 0), Action(1, F, 0)],
        ],
        "1W0 comes before 1I0": [
            [Action(0, F, 0), Action(0, I, 0), Action(0, W, 0)],
            [Action(1, F, 0), Action(1, W, 0), Action(1, I, 0)],
        ],
        "missing actions: 0B0": [[Action(0, F, 0)], [Action(1, F, 0), Action(1, B, 0)]],
    }
    for message, lists in bad.items():
        with pytest.raises(pipesim.ScheduleError, match=message) as info:
            pipesim.simulate(schedule_from_lists(lists), costs)
        assert "Rank 0 Rank 1" in str(info.value)  # the grid picture
    # Both stages on device 0, stage 1 first: it waits for its own device's later action.
    lists = [[Action(1, F, 0), Action(0, F, 0)], []]
    schedule = Schedule(tuple(map(tuple, lists)), (0, 0), (Chain(0, 1, range(1)),))
    with pytest.raises(pipesim.ScheduleError, match="1F0 needs 0F0, which runs later on rank 0"):
        pipesim.simulate(schedule, costs)


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


def test_a_step_shorter_than_a_float_can_divide_has_no_throughput():
    # 5e-324 ms is above zero, but its thousandth in seconds is 0.0 (found by hypothesis)
    costs = uniform_costs(1, 0.0, backward_input_ms=0.0, backward_weight_ms=5e-324)
    trace = simulate(get_schedule("1f1b", 1, 1, 1), costs)
    report = build_report(trace, get_schedule("1f1b", 1, 1, 1), costs)
    assert report.makespan_ms == 5e-324
    assert report.samples_per_second == 0.0
