"""zb-auto and v-auto against the Zero Bubble authors' schedulers, on pipesim's engine.

    python benchmarks/bench_vs_zero_bubble.py --zb-repo PATH [--devices 4 6 8]
        [--builders zb zbv v-half v-min v-mem] [--exact] [--exact-devices 4]
        [--exact-time-limit 10]

``PATH`` is a local checkout of the Zero Bubble authors' repository, which this script
does not ship and never copies from; get it with

    git clone https://github.com/sail-sg/zero-bubble-pipeline-parallelism PATH

Their schedulers are loaded from it by ``zero_bubble_orders.py`` (next to this file): the
loop heuristic ``zb`` (zb.py), the greedy V ``zbv`` (zbv.py), V-Half and V-Min
(zbv_greedy.py) and the memory-controllable V builder ``v-mem`` (v_auto_schedule.py).
For every case their per-device order becomes a pipesim schedule, and it and
``search_schedule`` (zb-auto against ``zb``, v-auto against the V builders) run on
pipesim's engine with the same costs, links and memory limit.

The grid: p = 4, 6, 8 devices; m = p, 2p, 3p microbatches; F, I, W uniform (1, 1, 1 ms
per model stage) or unequal (1, 1.2, 0.6); link latency 0 or 0.1 ms; and each builder's
limits. Memory: their accounting adds ``mem_f`` at an F, ``mem_b`` (negative) at a B and
``mem_w`` at a W in abstract units; pipesim holds the activation from the start of F,
frees all but the weight-gradient part at the end of I and the rest at the end of W.
Here ``mem_f = 4``, ``mem_b = -3``, ``mem_w = -1`` per model stage (a quarter kept until
W, close to their own estimate of 32h out of 34h + 5as per layer) and a unit is GiB / 4;
the V halves costs and memory per chunk. Limits:

* ``zb``, ``zbv``: ``k * p * mem_f`` units for them (k = 1: what 1F1B holds; k = 2: twice
  that), k times the peak of pipesim's 1F1B on the same work for pipesim;
* ``v-half``, ``v-min``: their pattern sets the memory; pipesim gets what their order holds
  in its own accounting (so their order fits by construction);
* ``v-mem``: ``c`` chunk activations for them (c = p, about V-Half's; c = 2p, 1F1B's),
  ``c`` times one chunk's activation for pipesim (their accounting holds a chunk's bytes
  until its W, pipesim's frees most at its I: their order fits).

A ``!`` marks a case where their order holds more than the pipesim limit (the comparison
then favours them). Columns: case, the end time their own timing model predicts (it
matches pipesim's engine when the conversion is faithful; ``-`` where it keeps it to
itself), their makespan on pipesim's engine, ours, ``(ours - theirs) / theirs``, their
peak / our peak / the limit (GiB, worst device), the search's cheap lower bound and our
gap to it. The tally counts per builder the cases where pipesim is slower, equal (within
5e-5) or faster, and the median and largest gap. ``--exact`` also runs the exact mode
(``pipesim.search.exact``, CP-SAT) on the cases with at most ``--exact-devices`` devices
and reports the heuristic's gap to the best proven bound there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zero_bubble_orders as theirs  # noqa: E402

from pipesim import Link, Topology, build_report, get_schedule, simulate, uniform_costs  # noqa: E402
from pipesim.schedules.ir import from_csv  # noqa: E402
from pipesim.search import SearchError, search_schedule  # noqa: E402
from pipesim.sim.memory import memory_timelines  # noqa: E402

GiB = 2**30
UNIT = GiB / 4  # bytes per unit of their memory accounting
COST_SHAPES = {"F=I=W": (1.0, 1.0, 1.0), "I=1.2,W=.6": (1.0, 1.2, 0.6)}
COMMS_MS = (0.0, 0.1)
# builder -> (policy, limits): k x 1F1B for zb and zbv, chunk counts (x p) for v-mem
BUILDERS = {
    "zb": ("zb-auto", (1, 2)),
    "zbv": ("v-auto", (1, 2)),
    "v-half": ("v-auto", (None,)),
    "v-min": ("v-auto", (None,)),
    "v-mem": ("v-auto", (1, 2)),
}
EQUAL = 5e-5


@dataclass(frozen=True)
class Case:
    builder: str
    limit: int | None
    p: int
    m: int
    shape: str
    comm: float

    @property
    def policy(self) -> str:
        return BUILDERS[self.builder][0]

    def label(self) -> str:
        limit = {"zb": "x1F1B", "zbv": "x1F1B", "v-mem": "p chunks"}.get(self.builder, "")
        limit = f"{self.limit}{limit}" if self.limit is not None else "own"
        return (
            f"{self.builder:<6} {limit:<9} p={self.p:<2} m={self.m:<3} "
            f"{self.shape:<10} c={self.comm:<4g}"
        )


def case_costs(case: Case):
    chunks = 2 if case.policy == "v-auto" else 1
    f, i, w = COST_SHAPES[case.shape]
    return uniform_costs(
        case.p * chunks,
        f / chunks,
        backward_input_ms=i / chunks,
        backward_weight_ms=w / chunks,
        activation_memory_bytes=theirs.MEM_F * UNIT / chunks,
        weight_grad_memory_bytes=-theirs.MEM_W * UNIT / chunks,
    )


def measure(schedule, costs, topology) -> tuple[float, float]:
    """``(makespan_ms, peak activation bytes on the worst device)`` on pipesim's engine."""
    trace = simulate(schedule, costs, topology)
    memory = memory_timelines(trace, schedule, costs)
    report = build_report(trace, schedule, costs, 1, memory=memory, topology=topology)
    return report.makespan_ms, max(d.peak_activation_bytes for d in report.per_device)


def their_order(modules, case: Case):
    """Their rows and own end estimate, and the pipesim limit of the case (None: theirs)."""
    fiw, p, m, comm, k = COST_SHAPES[case.shape], case.p, case.m, case.comm, case.limit
    if case.builder == "zb":
        return theirs.loop_order(modules["zb"], p, m, fiw, comm, k * p * theirs.MEM_F)
    if case.builder == "zbv":
        return theirs.v_order(modules, p, m, fiw, comm, k * p * theirs.MEM_F)
    if case.builder == "v-mem":
        return theirs.v_memory_order(modules, p, m, fiw, comm, k * p)
    return theirs.v_pattern_order(modules, p, m, fiw, comm, case.builder.removeprefix("v-"))


def pipesim_limit(case: Case, topology, their_peak: float) -> float:
    if case.builder in ("zb", "zbv"):
        fiw = COST_SHAPES[case.shape]
        loop = uniform_costs(
            case.p,
            fiw[0],
            backward_input_ms=fiw[1],
            backward_weight_ms=fiw[2],
            activation_memory_bytes=theirs.MEM_F * UNIT,
            weight_grad_memory_bytes=-theirs.MEM_W * UNIT,
        )
        schedule = get_schedule("1f1b", case.p, case.m, 1)
        return case.limit * measure(schedule, loop, topology)[1]
    if case.builder == "v-mem":
        return case.limit * case.p * theirs.MEM_F * UNIT / 2
    return their_peak


@dataclass
class Outcome:
    case: Case
    theirs_ms: float
    ours_ms: float  # the heuristic's (search_schedule)
    bound_ms: float  # the cheap bound, or the exact mode's where higher
    line: str
    cheap_ms: float = 0.0  # the search's cheap bound
    exact_ms: float | None = None  # the exact mode's makespan, where it ran
    optimal: bool = False

    @property
    def diff(self) -> float:
        return _diff(self.ours_ms, self.theirs_ms)


def _diff(ours_ms: float, theirs_ms: float) -> float:
    diff = (ours_ms - theirs_ms) / theirs_ms
    return 0.0 if abs(diff) < EQUAL else diff


def run_case(modules, case: Case, exact_s: float | None) -> Outcome | str:
    """The case's outcome, or a line saying which side failed."""
    costs = case_costs(case)
    topology = Topology(case.p, Link(latency_us=case.comm * 1000.0)) if case.comm else None
    try:
        rows, own = their_order(modules, case)
        schedule = from_csv("\n".join(",".join(row) for row in rows), "zero-bubble")
        their_ms, their_peak = measure(schedule, costs, topology)
    except (ValueError, AssertionError, IndexError, KeyError, TypeError) as error:
        return f"{case.label()}  theirs failed: {type(error).__name__}: {error}"
    limit = pipesim_limit(case, topology, their_peak)
    args = (case.policy, case.p, case.m, costs, topology, limit)
    try:
        found = search_schedule(*args)
    except SearchError as error:
        return f"{case.label()}  {their_ms:>9.3f}  ours failed: {error}"
    cheap = found.lower_bound_ms
    outcome = Outcome(case, their_ms, found.makespan_ms, cheap, "", cheap_ms=cheap)
    exact_text = ""
    if exact_s is not None:
        from pipesim.search.exact import exact_schedule

        began = time.perf_counter()
        exact = exact_schedule(*args, time_limit_s=exact_s)
        outcome.bound_ms = bound = max(found.lower_bound_ms, exact.lower_bound_ms)
        outcome.exact_ms, outcome.optimal = exact.makespan_ms, bool(exact.optimal)
        proven = "optimal" if exact.optimal else f"bound {exact.lower_bound_ms:.3f}"
        exact_text = (
            f"  exact {exact.makespan_ms:>8.3f} ({proven}, {time.perf_counter() - began:.1f} s)"
        )
    bound = outcome.bound_ms
    over = "!" if their_peak > limit * (1 + 1e-9) else " "
    own_text = "-" if own is None else f"{own:.3f}"
    outcome.line = (
        f"{case.label()}  {own_text:>9}  {their_ms:>9.3f}  {found.makespan_ms:>9.3f}  "
        f"{outcome.diff:>+7.2%}  {their_peak / GiB:>6.3f}{over}/"
        f"{found.peak_activation_bytes / GiB:>6.3f}/{limit / GiB:>6.3f}  "
        f"{bound:>9.3f}  {found.makespan_ms / bound - 1:>6.2%}{exact_text}"
    )
    return outcome


def cases(builders, devices) -> list[Case]:
    return [
        Case(builder, limit, p, m, shape, comm)
        for builder in builders
        for limit in BUILDERS[builder][1]
        for p in devices
        for m in (p, 2 * p, 3 * p)
        for shape in COST_SHAPES
        for comm in COMMS_MS
    ]


def tally(outcomes: list[Outcome], exact: bool = False) -> list[str]:
    """Per builder and in all: slower, equal, faster; the median and largest gap. With
    ``exact``, the exact mode's makespans against theirs and the heuristic's gap to the
    optimum where the exact mode proved one."""
    groups = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.case.builder].append(outcome)
    groups["all"] = outcomes
    lines = []
    for name, group in groups.items():
        diffs = [_diff(o.exact_ms, o.theirs_ms) if exact else o.diff for o in group]
        slower, faster = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        gaps = [o.ours_ms / (o.bound_ms if exact else o.cheap_ms) - 1 for o in group]
        line = (
            f"{name:<7} {len(group):>4} cases: {'exact' if exact else 'pipesim'} slower in "
            f"{slower}, equal in {len(group) - slower - faster}, faster in {faster}; "
            f"heuristic's gap to the bound: median {statistics.median(gaps):.2%}, max "
            f"{max(gaps):.2%}"
        )
        proven = [o.ours_ms / o.exact_ms - 1 for o in group if exact and o.optimal]
        if proven:
            line += (
                f"; to the {len(proven)} proven optima: median {statistics.median(proven):.2%}, "
                f"max {max(proven):.2%}"
            )
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zb-repo", type=Path, required=True, help="checkout of their repo")
    parser.add_argument("--devices", nargs="+", type=int, default=[4, 6, 8])
    parser.add_argument("--builders", nargs="+", choices=list(BUILDERS), default=list(BUILDERS))
    parser.add_argument("--exact", action="store_true", help="the exact mode's bound too")
    parser.add_argument("--exact-devices", type=int, default=4, help="on cases up to this p")
    parser.add_argument("--exact-time-limit", type=float, default=10.0, help="seconds a case")
    args = parser.parse_args()
    modules = theirs.load_their_schedulers(args.zb_repo)
    print(
        f"{'case':<47}  {'own est':>9}  {'theirs ms':>9}  {'ours ms':>9}  {'diff':>7}  "
        f"{'peak theirs/ours/limit GiB':<26}  {'bound ms':>9}  {'gap':>6}"
    )
    outcomes, exact_outcomes = [], []
    for case in cases(args.builders, args.devices):
        exact = args.exact and case.p <= args.exact_devices
        found = run_case(modules, case, args.exact_time_limit if exact else None)
        print(found if isinstance(found, str) else found.line, flush=True)
        if not isinstance(found, str):
            outcomes.append(found)
            if exact:
                exact_outcomes.append(found)
    print("\nagainst the authors' schedulers (gap: to the search's cheap lower bound)")
    print("\n".join(tally(outcomes)))
    if exact_outcomes:
        print(f"\nthe exact mode on the cases with p <= {args.exact_devices} (gap: to its bound)")
        print("\n".join(tally(exact_outcomes, exact=True)))


if __name__ == "__main__":
    main()
