"""DualPipe, DualPipeV and Chimera against their sources.

DualPipe: DeepSeek-V3 technical report (arXiv 2412.19437), table 2, and the reference
implementation in deepseek-ai/DualPipe (``DualPipe.step`` and ``DualPipeV.step``).
Chimera: Li & Hoefler, SC'21 (arXiv 2107.06925), and its timetable in
Shigangli/Chimera (``chimera_pipeline_rank.py``).
"""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import ConstraintError, get_schedule
from pipesim.schedules.ir import OVERLAP_F_B, B, Chain, F, I, W, from_csv, to_csv
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.metrics import build_report
from tests.helpers import assert_matches_oracle_and_round_trips, policy_runs

GOLDEN = Path(__file__).parent.parent / "golden"


def report_for(schedule, costs):
    return build_report(simulate(schedule, costs), schedule, costs)


def dualpipe_costs(stages, unit=1.0, weight=1.0):
    """Per chunk F = I = ``unit``, W = ``weight``, B = I + W, an overlapped pair F + B."""
    return uniform_costs(
        stages,
        unit,
        backward_input_ms=unit,
        backward_weight_ms=weight,
        overlapped_fb_ms=2 * unit + weight,
    )


# ---------------------------------------------------------------------------
# DualPipe


def test_dualpipe_8_devices_20_microbatches():
    """The README's example: PP = 8, 20 microbatches; F = 1, B = 2 (I = W = 1), F&B = 3.

    Bubble per device (PP/2 - 1)(F&B + B - 3W) = 3 (3 + 2 - 3) = 6 (report table 2), on
    60 units of work: makespan 66. 1F1B on the same work: (m + D - 1)(F + B) = 27 * 3.
    """
    schedule = get_schedule("dualpipe", 8, 20)
    report = report_for(schedule, dualpipe_costs(8))
    assert report.makespan_ms == 66
    assert [d.busy_ms for d in report.per_device] == [60] * 8
    assert [d.idle_ms for d in report.per_device] == [6] * 8

    baseline = get_schedule("1f1b", 8, 20)
    assert report_for(baseline, uniform_costs(8, 1, 2)).makespan_ms == 81


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([2, 4, 6, 8]),
    st.integers(0, 5),
    st.sampled_from([0.5, 1.0, 1.5]),
    st.sampled_from([0.25, 0.5, 1.0]),
)
def test_dualpipe_bubble_formula(devices, extra, unit, weight_share):
    """Every device idles (PP/2 - 1)(F&B + B - 3W) with F = I, W <= I, F&B = F + B."""
    microbatches = 2 * devices + 2 * extra
    weight = unit * weight_share
    schedule = get_schedule("dualpipe", devices, microbatches)
    report = report_for(schedule, dualpipe_costs(devices, unit, weight))
    pair, backward = 2 * unit + weight, unit + weight
    bubble = (devices // 2 - 1) * (pair + backward - 3 * weight)
    assert [d.idle_ms for d in report.per_device] == [bubble] * devices
    assert report.makespan_ms == microbatches * (unit + backward) + bubble


def test_dualpipe_two_devices_by_hand():
    """D = 2, m = 4, read off DualPipe.step(): device 0 holds stage 0 (forward copy,
    microbatches 0-1) and stage 3 (reverse copy, microbatches 2-3); h = 0 is a middle
    device, so its first main-step round is not overlapped; the backward split starts
    at the near copy's last backward (step 6), whose W closes the step (step 8)."""
    schedule = get_schedule("dualpipe", 2, 4)
    text = [" ".join(str(a) for a in actions) for actions in schedule.device_actions]
    assert text == [
        "0F0 3F2 0F1 3B2 (3F3;0B0)OVERLAP_F_B 3B3 0I1 0W1",
        "2F2 1F0 2F3 1B0 (1F1;2B2)OVERLAP_F_B 1B1 2I3 2W3",
    ]
    assert schedule.chains == (Chain(0, 1, range(2)), Chain(2, 3, range(2, 4)))
    assert schedule.placement == (0, 1, 1, 0)


def test_dualpipe_phase_counts():
    """Per device (h = distance from its end, P = D/2, n = m/2): 2n forwards, of which
    the main step overlaps 2(n - D + h + 1) - [middle device] and step 5 P - h - 1;
    the W count equals the split backwards, (P - h - 1) in step 3, h + 1 in step 6 and
    P - h - 1 in step 7."""
    d, m = 8, 20
    schedule = get_schedule("dualpipe", d, m)
    for rank, actions in enumerate(schedule.device_actions):
        h, p, n = min(rank, d - 1 - rank), d // 2, m // 2
        pairs = [a for a in actions if a.kind == OVERLAP_F_B]
        middle = 1 if h == p - 1 else 0
        assert len(pairs) == 2 * (n - d + h + 1) - middle + (p - h - 1)
        atoms = [atom for a in actions for atom in a.atoms]
        assert sum(a.kind == F for a in atoms) == 2 * n
        assert sum(a.kind == W for a in atoms) == sum(a.kind == I for a in atoms)
        assert sum(a.kind == W for a in atoms) == 2 * (p - h - 1) + h + 1
        assert sum(a.kind in (B, I) for a in atoms) == 2 * n


@pytest.mark.parametrize(
    ("devices", "microbatches", "message"),
    [
        (3, 12, "dualpipe needs an even number of devices, got devices=3"),
        (4, 7, "microbatches even and >= 2 \\* devices, got microbatches=7, devices=4"),
        (4, 6, "microbatches even and >= 2 \\* devices, got microbatches=6, devices=4"),
    ],
)
def test_dualpipe_constraints(devices, microbatches, message):
    with pytest.raises(ConstraintError, match=message):
        get_schedule("dualpipe", devices, microbatches)
    with pytest.raises(ConstraintError, match="virtual_stages = 1"):
        get_schedule("dualpipe", 4, 8, 2)


# ---------------------------------------------------------------------------
# DualPipeV


def test_dualpipev_readme_example():
    """4 devices (PP = 8 stages), 10 microbatches: (8/2 - 1)(3 + 2 - 3) = 6 idle per device
    on 10 * 2 * 3 = 60 units of work: the same bubble as DualPipe on 8 devices."""
    schedule = get_schedule("dualpipev", 4, 10, 2)
    report = report_for(schedule, dualpipe_costs(8))
    assert report.makespan_ms == 66
    assert [d.idle_ms for d in report.per_device] == [6] * 4


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(0, 6),
    st.sampled_from([0.5, 1.0, 1.5]),
    st.sampled_from([0.25, 0.5, 1.0]),
)
def test_dualpipev_bubble_formula(devices, extra, unit, weight_share):
    weight = unit * weight_share
    microbatches = 2 * devices + extra
    schedule = get_schedule("dualpipev", devices, microbatches, 2)
    report = report_for(schedule, dualpipe_costs(2 * devices, unit, weight))
    bubble = (devices - 1) * (2 * unit + weight + unit + weight - 3 * weight)
    assert [d.idle_ms for d in report.per_device] == [bubble] * devices


def test_dualpipev_constraints():
    with pytest.raises(ConstraintError, match="microbatches=7, devices=4"):
        get_schedule("dualpipev", 4, 7, 2)
    with pytest.raises(ConstraintError, match="virtual_stages = 2"):
        get_schedule("dualpipev", 4, 8, 1)


# ---------------------------------------------------------------------------
# Chimera


def test_chimera_4_devices_4_microbatches():
    """D = 4, N = 4, F = B = 1: 8 units of work and D - 2 = 2 idle per device, makespan 10.

    Device 0 holds down stage 0 and up stage 3 (the up pipeline's last): forwards of
    microbatches 0 and 1 at steps 0 and 2, the up pipeline's F and B of microbatch 2 at
    steps 3 and 4 and of microbatch 3 at 5 and 6, then the down backwards at 7 and 9.
    """
    schedule = get_schedule("chimera", 4, 4)
    report = report_for(schedule, uniform_costs(4, 1, 1))
    assert report.makespan_ms == 10
    assert [d.idle_ms for d in report.per_device] == [2] * 4
    assert [str(a) for a in schedule.device_actions[0]] == [
        "0F0",
        "0F1",
        "7F2",
        "7B2",
        "7F3",
        "7B3",
        "0B0",
        "0B1",
    ]
    assert schedule.placement == (0, 1, 2, 3, 3, 2, 1, 0)
    assert schedule.chains == (Chain(0, 3, range(2)), Chain(4, 7, range(2, 4)))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([2, 4, 6, 8]), st.integers(1, 3))
def test_chimera_bubble_is_d_minus_2(devices, units):
    """F = B: each device idles D - 2 units, (D-2)/(2N+D-2) of the step (the paper's
    bubble ratio), against 1F1B's 2(D-1)."""
    microbatches = devices * units
    schedule = get_schedule("chimera", devices, microbatches)
    report = report_for(schedule, uniform_costs(devices, 1, 1))
    assert report.makespan_ms == 2 * microbatches + devices - 2
    assert [d.idle_ms for d in report.per_device] == [devices - 2] * devices
    assert report.bubble_fraction == pytest.approx((devices - 2) / (2 * microbatches + devices - 2))


def test_chimera_constraints():
    with pytest.raises(ConstraintError, match="even number of devices, got devices=3"):
        get_schedule("chimera", 3, 6)
    with pytest.raises(ConstraintError, match="microbatches=6 is not a multiple"):
        get_schedule("chimera", 4, 6)


# ---------------------------------------------------------------------------
# Golden schedules (torch's CSV): one row per rank


@pytest.mark.parametrize(
    ("name", "devices", "microbatches", "virtual_stages"),
    [("dualpipe", 4, 8, 1), ("dualpipev", 4, 10, 2), ("chimera", 4, 8, 1)],
)
def test_golden_csv(name, devices, microbatches, virtual_stages):
    golden = (GOLDEN / f"{name}_p{devices}_m{microbatches}_v{virtual_stages}.csv").read_text()
    schedule = get_schedule(name, devices, microbatches, virtual_stages)
    assert to_csv(schedule) == golden
    assert from_csv(golden, name) == schedule


# ---------------------------------------------------------------------------
# Properties: valid, the engine agrees with the independent oracle, CSV round trip

VIRTUAL_STAGES = {"dualpipe": 1, "dualpipev": 2, "chimera": 1}
SIZES = st.one_of(
    st.tuples(st.just("dualpipe"), st.sampled_from([2, 4, 6]), st.integers(0, 4)).map(
        lambda t: (t[0], t[1], 2 * t[1] + 2 * t[2])
    ),
    st.tuples(st.just("dualpipev"), st.integers(1, 5), st.integers(0, 5)).map(
        lambda t: (t[0], t[1], 2 * t[1] + t[2])
    ),
    st.tuples(st.just("chimera"), st.sampled_from([2, 4, 6]), st.integers(1, 3)).map(
        lambda t: (t[0], t[1], t[1] * t[2])
    ),
)


@settings(max_examples=40, deadline=None)
@given(policy_runs(SIZES, VIRTUAL_STAGES))
def test_engine_matches_oracle_and_csv_round_trips(run):
    assert_matches_oracle_and_round_trips(*run)
