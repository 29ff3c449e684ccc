"""Interleaved 1F1B (Megatron-LM virtual pipeline, Narayanan et al. 2021).

Each device holds v model chunks with loop placement: stage s sits on device s mod p, so a
microbatch visits every device v times. Microbatches move in groups of p: device r runs
chunk 0 of microbatches 0..p-1, then chunk 1 of the same p, ..., then chunk 0 of the next
group. Forward step k (0 <= k < m v) is microbatch ``(k // (p v)) p + k mod p`` on chunk
``(k mod p v) // p``; backward step k takes the chunks in reverse order.

Phases on rank r (Megatron's ``forward_backward_pipelining_with_interleaving``):

* warm-up: ``min((p - r - 1) * 2 + (v - 1) * p, m v)`` forward steps; every step when m = p;
* steady state: one forward step then one backward step;
* cool-down: the backward steps still owed.

Bubble: (p - 1) / (v m) of the ideal time, v times smaller than 1F1B, for v times more
point-to-point messages. Closed form, training with uniform per-chunk costs F and B and no
hop time: makespan ``(m v + p - 1)(F + B)``.
"""

from __future__ import annotations

from pipesim.schedules.ir import Action, B, F, Schedule, loop_placement, require, single_chain

NAME = "interleaved-1f1b"
SUMMARY = "Megatron-LM interleaved 1F1B (virtual pipeline stages, loop placement)"
CONSTRAINTS = "virtual_stages >= 2; microbatches a multiple of devices"
MIN_VIRTUAL_STAGES = 2


def _step(k: int, rank: int, devices: int, chunks: int, forward: bool) -> tuple[int, int]:
    """Stage and microbatch of forward (or backward) step k on ``rank``."""
    in_group = k % (devices * chunks)
    chunk = in_group // devices
    if not forward:
        chunk = chunks - 1 - chunk
    microbatch = (k // (devices * chunks)) * devices + k % devices
    return chunk * devices + rank, microbatch


def rank_actions(rank: int, devices: int, microbatches: int, chunks: int) -> tuple[Action, ...]:
    total = microbatches * chunks
    if microbatches == devices:
        warmup = total
    else:
        warmup = min((devices - rank - 1) * 2 + (chunks - 1) * devices, total)

    def fwd(k: int) -> Action:
        stage, mb = _step(k, rank, devices, chunks, forward=True)
        return Action(stage, F, mb)

    def bwd(k: int) -> Action:
        stage, mb = _step(k, rank, devices, chunks, forward=False)
        return Action(stage, B, mb)

    actions = [fwd(k) for k in range(warmup)]  # warm-up
    for k in range(total - warmup):  # steady state: 1F then 1B
        actions += [fwd(warmup + k), bwd(k)]
    actions += [bwd(k) for k in range(total - warmup, total)]  # cool-down
    return tuple(actions)


def build(devices: int, microbatches: int, virtual_stages: int = 2, **_: object) -> Schedule:
    require(
        virtual_stages >= 2,
        f"interleaved-1f1b needs virtual_stages >= 2 (1 is plain 1f1b), got virtual_stages={virtual_stages}",
    )
    require(
        microbatches % devices == 0,
        f"interleaved-1f1b runs microbatches in groups of devices={devices}: the last group of "
        f"microbatches={microbatches} would hold {microbatches % devices}; use a multiple of {devices}",
    )
    device_actions = tuple(
        rank_actions(r, devices, microbatches, virtual_stages) for r in range(devices)
    )
    stages = devices * virtual_stages
    return Schedule(
        device_actions,
        loop_placement(devices, virtual_stages),
        single_chain(stages, microbatches),
        NAME,
    )


def closed_form(
    p: int, m: int, v: int, forward_ms: float, backward_ms: float, hop_ms: float, training: bool
) -> tuple[float, float] | None:
    """``(makespan_ms, busy_ms per device)``: training, no hop time, m a multiple of p."""
    if not training or hop_ms != 0 or m % p:
        return None
    work = m * v * (forward_ms + backward_ms)
    return (m * v + p - 1) * (forward_ms + backward_ms), work
