"""``lazy_front``: a package's public names imported on first read, kept after."""

import sys

import pytest

from pipesim.schedules.lazy import lazy_front


def test_a_name_is_imported_on_first_read_and_kept():
    namespace = {"__name__": "somepackage"}
    getattr_, dir_ = lazy_front(namespace, {"dedent": "textwrap", "Fraction": "fractions"})
    assert "dedent" not in namespace
    assert getattr_("dedent") is sys.modules["textwrap"].dedent
    assert namespace["dedent"] is sys.modules["textwrap"].dedent  # found directly next time
    assert dir_() == ["Fraction", "__name__", "dedent"]
    with pytest.raises(AttributeError, match="module 'somepackage' has no attribute 'other'"):
        getattr_("other")


def test_the_plot_front_lists_its_names_and_refuses_others():
    import pipesim.plot

    assert "gantt_figure" in dir(pipesim.plot)
    with pytest.raises(AttributeError, match="pipesim.plot"):
        pipesim.plot.no_such_figure  # noqa: B018
