"""Token-by-token decoding through a pipeline, as a static forward-only schedule.

Generating text is a loop: a group of requests runs its prompt through every stage
(the prefill), the last stage samples one token per request, that token goes back to the
first stage, and the next step runs it through every stage again. The next token needs the
previous one, so one group alone keeps only one stage busy at a time; several groups in
flight fill the pipeline, as microbatches do in training.

pipesim unrolls the loop: token step ``t`` on device ``s`` is virtual stage ``t * p + s``
of a forward-only pipeline of ``p * T`` stages in loop placement (device ``s`` holds
stages ``s, p + s, 2p + s, ...``), and group ``i`` is microbatch ``i``. The engine's one
rule for forwards then says exactly what decoding needs:

* step ``t`` of group ``i`` on device ``s > 0`` waits for step ``t`` on device ``s - 1``;
* step ``t`` on device 0 waits for step ``t - 1`` on the last device (stage ``t p - 1``):
  the sampled token looping back.

Each device runs its steps in token order, group after group, breadth first as in Looped
BFS (``pipesim.schedules.policies.looped_bfs``):

    device s:  (step 0: g0 g1 ... g{k-1})  (step 1: g0 ... g{k-1})  ...  (step T-1: ...)

With ``k`` groups, ``p`` devices and equal decode steps of ``t`` ms on every stage, a group
emits a token every ``max(p, k) * t``: fewer groups than devices leave devices idle, more
make each group wait its turn (``pipesim.sim.decode``).
"""

from __future__ import annotations

from pipesim.schedules.ir import Action, F, Schedule, loop_placement, require, single_chain

NAME = "decode"
SUMMARY = "token-by-token decoding: token steps as virtual stages in loop placement"
CONSTRAINTS = "forward only; pipeline.mode: decode"


def build(devices: int, groups: int, tokens: int) -> Schedule:
    """The decode schedule of ``groups`` groups generating ``tokens`` tokens each on
    ``devices`` pipeline devices (step 0 is the prefill)."""
    require(
        devices >= 1 and groups >= 1 and tokens >= 1,
        f"devices, groups and tokens must be >= 1, got {devices=}, {groups=}, {tokens=}",
    )
    device_actions = tuple(
        tuple(
            Action(stage_of(step, rank, devices), F, group)
            for step in range(tokens)
            for group in range(groups)
        )
        for rank in range(devices)
    )
    placement = loop_placement(devices, tokens)
    return Schedule(device_actions, placement, single_chain(len(placement), groups), NAME)


def step_of(stage: int, devices: int) -> int:
    """The token step a virtual stage runs (0: the prefill)."""
    return stage // devices


def stage_of(step: int, device: int, devices: int) -> int:
    """The virtual stage of token step ``step`` on ``device``."""
    return step * devices + device
