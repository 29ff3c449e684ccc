"""How long each pass of a pipeline stage takes, and the work at the end of a step.

A stage's forward ``F`` is, per layer, its matrix multiplications (each GEMM's FLOPs over
the rate its shape reaches, ``pipesim.cluster.gemm``), its attention scores (over the attention kernel's rate), its memory-bound
operators (bytes over the achieved memory bandwidth) and, with tensor parallelism, the
all-reduces of its activation (or what of them a GEMM does not hide). The input-gradient
pass ``I`` has the same parts, with the scores twice and the memory-bound bytes doubled;
with full recomputation it runs the layer's forward again first. The weight-gradient pass
``W`` is matrix multiplications only. The first stage adds the embedding lookup, the last
the LM head and the cross-entropy.

At the end of the step every GPU runs the optimizer on the parameters it owns (bytes per
parameter over the memory bandwidth) after the data-parallel gradient reduction. Megatron-
LM's distributed optimizer reduce-scatters the gradients and all-gathers the updated
weights, the same bytes as a ring all-reduce; with ``overlap`` it starts the reduce-scatter
while the last backward still runs and gathers the weights while the next step's first
forward runs, so only what outlasts those passes is exposed. ZeRO-1 and ZeRO-2 move the
same bytes once per step; ZeRO-3 gathers a stage's parameters before every forward and
every backward (``with_parameter_gathers``) and reduce-scatters the gradients once at the
end of the step, as torch.distributed.pipelining runs FSDP (gradients accumulate
unsharded until the stage's ``REDUCE_GRAD``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pipesim.cluster.efficiency import Efficiency, attention_ms, memory_ms
from pipesim.cluster.gemm import gemm_ms
from pipesim.cluster.hardware import GpuProfile
from pipesim.cluster.memo import by_value
from pipesim.cluster.memory_bound import layer_memory_bound_bytes, stage_memory_bound_bytes
from pipesim.cluster.moe import ONE_RANK, ExpertSplit, expert_pass_ms
from pipesim.cluster.optimizers import DEFAULT_OPTIMIZER, optimizer_implementation, sharding_stage
from pipesim.cluster.static_memory import ExpertSharding
from pipesim.cluster.transformer import (
    TransformerModel,
    head_gemm_shape,
    layer_flops,
    layer_gemm_shapes,
    stage_blocks,
    stage_parameters,
)
from pipesim.sim.costs import Costs


@dataclass(frozen=True, slots=True)
class PassTimes:
    """Durations of one microbatch's three passes on one stage, in milliseconds."""

    forward_ms: float
    backward_input_ms: float
    backward_weight_ms: float


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """A stage's tensor parallelism: the degree, the communication of one layer in one pass
    (``pipesim.cluster.parallel.tensor_parallel_comm_ms``), whether activations are split
    along the sequence, and whether the communication overlaps the layer's GEMMs
    (Megatron-LM's ``--tp-comm-overlap``: then ``hidden_fraction`` of the part the GEMMs
    could cover is hidden, and the rest exposed; the hidden part slows the GEMMs by
    ``slowdown`` of itself, ``Efficiency.overlap_slowdown``)."""

    degree: int = 1
    comm_ms: float = 0.0
    sequence_parallel: bool = False
    overlap: bool = False
    hidden_fraction: float = 1.0  # of min(comm, gemm), when overlapped
    slowdown: float = 0.0  # of the hidden communication, added to the GEMMs it hides under

    def exposed_ms(self, gemm_ms: float) -> float:
        """``comm - (1 - slowdown) * hidden`` with ``hidden = hidden_fraction * min(comm,
        gemm)`` when overlapped, all of ``comm`` otherwise."""
        if not self.overlap:
            return self.comm_ms
        hidden = self.hidden_fraction * min(self.comm_ms, gemm_ms)
        return self.comm_ms - hidden + self.slowdown * hidden


# Kernels of the memory-bound operators per layer and pass (pipesim.cluster.memory_bound):
# two norms, two fused bias-dropout-residual adds, the activation function. Each costs at
# least the GPU's kernel launch time, which only shows where kernels are tiny (decode).
MEMORY_BOUND_KERNELS_PER_LAYER = 5


def linear_pass_ms(
    shapes: tuple[tuple[int, int], ...],
    tokens: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    fp8: str | None = None,
) -> tuple[float, float, float]:
    """The forward, input-gradient and weight-gradient GEMMs of linear layers with forward
    shapes ``(n, k)`` over ``tokens`` rows: ``Y = X W`` is ``(tokens, n, k)``, the input
    gradient ``dX = dY W^T`` is ``(tokens, k, n)``, the weight gradient ``dW = X^T dY`` is
    ``(k, n, tokens)``. With ``fp8`` all three run in FP8, as Transformer Engine does (E4M3
    inputs and weights forward, E5M2 gradients backward, the weight gradient from the saved
    FP8 input and the FP8 output gradient; DeepSeek-V3's recipe quantises the same three)."""
    forward = inputs = weights = 0.0
    for n, k in shapes:
        forward += gemm_ms(tokens, n, k, gpu, efficiency, fp8=fp8)
        inputs += gemm_ms(tokens, k, n, gpu, efficiency, fp8=fp8)
        weights += gemm_ms(k, n, tokens, gpu, efficiency, fp8=fp8)
    return forward, inputs, weights


def _kernels_ms(work_ms: float, kernels: int, gpu: GpuProfile) -> float:
    """Work spread over ``kernels`` kernels, each at least the launch time."""
    return max(work_ms, kernels * gpu.kernel_launch_us * 1e-3)


@functools.lru_cache(maxsize=1 << 14)
def layer_pass_times(
    model: TransformerModel,
    microbatch_size: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    tp: TensorParallel,
    split: ExpertSplit = ONE_RANK,
) -> PassTimes:
    """One layer's three passes for one microbatch on one GPU (no recomputation): its GEMMs
    shape by shape (``linear_pass_ms``), the attention scores at the attention kernel's rate
    (the forward one kernel, the backward one), the memory-bound operators over the
    bandwidth, and the tensor-parallel communication the GEMMs leave exposed; a MoE layer's
    routed experts as ``split`` runs them (``pipesim.cluster.moe.expert_pass_ms``)."""
    tokens = microbatch_size * model.seq_len
    flops = layer_flops(model, microbatch_size)
    scores = (flops.forward - flops.backward_weight) / tp.degree
    shapes = layer_gemm_shapes(model, tp.degree)
    forward, inputs, weights = linear_pass_ms(shapes, tokens, gpu, efficiency, model.fp8)
    if model.moe is not None:
        experts = expert_pass_ms(
            model.moe,
            model.hidden,
            model.mlp_matrices,
            tokens,
            gpu,
            efficiency,
            tensor=tp.degree,
            fp8=model.fp8,
            split=split,
        )
        forward, inputs, weights = (forward + experts[0], inputs + experts[1], weights + experts[2])
    # without a fused kernel the scores are batched GEMMs at the GEMM rate
    score_rate = (
        efficiency if model.flash_attention else replace(efficiency, attention_fraction=None)
    )
    score_ms = _kernels_ms(attention_ms(scores, gpu, score_rate, tokens), 1, gpu)
    moved = layer_memory_bound_bytes(model, microbatch_size, tp.degree, tp.sequence_parallel)
    kernels = MEMORY_BOUND_KERNELS_PER_LAYER
    return PassTimes(
        forward_ms=forward
        + score_ms
        + _kernels_ms(memory_ms(moved.forward, gpu, efficiency), kernels, gpu)
        + tp.exposed_ms(forward),
        backward_input_ms=inputs
        + 2 * score_ms
        + _kernels_ms(memory_ms(moved.backward, gpu, efficiency), kernels, gpu)
        + tp.exposed_ms(inputs),
        backward_weight_ms=weights,
    )


@functools.lru_cache(maxsize=1 << 14)
def stage_pass_times(
    model: TransformerModel,
    layers: int,
    microbatch_size: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    tp: TensorParallel,
    *,
    first: bool,
    last: bool,
    start: int = 0,
    split: ExpertSplit = ONE_RANK,
) -> PassTimes:
    """A stage's three passes: ``layers`` layers from index ``start`` (dense and MoE layers
    each their own), with recomputation one more forward of them inside ``I``, the embedding
    if ``first``, the LM head and loss if ``last`` (the LM head's GEMMs ``(tokens, V/t, h)``
    in bf16 also under FP8, as Megatron-LM runs its output layer), and there the MTP
    modules: each a block, a projection ``(tokens, h/t, 2h)`` and the LM head again. MoE
    layers run their routed experts as ``split`` says."""
    forward = backward_input = backward_weight = 0.0
    for count, view in stage_blocks(model, layers, start=start, last=last):
        layer = layer_pass_times(view, microbatch_size, gpu, efficiency, tp, split)
        forward += count * layer.forward_ms
        backward_input += count * layer.backward_input_ms
        backward_weight += count * layer.backward_weight_ms
    if model.recompute:
        backward_input += forward
    # the embedding's and the LM head's memory-bound bytes: the stage's bytes without layers
    ends = stage_memory_bound_bytes(
        model,
        0,
        microbatch_size,
        first=first,
        last=last,
        tensor=tp.degree,
        sequence_parallel=tp.sequence_parallel,
    )
    forward += memory_ms(ends.forward, gpu, efficiency)
    backward_input += memory_ms(ends.backward, gpu, efficiency)
    if last:
        tokens, h, mtp = microbatch_size * model.seq_len, model.hidden, model.mtp_layers
        head = (head_gemm_shape(model, tp.degree),) * (1 + mtp) + ((h // tp.degree, 2 * h),) * mtp
        head_f, head_i, head_w = linear_pass_ms(head, tokens, gpu, efficiency)
        forward += head_f
        backward_input += head_i
        backward_weight += head_w
    return PassTimes(forward, backward_input, backward_weight)


@by_value  # a planner asks again for every candidate that shares it
def optimizer_step_ms(
    model: TransformerModel,
    partition: Sequence[int],
    gpu: GpuProfile,
    efficiency: Efficiency,
    data_parallel: int = 1,
    zero_stage: int = 0,
    tensor: int = 1,
    *,
    optimizer: str = DEFAULT_OPTIMIZER,
    experts: ExpertSharding | None = None,
) -> tuple[float, ...]:
    """The optimizer step per stage: the implementation's step bytes
    (``OPTIMIZER_STEP_BYTES_PER_PARAM`` for Adam) for each parameter one GPU updates (its
    ``1/tensor`` share, and of that ``1/data_parallel`` where the optimizer states are
    sharded: ZeRO stage 1 and up, Megatron-LM's distributed optimizer, DeepSpeed's BF16
    optimizer, FSDP) over the memory bandwidth. Under expert parallelism (``experts``) a
    GPU updates its own expert slots, sharded over each expert's replicas."""
    impl = optimizer_implementation(optimizer)

    def shards(replicas: int) -> int:
        return replicas if sharding_stage(optimizer, zero_stage, replicas) >= 1 else 1

    if experts is None:
        updated = [p / (tensor * shards(data_parallel)) for p in stage_parameters(model, partition)]
    else:
        updated = [
            dense / shards(data_parallel) + routed / shards(experts.replicas)
            for dense, routed in (
                experts.split(k, p, tensor)
                for k, p in enumerate(stage_parameters(model, partition))
            )
        ]
    return tuple(memory_ms(impl.step_bytes_per_param * p, gpu, efficiency) for p in updated)


def exposed_data_parallel_ms(
    reduction_ms: float,
    forward_ms: float,
    backward_ms: float,
    overlap: bool,
    *,
    gather_weights: bool = True,
    slowdown: float = 0.0,
) -> float:
    """What a device waits for the gradient reduction of ``reduction_ms``: all of it without
    ``overlap``; with it, the reduce-scatter half beyond the last microbatch's backward
    (``backward_ms``, where its buckets are produced) and the all-gather half beyond the
    first microbatch's forward (``forward_ms``, which the gathered weights feed).

    ZeRO-3 (``gather_weights=False``) gathers no weights at the end of the step, since each
    pass gathers its own: ``reduction_ms`` is then the reduce-scatter alone, exposed whole,
    or with ``overlap`` what outlasts the last backward.

    What overlap hides is not free: the passes it hides under run ``slowdown`` of the hidden
    time longer (``Efficiency.overlap_slowdown``), and that is waited for too."""
    if not overlap:
        return reduction_ms
    if not gather_weights:
        return _overlapped(reduction_ms, backward_ms, slowdown)
    half = reduction_ms / 2
    return _overlapped(half, backward_ms, slowdown) + _overlapped(half, forward_ms, slowdown)


def _overlapped(comm_ms: float, compute_ms: float, slowdown: float) -> float:
    """What ``comm_ms`` of communication overlapped with ``compute_ms`` of compute adds to
    the compute: the part that outlasts it, and ``slowdown`` of the part it hides."""
    return max(comm_ms - compute_ms, 0.0) + slowdown * min(comm_ms, compute_ms)


def exposed_gather_ms(
    gather_ms: float,
    pass_ms: float,
    overlap: bool,
    layers: int = 1,
    scatter_ms: float = 0.0,
    *,
    slowdown: float = 0.0,
) -> float:
    """What a pass waits for its ZeRO-3 communication: the parameter gather of ``gather_ms``
    before it and, where it has one, the gradient reduce-scatter of ``scatter_ms`` after it.

    Without ``overlap`` the pass waits for all of it. With it, the weights are gathered
    layer by layer, each layer's while the one before computes (DeepSpeed's parameter
    prefetch, FSDP's forward and backward prefetch), and each layer's gradients are
    reduce-scattered while the next one computes. Think of a bucket brigade: the first
    bucket has to be filled before anyone can pass it on, and the last one handed over
    after everyone has stopped. Nothing runs before the first layer's gather, and nothing
    after the last layer's reduce-scatter, so both are exposed whole; every later layer's
    communication hides under the layer before it, and shows only what outlasts it. With
    ``L = layers`` and per-layer shares ``g = gather_ms / L``, ``r = scatter_ms / L``,
    ``c = pass_ms / L`` (the stage's embedding or LM head spread over its layers):

        exposed = g + r + max(0, (L - 1) (g + r - c))

    One layer exposes everything; with fast compute it tends to one layer's share. What is
    hidden slows the layer it hides under by ``slowdown`` of itself
    (``Efficiency.overlap_slowdown``): ``+ slowdown (L - 1) min(g + r, c)``.

    ``gather_ms`` is the sum of the stage's per-layer gathers, each with its own latency
    (``pipesim.cluster.job_costs``: FSDP and DeepSpeed gather one layer, or one wrapped
    unit, at a time), so a stage of ``L`` layers pays ``L`` latencies."""
    if not overlap:
        return gather_ms + scatter_ms
    layers = max(layers, 1)
    per_layer = (gather_ms + scatter_ms) / layers
    return per_layer + (layers - 1) * _overlapped(per_layer, pass_ms / layers, slowdown)


def with_parameter_gathers(
    costs: Costs,
    gather_ms: Sequence[float],
    overlap: bool,
    layers: Sequence[int],
    reduce_scatter_ms: Sequence[float] | None = None,
    *,
    slowdown: float = 0.0,
) -> Costs:
    """Stage costs under ZeRO-3, whose parameters live sharded over the data-parallel group.

    Every forward and every backward of every microbatch first all-gathers its stage's
    parameters (``gather_ms[k]`` for stage ``k`` of ``layers[k]`` layers) and frees them
    after use, as DeepSpeed's ZeRO-3 does (Rajbhandari et al. 2020, "ZeRO", communication
    analysis of stage 3: the parameters are gathered for the forward and again for the
    backward, with the gradients' reduce-scatter 1.5 times data parallelism's volume per
    step) and FSDP with ``reshard_after_forward``: so ``F`` pays one gather and the
    backward another. The backward's gather goes to ``I`` (the input gradient needs the
    weights first); ``reduce_scatter_ms``, where every backward also reduce-scatters its
    gradients (FSDP and DeepSpeed without a pipeline), goes to ``W``, which produces them;
    a split backward ``I + W`` still adds up to ``B``. With ``overlap`` each pass pays
    what ``exposed_gather_ms`` leaves of its communication, layer by layer, and the
    ``slowdown`` the hidden part costs its compute."""
    scatters = reduce_scatter_ms or (0.0,) * len(gather_ms)
    forward, full, inputs, weights = [], [], [], []
    for k, (gather, scatter) in enumerate(zip(gather_ms, scatters, strict=True)):
        f, b, count = costs.forward_ms[k], costs.backward_ms[k], layers[k]
        forward.append(f + exposed_gather_ms(gather, f, overlap, count, slowdown=slowdown))
        before = exposed_gather_ms(gather, b, overlap, count, slowdown=slowdown)
        both = exposed_gather_ms(gather, b, overlap, count, scatter, slowdown=slowdown)
        full.append(b + both)
        inputs.append(costs.backward_input_ms[k] + before)
        weights.append(costs.backward_weight_ms[k] + (both - before))
    return replace(
        costs,
        forward_ms=tuple(forward),
        backward_ms=tuple(full),
        backward_input_ms=tuple(inputs),
        backward_weight_ms=tuple(weights),
    )
