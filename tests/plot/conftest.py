"""Runs shared by the figure tests (simulated once per session)."""

import pytest

from tests.plot.builders import run


@pytest.fixture(scope="session")
def interleaved():
    """2 devices x 2 chunks with activations, wide boxes: every label fits."""
    return run(
        "interleaved-1f1b", 2, 4, 2, forward_ms=1, backward_ms=2, activation_memory_bytes=2**28
    )


@pytest.fixture(autouse=True)
def close_figures():
    """Every test's figures are closed after it (pyplot keeps them otherwise)."""
    yield
    from pipesim.plot.style import pyplot

    pyplot().close("all")
