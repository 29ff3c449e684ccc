"""The stage functions that calibration runs: synthetic sleeps, MLPs and GPT-style blocks.

Three families, from "only the runtime is under test" to "the real thing":

* ``synthetic``: every stage is an autograd function that sleeps for a known time in the
  forward (``forward_ms``), in the input-gradient backward (``backward_input_ms``) and in
  the weight-gradient backward (``backward_weight_ms``). The compute is known exactly, so
  what a cross-check measures is communication, host overhead and dependency modelling.
* ``mlp``: ``layers`` Linear-GELU pairs of width ``hidden`` (for hand-typed scenarios).
* ``transformer``: ``layers`` pre-norm GPT blocks (causal attention with ``heads`` heads,
  a 4x GELU MLP) at ``hidden`` width and ``seq`` tokens.

torch is imported inside functions: the rest of pipesim does not need it.
"""

from __future__ import annotations

from dataclasses import dataclass

OPS = ("synthetic", "mlp", "transformer")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MAX_STAGE_BYTES = 1 << 40  # 1 TiB: more than any one device holds


@dataclass(frozen=True, slots=True)
class StageSpec:
    """What one pipeline stage computes, for one microbatch of ``batch`` samples."""

    ops: str = "synthetic"
    hidden: int = 16
    layers: int = 1
    batch: int = 1
    seq: int = 1
    heads: int = 1
    dtype: str = "float32"
    forward_ms: float = 2.0
    backward_input_ms: float = 2.0
    backward_weight_ms: float = 2.0

    def __post_init__(self) -> None:
        if self.ops not in OPS:
            raise ValueError(f"ops must be one of {', '.join(OPS)}, got {self.ops!r}")
        if self.dtype not in _DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPE_BYTES)}, got {self.dtype!r}")
        if min(self.hidden, self.layers, self.batch, self.seq, self.heads) < 1:
            raise ValueError(f"hidden, layers, batch, seq and heads must be >= 1, got {self}")
        if self.ops == "transformer" and self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads}")
        if self.memory_bytes > MAX_STAGE_BYTES:  # refused before torch sizes a tensor of it
            raise ValueError(
                f"hidden={self.hidden}, layers={self.layers}, batch={self.batch}, "
                f"seq={self.seq}, heads={self.heads}: a stage of {self.memory_bytes:.3g} bytes "
                f"of weights and activations; at most {MAX_STAGE_BYTES:.3g} (1 TiB)"
            )

    @property
    def memory_bytes(self) -> int:
        """About what the stage holds: its weights, one microbatch's input and, for GPT
        blocks, the hidden activations and attention scores of one layer."""
        h, size = self.hidden, _DTYPE_BYTES[self.dtype]
        if self.ops == "synthetic":
            return self.activation_bytes
        if self.ops == "mlp":
            return self.layers * h * (h + 1) * size + self.activation_bytes
        tokens = self.batch * self.seq
        weights = self.layers * (12 * h * h + 13 * h)
        return (weights + tokens * 4 * h + self.batch * self.heads * self.seq**2) * size

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self.ops == "transformer":
            return (self.batch, self.seq, self.hidden)
        return (self.batch, self.hidden)

    @property
    def activation_bytes(self) -> int:
        """Bytes sent across a stage boundary for one microbatch."""
        count = 1
        for n in self.input_shape:
            count *= n
        return count * _DTYPE_BYTES[self.dtype]

    def shapes(self) -> dict:
        """The shapes, for a profile's provenance."""
        names = ("ops", "hidden", "layers", "batch", "seq", "heads", "dtype")
        out = {name: getattr(self, name) for name in names}
        if self.ops == "synthetic":
            out.update(
                forward_ms=self.forward_ms,
                backward_input_ms=self.backward_input_ms,
                backward_weight_ms=self.backward_weight_ms,
            )
        return out


def torch_dtype(spec: StageSpec):
    import torch

    return getattr(torch, spec.dtype)


def build_stage(spec: StageSpec, seed: int = 0, device: str = "cpu"):
    """A fresh ``nn.Module`` for one stage, seeded so every rank builds the same weights."""
    import torch

    torch.manual_seed(seed)
    if spec.ops == "synthetic":
        module = _synthetic_module(spec)
    elif spec.ops == "mlp":
        blocks = []
        for _ in range(spec.layers):
            blocks += [torch.nn.Linear(spec.hidden, spec.hidden), torch.nn.GELU()]
        module = torch.nn.Sequential(*blocks)
    else:
        module = torch.nn.Sequential(*(_gpt_block(spec) for _ in range(spec.layers)))
    return module.to(device=device, dtype=torch_dtype(spec))


def make_input(spec: StageSpec, generator=None, device: str = "cpu", requires_grad: bool = False):
    """A fresh random microbatch input of the stage's shape."""
    import torch

    x = torch.randn(spec.input_shape, generator=generator, dtype=torch.float32)
    x = x.to(device=device, dtype=torch_dtype(spec))
    return x.requires_grad_(requires_grad)


def _synthetic_module(spec: StageSpec):
    """``y = Sleep_input(x) * Sleep_weight(p)`` with a scalar parameter ``p = 1``.

    The input path sleeps ``forward_ms`` forward and ``backward_input_ms`` backward; the
    weight path sleeps ``backward_weight_ms`` backward only. An input-gradient backward
    (I) walks only the input path, a weight-gradient backward (W) only the weight path,
    a full backward (B) both, so F, I, W and B = I + W all have known durations.
    """
    import time

    import torch

    class SleepInput(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            time.sleep(spec.forward_ms / 1000.0)
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            time.sleep(spec.backward_input_ms / 1000.0)
            return grad.clone()

    class SleepWeight(torch.autograd.Function):
        @staticmethod
        def forward(ctx, p):
            return p.clone()

        @staticmethod
        def backward(ctx, grad):
            time.sleep(spec.backward_weight_ms / 1000.0)
            return grad.clone()

    class Synthetic(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            return SleepInput.apply(x) * SleepWeight.apply(self.p)

    return Synthetic()


def _gpt_block(spec: StageSpec):
    """One pre-norm GPT block: causal self-attention and a 4x GELU MLP, with residuals."""
    import torch
    import torch.nn.functional as functional

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h = spec.hidden
            self.ln1 = torch.nn.LayerNorm(h)
            self.qkv = torch.nn.Linear(h, 3 * h)
            self.proj = torch.nn.Linear(h, h)
            self.ln2 = torch.nn.LayerNorm(h)
            self.up = torch.nn.Linear(h, 4 * h)
            self.down = torch.nn.Linear(4 * h, h)

        def forward(self, x):
            b, t, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q, k, v = (z.view(b, t, spec.heads, h // spec.heads).transpose(1, 2) for z in (q, k, v))
            attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(b, t, h))
            return x + self.down(functional.gelu(self.up(self.ln2(x))))

    return Block()
