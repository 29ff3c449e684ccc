"""The fast V-Half / V-Min generator makes exactly the reference's schedules.

pipesim.schedules.building_blocks checks the squeeze's memory cap incrementally instead of
recounting the whole device after every tried move; tests/schedules/v_reference.py keeps
the plain algorithm. Every device's action order must match, action for action.
"""

import pytest

from pipesim.schedules import v_half, v_min
from pipesim.schedules.building_blocks import build_v_schedule
from tests.schedules.v_reference import reference_v_schedule

MODULES = {"v-half": v_half, "v-min": v_min}


def assert_same(name: str, devices: int, microbatches: int) -> None:
    blocks = MODULES[name].blocks(devices)
    fast = build_v_schedule(devices, microbatches, blocks, name)
    reference = reference_v_schedule(devices, microbatches, blocks, name)
    for d, (got, want) in enumerate(
        zip(fast.device_actions, reference.device_actions, strict=True)
    ):
        assert got == want, f"{name} p={devices} m={microbatches} device {d}"
    assert fast == reference


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("devices", range(1, 9))
def test_fast_equals_reference_small(name, devices):
    """Every p in 1..8 and m in 1..40: the same action order on every device."""
    for microbatches in range(1, 41):
        assert_same(name, devices, microbatches)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize(
    ("devices", "microbatches"), [(8, 160), (12, 97), (16, 64), (24, 50), (9, 200)]
)
def test_fast_equals_reference_large(name, devices, microbatches):
    assert_same(name, devices, microbatches)
