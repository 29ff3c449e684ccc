"""One virtual engine's iteration-level scheduler, as vLLM's (v0) runs it: ``vllm``.

Continuous batching decides, before every iteration, which sequences it holds: requests
join and leave between iterations, never in the middle of one. With pipeline parallelism
a replica runs one scheduler per pipeline stage (vLLM's "virtual engines"), each with its
own waiting queue, running set and ``kv_blocks // stages`` blocks of KV cache, so that
``stages`` batches can be in flight at once; a request stays with the engine it was given.

The choices, all vLLM v0's unless said otherwise:

* **First come, first served.** The waiting queue is served from its head; a request that
  does not fit (tokens, sequences or blocks) stops admission for this iteration.
* **Without chunked prefill** an iteration is either all prefills or all decodes: when a
  waiting prompt can be admitted (whole, within ``max_num_batched_tokens`` and
  ``max_num_seqs``, and with blocks free for all of it) the iteration admits as many as fit;
  otherwise every running sequence decodes one token. A recomputed prompt longer than the
  token budget is let through alone (vLLM would drop it; pipesim never drops a request).
* **With chunked prefill** every running sequence decodes first (one token each), then
  running prompts continue and waiting prompts start, in chunks filling what is left of
  the token budget. Blocks for a whole prompt are taken when it is admitted.
* **Preemption by recomputation.** When a decode step needs a new block and none is free,
  the newest running sequence gives its blocks back and returns to the head of the waiting
  queue; if the sequence that needs the block is itself the newest, it is the one
  preempted. Readmitted, it prefills its prompt and every token generated so far again.

A decode step touches only the sequences that cross into a new block or finish at that
step: every decoding sequence advances by one token per step, so each is filed under the
step number at which it next needs a block and at which it finishes. The cost of an
iteration is therefore independent of its batch size, not one operation per token.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from pipesim.cluster.inference import BatchShape
from pipesim.serving.kv_cache import BlockPool, blocks_for
from pipesim.serving.recorder import Recorder
from pipesim.serving.replica import ReplicaConfig


class SeqState:
    """A request inside a scheduler: how much it has computed and generated, what it holds.

    ``generated`` counts tokens sampled so far; ``target`` is the length of its current
    prefill (prompt plus generated tokens, after a preemption) and ``computed`` how much
    of it is done. A decoding sequence entered decoding at engine step ``entry_step`` with
    ``entry_generated`` tokens; ``epoch`` changes whenever it is preempted, so entries filed
    under step numbers before that are recognised as stale.
    """

    __slots__ = (
        "rid",
        "prompt",
        "output",
        "generated",
        "target",
        "computed",
        "blocks",
        "order",
        "epoch",
        "decoding",
        "entry_step",
        "entry_generated",
        "emitted_s",
    )

    def __init__(self, rid: int, prompt: int, output: int) -> None:
        self.rid = rid
        self.prompt = prompt
        self.output = output
        self.generated = 0
        self.target = 0
        self.computed = 0
        self.blocks = 0
        self.order = 0
        self.epoch = 0
        self.decoding = False
        self.entry_step = 0
        self.entry_generated = 0
        self.emitted_s = math.nan  # when its latest token left the last stage

    @property
    def context_base(self) -> int:
        """Its context length at engine step ``k`` is ``context_base + k``."""
        return self.prompt + self.entry_generated - self.entry_step


@dataclass(slots=True)
class Batch:
    """One iteration: prompt chunks ``(sequence, tokens)`` and, when ``decode_step`` is not
    -1, one token for each of ``decode_seqs`` decoding sequences at that engine step."""

    prefills: list[tuple[SeqState, int]] = field(default_factory=list)
    prefill_tokens: int = 0
    prefill_attention: int = 0
    decode_step: int = -1
    decode_seqs: int = 0
    decode_context: int = 0

    @property
    def size(self) -> int:
        return len(self.prefills) + self.decode_seqs

    def shape(self) -> BatchShape:
        return BatchShape(
            self.prefill_tokens, self.prefill_attention, self.decode_seqs, self.decode_context
        )

    def add_prefill(self, seq: SeqState, tokens: int) -> None:
        self.prefills.append((seq, tokens))
        self.prefill_tokens += tokens
        self.prefill_attention += tokens * (seq.computed + tokens)


class VllmScheduler:
    """The waiting queue, the running sequences and the KV blocks of one virtual engine
    (a ``pipesim.serving.scheduler.ReplicaScheduler``)."""

    def __init__(self, config: ReplicaConfig, recorder: Recorder, replica: int, engine: int):
        self.config = config
        self.recorder = recorder
        self.replica = replica
        self.engine = engine
        self.pool = BlockPool.empty(config.engine_kv_blocks)
        self.waiting: deque[SeqState] = deque()
        self.running: dict[SeqState, None] = {}  # in order of admission, newest last
        self.prefilling: dict[SeqState, None] = {}  # running, prompt not yet complete
        self.step = 0  # decode steps formed so far
        self.decoders = 0
        self.context_base_sum = 0
        self.block_due: dict[int, list[tuple[SeqState, int]]] = {}
        self.finish_due: dict[int, list[tuple[SeqState, int]]] = {}
        self.fresh: dict[SeqState, None] = {}  # decoding, no decode step since their prefill
        self.last_decode_exit_s = math.nan
        self.step_gaps: list[float] = []  # [k]: decode step k's exit minus step k-1's
        self.admitted = 0

    @property
    def unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    @property
    def running_seqs(self) -> int:
        return len(self.running)

    @property
    def kv_blocks_used(self) -> int:
        pool = self.pool
        return pool.capacity - pool.free

    def add(self, rid: int, prompt_tokens: int, output_tokens: int) -> None:
        self.waiting.append(SeqState(rid, prompt_tokens, output_tokens))

    # -- forming a batch ------------------------------------------------------------------

    def schedule(self) -> Batch | None:
        """The next iteration's batch (allocating its blocks), or None when idle."""
        batch = Batch()
        if self.config.chunked_prefill:
            self._decode(batch)
            budget = self.config.max_num_batched_tokens - batch.decode_seqs
            for seq in list(self.prefilling):
                chunk = min(seq.target - seq.computed, budget)
                if chunk <= 0:
                    break
                batch.add_prefill(seq, chunk)
                budget -= chunk
            self._admit(batch, budget, chunked=True)
        else:
            self._admit(batch, self.config.max_num_batched_tokens, chunked=False)
            if not batch.prefills:
                self._decode(batch)
        return batch if batch.size else None

    def _admit(self, batch: Batch, budget: int, chunked: bool) -> None:
        """Move waiting prompts into the batch, head first, while they fit."""
        waiting, pool = self.waiting, self.pool
        while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = waiting[0]
            target = seq.prompt + seq.generated
            alone = not batch.prefills and not batch.decode_seqs
            if target > budget and not chunked and not alone:
                break
            blocks = blocks_for(target, self.config.block_size)
            if blocks > pool.free:
                break
            waiting.popleft()
            pool.take(blocks)
            seq.blocks, seq.target, seq.computed = blocks, target, 0
            self.admitted += 1
            seq.order = self.admitted
            self.running[seq] = None
            self.prefilling[seq] = None
            chunk = min(target, budget) if chunked else target
            batch.add_prefill(seq, chunk)
            budget -= chunk

    def _decode(self, batch: Batch) -> None:
        """One token for every decoding sequence, after finding blocks for those that
        cross into a new one (preempting when none is free)."""
        step = self.step
        due = self.block_due.pop(step, ())
        for seq, epoch in sorted(due, key=lambda entry: entry[0].order):
            if seq.epoch != epoch:
                continue
            while not self.pool.free:
                victim = next(reversed(self.running))
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.epoch == epoch:
                self.pool.take(1)
                seq.blocks += 1
                self._file_block_due(seq, step + self.config.block_size)
        if self.decoders:
            batch.decode_step = step
            batch.decode_seqs = self.decoders
            batch.decode_context = self.context_base_sum + self.decoders * step
            self.step = step + 1

    def _preempt(self, seq: SeqState) -> None:
        del self.running[seq]
        if seq.decoding:
            seq.generated = seq.entry_generated + self.step - seq.entry_step
            if seq not in self.fresh:
                seq.emitted_s = self.last_decode_exit_s
            self._stop_decoding(seq)
        else:
            del self.prefilling[seq]
        self.pool.give_back(seq.blocks)
        seq.blocks = 0
        seq.epoch += 1
        self.recorder.preemptions[seq.rid] += 1
        self.waiting.appendleft(seq)

    def _stop_decoding(self, seq: SeqState) -> None:
        """Take ``seq`` out of decoding; the steps it continued through (after its first)
        give its longest inter-token gap."""
        gaps = self.step_gaps[seq.entry_step + 1 : self.step]
        if gaps:
            self.recorder.longest_gap(seq.rid, max(gaps))
        seq.decoding = False
        self.decoders -= 1
        self.context_base_sum -= seq.context_base
        self.fresh.pop(seq, None)

    def _file_block_due(self, seq: SeqState, step: int) -> None:
        """File ``seq`` under ``step`` if it still decodes then."""
        if step <= seq.entry_step + seq.output - 1 - seq.entry_generated:
            self.block_due.setdefault(step, []).append((seq, seq.epoch))

    # -- an iteration ran -----------------------------------------------------------------

    def started(self, batch: Batch, start_s: float, exit_s: float) -> None:
        """Note when ``batch`` started on the first stage and left the last one."""
        rec = self.recorder
        for seq, _ in batch.prefills:
            if math.isnan(rec.first_scheduled_s[seq.rid]):
                rec.first_scheduled_s[seq.rid] = start_s
        if batch.decode_seqs:
            continuing = batch.decode_seqs - len(self.fresh)
            step_gap = exit_s - self.last_decode_exit_s
            self.step_gaps.append(0.0 if math.isnan(step_gap) else step_gap)
            if continuing:
                rec.gap(step_gap, continuing)
            for seq in self.fresh:
                rec.gap(exit_s - seq.emitted_s, 1)
                rec.longest_gap(seq.rid, exit_s - seq.emitted_s)
            self.fresh.clear()
            self.last_decode_exit_s = exit_s

    def complete(self, batch: Batch, exit_s: float) -> int:
        """Apply ``batch``'s outcome at ``exit_s``; how many sequences finished."""
        finished = []
        for seq, epoch in self.finish_due.pop(batch.decode_step, ()):
            if seq.epoch == epoch:
                self._stop_decoding(seq)
                finished.append(seq)
        for seq, chunk in batch.prefills:
            seq.computed += chunk
            if seq.computed == seq.target and self._emit_first(seq, exit_s):
                finished.append(seq)
        for seq in finished:
            del self.running[seq]
            self.pool.give_back(seq.blocks)
            seq.blocks = 0
            self.recorder.finish_s[seq.rid] = exit_s
        return len(finished)

    def _emit_first(self, seq: SeqState, exit_s: float) -> bool:
        """A prefill completed: its token is out. True when that was the last token."""
        del self.prefilling[seq]
        rec = self.recorder
        if seq.generated == 0:
            rec.first_token_s[seq.rid] = exit_s
        else:
            rec.gap(exit_s - seq.emitted_s, 1)
            rec.longest_gap(seq.rid, exit_s - seq.emitted_s)
        seq.generated += 1
        seq.emitted_s = exit_s
        if seq.generated >= seq.output:
            return True
        seq.decoding = True
        seq.entry_step, seq.entry_generated = self.step, seq.generated
        self.decoders += 1
        self.context_base_sum += seq.context_base
        self.fresh[seq] = None
        finish_step = self.step + seq.output - 1 - seq.generated
        self.finish_due.setdefault(finish_step, []).append((seq, seq.epoch))
        first_block_step = self.step + seq.blocks * self.config.block_size - seq.target
        self._file_block_due(seq, first_block_step)
        return False
