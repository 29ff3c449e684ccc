"""The shape of a decoder-only transformer, as a model card gives it.

``TransformerModel`` holds the numbers a config file holds (layers, hidden size, heads, FFN
width, vocabulary) and the choices that change what a layer computes: grouped-query or
multi-head latent attention (``pipesim.cluster.mla``), plain or gated MLP, mixture-of-
experts layers after some dense ones (``pipesim.cluster.moe``), multi-token-prediction
modules after the last layer. It checks them and derives the widths every count needs;
``pipesim.cluster.transformer`` counts what the shape implies (FLOPs, parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.cluster.mla import MLA
from pipesim.cluster.moe import MoE


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformerModel:
    """The shape of a GPT-style decoder. ``ffn_hidden`` defaults to ``4 * hidden``;
    ``dtype_bytes`` is the width of weights, gradients and activations (2 for bf16);
    ``recompute`` turns on full activation recomputation; ``tied_embeddings`` shares the
    input embedding with the LM head (no separate LM-head weights on the last stage);
    ``flash_attention`` means a fused attention kernel that never stores the s x s score
    matrices, so their activation memory (``5as^2b``) is not kept (FLOPs are unchanged).
    ``head_dim`` defaults to ``hidden / heads`` (Qwen3 has wider heads); ``moe`` makes the
    layers after its ``dense_layers`` mixture-of-experts layers (``pipesim.cluster.moe``),
    ``mla`` the attention multi-head latent attention (``pipesim.cluster.mla``);
    ``mtp_layers`` adds DeepSeek-V3's multi-token-prediction modules after the last layer."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int | None = None
    dtype_bytes: int = 2
    recompute: bool = False
    tied_embeddings: bool = False
    flash_attention: bool = False
    kv_heads: int | None = None  # grouped-query attention; None: one key/value head per head
    mlp: str = "plain"  # "gated": SwiGLU's three matrices (gate, up, down)
    fp8: str | None = None  # "tensorwise" | "blockwise": FP8 linear layers
    head_dim: int | None = None  # None: hidden // heads
    moe: MoE | None = None
    mla: MLA | None = None
    mtp_layers: int = 0

    def __post_init__(self) -> None:
        if self.fp8 not in (None, "tensorwise", "blockwise"):
            raise ValueError(f"model fp8 must be 'tensorwise' or 'blockwise', got {self.fp8!r}")
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.mlp not in ("plain", "gated"):
            raise ValueError(f"model mlp must be 'plain' or 'gated', got {self.mlp!r}")
        for name in (
            "layers",
            "hidden",
            "heads",
            "seq_len",
            "vocab",
            "ffn_hidden",
            "dtype_bytes",
            "kv_heads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model {name} must be a positive integer, got {value!r}")
        if self.head_dim is None:
            if self.hidden % self.heads and self.mla is None:
                raise ValueError(
                    f"hidden must be divisible by heads, got hidden={self.hidden}, "
                    f"heads={self.heads}"
                )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.heads % self.kv_heads:  # type: ignore[operator]
            raise ValueError(
                f"kv_heads must divide heads, got heads={self.heads}, kv_heads={self.kv_heads}"
            )
        _check_mixture(self)

    @property
    def kv_head_count(self) -> int:
        return self.kv_heads  # type: ignore[return-value]  # set in __post_init__

    @property
    def ffn(self) -> int:
        return self.ffn_hidden  # type: ignore[return-value]  # set in __post_init__

    @property
    def q_width(self) -> int:
        """Width of the query projection (and of the attention output): ``a d``, ``h`` unless
        ``head_dim`` says otherwise."""
        return self.heads * self.head_dim  # type: ignore[operator]

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection: ``kv_heads * head_dim`` (``h`` without GQA)."""
        return self.kv_head_count * self.head_dim  # type: ignore[operator]

    @property
    def mlp_matrices(self) -> int:
        """Matrices of width ``h x f`` in the MLP: 2 (up, down), 3 when gated (gate, up, down)."""
        return 3 if self.mlp == "gated" else 2

    @property
    def attention_weights(self) -> int:
        """Weights of the attention block without biases: QKV ``h (a d + 2 g d)`` + output
        ``a d h`` (``h (h + 2 g d) + h^2`` where ``a d = h``), or MLA's projections."""
        h, q = self.hidden, self.q_width
        if self.mla is not None:
            return self.mla.weights(h, self.heads)
        return h * (q + 2 * self.kv_width) + q * h

    @property
    def mlp_weights(self) -> int:
        """Weights of the MLP without biases: ``2hf``, or ``3hf`` when gated; in a MoE layer
        every expert's and the router's."""
        if self.moe is not None:
            return (self.moe.experts + self.moe.shared_experts) * self.moe.expert_weights(
                self.hidden, self.mlp_matrices
            ) + self.hidden * self.moe.experts
        return self.mlp_matrices * self.hidden * self.ffn

    @property
    def activated_mlp_weights(self) -> int:
        """The MLP weights one token multiplies by: all of a dense MLP's; a MoE layer's
        ``top_k`` routed and shared experts and its router."""
        if self.moe is not None:
            return self.moe.activated_weights(self.hidden, self.mlp_matrices)
        return self.mlp_weights

    @property
    def score_width(self) -> int:
        """``a (d_qk + d_v)``: the key and value widths over all heads that the scores
        multiply by (``2 a d``; MLA: ``a (d_nope + d_rope + d_v)``)."""
        if self.mla is not None:
            return self.heads * (self.mla.qk_head_dim + self.mla.v_head_dim)
        return 2 * self.q_width

    @property
    def dense_layer(self) -> TransformerModel:
        """The model as its dense layers see it: itself, or without its MoE."""
        return self if self.moe is None else replace(self, moe=None)

    @property
    def mtp_block(self) -> TransformerModel:
        """The model as a multi-token-prediction module's block sees it: the kind of the
        model's last layer (DeepSeek-V3's MTP block is a MoE layer)."""
        moe = self.moe
        return self if moe is not None and moe.dense_layers < self.layers else self.dense_layer

    def layer_split(self, layers: int, start: int = 0) -> tuple[int, int]:
        """``(dense, moe)`` counts of ``layers`` consecutive layers from index ``start``."""
        return (layers, 0) if self.moe is None else self.moe.layer_split(layers, start)


def _check_mixture(model: TransformerModel) -> None:
    """The new shape keys: a positive ``head_dim``, at most ``layers`` dense layers before
    the MoE layers, a non-negative ``mtp_layers``."""
    if not isinstance(model.head_dim, int) or model.head_dim < 1:
        raise ValueError(f"model head_dim must be a positive integer, got {model.head_dim!r}")
    if not isinstance(model.mtp_layers, int) or model.mtp_layers < 0:
        raise ValueError(f"model mtp_layers must be >= 0, got {model.mtp_layers!r}")
    if model.moe is not None and model.moe.dense_layers > model.layers:
        raise ValueError(
            f"moe dense_layers must be at most layers, got dense_layers="
            f"{model.moe.dense_layers}, layers={model.layers}"
        )


__all__ = ["TransformerModel"]
