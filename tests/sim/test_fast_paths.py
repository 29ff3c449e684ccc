"""The sweep's three runners, C, numba and plain Python, give the same Trace.

All run one loop (``pipesim.sim.fast.kernel.sweep_kernel``, and ``sweep.c`` statement for
statement); these tests pin that the compiled ones keep the Python one's floating-point
operations and order: every array of the Trace equal, times to the bit, on every policy
with random costs and links (groups, held sends, gaps and overheads included), on random
schedules, and a deadlock found by all. The C runner is the library built here from the
source as it is now (``hatch_build.build_library``), whatever the install built.
"""

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Action, F, I, W, schedule_from_lists
from pipesim.sim.costs import uniform_costs
from pipesim.sim.fast import EvaluatorCache, native
from pipesim.sim.fast.evaluator import fast_simulate, link_times, node_durations, sweep
from pipesim.sim.fast.kernel import SweepBuffers, compiled_kernel
from pipesim.sim.links import Link, Topology
from tests.sim.test_fast import dedicated, policy_scenarios
from tests.sim.test_properties import random_schedules

pytest.importorskip("numba")

COLUMNS = (
    "device",
    "lane",
    "stage",
    "chunk",
    "microbatch",
    "kind",
    "peer",
    "start",
    "end",
    "cause",
    "cause_row",
)


ROOT = Path(__file__).resolve().parents[2]
RUNNERS = {"c": True, "numba": "numba", "python": False}  # name -> SweepBuffers' compiled


def _hatch_build():
    """The build hook's module (``hatch_build.py``), loaded by path."""
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("hatch_build", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def c_sweep(tmp_path_factory):
    """The C sweep built from ``sweep.c`` as it is now, or a skip where it cannot be."""
    target = tmp_path_factory.mktemp("native") / "_sweep.so"
    failed = _hatch_build().build_library(native.SOURCE, target)
    if failed is not None:
        pytest.skip(f"the C sweep cannot be built here: {failed}")
    return native.load(target)


@contextmanager
def runner(name, c_sweep):
    """``SweepBuffers``' ``compiled`` for runner ``name``, the C one being ``c_sweep``."""
    kept = list(native._loaded)
    native._loaded[:] = [c_sweep if name == "c" else None]
    try:
        yield RUNNERS[name]
    finally:
        native._loaded[:] = kept


def every_runner(c_sweep, schedule, costs, topology, **kwargs):
    """The fast Trace with each runner: C, numba, Python."""
    traces = []
    for name in RUNNERS:
        with runner(name, c_sweep) as compiled:
            kernel = compiled_kernel(compiled)
            assert kernel is not None if compiled else kernel is None
            assert (kernel is c_sweep) == (name == "c")
            cache = EvaluatorCache(compiled=compiled)
            traces.append(fast_simulate(schedule, costs, topology, cache=cache, **kwargs))
    return traces


def assert_identical(mine, theirs):
    for column in COLUMNS:
        a, b = getattr(mine, column), getattr(theirs, column)
        assert a.dtype == b.dtype and np.array_equal(a, b), column
    assert mine.start.tobytes() == theirs.start.tobytes()  # to the bit, -0.0 included
    assert mine.end.tobytes() == theirs.end.tobytes()
    assert mine.actions == theirs.actions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_scenarios())
def test_every_policy_gives_one_trace_on_every_runner(c_sweep, case):
    schedule, costs, topology = case
    if topology.devices > 1:
        topology = dedicated(topology)
    tails = [0.5] * schedule.devices
    c, compiled, python = every_runner(c_sweep, schedule, costs, topology, tail_ms=tails)
    assert compiled is not None
    assert_identical(compiled, python)
    assert_identical(c, python)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_schedules())
def test_random_schedules_give_one_trace_on_every_runner(c_sweep, case):
    schedule, costs, topology = case
    c, compiled, python = every_runner(c_sweep, schedule, costs, dedicated(topology))
    assert_identical(compiled, python)
    assert_identical(c, python)


def test_dualpipe_groups_and_held_sends_on_every_runner(c_sweep):
    # DualPipeV runs overlapped F&B pairs as groups; sends that hold their device.
    schedule = get_schedule("dualpipev", 4, 16, 2)
    assert EvaluatorCache().index(schedule).groups
    stages = schedule.model_stages
    costs = uniform_costs(
        stages,
        [1.0 + s / 7 for s in range(stages)],
        backward_input_ms=1.3,
        backward_weight_ms=0.7,
        overlapped_fb_ms=2.9,
        activation_bytes=3e6,
    )
    for overlap in (True, False):
        topology = Topology(
            4, default=Link(latency_us=17, bandwidth_gbps=9.0, gap_us=2.0), comm_overlap=overlap
        )
        c, compiled, python = every_runner(c_sweep, schedule, costs, topology)
        assert_identical(compiled, python)
        assert_identical(c, python)


def test_a_deadlock_stops_every_runner(c_sweep):
    # 1 runs F1 first, which waits for 0's F1, which waits behind 0's B0, which waits
    # for 1's B0: a cycle.
    cycle = [
        [
            Action(0, F, 0),
            Action(0, I, 0),
            Action(0, W, 0),
            Action(0, F, 1),
            Action(0, I, 1),
            Action(0, W, 1),
        ],
        [
            Action(1, F, 1),
            Action(1, F, 0),
            Action(1, I, 0),
            Action(1, W, 0),
            Action(1, I, 1),
            Action(1, W, 1),
        ],
    ]
    schedule = schedule_from_lists(cycle)
    index = EvaluatorCache().index(schedule)
    costs = uniform_costs(2, 1.0, backward_input_ms=1.0, backward_weight_ms=1.0)
    topology = Topology(2, default=Link(latency_us=5, bandwidth_gbps=10.0))
    links = link_times(index, costs, topology)
    for name in RUNNERS:
        with runner(name, c_sweep) as compiled:
            buffers = SweepBuffers(compiled)
            assert sweep(index, node_durations(index, costs), links, 0.0, False, buffers) is None


def test_the_sweep_records_a_topological_order_of_runs(c_sweep):
    # 1F1B on 2 devices, 2 microbatches, F 1 ms, B 2 ms, ideal links. Device 0
    # (0F0 0F1 0B0 0B1) runs its forwards, ends 1 and 2, and stops at 0B0 (no gradient
    # yet); device 1 (1F0 1B0 1F1 1B1) then runs through: 1F0 from 1 to 2, 1B0 to 4,
    # 1F1 to 5, 1B1 to 7; device 0 finishes: 0B0 from 4 to 6, 0B1 from 7 to 9.
    schedule = get_schedule("1f1b", 2, 2)
    index = EvaluatorCache().index(schedule)
    costs = uniform_costs(2, 1.0, 2.0)
    links = link_times(index, costs, Topology(2))
    expected = [[0, 2], [4, 8], [2, 4]]
    for name in RUNNERS:
        with runner(name, c_sweep) as compiled:
            buffers = SweepBuffers(compiled)
            solved = sweep(index, node_durations(index, costs), links, 0.0, False, buffers)
        assert solved.runs.tolist() == expected
        assert solved.end.tolist() == [1.0, 2.0, 6.0, 9.0, 2.0, 4.0, 5.0, 7.0]


def test_a_repeat_call_gives_the_trace_of_a_first_call():
    # A repeat call on one schedule sweeps into the buffers a previous call left, filled
    # with that call's times: every one must be rewritten. Other costs, other links and
    # held sends in between, then the first case again, to the bit.
    schedule = get_schedule("zbv", 4, 8, 2)
    stages = schedule.model_stages

    def costs(scale):
        return uniform_costs(
            stages,
            [scale * (1 + s / 5) for s in range(stages)],
            backward_input_ms=scale,
            backward_weight_ms=0.5,
            activation_bytes=2e6,
        )

    fast = Topology(4, default=Link(latency_us=20, bandwidth_gbps=50.0))
    slow = Topology(
        4, default=Link(latency_us=900, bandwidth_gbps=1.0, gap_us=5.0), comm_overlap=False
    )
    cache = EvaluatorCache()
    first = fast_simulate(schedule, costs(1.0), fast, cache=cache)
    assert cache.buffers.holds(cache.index(schedule).graph)  # the next call reuses them
    assert "_lay_out" in vars(first)  # its rows are laid out when first read...
    fast_simulate(schedule, costs(3.0), slow, cache=cache)
    assert "_lay_out" not in vars(first)  # ...or before a held Trace's buffers are reused
    fast_simulate(schedule, costs(0.5), Topology(4), cache=cache)
    assert_identical(fast_simulate(schedule, costs(1.0), fast, cache=cache), first)
    assert cache.index_builds == 1


@pytest.mark.parametrize("first_read", COLUMNS)
def test_any_column_read_first_lays_out_the_rows(first_read):
    # A deferred Trace lays out its rows on the first read of any column, those with a
    # default in the dataclass (the causes) included: a class-level default must not
    # answer in its place.
    schedule = get_schedule("1f1b", 3, 4)
    costs = uniform_costs(3, 1.0, activation_bytes=1e6)
    topology = Topology(3, default=Link(latency_us=50, bandwidth_gbps=10.0))
    laid_out = fast_simulate(schedule, costs, topology, cache=EvaluatorCache())
    laid_out.lay_out()
    deferred = fast_simulate(schedule, costs, topology, cache=EvaluatorCache())
    assert "_lay_out" in vars(deferred)
    value = getattr(deferred, first_read)
    assert value is not None and np.array_equal(value, getattr(laid_out, first_read))
    assert_identical(deferred, laid_out)


def test_the_default_runner_is_python_until_compiling_pays(monkeypatch):
    """Without the C loop, None (the default) sweeps small graphs with the Python loop until
    the process has swept COMPILE_AFTER_NODES nodes; a graph that large is compiled for at
    once."""
    from pipesim.sim.fast import jit, kernel

    monkeypatch.setattr(native, "_loaded", [None])
    monkeypatch.setattr(jit, "_compiled", {})
    monkeypatch.setattr(jit, "_python_nodes", [0])
    small = jit.COMPILE_AFTER_NODES // 3
    assert kernel.compiled_kernel(None, small) is None
    assert kernel.compiled_kernel(None, small) is None
    assert kernel.compiled_kernel(None, small) is None
    assert kernel.compiled_kernel(None, small) is not None  # 4/3 of the threshold swept
    assert kernel.compiled_kernel(None, 1) is not None  # loaded: used from now on
    monkeypatch.setattr(jit, "_compiled", {})
    monkeypatch.setattr(jit, "_python_nodes", [0])
    assert kernel.compiled_kernel(None, jit.COMPILE_AFTER_NODES) is not None
    assert kernel.compiled_kernel(False, 10**9) is None


def test_the_c_loop_runs_whatever_the_size_where_it_is_built(c_sweep, monkeypatch):
    # Loading it costs a millisecond: no threshold, and numba is never asked for.
    from pipesim.sim.fast import jit, kernel

    monkeypatch.setattr(native, "_loaded", [c_sweep])
    monkeypatch.setattr(jit, "_compiled", {})
    assert kernel.compiled_kernel(None, 1) is c_sweep
    assert kernel.compiled_kernel(True, 1) is c_sweep
    assert kernel.compiled_kernel(False, 10**9) is None
    assert kernel.compiled_kernel("numba", 1) is not c_sweep
    assert list(jit._compiled) == ["sweep_kernel"]  # only the last call compiled numba's


def test_a_library_built_from_another_source_is_never_loaded(tmp_path, monkeypatch):
    # An edited sweep.c not rebuilt: the library records its source's CRC-32, the loader
    # compares it with the source beside it.
    edited = tmp_path / "sweep.c"
    edited.write_text(native.SOURCE.read_text() + "/* edited */\n")
    library = tmp_path / "_sweep.so"
    failed = _hatch_build().build_library(edited, library)
    if failed is not None:
        pytest.skip(f"the C sweep cannot be built here: {failed}")
    assert native.library_path(library, edited) == library
    assert native.library_path(library, native.SOURCE) is None  # stale against the real one
    assert native.library_path(tmp_path / "missing.so", edited) is None
    monkeypatch.setenv("PIPESIM_NO_NATIVE", "1")
    assert native.library_path(library, edited) is None


def test_a_failed_build_leaves_no_library(tmp_path, monkeypatch):
    # No compiler (or one that fails): a reason in one line, and no file, partial or not.
    monkeypatch.setenv("CC", "false")
    target = tmp_path / "_sweep.so"
    failed = _hatch_build().build_library(native.SOURCE, target)
    assert failed is not None and failed.startswith("false") and "\n" not in failed
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert _hatch_build().build_library(native.SOURCE, target) is not None
    assert list(tmp_path.iterdir()) == []


def test_the_c_loop_keeps_pointers_but_holds_no_buffer_alive(c_sweep):
    # Pointers to the last graph and buffers are kept for the next call, by weak
    # reference: a sweep's buffers are freed once their owner lets them go, and a new
    # graph in their place is swept anew (same trace as the Python loop).
    import gc
    import weakref

    costs = uniform_costs(3, 1.0, 2.0, activation_bytes=1e6)
    topology = Topology(3, default=Link(latency_us=50, bandwidth_gbps=10.0))
    with runner("c", c_sweep):
        cache = EvaluatorCache(compiled=True)
        first = fast_simulate(get_schedule("1f1b", 3, 4), costs, topology, cache=cache)
        first.lay_out()
        buffer = weakref.ref(cache.buffers._spare[0][1][0])
        del cache, first
        gc.collect()
        assert buffer() is None
        c = fast_simulate(get_schedule("gpipe", 3, 5), costs, topology, cache=EvaluatorCache())
    python = fast_simulate(
        get_schedule("gpipe", 3, 5), costs, topology, cache=EvaluatorCache(compiled=False)
    )
    assert_identical(c, python)
