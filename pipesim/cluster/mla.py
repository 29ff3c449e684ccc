"""Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, section 2.1; DeepSeek-V3).

Standard attention projects each token to ``a`` query, key and value heads. MLA first
compresses the token to two small latents and projects the heads up from them:

* queries: ``h -> q_lora`` (down), a norm on the latent, ``q_lora -> a (d_nope + d_rope)``
  (up): each head's query has a part without position (``d_nope``) and a rotary part
  (``d_rope``);
* keys and values: ``h -> kv_lora + d_rope`` (down: the latent and one rotary key shared by
  all heads), a norm on the latent, ``kv_lora -> a (d_nope + d_v)`` (up: each head's key
  without position, and its value);
* the output projection ``a d_v -> h``.

The scores are computed per head with keys of width ``d_nope + d_rope`` and values of width
``d_v``. What a KV cache keeps per token and layer is the compressed latent and the shared
rotary key, ``kv_lora + d_rope`` elements (DeepSeek-V2, Table 1: ``(d_c + d_h^R) l``),
instead of ``2 a d`` (``kv_cache_elements``). Training runs the projections as written
(no absorption of the up-projections into the queries), so every projection is a GEMM of
every token.

Counted as pipesim counts attention (``pipesim.cluster.transformer``): each projection with
its bias, each norm with two vectors of its width. The checkpoints of DeepSeek-V2 and V3 have
no biases and RMSNorm (one vector): pipesim's count is a few thousand parameters a layer
above theirs, as for dense models.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class MLA:
    """The widths of multi-head latent attention (module docstring), as DeepSeek's configs
    name them: ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
    ``qk_rope_head_dim``, ``v_head_dim``."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"mla {name} must be a positive integer, got {value!r}")

    @property
    def qk_head_dim(self) -> int:
        """A query's (and a key's) width per head: ``d_nope + d_rope``."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def projections(self, hidden: int, heads: int) -> tuple[tuple[int, int], ...]:
        """``(inputs, outputs)`` of each projection: query down and up, key-value down and
        up, output."""
        a = heads
        return (
            (hidden, self.q_lora_rank),
            (self.q_lora_rank, a * self.qk_head_dim),
            (hidden, self.kv_lora_rank + self.qk_rope_head_dim),
            (self.kv_lora_rank, a * (self.qk_nope_head_dim + self.v_head_dim)),
            (a * self.v_head_dim, hidden),
        )

    def weights(self, hidden: int, heads: int) -> int:
        """The projections' matrices."""
        return sum(n_in * n_out for n_in, n_out in self.projections(hidden, heads))

    def biases(self, hidden: int, heads: int) -> int:
        """One bias per projection output."""
        return sum(n_out for _, n_out in self.projections(hidden, heads))

    @property
    def norm_parameters(self) -> int:
        """The norms on the two latents, two vectors each: ``2 (q_lora + kv_lora)``."""
        return 2 * (self.q_lora_rank + self.kv_lora_rank)

    def gemm_shapes(self, hidden: int, heads: int, tensor: int = 1) -> tuple[tuple[int, int], ...]:
        """The ``(n, k)`` of each projection's forward GEMM on one of ``tensor`` GPUs
        (Megatron-LM's MLA: the down projections whole on every GPU, the up projections
        split by heads, the output projection row-parallel)."""
        (_, q_down), (_, q_up), (_, kv_down), (_, kv_up), (o_in, _) = self.projections(
            hidden, heads
        )
        t = tensor
        return (
            (q_down, hidden),
            (q_up // t, self.q_lora_rank),
            (kv_down, hidden),
            (kv_up // t, self.kv_lora_rank),
            (hidden, o_in // t),
        )

    def saved_elements(self, heads: int) -> tuple[int, int]:
        """What one token's attention keeps for the backward beyond the layer's input and
        norm, in elements, as ``(whole, split)``: the latents before and after their norms
        and the shared rotary key, whole on every tensor-parallel GPU; the queries, keys,
        values and the output projection's input, split by heads."""
        whole = 2 * self.q_lora_rank + 2 * self.kv_lora_rank + self.qk_rope_head_dim
        split = 2 * heads * self.qk_head_dim + 2 * heads * self.v_head_dim
        return whole, split

    @property
    def kv_cache_elements(self) -> int:
        """What a KV cache keeps per token and layer: ``kv_lora + d_rope``."""
        return self.kv_lora_rank + self.qk_rope_head_dim


__all__ = ["MLA"]
