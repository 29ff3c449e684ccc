"""The serving figure: its CDFs mark the SLO's percentile and limits, and it is the same
bytes every time it is drawn (the layout is plain arithmetic, not a solver)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import yaml

from pipesim.plot.save import save_figure
from pipesim.plot.serving import serving_figure, serving_sweep_figure
from pipesim.scenario.serving import load_serving, run_serving


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("serving") / "s.yaml"
    workload = {
        "rate": 40.0,
        "requests": 80,
        "seed": 1,
        "prompt_tokens": 64,
        "output_tokens": {"distribution": "uniform", "low": 2, "high": 40},
    }
    path.write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "name": "s",
                "pipeline": {"devices": 2},
                "costs": {"prefill_ms": [4, 6], "decode_ms": [1, 1]},
                "serving": {"workload": workload, "max_num_seqs": 6},
            }
        )
    )
    return run_serving(load_serving(path)).result


def legend(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_the_cdfs_mark_the_slo_percentile_and_its_limits(served):
    fig = serving_figure(served, 80.0, 5.0, percentile=90)
    ttft_ax, tpot_ax, e2e_ax = fig.axes[:3]
    r = served.requests
    ttft = r.ttft_s[~r.rejected] * 1e3
    p50, p90 = (float(np.percentile(np.sort(ttft), q)) for q in (50, 90))
    assert legend(ttft_ax) == [
        f"p50 {p50:.4g} ms",
        f"p90 {p90:.4g} ms (SLO percentile)",
        "SLO 80 ms",
    ]
    assert legend(tpot_ax)[1:] == [legend(tpot_ax)[1], "SLO 5 ms"]
    assert legend(tpot_ax)[1].startswith("p90 ") and legend(tpot_ax)[1].endswith("(SLO percentile)")
    assert [label.split()[0] for label in legend(e2e_ax)] == ["p50", "p90"]  # no limit on e2e
    # the fraction the SLO is held at, drawn across: where the curve crosses it is the p90
    assert [line.get_ydata()[0] for line in ttft_ax.lines if line.get_linestyle() == "-."][
        -1
    ] == 0.9


def test_an_slo_at_the_median_is_marked_once(served):
    fig = serving_figure(served, 80.0, None, percentile=50)
    labels = legend(fig.axes[0])
    assert (
        len(labels) == 2 and labels[0].startswith("p50 ") and labels[0].endswith("(SLO percentile)")
    )


def test_the_figure_is_the_same_bytes_every_time(served):
    """The constrained layout's solver orders its sums by memory address: its axes positions
    moved in the last bits from one figure to the next, and so did the SVG's clip-path ids
    that hash them. The tight layout is plain arithmetic on the text extents."""
    drawn = set()
    for _ in range(3):
        fig = serving_figure(served, 80.0, 5.0, percentile=90)
        assert type(fig.get_layout_engine()).__name__ == "TightLayoutEngine"
        out = io.BytesIO()
        save_figure(fig, out, fmt="svg")
        drawn.add(out.getvalue())
    assert len(drawn) == 1


def test_a_serving_sweep_draws_its_metrics_against_the_swept_key_in_its_unit():
    frame = pd.DataFrame(
        {
            "serving.workload.rate": [4, 2, 4, 2],
            "serving.replicas": [1, 1, 2, 2],
            "throughput_rps": [3.9, 2.0, 4.0, 2.0],
            "goodput_rps": [1.0, 1.9, 3.9, 2.0],
            "ttft_ms_p90": [900.0, 300.0, 200.0, 150.0],
            "tpot_ms_p90": [80.0, 40.0, 30.0, 25.0],
            "error": ["", "", "", ""],
        }
    )
    fig = serving_sweep_figure(frame)
    goodput = fig.axes[1]
    assert goodput.get_xlabel() == "serving.workload.rate (requests/s)"
    assert goodput.get_ylabel() == "goodput (requests/s within the SLO)"
    drawn = {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in goodput.lines
    }
    assert drawn == {"replicas=1": ([2.0, 4.0], [1.9, 1.0]), "replicas=2": ([2.0, 4.0], [2.0, 3.9])}
    assert [ax.get_ylabel() for ax in fig.axes[2:]] == ["p90 TTFT (ms)", "p90 TPOT (ms)"]
