"""``pipesim run --evaluator``: the fast sweep and the engine give one report, and the
report says which ran; asking for the fast one where it cannot run is one line, exit 2."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
SHARED_SWITCH = (
    *("--set", "hardware.link=pcie4", "--set", "hardware.gpus_per_node=4"),
    *("--set", "hardware.pcie_switch_share=2"),
)  # interleaved on 4 GPUs: devices 0 and 1 both send up through switch 0


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def report(*args) -> dict:
    result = invoke("run", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def flat(data, prefix="") -> dict:
    """Nested dicts and lists as one dict of leaves, for pytest.approx."""
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return {prefix: data}
    return {k: v for key, value in items for k, v in flat(value, f"{prefix}/{key}").items()}


@pytest.mark.parametrize(
    "name, extra",
    [
        ("gpipe-vs-1f1b.yaml", ()),
        ("interleaved.yaml", ("--set", "hardware.link=nvlink4")),
        (
            "gpipe-vs-1f1b.yaml",
            (
                "--set",
                "pipeline.schedule=zbv",
                "--set",
                "pipeline.virtual_stages=2",
                "--set",
                "hardware.link=ib-ndr",
            ),
        ),
        (
            "gpipe-vs-1f1b.yaml",
            ("--set", "pipeline.schedule=dualpipe", "--set", "hardware.link=pcie4"),
        ),
        ("llama-70b-4x8-h100.yaml", ()),
        (
            "gpipe-vs-1f1b.yaml",
            ("--set", "hardware.link=pcie4", "--set", "hardware.comm_overlap=false"),
        ),
    ],
)
def test_both_evaluators_give_one_report(name, extra):
    fast = report(SCENARIOS / name, *extra, "--evaluator", "fast")
    engine = report(SCENARIOS / name, *extra, "--evaluator", "simpy")
    assert (fast.pop("evaluator"), engine.pop("evaluator")) == ("fast", "simpy")
    mine, theirs = flat(fast), flat(engine)
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        if isinstance(value, float):
            assert mine[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        else:
            assert mine[key] == value, key
    assert report(SCENARIOS / name, *extra)["evaluator"] == "fast"  # auto


def test_the_table_says_which_evaluator_ran():
    result = invoke("run", SCENARIOS / "gpipe-vs-1f1b.yaml", "--evaluator", "simpy")
    assert "  evaluator         simpy" in result.stdout.splitlines()


def test_auto_keeps_the_engine_where_only_it_is_exact():
    assert report(SCENARIOS / "stragglers.yaml")["evaluator"] == "simpy"
    assert report(SCENARIOS / "interleaved.yaml", *SHARED_SWITCH)["evaluator"] == "simpy"


@pytest.mark.parametrize(
    "args, why",
    [
        (
            (SCENARIOS / "stragglers.yaml",),
            "stragglers: --evaluator fast cannot run it: the scenario has a variability: "
            "section (random steps), run by the engine",
        ),
        (
            (SCENARIOS / "interleaved.yaml", *SHARED_SWITCH),
            "interleaved: --evaluator fast cannot run it: channel 'node0/pcie0/up' is shared "
            "by several senders (queueing across senders)",
        ),
    ],
)
def test_fast_where_it_cannot_run_is_one_line_and_exit_2(tmp_path, args, why):
    out = tmp_path / "report.json"
    result = invoke(
        "run", *args, "--evaluator", "fast", "-o", out, "--trace-csv", tmp_path / "t.csv"
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"pipesim: error: {why}\n"
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_an_unknown_evaluator_is_refused_by_the_option():
    result = invoke("run", SCENARIOS / "gpipe-vs-1f1b.yaml", "--evaluator", "quick")
    assert result.exit_code == 2
    assert "'quick' is not one of 'auto', 'fast', 'simpy'" in result.stderr


def test_monte_carlo_runs_stay_on_the_engine():
    # The study's steps are random, so the engine draws them; the step itself may be fast.
    args = (SCENARIOS / "gpipe-vs-1f1b.yaml", "--runs", 5, "--seed", 3)
    fast = report(*args, "--evaluator", "fast")
    engine = report(*args, "--evaluator", "simpy")
    assert fast["evaluator"] == "fast"
    assert fast["makespan_ms_p50"] == engine["makespan_ms_p50"]


def test_compare_takes_the_evaluator_too():
    args = ("compare", SCENARIOS / "gpipe-vs-1f1b.yaml", "--schedules", "gpipe,1f1b,zb-h1")
    fast = invoke(*args, "--evaluator", "fast", "--format", "csv")
    engine = invoke(*args, "--evaluator", "simpy", "--format", "csv")
    assert fast.exit_code == engine.exit_code == 0
    assert fast.stdout == engine.stdout
    shared = invoke(
        "compare",
        SCENARIOS / "interleaved.yaml",
        *SHARED_SWITCH,
        "--schedules",
        "1f1b,interleaved-1f1b",
        "--evaluator",
        "fast",
        "--format",
        "csv",
    )
    rows = shared.stdout.splitlines()
    assert rows[1].startswith("1f1b,") and rows[1].endswith(",")  # it ran, no error
    assert rows[2].endswith(
        "interleaved: --evaluator fast cannot run it: channel 'node0/pcie0/up' is shared by "
        "several senders (queueing across senders)"
    )
