"""Model- and cluster-derived scenarios, end to end through the engine."""

import json
from pathlib import Path

import pytest

from pipesim import load_scenario, run_scenario
from pipesim.cluster.hardware import link_profile
from pipesim.scenario.build import ScenarioError

SCENARIOS = Path(__file__).parent.parent / "scenarios"
GPT = SCENARIOS / "gpt-nvlink-vs-pcie.yaml"
TRADEOFF = SCENARIOS / "microbatch-tradeoff.yaml"


def run(path, *overrides):
    return run_scenario(load_scenario(path, list(overrides)))


def test_pcie_costs_what_the_analytic_model_predicts():
    # GPipe: every hop lies once forward and once backward on the critical path, so the
    # step grows by 2 (p - 1) times the difference in one activation's transfer time.
    nvlink = run(GPT).report.makespan_ms
    pcie = run(GPT, "hardware.link=pcie4").report.makespan_ms
    nbytes = 1 * 2048 * 4096 * 2  # b * s * h * bf16
    hop = link_profile("pcie4").transfer_ms(nbytes) - link_profile("nvlink4").transfer_ms(nbytes)
    assert pcie > nvlink
    assert pcie - nvlink == pytest.approx(2 * 3 * hop, rel=1e-9)


def test_uniform_stages_over_a_link_profile_match_the_closed_form(tmp_path):
    data = {
        "schema_version": 1,
        "name": "u",
        "pipeline": {"schedule": "gpipe", "devices": 4, "microbatches": 8},
        "costs": {"forward_ms": 1, "backward_ms": 2, "activation_bytes": 16 * 2**20},
        "hardware": {"link": "pcie4"},
    }
    path = tmp_path / "u.json"
    path.write_text(json.dumps(data))
    report = run(path).report
    hop = link_profile("pcie4").transfer_ms(16 * 2**20)
    assert report.makespan_ms == pytest.approx(11 * 3 + 2 * 3 * hop)
    assert report.analytic["makespan_ms"] == pytest.approx(report.makespan_ms)


def test_a_boundary_between_nodes_uses_the_inter_node_link(tmp_path):
    data = {
        "schema_version": 1,
        "name": "n",
        "pipeline": {"schedule": "gpipe", "devices": 4, "microbatches": 1},
        "costs": {"forward_ms": 1, "backward_ms": 1, "activation_bytes": 1e6},
        "hardware": {"gpus_per_node": 2, "intra_node_link": "nvlink4", "inter_node_link": "ib-ndr"},
    }
    path = tmp_path / "n.json"
    path.write_text(json.dumps(data))
    trace = run(path).trace
    comm = trace.frame[trace.frame.lane == "comm"]
    hops = {(r.device, r.peer): r.end - r.start for r in comm.itertuples()}
    intra, inter = link_profile("nvlink4").transfer_ms(1e6), link_profile("ib-ndr").transfer_ms(1e6)
    assert hops[(0, 1)] == pytest.approx(intra) and hops[(2, 3)] == pytest.approx(intra)
    assert hops[(1, 2)] == pytest.approx(inter) and hops[(2, 1)] == pytest.approx(inter)


def test_balanced_partition_beats_even_when_the_lm_head_is_large():
    even = run(GPT, "model.partition=even").report
    balanced = run(GPT).report
    assert balanced.makespan_ms < even.makespan_ms
    # the last stage carries the LM head: even partitioning makes it the straggler
    assert even.per_device[3].busy_ms == max(d.busy_ms for d in even.per_device)


def test_fixed_global_batch_has_an_interior_optimum():
    times = {
        m: run(TRADEOFF, f"pipeline.microbatches={m}").report for m in (1, 2, 4, 8, 16, 32, 64)
    }
    for report in times.values():
        assert report.microbatches * report.microbatch_size == 64
    best = min(times, key=lambda m: times[m].makespan_ms)
    assert best not in (1, 64)
    assert times[1].makespan_ms > times[best].makespan_ms < times[64].makespan_ms


def test_throughput_in_the_users_units():
    report = run(GPT).report
    assert report.tokens_per_second == pytest.approx(report.samples_per_second * 2048)
    assert report.samples_per_second == pytest.approx(8 / (report.makespan_ms / 1000))
    assert 0 < report.mfu < 1


def test_static_memory_and_oom():
    fits = run(SCENARIOS / "llama-70b-4x8-h100.yaml").report
    assert not fits.oom
    for d in fits.per_device:
        assert d.peak_memory_bytes == d.static_memory_bytes + d.peak_activation_bytes
    # One node of 8 GPUs with tensor parallelism 2 cannot hold a 70B model with Adam.
    tight = run(
        SCENARIOS / "llama-70b-4x8-h100.yaml",
        "parallel.tensor=1",
        "parallel.sequence_parallel=false",
    ).report
    assert tight.oom and all(d.oom for d in tight.per_device)
    # ZeRO-1 over 4 replicas divides the 12 optimizer bytes of each parameter by 4
    zero = run(
        SCENARIOS / "llama-70b-4x8-h100.yaml",
        "parallel.data=4",
        "parallel.zero_stage=1",
        "model.global_batch=128",
    ).report
    ratio = zero.per_device[1].static_memory_bytes / fits.per_device[1].static_memory_bytes
    assert ratio == pytest.approx((2 + 2 + 12 / 4) / 16)


def test_data_parallel_all_reduce_is_counted_in_the_step():
    base = run(GPT).report
    dp = run(GPT, "parallel.data=2", "model.microbatch_size=1", "model.global_batch=16").trace
    frame = dp.frame
    allreduce = frame[frame.kind == "ALLREDUCE"]
    assert len(allreduce) == 4
    last_compute = frame[frame.lane == "compute"].end.max()
    assert allreduce.start.min() == pytest.approx(last_compute)  # after the flush
    assert dp.makespan_ms == pytest.approx(last_compute + (allreduce.end - allreduce.start).max())
    overlapped = run(
        GPT, "parallel.data=2", "model.global_batch=16", "parallel.dp_overlap=true"
    ).trace
    rows = overlapped.frame
    for device in range(4):  # each all-reduce starts when its own device's last action ends
        own = rows[rows.device == device]
        start = own[own.kind == "ALLREDUCE"].start.iloc[0]
        assert start == pytest.approx(own[own.lane == "compute"].end.max())
    assert overlapped.makespan_ms <= dp.makespan_ms
    assert run(
        GPT, "parallel.data=2", "model.global_batch=16"
    ).report.samples_per_second == pytest.approx(16 / (dp.makespan_ms / 1000))
    assert base.samples_per_second > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["hardware.gpu=null"], "hardware.gpu: required with a model section"),
        (["hardware.gpu=tpu"], "hardware.gpu: Value error, unknown gpu 'tpu'; allowed: h100-sxm"),
        (
            ["hardware.link=carrier-pigeon"],
            "unknown link 'carrier-pigeon'; allowed: ideal, nvlink3",
        ),
        (["costs.forward_ms=3"], "costs.forward_ms: not allowed with a model section"),
        (["model.partition=[1,2,3]"], "model: "),
        (["model.global_batch=10"], "model.global_batch: 10 is not microbatches x microbatch_size"),
    ],
)
def test_model_errors_name_the_field(overrides, message):
    with pytest.raises(ScenarioError) as info:
        load_scenario(GPT, overrides)
    assert message in str(info.value) and "\n" not in str(info.value)
