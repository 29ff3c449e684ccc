"""Replicas that sit on different links, and the KV cache under an uneven layer split.

Replicas are laid out one after another on the GPUs, so with nodes of 3 GPUs and
replicas of 2 one-GPU stages, replica 0 holds GPUs 0 and 1 (node 0) and replica 1 holds
GPUs 2 (node 0) and 3 (node 1): its stage hop and its sampled tokens' way back cross nodes.
"""

from __future__ import annotations

import math

import pytest
import yaml

from pipesim.cluster.hardware import link_profile
from pipesim.cluster.inference import BatchShape
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving import load_serving, run_serving
from pipesim.serving.deployment import ServeConfig
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from tests.serving.test_build import LLAMA_70B, llama_params_per_layer

INTRA_US, INTER_US = 100, 2000


def write(tmp_path, **sections) -> str:
    data = {
        "schema_version": 1,
        "name": "replicas",
        "pipeline": {"devices": 2},
        "costs": {"prefill_ms": [10, 20], "decode_ms": [1, 2]},
        "decode": {"tokens": 3, "prompt_tokens": 100},
        "hardware": {
            "gpus_per_node": 3,
            "intra_node_link": {"latency_us": INTRA_US},
            "inter_node_link": {"latency_us": INTER_US},
        },
        "serving": {
            "workload": {"arrival": "trace", "trace_file": "two.csv"},
            "replicas": 2,
        },
    }
    data.update(sections)
    (tmp_path / "two.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,3\n0,100,3\n")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_replica_inside_a_node_and_replica_across_two_pay_their_own_links(tmp_path):
    scenario = load_serving(write(tmp_path))
    config = scenario.config
    shape = BatchShape(decode_seqs=1, decode_context=101)
    # replica 0: stage hop and way back inside node 0; replica 1: both cross nodes
    assert [config.replica_config(r).costs.hop_ms(0, shape) for r in (0, 1)] == [0.1, 2.0]
    assert [config.replica_config(r).costs.hop_ms(1, shape) for r in (0, 1)] == [0.1, 2.0]
    r = run_serving(scenario).result.requests
    assert r.replica.tolist() == [0, 1]  # round robin
    # TTFT: 10 + hop + 20; TPOT: way back + 1 + hop + 2
    assert r.ttft_s * 1e3 == pytest.approx([10 + 0.1 + 20, 10 + 2 + 20], rel=1e-12)
    assert r.tpot_s * 1e3 == pytest.approx([0.1 + 1 + 0.1 + 2, 2 + 1 + 2 + 2], rel=1e-12)


def test_replicas_on_alike_links_share_one_cost_model(tmp_path):
    path = write(
        tmp_path,
        hardware={
            "gpus_per_node": 4,
            "intra_node_link": {"latency_us": 100},
            "inter_node_link": {"latency_us": 2000},
        },
    )
    config = load_serving(path).config
    assert config.replica_costs == ()
    assert config.replica_config(1) is config.replica


def test_a_placement_per_replica_stage(tmp_path):
    hardware = {
        "placement": [0, 0, 1, 2],
        "intra_node_link": {"latency_us": INTRA_US},
        "inter_node_link": {"latency_us": INTER_US},
    }
    config = load_serving(write(tmp_path, hardware=hardware)).config
    hops = [config.replica_config(r).costs.hops_ms for r in (0, 1)]
    assert hops == [(0.1, 0.1), (2.0, 2.0)]
    hardware["placement"] = [0, 0, 1]
    with pytest.raises(ScenarioError, match=r"hardware\.placement: has 3 entries, expected 2"):
        load_serving(write(tmp_path, hardware=hardware))


def test_per_replica_costs_must_match_the_replicas():
    two = HandTypedCosts((1.0, 1.0), (1.0, 1.0), 4)
    with pytest.raises(ValueError, match="^replicas: 2 replicas but 1 per-replica"):
        ServeConfig(ReplicaConfig(two), replicas=2, replica_costs=(two,))
    one = HandTypedCosts((1.0,), (1.0,), 4)
    with pytest.raises(ValueError, match="^replicas: replica 1 has 1 stages, the first 2"):
        ServeConfig(ReplicaConfig(two), replicas=2, replica_costs=(two, one))


def kv_tokens_of_stage(layers: int, first: bool, last: bool, tensor: int = 4) -> int:
    """The KV tokens one stage's GPUs can hold: 90% of 80 GiB less its share of the weights,
    over 2 (K and V) x 2 KV heads per rank (8 over tensor 4) x 128 x 2 bytes per layer."""
    params = layers * llama_params_per_layer() + (first + last) * 32000 * 8192
    free = 0.9 * 80 * 2**30 - params * 2 / tensor
    return math.floor(free / (layers * 2 * (8 // tensor) * 128 * 2))


def test_kv_capacity_follows_an_uneven_partition(tmp_path):
    # 30 layers on stage 0, 50 on stage 1: stage 1 has the most weights and the most KV
    # per token, so it limits the cache; an even split (40 + 40) would hold more
    model = {**LLAMA_70B, "partition": [30, 50]}
    hardware = {"gpu": "h100-sxm", "gpus_per_node": 8, "intra_node_link": "nvlink4"}
    path = write(
        tmp_path,
        model=model,
        hardware=hardware,
        parallel={"tensor": 4},
        costs={},
        serving={"workload": {"rate": 1.0, "requests": 1}, "gpu_memory_utilization": 0.9},
    )
    tokens = min(kv_tokens_of_stage(30, True, False), kv_tokens_of_stage(50, False, True))
    assert tokens == kv_tokens_of_stage(50, False, True)
    even = min(kv_tokens_of_stage(40, True, False), kv_tokens_of_stage(40, False, True))
    assert tokens < even
    assert load_serving(path).config.replica.kv_blocks == tokens // 16
    model["partition"] = "even"
    path = write(
        tmp_path,
        model=model,
        hardware=hardware,
        parallel={"tensor": 4},
        costs={},
        serving={"workload": {"rate": 1.0, "requests": 1}, "gpu_memory_utilization": 0.9},
    )
    assert load_serving(path).config.replica.kv_blocks == even // 16


def test_model_costs_per_replica_cross_nodes_where_their_gpus_do(tmp_path):
    # nodes of 6 GPUs, replicas of 2 stages x 2 tensor GPUs: replica 0 holds GPUs 0-3 on
    # node 0; replica 1's stage 0 holds GPUs 4-5 (node 0), its stage 1 GPUs 6-7 (node 1)
    hardware = {
        "gpu": "h100-sxm",
        "gpus_per_node": 6,
        "intra_node_link": "nvlink4",
        "inter_node_link": "ib-ndr",
    }
    model = {**LLAMA_70B, "layers": 8}
    path = write(
        tmp_path,
        model=model,
        hardware=hardware,
        parallel={"tensor": 2},
        costs={},
        serving={"workload": {"rate": 1.0, "requests": 1}, "replicas": 2},
    )
    config = load_serving(path).config
    costs = [config.replica_config(r).costs for r in (0, 1)]
    nvlink, infiniband = link_profile("nvlink4"), link_profile("ib-ndr")
    assert [c.links for c in costs] == [(nvlink,), (infiniband,)]
    assert [c.back_link for c in costs] == [nvlink, infiniband]
    assert costs[0].tensor_link == costs[1].tensor_link  # a stage's tensor GPUs share a node
    shape = BatchShape(prefill_tokens=512, prefill_attention=512 * 512)
    assert costs[0].stage_ms(1, shape) == costs[1].stage_ms(1, shape)
    assert costs[0].hop_ms(0, shape) < costs[1].hop_ms(0, shape)
