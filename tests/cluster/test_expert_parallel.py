"""Expert parallelism, hand-derived on a tiny MoE model: the dispatch and combine
all-to-alls' bytes and times, node-limited routing, the experts' static memory and
gradient reduction, and the slowest rank's load under uneven routing, capacity drops and
EPLB's redundant experts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cluster.all_to_all import all_to_all_ms
from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.expert_load import expected_load
from pipesim.cluster.expert_parallel import (
    dispatch_tokens,
    expert_data_span,
    expert_group,
    expert_parallel_costs,
    layer_all_to_all,
)
from pipesim.cluster.hardware import gpu_profile, link_profile
from pipesim.cluster.job import BatchSizes, Hardware, Job, ParallelLayout
from pipesim.cluster.job_costs import model_costs, split_layers
from pipesim.cluster.model import TransformerModel, stage_costs
from pipesim.cluster.moe import ExpertSplit, MoE, expert_pass_ms
from pipesim.cluster.parallel import data_parallel_allreduce_ms
from pipesim.cluster.pass_time import TensorParallel, layer_pass_times
from pipesim.cluster.routing import Routing
from pipesim.cluster.transformer import stage_parameters
from pipesim.schedules import get_schedule
from pipesim.sim.links import Link

H100 = gpu_profile("h100-sxm")
NVLINK = Link(5.0, 100.0, "custom")  # 5 us, 100 GB/s: a link given by its numbers
NETWORK = Link(10.0, 25.0, "custom")

# h = 64, s = 16 tokens a sequence, both layers MoE layers of 8 experts, 2 per token
TINY = TransformerModel(
    layers=2,
    hidden=64,
    heads=2,
    seq_len=16,
    vocab=32,
    ffn_hidden=32,
    mlp="gated",
    moe=MoE(experts=8, top_k=2, expert_ffn_hidden=32),
)
# one microbatch's copies on a GPU: T k h dtype = 16 x 2 x 64 x 2 bytes
COPIES = 16 * 2 * 64 * 2


def job(data: int = 2, expert: int = 2, model: TransformerModel = TINY, **parallel) -> Job:
    hardware = Hardware(gpu=H100, intra_node_link=NVLINK, inter_node_link=NETWORK, gpus_per_node=8)
    layout = ParallelLayout(data=data, expert=expert, **parallel)
    return Job(hardware, model, parallel=layout, batch=BatchSizes(4, 1))


def test_ep_2_in_one_node_sends_half_its_copies_over_nvlink():
    j = job(data=2, expert=2)
    assert dispatch_tokens(j) == 16
    span, group = expert_group(j, devices=2)
    assert (span.ranks, span.per_node, span.nodes) == (2, 2, 1)
    a2a = layer_all_to_all(j, span, group)
    assert (a2a.intra_bytes, a2a.inter_bytes) == (COPIES / 2, 0.0) == (2048, 0.0)
    # a link given by its numbers: one latency, then the bytes
    assert a2a.ms() == pytest.approx(0.005 + 2048 / 100e6, rel=1e-12)


def test_ep_16_over_two_nodes_sends_half_over_the_network():
    j = job(data=16, expert=16)
    span, group = expert_group(j, devices=1)
    assert (span.ranks, span.per_node, span.nodes) == (16, 8, 2)
    a2a = layer_all_to_all(j, span, group)
    # 7 of 16 ranks in the node, 8 in the other one
    assert (a2a.intra_bytes, a2a.inter_bytes) == (COPIES * 7 / 16, COPIES * 8 / 16)
    assert a2a.ms() == pytest.approx(0.010 + max(1792 / 100e6, 2048 / 25e6), rel=1e-12)
    # on NCCL's links the same group is priced as all_to_all_ms prices an even spread
    nv, ib = link_profile("nvlink4"), link_profile("ib-ndr")
    real = replace(j, hardware=replace(j.hardware, intra_node_link=nv, inter_node_link=ib))
    span, group = expert_group(real, devices=1)
    assert layer_all_to_all(real, span, group).ms() == all_to_all_ms(COPIES, 16, nv, ib, 8)


def test_node_limited_routing_sends_one_copy_per_node():
    one_node = replace(TINY, moe=replace(TINY.moe, max_nodes_per_token=1))
    j = job(data=16, expert=16, model=one_node)
    a2a = layer_all_to_all(j, *expert_group(j, devices=1))
    # one copy of each token h wide to the other node half the time; 7/8 of the copies
    # forwarded over NVLink inside the node they reach
    assert a2a.inter_bytes == 1 * (1 / 2) * 16 * 64 * 2 == 1024
    assert a2a.intra_bytes == COPIES * 7 / 8
    assert a2a.ms() == pytest.approx(0.010 + max(3584 / 100e6, 1024 / 25e6), rel=1e-12)
    # at most 4 nodes of 2: no fewer copies than top_k = 2 over the network
    four = replace(TINY, moe=replace(TINY.moe, max_nodes_per_token=4))
    j = job(data=16, expert=16, model=four)
    assert layer_all_to_all(j, *expert_group(j, devices=1)).inter_bytes == COPIES / 2


def test_the_all_to_alls_join_the_forward_and_the_input_backward():
    j = job(data=2, expert=2)
    schedule = get_schedule("1f1b", 2, 4, 1)
    derived = model_costs(j, schedule)
    ep = derived.expert_parallel
    one = 0.005 + 2048 / 100e6  # a dispatch (or a combine)
    assert ep.layers == (1, 1)
    assert ep.forward_ms == ep.backward_input_ms == pytest.approx((2 * one, 2 * one))
    partition = split_layers(j, 2, by_time=True)
    bare = stage_costs(TINY, partition, 1, H100, Efficiency(), expert_split=ExpertSplit(2, 1))
    for k in range(2):
        assert derived.costs.forward_ms[k] == pytest.approx(bare.forward_ms[k] + 2 * one)
        assert derived.costs.backward_input_ms[k] == pytest.approx(
            bare.backward_input_ms[k] + 2 * one
        )
        assert derived.costs.backward_weight_ms[k] == bare.backward_weight_ms[k]
    # with recomputation the backward runs the forward's dispatch and combine again
    again = model_costs(job(data=2, expert=2, model=replace(TINY, recompute=True)), schedule)
    assert again.expert_parallel.backward_input_ms == pytest.approx((4 * one, 4 * one))


def test_ep_1_adds_nothing_and_prices_the_experts_as_before():
    schedule = get_schedule("1f1b", 2, 4, 1)
    derived = model_costs(job(data=2, expert=1), schedule)
    assert derived.expert_parallel.forward_ms == (0.0, 0.0)
    assert derived.accounting.transient_bytes == ()
    partition = split_layers(job(data=2, expert=1), 2, by_time=True)
    assert (
        derived.costs.forward_ms == stage_costs(TINY, partition, 1, H100, Efficiency()).forward_ms
    )


def test_ep_deals_a_ranks_copies_to_its_own_experts():
    # EP 4: 2 experts a rank, each of the 32 copies a rank receives 16 rows (8 at EP 1)
    assert TINY.moe.expert_rows(16, 4) == ((16, 2),)
    assert TINY.moe.expert_rows(16) == ((4, 8),)


def test_static_memory_shrinks_by_the_experts_share():
    schedule = get_schedule("1f1b", 1, 4, 1)
    one = model_costs(job(data=4, expert=1), schedule).accounting.static_memory_bytes[0]
    two = model_costs(job(data=4, expert=2), schedule).accounting.static_memory_bytes[0]
    four = model_costs(job(data=4, expert=4), schedule).accounting.static_memory_bytes[0]
    routed = 2 * 8 * TINY.moe.expert_parameters(64, 3)  # both layers' routed experts
    # Adam, no ZeRO: 16 bytes a parameter; EP holds 1/EP of the routed experts
    assert one - two == pytest.approx(16 * routed * (1 - 1 / 2), rel=1e-12)
    assert one - four == pytest.approx(16 * routed * (1 - 1 / 4), rel=1e-12)


def test_expert_gradients_are_reduced_over_each_experts_replicas():
    layout = ParallelLayout(tensor=2, context=2, data=4, expert=4, expert_tensor=1)
    assert layout.expert_data == 2 * 2 * 4 // (4 * 1) == 4
    assert ParallelLayout(data=8, expert=2).expert_data == 4
    j = job(data=8, expert=2)
    assert expert_data_span(j, devices=1).ranks == 4
    schedule = get_schedule("1f1b", 1, 4, 1)
    derived = model_costs(j, schedule)
    params = stage_parameters(TINY, (2,))
    routed = 2 * 8 * TINY.moe.expert_parameters(64, 3)
    dense = data_parallel_allreduce_ms(TINY, (2,), 8, NVLINK, parameters=[params[0] - routed])
    experts = data_parallel_allreduce_ms(TINY, (2,), 4, NVLINK, parameters=[routed / 2])
    reduction = derived.tail_ms[0] - derived.optimizer_ms[0]
    assert reduction == pytest.approx(dense[0] + experts[0], rel=1e-12)


HOT = Routing("hot", hot_fraction=0.5, hot_experts=1)


def test_a_hot_expert_raises_the_expert_part_by_the_max_over_mean():
    hot = replace(TINY.moe, routing=HOT)
    load = expected_load(hot, ranks=4, tokens=16)
    # expert 0 takes half the copies, the other 7 share the rest; rank 0 holds experts 0, 1
    assert load.imbalance == pytest.approx((0.5 + 0.5 / 7) / (1 / 4), rel=1e-12)
    assert load.load_factor == pytest.approx(load.imbalance, rel=1e-12)
    assert load.dropped_fraction == 0.0
    model, tp = replace(TINY, moe=hot), TensorParallel()
    even = layer_pass_times(model, 1, H100, Efficiency(), tp, ExpertSplit(4, 1, 1.0))
    slow = layer_pass_times(model, 1, H100, Efficiency(), tp, ExpertSplit(4, 1, load.load_factor))
    experts = expert_pass_ms(hot, 64, 3, 16, H100, Efficiency(), split=ExpertSplit(4))
    for before, after, part in zip(
        (even.forward_ms, even.backward_input_ms, even.backward_weight_ms),
        (slow.forward_ms, slow.backward_input_ms, slow.backward_weight_ms),
        experts,
        strict=True,
    ):
        assert after - before == pytest.approx((load.load_factor - 1) * part, rel=1e-9)
    # and in a job, the expected load is the one the passes are priced at
    ep = expert_parallel_costs(job(data=4, expert=4, model=model), 1, (2,))
    assert ep.load == load


def test_a_capacity_drops_the_copies_over_it():
    # capacity 1.0: ceil(16 x 2 / 8) = 4 copies an expert from each rank; expert 0 is sent
    # 16 and keeps 4, the others are sent 32 / 14 each and keep them all
    capped = replace(TINY.moe, routing=HOT, capacity_factor=1.0)
    load = expected_load(capped, ranks=4, tokens=16)
    assert load.dropped_fraction == pytest.approx(12 / 32, rel=1e-12)
    rank_0 = 4 * (4 + 16 / 7)  # experts 0 and 1, from all 4 ranks
    assert load.load_factor == pytest.approx(rank_0 / 32, rel=1e-12)
    assert load.load_factor == pytest.approx(load.imbalance * (1 - 12 / 32), rel=1e-12)


def test_redundant_experts_lower_the_slowest_rank():
    contiguous = expected_load(replace(TINY.moe, routing=HOT), ranks=4, tokens=16)
    eplb = replace(TINY.moe, routing=HOT, redundant_experts=4)  # 12 slots, 3 a rank
    balanced = expected_load(eplb, ranks=4, tokens=16)
    assert balanced.load_factor < contiguous.load_factor
    # the hot expert on 5 slots of a tenth each, packed heaviest first: rank 0 holds two
    # of them and one other expert, the fullest of the four ranks
    assert balanced.load_factor == pytest.approx((0.2 + 0.5 / 7) * 4, rel=1e-12)
