"""``python -m pipesim`` is the ``pipesim`` command."""

import subprocess
import sys


def test_python_m_pipesim_names_itself_and_runs_a_command():
    done = subprocess.run(
        [sys.executable, "-m", "pipesim", "schedules"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "1f1b" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "pipesim", "run", "--bogus"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("pipesim: error:") and bad.stderr.count("\n") == 1


# The command line itself (no arguments given to ``main``), with an exit hook that prints
# when the interpreter's teardown runs.
OWN_LINE = """
import atexit, sys
atexit.register(lambda: print("teardown"))
sys.argv = ["pipesim", *sys.argv[1:]]
from pipesim.cli import main
main()
"""


def own_line(*args):
    return subprocess.run(
        [sys.executable, "-c", OWN_LINE, *args], capture_output=True, text=True, timeout=120
    )


def test_a_run_ends_the_process_without_teardown_and_keeps_its_exit_code():
    done = own_line("run", "scenarios/seed-pipelined.yaml", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert '"makespan_ms": 7.0' in done.stdout and done.stdout.endswith("}\n")  # flushed
    assert "teardown" not in done.stdout
    bad = own_line("run", "missing.yaml")
    assert bad.returncode == 2 and bad.stderr.startswith("pipesim: error:")
    assert "teardown" not in bad.stdout


def test_other_commands_end_as_python_programs_do():
    done = own_line("schedules")
    assert done.returncode == 0 and "1f1b" in done.stdout
    assert done.stdout.endswith("teardown\n")
