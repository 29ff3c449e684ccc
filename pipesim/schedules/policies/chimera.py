"""Chimera (Li & Hoefler, SC'21): two pipelines running in opposite directions.

Two copies of the model share the devices: the *down* pipeline has stage k on device k,
the *up* pipeline has stage k on device D-1-k, so every device holds two stages (twice
the parameters) and the two ends of the machine both start work at time 0. In the IR the
down pipeline is chain 0 (stages 0..D-1, microbatches 0..m/2-1) and the up pipeline is
chain 1 (stage D+k on device D-1-k, microbatches m/2..m-1).

The schedule is the paper's timetable in unit steps (forward = backward = one step):

* basic unit: D microbatches, D/2 per pipeline. Each pipeline injects one microbatch
  every two steps; microbatch j of the unit runs its forward on its k-th stage at step
  ``2j + k`` and its backward there at step ``2j + 2D-1-k``, turning round at the last
  stage (the forward and backward of one pipeline fall on steps of opposite parity);
* the two pipelines interleave without collision: on a device the down pipeline's
  forwards and the up pipeline's backwards share a parity but not a window, and so do
  the down backwards and the up forwards;
* more microbatches: basic units concatenated every 2D steps (the paper's direct
  concatenation), so m must be a multiple of D.

Each device runs its passes in timetable order. With F = B each device idles D-2 steps
(D/2-1 forward and D/2-1 backward slots) against 1F1B's 2(D-1): makespan 2m + D - 2 in
forward units, bubble fraction (D-2)/(2m+D-2) with the paper's N = m.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, action_lists
from pipesim.schedules.ir import B, Chain, F, Schedule, require
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "chimera"


def _timetable_columns(devices: int, microbatches: int) -> tuple[np.ndarray, ...]:
    """Every pass of the timetable as columns ``(device, stage, kind, microbatch)`` (kind
    as ``ATOM_CODE``), each device's in step order: listed unit by unit, microbatch j of
    the unit, down then up pipeline, stage k, forward then backward, then sorted by device
    and step (a tie, if any, kept in listing order)."""
    d, half = devices, microbatches // 2
    unit, j, chain, k, backward = np.meshgrid(
        np.arange(microbatches // d),
        np.arange(d // 2),
        np.arange(2),
        np.arange(d),
        np.arange(2),
        indexing="ij",
    )
    unit, j, chain, k, backward = (a.reshape(-1) for a in (unit, j, chain, k, backward))
    microbatch = chain * half + unit * (d // 2) + j
    stage = np.where(chain == 0, k, d + k)
    device = np.where(chain == 0, k, d - 1 - k)
    step = 2 * d * unit + 2 * j + np.where(backward == 1, 2 * d - 1 - k, k)
    kind = np.where(backward == 1, ATOM_CODE[B], ATOM_CODE[F])
    order = np.lexsort((np.arange(len(step)), step, device))
    return device[order], stage[order], kind[order], microbatch[order]


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    d, m = devices, microbatches
    require(d % 2 == 0, f"chimera needs an even number of devices, got devices={d}")
    require(
        m % d == 0,
        f"chimera runs basic units of devices={d} microbatches; microbatches={m} is not a multiple",
    )
    lists = action_lists(d, *_timetable_columns(d, m))
    chains = (Chain(0, d - 1, range(m // 2)), Chain(d, 2 * d - 1, range(m // 2, m)))
    placement = tuple(range(d)) + tuple(d - 1 - k for k in range(d))
    return Schedule(lists, placement, chains, NAME)


POLICY = Policy(
    name=NAME,
    summary="Chimera: two pipelines in opposite directions (two stages per device)",
    constraints="devices even; microbatches a multiple of devices; virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
)
