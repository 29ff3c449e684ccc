"""``pipesim serve`` and ``pipesim run`` in decode mode tell the same story for one request.

A decode run of one group of one request and a serving run of that one request, with the
same hand-typed costs, walk the same path: the prefill through every stage (TTFT), then for
every later token the sampled one back from the last stage to the first and one decode step
through every stage (TPOT). Decode mode sends the token id (8 bytes for a group of one)
over the link's bandwidth; hand-typed serving costs carry no message sizes and charge only
the link's latency. So on a link whose bandwidth is not given (message sizes free) the two
agree exactly, and on a link of B GB/s serving's TPOT is shorter by 8 / B ns.
"""

from __future__ import annotations

import pytest
import yaml

from pipesim.analysis.run import run_scenario
from pipesim.scenario.build import build_scenario, parse_spec
from pipesim.scenario.serving import load_serving, run_serving

PREFILL_MS, DECODE_MS = [10.0, 20.0, 30.0], [1.0, 2.0, 3.0]
PROMPT, TOKENS = 100, 4


def decode_run(link: dict):
    data = {
        "schema_version": 1,
        "name": "decode-one",
        "pipeline": {"mode": "decode", "devices": 3, "microbatches": 1, "microbatch_size": 1},
        "decode": {"tokens": TOKENS, "prompt_tokens": PROMPT},
        "costs": {"prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
        "hardware": {"link": link},
    }
    return run_scenario(build_scenario(parse_spec(data, "d.yaml"), "d.yaml")).decode


def serve_run(tmp_path, link: dict):
    (tmp_path / "one.csv").write_text(
        f"arrival_s,prompt_tokens,output_tokens\n0.0,{PROMPT},{TOKENS}\n"
    )
    data = {
        "schema_version": 1,
        "name": "serve-one",
        "pipeline": {"devices": 3},
        "decode": {"tokens": TOKENS, "prompt_tokens": PROMPT},
        "costs": {"prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
        "hardware": {"link": link},
        "serving": {"workload": {"arrival": "trace", "trace_file": "one.csv"}},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return run_serving(load_serving(path)).report


def test_one_request_same_ttft_and_tpot_when_message_sizes_are_free(tmp_path):
    link = {"latency_us": 400}
    decode, serve = decode_run(link), serve_run(tmp_path, link)
    # TTFT: 10 + 0.4 + 20 + 0.4 + 30; TPOT: 0.4 back, then 1 + 0.4 + 2 + 0.4 + 3
    assert decode.ttft_ms == pytest.approx(60.8, rel=1e-12)
    assert decode.tpot_ms == pytest.approx(7.2, rel=1e-12)
    assert serve.ttft_ms.mean == pytest.approx(decode.ttft_ms, rel=1e-12)
    assert serve.tpot_ms.mean == pytest.approx(decode.tpot_ms, rel=1e-12)


def test_one_request_differs_by_the_token_ids_bandwidth_time(tmp_path):
    link = {"latency_us": 400, "bandwidth_gbps": 0.001}  # 1 MB/s: 8 bytes take 8 us
    decode, serve = decode_run(link), serve_run(tmp_path, link)
    assert serve.ttft_ms.mean == pytest.approx(decode.ttft_ms, rel=1e-12)
    assert decode.tpot_ms - serve.tpot_ms.mean == pytest.approx(0.008, rel=1e-9)
