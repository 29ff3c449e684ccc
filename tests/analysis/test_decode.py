"""Decoding through a pipeline: the schedule, hand-derived timelines, the closed forms,
and costs from a model or a profile."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.run import run_scenario
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.inference import BatchShape, stage_boundary_bytes, stage_iteration_ms
from pipesim.cluster.model import TransformerModel
from pipesim.cluster.static_memory import static_memory
from pipesim.cluster.transformer import layer_parameters
from pipesim.scenario.build import build_scenario, parse_spec
from pipesim.scenario.schema import ScenarioError
from pipesim.schedules import decode
from pipesim.schedules.validity import validate
from pipesim.sim.decode import token_end_ms
from tests.helpers import compute_rows


def scenario(devices=2, groups=1, tokens=4, *, prompt=8, size=1, source="d.yaml", **sections):
    data = {
        "schema_version": 1,
        "name": "decode",
        "pipeline": {
            "mode": "decode",
            "devices": devices,
            "microbatches": groups,
            "microbatch_size": size,
        },
        "decode": {"tokens": tokens, "prompt_tokens": prompt},
        "costs": {"prefill_ms": 1.0, "decode_ms": 1.0},
    }
    data.update(sections)
    return build_scenario(parse_spec(data, source), source)


def run(**kwargs):
    return run_scenario(scenario(**kwargs))


# ---------------------------------------------------------------------------
# The schedule


def test_schedule_is_token_steps_in_loop_placement_breadth_first():
    schedule = decode.build(devices=2, groups=2, tokens=3)
    validate(schedule)
    assert [[str(a) for a in actions] for actions in schedule.device_actions] == [
        ["0F0", "0F1", "2F0", "2F1", "4F0", "4F1"],
        ["1F0", "1F1", "3F0", "3F1", "5F0", "5F1"],
    ]
    assert schedule.placement == (0, 1, 0, 1, 0, 1)
    assert decode.stage_of(2, 1, 2) == 5 and decode.step_of(5, 2) == 2


def test_whole_timeline_two_devices_two_groups():
    """p = 2, k = 2, T = 2, prefill 2 ms, decode 1 ms, ideal links: each device runs its
    steps in token order, group after group: step 1 of g0 on device 0 waits for its token
    from device 1 (end 4), g1's for its own (end 6); on device 1 step 1 of g0 waits for the
    device, still busy with g1's prefill until 6."""
    result = run(groups=2, tokens=2, costs={"prefill_ms": 2.0, "decode_ms": 1.0})
    assert compute_rows(result.trace) == [
        (0, "0F0", 0.0, 2.0),
        (0, "0F1", 2.0, 4.0),
        (0, "2F0", 4.0, 5.0),
        (0, "2F1", 6.0, 7.0),
        (1, "1F0", 2.0, 4.0),
        (1, "1F1", 4.0, 6.0),
        (1, "3F0", 6.0, 7.0),
        (1, "3F1", 7.0, 8.0),
    ]
    decode_ = result.decode
    assert decode_.group_ttft_ms == (4.0, 6.0)
    assert decode_.group_tpot_ms == (3.0, 2.0)
    assert decode_.tokens_per_second == 2 * 2 / (8.0 / 1e3)


# ---------------------------------------------------------------------------
# One request alone, written out


def test_one_request_alone_ttft_and_tpot_are_the_stage_times_plus_hops():
    """p = 3 uneven stages, 0.1 ms latency per hop, 64 bytes per decode step over 1 GB/s
    (64e-6 ms), the prompt of 8 tokens sends 8 x 64 bytes, the sampled token id 8 bytes.

    TTFT = prefill 2 + 3 + 4 and two forward hops of 0.1 + 512e-6 ms;
    TPOT = decode 1 + 1.5 + 0.5, two forward hops of 0.1 + 64e-6 ms and the token's hop
    back of 0.1 + 8e-6 ms."""
    result = run(
        devices=3,
        tokens=5,
        costs={"prefill_ms": [2.0, 3.0, 4.0], "decode_ms": [1.0, 1.5, 0.5], "activation_bytes": 64},
        hardware={"link": {"latency_us": 100.0, "bandwidth_gbps": 1.0}},
    )
    ttft = 2 + 3 + 4 + 2 * (0.1 + 512e-6)
    tpot = 1 + 1.5 + 0.5 + 2 * (0.1 + 64e-6) + (0.1 + 8e-6)
    assert result.decode.ttft_ms == pytest.approx(ttft, rel=1e-12)
    assert result.decode.tpot_ms == pytest.approx(tpot, rel=1e-12)
    assert result.decode.analytic is None  # uneven stages: no closed form
    assert result.report.makespan_ms == pytest.approx(ttft + 4 * tpot, rel=1e-12)


# ---------------------------------------------------------------------------
# The closed form: a token every max(p, k) t


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("groups", ["1", "p-1", "p", "2p"])
def test_each_group_emits_a_token_every_max_p_k_steps(p, groups):
    k = {"1": 1, "p-1": max(p - 1, 1), "p": p, "2p": 2 * p}[groups]
    t = 0.75
    result = run(devices=p, groups=k, tokens=6, costs={"prefill_ms": t, "decode_ms": t})
    period = max(p, k) * t
    assert result.decode.group_tpot_ms == (period,) * k
    assert result.decode.tpot_ms == period
    assert result.decode.analytic.tpot_ms == period
    assert result.decode.analytic.tokens_per_second == pytest.approx(k / (period / 1e3))
    ends = token_end_ms(result.trace, result.scenario.schedule)
    assert np.array_equal(np.diff(ends, axis=1), np.full((k, 5), period))


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 5),
    k=st.integers(1, 10),
    prefill=st.sampled_from([0.5, 1.0, 2.0, 3.25]),
    step=st.sampled_from([0.5, 1.0, 1.25]),
    latency_us=st.sampled_from([0.0, 100.0, 450.0]),
)
def test_closed_forms_hold_for_any_prefill_and_latency(p, k, prefill, step, latency_us):
    """TTFT exactly; the inter-token gap once the pipeline is in its steady state
    (the last gap of a long run) equals max(k D, p D + p c)."""
    result = run(
        devices=p,
        groups=k,
        tokens=40,
        costs={"prefill_ms": prefill, "decode_ms": step},
        hardware={"link": {"latency_us": latency_us}},
    )
    exact = result.decode.analytic
    c = latency_us / 1e3 if p > 1 else 0.0
    assert exact.ttft_ms == pytest.approx((k + 1) / 2 * prefill + (p - 1) * (prefill + c))
    assert exact.tpot_ms == pytest.approx(max(k * step, p * step + p * c))
    assert result.decode.ttft_ms == pytest.approx(exact.ttft_ms, rel=1e-12)
    ends = token_end_ms(result.trace, result.scenario.schedule)
    assert ends[:, -1] - ends[:, -2] == pytest.approx(np.full(k, exact.tpot_ms), rel=1e-12)


def test_the_tokens_way_back_is_its_own_hop_in_the_closed_form():
    """p = 3, k = 2, D = 1 ms, 0.1 ms latency and 1 GB/s: a decode step's 64 bytes take
    0.1 + 64e-6 ms a hop forward, the sampled token id's 8 bytes 0.1 + 8e-6 ms back, so a
    group's token goes round in 3 D + 2 (0.1 + 64e-6) + (0.1 + 8e-6), longer than k D."""
    result = run(
        devices=3,
        groups=2,
        tokens=12,
        costs={"prefill_ms": 1.0, "decode_ms": 1.0, "activation_bytes": 64},
        hardware={"link": {"latency_us": 100.0, "bandwidth_gbps": 1.0}},
    )
    period = 3 + 2 * (0.1 + 64e-6) + (0.1 + 8e-6)
    assert result.decode.analytic.tpot_ms == pytest.approx(period, rel=1e-12)
    ttft = 1.5 + 2 * (1 + 0.1 + 512e-6)  # (k + 1) / 2 P + (p - 1)(P + c of a prompt)
    assert result.decode.analytic.ttft_ms == pytest.approx(ttft, rel=1e-12)
    assert result.decode.ttft_ms == pytest.approx(ttft, rel=1e-12)
    ends = token_end_ms(result.trace, result.scenario.schedule)
    assert ends[:, -1] - ends[:, -2] == pytest.approx(np.full(2, period), rel=1e-12)


def test_no_closed_form_with_a_per_action_overhead():
    result = run(groups=2, costs={"prefill_ms": 1.0, "decode_ms": 1.0, "overhead_ms": 0.1})
    assert result.decode.analytic is None


def test_one_token_has_no_tpot():
    result = run(tokens=1)
    assert result.decode.tpot_ms is None and result.decode.group_tpot_ms is None
    assert result.to_dict()["tpot_ms"] is None
    json.dumps(result.to_dict(), allow_nan=False)


# ---------------------------------------------------------------------------
# Costs from a model and from a profile

SMALL_MODEL = {
    "layers": 8,
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 4,
    "ffn_hidden": 2816,
    "mlp": "gated",
    "seq_len": 2048,
    "vocab": 32000,
}


def test_model_costs_are_the_inference_costs_of_each_step():
    built = scenario(
        devices=2,
        groups=2,
        tokens=3,
        prompt=100,
        size=4,
        costs={},
        model=SMALL_MODEL,
        hardware={"gpu": "h100-sxm"},
    )
    spec = {k: v for k, v in SMALL_MODEL.items()}
    model = TransformerModel(**spec)
    prefill = BatchShape(prefill_tokens=400, prefill_attention=4 * 100 * 100)
    step2 = BatchShape(decode_seqs=4, decode_context=4 * 102)
    costs = built.costs
    assert costs.forward_ms[0] == stage_iteration_ms(
        model, 4, "h100-sxm", prefill, first=True, last=False
    )
    assert costs.forward_ms[1] == stage_iteration_ms(
        model, 4, "h100-sxm", prefill, first=False, last=True, emitting=4
    )
    assert costs.forward_ms[5] == stage_iteration_ms(
        model, 4, "h100-sxm", step2, first=False, last=True
    )
    assert costs.activation_bytes[0] == stage_boundary_bytes(model, prefill) == 400 * 1024 * 2
    assert costs.activation_bytes[1] == costs.activation_bytes[5] == 4 * 8  # token ids back
    assert costs.forward_ms[4] < costs.forward_ms[0]  # a step is far cheaper than a prompt
    result = run_scenario(built)
    assert result.report.mfu is not None and 0 < result.report.mfu < 1
    # weights of each device's 4 layers, plus the KV cache of its layers for all 2 x 4
    # sequences at their final context, the prompt and the first two of their three tokens
    # (the last is sampled, never run): K and V of 4 kv heads of width 64 in bf16,
    # 2 * 4 * 64 * 2 = 1024 bytes a token a layer
    weights = static_memory(model, (4, 4), training=False)
    kv_bytes = 4 * 1024 * 102 * 8
    assert [d.static_memory_bytes for d in result.report.per_device] == [
        weights[0].total_bytes + kv_bytes,
        weights[1].total_bytes + kv_bytes,
    ]


def test_model_decode_flops_are_every_step_at_its_context():
    built = scenario(
        devices=2,
        groups=3,
        tokens=3,
        prompt=100,
        size=4,
        costs={},
        model=SMALL_MODEL,
        hardware={"gpu": "h100-sxm"},
    )
    model = TransformerModel(**SMALL_MODEL)
    layer = 2 * layer_parameters(model)  # FLOPs per token per layer, 2 per weight
    attention = 4 * 1024  # per token per layer and token of context (QK^T and scores x V)
    head = 2 * 1024 * 32000  # the LM head, for each sampled token
    prefill = 8 * (layer * 100 + attention * 100 * 100) + head  # one prompt, 100 tokens
    steps = sum(8 * (layer + attention * (100 + t)) + head for t in (1, 2))  # then 2 tokens
    assert built.accounting.flops_per_step == pytest.approx(3 * 4 * (prefill + steps), rel=1e-12)
    assert built.accounting.peak_flops == 2 * gpu_profile("h100-sxm").peak_tflops * 1e12


def test_model_decode_with_tensor_parallelism_adds_allreduces():
    common = dict(devices=2, tokens=2, costs={}, model=SMALL_MODEL)
    alone = scenario(**common, hardware={"gpu": "h100-sxm"})
    split = scenario(
        **common,
        parallel={"tensor": 2},
        hardware={"gpu": "h100-sxm", "intra_node_link": "nvlink4"},
    )
    assert split.costs.forward_ms[2] > alone.costs.forward_ms[2] / 2


def _profile(tmp_path, stages):
    spread = lambda ms: {"median_ms": ms, "p10_ms": ms, "p90_ms": ms, "samples": 5}  # noqa: E731
    data = {"format": "pipesim-profile", "version": 1, "stages": stages(spread)}
    (tmp_path / "p.json").write_text(json.dumps(data))
    return str(tmp_path / "d.yaml")


def test_profile_with_prefill_and_decode_timings(tmp_path):
    source = _profile(
        tmp_path,
        lambda s: [
            {"stage": i, "activation_bytes": 0, "prefill": s(3.0), "decode": s(0.5)}
            for i in range(2)
        ],
    )
    built = scenario(groups=2, tokens=3, source=source, costs={"profile": "p.json"})
    assert built.costs.forward_ms == (3.0, 3.0, 0.5, 0.5, 0.5, 0.5)
    assert run_scenario(built).decode.analytic.tpot_ms == 2 * 0.5


def test_profile_without_decode_timings_is_refused(tmp_path):
    source = _profile(tmp_path, lambda s: [{"stage": 0, "F": s(1.0), "B": s(2.0)}])
    with pytest.raises(ScenarioError, match=r"costs.profile: stage 0 has no prefill and decode"):
        scenario(source=source, costs={"profile": "p.json"})


# ---------------------------------------------------------------------------
# Bad input: one line naming the key


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("decode"), r"d.yaml: decode: required with pipeline.mode: decode"),
        (lambda d: d["pipeline"].update(schedule="1f1b"), r"pipeline.schedule: not used in"),
        (lambda d: d["pipeline"].update(virtual_stages=2), r"pipeline.virtual_stages: not used"),
        (lambda d: d["costs"].pop("decode_ms"), r"costs.decode_ms: required in decode mode"),
        (lambda d: d["costs"].update(forward_ms=1.0), r"costs.forward_ms: not used in decode"),
        (
            lambda d: d["costs"].update(prefill_ms=[1.0]),
            r"costs.prefill_ms: has 1 entries, "
            r"expected a number or 2",
        ),
        (
            lambda d: d.update(model=SMALL_MODEL, hardware={"gpu": "h100-sxm"}),
            r"costs.decode_ms: not allowed with a model section",
        ),
        (lambda d: d.update(model=SMALL_MODEL, costs={}), r"hardware.gpu: required"),
        (
            lambda d: d["pipeline"].update(max_actions=10),
            r"pipeline: 2 devices x 1 groups x 8 token steps \(decode.tokens\) = 16 actions, "
            r"over the limit of 10; raise pipeline.max_actions",
        ),
        (lambda d: d["pipeline"].pop("microbatches"), r"pipeline.microbatches: required"),
    ],
)
def test_bad_decode_input_names_the_key(change, message):
    data = {
        "schema_version": 1,
        "name": "x",
        "pipeline": {"mode": "decode", "devices": 2, "microbatches": 1},
        "decode": {"tokens": 8},
        "costs": {"prefill_ms": 1.0, "decode_ms": 1.0},
    }
    change(data)
    with pytest.raises(ScenarioError, match=message):
        build_scenario(parse_spec(data, "d.yaml"), "d.yaml")


def test_train_mode_still_requires_a_schedule():
    data = {"schema_version": 1, "name": "x", "pipeline": {"devices": 2, "microbatches": 2}}
    with pytest.raises(ScenarioError, match="pipeline.schedule: required key is missing"):
        build_scenario(parse_spec(data, "t.yaml"), "t.yaml")


@settings(max_examples=15, deadline=None)
@given(
    p=st.integers(1, 4),
    k=st.integers(1, 6),
    tokens=st.integers(1, 6),
    prefill=st.lists(st.floats(0.1, 5.0), min_size=4, max_size=4),
    step=st.lists(st.floats(0.1, 2.0), min_size=4, max_size=4),
    latency_us=st.sampled_from([0.0, 30.0]),
)
def test_both_evaluators_give_the_same_decode_metrics(p, k, tokens, prefill, step, latency_us):
    built = scenario(
        devices=p,
        groups=k,
        tokens=tokens,
        costs={"prefill_ms": prefill[:p], "decode_ms": step[:p], "activation_bytes": 1e6},
        hardware={"link": {"latency_us": latency_us, "bandwidth_gbps": 100.0}},
    )
    fast = run_scenario(built, evaluator="fast").decode
    engine = run_scenario(built, evaluator="simpy").decode
    assert fast.group_ttft_ms == pytest.approx(engine.group_ttft_ms, rel=1e-9)
    assert fast.tokens_per_second == pytest.approx(engine.tokens_per_second, rel=1e-9)
    if tokens > 1:
        assert fast.group_tpot_ms == pytest.approx(engine.group_tpot_ms, rel=1e-9)


def test_an_inference_profile_round_trips_and_is_refused_for_training(tmp_path):
    from pipesim.scenario.profile import load_profile, profile_from_dict, profile_to_dict

    source = _profile(
        tmp_path,
        lambda s: [{"stage": 0, "activation_bytes": 64, "prefill": s(3.0), "decode": s(0.5)}],
    )
    profile = load_profile(tmp_path / "p.json")
    assert profile_from_dict(profile_to_dict(profile)) == profile
    assert profile.stages[0].median_ms("prefill") == 3.0
    data = {
        "schema_version": 1,
        "name": "t",
        "costs": {"profile": "p.json"},
        "pipeline": {"schedule": "1f1b", "devices": 2, "microbatches": 2},
    }
    with pytest.raises(
        ScenarioError, match="costs.profile: stage 0: the profile has no forward time F"
    ):
        build_scenario(parse_spec(data, source), source)
