"""The ledger of published runs, summarised per regime into ``pipesim/data/accuracy.json``.

pipesim reads no file under ``tests/``, so what ``pipesim run``, ``serve`` and ``plan``
say about their own accuracy ships inside the package, made here from the ledgers:

    python -m tests.cluster.accuracy_bands           # each regime's band, as computed
    python -m tests.cluster.accuracy_bands --write   # write them into the package (and
                                                     # the table in docs/validation.md)

``tests/cluster/test_accuracy_bands.py`` fails when the packaged file is not what this
computes, so a ledger row whose error changed cannot go unnoticed.

Each ledger below is read where it exists. Per row: ``id``; ``role`` (``calibrate`` or
``calibration``, ``holdout`` or ``held_out``; any other role, e.g. ``excluded``, is left
out); ``source``; ``gpu``; the GPUs (``gpus``, else ``tensor`` x ``pipeline`` x ``data``
x ``context``, a missing factor 1); the parameters (``parameters``, else the model's
shape: ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``ffn_hidden``, ``mlp``,
``vocab``); the quantity (the ledger's own, else the ``metric`` column's: ``ttft``,
``tpot``, ``memory``, ``ratio`` in its name); and ``recorded_error``, relative (+0.05:
pipesim 5 % above the measurement; ``3.1%`` reads as 0.031), or ``recorded_ttft_error``
and ``recorded_tpot_error`` for a row that records both. A training run with a ``moe``
column is a mixture-of-experts run: its step time goes to a regime of its own
(``step_time/H100/9-1024/moe``) and its parameters are counted by pipesim from the
scenario the ledger builds for it. A row of ``published_runs.csv``
without a recorded error gets its error from the harness (``published_runs.errors``).
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipesim.analysis.accuracy import FORMAT, GIVEN, PROFILE, VERSION, regime_key, size_class
from pipesim.analysis.accuracy import family as gpu_family
from pipesim.analysis.accuracy import parameter_count as accuracy_parameter_count
from pipesim.cluster.transformer import TransformerModel, stage_parameters
from pipesim.scenario.build import parse_spec
from tests.cluster import published_runs
from tests.cluster.ledger.rows import load_training
from tests.cluster.ledger.scenarios import training_scenario

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "pipesim" / "data" / "accuracy.json"
DOCS = ROOT / "docs" / "validation.md"
TABLE = ("<!-- accuracy bands: python -m tests.cluster.accuracy_bands --write -->", "<!-- end -->")
LEDGERS = (  # (path from the repository root, the quantity of its rows unless a metric says)
    ("tests/cluster/data/published_runs.csv", "step_time"),
    ("tests/cluster/data/schedule_ratios.csv", "schedule_ratio"),
    ("tests/cluster/data/published_memory.csv", "peak_memory"),
    ("tests/serving/data/published_serving.csv", None),
)
CALIBRATION, HELD_OUT = {"calibrate", "calibration"}, {"holdout", "held_out", "held-out"}
GIVEN_TEXT = (
    "costs given by hand: exact for the costs given (nothing modelled); the error is theirs"
)
PROFILE_TEXT = (
    "measured costs (costs.profile): the timeline is exact for the costs measured; how far "
    "a real step lands from it is not in pipesim's ledger (pipesim's own cross-check, 1F1B "
    "on 2 CPU processes with synthetic 1 ms ops, replays a run within 5% and predicts one "
    "within 25%); pipesim crosscheck measures yours"
)


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One published measurement and pipesim's relative error on it."""

    id: str
    quantity: str
    held_out: bool
    gpu: str
    gpus: int
    parameters: float | None
    source: str
    error: float
    ledger: str
    moe: bool = False  # a mixture-of-experts training run (its own step-time regimes)


def read_ledgers(root: Path = ROOT) -> list[LedgerRow]:
    """Every calibration and held-out row of every ledger present under ``root``."""
    rows: list[LedgerRow] = []
    for path, quantity in LEDGERS:
        if (root / path).exists():
            rows += ledger_rows(root / path, path, quantity)
    return rows


def ledger_rows(path: Path, name: str, quantity: str | None) -> list[LedgerRow]:
    with path.open(newline="") as handle:
        raws = [r for r in csv.DictReader(handle) if r.get("role") in CALIBRATION | HELD_OUT]
    computed = {}
    if name.endswith("published_runs.csv") and any(not r.get("recorded_error") for r in raws):
        runs = published_runs.load_runs()
        computed = dict(zip((r.id for r in runs), published_runs.errors(runs), strict=True))
    rows = []
    for raw in raws:
        for what, error in recorded_errors(raw, quantity, computed):
            rows.append(
                LedgerRow(
                    raw["id"],
                    what,
                    raw["role"] in HELD_OUT,
                    raw.get("gpu") or "unknown",
                    gpu_count(raw),
                    parameter_count(raw),
                    raw.get("source", ""),
                    round(error, 6),
                    name,
                    bool(raw.get("moe")),
                )
            )
    return rows


def recorded_errors(
    raw: dict[str, str], quantity: str | None, computed: dict[str, float]
) -> list[tuple[str, float]]:
    """(quantity, error) of a row: its ``recorded_error`` (or the harness's), or one per
    ``recorded_<quantity>_error`` column."""
    if raw.get("recorded_error_pct"):  # the serving ledger records percent
        what = metric_quantity(raw.get("metric", ""), quantity)
        return [(what, float(raw["recorded_error_pct"]) / 100)]
    found = [
        (column.removeprefix("recorded_").removesuffix("_error"), relative(value))
        for column, value in raw.items()
        if column.startswith("recorded_")
        and column not in ("recorded_error", "recorded_error_pct")
        and value
    ]
    if found:
        return found
    what = metric_quantity(raw.get("metric", ""), quantity)
    if raw.get("recorded_error"):
        return [(what, relative(raw["recorded_error"]))]
    if raw["id"] in computed:
        return [(what, float(computed[raw["id"]]))]
    raise ValueError(f"{raw['id']}: no recorded_error")


def metric_quantity(metric: str, default: str | None) -> str:
    for word, quantity in (("ttft", "ttft"), ("tpot", "tpot"), ("memory", "peak_memory")):
        if word in metric.lower():
            return quantity
    if "ratio" in metric.lower():
        return "schedule_ratio"
    if default is None:
        raise ValueError(f"metric {metric!r}: not a known quantity")
    return default


def relative(text: str) -> float:
    text = text.strip()
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


def gpu_count(raw: dict[str, str]) -> int:
    if raw.get("gpus"):
        return int(raw["gpus"])
    factors = ("tensor", "pipeline", "data", "context")
    return int(np.prod([int(raw.get(k) or 1) for k in factors]))


def parameter_count(raw: dict[str, str]) -> float | None:
    if raw.get("parameters"):
        return float(raw["parameters"])
    if raw.get("moe"):
        return moe_parameter_count(raw["id"])
    if not all(raw.get(k) for k in ("layers", "hidden", "heads", "vocab")):
        return None
    model = TransformerModel(
        layers=int(raw["layers"]),
        hidden=int(raw["hidden"]),
        heads=int(raw["heads"]),
        seq_len=int(raw.get("seq_len") or 1),
        vocab=int(raw["vocab"]),
        ffn_hidden=int(raw["ffn_hidden"]) if raw.get("ffn_hidden") else None,
        kv_heads=int(raw["kv_heads"]) if raw.get("kv_heads") else None,
        mlp=raw.get("mlp") or "plain",
    )
    return float(sum(stage_parameters(model, (model.layers,))))


def moe_parameter_count(row_id: str) -> float:
    """A mixture-of-experts run's weights, every expert and MTP module's included, as
    ``pipesim run`` counts them for the scenario the ledger builds for it."""
    row = next(r for r in load_training() if r.id == row_id)
    scenario = training_scenario(row)
    return accuracy_parameter_count(parse_spec(scenario, row.id), row.id)


# ---------------------------------------------------------------------------
# The summary


def pct(values: Iterable[float], how) -> float | None:
    values = [abs(v) * 100 for v in values]
    return round(float(how(values)), 2) if values else None


def summary(rows: list[LedgerRow]) -> dict:
    """The packaged file's content: per regime (``regime_key``) its row counts, the median
    and largest |error| in percent over held-out and over all rows, the GPU types, GPUs and
    parameters it spans and its sources; then every row; then the given-costs regimes."""
    groups: dict[str, list[LedgerRow]] = {}
    for row in rows:
        key = regime_key(row.quantity, row.gpu, row.gpus, row.moe)
        groups.setdefault(key, []).append(row)
    regimes = [regime(key, group) for key, group in sorted(groups.items())]
    regimes += [
        {"key": GIVEN, "quantity": None, "rows": 0, "text": GIVEN_TEXT},
        {"key": PROFILE, "quantity": None, "rows": 0, "text": PROFILE_TEXT},
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "generated_by": "python -m tests.cluster.accuracy_bands --write",
        "ledgers": sorted({r.ledger for r in rows}),
        "regimes": regimes,
        "rows": [
            {
                "id": r.id,
                "quantity": r.quantity,
                "role": "held_out" if r.held_out else "calibration",
                "gpu": r.gpu,
                "gpus": r.gpus,
                "parameters": r.parameters,
                "error_pct": round(r.error * 100, 4),
                "source": r.source,
            }
            for r in rows
        ],
    }


def regime(key: str, group: list[LedgerRow]) -> dict:
    held = [r.error for r in group if r.held_out]
    errors = [r.error for r in group]
    params = [r.parameters for r in group if r.parameters is not None]
    first = group[0]
    return {
        "key": key,
        "quantity": first.quantity,
        "family": gpu_family(first.gpu),
        "size": size_class(first.gpus) if first.quantity == "step_time" else None,
        "moe": first.moe,
        "rows": len(group),
        "held_out": len(held),
        "median_pct": pct(errors, np.median),
        "max_pct": pct(errors, np.max),
        "held_out_median_pct": pct(held, np.median),
        "held_out_max_pct": pct(held, np.max),
        "gpu_types": sorted({r.gpu for r in group}),
        "gpus": [min(r.gpus for r in group), max(r.gpus for r in group)],
        "parameters": [min(params), max(params)] if params else None,
        "sources": sorted({r.source for r in group}),
        "ids": [r.id for r in group],
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def markdown_table(data: dict) -> str:
    """The regimes as docs/validation.md shows them, between its two ``TABLE`` markers."""
    lines = [
        "| regime | rows | held out | held-out median / max \\|error\\| | all rows "
        "median / max | GPUs | parameters |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["regimes"]:
        if not r["rows"]:
            continue
        held = "-" if not r["held_out"] else f"{r['held_out_median_pct']:.1f} % / "
        held += f"{r['held_out_max_pct']:.1f} %" if r["held_out"] else ""
        span = r["parameters"]
        params = "-" if not span else f"{span[0] / 1e9:.1f}B-{span[1] / 1e9:.1f}B"
        lines.append(
            f"| `{r['key']}` | {r['rows']} | {r['held_out']} | {held} | "
            f"{r['median_pct']:.1f} % / {r['max_pct']:.1f} % | "
            f"{r['gpus'][0]:,}-{r['gpus'][1]:,} | {params} |"
        )
    return "\n".join([TABLE[0], *lines, TABLE[1]])


def docs_with_table(text: str, data: dict) -> str:
    start, end = text.index(TABLE[0]), text.index(TABLE[1]) + len(TABLE[1])
    return text[:start] + markdown_table(data) + text[end:]


def main(argv: list[str]) -> None:
    data = summary(read_ledgers())
    if "--write" in argv:
        PACKAGED.parent.mkdir(exist_ok=True)
        PACKAGED.write_text(render(data), encoding="utf-8")
        DOCS.write_text(docs_with_table(DOCS.read_text("utf-8"), data), encoding="utf-8")
        print(f"wrote {PACKAGED.relative_to(ROOT)} and the table in {DOCS.relative_to(ROOT)}")
    for r in data["regimes"]:
        if not r["rows"]:
            print(f"{r['key']:28s} {r['text']}")
            continue
        print(
            f"{r['key']:28s} {r['rows']:3d} rows, {r['held_out']:3d} held out: "
            f"held-out median {r['held_out_median_pct']}% max {r['held_out_max_pct']}%; "
            f"all median {r['median_pct']}% max {r['max_pct']}%"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
