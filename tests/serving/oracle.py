"""A token-by-token serving simulator without SimPy, to pin the engine's timelines.

It follows the same rules as pipesim.serving (vLLM v0 virtual engines, FCFS admission,
newest-first preemption by recomputation, in-order stages, a batch's next iteration formed
once its sampled tokens are back on the first stage), but the plain way: every
decode step walks every running sequence, every token's time is written down, and a heap
of (time, tie, event) drives the clock. Each sequence is a dict.
"""

from __future__ import annotations

import heapq
import math

from pipesim.cluster.inference import BatchShape
from pipesim.serving.engine import never_fits


class Engine:
    def __init__(self, blocks: int) -> None:
        self.free = blocks
        self.waiting: list[dict] = []
        self.running: list[dict] = []  # admission order
        self.busy = False


def _blocks(tokens: int, size: int) -> int:
    return -(-tokens // size)


def _preempt(engine: Engine, seq: dict) -> None:
    engine.running.remove(seq)
    engine.free += seq["blocks"]
    seq.update(blocks=0, computed=0, decoding=False)
    seq["preemptions"] += 1
    engine.waiting.insert(0, seq)


def _decode_part(engine: Engine, cfg, batch: dict) -> None:
    for seq in [s for s in engine.running if s["decoding"]]:
        if seq not in engine.running:
            continue
        if seq["prompt"] + seq["generated"] > seq["blocks"] * cfg.block_size:
            while engine.free == 0:
                victim = engine.running[-1]
                _preempt(engine, victim)
                if victim is seq:
                    break
            if seq in engine.running:
                engine.free -= 1
                seq["blocks"] += 1
    batch["decode"] = [s for s in engine.running if s["decoding"]]


def _admit(engine: Engine, cfg, batch: dict, budget: int, chunked: bool) -> None:
    while engine.waiting and budget > 0 and len(engine.running) < cfg.max_num_seqs:
        seq = engine.waiting[0]
        target = seq["prompt"] + seq["generated"]
        alone = not batch["prefill"] and not batch["decode"]
        if target > budget and not chunked and not alone:
            break
        need = _blocks(target, cfg.block_size)
        if need > engine.free:
            break
        engine.waiting.pop(0)
        engine.free -= need
        seq.update(blocks=need, target=target, computed=0)
        engine.running.append(seq)
        chunk = min(target, budget) if chunked else target
        batch["prefill"].append((seq, chunk))
        budget -= chunk


def form_batch(engine: Engine, cfg) -> dict | None:
    batch: dict = {"prefill": [], "decode": []}
    if cfg.chunked_prefill:
        _decode_part(engine, cfg, batch)
        budget = cfg.max_num_batched_tokens - len(batch["decode"])
        for seq in [s for s in engine.running if not s["decoding"]]:
            chunk = min(seq["target"] - seq["computed"], budget)
            if chunk <= 0:
                break
            batch["prefill"].append((seq, chunk))
            budget -= chunk
        _admit(engine, cfg, batch, budget, chunked=True)
    else:
        _admit(engine, cfg, batch, cfg.max_num_batched_tokens, chunked=False)
        if not batch["prefill"]:
            _decode_part(engine, cfg, batch)
    return batch if batch["prefill"] or batch["decode"] else None


def shape_of(batch: dict) -> BatchShape:
    prefill = sum(c for _, c in batch["prefill"])
    attention = sum(c * (s["computed"] + c) for s, c in batch["prefill"])
    context = sum(s["prompt"] + s["generated"] for s in batch["decode"])
    return BatchShape(prefill, attention, len(batch["decode"]), context)


def finish_batch(engine: Engine, batch: dict, exit_s: float) -> int:
    """Tokens out at ``exit_s``; returns how many sequences finished."""
    emitting = list(batch["decode"])
    for seq, chunk in batch["prefill"]:
        seq["computed"] += chunk
        if seq["computed"] == seq["target"]:
            emitting.append(seq)
            seq["decoding"] = True
    finished = 0
    for seq in emitting:
        seq["tokens"].append(exit_s)
        seq["generated"] += 1
        if seq["generated"] == seq["output"]:
            engine.running.remove(seq)
            engine.free += seq["blocks"]
            seq["blocks"] = 0
            finished += 1
    return finished


def simulate(config, requests) -> list[dict]:
    """Every request as a dict: arrival, first_scheduled, tokens (times), preemptions."""
    rc = config.replica
    costs = [config.replica_config(r).costs for r in range(config.replicas)]
    replicas = [
        [Engine(rc.engine_kv_blocks) for _ in range(rc.stages)] for _ in range(config.replicas)
    ]
    free_s = [[0.0] * rc.stages for _ in range(config.replicas)]
    outstanding = [0] * config.replicas
    seqs = []
    events: list = [(r.arrival_s, i, "arrive", r) for i, r in enumerate(requests)]
    heapq.heapify(events)
    tie = len(requests)
    turn = 0

    def launch(rep: int, e: int, now: float) -> None:
        nonlocal tie
        engine = replicas[rep][e]
        batch = form_batch(engine, rc)
        engine.busy = batch is not None
        if batch is None:
            return
        shape = shape_of(batch)
        ready = now
        for s in range(rc.stages):
            start = max(ready, free_s[rep][s])
            if s == 0:
                for seq, _ in batch["prefill"]:
                    if math.isnan(seq["first_scheduled"]):
                        seq["first_scheduled"] = start
            end = start + costs[rep].stage_ms(s, shape) / 1e3
            free_s[rep][s] = end
            if s < rc.stages - 1:
                ready = end + costs[rep].hop_ms(s, shape) / 1e3
        # the sampled tokens go back from the last stage to the first (none on one stage)
        back = end + (costs[rep].hop_ms(rc.stages - 1, shape) / 1e3 if rc.stages > 1 else 0.0)
        tie += 1
        heapq.heappush(events, (end, tie, "done", (rep, e, batch, back)))

    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "arrive":
            seq = dict(
                arrival=data.arrival_s,
                prompt=data.prompt_tokens,
                output=data.output_tokens,
                generated=0,
                computed=0,
                target=0,
                blocks=0,
                decoding=False,
                preemptions=0,
                first_scheduled=math.nan,
                tokens=[],
                rejected=never_fits(rc, data),
            )
            seqs.append(seq)
            if seq["rejected"]:
                continue
            if config.router == "round_robin":
                rep, turn = turn, (turn + 1) % config.replicas
            else:
                rep = outstanding.index(min(outstanding))
            outstanding[rep] += 1
            loads = [len(en.waiting) + len(en.running) for en in replicas[rep]]
            e = loads.index(min(loads))
            seq["replica"], seq["engine"] = rep, e
            replicas[rep][e].waiting.append(seq)
            if not replicas[rep][e].busy:
                launch(rep, e, now)
        elif kind == "done":
            rep, e, batch, back = data
            outstanding[rep] -= finish_batch(replicas[rep][e], batch, now)
            if back > now:
                tie += 1
                heapq.heappush(events, (back, tie, "back", (rep, e)))
            else:
                launch(rep, e, now)
        else:
            launch(*data, now)
    return seqs
