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


# A command on the process's own command line (no arguments given to ``main``), with an
# exit hook that would print whether the collector was on: the hook never runs, since the
# process ends with the command, its output flushed and its exit code kept.
OWN_LINE = """
import atexit, gc, sys
atexit.register(lambda: print("teardown, collector on:", gc.isenabled()))
sys.argv = ["pipesim", *sys.argv[1:]]
from pipesim.cli import main
main()
"""


def test_on_its_own_command_line_a_command_ends_the_process_without_teardown():
    seed = "scenarios/seed-pipelined.yaml"
    done = subprocess.run(
        [sys.executable, "-c", OWN_LINE, "run", seed, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"makespan_ms": 7.0' in done.stdout and done.stdout.endswith("}\n")
    assert "teardown" not in done.stdout
    bad = subprocess.run(
        [sys.executable, "-c", OWN_LINE, "run", "missing.yaml"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("pipesim: error:")
    assert "teardown" not in bad.stdout
