"""The ``model.moe`` and ``model.mla`` sections of a scenario, and the checks that join
them to the rest of ``model``.

A scenario describes a mixture-of-experts model by its config's numbers::

    model:
      attention: mla            # mha | gqa | mla
      mla: {q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128,
            qk_rope_head_dim: 64, v_head_dim: 128}
      moe: {experts: 256, top_k: 8, expert_ffn_hidden: 2048, shared_experts: 1,
            dense_layers: 3, max_nodes_per_token: 4,
            routing: {kind: zipf, zipf_s: 0.5}, redundant_experts: 0}
      mtp_layers: 1

pydantic checks each section's own keys (``MoESpec``, ``MLASpec``);
``pipesim.scenario.derive.check_mixture`` checks what one key says of another (``top_k``
against ``experts``, ``dense_layers`` against ``layers``, ``attention`` against
``kv_heads`` and ``mla``), and ``pipesim.scenario.experts`` what ``model.moe`` and
``parallel.expert`` say of each other, each problem one line naming the key and what is
allowed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pipesim.scenario.fields import MAX_COUNT, Count, Index, Strict


class RoutingSpec(Strict):
    """``model.moe.routing``: how the router spreads token copies over the experts
    (``pipesim.cluster.routing``): ``uniform``; ``zipf`` with exponent ``zipf_s``; ``hot``,
    ``hot_experts`` experts taking ``hot_fraction`` of the copies; or a measured
    ``histogram``, one count (or share) per expert."""

    kind: Literal["uniform", "zipf", "hot", "histogram"] = "uniform"
    zipf_s: float = Field(default=1.0, ge=0, le=100)
    hot_fraction: float = Field(default=0.0, ge=0, le=1)
    hot_experts: Count = 1
    histogram: list[Annotated[float, Field(ge=0, le=1e18)]] | None = None


class MoESpec(Strict):
    """``model.moe``: routed experts, how many a token goes to, their width (default:
    ``model.ffn_hidden``), shared experts, leading dense layers, the capacity factor
    (absent: no token is dropped), the router's spread over the experts (``routing``),
    redundant expert slots (DeepSeek-V3's EPLB) and node-limited routing (at most
    ``max_nodes_per_token`` nodes a token's copies go to)."""

    experts: Count
    top_k: Count
    expert_ffn_hidden: Count | None = None
    shared_experts: Index = 0
    dense_layers: Index = 0
    capacity_factor: float | None = Field(default=None, gt=0, le=MAX_COUNT)
    routing: RoutingSpec = RoutingSpec()
    redundant_experts: Index = 0
    max_nodes_per_token: Count | None = None


class MLASpec(Strict):
    """``model.mla``: the widths of multi-head latent attention, as DeepSeek's configs name
    them (``pipesim.cluster.mla``); all five are required."""

    q_lora_rank: Count
    kv_lora_rank: Count
    qk_nope_head_dim: Count
    qk_rope_head_dim: Count
    v_head_dim: Count


__all__ = ["MLASpec", "MoESpec", "RoutingSpec"]
