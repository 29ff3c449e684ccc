"""ZeRO's price: stages 1 and 2 move one all-reduce's bytes per step, stage 3 gathers the
parameters before every forward and every backward; under a pipeline the gradients wait
whole for the step's one reduce-scatter, so ZeRO-2 and ZeRO-3 do not shard them.

The job below is 16 data-parallel replicas of a one- or two-stage pipeline, one GPU per
node, over a slow 10 GB/s network without latency, so a ring all-gather of ``B`` bytes
over the 16 replicas takes exactly ``15/16 * B / 10e9`` seconds, and every number here
follows from that and the stage's parameter count.
"""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import load_scenario, run_scenario
from pipesim.cluster.model import TransformerModel, partition_layers, stage_parameters
from pipesim.cluster.pass_time import (
    exposed_data_parallel_ms,
    exposed_gather_ms,
    with_parameter_gathers,
)
from pipesim.sim.costs import uniform_costs
from pipesim.sim.trace import RowKind

MODEL = TransformerModel(layers=4, hidden=1024, heads=8, seq_len=512, vocab=32000)
REPLICAS, MICROBATCHES, BANDWIDTH_GBPS = 16, 4, 10.0


def scenario_file(tmp_path, devices=1, latency_us=0.0):
    data = {
        "schema_version": 1,
        "name": "zero",
        "pipeline": {"schedule": "1f1b", "devices": devices, "microbatch_size": 1},
        "model": {
            "layers": 4,
            "hidden": 1024,
            "heads": 8,
            "seq_len": 512,
            "vocab": 32000,
            "global_batch": REPLICAS * MICROBATCHES,
        },
        "parallel": {"data": REPLICAS},
        "hardware": {
            "gpu": "h100-sxm",
            "gpus_per_node": 1,
            "intra_node_link": "nvlink4",
            "inter_node_link": {"latency_us": latency_us, "bandwidth_gbps": BANDWIDTH_GBPS},
        },
    }
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(data))
    return path


def gather_ms(devices=1):
    """A ring all-gather of each stage's bf16 parameters over the 16 replicas."""
    partition = partition_layers(MODEL, devices, "even")
    return [
        (REPLICAS - 1) / REPLICAS * params * 2 / (BANDWIDTH_GBPS * 1e6)
        for params in stage_parameters(MODEL, partition)
    ]


def load(path, zero, overlap=False, slowdown=0.0):
    return load_scenario(
        path,
        [
            f"parallel.zero_stage={zero}",
            f"parallel.dp_overlap={overlap}",
            f"model.efficiency.overlap_slowdown={slowdown}",
        ],
    )


def test_a_gather_is_added_to_each_pass_and_hidden_layer_by_layer_under_overlap():
    costs = uniform_costs(2, 2.0, backward_input_ms=1.5, backward_weight_ms=1.5)
    plain = with_parameter_gathers(costs, [1.0, 2.5], False, layers=[4, 5])
    assert plain.forward_ms == (3.0, 4.5)
    assert plain.backward_input_ms == (2.5, 4.0)
    assert plain.backward_weight_ms == (1.5, 1.5)
    assert plain.backward_ms == (4.0, 5.5)
    hidden = with_parameter_gathers(costs, [1.0, 2.5], True, layers=[4, 5])
    # stage 0: 0.25 a layer, under 0.5 (F) and 0.75 (B) a layer: only the first shows.
    # stage 1: 0.5 a layer; F computes 0.4 a layer, so each of the 4 later gathers
    # outlasts its layer by 0.1: 0.5 + 4 x 0.1 = 0.9; B's 0.6 a layer hides them.
    assert hidden.forward_ms == pytest.approx((2.25, 2.9))
    assert hidden.backward_input_ms == pytest.approx((1.75, 2.0))
    assert hidden.backward_weight_ms == (1.5, 1.5)
    assert hidden.backward_ms == pytest.approx((3.25, 3.5))
    # a one-layer stage has nothing to prefetch under: its gather shows whole
    assert with_parameter_gathers(costs, [1.0, 2.5], True, layers=[1, 1]) == plain


def test_exposed_gather_is_the_first_layer_and_what_outlasts_the_rest():
    assert exposed_gather_ms(4.0, 8.0, False, layers=4) == 4.0
    assert exposed_gather_ms(4.0, 8.0, True, layers=4) == 1.0  # 1 a layer under 2 a layer
    assert exposed_gather_ms(4.0, 2.0, True, layers=4) == 1.0 + 3 * (1.0 - 0.5)
    assert exposed_gather_ms(4.0, 0.0, True, layers=4) == 4.0  # nothing to hide under
    assert exposed_gather_ms(4.0, 100.0, True, layers=1) == 4.0
    # with a reduce-scatter after each layer the last one shows too: (1 + 1) + 3 x (2 - 2)
    assert exposed_gather_ms(4.0, 8.0, True, layers=4, scatter_ms=4.0) == 2.0


def test_a_reduce_scatter_per_backward_goes_to_w():
    costs = uniform_costs(2, 2.0, backward_input_ms=1.5, backward_weight_ms=1.5)
    plain = with_parameter_gathers(costs, [1.0, 2.5], False, [4, 5], reduce_scatter_ms=[1.0, 2.5])
    assert plain.forward_ms == (3.0, 4.5)
    assert plain.backward_input_ms == (2.5, 4.0)
    assert plain.backward_weight_ms == (2.5, 4.0)
    assert plain.backward_ms == (5.0, 8.0)
    hidden = with_parameter_gathers(costs, [1.0, 2.5], True, [4, 5], reduce_scatter_ms=[1.0, 2.5])
    # stage 0: 0.25 + 0.25 a layer under B's 0.75: the first gather and the last
    # reduce-scatter show, 0.25 each. Stage 1: 0.5 + 0.5 a layer against 0.6: the first
    # gather (0.5, to I), the last reduce-scatter (0.5) and 4 x 0.4 outlasting (to W).
    assert hidden.backward_input_ms == pytest.approx((1.75, 2.0))
    assert hidden.backward_weight_ms == pytest.approx((1.75, 3.6))
    assert hidden.backward_ms == pytest.approx((3.5, 5.6))


def test_zero3_waits_at_the_end_only_for_the_reduce_scatter():
    assert exposed_data_parallel_ms(4.0, 1.0, 3.0, False, gather_weights=False) == 4.0
    assert exposed_data_parallel_ms(4.0, 1.0, 3.0, True, gather_weights=False) == 1.0
    # ZeRO-1: halves of 2; the reduce-scatter hides under B (3), the gather outlasts F by 1
    assert exposed_data_parallel_ms(4.0, 1.0, 3.0, True) == 1.0


def test_stages_one_and_two_cost_the_same_and_stage_three_gathers(tmp_path):
    # a pipeline of two stages: a gather per pass, one reduce-scatter at the end
    path = scenario_file(tmp_path, devices=2)
    zero1, zero2, zero3 = (load(path, z) for z in (1, 2, 3))
    assert zero2.costs == zero1.costs and zero2.tail_ms == zero1.tail_ms
    for k, gather in enumerate(gather_ms(devices=2)):
        assert zero3.costs.forward_ms[k] == pytest.approx(zero1.costs.forward_ms[k] + gather)
        assert zero3.costs.backward_ms[k] == pytest.approx(zero1.costs.backward_ms[k] + gather)
        assert zero3.costs.backward_weight_ms[k] == zero1.costs.backward_weight_ms[k]
        # the end of the step: an all-reduce (2 gathers' worth) against a reduce-scatter (1)
        assert zero1.tail_ms[k] - zero3.tail_ms[k] == pytest.approx(gather)
    step1 = run_scenario(zero1).report.makespan_ms
    assert run_scenario(zero3).report.makespan_ms > step1 + 2 * MICROBATCHES * min(gather_ms(2))


def test_without_a_pipeline_every_backward_reduce_scatters(tmp_path):
    # One device, no bubble: the step is the passes and the tail. ZeRO-3 adds a gather to
    # every F and a gather and a reduce-scatter to every backward, and leaves no reduction
    # for the end, where ZeRO-1 all-reduces (2 gathers' worth): (3 m - 2) gathers in all.
    path = scenario_file(tmp_path)
    (gather,) = gather_ms()
    zero1, zero3 = load(path, 1), load(path, 3)
    assert zero3.costs.backward_ms[0] == pytest.approx(zero1.costs.backward_ms[0] + 2 * gather)
    assert zero1.tail_ms[0] - zero3.tail_ms[0] == pytest.approx(2 * gather)
    step1 = run_scenario(zero1).report.makespan_ms
    step3 = run_scenario(zero3).report.makespan_ms
    assert step3 - step1 == pytest.approx((3 * MICROBATCHES - 2) * gather, rel=1e-9)
    assert gather > 1.0  # the 10 GB/s network makes it matter


def test_overlap_exposes_the_first_unit_and_what_outlasts_the_others(tmp_path):
    # two layers and the embedding (or the LM head) a stage: three gathers, a third of the
    # stage's each. The first shows whole; the other two run while a third of the pass
    # computes, and show what outlasts it, plus 10 % of what they hide.
    path = scenario_file(tmp_path, devices=2)
    zero1, zero3 = load(path, 1, overlap=True), load(path, 3, overlap=True, slowdown=0.1)
    for k, gather in enumerate(gather_ms(devices=2)):
        f, b = zero1.costs.forward_ms[k], zero1.costs.backward_ms[k]
        assert gather > b > f  # the slow network: each gather outlasts its unit's compute
        assert zero3.costs.forward_ms[k] == pytest.approx(
            f + gather / 3 + 2 * ((gather - f) / 3 + 0.1 * f / 3)
        )
        assert zero3.costs.backward_ms[k] == pytest.approx(
            b + gather / 3 + 2 * ((gather - b) / 3 + 0.1 * b / 3)
        )
    step1 = run_scenario(zero1).report.makespan_ms
    step3 = run_scenario(zero3).report.makespan_ms
    assert step3 > step1


@pytest.mark.parametrize(("devices", "units"), [(2, (3, 3)), (1, (5,))])
def test_every_layer_gathers_on_its_own_and_pays_its_own_latency(tmp_path, devices, units):
    # a 5 us network: a ring all-gather over the 16 replicas pays 15 latencies, once per
    # layer and once for the embedding and LM head together, not once per stage
    path = scenario_file(tmp_path, devices=devices, latency_us=5.0)
    zero1, zero3 = load(path, 1), load(path, 3)
    for k, (gather, count) in enumerate(zip(gather_ms(devices), units, strict=True)):
        latencies = count * (REPLICAS - 1) * 0.005
        added = zero3.costs.forward_ms[k] - zero1.costs.forward_ms[k]
        assert added == pytest.approx(gather + latencies, rel=1e-12)


# Each stage of the two-stage split holds 2 layers of 12 h^2 + 13 h = 12,596,224 weights
# and a 32,000 x 1,024 embedding (the first) or LM head (the last): 57,960,448 weights.
# The single device holds 4 layers and both: 115,920,896.
STAGE_PARAMS, DEVICE_PARAMS = 57_960_448, 115_920_896


@pytest.mark.parametrize(
    ("zero", "pipelined_bytes", "alone_bytes"),
    [
        # 2 bf16 weights + 2 bf16 gradients + 12 optimizer bytes per weight
        (0, 16 * STAGE_PARAMS, 16 * DEVICE_PARAMS),
        # optimizer states over 16 replicas: 2 + 2 + 12/16
        (1, 4.75 * STAGE_PARAMS, 4.75 * DEVICE_PARAMS),
        # under a pipeline the gradients wait unsharded for the step's one reduce-scatter:
        # 2 + 2 + 12/16 as ZeRO-1; alone each backward reduce-scatters: 2 + 2/16 + 12/16
        (2, 4.75 * STAGE_PARAMS, 2.875 * DEVICE_PARAMS),
        # the weights sharded too: 2/16 + 2 + 12/16 under a pipeline, 16/16 alone
        (3, 2.875 * STAGE_PARAMS, 1 * DEVICE_PARAMS),
    ],
)
def test_a_pipeline_keeps_the_gradients_unsharded(tmp_path, zero, pipelined_bytes, alone_bytes):
    pipelined = load(scenario_file(tmp_path, devices=2), zero).accounting.static_memory_bytes
    assert pipelined == (pipelined_bytes, pipelined_bytes)
    alone = load(scenario_file(tmp_path, devices=1), zero).accounting.static_memory_bytes
    assert alone == (alone_bytes,)


def test_zero_leaves_the_activations_alone(tmp_path):
    path = scenario_file(tmp_path, devices=2)
    activations = load(path, 1).costs.activation_memory_bytes
    for zero in (0, 2, 3):
        assert load(path, zero).costs.activation_memory_bytes == activations


def test_one_replica_has_nothing_to_gather(tmp_path):
    path = scenario_file(tmp_path)
    one = ["parallel.data=1", f"model.global_batch={MICROBATCHES}"]
    zero0 = load_scenario(path, [*one, "parallel.zero_stage=0"])
    zero3 = load_scenario(path, [*one, "parallel.zero_stage=3"])
    assert zero3.costs == zero0.costs and zero3.tail_ms == zero0.tail_ms


GOLDEN = Path(__file__).parents[1] / "schedules" / "golden"


def test_torch_unshard_posts_gather_once_each_instead_of_every_pass(tmp_path):
    # torch's lowered interleaved 1F1B (2 ranks, 4 stages of one layer, 4 microbatches)
    # gathers each stage once, at its UNSHARD post: the gathers go there, not to the passes.
    lowered = "torch-interleaved-1f1b_p2_m4_v2.lowered.csv"
    (tmp_path / "lowered.csv").write_text((GOLDEN / lowered).read_text())
    path = scenario_file(tmp_path)
    pipeline = [
        "pipeline.schedule=csv",
        "pipeline.schedule_file=lowered.csv",
        "pipeline.devices=2",
        "pipeline.microbatches=4",
    ]
    zero1 = load_scenario(path, [*pipeline, "parallel.zero_stage=1"])
    zero3 = load_scenario(path, [*pipeline, "parallel.zero_stage=3"])
    assert zero3.costs.forward_ms == zero1.costs.forward_ms
    assert zero3.costs.backward_ms == zero1.costs.backward_ms
    assert zero3.costs.unshard_ms == pytest.approx(gather_ms(devices=4))
    # REDUCE_GRAD: ZeRO-1's all-reduce against ZeRO-3's reduce-scatter, one gather apart
    # (the same sharded optimizer step joins each rank's last REDUCE_GRAD in both)
    pairs = zip(zero1.costs.reduce_grad_ms, zero3.costs.reduce_grad_ms, strict=True)
    less = [a - b for a, b in pairs]
    assert less == pytest.approx(gather_ms(devices=4))
    assert zero3.tail_ms is None and zero1.tail_ms is None
    # one UNSHARD row per stage in the step, each one gather long; none under ZeRO-1
    trace = run_scenario(zero3).trace
    rows = trace.kind == RowKind.UNSHARD
    durations = dict(
        zip(trace.stage[rows].tolist(), (trace.end - trace.start)[rows].tolist(), strict=True)
    )
    assert durations == pytest.approx(dict(enumerate(gather_ms(devices=4))))
    assert not (run_scenario(zero1).trace.kind == RowKind.UNSHARD).any()


@settings(max_examples=200, deadline=None)
@given(
    gather=st.floats(0, 100),
    scatter=st.floats(0, 100),
    compute=st.floats(0, 1000),
    layers=st.integers(1, 128),
)
def test_overlap_exposes_the_larger_of_two_lower_bounds(gather, scatter, compute, layers):
    # A pass can hide neither its first layer's communication nor more of it than the
    # compute of the other L - 1 layers: the layered overlap meets exactly the larger bound.
    comm = gather + scatter
    exposed = exposed_gather_ms(gather, compute, True, layers, scatter)
    bound = max(comm / layers, comm - compute * (layers - 1) / layers)
    assert exposed == pytest.approx(bound, rel=1e-9, abs=1e-9)
    assert exposed <= exposed_gather_ms(gather, compute, False, layers, scatter) + 1e-9
    # more layers to prefetch under, or more compute, never exposes more
    assert exposed_gather_ms(gather, compute, True, layers + 1, scatter) <= exposed + 1e-9
    assert exposed_gather_ms(gather, compute + 1, True, layers, scatter) <= exposed + 1e-9
