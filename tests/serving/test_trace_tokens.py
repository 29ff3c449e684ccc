"""A serving trace's token cells are read as ASCII digits, bounded in length.

``str.isdigit()`` says yes to ``²``, ``٣`` and a 5000-digit number, which ``int()`` then
refuses (or reads as another number): such a cell must be one error line naming the trace
file, the row and the column, exit 2, and nothing written, as a user meets it through
``pipesim serve``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipesim.cli import main

SCENARIO = {
    "schema_version": 1,
    "name": "trace-tokens",
    "pipeline": {"devices": 1},
    "costs": {"prefill_ms": [10], "decode_ms": [1]},
    "decode": {"tokens": 1, "prompt_tokens": 100},
    "serving": {
        "workload": {"arrival": "trace", "trace_file": "trace.csv"},
        "slo": {"ttft_ms": 100, "tpot_ms": 10},
    },
}


def serve(folder: Path, prompt_cell: str):
    (folder / "trace.csv").write_text(
        f"arrival_s,prompt_tokens,output_tokens\n0.0,100,4\n1.0,{prompt_cell},4\n",
        encoding="utf-8",
    )
    (folder / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    args = ["serve", folder / "s.yaml", "-o", folder / "out.json", "--requests", folder / "r.csv"]
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize(
    "cell",
    ["²", "٣", "5" * 5000, "1" + "0" * 20, "+5", "-5", "1_000", " ", "9007199254740993"],
    ids=[
        "superscript",
        "arabic-indic",
        "5000-digits",
        "21-digits",
        "plus",
        "minus",
        "underscore",
        "blank",
        "above-2**53",
    ],
)
def test_a_token_cell_that_is_not_ascii_digits_is_one_line(tmp_path, cell):
    result = serve(tmp_path, cell)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"pipesim: error: {tmp_path / 'trace.csv'}: ")
    assert "row 3, column prompt_tokens" in lines[0]
    assert "expected a whole number of tokens" in lines[0]
    assert len(lines[0]) < 300  # the 5000-digit cell is quoted cut, not whole
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "r.csv").exists()


def test_ascii_digits_with_leading_zeros_are_still_tokens(tmp_path):
    result = serve(tmp_path, "0064")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.json").exists()
