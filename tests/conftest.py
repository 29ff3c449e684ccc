"""Test-run policy shared by every test module.

Tests marked ``timing`` judge wall-clock numbers of real multi-process runs (prediction
error of a cross-check on two CPU processes). On a busy 2-core machine those numbers move
with whatever else runs, so the default run leaves them out and CI runs them in a step
of their own that retries and tolerates a loaded machine (``.ci/run``). Select them with
``-m timing`` (or any ``-m`` expression naming ``timing``).

Tests marked ``ledger`` re-simulate every row of a published-runs ledger (the searched
Zero Bubble schedules take minutes in all); the default run checks a quick subset of the
same rows, and ``-m ledger`` runs the whole ledger on demand (docs/validation.md).

Tests marked ``fuzz`` are the long fuzzing runs (three times the cases of the default
ones, on other seeds); the default run fuzzes each command line with its standard count,
and ``-m fuzz`` runs the long ones on demand.

A test run started in the background of a script (``pytest &``, as some CI runners do)
inherits SIGINT ignored, and so would every command a test starts: Ctrl-C tests would see
pipesim keep an ignored signal ignored, as it should. The run takes SIGINT back at its
start, so the commands it starts get it as a user's terminal gives it.
"""

import signal

import pytest

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REASONS = {
    "timing": "wall-clock judgement: run with -m timing (CI's own step)",
    "ledger": "the whole ledger, minutes: run with -m ledger",
    "fuzz": "a long fuzzing run, a minute or more: run with -m fuzz",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    named = config.getoption("markexpr") or ""
    for marker, reason in REASONS.items():
        if marker in named:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
