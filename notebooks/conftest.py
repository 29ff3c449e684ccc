"""Run the tutorial notebooks as tests.

``python -m pytest`` collects every notebook here and executes it with nbmake, so a
notebook whose asserts disagree with pipesim fails the suite. ``pytest --nbmake`` works as
well (nbmake then collects the notebooks itself). Without nbmake installed, each notebook
shows up as one skipped test instead of silently disappearing.
"""

from pathlib import Path

import pytest


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix != ".ipynb" or ".ipynb_checkpoints" in file_path.parts:
        return None
    if not hasattr(parent.config.option, "nbmake"):  # the nbmake plugin is not loaded
        return _MissingNbmake.from_parent(parent, path=file_path)
    if parent.config.option.nbmake:
        return None  # --nbmake given: nbmake's own hook collects it
    from nbmake.pytest_items import NotebookFile

    return NotebookFile.from_parent(parent, path=file_path)


class _MissingNbmake(pytest.File):
    def collect(self):
        yield _Skipped.from_parent(self, name=self.path.name)


class _Skipped(pytest.Item):
    def runtest(self) -> None:
        pytest.skip("nbmake is not installed (or disabled): pip install -e '.[test]'")

    def reportinfo(self):
        return self.path, 0, self.name


# Notebooks that run real torch processes, or several seconds of simulation, are left out
# of the quick loop (the full suite runs them all).
SLOW_NOTEBOOKS = {"02-choose-a-schedule.ipynb", "03-calibrate.ipynb", "04-serving.ipynb",
                  "05-plan.ipynb", "06-moe.ipynb"}  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_NOTEBOOKS:
            item.add_marker(pytest.mark.slow)
