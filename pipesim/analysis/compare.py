"""One scenario under several schedules, side by side.

Schedules differ in how many model chunks each device holds: 1F1B one, interleaved 1F1B
two or more, the V shapes exactly two. To compare them on the same model, each schedule
runs at the chunk count it needs (``pipesim.schedules.fit_virtual_stages``), and
``scenario_for_schedule`` cuts the same model finer or coarser:

* with a ``model`` section, the costs are derived per chunk from the model anyway;
* with hand-typed costs, which are per chunk, scalar costs are scaled by old/new chunks
  so every schedule does the same work (per-stage lists cannot be re-cut: an error), and
  the note says so;
* a profile times a fixed cut: a schedule that needs another one cannot run.

``pipesim compare`` and the sweeps (a ``pipeline.schedule`` grid) share this recipe.

The searched policies (``zb-auto``, ``v-auto``: ``pipesim.search``) are cut the same way,
at the chunk count they search for, and stand beside the fixed recipes: their rows carry
the memory limit they searched under and the peak they reached.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pipesim.analysis.errors import CompareError
from pipesim.analysis.monte_carlo import Progress
from pipesim.analysis.run import Result, memory_capacity_bytes, run_scenario
from pipesim.scenario.build import Scenario, build_scenario, parse_spec, with_schedule
from pipesim.scenario.schema import Mode, ScenarioError
from pipesim.scenario.vary import vary
from pipesim.schedules import POLICIES, fit_virtual_stages
from pipesim.schedules.ir import ScheduleError
from pipesim.search import AUTO_POLICIES
from pipesim.sim.engine import DeadlockError


def scenario_for_schedule(data: dict, source: str, name: str | None = None) -> tuple[Scenario, str]:
    """Build the scenario mapping ``data`` (read from ``source``) under schedule ``name``
    (None: as written), at the number of virtual stages that schedule needs.

    Returns the Scenario and a note on what changed ("" when nothing did). A fixed policy
    runs without the scenario's ``pipeline.memory_limit_bytes``: that limit is what the
    searched policies search under, and a fixed recipe holds what it holds.
    """
    note = ""
    if name is not None:
        data, note = _rechunk(data, source, name)
        if name not in AUTO_POLICIES and isinstance(data.get("pipeline"), dict):
            data = vary(data, {}, drop=("pipeline.memory_limit_bytes",), source=source)
    return build_scenario(parse_spec(data, source), source), note


def known_schedules() -> tuple[str, ...]:
    """Every name a comparison accepts: the fixed policies, then the searched ones."""
    return (*POLICIES, *AUTO_POLICIES)


def chunks_for(name: str, requested: int) -> int:
    """The virtual stages ``name`` runs with: a searched policy's own count, else the fixed
    policy's fit (``pipesim.schedules.fit_virtual_stages``)."""
    if name in AUTO_POLICIES:
        return AUTO_POLICIES[name]
    return fit_virtual_stages(name, requested)


def default_schedules(data: dict) -> list[str]:
    """What ``pipesim compare`` runs when no schedule is named: every fixed policy, then
    the searched ones where the scenario trains (a forward-only step has no backward
    order to search)."""
    pipeline = data.get("pipeline")
    mode = pipeline.get("mode", "train") if isinstance(pipeline, dict) else "train"
    return [*POLICIES, *(AUTO_POLICIES if mode == Mode.TRAIN else ())]


def _rechunk(data: dict, source: str, name: str) -> tuple[dict, str]:
    pipeline = data.get("pipeline")
    old = pipeline.get("virtual_stages", 1) if isinstance(pipeline, dict) else None
    known = isinstance(name, str) and name in known_schedules()
    if not known or not isinstance(old, int) or isinstance(old, bool) or old < 1:
        if isinstance(pipeline, dict):  # validation will name what is wrong
            data = vary(data, {"pipeline.schedule": name}, source=source)
        return data, ""
    new = chunks_for(name, old)
    if new == old or "model" in data:
        data = vary(
            data, {"pipeline.schedule": name, "pipeline.virtual_stages": new}, source=source
        )
        cut = f"virtual_stages={new}, costs derived from the model"
        return data, (cut if new != old else "")
    costs = data.get("costs")
    if isinstance(costs, dict) and "profile" in costs:
        raise ScenarioError(
            f"{source}: costs.profile: times virtual_stages={old}; {name} needs {new}"
        )
    data, _ = with_schedule(data, name)
    return data, f"virtual_stages={new}, hand-typed per-chunk costs x{old}/{new}"


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One schedule of a comparison: its Result, or the reason it could not run."""

    schedule: str
    result: Result | None = None
    note: str = ""
    error: str = ""
    rank: int | None = None  # by p50 makespan, then p99 (Monte Carlo comparisons only)

    def to_dict(self) -> dict:
        if self.result is None:
            return {"schedule": self.schedule, "error": self.error}
        report = self.result.report
        data = {
            "schedule": report.schedule,
            "makespan_ms": report.makespan_ms,
            "bubble_fraction": report.bubble_fraction,
            "span_bubble_rate": report.span_bubble_rate,
            "samples_per_second": report.samples_per_second,
            "peak_activation_bytes": [d.peak_activation_bytes for d in report.per_device],
            # as pipesim run reports them: weights, gradients and optimizer states; those
            # plus the peak activations; whether that passes the GPU's memory anywhere
            "static_memory_bytes": [d.static_memory_bytes for d in report.per_device],
            "runtime_memory_bytes": [d.runtime_memory_bytes for d in report.per_device],
            "peak_memory_bytes": [d.peak_memory_bytes for d in report.per_device],
            "oom": report.oom,
            "memory_capacity_bytes": memory_capacity_bytes(self.result.scenario),
            "note": self.note,
            "error": "",
        }
        search = self.result.search
        if search is not None:
            data.update(
                memory_limit_bytes=search.limit_bytes,
                search_candidates=search.candidates,
                search_seconds=search.seconds,
            )
        if self.result.monte_carlo is not None:
            data.update(self.result.monte_carlo.to_dict())
        if self.rank is not None:
            data["rank"] = self.rank
        return data


@dataclass(frozen=True, slots=True)
class Comparison:
    """Rows in the order asked for, or ranked when every schedule ran a Monte Carlo study."""

    rows: tuple[CompareRow, ...]
    ranked: bool = False

    @property
    def results(self) -> tuple[Result, ...]:
        return tuple(row.result for row in self.rows if row.result is not None)

    @property
    def rescaled(self) -> tuple[CompareRow, ...]:
        """Rows whose hand-typed per-chunk costs were scaled to a new chunk count."""
        return tuple(row for row in self.rows if "per-chunk costs" in row.note)

    def to_dicts(self) -> list[dict]:
        return [row.to_dict() for row in self.rows]


def compare_schedules(
    data: dict,
    source: str,
    names: Sequence[str] | None = None,
    *,
    runs: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    evaluator: str = "auto",
) -> Comparison:
    """Run the scenario mapping ``data`` under each schedule in ``names`` (None: every
    fixed policy and, for a training step, ``zb-auto`` and ``v-auto``).

    A schedule that cannot run (a broken constraint, a deadlock) is a row with its reason.
    With ``runs``, each also runs a Monte Carlo study and the rows are ranked by p50
    makespan, then p99 (rows that did not run last). ``progress(n)``: n more steps done.
    ``evaluator``: as for ``run_scenario`` (a schedule ``fast`` cannot run is a row with
    the reason).
    """
    names = list(dict.fromkeys(default_schedules(data) if names is None else names))
    if not names:
        raise CompareError("no schedule to compare; name at least one, e.g. gpipe,1f1b")
    unknown = [n for n in names if n not in known_schedules()]
    if unknown:
        allowed = ", ".join(known_schedules())
        raise CompareError(f"unknown schedule {unknown[0]!r}; allowed: {allowed}")
    rows = []
    for name in names:
        try:
            scenario, note = scenario_for_schedule(data, source, name)
            result = run_scenario(
                scenario, runs=runs, seed=seed, progress=progress, evaluator=evaluator
            )
        except (ScenarioError, ScheduleError, DeadlockError) as exc:
            reason = str(exc).splitlines()[0].removeprefix(f"{source}: ")
            rows.append(CompareRow(name, error=reason))
            if progress is not None and runs is not None:
                progress(runs)
            continue
        rows.append(CompareRow(name, result, note))
    if runs is None:
        return Comparison(tuple(rows))
    return Comparison(_ranked(rows), ranked=True)


def _ranked(rows: list[CompareRow]) -> tuple[CompareRow, ...]:
    """Order by p50 makespan, ties by p99 (rows that did not run last), and number them."""
    ran = [row for row in rows if row.result is not None]
    ran.sort(
        key=lambda row: (
            row.result.monte_carlo.makespan_ms.p50,
            row.result.monte_carlo.makespan_ms.p99,
        )
    )
    numbered = [replace(row, rank=rank) for rank, row in enumerate(ran, start=1)]
    return tuple(numbered + [row for row in rows if row.result is None])
