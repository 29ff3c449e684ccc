"""The calibration commands speak like the others: the same --set, help on every option
that needs it, and a pinned torch in the install hint."""

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main

GPIPE = str(Path(__file__).parents[2] / "scenarios" / "gpipe-vs-1f1b.yaml")


def help_of(command: str, option: str) -> str:
    """The help text of ``option`` of ``command``, as click stores it."""
    params = {p.opts[0]: p for p in main.commands[command].params}
    return params[option].help or ""


@pytest.mark.parametrize("command", ["profile", "crosscheck", "compare", "sweep", "explain"])
def test_set_is_described_as_run_describes_it(command):
    assert help_of(command, "--set") == help_of("run", "--set")
    assert help_of("run", "--set").startswith("Override a scenario key (value parsed as YAML)")


@pytest.mark.parametrize(
    "command, option",
    [
        ("profile", "--repeats"),
        ("profile", "--dtype"),
        ("crosscheck", "--dtype"),
        ("crosscheck", "--format"),
        ("profile", "--device"),
    ],
)
def test_options_have_help(command, option):
    assert help_of(command, option)


@pytest.mark.parametrize("command", ["profile", "crosscheck"])
def test_the_torch_hint_is_pinned(command, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    args = [command, GPIPE] + (["-o", str(tmp_path / "p.json")] if command == "profile" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == "pipesim: error: this command needs torch: pip install torch==2.13.0\n"
    assert list(tmp_path.iterdir()) == []
