"""Scenarios that name a searched policy (``zb-auto``, ``v-auto``, ``pipesim.search``).

Such a scenario is built in two steps: a fixed recipe of the same family (same placement,
so the same costs and links) stands in while the costs and topology are built, then the
search runs on them and its schedule replaces the stand-in. A limit the family cannot
reach is one ScenarioError line naming the minimum.
"""

from __future__ import annotations

from collections.abc import Callable

from pipesim.scenario.schema import Mode, PipelineSpec, ScenarioError
from pipesim.schedules.ir import Schedule
from pipesim.search import AUTO_POLICIES, SearchError, SearchResult, search_schedule
from pipesim.search.auto import FAMILIES
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology


def stand_in(pipe: PipelineSpec, source: str) -> str:
    """The policy that shapes the scenario until the search runs (``pipe.schedule`` itself
    when it is a fixed policy); a memory limit without a searched policy is an error."""
    name = pipe.schedule
    if name not in AUTO_POLICIES:
        if pipe.memory_limit_bytes is not None:
            raise ScenarioError(
                f"{source}: pipeline.memory_limit_bytes: only used with schedule "
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


def check_size(pipe: PipelineSpec, microbatches: int, source: str) -> None:
    """The search's own size guard (a searched policy only): refuse more than
    ``SEARCH_MAX_ACTIONS`` actions unless ``pipeline.max_actions`` is given."""
    if pipe.schedule not in AUTO_POLICIES or "max_actions" in pipe.model_fields_set:
        return
    actions = (pipe.devices or 1) * microbatches * AUTO_POLICIES[pipe.schedule] * 3
    if actions > SEARCH_MAX_ACTIONS:
        raise ScenarioError(
            f"{source}: pipeline: {pipe.schedule} would search a schedule of {actions:,} "
            f"actions, over the search limit of {SEARCH_MAX_ACTIONS:,} (it takes minutes); "
            "set pipeline.max_actions to search anyway"
        )


def search(
    pipe: PipelineSpec,
    schedule: Schedule,
    costs: Costs,
    topology: Topology,
    source: str,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Search the scenario's policy on its costs and links, under its memory limit."""
    try:
        return search_schedule(
            pipe.schedule,
            schedule.devices,
            schedule.microbatches,
            costs,
            topology,
            pipe.memory_limit_bytes,
            progress,
        )
    except SearchError as exc:
        line = str(exc).strip().splitlines()[0]
        raise ScenarioError(f"{source}: pipeline.memory_limit_bytes: {line}") from None
