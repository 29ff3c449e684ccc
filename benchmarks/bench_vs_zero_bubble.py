"""zb-auto and v-auto against the Zero Bubble authors' schedulers, on pipesim's engine.

    python benchmarks/bench_vs_zero_bubble.py --zb-repo PATH [--no-v]

``PATH`` is a local checkout of the Zero Bubble authors' repository, which this script
does not ship and never copies from; get it with

    git clone https://github.com/sail-sg/zero-bubble-pipeline-parallelism PATH

Their schedulers are pure Python and live in
``megatron/core/pipeline_parallel/zerobubble/scheduler/``: ``zb.py`` (the heuristic for
the loop placement, one chunk per device, under a memory limit, with F/B/W costs and a
communication cost) and ``zbv.py`` (the greedy V-shape builder, two chunks per device).
They are loaded at run time from the checkout by file path, without importing Megatron:
the package path is filled with empty modules, and ``torch`` and ``pulp`` (imported by
``zb.py`` only for a type annotation and for a function this script does not call) are
stand-ins while the files load, then removed again.

For every case, their per-device order (their B is pipesim's I, the backward for the
input; their stage and microbatch are kept) becomes a pipesim schedule, and it and
``search_schedule`` are simulated on pipesim's engine with the same costs and links.

Memory: their accounting adds ``mem_f`` when an F is placed, ``mem_b`` (negative) at a B
and ``mem_w`` (negative) at a W, in abstract units; pipesim holds the activation from the
start of F, frees all but the weight-gradient part at the end of I and the rest at the
end of W. Here ``mem_f = 4`` units, ``mem_b = -3``, ``mem_w = -1`` per model stage (one
quarter kept until W, close to their own estimate of 32h out of 34h + 5as per layer),
and one unit is ``GiB / 4`` (the V placement halves every cost and memory per chunk).
Their limit is given in those units as ``k * p * mem_f`` (k = 1: what 1F1B holds, k = 2:
twice that; for V, ``k * 2p * mem_f`` of a chunk, the same amount); the pipesim limit
is k times the peak of pipesim's 1F1B on the same scenario. Their order is then
measured by pipesim's accounting; a ``!`` marks a case where it exceeds the pipesim
limit (the comparison then favours them).

Columns: case, the end time their own timing model predicts for their order (it matches
pipesim's engine when the conversion is faithful), their
makespan on pipesim's engine, ours, the difference ``(ours - theirs) / theirs``
(negative: pipesim's search is faster), their peak / our peak / the limit (GiB, worst
device), and the search's lower bound (no order within the limit is faster) with our gap
to it, ``ours / bound - 1``. The last lines give the median and largest gap per policy.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import statistics
import sys
import types
from pathlib import Path

from pipesim import Link, Topology, build_report, get_schedule, simulate, uniform_costs
from pipesim.schedules.ir import from_csv
from pipesim.search import SearchError, search_schedule
from pipesim.sim.memory import memory_timelines

GiB = 2**30
UNIT = GiB / 4  # bytes per unit of their memory accounting
MEM_F, MEM_B, MEM_W = 4, -3, -1  # per model stage, in units
SCHEDULER_DIR = Path("megatron/core/pipeline_parallel/zerobubble/scheduler")
PACKAGE = "megatron.core.pipeline_parallel.zerobubble.scheduler"
COST_SHAPES = {"F=I=W": (1.0, 1.0, 1.0), "F<I, W<F": (1.0, 1.5, 0.6)}
COMMS_MS = (0.0, 0.1)


def load_their_schedulers(repo: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """``(zb, zbv)``: the authors' scheduler modules, loaded from the checkout ``repo``."""
    folder = repo / SCHEDULER_DIR
    if not (folder / "zb.py").is_file():
        raise SystemExit(
            f"{folder / 'zb.py'} not found: --zb-repo must be a checkout of "
            "https://github.com/sail-sg/zero-bubble-pipeline-parallelism"
        )
    parts = PACKAGE.split(".")
    stand_ins = {}
    for depth in range(1, len(parts) + 1):  # empty packages: Megatron itself never runs
        name = ".".join(parts[:depth])
        package = types.ModuleType(name)
        package.__path__ = []
        stand_ins[name] = package
    torch_stand_in = types.ModuleType("torch")
    torch_stand_in.Tensor = object  # zb.py uses torch only in an annotation
    stand_ins["torch"] = torch_stand_in
    stand_ins["pulp"] = types.ModuleType("pulp")  # only in a function not called here
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    loaded = {}
    try:
        for short in ("graph", "zb", "zbv"):
            name = f"{PACKAGE}.{short}"
            spec = importlib.util.spec_from_file_location(name, folder / f"{short}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            loaded[short] = module
    finally:
        for name in [*stand_ins, *(f"{PACKAGE}.{s}" for s in ("graph", "zb", "zbv"))]:
            if saved.get(name) is not None:
                sys.modules[name] = saved[name]
            else:
                sys.modules.pop(name, None)
    return loaded["zb"], loaded["zbv"]


def their_loop_order(zb, p: int, m: int, fiw, comm: float, max_units: float):
    """Their loop-placement order per device, as torch action text (``2F0``, ``2I0``...),
    and the end time their own timing model gives it (a check of the conversion)."""
    f, i, w = fiw
    config = zb.GraphConfig(
        cost_f=[f] * p,
        cost_b=[i] * p,
        cost_w=[w] * p,
        cost_comm=float(comm),
        mem_f=[MEM_F] * p,
        mem_b=[MEM_B] * p,
        mem_w=[MEM_W] * p,
        max_mem=[max_units] * p,
        n_stages=p,
        n_micro=m,
    )
    graph = zb.Graph.build_graph(p, m, config)
    _, order, end_times = zb.initial_solution(graph, print_result=False)
    rows = [[] for _ in range(p)]
    for node, position in enumerate(order):
        kind, stage, micro = node // (p * m), (node // m) % p, node % m
        rows[stage].append((position, f"{stage}{'FIW'[kind]}{micro}"))
    return [[text for _, text in sorted(row)] for row in rows], max(end_times)


def their_v_order(zb, zbv, p: int, m: int, fiw, comm: float, max_units: float):
    """Their V-shape order per device (model stages ``d`` and ``2p - 1 - d`` on device d)."""
    f, i, w = (c / 2 for c in fiw)  # per chunk
    half = (MEM_F / 2, MEM_B / 2, MEM_W / 2)
    graph = zbv.PipelineGraph(p, m, f, i, w, float(comm), *half, max_mem=max_units)
    config = zb.GraphConfig(
        cost_f=[f] * p,
        cost_b=[i] * p,
        cost_w=[w] * p,
        cost_comm=float(comm),
        mem_f=[half[0]] * p,
        mem_b=[half[1]] * p,
        mem_w=[half[2]] * p,
        max_chunks=2,
        n_stages=p,
        n_micro=m,
    )
    with contextlib.redirect_stdout(io.StringIO()):  # it prints one summary line
        local = graph.create_schedule(config)
    kinds = {"F": "F", "B": "I", "W": "W"}
    rows = [
        [f"{n.layer_group_idx}{kinds[str(n.type)]}{n.microbatch}" for n in device]
        for device in local
    ]
    # create_schedule keeps its timing to itself: redo its choice (the try with the least
    # bubble, the first on ties) to read the end time it predicts.
    best = None
    for fill_b in (True, False):
        for fill_f in (True, False):
            _, end_times, bubble = graph.try_v_schedule(fill_b=fill_b, fill_f=fill_f)
            if best is None or bubble < best[0]:
                best = (bubble, max(end_times))
    return rows, best[1]


def measure(schedule, costs, topology) -> tuple[float, float]:
    """``(makespan_ms, peak activation bytes on the worst device)`` on pipesim's engine."""
    trace = simulate(schedule, costs, topology)
    memory = memory_timelines(trace, schedule, costs)
    report = build_report(trace, schedule, costs, 1, memory=memory, topology=topology)
    return report.makespan_ms, max(d.peak_activation_bytes for d in report.per_device)


def run_case(
    zb, zbv, policy: str, p: int, m: int, shape: str, comm: float, k: int
) -> tuple[str, float | None]:
    """The case's line, and the search's gap to its lower bound (None if a side failed)."""
    chunks = 2 if policy == "v-auto" else 1
    fiw = COST_SHAPES[shape]
    stages = p * chunks
    costs = uniform_costs(
        stages,
        fiw[0] / chunks,
        backward_input_ms=fiw[1] / chunks,
        backward_weight_ms=fiw[2] / chunks,
        activation_memory_bytes=MEM_F * UNIT / chunks,
        weight_grad_memory_bytes=-MEM_W * UNIT / chunks,
    )
    topology = Topology(p, Link(latency_us=comm * 1000.0)) if comm else None
    _, one_f_one_b_peak = measure(get_schedule("1f1b", p, m, 1), costs_loop(fiw, p), topology)
    limit = k * one_f_one_b_peak
    case = f"{policy:<7} p={p:<2} m={m:<3} {shape:<9} c={comm:<4g} {k}x1F1B"
    try:
        if policy == "zb-auto":
            rows, own = their_loop_order(zb, p, m, fiw, comm, k * p * MEM_F)
        else:
            rows, own = their_v_order(zb, zbv, p, m, fiw, comm, k * p * MEM_F)
        theirs = from_csv("\n".join(",".join(row) for row in rows), "zero-bubble")
        their_ms, their_peak = measure(theirs, costs, topology)
    except (ValueError, AssertionError, IndexError, KeyError) as error:
        return f"{case}  theirs failed: {type(error).__name__}: {error}", None
    try:
        found = search_schedule(policy, p, m, costs, topology, memory_limit_bytes=limit)
    except SearchError as error:
        return f"{case}  {their_ms:>9.3f}  ours failed: {error}", None
    over = "!" if their_peak > limit * (1 + 1e-9) else " "
    diff = (found.makespan_ms - their_ms) / their_ms
    diff = 0.0 if abs(diff) < 5e-5 else diff
    own_text = "-" if own is None else f"{own:.3f}"
    line = (
        f"{case}  {own_text:>9}  {their_ms:>9.3f}  {found.makespan_ms:>9.3f}  {diff:>+7.2%}  "
        f"{their_peak / GiB:>6.3f}{over}/{found.peak_activation_bytes / GiB:>6.3f}"
        f"/{limit / GiB:>6.3f}  {found.lower_bound_ms:>9.3f}  {found.gap:>6.2%}"
    )
    return line, found.gap


def costs_loop(fiw, p: int):
    """The same model as one chunk per device, to measure 1F1B's peak (the limit basis)."""
    return uniform_costs(
        p,
        fiw[0],
        backward_input_ms=fiw[1],
        backward_weight_ms=fiw[2],
        activation_memory_bytes=MEM_F * UNIT,
        weight_grad_memory_bytes=-MEM_W * UNIT,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zb-repo", type=Path, required=True, help="checkout of their repo")
    parser.add_argument("--no-v", action="store_true", help="skip v-auto against their zbv.py")
    parser.add_argument("--devices", nargs="+", type=int, default=[4, 8])
    args = parser.parse_args()
    zb, zbv = load_their_schedulers(args.zb_repo)
    policies = ["zb-auto"] if args.no_v else ["zb-auto", "v-auto"]
    print(
        f"{'case':<46}  {'own est':>9}  {'theirs ms':>9}  {'ours ms':>9}  {'diff':>7}  "
        f"{'peak theirs/ours/limit GiB':<26}  {'bound ms':>9}  {'gap':>6}"
    )
    gaps = {policy: [] for policy in policies}
    for policy in policies:
        for p in args.devices:
            for m in (p, 2 * p, 3 * p):
                for shape in COST_SHAPES:
                    for comm in COMMS_MS:
                        for k in (1, 2):
                            line, gap = run_case(zb, zbv, policy, p, m, shape, comm, k)
                            print(line, flush=True)
                            if gap is not None:
                                gaps[policy].append(gap)
    for policy, found in gaps.items():
        if found:
            print(
                f"{policy}: gap to the lower bound over {len(found)} cases: median "
                f"{statistics.median(found):.2%}, max {max(found):.2%}"
            )


if __name__ == "__main__":
    main()
