"""From a scenario's model, parallel and hardware sections to one ``Job``, at the edge.

Users describe "a GPT with 48 layers of hidden 8192 on 4 nodes of 8 H100s over NVLink and
NDR InfiniBand"; ``build_job`` turns that, once per scenario, into a
``pipesim.cluster.job.Job``, the typed description every derivation reads:

* ``batch_sizes``: microbatches and samples per microbatch, from ``model.global_batch``
  (split over ``parallel.data`` replicas) or the pipeline section;
* ``build_job``: the model's shape, its partition, the parallel layout, the hardware (one
  ``hardware.link`` for all, or nodes of ``gpus_per_node`` GPUs with an intra- and an
  inter-node link) and the efficiency curve;
* ``topology``, ``model_costs``, ``split_layers``, ``token_step_costs``:
  ``pipesim.cluster``'s derivations of a job, their ``JobError`` turned into the
  scenario's error.

Every problem is a ScenarioError naming the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pipesim.cluster import job as jobs
from pipesim.cluster import job_costs, token_steps
from pipesim.cluster.hardware import (
    GPU_PROFILES,
    UnknownProfileError,
    gpu_profile,
    link_profile,
)
from pipesim.cluster.job import BatchSizes, Hardware, Job, JobError, ParallelLayout
from pipesim.cluster.job_costs import ModelCosts
from pipesim.cluster.mla import MLA
from pipesim.cluster.model import Efficiency, TransformerModel
from pipesim.cluster.optimizers import sharding_stage
from pipesim.scenario.experts import check_expert_parallel, moe_of
from pipesim.scenario.schema import LinkSpec, Mode, ModelSpec, ScenarioError, ScenarioSpec
from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.links import IDEAL, Link, Topology
from pipesim.sim.metrics import Accounting

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def batch_sizes(spec: ScenarioSpec, source: str) -> BatchSizes:
    """Microbatches m and microbatch size b; with a global batch G over n replicas, G = m b n."""
    pipe, model = spec.pipeline, spec.model
    size = pipe.microbatch_size
    if model is not None and model.microbatch_size is not None:
        if (
            "microbatch_size" in pipe.model_fields_set
            and pipe.microbatch_size != model.microbatch_size
        ):
            raise ScenarioError(
                f"{source}: model.microbatch_size: {model.microbatch_size} disagrees with "
                f"pipeline.microbatch_size {pipe.microbatch_size}; give one of them"
            )
        size = model.microbatch_size
    global_batch = model.global_batch if model is not None else None
    if global_batch is None:
        if pipe.microbatches is None:
            raise ScenarioError(
                f"{source}: pipeline.microbatches: required (or give model.global_batch)"
            )
        return BatchSizes(pipe.microbatches, size)
    replicas = spec.parallel.data
    size_given = "microbatch_size" in pipe.model_fields_set or model.microbatch_size is not None
    if pipe.microbatches is not None and not size_given:
        per_microbatch, rest = divmod(global_batch, pipe.microbatches * replicas)
        if rest or per_microbatch == 0:
            raise ScenarioError(
                f"{source}: pipeline.microbatches: model.global_batch={global_batch} does not split "
                f"into {pipe.microbatches} microbatches x {replicas} replicas"
            )
        return BatchSizes(pipe.microbatches, per_microbatch)
    microbatches, rest = divmod(global_batch, size * replicas)
    if rest or microbatches == 0 or (pipe.microbatches not in (None, microbatches)):
        raise ScenarioError(
            f"{source}: model.global_batch: {global_batch} is not microbatches x microbatch_size "
            f"({size}) x parallel.data ({replicas})"
            + (f" with microbatches={pipe.microbatches}" if pipe.microbatches else "")
        )
    return BatchSizes(microbatches, size)


def check_tensor_parallel(spec: ScenarioSpec, source: str) -> None:
    """Tensor parallelism splits every attention head group and the MLP across ``t`` GPUs of
    one node (Megatron-LM): ``t`` divides the heads and the FFN width, and the node."""
    m, t = spec.model, spec.parallel.tensor
    check_context_parallel(spec, source)
    check_expert_parallel(spec, source)
    if t == 1:
        return
    widths = [("heads", m.heads), ("ffn_hidden", m.ffn_hidden or 4 * m.hidden)]
    own = spec.parallel.expert_tensor is not None  # the experts' own split: checked there
    if m.moe is not None and m.moe.expert_ffn_hidden is not None and not own:
        widths.append(("moe.expert_ffn_hidden", m.moe.expert_ffn_hidden))
    for name, size in widths:
        if size % t:
            raise ScenarioError(
                f"{source}: parallel.tensor: {t} does not divide model.{name} ({size}); "
                f"allowed: {_divisors(size)}"
            )
    per_node = spec.hardware.gpus_per_node
    if per_node is not None and per_node % t:
        raise ScenarioError(
            f"{source}: parallel.tensor: {t} tensor-parallel GPUs do not fit in a node of "
            f"hardware.gpus_per_node={per_node}; allowed: {_divisors(per_node)}"
        )


def check_context_parallel(spec: ScenarioSpec, source: str) -> None:
    """Context parallelism (``pipesim.cluster.context_parallel``) runs training and forward
    steps with a fused attention kernel, cuts each sequence into 2 x context equal chunks
    (Megatron-LM's load-balanced causal split) and, all-to-all, splits the heads and the
    key/value heads over tensor x context GPUs."""
    m, par = spec.model, spec.parallel
    n, s, field = par.context, m.seq_len, f"{source}: parallel.context: {par.context}"
    if n == 1:
        return
    if spec.pipeline.mode == Mode.DECODE or spec.serving is not None:
        raise ScenarioError(
            f"{field}: context parallelism is modelled for training and forward steps; decode and serving allow 1"
        )
    if m.attention == "mla":
        raise ScenarioError(f"{field}: not modelled with model.attention: mla yet; allowed: 1")
    if not m.flash_attention:
        raise ScenarioError(
            f"{field}: needs model.flash_attention: true (ring and all-to-all attention run inside a fused attention kernel)"
        )
    if s % (2 * n):
        raise ScenarioError(
            f"{field}: does not cut model.seq_len ({s}) into 2 x {n} equal chunks; allowed: {_divisors(s // 2)}"
        )
    if par.context_mode != "all-to-all":
        return
    for name, size in (("heads", m.heads), ("kv_heads", m.kv_heads or m.heads)):
        if size % (n * par.tensor):
            raise ScenarioError(
                f"{field}: all-to-all (parallel.context_mode) splits model.{name} ({size}) over parallel.tensor x parallel.context = {par.tensor} x {n} GPUs, which does not divide it"
            )


def _divisors(number: int) -> str:
    if number > 4096:
        return f"a divisor of {number}"
    found = [k for k in range(1, number + 1) if number % k == 0]
    return ", ".join(map(str, found[:12])) + (", ..." if len(found) > 12 else "")


def build_job(spec: ScenarioSpec, source: str, batch: BatchSizes | None = None) -> Job:
    """The scenario's job: what every derivation reads, built once (``batch``: the step's
    sizes, ``batch_sizes``; None where no step is run)."""
    return Job(
        hardware=hardware_of(spec, source),
        model=None if spec.model is None else _transformer(spec, source),
        partition=_partition(spec),
        parallel=parallel_of(spec),
        efficiency=efficiency_of(spec),
        batch=batch,
        training=spec.pipeline.mode == Mode.TRAIN,
    )


def hardware_of(spec: ScenarioSpec, source: str) -> Hardware:
    """The hardware section as the cost model reads it."""
    hw = spec.hardware
    return Hardware(
        gpu=None if hw.gpu is None else gpu_profile(hw.gpu),
        link=_link(hw.link, hw.link_variant, "link", source),
        intra_node_link=_link(hw.intra_node_link, hw.link_variant, "intra_node_link", source),
        inter_node_link=_link(hw.inter_node_link, hw.link_variant, "inter_node_link", source),
        gpus_per_node=hw.gpus_per_node,
        placement=None if hw.placement is None else tuple(hw.placement),
        pcie_switch_share=hw.pcie_switch_share,
        comm_overlap=hw.comm_overlap,
        runtime_bytes=hw.runtime_bytes,
        fragmentation=hw.fragmentation,
        memory_headroom=hw.memory_headroom,
        fabric=None if hw.topology is None else hw.topology.fabric(),
    )


def parallel_of(spec: ScenarioSpec) -> ParallelLayout:
    par = spec.parallel
    return ParallelLayout(
        tensor=par.tensor,
        data=par.data,
        zero_stage=sharding_stage(par.optimizer, par.zero_stage, par.data),
        optimizer=par.optimizer,
        sequence_parallel=par.sequence_parallel,
        tp_overlap=par.tp_overlap,
        dp_overlap=par.dp_overlap,
        context=par.context,
        context_mode=par.context_mode,
        pipeline_scatter_gather=par.pipeline_scatter_gather,
        expert=par.expert,
        expert_tensor=_experts_tensor(spec),
    )


def _experts_tensor(spec: ScenarioSpec) -> int | None:
    """``parallel.expert_tensor``; in a serving replica, whose expert-parallel ranks are
    carved out of each stage's tensor GPUs (``pipesim.scenario.experts``), ``tensor /
    expert``: the same layout as Megatron-Core's expert groups tiling the tensor ranks."""
    par = spec.parallel
    if spec.serving is None or par.expert == 1 or par.expert_tensor is not None:
        return par.expert_tensor
    return max(1, par.tensor // par.expert)


def efficiency_of(spec: ScenarioSpec) -> Efficiency:
    """``model.efficiency`` (the calibrated defaults without a model section)."""
    if spec.model is None:
        return Efficiency()
    eff = spec.model.efficiency
    return Efficiency(
        eff.max_fraction,
        eff.half_tokens,
        eff.launch_overhead_ms,
        attention_fraction=eff.attention_fraction,
        memory_fraction=eff.memory_fraction,
        tensor_overlap_fraction=eff.tensor_overlap_fraction,
        gemm_fraction=eff.gemm_fraction,
        gemm_half_dim=eff.gemm_half_dim,
        fp8_blockwise_overhead=eff.fp8_blockwise_overhead,
        overlap_slowdown=eff.overlap_slowdown,
    )


def _partition(spec: ScenarioSpec) -> str | tuple[int, ...]:
    if spec.model is None:
        return "even"
    if spec.model.pipeline_layout is not None:
        return spec.model.pipeline_layout
    given = spec.model.partition
    return given if isinstance(given, str) else tuple(given)


def _transformer(spec: ScenarioSpec, source: str) -> TransformerModel:
    m = spec.model
    gpu = spec.hardware.gpu
    if m.fp8 is not None and gpu is not None and not gpu_profile(gpu).has_fp8:
        with_fp8 = ", ".join(name for name, g in GPU_PROFILES.items() if g.has_fp8)
        raise ScenarioError(
            f"{source}: model.fp8: {m.fp8!r} needs FP8 tensor cores, which hardware.gpu "
            f"{gpu!r} lacks; leave model.fp8 out (bf16) or use one of: {with_fp8}"
        )
    check_mixture(spec, source)
    try:
        return TransformerModel(
            layers=m.layers,
            hidden=m.hidden,
            heads=m.heads,
            seq_len=m.seq_len,
            vocab=m.vocab,
            ffn_hidden=m.ffn_hidden,
            kv_heads=m.kv_heads,
            mlp=m.mlp,
            dtype_bytes=DTYPE_BYTES[m.dtype],
            recompute=m.recompute,
            tied_embeddings=m.tied_embeddings,
            flash_attention=m.flash_attention,
            fp8=m.fp8,
            head_dim=m.head_dim,
            moe=moe_of(m),
            mla=None if m.mla is None else MLA(**m.mla.model_dump()),
            mtp_layers=m.mtp_layers,
        )
    except ValueError as exc:
        raise ScenarioError(f"{source}: model: {exc}") from None


def check_mixture(spec: ScenarioSpec, source: str) -> None:
    """What one key of ``model`` says of another (``pipesim.scenario.moe_schema``):
    ``top_k`` at most ``experts``, ``dense_layers`` at most ``layers``, ``model.mla`` with
    ``attention: mla`` and only then, ``kv_heads`` as the attention kind says; that the
    static decode pipeline (``pipeline.mode: decode``), which does not model MoE, MLA or
    MTP yet, gets none of them, and serving no MTP modules."""
    m = spec.model
    problem = _mixture_problem(m)
    if problem is None and spec.pipeline.mode == Mode.DECODE:
        given = [key for key in ("moe", "mla", "mtp_layers") if getattr(m, key)]
        if given:
            problem = (
                f"model.{given[0]}: the static decode pipeline (pipeline.mode: decode) does "
                "not model mixture-of-experts, MLA or MTP yet; allowed: pipeline.mode train "
                "or forward (pipesim serve models MoE and MLA: leave pipeline.mode out)"
            )
    if problem is None and spec.serving is not None and m.mtp_layers:
        problem = (
            f"model.mtp_layers: {m.mtp_layers}; pipesim serve does not model "
            "multi-token prediction (speculative decoding) yet; allowed: 0"
        )
    if problem is not None:
        raise ScenarioError(f"{source}: {problem}")


def _mixture_problem(m: ModelSpec) -> str | None:
    moe, mla, attention, kv_heads = m.moe, m.mla, m.attention, m.kv_heads
    if moe is not None and moe.top_k > moe.experts:
        return (
            f"model.moe.top_k: {moe.top_k} experts per token of {moe.experts}; "
            f"allowed: 1 to model.moe.experts ({moe.experts})"
        )
    if moe is not None and moe.dense_layers > m.layers:
        return (
            f"model.moe.dense_layers: {moe.dense_layers} dense layers of {m.layers}; "
            f"allowed: 0 to model.layers ({m.layers})"
        )
    if attention == "mla" and mla is None:
        return (
            "model.mla: required with model.attention: mla (q_lora_rank, kv_lora_rank, "
            "qk_nope_head_dim, qk_rope_head_dim, v_head_dim)"
        )
    if mla is not None and attention != "mla":
        return f"model.mla: only used with model.attention: mla (got attention: {attention})"
    if attention == "mla" and (kv_heads is not None or m.head_dim is not None):
        key = "kv_heads" if kv_heads is not None else "head_dim"
        return f"model.{key}: not used with model.attention: mla (model.mla gives the widths)"
    if attention == "mha" and kv_heads not in (None, m.heads):
        return (
            f"model.kv_heads: {kv_heads} key/value heads for {m.heads} heads is grouped-query "
            "attention; allowed with attention: mha: none or model.heads; or attention: gqa"
        )
    if attention == "gqa" and kv_heads is None:
        return "model.kv_heads: required with model.attention: gqa"
    return None


def _link(choice: str | LinkSpec | None, variant: str, field: str, source: str) -> Link | None:
    if choice is None:
        return None
    if isinstance(choice, LinkSpec):
        return Link(choice.latency_us, choice.bandwidth_gbps, "custom", choice.gap_us)
    if choice == "ideal":
        return IDEAL
    try:
        return link_profile(choice, variant)
    except UnknownProfileError as exc:
        raise ScenarioError(f"{source}: hardware.{field}: {exc}") from None


# ---------------------------------------------------------------------------
# The derivations of pipesim.cluster, their errors named as the scenario names them


@contextmanager
def _in(source: str) -> Iterator[None]:
    try:
        yield
    except JobError as exc:
        raise ScenarioError(f"{source}: {exc}") from None


def topology(job: Job, schedule: Schedule, source: str) -> Topology:
    """The links between the schedule's devices (``pipesim.cluster.job.topology``)."""
    with _in(source):
        return jobs.topology(job, schedule)


def model_costs(job: Job, schedule: Schedule, source: str) -> ModelCosts:
    """Stage costs, end-of-step tail and accounting (``pipesim.cluster.job_costs``)."""
    with _in(source):
        return job_costs.model_costs(job, schedule)


def split_layers(job: Job, stages: int, source: str) -> tuple[int, ...]:
    """The model's layers over ``stages``, ``"balanced"`` by FLOPs."""
    with _in(source):
        return job_costs.split_layers(job, stages)


def token_step_costs(
    job: Job, schedule: Schedule, tokens: int, prompt_tokens: int, source: str
) -> tuple[Costs, Accounting]:
    """A decode schedule's costs and accounting (``pipesim.cluster.token_steps``)."""
    with _in(source):
        return token_steps.token_step_costs(job, schedule, tokens, prompt_tokens)


__all__ = [
    "batch_sizes",
    "build_job",
    "check_context_parallel",
    "check_tensor_parallel",
    "efficiency_of",
    "hardware_of",
    "model_costs",
    "parallel_of",
    "split_layers",
    "token_step_costs",
    "topology",
]
