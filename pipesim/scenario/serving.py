"""From a scenario with a ``serving:`` section to what the serving engine runs.

A serving scenario reuses the training scenario's sections: ``pipeline.devices`` is the
pipeline size of one replica, ``parallel.tensor`` its tensor size, ``parallel.expert`` how
many of each stage's tensor GPUs a mixture-of-experts model's routed experts are spread
over (``pipesim.cluster.inference_moe``; 1: every expert split ``tensor`` ways),
``hardware`` the GPUs and links, ``model`` the transformer (dense or MoE; grouped-query or
multi-head latent attention). ``serving`` adds the traffic and the scheduler.
What an iteration costs on each stage comes from one of three places:

* hand-typed: ``costs.prefill_ms`` (a whole prompt of ``decode.prompt_tokens`` tokens
  through one stage) and ``costs.decode_ms`` (one decode step through one stage); an
  iteration costs ``prefill_ms * prefill tokens / prompt_tokens``, plus ``decode_ms`` when
  it decodes, and a hop between stages (and the way back from the last to the first)
  costs the link's latency (hand-typed costs carry no message sizes). Without a model there is no memory to size the KV cache from:
  ``serving.kv_blocks`` gives it, else the engine's default;
* a profile (``costs: {profile: FILE}``) with ``prefill`` and ``decode`` timings per
  stage, used as hand-typed figures measured at ``decode.prompt_tokens``;
* a model (``model:`` and ``hardware.gpu``): every iteration's stage time is
  ``pipesim.cluster.inference.stage_iteration_ms`` for that batch, each hop the
  link time of its hidden states, the way back the link time of the sampled token ids,
  and the KV cache whatever memory ``gpu_memory_utilization`` leaves once the weights are
  loaded (``kv_capacity_tokens``, with the layers split as ``model.partition`` says, so
  the most loaded stage limits it), unless ``serving.kv_blocks`` overrides it.

GPUs are laid out replica after replica, each replica's stages in order and each stage's
``tensor`` GPUs side by side, so stage ``s`` of replica ``r`` sits on node
``(r * pipeline + s) * tensor // gpus_per_node`` (or as ``hardware.placement`` says: one
node per stage, the same for every replica, or one per stage of every replica in turn).
Each replica's hops use its own links: a replica inside one node pays the intra-node link
where one that spans two pays the inter-node link, and the sampled tokens' way back from
the last stage to the first crosses whatever joins those two. Every problem is one
ScenarioError naming the file and the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.inference import ServingCosts, kv_capacity_tokens
from pipesim.scenario import derive
from pipesim.scenario.arrivals import generate_requests
from pipesim.scenario.build import parse_spec
from pipesim.scenario.load import apply_overrides, read_mapping
from pipesim.scenario.profile import ProfileError, load_profile
from pipesim.scenario.schema import ScenarioError, ScenarioSpec, per_stage_costs
from pipesim.scenario.serving_links import replica_links
from pipesim.scenario.serving_schema import SloSpec
from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.metrics import summarize
from pipesim.serving.model_costs import ModelIterationCosts
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.report import ServeReport
from pipesim.serving.request import Request
from pipesim.serving.results import ServeResult

HAND_KEYS = frozenset({"prefill_ms", "decode_ms"})


@dataclass(frozen=True, slots=True)
class ServingScenario:
    """A checked serving scenario: the engine's configuration, the requests, the spec they
    were built from (its name and SLO with it), and where the costs came from
    (``hand-typed``, ``profile`` or ``model``)."""

    config: ServeConfig
    requests: tuple[Request, ...]
    spec: ScenarioSpec
    source: str
    costs_from: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def slo(self) -> SloSpec:
        return self.spec.serving.slo


def load_serving(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ServingScenario:
    """Read, override, validate and build a serving scenario file."""
    data = apply_overrides(read_mapping(path), list(overrides))
    return build_serving(parse_spec(data, str(path)), str(path))


def build_serving(spec: ScenarioSpec, source: str) -> ServingScenario:
    """The engine's inputs for a validated spec (ScenarioError on anything that cannot
    run)."""
    config, costs_from = serve_config(spec, source)
    requests = generate_requests(spec.serving.workload, Path(source).parent, source)
    return ServingScenario(config, tuple(requests), spec, source, costs_from)


def serve_config(spec: ScenarioSpec, source: str) -> tuple[ServeConfig, str]:
    """The replicas' configuration and where its costs came from."""
    _check_sections(spec, source)
    serving = spec.serving
    if spec.model is not None:
        replica_costs, capacity_blocks = _model_costs(spec, source)
        costs_from = "model"
    else:
        if serving.cuda_graphs:
            raise ScenarioError(
                f"{source}: serving.cuda_graphs: only with a model section (typed or profiled "
                "costs are taken as measured)"
            )
        replica_costs, costs_from, capacity_blocks = _typed_costs(spec, source), "hand-typed", None
        if spec.costs.profile is not None:
            costs_from = "profile"
    costs = replica_costs[0]
    blocks = serving.kv_blocks or capacity_blocks
    stages = costs.stages
    if blocks is not None and blocks < stages:
        field = "kv_blocks" if serving.kv_blocks else "block_size"
        raise ScenarioError(
            f"{source}: serving.{field}: {blocks} KV blocks for {stages} pipeline stages; "
            f"each stage's virtual engine needs at least one"
        )
    extra = {} if blocks is None else {"kv_blocks": blocks}
    try:
        replica = ReplicaConfig(
            costs,
            max_num_seqs=serving.max_num_seqs,
            max_num_batched_tokens=serving.max_num_batched_tokens,
            chunked_prefill=serving.chunked_prefill,
            block_size=serving.block_size,
            **extra,
        )
        same = all(c == costs for c in replica_costs)
        config = ServeConfig(
            replica,
            serving.replicas,
            serving.router,
            () if same else tuple(replica_costs),
            scheduler=serving.scheduler,
        )
        return config, costs_from
    except ValueError as exc:
        raise ScenarioError(f"{source}: serving.{exc}") from None


# ---------------------------------------------------------------------------
# Sections


def pipeline_size(spec: ScenarioSpec) -> int:
    return spec.pipeline.devices or 1


def _check_sections(spec: ScenarioSpec, source: str) -> None:
    if spec.serving is None:
        raise ScenarioError(
            f"{source}: serving: required by pipesim serve (workload, replicas, max_num_seqs, "
            "...); see the README's pipesim serve section"
        )
    if spec.variability is not None:
        raise ScenarioError(f"{source}: variability: not supported by pipesim serve")
    par = spec.parallel
    for key in ("data", "zero_stage"):
        if key in par.model_fields_set:
            raise ScenarioError(
                f"{source}: parallel.{key}: not used by pipesim serve (give serving.replicas "
                "for copies of the model)"
            )
    if spec.model is None and "tensor" in par.model_fields_set:
        raise ScenarioError(
            f"{source}: parallel.tensor: only used with a model section (hand-typed costs "
            "are already per stage)"
        )
    _check_gpu_count(spec, source)


def _check_gpu_count(spec: ScenarioSpec, source: str) -> None:
    """All replicas on one node unless an inter-node link says how nodes are joined."""
    hw, serving = spec.hardware, spec.serving
    per_node = hw.gpus_per_node
    if per_node is None or hw.inter_node_link is not None or hw.placement is not None:
        return
    p, t, r = pipeline_size(spec), spec.parallel.tensor, serving.replicas
    if r * p * t <= per_node:
        return
    key = "serving.replicas" if p * t <= per_node else "pipeline.devices"
    raise ScenarioError(
        f"{source}: {key}: {r} replicas x {p} pipeline stages x {t} tensor GPUs = {r * p * t} "
        f"GPUs, more than one node of hardware.gpus_per_node={per_node}; give "
        "hardware.inter_node_link to use more nodes"
    )


# ---------------------------------------------------------------------------
# Hand-typed and profiled costs


def _typed_costs(spec: ScenarioSpec, source: str) -> list[HandTypedCosts]:
    """One cost model per replica: the same stage times, each replica's own link latencies."""
    stages = pipeline_size(spec)
    if spec.costs.profile is not None:
        prefill, decode = _profile_figures(spec, stages, source)
    else:
        extra = sorted(spec.costs.model_fields_set - HAND_KEYS)
        if extra:
            raise ScenarioError(
                f"{source}: costs.{extra[0]}: not used by pipesim serve; allowed: "
                "prefill_ms, decode_ms (or a model section, or costs.profile)"
            )
        prefill = _per_stage(spec.costs.prefill_ms, "prefill_ms", stages, source)
        decode = _per_stage(spec.costs.decode_ms, "decode_ms", stages, source)
    prompt = _reference_prompt(spec, source)
    return [
        HandTypedCosts(
            tuple(prefill), tuple(decode), prompt, tuple(link.latency_ms for link in links)
        )
        for links in replica_links(spec, stages, source)
    ]


def _per_stage(value, key: str, stages: int, source: str) -> list[float]:
    if value is None:
        raise ScenarioError(
            f"{source}: costs.{key}: required by pipesim serve without a model section "
            "(a number, or one per pipeline stage)"
        )
    return list(per_stage_costs(value, stages, key, source, "one per stage of pipeline.devices"))


def _reference_prompt(spec: ScenarioSpec, source: str) -> int:
    """The prompt length ``prefill_ms`` is for: ``decode.prompt_tokens``, else a fixed
    workload prompt length."""
    if spec.decode is not None:
        return spec.decode.prompt_tokens
    prompt = spec.serving.workload.prompt_tokens
    if isinstance(prompt, int):
        return prompt
    raise ScenarioError(
        f"{source}: decode.prompt_tokens: required with costs.prefill_ms and prompts of "
        "varying length (the prompt length prefill_ms is for)"
    )


def _profile_figures(spec: ScenarioSpec, stages: int, source: str) -> tuple[list, list]:
    others = sorted(spec.costs.model_fields_set - {"profile"})
    if others:
        raise ScenarioError(
            f"{source}: costs.{others[0]}: not allowed with costs.profile (the profile gives "
            "every cost)"
        )
    try:
        timings = load_profile(Path(source).parent / spec.costs.profile).stages
        if len(timings) == 1:
            timings = timings * stages
        if len(timings) != stages:
            raise ProfileError(f"{len(timings)} stages, the scenario has {stages} (or give 1)")
        figures = [(t.median_ms("prefill"), t.median_ms("decode")) for t in timings]
    except (ProfileError, ValueError) as exc:
        raise ScenarioError(f"{source}: costs.profile: {str(exc).splitlines()[0]}") from None
    if any(p is None or d is None for p, d in figures):
        raise ScenarioError(
            f"{source}: costs.profile: every stage needs prefill and decode timings for "
            "pipesim serve"
        )
    return [p for p, _ in figures], [d for _, d in figures]


# ---------------------------------------------------------------------------
# Costs from the model


def _model_costs(spec: ScenarioSpec, source: str) -> tuple[list[ModelIterationCosts], int]:
    """The model's iteration costs, one per replica, and the KV capacity in blocks."""
    hw, par, serving = spec.hardware, spec.parallel, spec.serving
    if hw.gpu is None:
        raise ScenarioError(f"{source}: hardware.gpu: required with a model section")
    typed = sorted(spec.costs.model_fields_set)
    if typed:
        raise ScenarioError(
            f"{source}: costs.{typed[0]}: not allowed with a model section (costs are derived "
            "from the model)"
        )
    derive.check_tensor_parallel(spec, source)
    stages = pipeline_size(spec)
    job = derive.build_job(spec, source)
    model, partition = job.model, derive.split_layers(job, stages, source)
    gpu = gpu_profile(hw.gpu)
    try:
        tokens = kv_capacity_tokens(
            model,
            gpu,
            tensor=par.tensor,
            pipeline=stages,
            gpu_memory_utilization=serving.gpu_memory_utilization,
            partition=partition,
        )
    except ValueError as exc:
        raise ScenarioError(f"{source}: model: {str(exc).splitlines()[0]}") from None
    intra, _ = job.hardware.node_links()
    efficiency = job.efficiency  # as decode mode and training read model.efficiency
    costs = [
        ModelIterationCosts(
            model=model,
            partition=partition,
            gpu=gpu,
            tensor=par.tensor,
            tensor_link=intra if par.tensor > 1 else None,
            efficiency=efficiency,
            links=tuple(links[: stages - 1]),
            back_link=links[-1] if stages > 1 else None,
            serving_costs=ServingCosts(cuda_graphs=serving.cuda_graphs),
            expert=par.expert,
        )
        for links in replica_links(spec, stages, source)
    ]
    return costs, math.floor(tokens / serving.block_size)


# ---------------------------------------------------------------------------
# Running


@dataclass(frozen=True, slots=True)
class ServeRun:
    """A serving scenario, what the engine recorded, and its report under the SLO."""

    scenario: ServingScenario
    result: ServeResult
    report: ServeReport


def run_serving(
    scenario: ServingScenario, progress: Callable[[int], None] | None = None
) -> ServeRun:
    """Serve the scenario's requests and summarise; ``progress(1)`` per request done."""
    result = simulate_serving(scenario.config, scenario.requests, progress=progress)
    slo = scenario.slo
    return ServeRun(scenario, result, summarize(result, slo.ttft_ms, slo.tpot_ms))
