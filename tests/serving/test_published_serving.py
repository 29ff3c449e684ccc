"""Published serving latencies: every row's error as recorded, held-out errors reported
against the 15 % target, the fit reproducing the defaults (tests/serving/published_serving)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pipesim.cluster.inference import ServingCosts
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving import load_serving, run_serving
from tests.serving import published_serving as ledger

ROWS = ledger.load_rows()


def test_the_ledger_holds_calibration_and_more_held_out_rows():
    roles = [row.role for row in ROWS]
    assert set(roles) == {"calibrate", "held_out"}
    assert roles.count("held_out") >= roles.count("calibrate")
    assert {row.metric for row in ROWS} == {"ttft", "tpot"}
    for row in ROWS:
        assert row.url.startswith("https://"), row.id
        assert row.recorded_error_pct is not None, f"{row.id}: no recorded error"
    assert len({row.id for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_each_row_errs_as_recorded(row):
    """A change to the serving costs that moves any row's error shows here; refit and
    record the new errors (python -m tests.serving.published_serving --record)."""
    assert ledger.error_pct(row) == pytest.approx(row.recorded_error_pct, abs=0.5)


def test_held_out_errors_against_the_target():
    """The issue's target is 15 % on held-out serving rows. It is reported, regime by
    regime, and pinned as it stands: the misses and their causes are in
    docs/validation.md ("Serving")."""
    summary = {
        (metric, gpu): (count, median, worst)
        for role, metric, gpu, count, median, worst in ledger.regimes(ROWS)
        if role == "held_out"
    }
    assert set(summary) == {
        ("ttft", "a100-sxm-80gb"),
        ("tpot", "a100-sxm-80gb"),
        ("tpot", "h100-sxm"),
        ("tpot", "h200"),
    }
    count, median, worst = summary[("tpot", "a100-sxm-80gb")]
    assert median <= ledger.TARGET_PCT
    count, median, worst = summary[("ttft", "a100-sxm-80gb")]
    # Since the prefill's GEMMs are priced by shape (issue 19, the serving costs) the TTFT
    # median is 7.5 %, within the target (15.7 % on the fitted efficiency curve before); the
    # largest misses are LMDeploy's 128-token prefills, slower than TensorRT-LLM's on the
    # same GPU (docs/validation.md, "Serving").
    assert median <= ledger.TARGET_PCT
    assert median == pytest.approx(7.52, abs=0.05)
    misses = sorted(
        row.id
        for row in ROWS
        if row.role == "held_out" and abs(ledger.error_pct(row)) > ledger.TARGET_PCT
    )
    assert misses == [
        "gptfast-7b-tp4-tpot",
        "gptfast-7b-tp8-tpot",
        "lmdeploy-13b-tp1-128-2048-ttft",
        "lmdeploy-70b-tp4-128-2048-ttft",
        "lmdeploy-7b-tp1-128-2048-ttft",
        "trtllm-70b-tp4-128-ttft",
    ]  # 30 of the 36 held-out rows within the target


def test_mixtral_rows_against_the_target():
    """vLLM's nightly latency test of Mixtral 8x7B on TP2 (held out, fitted on nothing):
    pipesim's decode steps read the experts the batch of 8 touches, 7.2 of 8 a layer. The
    same harness's dense Llama 3 rows err by -14.3 % to -0.2 %, the same sign: vLLM's step
    carries what pipesim does not price (sampling, scheduling between steps)."""
    errors = {row.gpu: ledger.error_pct(row) for row in ROWS if row.model == "mixtral-8x7b"}
    assert set(errors) == {"a100-sxm-80gb", "h100-sxm", "h200"}
    assert all(-ledger.TARGET_PCT < error < 0 for error in errors.values())


def test_the_fit_on_calibration_rows_gives_the_defaults():
    fitted = ledger.fit(ROWS)
    defaults = ServingCosts()
    for name in ledger.FITTED:
        assert math.isclose(getattr(fitted, name), getattr(defaults, name)), name


def test_the_fit_never_sees_a_held_out_row():
    """Moving every held-out row's published value leaves the fit unchanged."""
    moved = [
        row if row.role == "calibrate" else replace(row, published_ms=row.published_ms * 3)
        for row in ROWS
    ]
    assert ledger.fit(moved) == ledger.fit(ROWS)


def test_the_report_prints_every_row_and_every_regime():
    text = ledger.report(ROWS)
    for row in ROWS:
        assert row.id in text
    assert "held_out  ttft   a100-sxm-80gb" in text
    assert "calibrate tpot   a100-sxm-80gb" in text


LONE_REQUEST = """\
schema_version: 1
name: lone-request
pipeline: {devices: 1, microbatches: 1}
parallel: {tensor: 4}
model: {layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn_hidden: 28672, mlp: gated,
        seq_len: 4096, vocab: 32000, dtype: bf16}
hardware: {gpu: a100-sxm-80gb, gpus_per_node: 8, intra_node_link: nvlink3}
serving:
  workload: {arrival: poisson, rate: 1, requests: 1, prompt_tokens: 2048, output_tokens: 2}
"""


@pytest.mark.parametrize("graphs", [False, True])
def test_pipesim_serve_charges_a_lone_request_what_the_ledger_predicts(tmp_path, graphs):
    """LMDeploy's Llama-2-70B TP4 row as a serving scenario: one request of 2048 prompt
    tokens and 2 output tokens. Its TTFT is the ledger's prefill, its one decode step the
    ledger's decode at context 2049; serving.cuda_graphs takes 80 layers x 9 kernels x
    (9.75 - 7.5) us = 1.62 ms off the decode step and nothing off the prefill."""
    path = tmp_path / "lone.yaml"
    path.write_text(LONE_REQUEST)
    overrides = [f"serving.cuda_graphs={'true' if graphs else 'false'}"]
    requests = run_serving(load_serving(path, overrides)).result.requests
    row = next(r for r in ROWS if r.id == "lmdeploy-70b-tp4-2048-2048-ttft")
    decode = replace(row, metric="tpot", output_tokens=2, cuda_graphs=graphs)
    assert requests.ttft_s[0] * 1e3 == pytest.approx(ledger.predicted_ms(row), rel=1e-9)
    tpot_ms = (requests.finish_s[0] - requests.first_token_s[0]) * 1e3
    assert tpot_ms == pytest.approx(ledger.predicted_ms(decode), rel=1e-9)
    eager = ledger.predicted_ms(replace(decode, cuda_graphs=False))
    assert eager - tpot_ms == pytest.approx(1.62 if graphs else 0.0, abs=1e-9)


TYPED = """\
schema_version: 1
name: typed
pipeline: {devices: 1, microbatches: 1}
costs: {prefill_ms: 10, decode_ms: 1}
serving:
  workload: {arrival: poisson, rate: 1, requests: 1, prompt_tokens: 8, output_tokens: 2}
  cuda_graphs: true
"""


def test_cuda_graphs_need_model_costs(tmp_path):
    """Typed costs are taken as measured: asking for CUDA graphs on them is an error."""
    path = tmp_path / "typed.yaml"
    path.write_text(TYPED)
    with pytest.raises(ScenarioError, match=r"serving\.cuda_graphs: only with a model section"):
        load_serving(path)
