"""The ``model.moe`` and ``model.mla`` sections of a scenario, and the checks that join
them to the rest of ``model``.

A scenario describes a mixture-of-experts model by its config's numbers::

    model:
      attention: mla            # mha | gqa | mla
      mla: {q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128,
            qk_rope_head_dim: 64, v_head_dim: 128}
      moe: {experts: 256, top_k: 8, expert_ffn_hidden: 2048, shared_experts: 1,
            dense_layers: 3}
      mtp_layers: 1

pydantic checks each section's own keys (``MoESpec``, ``MLASpec``);
``pipesim.scenario.derive.check_mixture`` checks what one key says of another (``top_k``
against ``experts``, ``dense_layers`` against ``layers``, ``attention`` against
``kv_heads`` and ``mla``), each problem one line naming the key and what is allowed.
"""

from __future__ import annotations

from pydantic import Field

from pipesim.scenario.fields import MAX_COUNT, Count, Index, Strict


class MoESpec(Strict):
    """``model.moe``: routed experts, how many a token goes to, their width (default:
    ``model.ffn_hidden``), shared experts, leading dense layers, and the capacity factor
    (kept for expert parallelism, a later part; absent: no token is dropped)."""

    experts: Count
    top_k: Count
    expert_ffn_hidden: Count | None = None
    shared_experts: Index = 0
    dense_layers: Index = 0
    capacity_factor: float | None = Field(default=None, gt=0, le=MAX_COUNT)


class MLASpec(Strict):
    """``model.mla``: the widths of multi-head latent attention, as DeepSeek's configs name
    them (``pipesim.cluster.mla``); all five are required."""

    q_lora_rank: Count
    kv_lora_rank: Count
    qk_nope_head_dim: Count
    qk_rope_head_dim: Count
    v_head_dim: Count


__all__ = ["MLASpec", "MoESpec"]
