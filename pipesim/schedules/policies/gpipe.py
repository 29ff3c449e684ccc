"""GPipe (Huang et al. 2019): every forward, then every backward (a flush per step).

Device d runs F of microbatches 0..m-1, then B of microbatches m-1..0 (last in, first
out, as the backward pass unwinds). Each device keeps all m activations: peak in-flight
m on every device.

Closed form, uniform costs F and B per stage and hop time c (latency + bytes / bandwidth,
the bandwidth part no longer than F or B so nothing queues): the first microbatch crosses
p - 1 hops forward and p - 1 back, makespan ``(m + p - 1)(F + B) + 2(p - 1)c``; forward
only, with no hop time, ``(m + p - 1)F``.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, rank_lists
from pipesim.schedules.ir import B, F, Schedule, single_chain
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "gpipe"


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    m = microbatches
    kind = np.repeat([ATOM_CODE[F], ATOM_CODE[B]], m)  # every forward, then every backward
    microbatch = np.concatenate([np.arange(m), np.arange(m)[::-1]])  # backwards last in first
    lists = rank_lists([(np.full(2 * m, d), kind, microbatch) for d in range(devices)])
    return Schedule(lists, tuple(range(devices)), single_chain(devices, m), NAME)


def closed_form(
    p: int, m: int, v: int, forward_ms: float, backward_ms: float, hop_ms: float, training: bool
) -> tuple[float, float] | None:
    """``(makespan_ms, busy_ms per device)`` with uniform costs, or None where none holds."""
    if not training:
        return ((m + p - 1) * forward_ms, m * forward_ms) if hop_ms == 0 else None
    work = forward_ms + backward_ms
    return (m + p - 1) * work + 2 * (p - 1) * hop_ms, m * work


POLICY = Policy(
    name=NAME,
    summary="all forwards, then all backwards (GPipe)",
    constraints="virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
    closed_form=closed_form,
)
