"""What a user of a decode pipeline asks: how soon the first token, how fast the rest.

In a decode schedule (``pipesim.schedules.decode``) group ``i``'s token step ``t`` ends on
the last device at virtual stage ``t p + p - 1``; the token is sampled there (the LM head
lives on the last stage), so that is when the group holds its token. pipesim measures, per
group:

* TTFT (time to first token): the end of its prefill (step 0) on the last stage, from time
  0, when every request of the static batch is present;
* TPOT (time per output token): ``(end of step T-1 - end of step 0) / (T - 1)`` on the last
  stage, the mean gap between its tokens after the first (None when ``T = 1``);

and for the run, ``tokens_per_second``: every token of every request over the makespan.

The closed form (``DecodeAnalytic``) holds when every stage costs the same: prefill ``P``,
decode ``D``, one hop time between neighbouring devices (``cP`` for a prefill's message,
``cD`` for a decode step's) and ``c0`` for the sampled token's way back (none on one
device), messages never queueing. Group ``i`` (from 0) then ends its prefill at
``(i + 1) P + (p - 1)(P + cP)``, so the mean TTFT over ``k`` groups is

    ((k + 1) / 2) P + (p - 1)(P + cP),

and in steady state each group emits a token every

    R = max(k D, p D + (p - 1) cD + c0)

(the device cycles through ``k`` groups, or one group's token goes round the pipeline),
that is ``max(p, k) D`` on ideal links. The steady state is what ``tpot_ms`` and
``tokens_per_second`` (``k b / R``) predict; the simulated TPOT equals it exactly when
``P = D`` and the links are ideal. Otherwise the first gaps after the prefill differ:
every device runs all ``k`` prefills before any decode step, so with a long prefill the
early groups' first decode steps wait for the later groups' prefills.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipesim.schedules.decode import stage_of, step_of
from pipesim.schedules.ir import F, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology
from pipesim.sim.trace import KIND_CODE, Lane, RowKind, Trace


@dataclass(frozen=True, slots=True)
class DecodeAnalytic:
    """The closed forms of a uniform decode pipeline (module docstring)."""

    ttft_ms: float
    tpot_ms: float
    tokens_per_second: float


@dataclass(frozen=True, slots=True)
class DecodeMetrics:
    """Per group TTFT and TPOT (ms), their means, output tokens per second of the run, and
    the closed forms where they apply."""

    groups: int
    group_size: int
    tokens: int
    ttft_ms: float
    tpot_ms: float | None
    tokens_per_second: float
    group_ttft_ms: tuple[float, ...]
    group_tpot_ms: tuple[float, ...] | None
    analytic: DecodeAnalytic | None = None

    def to_dict(self) -> dict:
        return {
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "tokens_per_second": self.tokens_per_second,
            "decode_tokens": self.tokens,
            "group_ttft_ms": list(self.group_ttft_ms),
            "group_tpot_ms": None if self.group_tpot_ms is None else list(self.group_tpot_ms),
        }


def token_end_ms(trace: Trace, schedule: Schedule) -> np.ndarray:
    """``ends[i, t]``: when group ``i``'s token step ``t`` ends on the last device."""
    p, k = schedule.devices, schedule.microbatches
    steps = schedule.stages // p
    last = (trace.lane == Lane.COMPUTE) & (trace.device == p - 1)
    ends = np.full((k, steps), np.nan)
    stage, group = trace.stage[last], trace.microbatch[last]
    ends[group, step_of(stage, p)] = trace.end[last]
    return ends


def decode_metrics(
    trace: Trace,
    schedule: Schedule,
    costs: Costs,
    group_size: int,
    topology: Topology | None = None,
) -> DecodeMetrics:
    """TTFT, TPOT and tokens/s of a simulated decode schedule (module docstring)."""
    ends = token_end_ms(trace, schedule)
    k, steps = ends.shape
    ttft = ends[:, 0]
    tpot = (ends[:, -1] - ends[:, 0]) / (steps - 1) if steps > 1 else None
    makespan = trace.makespan_ms
    produced = k * group_size * steps
    return DecodeMetrics(
        groups=k,
        group_size=group_size,
        tokens=steps,
        ttft_ms=float(ttft.mean()),
        tpot_ms=None if tpot is None else float(tpot.mean()),
        tokens_per_second=produced / (makespan / 1e3) if makespan > 0 else 0.0,
        group_ttft_ms=tuple(float(v) for v in ttft),
        group_tpot_ms=None if tpot is None else tuple(float(v) for v in tpot),
        analytic=decode_closed_form(schedule, costs, group_size, topology),
    )


def decode_closed_form(
    schedule: Schedule, costs: Costs, group_size: int, topology: Topology | None
) -> DecodeAnalytic | None:
    """The closed forms of the module docstring, or None where the costs or links are not
    uniform, a message could queue, sends block, or a per-action overhead is set."""
    p, k = schedule.devices, schedule.microbatches
    steps = schedule.stages // p
    prefill = set(costs.forward_ms[:p])
    decode = set(costs.forward_ms[p : steps * p]) or set(prefill)
    if len(prefill) != 1 or len(decode) != 1 or costs.overhead_ms:
        return None
    P, D = prefill.pop(), decode.pop()  # noqa: N806 - the docstring's letters
    hops = _hops_ms(schedule, costs, topology, P, D)
    if hops is None:
        return None
    prefill_hop, decode_hop, back_hop = hops
    ttft = (k + 1) / 2 * P + (p - 1) * (P + prefill_hop)
    period = max(k * D, p * D + (p - 1) * decode_hop + back_hop)
    rate = k * group_size / (period / 1e3) if period > 0 else 0.0
    return DecodeAnalytic(ttft_ms=ttft, tpot_ms=period, tokens_per_second=rate)


def _hops_ms(
    schedule: Schedule, costs: Costs, topology: Topology | None, prefill_ms: float, decode_ms: float
) -> tuple[float, float, float] | None:
    """``(c of the prefill, c of a decode step, c0)``: the hop between neighbouring devices
    in step 0 and in later steps, and the token's hop back, when each is one time for
    every pair and step and no message holds its link longer than a step computes."""
    p = schedule.devices
    if topology is None:
        return 0.0, 0.0, 0.0
    if p > 1 and (not topology.comm_overlap or topology.channels):
        return None
    steps = schedule.stages // p
    kinds = (
        ([(s, s + 1, stage_of(0, s, p)) for s in range(p - 1)], prefill_ms),
        ([(s, s + 1, stage_of(t, s, p)) for t in range(1, steps) for s in range(p - 1)], decode_ms),
        ([(p - 1, 0, stage_of(t, p - 1, p)) for t in range(steps - 1)] if p > 1 else [], decode_ms),
    )
    found = []
    for hops, compute_ms in kinds:
        times = set()
        for src, dst, stage in hops:
            link, nbytes = topology.link(src, dst), costs.activation_bytes[stage]
            if link.occupancy_ms(nbytes) > compute_ms:
                return None  # messages would queue on the link
            times.add(link.transfer_ms(nbytes))
        if len(times) > 1:
            return None
        found.append(times.pop() if times else 0.0)
    return found[0], found[1], found[2]


def row_names(trace: Trace) -> list[str]:
    """Readable names of a decode trace's rows: ``t3 g1`` for token step 3 of group 1 (step
    0 is the prefill), ``t3 g1->0`` for its transfer to device 0; other rows keep
    ``Trace.name``."""
    p = trace.devices
    names = []
    columns = (
        trace.stage.tolist(),
        trace.microbatch.tolist(),
        trace.lane.tolist(),
        trace.peer.tolist(),
        trace.kind.tolist(),
    )
    for row, (stage, group, lane, peer, kind) in enumerate(zip(*columns, strict=True)):
        if stage < 0 or kind not in (KIND_CODE[F], RowKind.SEND_F):
            names.append(trace.name(row))
            continue
        text = f"t{step_of(stage, p)} g{group}"
        names.append(f"{text}->{peer}" if lane == Lane.COMM else text)
    return names
