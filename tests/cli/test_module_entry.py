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
