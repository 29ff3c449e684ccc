"""pipesim's peak memory against published peaks (docs/validation.md, "## Memory").

Every row of ``data/published_memory.csv`` is simulated with the default cost model and its
peak, for what the source measured, compared with the published one. Each row's error is
pinned (within half a point) so that a change to the memory model shows up here; the
target, peak memory within 10 % on held-out rows, is reported as it stands: 8 of the 11
held-out rows meet it (the three that miss are named in docs/validation.md with their
causes).
"""

from __future__ import annotations

import pytest

from tests.cluster.published_memory import GIB, error, load_rows, predicted_peak_gib

ROWS = load_rows()

# Percent; + means pipesim predicts more than was measured (the data file's recorded_error).
RECORDED = {r.id: 100 * r.recorded_error for r in ROWS}


def test_the_ledger_holds_out_more_than_half_on_two_gpu_types():
    held_out = [r for r in ROWS if r.role == "held_out"]
    assert {r.role for r in ROWS} == {"calibrate", "held_out"}
    assert len(held_out) == 11 and len(ROWS) == 17
    assert {r.gpu for r in ROWS} == {"a100-sxm-80gb", "h100-sxm"}
    assert {r.gpu for r in held_out} == {"a100-sxm-80gb", "h100-sxm"}


def test_a_row_by_hand():
    # Zero Bubble 14.6B, 1F1B over 16 stages, "Ett|(ttt|)*14,ttL". Device 1 holds three
    # layers and, at the peak, 15 microbatches (16 - 1): 45 layer-microbatches of
    # sbh(34 + 5as/h) = 1024 * 5120 * (34 + 40) bytes, and 18 bytes (Megatron-LM: bf16
    # weight, fp32 gradient, fp32 master and moments) for each of its 3 * (12h^2 + 13h)
    # parameters.
    (row,) = [r for r in ROWS if r.id == "zb-14.6b-1f1b"]
    h, s = 5120, 1024
    activations = 45 * s * h * (34 + 5 * 40 * s // h)
    static = 18 * 3 * (12 * h * h + 13 * h)
    assert predicted_peak_gib(row) == pytest.approx((activations + static) / GIB, rel=1e-12)
    assert (activations + static) / GIB / 32 - 1 == pytest.approx(0.0026, abs=1e-4)


@pytest.fixture(scope="module")
def errors():
    return {r.id: 100 * error(r) for r in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_rows_error_is_the_recorded_one(row, errors):
    assert errors[row.id] == pytest.approx(RECORDED[row.id], abs=0.5)


def test_against_the_target_on_held_out_rows(errors):
    held_out = {r.id: abs(errors[r.id]) for r in ROWS if r.role == "held_out"}
    misses = sorted(name for name, err in held_out.items() if err > 10)
    assert misses == ["tt-405b-3d-interleaved", "tt-70b-2d", "zb-6.2b-zb2p"]
    assert len(held_out) - len(misses) == 8
