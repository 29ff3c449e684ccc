"""The fast evaluator against the SimPy engine: actions per second, side by side.

    python benchmarks/bench_evaluator.py              # 10^4, 10^5, 10^6 actions
    python benchmarks/bench_evaluator.py --max 1e5    # stop earlier
    python benchmarks/bench_evaluator.py --no-numba   # the sweep in plain Python
    python benchmarks/bench_evaluator.py --numba      # numba's loop, even where C is built
    python benchmarks/bench_evaluator.py --small      # per-call time at 10^3 and 10^4
    python benchmarks/bench_evaluator.py --keep-memory  # glibc keeps freed memory (see below)
    python benchmarks/bench_evaluator.py --end-to-end   # `pipesim run` as a process, 10^6

For 1F1B, interleaved 1F1B (4 chunks per device) and ZB-V on 8 devices, one run of each
evaluator per size, each size in a fresh process. Links carry a latency and a size cost
(5 us, 100 GB/s), so every cross-device hop is a real transfer. Both columns time the
same call, schedule, costs and topology in, Trace out (rows, times, causes: a fast
Trace's rows are laid out inside the clock, though it would lay them out only when
first read); schedule, costs and topology are built before the clock starts.

``first`` is a first call on a new schedule (its dependency graph is laid out, then
swept); ``again`` is a second call on the same schedule with other costs, which reuses the
graph through the ``EvaluatorCache`` the calls share, as a planner scoring one schedule
under many costs does (the best of three).
``x`` columns are the engine's time over the fast evaluator's. A first call in a fresh
process also pays the operating system for every new page of memory it touches (about
a millisecond per MB on small cloud machines). So does a repeat call, to a lesser
degree: glibc hands large freed blocks back to the system, and the next call faults them
in again. ``--keep-memory`` runs both evaluators with glibc told to keep them
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``), as a long-running planner may.
The fast evaluator sweeps with the C loop where the install built it
(``pipesim.sim.fast.native``), else with numba's; ``--numba`` asks for numba's. The
compiled loop's one-time costs are printed apart and left out of the rates: numba's
compile on first use after an install, and loading the compiled code in each new process
(``warm s``; each size runs warm, after a call on a small schedule). Every fast trace is checked against the engine's (same makespan to 1e-9)
before a number is printed.

``--end-to-end`` times what a user waits for: ``pipesim run SCENARIO --format json`` as a
process, from start to exit (imports, building and validating the schedule, the step,
the report), with ``--evaluator fast`` (the C loop where built, then numba's, with
``PIPESIM_NO_NATIVE=1``) and ``--evaluator simpy``, on a scenario of the same schedule,
costs and links at about 10^6 actions (``--max``); the reports' makespans are checked
equal first. Each cell is the least of ``--repeat`` runs (3; the fast and engine runs
alternate), as a busy machine only ever adds time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SIZES = [10**4, 10**5, 10**6]
SCHEDULES = {"1f1b": 1, "interleaved-1f1b": 4, "zbv": 2}  # name -> virtual stages
DEVICES = 8


def _schedule_and_costs(name: str, actions: int):
    from pipesim import get_schedule, uniform_costs

    chunks = SCHEDULES[name]
    per_microbatch = (3 if name == "zbv" else 2) * DEVICES * chunks  # F, B (or I, W) per stage
    microbatches = max(2 * DEVICES, actions // per_microbatch // DEVICES * DEVICES)
    schedule = get_schedule(name, DEVICES, microbatches, chunks)
    stages = schedule.model_stages

    def costs(scale: float):
        return uniform_costs(
            stages,
            [scale * (1.0 + s / 16) for s in range(stages)],
            backward_input_ms=1.0 * scale,
            backward_weight_ms=1.0,
            activation_bytes=1e6,
        )

    return schedule, costs


def _warm_up(numba: bool | str) -> float:
    """Seconds to get the compiled sweep ready in this process (0 without one). ``numba``:
    as ``EvaluatorCache`` takes ``compiled`` (True: the C loop where built, else numba's;
    "numba": numba's; False: Python's)."""
    from pipesim import EvaluatorCache, Link, Topology, simulate_with
    from pipesim.sim.fast.kernel import compiled_kernel

    begin = time.perf_counter()
    schedule, costs = _schedule_and_costs("zbv", 100)
    if compiled_kernel(numba) is None:
        return 0.0
    topology = Topology(DEVICES, default=Link(latency_us=5, bandwidth_gbps=100))
    cache = EvaluatorCache(compiled=numba)
    simulate_with(schedule, costs(1.0), topology, evaluator="fast", cache=cache)
    return time.perf_counter() - begin


def one_run(name: str, actions: int, numba: bool | str, engine: bool = True) -> dict:
    from pipesim import EvaluatorCache, Link, Topology, simulate, simulate_with
    from pipesim.cli.gc_pause import no_cyclic_gc

    warm_s = _warm_up(numba)
    schedule, costs = _schedule_and_costs(name, actions)
    topology = Topology(DEVICES, default=Link(latency_us=5, bandwidth_gbps=100))
    base, others = costs(1.0), [costs(scale) for scale in (1.25, 1.5, 1.75)]
    cache = EvaluatorCache(compiled=numba)  # held across the calls, as a planner holds one
    clock = time.perf_counter
    begin = clock()
    fast, which = simulate_with(schedule, base, topology, evaluator="fast", cache=cache)
    fast.lay_out()  # a fast Trace lays out its rows when first read: time them too
    first_s = clock() - begin
    again_s = float("inf")
    for other in others:  # the best of three repeat calls, each under other costs
        begin = clock()
        simulate_with(schedule, other, topology, evaluator="fast", cache=cache)[0].lay_out()
        again_s = min(again_s, clock() - begin)
    engine_s = float("nan")
    if engine:
        begin = clock()
        with no_cyclic_gc():  # as the engine always ran before the CLI took the pause
            reference = simulate(schedule, base, topology)
        engine_s = clock() - begin
        assert len(fast.end) == len(reference.end)
        assert abs(fast.makespan_ms - reference.makespan_ms) <= 1e-9 * reference.makespan_ms
    assert which == "fast" and cache.index_builds == 1
    n = schedule.num_actions
    return {
        "schedule": name,
        "actions": n,
        "warm_s": warm_s,
        "engine_s": engine_s,
        "first_s": first_s,
        "again_s": again_s,
    }


# glibc returns freed memory to the operating system and asks for it again on the next
# call, a page fault per page; these keep it in the process (both evaluators gain).
KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}
_ENV: dict[str, str] = {}


def _in_fresh_process(*args: str, env: dict | None = None) -> dict:
    env = {**os.environ, **_ENV, **(env or {})}
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout)


def compile_seconds() -> float:
    """numba's compile time for the sweep, measured with an empty cache (a new install)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {"NUMBA_CACHE_DIR": cache}
        run = ("--one", "zbv", "100", "--no-engine", "--numba")
        return _in_fresh_process(*run, env=env)["warm_s"]


def scenario_text(name: str, actions: int) -> str:
    """A scenario of ``name`` on DEVICES devices with about ``actions`` actions."""
    chunks = SCHEDULES[name]
    schedule, _ = _schedule_and_costs(name, actions)
    backward = (
        "backward_ms: 2.0" if name != "zbv" else "backward_input_ms: 1.0\n  backward_weight_ms: 1.0"
    )
    return (
        f"schema_version: 1\nname: e2e-{name}\npipeline:\n  schedule: {name}\n"
        f"  devices: {DEVICES}\n  microbatches: {schedule.microbatches}\n"
        f"  virtual_stages: {chunks}\n  microbatch_size: 1\n"
        f"costs:\n  forward_ms: 1.0\n  {backward}\n  activation_bytes: 1000000\n"
        "hardware:\n  link: {latency_us: 5, bandwidth_gbps: 100}\n"
    )


def _pipesim_run(path: str, evaluator: str, env: dict | None = None) -> tuple[float, dict]:
    """Wall seconds of ``pipesim run PATH --format json --evaluator E``, and its report."""
    env = {**os.environ, **_ENV, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(
        p
        for p in (
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            env.get("PYTHONPATH"),
        )
        if p
    )
    command = [sys.executable, "-m", "pipesim", "run", path, "--format", "json"]
    begin = time.perf_counter()
    done = subprocess.run(
        [*command, "--evaluator", evaluator], capture_output=True, text=True, check=True, env=env
    )
    return time.perf_counter() - begin, json.loads(done.stdout)


NO_C = {"PIPESIM_NO_NATIVE": "1"}  # the fast evaluator on numba's loop, not the C one


def end_to_end(size: int, repeat: int = 3) -> None:
    """``pipesim run`` as a process on each schedule, fast against the engine: with the C
    loop where the install built it (``fast``), and on numba's (``numba``)."""
    print(
        f"{'schedule':<18}{'actions':>9}{'engine s':>10}{'fast s':>9}{'x':>7}{'fast act/s':>13}"
        f"{'numba s':>9}{'x':>7}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name in SCHEDULES:
            path = os.path.join(folder, f"{name}.yaml")
            with open(path, "w") as file:
                file.write(scenario_text(name, size))
            _pipesim_run(path, "fast", NO_C)  # numba's cache and the files warm
            fast_s = numba_s = engine_s = float("inf")
            for _ in range(repeat):
                seconds, fast = _pipesim_run(path, "fast")
                fast_s = min(fast_s, seconds)
                numba_s = min(numba_s, _pipesim_run(path, "fast", NO_C)[0])
                seconds, engine = _pipesim_run(path, "simpy")
                engine_s = min(engine_s, seconds)
            assert fast["evaluator"] == "fast" and engine["evaluator"] == "simpy"
            assert abs(fast["makespan_ms"] - engine["makespan_ms"]) <= 1e-9 * engine["makespan_ms"]
            n, _ = _schedule_and_costs(name, size)
            n = n.num_actions
            print(
                f"{name:<18}{n:>9}{engine_s:>10.2f}{fast_s:>9.2f}{engine_s / fast_s:>7.1f}"
                f"{n / fast_s:>13,.0f}{numba_s:>9.2f}{engine_s / numba_s:>7.1f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=float, default=1e6)
    parser.add_argument("--no-numba", action="store_true", help="the sweep in plain Python")
    parser.add_argument("--numba", action="store_true", help="numba's loop, even where C is")
    parser.add_argument("--small", action="store_true", help="per-call time at 10^3, 10^4")
    parser.add_argument("--keep-memory", action="store_true", help="glibc keeps freed memory")
    parser.add_argument("--no-engine", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, metavar=("SCHEDULE", "ACTIONS"))
    parser.add_argument("--end-to-end", action="store_true", help="pipesim run as a process")
    parser.add_argument("--repeat", type=int, default=3, help="end to end: the least of N runs")
    args = parser.parse_args()
    flags = ["--no-numba"] if args.no_numba else ["--numba"] if args.numba else []
    compiled = False if args.no_numba else "numba" if args.numba else True
    if args.keep_memory:
        _ENV.update(KEEP_MEMORY)
    if args.one:
        row = one_run(args.one[0], int(args.one[1]), compiled, not args.no_engine)
        print(json.dumps(row))
        return
    if args.small:
        small(flags)
        return
    if args.end_to_end:
        end_to_end(int(args.max), args.repeat)
        return
    if not args.no_numba:
        print(f"numba: compiling the sweep (once per install) {compile_seconds():.2f} s")
    print(
        f"{'schedule':<18}{'actions':>9}{'engine/s':>11}{'first/s':>12}{'again/s':>12}"
        f"{'x first':>9}{'x again':>9}{'warm s':>8}"
    )
    for name in SCHEDULES:
        for size in [s for s in SIZES if s <= args.max]:
            row = _in_fresh_process("--one", name, str(size), *flags)
            n, engine_s = row["actions"], row["engine_s"]
            print(
                f"{name:<18}{n:>9}{n / engine_s:>11,.0f}{n / row['first_s']:>12,.0f}"
                f"{n / row['again_s']:>12,.0f}{engine_s / row['first_s']:>9.1f}"
                f"{engine_s / row['again_s']:>9.1f}{row['warm_s']:>8.2f}"
            )


def small(flags: list[str]) -> None:
    """Per-call time of a repeat call at 10^3 and 10^4 actions (a planner's case)."""
    print(f"{'schedule':<18}{'actions':>9}{'first ms':>10}{'again ms':>10}{'again/s':>12}")
    for name in SCHEDULES:
        for size in (10**3, 10**4):
            row = _in_fresh_process("--one", name, str(size), "--no-engine", *flags)
            n = row["actions"]
            print(
                f"{name:<18}{n:>9}{1e3 * row['first_s']:>10.2f}{1e3 * row['again_s']:>10.3f}"
                f"{n / row['again_s']:>12,.0f}"
            )


if __name__ == "__main__":
    main()
