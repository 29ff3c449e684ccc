"""ZB-H1 and ZB-H2 against the Zero Bubble paper: its figure, its tables, its formulas.

Source: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024 (OpenReview
tuzTN0eIO5; arXiv 2401.10241). The ICLR PDF is also kept by the authors in
sail-sg/zero-bubble-pipeline-parallelism at tag zero-bubble-v0.1.0 (paper.pdf).
"""

import math
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipesim.schedules import ConstraintError, get_schedule
from pipesim.schedules.ir import F, from_csv, to_csv
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.metrics import build_report
from tests.helpers import latency_topology, run_policy
from tests.sim.test_properties import QUARTERS, check_invariants

GOLDEN = Path(__file__).parent.parent / "golden"

# Table 9 (appendix D): profiled T_F, T_B (the input-gradient pass, our I), T_W and T_comm
# in ms, and Table 5 (section 5.3): the bubble rate of 1F1B, ZB-H1 and ZB-H2 computed from
# them. Columns: model, p, m, T_F, T_B, T_W, T_comm, 1F1B, ZB-H1, ZB-H2.
PAPER_TABLES_9_AND_5 = [
    ("1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, 0.2431, 0.1585, 0.1083),
    ("1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, 0.1985, 0.1242, 0.0837),
    ("1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, 0.1240, 0.0674, 0.0444),
    ("6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, 0.2347, 0.1323, 0.0698),
    ("6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, 0.1898, 0.1045, 0.0559),
    ("6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, 0.1091, 0.0554, 0.0294),
    ("14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, 0.2552, 0.1397, 0.0672),
    ("14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, 0.2082, 0.1088, 0.0516),
    ("14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, 0.1251, 0.0576, 0.0266),
    ("28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, 0.2646, 0.1421, 0.0641),
    ("28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, 0.2168, 0.1106, 0.0490),
    ("28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, 0.1352, 0.0594, 0.0257),
]


@pytest.mark.parametrize("row", PAPER_TABLES_9_AND_5, ids=lambda r: f"{r[0]}-m{r[2]}")
def test_table_5_bubble_rates(row):
    """Every 1F1B, ZB-H1 and ZB-H2 cell of Table 5, to 4 decimals.

    The paper's bubble rate is (cost - m(T_F+T_B+T_W)) / cost with cost the longest
    per-stage execution time: our span_bubble_rate. T_comm is a pure latency on every
    cross-device hop and 1F1B runs the full backward B = T_B + T_W (DESIGN.md).
    """
    _, p, m, t_f, t_b, t_w, t_comm, *expected = row
    costs = uniform_costs(p, t_f, backward_input_ms=t_b, backward_weight_ms=t_w)
    topology = latency_topology(p, t_comm)
    for name, cell in zip(["1f1b", "zb-h1", "zb-h2"], expected, strict=True):
        schedule = get_schedule(name, p, m)
        report = build_report(simulate(schedule, costs, topology), schedule, costs)
        assert round(report.span_bubble_rate, 4) == cell, name


# Figure 3 (p = 4, m = 8), read left to right: the microbatch (1-based) of each F, B, W
# box of one iteration, per device. Top: ZB-H1; bottom: ZB-H2.
FIGURE_3 = {
    "zb-h1": [
        "1 2 3 4 1 1 5 2 2 6 3 3 7 4 4 8 5 5 6 6 7 7 8 8",
        "1 2 3 1 4 2 1 5 3 2 6 4 3 7 5 4 8 6 5 7 6 8 7 8",
        "1 2 1 3 2 4 3 1 5 4 2 6 5 3 7 6 4 8 7 5 8 6 7 8",
        "1 1 2 2 3 3 4 4 1 5 5 2 6 6 3 7 7 4 8 8 5 6 7 8",
    ],
    "zb-h2": [
        "1 2 3 4 5 6 7 1 1 8 2 2 3 3 4 4 5 5 6 6 7 7 8 8",
        "1 2 3 4 5 1 6 2 7 3 1 8 4 2 5 3 6 4 7 5 8 6 7 8",
        "1 2 3 1 4 2 5 3 6 4 7 5 1 8 6 2 7 3 8 4 5 6 7 8",
        "1 1 2 2 3 3 4 4 5 5 6 6 7 7 1 8 8 2 3 4 5 6 7 8",
    ],
}


@pytest.mark.parametrize("name", FIGURE_3)
def test_order_follows_figure_3(name):
    schedule = get_schedule(name, 4, 8)
    for actions, row in zip(schedule.device_actions, FIGURE_3[name], strict=True):
        assert [a.microbatch + 1 for a in actions] == [int(x) for x in row.split()]


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2"])
def test_golden_csv(name):
    golden = (GOLDEN / f"{name}_p4_m8_v1.csv").read_text()
    schedule = get_schedule(name, 4, 8)
    assert to_csv(schedule) == golden
    assert from_csv(golden, name) == schedule


def test_unit_times_zb_h1_makespan_is_27():
    # 1F1B with B = I + W would take (m + p - 1)(F + B) = 33; ZB-H1 leaves a third of
    # the (p-1)(F+I+W) = 9 bubble.
    _, _, report = run_policy(
        "zb-h1", 4, 8, forward_ms=1, backward_input_ms=1, backward_weight_ms=1
    )
    assert report.makespan_ms == 27
    assert [d.busy_ms for d in report.per_device] == [24] * 4


def test_unit_times_zb_h2_has_no_bubble_in_any_span():
    _, trace, report = run_policy(
        "zb-h2", 4, 8, forward_ms=1, backward_input_ms=1, backward_weight_ms=1
    )
    assert report.makespan_ms == 27
    assert [d.span_ms for d in report.per_device] == [24] * 4
    assert report.span_bubble_rate == 0
    # Device d starts d forwards late and ends as late: the parallelogram of figure 3.
    frame = trace.frame
    for d in range(4):
        rows = frame[(frame.device == d) & (frame.lane == "compute")]
        assert (rows.start.min(), rows.end.max()) == (d, 24 + d)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(0, 8),
    st.sampled_from([1, 2, 4]),
    st.integers(1, 12).map(lambda k: k / 4),
    st.integers(1, 12).map(lambda k: k / 4),
    st.data(),
)
def test_table_2_bubble_sizes(p, extra, scale, t_f, t_i, data):
    """Table 2: 1F1B, ZB-H1 and ZB-H2 bubbles with T_W no larger than T_F and T_I.

    Bubble = longest span - m (T_F + T_I + T_W); ZB-H2's needs m >= 2p - 1 to fill its
    warm-up, ZB-H1's m >= p.
    """
    t_w = data.draw(st.integers(1, int(4 * min(t_f, t_i))).map(lambda k: k / 4))
    costs = uniform_costs(p, t_f, backward_input_ms=t_i, backward_weight_ms=t_w)
    bubbles = {
        "1f1b": ((p - 1) * (t_f + t_i + t_w), p),
        "zb-h1": ((p - 1) * (t_f + t_i - t_w), p),
        "zb-h2": ((p - 1) * (t_f + t_i - 2 * t_w), 2 * p - 1),
    }
    for name, (bubble, min_microbatches) in bubbles.items():
        m = min_microbatches + extra * scale
        schedule = get_schedule(name, p, m)
        report = build_report(simulate(schedule, costs), schedule, costs)
        longest = max(d.span_ms for d in report.per_device)
        assert math.isclose(longest, m * (t_f + t_i + t_w) + bubble), name


M_B, M_W = 1000.0, 250.0  # activation bytes kept for I, and the part of it W still needs


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(0, 10))
def test_peak_activation_memory(p, extra):
    """Section 2.3: worker i (1-based) holds (p-i+1) M_B + (i-1) M_W in ZB-H1 and
    (2p-2i+1) M_B + (2i-2) M_W in ZB-H2; M_B is taken when F starts, M_B - M_W is given
    back when I ends and M_W when W ends."""
    formulas = {
        "zb-h1": (p, lambda r: (p - r) * M_B + r * M_W),
        "zb-h2": (2 * p - 1, lambda r: (2 * p - 2 * r - 1) * M_B + 2 * r * M_W),
    }
    for name, (min_microbatches, peak) in formulas.items():
        _, _, report = run_policy(
            name,
            p,
            min_microbatches + extra,
            forward_ms=1,
            backward_input_ms=1,
            backward_weight_ms=1,
            activation_memory_bytes=M_B,
            weight_grad_memory_bytes=M_W,
        )
        peaks = [d.peak_activation_bytes for d in report.per_device]
        assert peaks == [peak(r) for r in range(p)], name
        # The ZB-H1 peak is 1F1B's p M_B, on the first device.
        if name == "zb-h1":
            assert max(peaks) == p * M_B


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2"])
def test_one_virtual_stage_only(name):
    with pytest.raises(
        ConstraintError, match=f"{name} takes virtual_stages = 1, got virtual_stages=2"
    ):
        get_schedule(name, 4, 8, 2)


@st.composite
def sized_costs(draw, policies, virtual_stages=(1,)):
    """A policy at sizes within its constraints, per-stage costs and a latency topology."""
    name = draw(st.sampled_from(policies))
    p, m = draw(st.integers(1, 6)), draw(st.integers(1, 14))
    v = draw(st.sampled_from(virtual_stages))
    try:
        schedule = get_schedule(name, p, m, v)  # validates
    except ConstraintError:
        assume(False)
    stages = schedule.model_stages
    costs = uniform_costs(
        stages,
        forward_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_input_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_weight_ms=[draw(QUARTERS) for _ in range(stages)],
        activation_memory_bytes=8,
        weight_grad_memory_bytes=2,
    )
    return schedule, costs, latency_topology(p, draw(QUARTERS))


@settings(max_examples=60, deadline=None)
@given(sized_costs(["zb-h1", "zb-h2"]))
def test_engine_matches_the_oracle(case):
    check_invariants(*case)


# ---------------------------------------------------------------------------
# ZB-H2 with fewer than 2p - 1 microbatches: never slower than ZB-H1


@st.composite
def short_zb_h2_cases(draw):
    """p in 2..8, m in 1..2p-2, and per-stage F, I, W: all equal, or each drawn."""
    p = draw(st.integers(2, 8))
    m = draw(st.integers(1, 2 * p - 2))
    if draw(st.booleans()):
        f, i, w = draw(QUARTERS), draw(QUARTERS), draw(QUARTERS)
        return p, m, uniform_costs(p, f, backward_input_ms=i, backward_weight_ms=w)
    per_stage = [[draw(QUARTERS) for _ in range(p)] for _ in range(3)]
    f, i, w = per_stage
    return p, m, uniform_costs(p, f, backward_input_ms=i, backward_weight_ms=w)


def makespan(name, p, m, costs, topology=None):
    schedule = get_schedule(name, p, m)
    return build_report(simulate(schedule, costs, topology), schedule, costs).makespan_ms


@settings(max_examples=150, deadline=None)
@given(short_zb_h2_cases())
def test_zb_h2_short_of_2p_minus_1_is_never_slower_than_zb_h1(case):
    p, m, costs = case
    assert makespan("zb-h2", p, m, costs) <= makespan("zb-h1", p, m, costs)


@pytest.mark.parametrize("p", range(2, 9))
def test_zb_h2_short_of_2p_minus_1_on_unit_times_every_m(p):
    """Every m < 2p - 1, unit times, with and without a hop latency; before the fallback
    ZB-H2 ended up to 3 units later (p = 7, m = 7: 30 against 27)."""
    costs = uniform_costs(p, 1.0, backward_input_ms=1.0, backward_weight_ms=1.0)
    for m in range(1, 2 * p - 1):
        for topology in (None, latency_topology(p, 0.25)):
            assert makespan("zb-h2", p, m, costs, topology) <= makespan(
                "zb-h1", p, m, costs, topology
            ), m


@pytest.mark.parametrize("p, m", [(4, 5), (3, 3), (8, 14), (2, 2)])
def test_zb_h2_short_of_2p_minus_1_runs_zb_h1_order(p, m):
    h2, h1 = get_schedule("zb-h2", p, m), get_schedule("zb-h1", p, m)
    assert h2.device_actions == h1.device_actions
    assert h2.name == "zb-h2"


@pytest.mark.parametrize("p", range(1, 9))
def test_zb_h2_from_2p_minus_1_keeps_its_long_warm_up(p):
    """m >= 2p - 1: rank r warms up with 2(p - r) - 1 forwards, as before."""
    for m in (2 * p - 1, 2 * p, 3 * p):
        for rank, actions in enumerate(get_schedule("zb-h2", p, m).device_actions):
            first_input = next(k for k, a in enumerate(actions) if a.kind != F)
            assert first_input == 2 * (p - rank) - 1
