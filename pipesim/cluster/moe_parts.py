"""A MoE stage's passes cut into sub-layer parts: attention, dispatch, experts, combine.

``pipesim.cluster.expert_parallel`` names what expert parallelism adds to each stage: its
MoE layers' all-to-alls and routed-expert GEMMs. Here each stage's passes are laid out
layer by layer as the chains ``pipesim.sim.sublayers`` runs on two streams:

* forward, layer by layer: attention, dispatch, experts, combine; the stage's dense layers
  and embedding join its first attention, its LM head (and MTP projections) close it;
* input-gradient backward, layers in reverse: the head's backward, then per layer
  combine's gradient, the experts' backward, dispatch's gradient, attention's backward,
  the dense layers' backward joining the last attention. With recomputation each layer
  first runs its forward again (attention, dispatch, experts, combine), as Megatron-LM
  recomputes layer by layer just before the layer's backward;
* the weight gradient beside each backward compute part: the experts' beside the
  experts' backward, the rest beside attention's.

The routed experts' times are the stage's own (``ExpertParallelCosts.experts_ms``, at the
slowest rank's load); the rest of each pass (everything but the routed experts) is split
between the dense layers and embedding, the MoE layers' attention, shared experts and
router, and the head, in proportion to their FLOPs. Every dispatch and combine takes one
all-to-all (``AllToAll.ms`` at the load factor), so the parts add up to the stage's pass
times with the all-to-alls in them, as ``with_all_to_all`` adds them.
"""

from __future__ import annotations

from pipesim.cluster.expert_parallel import ExpertParallelCosts
from pipesim.cluster.shape import TransformerModel
from pipesim.cluster.transformer import layer_flops, stage_blocks, stage_flops
from pipesim.sim.costs import Costs
from pipesim.sim.sublayers import PassParts, StageParts

ATTENTION, EXPERTS, HEAD = "attention", "experts", "head"
DISPATCH, COMBINE = "dispatch", "combine"
AGAIN = " (recompute)"


def moe_stage_parts(
    model: TransformerModel,
    partition: tuple[int, ...],
    microbatch_size: int,
    costs: Costs,
    ep: ExpertParallelCosts | None,
) -> tuple[StageParts | None, ...] | None:
    """Each stage's sub-layer parts (None for a stage without MoE layers), from ``costs``
    before the all-to-alls were added; None without expert parallelism (nothing to
    overlap)."""
    if ep is None or ep.degree == 1:
        return None
    parts, start, last = [], 0, len(partition) - 1
    for k, layers in enumerate(partition):
        shares = _shares(model, layers, microbatch_size, start=start, first=k == 0, last=k == last)
        parts.append(_stage(k, costs, ep, shares, model.recompute))
        start += layers
    return tuple(parts) if any(parts) else None


def _shares(
    model: TransformerModel,
    layers: int,
    microbatch_size: int,
    *,
    start: int,
    first: bool,
    last: bool,
) -> tuple[float, float, float]:
    """What of a stage's work besides the routed experts is its dense layers (and
    embedding), one MoE layer's attention (with shared experts and router), and its head:
    forward FLOPs as fractions."""
    tokens = microbatch_size * model.seq_len
    dense = moe_all = moe_rest = moe_count = 0
    for count, view in stage_blocks(model, layers, start=start, last=last):
        flops = layer_flops(view, microbatch_size).forward
        if view.moe is None:
            dense += count * flops
            continue
        expert = view.moe.expert_weights(view.hidden, view.mlp_matrices)
        moe_all += count * flops
        moe_rest += count * (flops - 2 * tokens * view.moe.top_k * expert)
        moe_count += count
    whole = stage_flops(model, layers, microbatch_size, first=first, last=last, start=start)
    head = max(whole.forward - dense - moe_all, 0)
    total = dense + moe_rest + head
    if total <= 0 or moe_count == 0:
        return 0.0, 1.0 / max(moe_count, 1), 0.0
    return dense / total, moe_rest / moe_count / total, head / total


def _stage(
    k: int,
    costs: Costs,
    ep: ExpertParallelCosts,
    shares: tuple[float, float, float],
    recompute: bool,
) -> StageParts | None:
    """One stage's parts (module docstring), or None where it runs no MoE layer."""
    n = ep.layers[k]
    if n == 0:
        return None
    load = ep.load.load_factor
    a2a = ep.all_to_all.ms(load)
    expert_f, expert_i, expert_w = (ms * load / n for ms in ep.experts_ms[k])
    forward, inputs = costs.forward_ms[k], costs.backward_input_ms[k]
    if recompute:  # I holds the whole forward again, its experts too
        inputs, expert_i = inputs - forward, expert_i - expert_f
    lead, attention, head = shares
    rest_f = max(forward - n * expert_f, 0.0)
    rest_i = max(inputs - n * expert_i, 0.0)
    rest_w = max(costs.backward_weight_ms[k] - n * expert_w, 0.0)
    layer_f = (rest_f * attention, expert_f)
    return StageParts(
        _forward(n, layer_f, rest_f * lead, rest_f * head, a2a),
        _backward(
            n,
            layer_f if recompute else None,
            (rest_i * attention, expert_i),
            (rest_i * lead + (rest_f * lead if recompute else 0.0), rest_i * head),
            a2a,
            rest_f * head if recompute else 0.0,
        ),
        _weights(n, (rest_w * attention, expert_w), rest_w * lead, rest_w * head, recompute),
    )


def _forward(n: int, layer: tuple[float, float], lead: float, head: float, a2a: float) -> PassParts:
    """attention+lead, (dispatch, experts, combine, attention) per layer, the head last."""
    attention, experts = layer
    compute, names = [lead + attention], [ATTENTION]
    for j in range(n):
        compute += [experts, attention if j < n - 1 else head]
        names += [EXPERTS, ATTENTION if j < n - 1 else HEAD]
    return PassParts(tuple(compute), (a2a,) * (2 * n), tuple(names), (DISPATCH, COMBINE) * n)


def _backward(
    n: int,
    again: tuple[float, float] | None,
    layer: tuple[float, float],
    ends: tuple[float, float],
    a2a: float,
    head_again: float,
) -> PassParts:
    """The head's backward, then per layer (its forward again, with recomputation) the
    combine's gradient, the experts' backward, the dispatch's gradient and attention's
    backward; the dense layers' backward joins the last."""
    attention, experts = layer
    lead, head = ends
    compute, names, comm, comm_names = [head + head_again], [HEAD], [], []
    for j in range(n):
        if again is not None:  # the layer's forward first: attention joins the part before
            compute[-1] += again[0]
            compute += [again[1], 0.0]
            names += [EXPERTS + AGAIN, ATTENTION]
            comm += [a2a, a2a]
            comm_names += [DISPATCH + AGAIN, COMBINE + AGAIN]
        compute += [experts, attention + (lead if j == n - 1 else 0.0)]
        names += [EXPERTS, ATTENTION]
        comm += [a2a, a2a]
        comm_names += [COMBINE, DISPATCH]
    return PassParts(tuple(compute), tuple(comm), tuple(names), tuple(comm_names))


def _weights(
    n: int, layer: tuple[float, float], lead: float, head: float, recompute: bool
) -> tuple[float, ...]:
    """The weight gradient beside each of the backward's compute parts."""
    attention, experts = layer
    weights = [head]
    for j in range(n):
        weights += [0.0, 0.0] if recompute else []
        weights += [experts, attention + (lead if j == n - 1 else 0.0)]
    return tuple(weights)


__all__ = ["moe_stage_parts"]
