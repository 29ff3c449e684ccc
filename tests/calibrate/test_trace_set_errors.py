"""A problem of a set of Kineto traces taken together (no compute action in any of them,
a stage whose forward no trace holds) is one error line that names the trace files, like
every other refusal of ``import-trace`` (issue 18)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pipesim.calibrate.trace_import import TraceImportError, profile_from_spans
from pipesim.cli import main


def trace(*names: str, rank: int) -> dict:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"PP:{name}", "ts": 1000 * i, "dur": 500}
        for i, name in enumerate(names)
    ]
    return {"distributedInfo": {"rank": rank}, "traceEvents": events}


@pytest.mark.parametrize(
    ("rank1", "expected"),
    [
        (
            ["1B0"],
            "stage 1 has no forward (no PP:1F<microbatch> span); a profile needs every stage's forward",
        ),
        (["1SEND_B0"], None),  # rank 1 holds no compute: a profile of stage 0 alone
    ],
    ids=["stage-without-forward", "rank-without-compute"],
)
def test_a_stage_no_trace_gives_a_forward_is_named_with_the_files(tmp_path, rank1, expected):
    paths = [tmp_path / "r0.json", tmp_path / "r1.json"]
    paths[0].write_text(json.dumps(trace("0F0", "0B0", rank=0)))
    paths[1].write_text(json.dumps(trace(*rank1, rank=1)))
    out = tmp_path / "p.json"
    result = CliRunner().invoke(main, ["import-trace", *map(str, paths), "-o", str(out)])
    if expected is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    assert result.stderr == f"pipesim: error: {paths[1]}: {expected}\n"  # the file of stage 1
    assert not out.exists()


def test_traces_without_compute_are_named_in_the_error():
    with pytest.raises(TraceImportError) as caught:
        profile_from_spans([], {"traces": ["a.json", "b.json"]})
    assert str(caught.value) == (
        "a.json, b.json: no compute actions (PP:<stage><F|B|I|W><microbatch> spans)"
    )
