"""The network above the node: where each group's ranks sit in nodes and pods, the levels
of a data-parallel all-reduce, the slower link above an oversubscribed pod, and a
16,384-GPU data-parallel step that grows with the oversubscription by the hand-derived
amount."""

from __future__ import annotations

import pytest

from pipesim import run_scenario
from pipesim.cluster.fabric import (
    Fabric,
    FabricError,
    GroupSpan,
    allreduce_levels,
    check_order,
    crossings,
    group_span,
    pipeline_pods,
    rank_layout,
)
from pipesim.scenario.build import build_scenario, parse_spec
from pipesim.sim.links import Link

NDR = Link(14.0, 48.0, "ib-ndr/achievable")  # pipesim.cluster.hardware's ib-ndr row
NVLINK = Link(3.4, 380.0, "nvlink4/achievable")


def test_the_default_order_puts_tensor_ranks_innermost_then_data_then_pipeline():
    layout = rank_layout(Fabric(), {"tp": 8, "dp": 4, "pp": 2}, 8)
    assert layout.strides == {"tp": 1, "cp": 8, "ep": 8, "dp": 8, "pp": 32}
    assert layout.gpus == 64 and layout.nodes == 8


def test_a_data_parallel_group_of_16k_gpus_spans_every_pod_one_rank_per_node():
    # TP8 x DP2048 on nodes of 8 in DGX SuperPOD-sized pods of 32 nodes: 2048 nodes, 64 pods
    layout = rank_layout(Fabric(nodes_per_pod=32, oversubscription=7), {"tp": 8, "dp": 2048}, 8)
    assert group_span(layout, "dp") == GroupSpan("dp", 2048, 1, 32, 64, 2048)
    assert group_span(layout, "tp") == GroupSpan("tp", 8, 8, 1, 1, 1)


def test_another_order_moves_the_data_parallel_group_to_other_nodes():
    # tp-pp-dp: pipeline stages next to each other, data replicas 8 * 4 = 32 ranks apart
    fabric = Fabric(nodes_per_pod=2, order="tp-pp-dp")
    layout = rank_layout(fabric, {"tp": 8, "pp": 4, "dp": 16}, 8)
    assert layout.strides["dp"] == 32 and layout.strides["pp"] == 8
    # ranks 0, 32, ..., 480: nodes 0, 4, ..., 60, each node its own pod of the 32
    assert group_span(layout, "dp") == GroupSpan("dp", 16, 1, 1, 16, 16)
    assert pipeline_pods(layout, 4) == (0, 0, 1, 1)  # nodes 0, 1, 2, 3


def test_replicas_that_share_a_node_reduce_there_first():
    # TP2 on nodes of 8: 4 replicas a node; 16 replicas over 4 nodes in pods of 2 nodes
    layout = rank_layout(Fabric(nodes_per_pod=2, oversubscription=4), {"tp": 2, "dp": 16}, 8)
    span = group_span(layout, "dp")
    assert span == GroupSpan("dp", 16, 4, 2, 2, 4)
    levels = allreduce_levels(span, NVLINK, NDR, layout.fabric)
    assert [(lv.ranks, lv.share, lv.crosses_pods) for lv in levels] == [
        (4, 1, False),
        (2, 4, False),
        (2, 8, True),
    ]
    assert levels[0].link == NVLINK and levels[1].link == NDR
    assert levels[2].link.bandwidth_gbps == 12.0 and levels[2].link.latency_us == 14.0


def test_a_group_inside_one_node_is_one_ring_on_nvlink():
    layout = rank_layout(Fabric(nodes_per_pod=1, oversubscription=7), {"tp": 2, "dp": 4}, 8)
    levels = allreduce_levels(group_span(layout, "dp"), NVLINK, NDR, layout.fabric)
    assert [(lv.ranks, lv.link, lv.share) for lv in levels] == [(4, NVLINK, 1)]


def test_crossings_name_the_group_the_pods_and_the_rate():
    layout = rank_layout(
        Fabric("rail-optimized", 2, 7.0), {"tp": 8, "dp": 4, "pp": 4}, 8
    )  # pipeline device d on node 4d: every hop leaves its pod
    assert crossings(layout, 4) == [
        "data-parallel gradient reduction crosses 2 pods (4 nodes, rail-optimized) at 1/7 "
        "bandwidth",
        "3 of 3 pipeline hops cross pods at 1/7 bandwidth",
    ]
    assert crossings(rank_layout(Fabric(nodes_per_pod=16), {"tp": 8, "dp": 4, "pp": 4}, 8), 4) == []


@pytest.mark.parametrize(
    ("fabric", "degrees", "field", "words"),
    [
        (Fabric(order="tp-pp"), {"dp": 2}, "order", "'tp-pp' leaves out dp"),
        (Fabric(nodes_per_pod=3), {"dp": 32}, "nodes_per_pod", "4 nodes (32 GPUs, 8 per node)"),
    ],
)
def test_a_layout_that_does_not_fit_names_the_field(fabric, degrees, field, words):
    with pytest.raises(FabricError) as caught:
        rank_layout(fabric, degrees, 8)
    assert caught.value.field == f"hardware.topology.{field}"
    assert words in caught.value.message


def test_a_job_smaller_than_a_pod_sits_in_one():
    layout = rank_layout(Fabric(nodes_per_pod=32, oversubscription=7), {"dp": 24}, 8)
    assert group_span(layout, "dp").pods == 1


def test_orders_take_megatron_names_only_once():
    assert check_order("tp-cp-ep-dp-pp") == ("tp", "cp", "ep", "dp", "pp")
    with pytest.raises(ValueError, match="unknown dimension 'mp'"):
        check_order("tp-mp-dp")
    with pytest.raises(ValueError, match="'tp' appears twice"):
        check_order("tp-dp-tp-pp")
    with pytest.raises(ValueError, match="oversubscription must be >= 1"):
        Fabric(oversubscription=0.5)


# -- a 16k-GPU data-parallel step --------------------------------------------------------

# A 6.7B plain GPT (32 layers of hidden 4096, vocab 32000, untied): each stage holds
# 32 (12 h^2 + 13 h) + 2 V h = 6,706,298,880 weights (pipesim.cluster.transformer,
# layer_parameters), a GPU of a TP8 group 1/8 of them in bf16: 1,676,574,720 bytes.
GRADIENT_BYTES = (32 * (12 * 4096**2 + 13 * 4096) + 2 * 32000 * 4096) / 8 * 2
DATA, PODS, NODES_PER_POD = 2048, 64, 32


def _job(topology: dict | None) -> dict:
    hardware = {
        "gpu": "h100-sxm",
        "gpus_per_node": 8,
        # NVLink 4's and NDR's achievable numbers, given as numbers: such links keep the
        # plain ring (pipesim.cluster.collectives), so the closed forms below are exact;
        # NCCL's algorithm choice on named links is tested in test_collectives.py
        "intra_node_link": {"latency_us": 3.4, "bandwidth_gbps": 380.0},
        "inter_node_link": {"latency_us": 14.0, "bandwidth_gbps": 48.0},
    }
    if topology is not None:
        hardware["topology"] = topology
    return {
        "schema_version": 1,
        "name": "16k",
        "pipeline": {"schedule": "gpipe", "devices": 1},
        "model": {
            "layers": 32,
            "hidden": 4096,
            "heads": 32,
            "seq_len": 2048,
            "vocab": 32000,
            "global_batch": DATA,
        },
        "parallel": {"tensor": 8, "data": DATA},
        "hardware": hardware,
    }


def _step_ms(topology: dict | None) -> float:
    spec = parse_spec(_job(topology), "16k.yaml")
    return run_scenario(build_scenario(spec, "16k.yaml")).report.step_time_ms


def test_the_16k_gpu_step_grows_with_the_oversubscription_by_the_cross_pod_bytes():
    # One rank per node: a ring over the pod's 32 nodes on NDR, then each GPU's 1/32 share
    # all-reduced across the 64 pods at 48 / r GB/s. Only that last ring's bandwidth term
    # depends on r: 2 (P - 1) / P * (B / 32) / (48 GB/s / r), so from r = 1 to r = 7 the
    # exposed reduction (no overlap, one stage: all of it) grows by 6 times it at 48 GB/s.
    at_full_rate_ms = 2 * (PODS - 1) / PODS * (GRADIENT_BYTES / NODES_PER_POD) / 48e6
    flat = _step_ms({"kind": "rail-optimized", "nodes_per_pod": 32, "oversubscription": 1})
    for ratio in (2, 7):
        step = _step_ms({"kind": "rail-optimized", "nodes_per_pod": 32, "oversubscription": ratio})
        assert step - flat == pytest.approx((ratio - 1) * at_full_rate_ms, rel=1e-9)
    assert at_full_rate_ms == pytest.approx(2.148930, rel=1e-6)


def test_pods_without_oversubscription_save_the_ring_s_latency_steps():
    # The same bytes cross the network either way (2 (N-1)/N B over one NIC per GPU); a
    # flat ring over 2048 nodes pays 2 * 2047 latencies of 14 us, the two levels
    # 2 * 31 + 2 * 63.
    one_network = _step_ms(None)
    in_pods = _step_ms({"nodes_per_pod": 32})
    assert one_network - in_pods == pytest.approx((2 * 2047 - 2 * 31 - 2 * 63) * 0.014, rel=1e-6)


def _topology(topology: dict, order_devices: int = 4):
    data = _job(topology)
    data["pipeline"] = {"schedule": "1f1b", "devices": order_devices, "microbatches": 8}
    data["parallel"] = {"tensor": 8, "data": 4}
    data["model"]["global_batch"] = 32
    return build_scenario(parse_spec(data, "pp.yaml"), "pp.yaml").topology


def test_pipeline_neighbours_in_different_pods_talk_over_the_slower_link():
    # TP8 x DP4 x PP4 on nodes of 8: pipeline device d on node 4d, pods of 2 nodes
    topology = _topology({"nodes_per_pod": 2, "oversubscription": 4})
    assert topology.link(0, 1).bandwidth_gbps == 12.0
    assert topology.link(2, 1).bandwidth_gbps == 12.0
    one_pod = _topology({"nodes_per_pod": 16, "oversubscription": 4})
    assert one_pod.link(0, 1).bandwidth_gbps == 48.0
    # tp-pp-dp: stages on nodes 0, 1, 2, 3, pods 0, 0, 1, 1: only the middle hop leaves
    order = _topology({"nodes_per_pod": 2, "oversubscription": 4, "order": "tp-pp-dp"})
    assert order.link(0, 1).bandwidth_gbps == 48.0
    assert order.link(1, 2).bandwidth_gbps == 12.0
    assert order.link(2, 3).bandwidth_gbps == 48.0


def test_gradients_reduce_over_the_context_ranks_too():
    # Megatron-LM reduces gradients over its data-parallel group with context parallelism:
    # TP2 x CP2 x DP4 on nodes of 8 (tp-cp-dp-pp): ranks 0, 2, 4, ..., 14 over two nodes
    layout = rank_layout(
        Fabric(nodes_per_pod=1, order="tp-cp-dp-pp"), {"tp": 2, "cp": 2, "dp": 4}, 8
    )
    assert group_span(layout, "cp", "dp") == GroupSpan("cp-dp", 8, 4, 1, 2, 2)
    assert group_span(layout, "dp") == GroupSpan("dp", 4, 2, 1, 2, 2)
    assert group_span(layout, "cp") == GroupSpan("cp", 2, 2, 1, 1, 1)
