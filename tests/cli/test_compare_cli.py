"""``pipesim compare`` with the searched policies (zb-auto, v-auto) beside the fixed ones."""

import csv
import io
from pathlib import Path

from click.testing import CliRunner

from pipesim.cli import main
from pipesim.schedules import POLICIES

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")  # F 1 ms, B 2 ms, 100 MiB kept per microbatch
LIMITED = str(SCENARIOS / "zb-auto-under-memory.yaml")  # zb-auto under 8 GiB


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def rows_of(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in stdout.splitlines()[1:]}


def test_without_schedules_every_policy_runs_and_the_searched_ones_last():
    result = invoke("compare", GPIPE)
    assert result.exit_code == 0, result.output
    rows = rows_of(result.stdout)
    assert list(rows) == [*POLICIES, "zb-auto", "v-auto"]
    assert float(rows["zb-auto"][1]) <= float(rows["zb-h1"][1]) == 27.0
    zb_auto = next(line for line in result.stdout.splitlines() if line.startswith("zb-auto"))
    assert "(limit 400.00 MiB, peak 400.00 MiB, " in zb_auto and " candidates in " in zb_auto
    v_auto = next(line for line in result.stdout.splitlines() if line.startswith("v-auto"))
    assert v_auto.endswith("; virtual_stages=2, hand-typed per-chunk costs x1/2)")
    assert "v-auto" in result.stderr  # its costs were rescaled, as zbv's


def test_a_forward_only_step_compares_the_fixed_policies_only():
    result = invoke("compare", GPIPE, "--set", "pipeline.mode=forward")
    assert result.exit_code == 0, result.output
    assert list(rows_of(result.stdout)) == list(POLICIES)


def test_named_searched_policies_show_limit_and_peak_in_every_format():
    result = invoke("compare", LIMITED, "--schedules", "zb-h1,zb-auto")
    assert result.exit_code == 0, result.output
    rows = rows_of(result.stdout)
    assert float(rows["zb-auto"][1]) <= float(rows["zb-h1"][1])
    assert "(limit 8.00 GiB, peak 8.00 GiB, " in result.stdout
    table = invoke("compare", LIMITED, "--schedules", "zb-h1,zb-auto", "--format", "csv")
    zb_h1, zb_auto = csv.DictReader(io.StringIO(table.stdout))
    assert zb_h1["memory_limit_bytes"] == "" and zb_h1["search_candidates"] == ""
    assert float(zb_auto["memory_limit_bytes"]) == 8 * 2**30
    assert int(zb_auto["search_candidates"]) >= 1
    assert max(float(v) for v in zb_auto["peak_activation_bytes"].split(";")) <= 8 * 2**30


def test_a_limit_nothing_can_meet_is_a_row_not_a_failure():
    result = invoke(
        "compare",
        LIMITED,
        "--schedules",
        "zb-h1,zb-auto",
        "--set",
        "pipeline.memory_limit_bytes=1073741824",
    )
    assert result.exit_code == 0, result.output
    assert (
        "zb-auto   not run: pipeline.memory_limit_bytes: memory limit 1073741824 bytes is below "
        "the minimum 2147483648 bytes any zb-auto order can reach (4 devices)"
    ) in result.stdout
