"""The packaged accuracy summary is what the ledgers give, and says what they say.

``pipesim/data/accuracy.json`` is made by ``python -m tests.cluster.accuracy_bands
--write`` from the ledgers' recorded errors; a ledger row whose error changed without the
file being written again fails here.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from pipesim.analysis.accuracy import ledger
from tests.cluster.accuracy_bands import (
    DOCS,
    LEDGERS,
    PACKAGED,
    ROOT,
    LedgerRow,
    docs_with_table,
    read_ledgers,
    render,
    summary,
)

PACKAGED_DATA = json.loads(PACKAGED.read_text(encoding="utf-8"))
STALE = "pipesim/data/accuracy.json is stale: run python -m tests.cluster.accuracy_bands --write"


def test_the_packaged_file_is_what_the_ledgers_give():
    assert summary(read_ledgers()) == PACKAGED_DATA, STALE
    assert render(PACKAGED_DATA) == PACKAGED.read_text(encoding="utf-8")
    assert ledger() == PACKAGED_DATA  # what pipesim reads is that file
    docs = DOCS.read_text(encoding="utf-8")
    assert docs_with_table(docs, PACKAGED_DATA) == docs, STALE  # the table in the docs too


def recorded_copy(folder: Path) -> Path:
    """The ledgers under ``folder``, with every row's error recorded as the package has it."""
    errors = {(r["id"], r["quantity"]): r["error_pct"] / 100 for r in PACKAGED_DATA["rows"]}
    for name, quantity in LEDGERS:
        if not (ROOT / name).exists():
            continue
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with (ROOT / name).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        if quantity != "step_time" or "recorded_error" in rows[0]:
            shutil.copy(ROOT / name, target)
            continue
        for row in rows:
            row["recorded_error"] = repr(errors.get((row["id"], quantity), ""))
        with target.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return folder


def test_a_changed_recorded_error_makes_the_file_stale(tmp_path):
    root = recorded_copy(tmp_path)
    assert summary(read_ledgers(root)) == PACKAGED_DATA  # recorded errors read back alike
    path = root / LEDGERS[0][0]
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    held = next(r for r in rows if r["role"] in ("holdout", "held_out"))
    held["recorded_error"] = str(float(held["recorded_error"]) + 0.001)  # 0.1 % more
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert summary(read_ledgers(root)) != PACKAGED_DATA


def row(id_, error, held_out=True, gpu="h100-sxm", gpus=64, quantity="step_time"):
    return LedgerRow(id_, quantity, held_out, gpu, gpus, 7e9, "a paper", error, "x.csv")


def test_a_regime_holds_the_median_and_largest_error_of_its_held_out_and_all_rows():
    rows = [
        row("a", 0.02),
        row("b", -0.05),
        row("c", 0.11, held_out=False),
        row("d", -0.01, held_out=False, gpus=4096),
        row("e", 0.08, gpu="a100-sxm-80gb", gpus=8, quantity="ttft"),
    ]
    regimes = {r["key"]: r for r in summary(rows)["regimes"]}
    assert list(regimes) == [
        "step_time/H100/9-1024",
        "step_time/H100/over-1024",
        "ttft/A100",
        "given_costs",
        "profile",
    ]
    h100 = regimes["step_time/H100/9-1024"]
    assert (h100["rows"], h100["held_out"]) == (3, 2)
    assert (h100["held_out_median_pct"], h100["held_out_max_pct"]) == (3.5, 5.0)
    assert (h100["median_pct"], h100["max_pct"]) == (5.0, 11.0)
    assert h100["gpus"] == [64, 64] and h100["ids"] == ["a", "b", "c"]
    large = regimes["step_time/H100/over-1024"]
    assert (large["held_out"], large["held_out_median_pct"], large["max_pct"]) == (0, None, 1.0)
    assert regimes["ttft/A100"]["size"] is None


def test_rows_without_a_role_that_counts_are_left_out_and_percent_reads_as_percent(tmp_path):
    path = tmp_path / "tests/serving/data/published_serving.csv"
    path.parent.mkdir(parents=True)
    path.write_text(
        "id,role,source,gpu,tensor,pipeline,metric,recorded_error\n"
        "s1,held_out,vLLM,h100-sxm,4,1,ttft_ms,-3.5%\n"
        "s2,calibration,vLLM,h100-sxm,2,2,tpot_ms,0.012\n"
        "s3,excluded,vLLM,h100-sxm,2,2,tpot_ms,0.5\n"
    )
    rows = read_ledgers(tmp_path)
    assert [(r.id, r.quantity, r.held_out, r.gpus, r.error) for r in rows] == [
        ("s1", "ttft", True, 4, -0.035),
        ("s2", "tpot", False, 4, 0.012),
    ]


def test_a_row_with_no_recorded_error_is_refused_by_name(tmp_path):
    path = tmp_path / "tests/cluster/data/published_memory.csv"
    path.parent.mkdir(parents=True)
    path.write_text("id,role,gpu,recorded_error\nm1,holdout,h100-sxm,\n")
    with pytest.raises(ValueError, match="m1: no recorded_error"):
        read_ledgers(tmp_path)
