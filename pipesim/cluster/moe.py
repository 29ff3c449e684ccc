"""Mixture-of-experts layers: many MLPs ("experts"), and a router that sends each token to
a few of them.

A MoE layer (Shazeer et al. 2017; GShard; Mixtral; DeepSeekMoE) keeps the dense layer's
attention and replaces its MLP by ``E`` expert MLPs of width ``f_e`` and a router, a linear
map ``h -> E`` whose scores pick the ``k`` experts each token goes to. ``S`` shared experts
(DeepSeekMoE, Dai et al. 2024) see every token. So a layer *holds* ``E + S`` MLPs and the
router, while a token *activates* ``k + S`` of them and the router: a MoE model's total
and activated parameters part ways, and its FLOPs follow the activated ones.

Experts are counted as pipesim counts a dense MLP (``pipesim.cluster.transformer``): gated
(three matrices) or plain (two) as the model's ``mlp``, each linear layer with its bias;
the router is one more linear layer (``h E`` weights, ``E`` biases: DeepSeek-V3's router
has exactly that, its score-correction bias). Some models lead with dense layers
(DeepSeek-V3: its first 3 of 61), ``dense_layers``. ``capacity_factor`` caps the tokens an
expert takes (GShard; None: no token is dropped). ``routing`` says how the router spreads
the token copies over the experts (``pipesim.cluster.routing``), ``redundant_experts``
how many extra expert slots DeepSeek-V3's load balancer (EPLB) fills with copies of the
hottest experts, and ``max_nodes_per_token`` DeepSeek-V3's node-limited routing (each
token's copies go to at most that many nodes).

Under expert parallelism (``ExpertSplit``) the ``E`` experts are spread over ``ep`` ranks,
``E / ep`` on each (``(E + R) / ep`` slots with ``R`` redundant ones), and every rank
computes the token copies routed to its experts; with uniform routing a rank receives as
many copies, ``T k``, as its own ``T`` tokens make, now over ``E / ep`` experts. With EP = 1
and uniform routing a microbatch's ``T`` tokens make ``T k`` expert rows, ``T k // E`` for
each expert and one more for ``T k mod E`` of them (``expert_rows``); the experts' GEMMs
run as one grouped GEMM (Megatron-LM's ``--moe-grouped-gemm``), priced by
``pipesim.cluster.gemm.grouped_gemm_ms``. Uneven routing makes one rank the slowest: its
expert GEMMs take ``load_factor`` times the even share's time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gemm import grouped_gemm_ms
from pipesim.cluster.gpus import GpuProfile
from pipesim.cluster.routing import Routing


@dataclass(frozen=True, slots=True, kw_only=True)
class MoE:
    """A model's mixture-of-experts layers (module docstring): ``experts`` routed experts,
    ``top_k`` of them per token, each an MLP of width ``expert_ffn_hidden``, plus
    ``shared_experts`` that every token passes through; the first ``dense_layers`` layers
    of the model are dense; ``capacity_factor``, ``routing``, ``redundant_experts`` and
    ``max_nodes_per_token`` as the module docstring says."""

    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int = 0
    dense_layers: int = 0
    capacity_factor: float | None = None
    routing: Routing = Routing()
    redundant_experts: int = 0
    max_nodes_per_token: int | None = None

    def __post_init__(self) -> None:
        for name in ("experts", "top_k", "expert_ffn_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"moe {name} must be a positive integer, got {value!r}")
        for name in ("shared_experts", "dense_layers", "redundant_experts"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"moe {name} must be a non-negative integer, got {value!r}")
        if self.top_k > self.experts:
            raise ValueError(
                f"moe top_k must be at most experts, got top_k={self.top_k}, experts={self.experts}"
            )
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"moe capacity_factor must be > 0, got {self.capacity_factor!r}")
        limit = self.max_nodes_per_token
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"moe max_nodes_per_token must be a positive integer, got {limit!r}")

    @property
    def active_experts(self) -> int:
        """Expert MLPs one token passes through: ``k`` routed and every shared one."""
        return self.top_k + self.shared_experts

    def expert_weights(self, hidden: int, mlp_matrices: int) -> int:
        """One expert's matrices: ``2 h f_e`` plain, ``3 h f_e`` gated."""
        return mlp_matrices * hidden * self.expert_ffn_hidden

    def expert_parameters(self, hidden: int, mlp_matrices: int) -> int:
        """One expert's matrices and biases (``(m - 1) f_e + h`` of them)."""
        biases = (mlp_matrices - 1) * self.expert_ffn_hidden + hidden
        return self.expert_weights(hidden, mlp_matrices) + biases

    def router_parameters(self, hidden: int) -> int:
        """The router: ``h E`` weights and ``E`` biases."""
        return hidden * self.experts + self.experts

    def parameters(self, hidden: int, mlp_matrices: int) -> int:
        """What one MoE layer holds in place of a dense MLP: ``E + S`` experts, the router."""
        expert = self.expert_parameters(hidden, mlp_matrices)
        return (self.experts + self.shared_experts) * expert + self.router_parameters(hidden)

    def activated_parameters(self, hidden: int, mlp_matrices: int) -> int:
        """What one token of a MoE layer uses of those: ``k + S`` experts and the router."""
        expert = self.expert_parameters(hidden, mlp_matrices)
        return self.active_experts * expert + self.router_parameters(hidden)

    def activated_weights(self, hidden: int, mlp_matrices: int) -> int:
        """The matrices one token multiplies by (``2`` FLOPs each per pass): the ``k + S``
        experts' and the router's ``h E``."""
        return self.active_experts * self.expert_weights(hidden, mlp_matrices) + (
            hidden * self.experts
        )

    def layer_split(self, layers: int, start: int) -> tuple[int, int]:
        """``(dense, moe)``: how many of the ``layers`` layers from index ``start`` on are
        dense (the model's first ``dense_layers``) and how many are MoE layers."""
        dense = max(0, min(layers, self.dense_layers - start))
        return dense, layers - dense

    def expert_slots(self, ranks: int = 1) -> int:
        """Expert slots one of ``ranks`` expert-parallel ranks holds: ``(E + R) / ranks``."""
        return (self.experts + self.redundant_experts) // ranks

    def expert_rows(self, tokens: int, ranks: int = 1) -> tuple[tuple[int, int], ...]:
        """``(rows, experts)`` groups: the ``tokens * top_k`` rows of a microbatch spread as
        evenly as can be over the routed experts (uniform routing, no dropping), or, with
        ``ranks`` expert-parallel ranks, over one rank's ``expert_slots``."""
        slots = self.expert_slots(ranks)
        base, extra = divmod(tokens * self.top_k, slots)
        groups = ((base + 1, extra), (base, slots - extra))
        return tuple((rows, count) for rows, count in groups if count and rows)


@dataclass(frozen=True, slots=True)
class ExpertSplit:
    """How one GPU runs a MoE layer's routed experts: over ``degree`` expert-parallel
    ranks (each holding ``expert_slots(degree)`` of them), each expert split ``tensor``
    ways (expert tensor parallelism; None: as the layer's tensor parallelism), and the
    slowest rank's token copies ``load_factor`` times the even share ``T k``
    (``pipesim.cluster.expert_load``)."""

    degree: int = 1
    tensor: int | None = None
    load_factor: float = 1.0


ONE_RANK = ExpertSplit()  # every GPU holds every expert, routing even


def expert_pass_ms(
    moe: MoE,
    hidden: int,
    mlp_matrices: int,
    tokens: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    *,
    tensor: int = 1,
    fp8: str | None = None,
    split: ExpertSplit = ONE_RANK,
) -> tuple[float, float, float]:
    """The routed experts' forward, input-gradient and weight-gradient GEMMs for a
    microbatch of ``tokens`` tokens on one of ``tensor`` GPUs (each expert split as a dense
    MLP is, or ``split.tensor`` ways), as grouped GEMMs: the up (and gate) projection
    ``(rows, (m - 1) f_e / t, h)`` and the down projection ``(rows, h, f_e / t)`` of every
    expert slot a rank holds, ``rows`` as ``expert_rows`` deals them; backward ``(rows, k,
    n)`` and ``(k, n, rows)`` as for any linear layer
    (``pipesim.cluster.pass_time.linear_pass_ms``).

    With expert tensor parallelism ``e`` other than ``t`` an expert-tensor group of ``e``
    GPUs gathers the tokens of ``e / t`` tensor-parallel groups (Megatron-Core's
    ``--expert-tensor-parallel-size``): ``tokens e / t`` rows at width ``f_e / e``, the
    same FLOPs per GPU. The slowest rank's GEMMs take ``split.load_factor`` times these."""
    experts_tensor = split.tensor or tensor
    if experts_tensor != tensor:
        tokens = math.ceil(tokens * experts_tensor / tensor)
    width = moe.expert_ffn_hidden // experts_tensor
    shapes = (((mlp_matrices - 1) * width, hidden), (hidden, width))
    rows = moe.expert_rows(tokens, split.degree)

    def grouped(order) -> float:
        return sum(
            grouped_gemm_ms([order(r, n, k, c) for r, c in rows], gpu, efficiency, fp8=fp8)
            for n, k in shapes
        )

    times = (
        grouped(lambda r, n, k, c: (r, n, k, c)),
        grouped(lambda r, n, k, c: (r, k, n, c)),
        grouped(lambda r, n, k, c: (k, n, r, c)),
    )
    if split.load_factor == 1.0:
        return times
    return tuple(t * split.load_factor for t in times)


__all__ = ["ONE_RANK", "ExpertSplit", "MoE", "expert_pass_ms"]
