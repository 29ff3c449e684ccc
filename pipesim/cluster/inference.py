"""What one inference iteration costs on one pipeline stage.

An iteration of a serving engine (or one token step of a static decode pipeline) runs a
batch through every stage once. What it costs depends only on the batch's shape: how many
prompt tokens it computes (prefill, compute bound) and how many sequences it extends by
one token (decode, usually bound by the bytes it reads: the stage's weights and the KV
cache of every sequence).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One iteration's batch, as the cost model sees it.

    ``prefill_tokens``: prompt tokens computed this iteration (whole prompts or chunks).
    ``prefill_attention``: over those chunks, the sum of ``chunk_tokens * context`` where
    ``context`` is the sequence's length at the chunk's end (the attention's work).
    ``decode_seqs``: sequences extended by one token. ``decode_context``: the sum of their
    context lengths (the KV entries the step reads).
    """

    prefill_tokens: int = 0
    prefill_attention: int = 0
    decode_seqs: int = 0
    decode_context: int = 0

    @property
    def tokens(self) -> int:
        """Tokens whose activations cross each stage boundary."""
        return self.prefill_tokens + self.decode_seqs
