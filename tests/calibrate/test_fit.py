"""Host-overhead fit and cross-check figures on runs built from a known timeline (no torch).

A run is synthesised from the engine's own timeline with a known overhead and hop: each
compute span is ``[start, start + duration]``, the overhead follows it, and the time a rank
then sits before its next start becomes a receive-wait span. The fit must recover the
overhead and hop exactly, and a cross-check of such a run must report zero error.
"""

import pytest

from pipesim.calibrate.crosscheck import cross_check, host_topology, rankings_agree, with_overhead
from pipesim.calibrate.fit import STALLED_POST_MS, fit_host, post_stalls_ms, timeline
from pipesim.calibrate.realrun import ACTION, COMPUTE, WAIT, MeasuredRun, Span
from pipesim.scenario.profile import HostOverhead
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import to_csv
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate

OVERHEAD, HOP = 0.25, 0.5


def synthetic_run(
    name="1f1b", devices=2, microbatches=4, offset=1000.0, stretch=1.0
) -> MeasuredRun:
    schedule = get_schedule(name, devices, microbatches)
    costs = uniform_costs(devices, 1.0 * stretch, 2.0 * stretch, overhead_ms=OVERHEAD)
    trace = simulate(schedule, costs, host_topology(devices, HostOverhead(OVERHEAD, HOP)))
    frame = trace.frame[trace.frame["lane"] == "compute"].sort_values(["device", "start"])
    ranks = []
    for device in range(devices):
        spans, free = [], None
        for row in frame[frame["device"] == device].itertuples():
            start, end = row.start + offset, row.end + offset
            if free is not None and start > free:
                spans.append(Span(WAIT, "", free, start))
            spans.append(Span(COMPUTE, row.name, start, end - OVERHEAD))
            free = end
        ranks.append(tuple(spans))
    return MeasuredRun(name, devices, tuple(ranks), {"csv": to_csv(schedule)})


def test_fit_recovers_overhead_and_hop():
    host = fit_host([synthetic_run()])
    assert host.overhead_ms == pytest.approx(OVERHEAD)
    assert host.hop_ms == pytest.approx(HOP)


def test_timeline_starts_at_the_first_compute():
    line = timeline(synthetic_run())
    assert min(line.start.values()) == 0.0
    # 1F1B, D=2, m=4, F=1, B=2, overhead 0.25, hop 0.5: the last backward (0B3) on device 0
    # ends at the makespan; engine makespan minus the trailing overhead.
    schedule = get_schedule("1f1b", 2, 4)
    costs = uniform_costs(2, 1.0, 2.0, overhead_ms=OVERHEAD)
    trace = simulate(schedule, costs, host_topology(2, HostOverhead(OVERHEAD, HOP)))
    assert line.makespan_ms == pytest.approx(trace.makespan_ms - OVERHEAD)


def test_cross_check_of_an_exact_run_reports_zero_error():
    runs = [synthetic_run(offset=o) for o in (0.0, 50.0, 400.0)]
    costs = uniform_costs(2, 1.0, 2.0)
    result, _ = cross_check(runs, costs, calibration=[synthetic_run()])
    assert result.host.overhead_ms == pytest.approx(OVERHEAD)
    assert result.measured_spread == pytest.approx(0.0)
    assert result.prediction_error == pytest.approx(0.0, abs=1e-9)
    assert result.replay_error == pytest.approx(0.0, abs=1e-9)
    assert (result.start_error_p50_ms, result.start_error_p90_ms) == pytest.approx(
        (0.0, 0.0), abs=1e-9
    )


def test_prediction_error_is_signed_simulated_over_measured():
    slow = synthetic_run(stretch=1.2)  # the real ops ran 20% longer than the profile says
    result, _ = cross_check([slow], uniform_costs(2, 1.0, 2.0), host=HostOverhead(OVERHEAD, HOP))
    costs = with_overhead(uniform_costs(2, 1.0, 2.0), OVERHEAD)
    expected = simulate(
        get_schedule("1f1b", 2, 4), costs, host_topology(2, HostOverhead(OVERHEAD, HOP))
    )
    assert result.simulated_makespan_ms == pytest.approx(expected.makespan_ms - OVERHEAD)
    assert result.prediction_error == pytest.approx(
        result.simulated_makespan_ms / result.measured_makespan_ms - 1
    )
    assert result.prediction_error < 0
    assert result.replay_error == pytest.approx(
        0.0, abs=1e-9
    )  # replay uses the run's own durations


def test_a_calibration_run_fits_the_in_run_compute_scale():
    # The ops ran 20% longer in the real runs than in the profile, the calibration run
    # included: the fitted scale carries that into the prediction, which becomes exact.
    profiled = uniform_costs(2, 1.0, 2.0)
    host = fit_host([synthetic_run(stretch=1.2)], profiled)
    assert host.compute_scale == pytest.approx(1.2)
    assert (host.overhead_ms, host.hop_ms) == pytest.approx((OVERHEAD, HOP))
    runs = [synthetic_run(stretch=1.2, offset=o) for o in (0.0, 70.0)]
    result, _ = cross_check(runs, profiled, calibration=[synthetic_run(stretch=1.2, offset=9.0)])
    assert result.prediction_error == pytest.approx(0.0, abs=1e-9)
    assert fit_host([synthetic_run()]).compute_scale == 1.0  # no profile given: no scale


def test_profile_host_scale_stretches_the_costs():
    from pipesim.scenario.profile import Profile, Spread, StageTiming, costs_from_profile

    timing = StageTiming(0, {"F": Spread(1.0, 0.9, 1.1, 20), "B": Spread(2.0, 1.9, 2.1, 20)}, 0.0)
    plain = costs_from_profile(Profile((timing,)), 2)
    stretched = costs_from_profile(Profile((timing,), host=HostOverhead(0.1, 0.0, 5, 1.5)), 2)
    assert stretched.forward_ms == (1.5, 1.5) and stretched.backward_ms == (3.0, 3.0)
    assert stretched.overhead_ms == 0.1 and plain.forward_ms == (1.0, 1.0)


def test_rankings_agree_with_ties_inside_the_tolerance():
    a, _ = cross_check(
        [synthetic_run("gpipe")], uniform_costs(2, 1.0, 2.0), host=HostOverhead(OVERHEAD, HOP)
    )
    b, _ = cross_check(
        [synthetic_run("1f1b")], uniform_costs(2, 1.0, 2.0), host=HostOverhead(OVERHEAD, HOP)
    )
    assert rankings_agree([a, b])
    swapped = type(a)(**{**a.__dict__, "simulated_makespan_ms": b.simulated_makespan_ms + 100})
    assert rankings_agree([swapped, b]) == (a.measured_makespan_ms == b.measured_makespan_ms)


def test_post_stalls_count_only_blocked_sends_and_receives():
    run = synthetic_run()
    assert post_stalls_ms(run) == 0.0
    posts = (
        Span(ACTION, "0SEND_F0", 0.0, 0.05),  # an unhindered post: not a stall
        Span(ACTION, "1RECV_F1", 1.0, 1.0 + STALLED_POST_MS + 2.0),
        Span(ACTION, "0F1", 5.0, 9.0),  # a compute action, however long, is no post
    )
    stalled = MeasuredRun(
        run.schedule_name, run.devices, (run.ranks[0] + posts, run.ranks[1]), run.meta
    )
    assert post_stalls_ms(stalled) == pytest.approx(STALLED_POST_MS + 2.0)
    result, _ = cross_check([run, stalled, stalled], uniform_costs(2, 1.0, 2.0))
    assert result.post_stalls_ms == pytest.approx([0.0, 3.0, 3.0])
    assert result.post_stall_ms == pytest.approx(3.0)
