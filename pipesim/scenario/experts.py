"""What ``model.moe`` and ``parallel.expert`` say of each other, checked at the edge, and
``model.moe`` as the cost model reads it.

Expert parallelism (``pipesim.cluster.expert_parallel``) spreads the routed experts over
``parallel.expert`` ranks carved out of the data- and context-parallel ranks, as
Megatron-Core does, so the degree must divide the expert slots (the experts, or with
redundant experts the experts plus those), fit in the job's GPUs and divide ``data x
context``; with ``parallel.expert_tensor`` each expert is split that many ways, which must
divide its width, and the expert groups (``expert x expert_tensor``) must tile the ``tensor
x context x data`` ranks of a stage. An ``expert_tensor`` below ``tensor`` folds the spare
tensor-parallel ranks into the expert groups (Megatron-Core's MoE parallel folding: TP 2
with expert_tensor 1 and 32 data-parallel ranks takes EP 64), so there the tiling alone is
asked for. A measured routing histogram has one count per expert.
A serving replica (``pipesim serve``) has no data-parallel ranks: its ``parallel.expert``
ranks are carved out of each pipeline stage's ``parallel.tensor`` GPUs (vLLM's
``--enable-expert-parallel``), each expert split ``tensor / expert`` ways
(``pipesim.cluster.inference_moe``), so the degree must fit the replica's GPUs, divide
the experts and divide ``parallel.tensor``; routing is uniform and no slot redundant.
Each problem is one ScenarioError line naming the key and what is allowed.
"""

from __future__ import annotations

from pipesim.cluster.moe import MoE
from pipesim.cluster.routing import Routing
from pipesim.scenario.schema import ModelSpec, ScenarioError, ScenarioSpec


def moe_of(m: ModelSpec) -> MoE | None:
    """``model.moe`` with its experts' width (``model.ffn_hidden`` where not given) and its
    routing."""
    if m.moe is None:
        return None
    moe = m.moe.model_dump()
    if moe["expert_ffn_hidden"] is None:
        moe["expert_ffn_hidden"] = m.ffn_hidden or 4 * m.hidden
    routing = moe.pop("routing")
    if routing["histogram"] is not None:
        routing["histogram"] = tuple(routing["histogram"])
    return MoE(**moe, routing=Routing(**routing))


def check_expert_parallel(spec: ScenarioSpec, source: str) -> None:
    """ScenarioError for the first problem the module docstring names, if any."""
    problem = _routing_problem(spec.model) or _parallel_problem(spec)
    if problem is not None:
        raise ScenarioError(f"{source}: {problem}")


def _routing_problem(m: ModelSpec) -> str | None:
    if m.moe is None:
        return None
    routing, experts = m.moe.routing, m.moe.experts
    key = "model.moe.routing.histogram"
    if routing.kind == "histogram":
        counts = routing.histogram
        if counts is None:
            return f"{key}: required with kind: histogram (one count per expert)"
        if len(counts) != experts:
            return (
                f"{key}: {len(counts)} counts for model.moe.experts ({experts}); allowed: "
                f"one count per expert, {experts} of them"
            )
        if not sum(counts) > 0:
            return f"{key}: every count is 0; allowed: counts >= 0, at least one above 0"
    elif routing.histogram is not None:
        return f"{key}: only used with kind: histogram (got kind: {routing.kind})"
    return None


def _parallel_problem(spec: ScenarioSpec) -> str | None:
    m, par = spec.model, spec.parallel
    ep, given = par.expert, par.expert_tensor
    if m.moe is None:
        if ep > 1 or given is not None:
            key = "expert" if ep > 1 else "expert_tensor"
            return f"parallel.{key}: needs model.moe (a mixture-of-experts model); allowed: 1"
        return None
    if spec.serving is not None:
        return _serving_problem(spec)
    experts, redundant = m.moe.experts, m.moe.redundant_experts
    if redundant and (experts + redundant) % ep:
        return (
            f"model.moe.redundant_experts: experts + redundant_experts = {experts} + "
            f"{redundant} = {experts + redundant} is not a multiple of parallel.expert "
            f"({ep}); allowed: a count that makes it one, e.g. {-experts % ep or ep}"
        )
    if not redundant and experts % ep:
        return (
            f"parallel.expert: {ep} does not divide model.moe.experts ({experts}); "
            f"allowed: {_divisors(experts)}"
        )
    replicas = par.data * par.context
    gpus = replicas * par.tensor * (spec.pipeline.devices or 1)
    if ep > gpus:
        return (
            f"parallel.expert: {ep} expert-parallel ranks, but the job has {gpus} GPUs "
            "(pipeline.devices x parallel.tensor x parallel.context x parallel.data); "
            f"allowed: at most {gpus}"
        )
    folds_tensor = given is not None and given < par.tensor
    if replicas % ep and not folds_tensor:
        return (
            f"parallel.expert: {ep} does not divide parallel.data x parallel.context "
            f"({par.data} x {par.context} = {replicas}), whose ranks the expert-parallel "
            f"groups are carved out of; allowed: {_divisors(replicas)}"
        )
    return _expert_tensor_problem(spec)


def _serving_problem(spec: ScenarioSpec) -> str | None:
    """A serving replica's experts (module docstring)."""
    moe, par = spec.model.moe, spec.parallel
    ep, tensor, stages = par.expert, par.tensor, spec.pipeline.devices or 1
    if par.expert_tensor is not None:
        return (
            "parallel.expert_tensor: not used by pipesim serve (each expert is split "
            "parallel.tensor / parallel.expert ways); leave it out"
        )
    if moe.routing.kind != "uniform" or moe.redundant_experts:
        key = "routing.kind" if moe.routing.kind != "uniform" else "redundant_experts"
        allowed = "uniform" if key == "routing.kind" else "0"
        return f"model.moe.{key}: pipesim serve models uniform routing only; allowed: {allowed}"
    if ep > tensor * stages:
        return (
            f"parallel.expert: {ep} expert-parallel ranks, but a replica has {tensor * stages} "
            f"GPUs (parallel.tensor x pipeline.devices = {tensor} x {stages}); allowed: at "
            f"most {tensor}, a divisor of parallel.tensor"
        )
    if moe.experts % ep:
        return (
            f"parallel.expert: {ep} does not divide model.moe.experts ({moe.experts}); "
            f"allowed: {_divisors(moe.experts)}"
        )
    if tensor % ep:
        return (
            f"parallel.expert: {ep} ranks do not divide parallel.tensor ({tensor}), the GPUs "
            f"of a pipeline stage the experts are spread over; allowed: {_divisors(tensor)}"
        )
    return None


def _expert_tensor_problem(spec: ScenarioSpec) -> str | None:
    m, par = spec.model, spec.parallel
    width = m.moe.expert_ffn_hidden or m.ffn_hidden or 4 * m.hidden
    split = par.expert_tensor or par.tensor
    if width % split:
        key = "expert_tensor" if par.expert_tensor is not None else "tensor"
        return (
            f"parallel.{key}: {split} does not divide model.moe.expert_ffn_hidden "
            f"({width}); allowed: {_divisors(width)}"
        )
    ranks = par.tensor * par.context * par.data
    if ranks % (par.expert * split):
        return (
            f"parallel.expert_tensor: expert x expert_tensor = {par.expert} x {split} does "
            f"not divide tensor x context x data = {par.tensor} x {par.context} x "
            f"{par.data} = {ranks} (the ranks of a stage the expert groups tile)"
        )
    return None


def _divisors(number: int) -> str:
    if number > 4096:
        return f"a divisor of {number}"
    found = [k for k in range(1, number + 1) if number % k == 0]
    return ", ".join(map(str, found[:12])) + (", ..." if len(found) > 12 else "")


__all__ = ["check_expert_parallel", "moe_of"]
