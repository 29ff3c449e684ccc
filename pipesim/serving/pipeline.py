"""A replica's stages as an in-order pipeline: when each iteration runs on each stage.

A stage runs one batch at a time. Batches enter the first stage in the order the replica's
schedulers form them, and every stage takes them in that same order (each stage receives
from the one before it over one in-order channel), so an iteration's whole passage can be
computed the moment it is formed:

    start[0] = max(formed, free[0])
    start[s] = max(end[s-1] + hop[s-1], free[s])      end[s] = start[s] + cost[s]

and ``free[s] = end[s]`` afterwards. The batch's next iteration can be formed only once
the tokens it sampled are back on the first stage, at ``end[-1] + hop[-1]`` (``back_s``:
``costs.hop_ms(stages - 1, shape)``, the way from the last stage to the first; nothing on
one stage, where the last stage is the first). This is exact bookkeeping of a first-come-first-served
stage for batches that arrive in pipeline order, and it costs no simulation event per
stage: the engine waits once per iteration, for ``end[-1]``, when the batch's tokens leave
the last stage.

A hop is a delay (``costs.hop_ms``: the link's bandwidth time and latency for the batch's
activations). Two batches' messages could contend for one link only if a message took
longer than the next batch's compute on the stage before it; activations of a batch are
far smaller than that compute, so link contention is not modelled here.
"""

from __future__ import annotations

from pipesim.cluster.inference import BatchShape
from pipesim.serving.replica import IterationCosts


class StagePipeline:
    """The stages of one replica, each free from ``free_s[s]`` on."""

    __slots__ = ("costs", "free_s", "_stages")

    def __init__(self, costs: IterationCosts) -> None:
        self.costs = costs
        self._stages = costs.stages
        self.free_s = [0.0] * self._stages

    def run(self, formed_s: float, shape: BatchShape) -> tuple[list[float], list[float]]:
        """Book one iteration formed at ``formed_s``; its start and end on every stage,
        seconds."""
        costs = self.costs
        free = self.free_s
        starts: list[float] = []
        ends: list[float] = []
        ready_s = formed_s
        last = self._stages - 1
        for stage in range(self._stages):
            start = ready_s if ready_s > free[stage] else free[stage]
            end = start + costs.stage_ms(stage, shape) * 1e-3
            free[stage] = end
            starts.append(start)
            ends.append(end)
            if stage < last:
                ready_s = end + costs.hop_ms(stage, shape) * 1e-3
        return starts, ends

    def back_s(self, shape: BatchShape) -> float:
        """Seconds the sampled tokens of ``shape`` take from the last stage to the first."""
        last = self._stages - 1
        return self.costs.hop_ms(last, shape) * 1e-3 if last else 0.0
