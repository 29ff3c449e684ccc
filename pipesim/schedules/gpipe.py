"""GPipe (Huang et al. 2019): every forward, then every backward (a flush per step).

Device d runs F of microbatches 0..m-1, then B of microbatches m-1..0 (last in, first
out, as the backward pass unwinds). Each device keeps all m activations: peak in-flight
m on every device.
"""

from __future__ import annotations

from pipesim.schedules.ir import Action, B, F, Schedule, require, single_chain

NAME = "gpipe"
SUMMARY = "all forwards, then all backwards (GPipe)"
CONSTRAINTS = "virtual_stages = 1"
VIRTUAL_STAGES = 1


def build(devices: int, microbatches: int, virtual_stages: int = 1, **_: object) -> Schedule:
    require(
        virtual_stages == 1, f"gpipe takes virtual_stages = 1, got virtual_stages={virtual_stages}"
    )
    device_actions = tuple(
        tuple(Action(d, F, i) for i in range(microbatches))
        + tuple(Action(d, B, i) for i in reversed(range(microbatches)))
        for d in range(devices)
    )
    return Schedule(
        device_actions, tuple(range(devices)), single_chain(devices, microbatches), NAME
    )
