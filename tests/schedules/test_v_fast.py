"""The fast V-Half / V-Min generator makes exactly the reference's schedules.

pipesim.schedules.policies.building_blocks checks the squeeze's memory cap inside the window a move
spans instead of recounting the whole device after every tried move;
tests/schedules/v_reference.py keeps the plain algorithm. Every device's action order must
match, action for action. The window check itself is compared with a slot-by-slot count on
random device layouts, fitting moves and failing ones alike.
"""

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules.policies import v_half, v_min
from pipesim.schedules.policies.building_blocks import _MemoryProfile, build_v_schedule
from tests.schedules.v_reference import reference_v_schedule

MODULES = {"v-half": v_half, "v-min": v_min}


def assert_same(name: str, devices: int, microbatches: int) -> None:
    blocks = MODULES[name].blocks(devices)
    fast = build_v_schedule(devices, microbatches, blocks, name)
    reference = reference_v_schedule(devices, microbatches, blocks, name)
    pairs = zip(fast.device_actions, reference.device_actions, strict=True)
    for d, (got, want) in enumerate(pairs):
        assert got == want, f"{name} p={devices} m={microbatches} device {d}"
    assert fast == reference


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("devices", range(1, 9))
def test_fast_equals_reference(name, devices):
    """p in 1..8, m in 1..24 (fill, steady state and drain for every p): same action order."""
    for microbatches in range(1, 25):
        assert_same(name, devices, microbatches)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("devices", range(1, 9))
def test_fast_equals_reference_more_microbatches(name, devices):
    """The rest of m in 1..40."""
    for microbatches in range(25, 41):
        assert_same(name, devices, microbatches)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize(
    ("devices", "microbatches"), [(8, 160), (12, 97), (16, 64), (24, 50), (9, 200), (32, 40)]
)
def test_fast_equals_reference_large(name, devices, microbatches):
    assert_same(name, devices, microbatches)


# ---------------------------------------------------------------------------
# the window check against a slot-by-slot count


def counted_peak(length: int, forwards: set[int], backwards: set[int]) -> int:
    """Activations held, slot by slot: +1 when an F starts, -1 after its W; each W runs in
    the first free slot after its I, oldest first (one queue served at free slots)."""
    taken = forwards | backwards
    started = finished = waiting = peak = 0
    for t in range(length + 1):
        started += t in forwards
        peak = max(peak, started - finished)
        if t < length and t not in taken and waiting:
            waiting -= 1
            finished += 1
        waiting += t in backwards
    return peak


@st.composite
def layouts(draw):
    """A device grid: each of the first slots F, I or free, then room for every W."""
    kinds = draw(st.lists(st.sampled_from("FI."), min_size=2, max_size=40))
    forwards = {t for t, kind in enumerate(kinds) if kind == "F"}
    backwards = {t for t, kind in enumerate(kinds) if kind == "I"}
    return len(kinds) + len(backwards) + 1, forwards, backwards


def profile(length: int, forwards: set[int], backwards: set[int]) -> _MemoryProfile:
    taken = bytearray(length)
    for t in forwards | backwards:
        taken[t] = 1
    return _MemoryProfile(sorted(forwards), sorted(backwards), taken)


def assert_window_checks_agree(length, forwards, backwards, old, cap):
    """For the pass at ``old`` moved to each earlier free slot: the one-slot check, the
    whole-window check and a full recount agree on whether the peak stays within ``cap``,
    and after a move the profile's peak is the recount's."""
    forward = old in forwards
    layout = (length, forwards, backwards)
    verdicts = profile(*layout).fits_from(forward, 0, old, cap) if old else []
    for s in range(old):
        if s in forwards or s in backwards:
            continue
        moved = (
            (forwards - {old}) | {s} if forward else forwards,
            backwards if forward else (backwards - {old}) | {s},
        )
        fits = counted_peak(length, *moved) <= cap
        assert bool(verdicts[s]) == fits, (s, old)
        after = profile(*layout)
        assert after.try_move(forward, s, old, cap) == fits, (s, old)
        assert after.peak() == counted_peak(length, *(moved if fits else (forwards, backwards)))


def test_window_check_every_small_layout():
    """Every layout of up to 6 slots, every pass, every earlier free slot, cap = peak or
    peak + 1 (e.g. "..FI.F" with cap 1: the F at 5 cannot go to 0, where it would be held
    together with the F at 2)."""
    for size in range(1, 7):
        for kinds in product("FI.", repeat=size):
            forwards = {t for t, kind in enumerate(kinds) if kind == "F"}
            backwards = {t for t, kind in enumerate(kinds) if kind == "I"}
            length = size + len(backwards) + 1
            peak = counted_peak(length, forwards, backwards)
            assert profile(length, forwards, backwards).peak() == peak
            for old in forwards | backwards:
                for cap in (peak, peak + 1):
                    assert_window_checks_agree(length, forwards, backwards, old, cap)


@settings(max_examples=200, deadline=None)
@given(layouts(), st.integers(0, 2), st.data())
def test_window_check_random_layouts(layout, spare, data):
    """The same on longer random layouts."""
    length, forwards, backwards = layout
    peak = counted_peak(*layout)
    assert profile(*layout).peak() == peak
    if forwards | backwards:
        old = data.draw(st.sampled_from(sorted(forwards | backwards)))
        assert_window_checks_agree(length, forwards, backwards, old, peak + spare)
