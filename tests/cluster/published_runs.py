"""The ledger of published runs: pipesim against what others measured (docs/validation.md).

Every calibration and held-out row of ``data/published_runs.csv`` (training runs) and
``data/schedule_ratios.csv`` (schedule throughput ratios) is simulated as the scenario a
user would write for it (``tests.cluster.ledger``), and its error printed with a summary
per regime (GPU type x training or ratio).

    python -m tests.cluster.published_runs                 # every row's error, per regime
    python -m tests.cluster.published_runs --kind training # training rows only (seconds)
    python -m tests.cluster.published_runs --json out.json # the same as JSON ('-': stdout)
    python -m tests.cluster.published_runs --fit           # refit on the calibration rows
    python -m tests.cluster.published_runs --record        # write each row's error back
                                                           # as its recorded_error

``--fit`` fits ``DEFAULT_PARAMETERS`` (tests/cluster/ledger/fit.py) on the calibrate rows
of the chosen kind, then reports every row with the fitted values; ``--record`` after a
refit of pipesim's defaults keeps the test's recorded errors in step.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence

from tests.cluster.ledger.evaluate import Outcome, evaluate, summarise
from tests.cluster.ledger.fit import DEFAULT_PARAMETERS, fit
from tests.cluster.ledger.rows import RATIO_FILE, TRAINING_FILE, load_rows, read_raw
from tests.cluster.ledger.scenarios import Setting


def report_json(outcomes: Sequence[Outcome], fitted: dict[str, float] | None = None) -> dict:
    """Every row's error and the per-regime summary, as plain data."""
    rows = [
        {
            "id": o.row.id,
            "role": o.row.role,
            "kind": o.row.kind,
            "gpu": o.row.gpu,
            "error": o.error,
            "recorded_error": o.row.recorded_error,
            "pending": o.pending,
        }
        for o in outcomes
    ]
    return {"parameters": fitted or {}, "rows": rows, "regimes": summarise(outcomes)}


def report_text(outcomes: Sequence[Outcome]) -> str:
    lines = []
    for o in outcomes:
        shown = f"{o.error:+7.1%}" if o.error is not None else f"pending ({o.pending})"
        lines.append(f"{o.row.id:34s} {o.row.role:9s} {o.regime:24s} {shown}")
    lines.append("")
    for s in summarise(outcomes):
        lines.append(
            f"{s['gpu']:14s} {s['kind']:8s} {s['role']:9s} n={s['count']:2d}  "
            f"median |error| {s['median_abs_error']:5.1%}  max {s['max_abs_error']:5.1%}"
        )
    return "\n".join(lines)


def record(outcomes: Sequence[Outcome]) -> None:
    """Write each simulated row's error into its file's ``recorded_error`` column."""
    errors = {o.row.id: o.error for o in outcomes if o.error is not None}
    for path in (TRAINING_FILE, RATIO_FILE):
        raw = read_raw(path)
        for row in raw:
            if row["id"] in errors:
                row["recorded_error"] = f"{errors[row['id']]:+.4f}"
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, list(raw[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(raw)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.published_runs")
    parser.add_argument("--kind", choices=("training", "ratio", "all"), default="all")
    parser.add_argument("--fit", action="store_true", help="refit on the calibrate rows")
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON ('-': stdout)")
    parser.add_argument("--record", action="store_true", help="write errors to the CSVs")
    args = parser.parse_args(argv)
    if args.record and args.fit:
        parser.error("--record keeps the errors of pipesim's defaults: not with --fit")
    rows = [r for r in load_rows() if args.kind in ("all", r.kind)]
    settings: list[Setting] = []
    fitted = None
    if args.fit:
        calibration = [r for r in rows if r.role == "calibrate"]
        fitted = fit(calibration, DEFAULT_PARAMETERS, args.iterations)
        settings = [(p, fitted[p.name]) for p in DEFAULT_PARAMETERS]
        print("fitted:", ", ".join(f"{k}={v:.4f}" for k, v in fitted.items()), file=sys.stderr)
    outcomes = evaluate(rows, settings)
    if args.record:
        record(outcomes)
    if args.json == "-":
        json.dump(report_json(outcomes, fitted), sys.stdout, indent=1)
    else:
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(report_json(outcomes, fitted), handle, indent=1)
        print(report_text(outcomes))


if __name__ == "__main__":
    main()
