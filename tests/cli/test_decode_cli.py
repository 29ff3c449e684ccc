"""``pipesim run`` in decode mode: JSON keys, table, Gantt, Perfetto trace, schedule CSV,
sweeps, and bad input as one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from pipesim import load_scenario
from pipesim.cli import main

FILL = str(Path(__file__).parents[2] / "scenarios" / "decode-pipeline-fill.yaml")

BASE = {
    "schema_version": 1,
    "name": "decode-cli",
    "pipeline": {"mode": "decode", "devices": 2, "microbatches": 2},
    "decode": {"tokens": 3, "prompt_tokens": 4},
    "costs": {"prefill_ms": 1.0, "decode_ms": 1.0},
}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write(tmp_path: Path, data: dict, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_json_has_ttft_tpot_tokens_per_second_and_their_closed_forms(tmp_path):
    result = invoke("run", write(tmp_path, BASE), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # p = k = 2, every step 1 ms, ideal links: group i's prefill ends at i + 2, then a token
    # every max(p, k) = 2 ms; 2 groups x 3 tokens over a makespan of 7 ms.
    assert data["group_ttft_ms"] == [2.0, 3.0]
    assert data["ttft_ms"] == 2.5
    assert data["tpot_ms"] == 2.0
    assert data["tokens_per_second"] == pytest.approx(6 / 0.007)
    assert data["makespan_ms"] == 7.0
    assert data["analytic"] == {"ttft_ms": 2.5, "tpot_ms": 2.0, "tokens_per_second": 1000.0}


def test_table_shows_the_decode_lines(tmp_path):
    result = invoke("run", write(tmp_path, BASE))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  token steps       3 per group of 1, 2 groups (step 0: the prefill)" in lines
    assert "  TTFT (mean)       2.500 ms   (analytic 2.500 ms)" in lines
    assert "  TPOT (mean)       2.000 ms   (analytic 2.000 ms steady state)" in lines
    assert "  output tokens/s   857.143 tokens/s   (analytic 1,000.000 steady state)" in lines
    assert "note" not in result.stderr  # hand-typed decode costs are not "per chunk"


def test_gantt_trace_and_schedule_csv(tmp_path):
    gantt, trace, schedule = tmp_path / "g.png", tmp_path / "t.json", tmp_path / "s.csv"
    data = {**BASE, "hardware": {"link": {"latency_us": 10.0}}}  # transfers get rows
    result = invoke(
        "run",
        write(tmp_path, data),
        "--gantt",
        gantt,
        "--trace",
        trace,
        "--schedule-csv",
        schedule,
        "-o",
        tmp_path / "r.txt",
    )
    assert result.exit_code == 0, result.output
    assert gantt.read_bytes().startswith(b"\x89PNG")
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"t0 g0", "t2 g1", "t0 g0->1", "t1 g1->0"} <= names
    assert schedule.read_bytes() == b"0F0,0F1,2F0,2F1,4F0,4F1\r\n1F0,1F1,3F0,3F1,5F0,5F1\r\n"


def test_model_derived_decode_runs(tmp_path):
    data = {
        **BASE,
        "costs": {},
        "model": {
            "layers": 4,
            "hidden": 512,
            "heads": 8,
            "kv_heads": 2,
            "seq_len": 1024,
            "vocab": 32000,
        },
        "hardware": {"gpu": "a100-sxm-80gb", "link": "nvlink3"},
    }
    del data["costs"]
    path = write(tmp_path, data)
    result = invoke("run", path, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # group 0 goes first everywhere: its prefill on device 0, the hidden states' hop, its
    # prefill on device 1, where its first token is sampled
    built = load_scenario(path)
    prefill_ms, hop = built.costs.forward_ms, built.topology.link(0, 1)
    first = prefill_ms[0] + hop.transfer_ms(built.costs.activation_bytes[0]) + prefill_ms[1]
    assert report["group_ttft_ms"][0] == pytest.approx(first, rel=1e-12)
    assert report["ttft_ms"] == pytest.approx(sum(report["group_ttft_ms"]) / 2, rel=1e-12)
    assert report["tpot_ms"] > 0
    assert report["analytic"] is None  # a step's cost grows with the context
    assert 0 < report["mfu"] < 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("decode"), "decode: required with pipeline.mode: decode"),
        (lambda d: d["costs"].update(backward_ms=2.0), "costs.backward_ms: not used in decode"),
        (
            lambda d: d.update(
                model={"layers": 2, "hidden": 64, "heads": 4, "seq_len": 8, "vocab": 10}
            ),
            "costs.decode_ms: not allowed with a model section",
        ),
        (lambda d: d["decode"].update(tokens=0), "decode.tokens: Input should be greater"),
        (lambda d: d["pipeline"].update(schedule="gpipe"), "pipeline.schedule: not used in"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, change, message):
    data = json.loads(json.dumps(BASE))
    change(data)
    out = tmp_path / "out.json"
    result = invoke("run", write(tmp_path, data), "--format", "json", "-o", out)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert message in result.stderr and "s.yaml" in result.stderr
    assert not out.exists()


def test_profile_without_decode_rows_says_so(tmp_path):
    spread = {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "samples": 3}
    profile = {
        "format": "pipesim-profile",
        "version": 1,
        "stages": [{"stage": 0, "F": spread, "B": spread}],
    }
    (tmp_path / "p.json").write_text(json.dumps(profile))
    data = {**BASE, "costs": {"profile": "p.json"}}
    result = invoke("run", write(tmp_path, data))
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(
        "costs.profile: stage 0 has no prefill and decode timings (it holds B, F); decode "
        "mode needs both for every stage"
    )


def test_sweep_over_groups_in_flight(tmp_path):
    """The lesson of decode-pipeline-fill: tokens/s grows with the groups until the four
    devices are full, then TPOT grows instead."""
    out = tmp_path / "fill.csv"
    result = invoke(
        "sweep",
        FILL,
        "--grid",
        "pipeline.microbatches=1,4,8",
        "--set",
        "decode.tokens=16",
        "--set",
        "costs.prefill_ms=3.6",
        "--jobs",
        "1",
        "--no-progress",
        "-o",
        out,
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert frame["error"].isna().all()
    rate, tpot = frame["tokens_per_second"].tolist(), frame["tpot_ms"].tolist()
    assert rate[0] < rate[1] < rate[2]
    assert rate[1] > 3 * rate[0]  # filling the pipeline nearly multiplies by p = 4
    assert tpot[2] > 1.8 * tpot[1]  # past k = p each group waits its turn


def test_compare_refuses_decode_mode_in_one_line():
    result = invoke("compare", FILL)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"pipesim: error: {FILL}: pipeline.mode: decode runs one fixed schedule, nothing to "
        "compare; sweep it instead (pipesim sweep SCENARIO --grid pipeline.microbatches=1,2,4)"
    ]


def test_gantt_names_the_boxes_by_token_step_and_group(tmp_path):
    from pipesim.analysis.run import run_scenario
    from pipesim.plot.figures import gantt_figure
    from pipesim.scenario.build import load_scenario

    result = run_scenario(load_scenario(write(tmp_path, BASE)))
    figure = gantt_figure(result.trace, result.report)
    texts = {t.get_text() for t in figure.axes[0].texts}
    assert texts == {f"t{step} g{group}" for step in range(3) for group in range(2)}
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend == ["F", "prefill (step 0)", "decode steps"]
