"""A serving trace's ``arrival_s`` is a number as every CSV reader sees it: ASCII, with no
digit separators. ``float()`` alone reads '٣' as 3.0, '１２' as 12.0 and '1_0' as 10.0
(issue 18)."""

from __future__ import annotations

import pytest

from pipesim.scenario.arrivals import read_arrival_trace
from pipesim.scenario.schema import ScenarioError

HEADER = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("cell", ["٣", "１２", "1_0", "²", "0.5\u00a0"])
def test_an_arrival_in_other_digits_is_refused_naming_row_and_column(tmp_path, cell):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}0,10,10\n{cell},10,10\n")
    with pytest.raises(ScenarioError) as caught:
        read_arrival_trace(path)
    assert str(caught.value) == f"{path}: row 3, column arrival_s: {cell.strip()!r} is not a number"


def test_plain_numbers_with_spaces_and_exponents_still_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}0,10,10\n 2.5e0 ,10,10\n")
    assert [r.arrival_s for r in read_arrival_trace(path)] == [0.0, 2.5]
