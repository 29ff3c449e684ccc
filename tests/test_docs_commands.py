"""Every ``pipesim`` command the docs quote runs as quoted, and prints the figures quoted.

The commands come from README.md's code blocks, the opening comments of the bundled
scenarios and the notebooks' markdown (``tests/docs_commands.py`` finds them). Each
recipe runs in order in a fresh folder holding a copy of ``scenarios/``, as a reader would
run it from the repository root; every command must exit 0. A terminal session quoted
in the README must print what it shows, and where a scenario's comment quotes figures,
the test reads them from the comment and compares them with what the command printed, to
the digits quoted.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from pipesim.cli import main
from tests.docs_commands import ROOT, Recipe, recipes

RECIPES = recipes()

PLAN_64 = "plans every layout of 64 GPUs for a 70B model: about 10 s on two cores"
SERVE_GRID = "serves 1,000 requests at each of 64 grid points: ~25 s"
LIMIT_GRID = "searches a schedule at each of 10 points: ~15-40 s"
# Commands left to the full run (-m slow), each for its running time.
SLOW = {
    "pipesim plan scenarios/plan-llama-70b-64xh100.yaml --gpus 64": PLAN_64,
    "pipesim plan scenarios/plan-llama-70b-64xh100.yaml --gpus 64 --pareto front.png "
    "--emit best.yaml --explain": PLAN_64,
    "pipesim sweep scenarios/llama-70b-serve-8xh100.yaml --grid serving.workload.rate=2,5,10,20"
    " --grid parallel.tensor=8,4,2,1 --grid pipeline.devices=1,2,4,8 -o layouts.csv": SERVE_GRID,
    "pipesim sweep scenarios/llama-70b-serve-8xh100.yaml --grid serving.workload.rate=2,5,10,20"
    " --grid parallel.tensor=8,4,2,1 --grid pipeline.devices=1,2,4,8": SERVE_GRID,
    "pipesim sweep scenarios/zb-auto-under-memory.yaml --grid pipeline.schedule=zb-auto,v-auto "
    "--grid pipeline.memory_limit_bytes=8589934592,7516192768,6442450944,5368709120,4294967296"
    " --plot limit-sweep.png": LIMIT_GRID,
    "pipesim sweep scenarios/zb-auto-under-memory.yaml --grid pipeline.schedule=zb-auto,v-auto "
    "--grid pipeline.memory_limit_bytes=8589934592,7516192768,6442450944,5368709120,4294967296": (
        LIMIT_GRID
    ),
    "pipesim crosscheck scenarios/gpipe-vs-1f1b.yaml --ops synthetic --runs 5 --gantt "
    "crosscheck.png": "runs 4 processes of torch.distributed.pipelining 6 times: ~60 s",
}
TORCH_COMMANDS = ("profile", "crosscheck")  # time real torch stages


def covered() -> set[str]:
    """The long commands another quoted command runs whole, with outputs added (the
    scenario's bare ``plan --gpus 64`` and the README's with --pareto, --emit, --explain):
    those run once, as the longer one."""
    quoted = [c for r in RECIPES for c in r.commands]
    return {
        command.text
        for command in quoted
        if command.text in SLOW
        and command.text not in CHECKS  # its printed figures are checked: it runs
        and any(o.args[: len(command.args)] == command.args != o.args for o in quoted)
    }


def params() -> list:
    """A recipe each, but once only where two documents quote the same commands (the
    README's plan is notebook 05's)."""
    out, seen = [], set()
    for recipe in RECIPES:
        if (commands := tuple(c.args for c in recipe.commands)) in seen:
            continue
        seen.add(commands)
        marks = [pytest.mark.slow] if any(c.text in SLOW for c in recipe.commands) else []
        if any(c.args[0] in TORCH_COMMANDS for c in recipe.commands):
            marks.append(pytest.mark.torch)
        out.append(pytest.param(recipe, id=recipe.name, marks=marks))
    return out


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("recipe", params())
def test_a_quoted_recipe_runs_as_quoted(recipe: Recipe, tmp_path, monkeypatch):
    if any(c.args[0] in TORCH_COMMANDS for c in recipe.commands):
        pytest.importorskip("torch")
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    monkeypatch.chdir(tmp_path)
    for command in recipe.commands:
        if command.text in COVERED:
            continue
        result = invoke(*command.args)
        where = f"{recipe.document}:{command.line}: {command.text}"
        if command.output[:1] and command.output[0].startswith("pipesim: error:"):
            # the docs show a refusal: exit 2 and the very line they quote
            assert result.exit_code == 2, f"{where}\n{result.stdout}{result.exception!r}"
            assert_shows(command.output, result.stderr.splitlines(), where)
            continue
        assert result.exit_code == 0, f"{where}\n{result.stderr}{result.exception!r}"
        if command.output:
            assert_shows(command.output, result.stdout.splitlines(), where)
        if command.text in CHECKS:
            scenario, check = CHECKS[command.text]
            check(result.stdout, tmp_path, (ROOT / "scenarios" / f"{scenario}.yaml").read_text())


def test_the_docs_quote_the_commands_this_test_knows():
    quoted = {c.text for recipe in RECIPES for c in recipe.commands}
    assert set(SLOW) <= quoted
    assert set(CHECKS) <= quoted  # a check whose command the docs no longer quote is lost
    assert {r.document.split(" cell ")[0] for r in RECIPES} >= {
        "README.md",
        *(f"scenarios/{p.name}" for p in (ROOT / "scenarios").glob("*.yaml") if _quotes(p)),
    }
    assert sum(len(r.commands) for r in RECIPES if r.document.startswith("scenarios/")) >= 30
    # A shell loop is one command per value; prose that begins with "pipesim" is none.
    tradeoff = [r for r in RECIPES if r.document == "scenarios/microbatch-tradeoff.yaml"]
    runs = [c.args for c in tradeoff[0].commands if c.args[0] == "run"]
    assert [args[3] for args in runs] == [
        f"pipeline.microbatches={m}" for m in (1, 2, 4, 8, 16, 32, 64)
    ]
    assert not any("on" in c.args[:2] for r in RECIPES for c in r.commands)


def _quotes(path: Path) -> bool:
    return any(line.startswith("#   pipesim ") for line in path.read_text().splitlines())


def assert_shows(quoted: tuple[str, ...], printed: list[str], where: str) -> None:
    """The printed lines begin with the quoted ones; a quoted line ending in ``...`` stands
    for any line that begins with what precedes it."""
    assert len(printed) >= len(quoted), where
    for shown, line in zip(quoted, printed, strict=False):
        if shown.rstrip().endswith("..."):
            assert line.startswith(shown.rstrip()[:-3].rstrip()), (where, shown, line)
        else:
            assert line.rstrip() == shown.rstrip(), (where, shown, line)


# ---------------------------------------------------------------------------
# Reading figures: from the docs as quoted, from the output as printed


def number(text: str) -> float:
    return float(text.replace(",", ""))


def agrees(quoted: str, value: float) -> bool:
    """Whether ``value`` rounds to ``quoted`` (``1,199``, ``0.92``) at its last digit."""
    decimals = len(quoted.partition(".")[2])
    return abs(number(quoted) - value) <= 0.5 * 10**-decimals + 1e-9


def assert_agree(quoted: list[str], values: list[float], what: str) -> None:
    assert len(quoted) == len(values) and all(map(agrees, quoted, values)), (what, quoted, values)


def quoted_row(document: str, label: str) -> list[str]:
    """The numbers after ``label`` on a comment line that holds nothing else."""
    found = re.search(rf"^#\s+{re.escape(label)}((?:\s+[\d.,]+)+)\s*$", document, re.M)
    assert found, label
    return found.group(1).split()


def table(text: str, heading: str) -> list[dict[str, str]]:
    """The rows under the printed header line that begins with ``heading``, by column
    name (cells are at least two spaces apart)."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip().startswith(heading))
    names = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(names, re.split(r"\s{2,}", line.strip()), strict=False)))
    return rows


def printed(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return number(found.group(1))


# ---------------------------------------------------------------------------
# The figures each document quotes


def prose(document: str) -> str:
    """A scenario's opening comment as one line of text."""
    comment = []
    for line in document.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line[1:].strip())
    return " ".join(comment)


def gpipe_vs_1f1b(stdout: str, folder: Path, document: str) -> None:
    text = prose(document)
    step, top, bottom = re.search(r"= (\d+) ms with bubble fraction (\d+)/(\d+)", text).groups()
    kept = number(re.search(r"(\d+) MiB of activations kept", text).group(1))
    gpipe = number(re.search(r"GPipe holds all (\d+) microbatches", text).group(1))
    held = re.search(r"1F1B at most ([\d, ]+)\.", text).group(1).split(", ")
    rows = {row["schedule"]: row for row in table(stdout, "schedule")}
    for row in rows.values():
        assert_agree([f"{number(step):.3f}"], [number(row["makespan ms"])], "makespan")
        assert agrees(row["bubble"], number(top) / number(bottom))
    assert rows["gpipe"]["peak activations per device"] == " ".join([f"{gpipe * kept:.2f} MiB"] * 4)
    per_device = " ".join(f"{number(n) * kept:.2f} MiB" for n in held)
    assert rows["1f1b"]["peak activations per device"] == per_device


def link_makespan(index: int) -> Callable:
    def check(stdout: str, folder: Path, document: str) -> None:
        quoted = re.search(r"makespan is ([\d.]+) ms over NVLink, ([\d.]+) ms", prose(document))
        assert_agree([quoted.group(index)], [printed(r"makespan\s+([\d.]+) ms", stdout)], "ms")

    return check


def interleaved(pattern: str) -> Callable:
    def check(stdout: str, folder: Path, document: str) -> None:
        quoted = re.search(pattern, document).group(1)
        assert_agree([quoted], [printed(r"makespan\s+([\d.]+) ms", stdout)], "makespan")

    return check


def decode_fill(stdout: str, folder: Path, document: str) -> None:
    rows = table(stdout, "pipeline.microbatches")
    assert [r["pipeline.microbatches"] for r in rows] == [str(k) for k in range(1, 9)]
    for label, column in (("TPOT ms", "TPOT ms"), ("tokens/s", "tokens/s")):
        assert_agree(quoted_row(document, label), [number(r[column]) for r in rows], label)


def serving(label: str) -> Callable:
    """TTFT p90, queueing p90, preemptions, goodput: a row of serve-bursty-trace.yaml."""

    def check(stdout: str, folder: Path, document: str) -> None:
        latency = {row["latency (ms)"]: row for row in table(stdout, "latency (ms)")}
        shown = [
            number(latency["TTFT"]["p90"]),
            number(latency["queueing"]["p90"]),
            printed(r"(\d+) preemptions", stdout),
            printed(r"goodput\s+([\d.]+) requests/s", stdout),
        ]
        assert_agree(quoted_row(document, label), shown, label)

    return check


def moe_serving(label: str) -> Callable:
    """TTFT p90, TPOT p90, output tokens/s: a row of serve-mixtral-8x7b-h100.yaml or
    serve-deepseek-v3-2x8xh200.yaml."""

    def check(stdout: str, folder: Path, document: str) -> None:
        latency = {row["latency (ms)"]: row for row in table(stdout, "latency (ms)")}
        shown = [
            number(latency["TTFT"]["p90"]),
            number(latency["TPOT"]["p90"]),
            printed(r"([\d.]+) output tokens/s", stdout),
        ]
        assert_agree(quoted_row(document, label), shown, label)

    return check


LAYOUTS = {"TP8": (8, 1), "PP2 x TP4": (4, 2), "PP4 x TP2": (2, 4), "PP8": (1, 8)}


def serving_layouts(stdout: str, folder: Path, document: str) -> None:
    """At 5 requests/s: p90 TTFT and TPOT, goodput (from layouts.csv), and the max rate of
    the layout whose ``--max-rate`` the comment quotes (TP8, the scenario's own; the three
    others' searches would add about a minute to every run of the suite)."""
    frame = pd.read_csv(folder / "layouts.csv")
    for label, (tensor, devices) in LAYOUTS.items():
        ttft, tpot, goodput, _ = quoted_row(document, label)
        point = (frame["serving.workload.rate"] == 5) & (frame["parallel.tensor"] == tensor)
        row = frame[point & (frame["pipeline.devices"] == devices)].iloc[0]
        assert_agree(
            [ttft, tpot, goodput], [row.ttft_ms_p90, row.tpot_ms_p90, row.goodput_rps], label
        )
    ttft, tpot, goodput, rate = quoted_row(document, "TP8")
    result = invoke("serve", "scenarios/llama-70b-serve-8xh100.yaml", "--max-rate")
    assert_agree([rate], [printed(r"max rate\s+([\d.]+) requests/s", result.stdout)], "TP8")


def search_bound(stdout: str, folder: Path, document: str) -> None:
    """The makespan and the lower bound line the comment quotes, as the run prints them."""
    pattern = r"lower bound\s+([\d.]+) ms \(the order found is within ([\d.]+)% of it\)"
    quoted = list(re.search(pattern, document).groups())
    quoted.append(re.search(r"ZB-H1's, ([\d.]+) ms", prose(document)).group(1))
    bound, gap = re.search(pattern, stdout).groups()
    makespan = printed(r"makespan\s+([\d.]+) ms", stdout)
    assert_agree(quoted, [number(bound), number(gap), makespan], "lower bound")


def fixed_recipes(stdout: str, folder: Path, document: str) -> None:
    quoted = re.findall(r"([\w-]+) ([\d.]+) ms at (\d+) GiB", document)
    rows = {row["schedule"]: row for row in table(stdout, "schedule")}
    assert [name for name, _, _ in quoted] == ["1f1b", "zb-h1", "zb-h2", "zbv", "v-half", "v-min"]
    for name, ms, gib in quoted:
        peaks = re.findall(r"([\d.]+) GiB", rows[name]["peak activations per device"])
        assert_agree([ms, gib], [number(rows[name]["makespan ms"]), max(map(number, peaks))], name)


def limit_sweep(stdout: str, folder: Path, document: str) -> None:
    rows = table(stdout, "pipeline.schedule")
    for policy in ("zb-auto", "v-auto"):
        quoted = re.search(rf"{policy} ([\d., #]+) ms", document).group(1)
        figures = re.findall(r"[\d.]+\d", quoted)
        shown = [number(r["makespan ms"]) for r in rows if r["pipeline.schedule"] == policy]
        assert_agree(figures, shown, policy)


GPIPE, LINKS, INTERLEAVED = "gpipe-vs-1f1b", "gpt-nvlink-vs-pcie", "interleaved"
MIXTRAL, DEEPSEEK = "serve-mixtral-8x7b-h100", "serve-deepseek-v3-2x8xh200"
DECODE, BURSTY, LLAMA, ZB = (
    "decode-pipeline-fill",
    "serve-bursty-trace",
    "llama-70b-serve-8xh100",
    "zb-auto-under-memory",
)
GRID = "--grid serving.workload.rate=2,5,10,20 --grid parallel.tensor=8,4,2,1 --grid pipeline.devices=1,2,4,8"
LIMITS = (
    "--grid pipeline.schedule=zb-auto,v-auto --grid pipeline.memory_limit_bytes=8589934592,"
    "7516192768,6442450944,5368709120,4294967296"
)
POISSON = (
    "--set serving.workload.arrival=poisson --set serving.workload.rate=1.65 "
    "--set serving.workload.requests=400 --set 'serving.workload.prompt_tokens={distribution: "
    "lognormal, mean: 600, cv: 1.0, min: 16, max: 4000}' --set 'serving.workload.output_tokens="
    "{distribution: lognormal, mean: 200, cv: 1.2, min: 4, max: 1500}'"
)
Check = Callable[[str, Path, str], None]
# command as quoted -> (the scenario whose comment quotes its figures, the check)
CHECKS: dict[str, tuple[str, Check]] = {
    f"pipesim compare scenarios/{GPIPE}.yaml --schedules gpipe,1f1b": (GPIPE, gpipe_vs_1f1b),
    f"pipesim run scenarios/{LINKS}.yaml": (LINKS, link_makespan(1)),
    f"pipesim run scenarios/{LINKS}.yaml --set hardware.link=pcie4": (LINKS, link_makespan(2)),
    f"pipesim run scenarios/{INTERLEAVED}.yaml": (
        INTERLEAVED,
        interleaved(r"\(F \+ B\) = ([\d.]+) ms\."),
    ),
    f"pipesim run scenarios/{INTERLEAVED}.yaml --set pipeline.virtual_stages=4 --set "
    "costs.forward_ms=0.5 --set costs.backward_ms=1": (
        INTERLEAVED,
        interleaved(r"backward_ms=1\s+# ([\d.]+) ms"),
    ),
    f"pipesim sweep scenarios/{DECODE}.yaml --grid pipeline.microbatches=1,2,3,4,5,6,7,8": (
        DECODE,
        decode_fill,
    ),
    f"pipesim serve scenarios/{BURSTY}.yaml --plot bursty.png": (BURSTY, serving("bursty trace")),
    f"pipesim serve scenarios/{BURSTY}.yaml {POISSON}": (BURSTY, serving("Poisson")),
    f"pipesim sweep scenarios/{LLAMA}.yaml {GRID} -o layouts.csv": (LLAMA, serving_layouts),
    f"pipesim serve scenarios/{MIXTRAL}.yaml": (MIXTRAL, moe_serving("experts split 8 ways (EP1)")),
    f"pipesim serve scenarios/{MIXTRAL}.yaml --set parallel.expert=8": (
        MIXTRAL,
        moe_serving("one expert per GPU (EP8)"),
    ),
    f"pipesim serve scenarios/{DEEPSEEK}.yaml": (
        DEEPSEEK,
        moe_serving("32 experts per GPU (EP8)"),
    ),
    f"pipesim serve scenarios/{DEEPSEEK}.yaml --set parallel.expert=1": (
        DEEPSEEK,
        moe_serving("experts split 8 ways (EP1)"),
    ),
    f"pipesim run scenarios/{ZB}.yaml": (ZB, search_bound),
    f"pipesim compare scenarios/{ZB}.yaml": (ZB, fixed_recipes),
    f"pipesim sweep scenarios/{ZB}.yaml {LIMITS} --plot limit-sweep.png": (ZB, limit_sweep),
}


COVERED = covered()
