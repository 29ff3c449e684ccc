"""A paged KV cache: the attention keys and values of running sequences, in fixed blocks.

vLLM's PagedAttention stores each sequence's KV entries in blocks of ``block_size``
tokens, taken from a pool as the sequence grows, so memory is lost only in a sequence's
last, partly filled block. A sequence of ``n`` cached tokens holds ``ceil(n /
block_size)`` blocks. The scheduler asks the pool before it admits a prompt (blocks for
all of it) and before each decode step that crosses into a new block; when none is free it
preempts a sequence and returns that sequence's blocks (see ``vllm_scheduler``).

No watermark is kept back (vLLM holds about 1% of the blocks in reserve for admissions).
"""

from __future__ import annotations

from dataclasses import dataclass


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold ``tokens`` cached tokens."""
    return -(-tokens // block_size)


@dataclass(slots=True)
class BlockPool:
    """The blocks of one virtual engine: ``capacity`` in all, ``free`` not held."""

    capacity: int
    free: int

    @classmethod
    def empty(cls, capacity: int) -> BlockPool:
        return cls(capacity, capacity)

    @property
    def used(self) -> int:
        return self.capacity - self.free

    def take(self, blocks: int) -> None:
        if blocks > self.free:
            raise RuntimeError(f"KV cache: {blocks=} asked, {self.free=}")
        self.free -= blocks

    def give_back(self, blocks: int) -> None:
        self.free += blocks
        if self.free > self.capacity:
            raise RuntimeError(f"KV cache: {self.free=} exceeds {self.capacity=}")
