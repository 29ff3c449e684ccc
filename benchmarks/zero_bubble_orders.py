"""The Zero Bubble authors' schedulers, loaded from a checkout and turned into pipesim orders.

Used by ``bench_vs_zero_bubble.py``. The checkout (``git clone
https://github.com/sail-sg/zero-bubble-pipeline-parallelism PATH``) is never copied from;
its pure-Python schedulers in ``megatron/core/pipeline_parallel/zerobubble/scheduler/``
are loaded by file path, without importing Megatron (the package path is filled with
empty modules, and ``torch`` and ``pulp``, which ``zb.py`` names only in an annotation and
in a function not called here, are stand-ins while the files load, then removed again):

* ``zb.py``: the heuristic for one chunk per device under a memory limit (``zb``);
* ``zbv.py``: the greedy V-shape builder, two chunks per device, under a limit (``zbv``);
* ``zbv_greedy.py``: V-Half and V-Min, the V built from a fixed repeating pattern whose
  memory is about a half and a third of 1F1B's (``v-half``, ``v-min``);
* ``v_auto_schedule.py``: the memory-controllable V builder (building blocks repeated,
  squeezed and reordered), whose limit counts one chunk's activation per unit, held from
  a chunk's F to its W (``v-mem``).

Each returns per-device rows of torch action text (``2F0``; their B is pipesim's I, the
backward for the input) with pipesim's model stage numbers (the V: chunk 0 of device d is
stage d, chunk 1 is stage 2p-1-d), and the end time their own timing model predicts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import types
from pathlib import Path

SCHEDULER_DIR = Path("megatron/core/pipeline_parallel/zerobubble/scheduler")
PACKAGE = "megatron.core.pipeline_parallel.zerobubble.scheduler"
MODULES = ("graph", "zb", "zbv", "zbv_greedy", "v_auto_schedule")
MEM_F, MEM_B, MEM_W = 4, -3, -1  # per model stage, in units of their accounting


def load_their_schedulers(repo: Path) -> dict[str, types.ModuleType]:
    """The authors' scheduler modules by short name, loaded from the checkout ``repo``."""
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
        for short in MODULES:
            name = f"{PACKAGE}.{short}"
            spec = importlib.util.spec_from_file_location(name, folder / f"{short}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            loaded[short] = module
    finally:
        for name in [*stand_ins, *(f"{PACKAGE}.{s}" for s in MODULES)]:
            if saved.get(name) is not None:
                sys.modules[name] = saved[name]
            else:
                sys.modules.pop(name, None)
    return loaded


def loop_order(zb, p: int, m: int, fiw, comm: float, max_units: float):
    """``zb.py``'s order for one chunk per device (limit in units of its accounting)."""
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


def _v_config(zb, p: int, m: int, per_chunk, comm: float):
    f, i, w = per_chunk
    half = (MEM_F / 2, MEM_B / 2, MEM_W / 2)
    return zb.GraphConfig(
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


def _node_rows(local) -> list[list[str]]:
    kinds = {"F": "F", "B": "I", "W": "W"}
    return [
        [f"{n.layer_group_idx}{kinds[str(n.type)]}{n.microbatch}" for n in device]
        for device in local
    ]


def v_order(modules, p: int, m: int, fiw, comm: float, max_units: float):
    """``zbv.py``'s greedy V order (model stages ``d`` and ``2p - 1 - d`` on device d)."""
    zb, zbv = modules["zb"], modules["zbv"]
    f, i, w = (c / 2 for c in fiw)  # per chunk
    half = (MEM_F / 2, MEM_B / 2, MEM_W / 2)
    graph = zbv.PipelineGraph(p, m, f, i, w, float(comm), *half, max_mem=max_units)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints one summary line
        local = graph.create_schedule(_v_config(zb, p, m, (f, i, w), comm))
    # create_schedule keeps its timing to itself: redo its choice (the try with the least
    # bubble, the first on ties) to read the end time it predicts.
    best = None
    for fill_b in (True, False):
        for fill_f in (True, False):
            _, end_times, bubble = graph.try_v_schedule(fill_b=fill_b, fill_f=fill_f)
            if best is None or bubble < best[0]:
                best = (bubble, max(end_times))
    return _node_rows(local), best[1]


def v_pattern_order(modules, p: int, m: int, fiw, comm: float, shape: str):
    """``zbv_greedy.py``'s V-Half (``shape = "half"``) or V-Min (``"min"``) order."""
    zb, greedy = modules["zb"], modules["zbv_greedy"]
    per_chunk = tuple(c / 2 for c in fiw)
    graph = greedy.PipelineGraph(p, m, shape, *per_chunk, float(comm))
    with contextlib.redirect_stdout(io.StringIO()):  # it prints one summary line
        local = graph.create_schedule(_v_config(zb, p, m, per_chunk, comm))
    return _node_rows(local), None


def v_memory_order(modules, p: int, m: int, fiw, comm: float, max_chunks: int):
    """``v_auto_schedule.py``'s order under ``max_chunks`` chunk activations per device
    (its F and f take one, its W and w give it back)."""
    f, i, w = (c / 2 for c in fiw)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its memory table
        nodes = modules["v_auto_schedule"].schedule(p, m, (f, i, w, float(comm)), max_chunks)
    kinds = {"F": "F", "B": "I", "W": "W"}
    rows, end = [], 0.0
    for device, row in enumerate(nodes):
        texts = []
        for node in row:
            stage = 2 * p - 1 - device if node.chunk else device
            texts.append(f"{stage}{kinds[node.type]}{node.minibatch}")
            end = max(end, node.completion_time)
        rows.append(texts)
    return rows, end
