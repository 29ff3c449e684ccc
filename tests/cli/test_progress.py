"""Progress bars: drawn on a terminal only, and an open-ended one only once it counts."""

import io

from pipesim.cli import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_open_ended_bar_appears_only_once_something_is_counted(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    with progress.open_ended_bar("candidate", "schedule search") as update:
        assert update is not None
    assert terminal.getvalue() == ""  # nothing searched: nothing drawn
    with progress.open_ended_bar("candidate", "schedule search") as update:
        for _ in range(7):
            update(1)
    assert terminal.getvalue().startswith("\rschedule search: ")  # drawn once counting began


def test_no_bar_off_a_terminal_or_when_disabled(monkeypatch):
    monkeypatch.setattr(progress.sys, "stderr", io.StringIO())
    with progress.open_ended_bar("candidate", "search") as update:
        assert update is None
    monkeypatch.setattr(progress.sys, "stderr", Terminal())
    with progress.open_ended_bar("candidate", "search", disabled=True) as update:
        assert update is None
    with progress.progress_bar(0, "run", "Monte Carlo") as update:
        assert update is None
