"""What each optimizer implementation keeps per parameter, and what its step moves.

Mixed-precision Adam needs the same four things everywhere: 16-bit weights for the passes,
gradients, an fp32 master copy and Adam's two fp32 moments. Implementations differ in the
width of the gradients they accumulate and in which of the four they shard over the ``d``
data-parallel ranks. Per parameter, for 16-bit model weights:

* ``adam``: 2 weights, 2 gradients, 12 fp32 master and moments: 16, sharded as
  ``parallel.zero_stage`` says (ZeRO paper, Rajbhandari et al. 2020, section 3.1);
* ``megatron``: 2 weights, a 4-byte fp32 main-gradient buffer, 12 fp32 main params and
  moments: 18;
* ``megatron-distributed``: the same with the 12 sharded: 6 + 12/d;
* ``deepspeed-bf16``: 2 flat bf16 weights, a whole 4-byte fp32 gradient accumulation
  buffer, the 12 sharded: 6 + 12/d;
* ``fsdp``: FSDP2 mixed precision, 4 fp32 weights, 4 fp32 gradients and 8 moments, all
  sharded: 16/d, plus the unsharded bf16 weights of the units being computed.

Sources: Megatron-LM ``docs/source/distrib_optimizer.md`` (NVIDIA/Megatron-LM, commit
40ce7c8), its table row "float16 param, fp32 grads: 18 | 6 + 12/d" (Megatron-LM turns on
``accumulate_allreduce_grads_in_fp32`` for bf16); DeepSpeed
``deepspeed/runtime/bf16_optimizer.py`` (deepspeedai/DeepSpeed, commit 0acdb02):
``fp32_groups_gradients_flat`` is ``zeros_like`` the whole flat bf16 group in
``grad_acc_dtype`` (fp32), ``fp32_groups_flat_partition`` the rank's ``1/d`` slice, which
the wrapped Adam updates; torch FSDP2 (``torch/distributed/fsdp/_fully_shard``): with
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` the sharded parameter stays
fp32, is cast and all-gathered to bf16 per unit, and its gradient is reduce-scattered in
fp32. Without gradient synchronisation (``set_requires_gradient_sync(False)``, as
torch.distributed.pipelining runs every microbatch) FSDP2 accumulates the unsharded
gradient in ``reduce_dtype`` (``_fsdp_param.py``, ``FSDPParam.to_accumulated_grad_if_needed``) and keeps the unsharded weights (torchtitan's pipeline runs
set ``reshard_after_forward=False``), so under a pipeline the stage holds 2 + 4 bytes per
parameter unsharded besides the 16/d.

Step bytes follow the same table: Adam reads the fp32 master weight, gradient and two
moments (16), writes weight and moments (12), reads the gradient again for the clipping
norm (4) and writes the 16-bit model copy (2): 34. FSDP2's step has no 16-bit copy to
write (the cast happens at the next all-gather): 32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerImplementation:
    """Bytes per parameter one implementation holds, and which it shards.

    ``gradient_bytes`` ``None`` means gradients in the model's dtype; ``master_bytes``
    counts the fp32 master weights and moments (or, for FSDP, the fp32 moments alone:
    its master is the sharded weight, ``fp32_weights``). ``zero_stage`` is what the
    implementation shards (1: the master and moments; 3: everything), ``None`` where
    ``parallel.zero_stage`` decides. ``step_bytes_per_param``: the optimizer step's
    memory traffic per parameter it updates."""

    name: str
    gradient_bytes: int | None
    master_bytes: int
    zero_stage: int | None
    step_bytes_per_param: int
    fp32_weights: bool = False


OPTIMIZERS: dict[str, OptimizerImplementation] = {
    "adam": OptimizerImplementation(
        name="adam", gradient_bytes=None, master_bytes=12, zero_stage=None, step_bytes_per_param=34
    ),
    "megatron": OptimizerImplementation(
        name="megatron", gradient_bytes=4, master_bytes=12, zero_stage=0, step_bytes_per_param=34
    ),
    "megatron-distributed": OptimizerImplementation(
        name="megatron-distributed",
        gradient_bytes=4,
        master_bytes=12,
        zero_stage=1,
        step_bytes_per_param=34,
    ),
    "deepspeed-bf16": OptimizerImplementation(
        name="deepspeed-bf16",
        gradient_bytes=4,
        master_bytes=12,
        zero_stage=1,
        step_bytes_per_param=34,
    ),
    "fsdp": OptimizerImplementation(
        name="fsdp",
        gradient_bytes=4,
        master_bytes=8,
        zero_stage=3,
        step_bytes_per_param=32,
        fp32_weights=True,
    ),
}
DEFAULT_OPTIMIZER = "adam"

# FSDP2 without a pipeline: the unit being computed and the next one, prefetched
# (``fully_shard``'s implicit forward prefetch of one unit), hold unsharded bf16 weights.
FSDP_UNSHARDED_UNITS = 2


def optimizer_implementation(name: str) -> OptimizerImplementation:
    """The implementation ``parallel.optimizer`` names."""
    try:
        return OPTIMIZERS[name]
    except KeyError:
        allowed = ", ".join(OPTIMIZERS)
        raise ValueError(f"unknown optimizer {name!r}; allowed: {allowed}") from None


def check_sharding(name: str, zero_stage: int) -> str:
    """``name`` once ``zero_stage`` is one it runs at (0, or its own stage)."""
    fixed = optimizer_implementation(name).zero_stage
    if fixed is not None and zero_stage not in (0, fixed):
        raise ValueError(
            f"{name!r} shards as ZeRO stage {fixed}; parallel.zero_stage must be 0 or "
            f"{fixed} with it, got {zero_stage}"
        )
    return name


def sharding_stage(name: str, zero_stage: int, data_parallel: int) -> int:
    """The ZeRO stage an implementation runs at: its own where it fixes one (over more than
    one replica), else ``zero_stage``."""
    fixed = optimizer_implementation(name).zero_stage
    if fixed is None or data_parallel == 1:
        return zero_stage
    return fixed


def parameter_bytes(
    name: str,
    params: float,
    *,
    width: int,
    data_parallel: int,
    zero_stage: int,
    pipelined: bool,
    unit_params: Sequence[float] = (),
) -> tuple[float, float, float]:
    """Weights, gradients and optimizer-state bytes for ``params`` parameters on one GPU
    (already divided by the tensor-parallel degree), the model's weights ``width`` bytes
    wide. ``unit_params``: the parameters of each unit FSDP gathers at once (each layer,
    the embedding, the LM head). A gradient shard is only a shard once it has been reduce-scattered: under a
    pipeline (``pipelined``) that happens once per step, so the whole gradients stay."""
    impl = optimizer_implementation(name)
    n = data_parallel
    stage = sharding_stage(name, zero_stage, n)
    if impl.fp32_weights:
        # FSDP2: fp32 shards of everything, plus the unsharded bf16 weights in use and,
        # under a pipeline, the unsharded fp32 gradients accumulating between syncs.
        largest = sum(sorted(unit_params, reverse=True)[:FSDP_UNSHARDED_UNITS])
        in_use = params if pipelined else min(params, largest)
        weights = 4 * params / n + width * in_use
        gradients = 4 * params / n + (4 * params if pipelined else 0.0)
        return weights, gradients, impl.master_bytes * params / n
    gradient_shards = n if stage >= 2 and not pipelined else 1
    gradient_width = width if impl.gradient_bytes is None else impl.gradient_bytes
    return (
        width * params / (n if stage >= 3 else 1),
        gradient_width * params / gradient_shards,
        impl.master_bytes * params / (n if stage >= 1 else 1),
    )
