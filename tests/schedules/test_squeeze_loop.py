"""The compiled building-block squeeze takes exactly the NumPy squeeze's decisions.

``pipesim.schedules.policies.squeeze_loop`` walks the passes slot by slot in a loop numba
compiles; ``building_blocks`` keeps the NumPy squeeze that judges a window at once. On
V-Half's and V-Min's blocks, and on blocks with passes pushed later by whole intervals
(more room to squeeze, other memory caps), both must give the same schedule, action for
action; so must the loop run as plain Python (it is also the code numba compiles).
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules.policies import building_blocks, squeeze_loop, v_half, v_min
from pipesim.schedules.policies.building_blocks import INTERVAL, build_v_schedule

MODULES = {"v-half": v_half, "v-min": v_min}


def built(loop, devices, microbatches, blocks):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(building_blocks, "compiled_squeeze", lambda passes: loop)
        return build_v_schedule(devices, microbatches, blocks, "v")


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(MODULES)))
    devices = draw(st.integers(1, 10))
    microbatches = draw(st.integers(1, 40))
    blocks = MODULES[name].blocks(devices)
    pushed = draw(st.booleans())
    if pushed:  # a later start keeps the residues distinct, so the block stays usable
        shifts = st.lists(st.integers(0, 2), min_size=4, max_size=4)
        blocks = [
            tuple(o + INTERVAL * s for o, s in zip(block, draw(shifts), strict=True))
            for block in blocks
        ]
    return devices, microbatches, blocks


@pytest.fixture(scope="module")
def compiled_loop():
    loop = squeeze_loop.compiled_squeeze(0, enabled=True)
    if loop is None:
        pytest.skip("numba is not installed: the NumPy squeeze is the only one")
    return loop


@settings(max_examples=40, deadline=None)
@given(case=cases())
def test_compiled_squeeze_equals_numpy_squeeze(compiled_loop, case):
    devices, microbatches, blocks = case
    numpy_made = built(None, devices, microbatches, blocks)
    compiled_made = built(compiled_loop, devices, microbatches, blocks)
    assert compiled_made.device_actions == numpy_made.device_actions
    assert compiled_made == numpy_made


@settings(max_examples=15, deadline=None)
@given(case=cases())
def test_plain_python_loop_equals_numpy_squeeze(case):
    devices, microbatches, blocks = case
    numpy_made = built(None, devices, microbatches, blocks)
    python_made = built(squeeze_loop.squeeze_loop, devices, microbatches, blocks)
    assert python_made == numpy_made


def test_numpy_until_enough_passes(monkeypatch):
    """A small squeeze stays in NumPy until the process has squeezed enough passes."""
    monkeypatch.setattr(squeeze_loop, "_loaded", [])
    monkeypatch.setattr(squeeze_loop, "_numpy_passes", [0])
    small = squeeze_loop.COMPILE_AFTER_PASSES // 3 + 1
    assert squeeze_loop.compiled_squeeze(small) is None
    assert squeeze_loop.compiled_squeeze(small) is None
    assert squeeze_loop.compiled_squeeze(0, enabled=False) is None
    squeeze_loop.compiled_squeeze(small)  # past the threshold: loaded (None without numba)
    assert len(squeeze_loop._loaded) == 1
