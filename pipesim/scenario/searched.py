"""Scenarios that name a searched policy (``zb-auto``, ``v-auto``, ``pipesim.search``).

Such a scenario is built in two steps: a fixed recipe of the same family (same placement,
so the same costs and links) stands in while the costs and topology are built, then the
search runs on them and its schedule replaces the stand-in. A limit the family cannot
reach is one ScenarioError line naming the minimum. With a model and data parallelism, the
search counts each device's end-of-step all-reduce as the engine runs it (after the flush,
or overlapped with ``parallel.dp_overlap``). ``pipeline.search: exact`` runs the
constraint program after the heuristic (``pipesim.search.exact``; OR-Tools, an extra).
"""

from __future__ import annotations

from collections.abc import Callable

import pipesim.search as searching  # the search itself loads when a scenario searches
from pipesim.scenario.schema import Mode, PipelineSpec, ScenarioError
from pipesim.schedules.ir import Schedule
from pipesim.search import AUTO_POLICIES, FAMILIES, ExactUnavailable, SearchError, SearchResult
from pipesim.search.tail import Tail
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology


def stand_in(pipe: PipelineSpec, source: str) -> str:
    """The policy that shapes the scenario until the search runs (``pipe.schedule`` itself
    when it is a fixed policy); a memory limit without a searched policy is an error."""
    name = pipe.schedule
    if name not in AUTO_POLICIES:
        given = {"memory_limit_bytes", "search", "search_time_limit_s"} & pipe.model_fields_set
        if given:
            raise ScenarioError(
                f"{source}: pipeline.{min(given)}: only used with schedule "
                f"{' or '.join(AUTO_POLICIES)}"
            )
        return name
    if pipe.mode == Mode.FORWARD:
        raise ScenarioError(f"{source}: pipeline.mode: {name} searches training schedules only")
    if pipe.virtual_stages != AUTO_POLICIES[name]:
        raise ScenarioError(
            f"{source}: pipeline.virtual_stages: {name} takes virtual_stages = "
            f"{AUTO_POLICIES[name]}, got {pipe.virtual_stages}"
        )
    return FAMILIES[name][0]


# A search runs the engine dozens of times and its own construction in Python: past this
# many actions it takes minutes, so it runs only where pipeline.max_actions is set.
SEARCH_MAX_ACTIONS = 500_000
# The exact mode's program holds a few variables and constraints per action: past this
# many it takes gigabytes before the solver starts.
EXACT_MAX_ACTIONS = 20_000


def check_size(pipe: PipelineSpec, microbatches: int, source: str) -> None:
    """The search's own size guard (a searched policy only): refuse more than
    ``SEARCH_MAX_ACTIONS`` actions (``EXACT_MAX_ACTIONS`` in exact mode) unless
    ``pipeline.max_actions`` is given."""
    if pipe.schedule not in AUTO_POLICIES or "max_actions" in pipe.model_fields_set:
        return
    actions = (pipe.devices or 1) * microbatches * AUTO_POLICIES[pipe.schedule] * 3
    exact = pipe.search == "exact"
    most = EXACT_MAX_ACTIONS if exact else SEARCH_MAX_ACTIONS
    if actions > most:
        what = "an exact search's constraint program" if exact else "the search"
        raise ScenarioError(
            f"{source}: pipeline: {pipe.schedule} would search a schedule of {actions:,} "
            f"actions, over the limit of {most:,} for {what} (it takes minutes and "
            "gigabytes); set pipeline.max_actions to search anyway"
        )


def search(
    pipe: PipelineSpec,
    schedule: Schedule,
    costs: Costs,
    topology: Topology,
    source: str,
    progress: Callable[[int], None] | None = None,
    tail: Tail | None = None,
) -> SearchResult:
    """Search the scenario's policy on its costs and links, under its memory limit, with
    its end-of-step tail counted (``tail``); ``pipeline.search: exact`` runs the
    constraint program after the heuristic, for ``pipeline.search_time_limit_s``."""
    args = (pipe.schedule, schedule.devices, schedule.microbatches, costs, topology)
    try:
        if pipe.search == "exact":
            return searching.exact_schedule(
                *args,
                pipe.memory_limit_bytes,
                progress,
                tail,
                time_limit_s=pipe.search_time_limit_s,
            )
        return searching.search_schedule(*args, pipe.memory_limit_bytes, progress, tail)
    except ExactUnavailable as exc:
        raise ScenarioError(f"{source}: pipeline.search: {exc}") from None
    except SearchError as exc:
        line = str(exc).strip().splitlines()[0]
        raise ScenarioError(f"{source}: pipeline.memory_limit_bytes: {line}") from None
