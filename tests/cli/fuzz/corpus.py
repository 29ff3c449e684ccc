"""Well-formed inputs of every kind a command reads, as bytes, made once per test session.

Each is the kind of file a user really hands pipesim: the bundled scenarios and their
serving trace, torch CSV schedules written by ``run --schedule-csv`` and torch's own golden
files, a profile written by ``import-trace``, Kineto traces of a two-rank 1F1B run (plain
and gzipped), a ``crosscheck --save-runs`` run file, and ``run -o x.json`` reports.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from pipesim.cli import main
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import to_csv

ROOT = Path(__file__).parents[3]
SCENARIOS = ROOT / "scenarios"
GOLDEN = ROOT / "tests" / "schedules" / "golden"
SERVING_TRACE_ROWS = 40  # enough rows for a bursty run, few enough for a fast serve


@dataclass(frozen=True)
class Corpus:
    scenarios: dict[str, bytes]  # bundled name -> bytes
    serving_trace: bytes
    torch_csvs: tuple[bytes, ...]
    profile: bytes
    kineto: tuple[bytes, ...]  # one trace per rank
    run_file: bytes
    reports: tuple[bytes, ...]  # run -o x.json


def kineto_trace(rank: int, schedule) -> bytes:
    """A profiler trace of ``rank``: one ``PP:`` user annotation per action, 1 ms each,
    2 ms for a backward, back to back."""
    events, ts = [], 1_000_000
    for action in schedule.device_actions[rank]:
        dur = 2000 if "B" in str(action) else 1000
        event = {"ph": "X", "cat": "user_annotation", "name": f"PP:{action}", "ts": ts}
        events.append({**event, "dur": dur, "pid": rank, "tid": 1})
        ts += dur + 100
    data = {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "traceEvents": events}
    return json.dumps(data).encode()


def run_file(schedule) -> bytes:
    """A measured run of ``schedule``: back-to-back compute spans with a wait before each
    rank's first action."""
    ranks = []
    for rank, actions in enumerate(schedule.device_actions):
        t = rank * 1.0
        spans = [{"category": "wait", "name": "", "start_ms": 0.0, "end_ms": t}]
        for action in actions:
            end = t + (2.0 if "B" in str(action) else 1.0)
            spans.append({"category": "compute", "name": str(action), "start_ms": t, "end_ms": end})
            t = end + 0.25
        ranks.append(spans)
    data = {"format": "pipesim-run", "version": 1, "schedule": "1f1b", "devices": 2}
    return json.dumps({**data, "meta": {"csv": to_csv(schedule)}, "ranks": ranks}).encode()


def build_corpus() -> Corpus:
    schedule = get_schedule("1f1b", 2, 2)
    kineto = tuple(kineto_trace(r, schedule) for r in (0, 1))
    with tempfile.TemporaryDirectory() as folder:
        made = Path(folder)
        traces = []
        for rank, text in enumerate(kineto):
            traces.append(made / f"r{rank}.json")
            traces[-1].write_bytes(text)
        produced = produce(made, traces)
    lines = (SCENARIOS / "data" / "bursty-gamma-cv3.csv").read_bytes().splitlines(True)
    return Corpus(
        scenarios={p.name: p.read_bytes() for p in sorted(SCENARIOS.glob("*.yaml"))},
        serving_trace=b"".join(lines[: SERVING_TRACE_ROWS + 1]),
        torch_csvs=produced["csvs"] + tuple(p.read_bytes() for p in sorted(GOLDEN.glob("*.csv"))),
        profile=produced["profile"],
        kineto=kineto + (gzip.compress(kineto[0], mtime=0),),
        run_file=run_file(schedule),
        reports=produced["reports"],
    )


def produce(folder: Path, traces: list[Path]) -> dict:
    """Files written by pipesim itself: schedules, a profile and reports."""
    runner, csvs, reports = CliRunner(), [], []
    for name in ("gpipe-vs-1f1b.yaml", "interleaved.yaml", "stragglers.yaml"):
        csv, report = folder / f"{name}.csv", folder / f"{name}.json"
        args = ["run", str(SCENARIOS / name), "--schedule-csv", str(csv), "-o", str(report)]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        csvs.append(csv.read_bytes())
        reports.append(report.read_bytes())
    profile = folder / "profile.json"
    result = runner.invoke(main, ["import-trace", *map(str, traces), "-o", str(profile)])
    assert result.exit_code == 0, result.output
    return {"csvs": tuple(csvs), "reports": tuple(reports), "profile": profile.read_bytes()}
