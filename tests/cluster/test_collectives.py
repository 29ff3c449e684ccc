"""Collectives as NCCL prices them: closed forms from tuning.cc's constants, by hand.

Times in microseconds are ``latency + bytes / (1e3 * algorithm bandwidth in GB/s)``. The
links are pipesim's achievable profiles: NVLink 4 at 380 GB/s, NDR InfiniBand at 48 GB/s.
"""

from __future__ import annotations

import pytest

from pipesim.cluster.all_to_all import all_to_all_ms
from pipesim.cluster.collectives import (
    Algorithm,
    Collective,
    Group,
    Protocol,
    all_gather_ms,
    all_reduce_ms,
    collective_choice,
    reduce_scatter_ms,
)
from pipesim.cluster.hardware import link_profile
from pipesim.cluster.model import TransformerModel, data_parallel_allreduce_ms, stage_parameters
from pipesim.cluster.parallel import (
    megatron_bucket_params,
    ring_allreduce_ms,
    tensor_parallel_comm_ms,
)
from pipesim.sim.links import Link

NV, IB, NV3 = link_profile("nvlink4"), link_profile("ib-ndr"), link_profile("nvlink3")
NODE = Group(8, NV)  # one HGX H100
TWO_NODES = Group(16, NV, IB, 8)
LL_NODE = 141.0 * 8 / 14  # LL ring all-reduce: Hopper's LL ceiling, times n / 2(n - 1)
NVLS = 380.0 * 480 / 370 * 8 / 14  # NVLS: the ring's bus bandwidth x 480/370, same factor


def choice(kind, nbytes, group):
    c = collective_choice(kind, nbytes, group)
    return c.algorithm, c.protocol, c.ms * 1e3


def test_a_tiny_all_reduce_in_a_node_is_an_ll_ring_of_latency():
    # LL ring: 6.6 base + 14 steps x 0.6 us; the LL tree: 6.8 + 2 x 7 x 0.6 = 15.2
    assert choice(Collective.ALL_REDUCE, 8, NODE) == (
        Algorithm.RING,
        Protocol.LL,
        pytest.approx(6.6 + 14 * 0.6 + 8 / (1e3 * LL_NODE), rel=1e-12),
    )
    # reduce-scatter and all-gather take 7 steps: 6.6 + 7 x 0.6
    for kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        assert choice(kind, 8, NODE)[2] == pytest.approx(10.8 + 8 / (1e3 * 141.0 * 8 / 7))


def test_a_large_all_reduce_in_a_node_is_nvlink_sharp():
    # NVLS: 25 us, and 480 / 370 of the ring's bus bandwidth: ~493 GB/s of bus bandwidth
    # where nccl-tests measure ~480 on 8 H100s (NVIDIA/nccl-tests#212, #290)
    nbytes = 4e9
    assert choice(Collective.ALL_REDUCE, nbytes, NODE) == (
        Algorithm.NVLS,
        Protocol.SIMPLE,
        pytest.approx(25.0 + nbytes / (1e3 * NVLS), rel=1e-12),
    )
    busbw = nbytes / (all_reduce_ms(nbytes, 8, NV) * 1e6) * 14 / 8
    assert busbw == pytest.approx(480, rel=0.03)
    # an all-gather has no NVLS: a Simple ring, 8.4 + 7 x 3.4 us, bus bandwidth the link's
    # 380 GB/s where nccl-tests measure ~370 (NVIDIA/nccl-tests#212)
    assert choice(Collective.ALL_GATHER, nbytes, NODE) == (
        Algorithm.RING,
        Protocol.SIMPLE,
        pytest.approx(8.4 + 7 * 3.4 + nbytes / (1e3 * 380.0 * 8 / 7), rel=1e-12),
    )


def test_the_switch_from_ll_to_nvls_is_where_their_times_cross():
    # 15.0 + B / LL = 25 + B / NVLS; nothing else is faster in between (LL128 ring: 40.6 us
    # of latency; Simple ring: 56.0; trees slower still)
    switch = 1e3 * (25.0 - 15.0) / (1 / LL_NODE - 1 / NVLS)
    assert switch == pytest.approx(1.13e6, rel=0.01)
    assert choice(Collective.ALL_REDUCE, 0.99 * switch, NODE)[:2] == (Algorithm.RING, Protocol.LL)
    assert choice(Collective.ALL_REDUCE, 1.01 * switch, NODE)[:2] == (
        Algorithm.NVLS,
        Protocol.SIMPLE,
    )


def test_on_a100_nodes_ll_gives_way_to_ll128_then_simple():
    # no NVLS on Ampere. LL: 15.0 + B / (87.7 x 8/14); LL128: 14 + 14 x 1.9 = 40.6 and
    # 0.92 x 230 x 8/14; Simple: 8.4 + 14 x 3.4 = 56.0 and 230 x 8/14
    ll, ll128, simple = 87.7 * 8 / 14, 0.92 * 230 * 8 / 14, 230 * 8 / 14
    first = 1e3 * (40.6 - 15.0) / (1 / ll - 1 / ll128)
    second = 1e3 * (56.0 - 40.6) / (1 / ll128 - 1 / simple)
    a100 = Group(8, NV3)
    assert choice(Collective.ALL_REDUCE, 0.99 * first, a100)[:2] == (Algorithm.RING, Protocol.LL)
    for nbytes in (1.01 * first, 0.99 * second):
        assert choice(Collective.ALL_REDUCE, nbytes, a100)[:2] == (Algorithm.RING, Protocol.LL128)
    assert choice(Collective.ALL_REDUCE, 1.01 * second, a100) == (
        Algorithm.RING,
        Protocol.SIMPLE,
        pytest.approx(56.0 + 1.01 * second / (1e3 * simple), rel=1e-12),
    )


def test_across_two_nodes_a_tiny_all_reduce_is_an_ll_tree():
    # tree: 6.8 + 2 (7 x 0.6 + log2(2) x 5.0) = 25.2 us (NCCL's own log estimates 25.23 us
    # for 256 B on H100 nodes, NVIDIA/nccl#1453); its LL bandwidth: 0.92 x 380 / 3.8,
    # capped at 39 GB/s between 2 nodes, halved. The LL ring: 6.6 + 28 x 1.0 + 2 x 2.7 = 40.0
    assert choice(Collective.ALL_REDUCE, 8, TWO_NODES) == (
        Algorithm.TREE,
        Protocol.LL,
        pytest.approx(25.2 + 8 / (1e3 * 39.0 * 0.5), rel=1e-12),
    )


def test_across_two_nodes_a_large_all_reduce_is_a_simple_ring_on_eight_cards():
    # bus bandwidth: 8 cards of 48 GB/s, bounded by NVLink's 380; latency 8.4 + 28 steps x
    # 3.4 (NVLink, above the 3 us network overhead) + 2 crossings x 14.0
    nbytes = 4e9
    assert choice(Collective.ALL_REDUCE, nbytes, TWO_NODES) == (
        Algorithm.RING,
        Protocol.SIMPLE,
        pytest.approx(8.4 + 28 * 3.4 + 2 * 14.0 + nbytes / (1e3 * 380 * 16 / 30), rel=1e-12),
    )


def test_many_nodes_pick_the_tree_for_its_logarithmic_latency():
    # 1024 GPUs, one a node: the ring pays 2046 network steps, the tree 2 log2(1024) = 20
    wide = Group(1024, NV, IB, 1)
    algorithm, protocol, us = choice(Collective.ALL_REDUCE, 1e6, wide)
    assert algorithm == Algorithm.TREE
    ring_latency = 8.4 + 2046 * 14.0
    assert us < ring_latency


def test_all_to_all_closed_forms():
    # in a node: 7 rounds; LL for 8 B (6.6 + 7 x 0.6), Simple for 1 GB (8.4 + 7 x 3.4 and
    # 7/8 of the buffer over NVLink)
    assert all_to_all_ms(8, 8, NV) * 1e3 == pytest.approx(10.8 + 8 * 7 / 8 / (1e3 * 0.5 * 380))
    assert all_to_all_ms(1e9, 8, NV) * 1e3 == pytest.approx(32.2 + 7 / 8 * 1e9 / (1e3 * 380))
    # two nodes: 7 rounds over NVLink and 8 over the network; half the buffer leaves the
    # node over the rank's own 48 GB/s card, the slower of the two streams
    assert all_to_all_ms(1e9, 16, NV, IB, 8) * 1e3 == pytest.approx(
        8.4 + 7 * 3.4 + 8 * 14.0 + 0.5e9 / (1e3 * 48)
    )
    assert all_to_all_ms(1e9, 1, NV) == 0.0
    # links given by their numbers: one latency and the slower stream
    plain = Link(latency_us=5.0, bandwidth_gbps=10.0)
    assert all_to_all_ms(1e9, 8, plain) == pytest.approx(0.005 + 7 / 8 * 1e9 / 10e6)


def test_links_given_by_numbers_keep_the_plain_ring():
    link = Link(latency_us=2.0, bandwidth_gbps=10.0)
    ring = 14 * 0.002 + 14 / 8 * 1e6 / 1e7
    assert all_reduce_ms(1e6, 8, link) == pytest.approx(ring)
    assert reduce_scatter_ms(1e6, 8, link) == all_gather_ms(1e6, 8, link) == pytest.approx(ring / 2)
    assert collective_choice(Collective.ALL_REDUCE, 1e6, Group(8, link)).algorithm == "plain"
    # an ideal link costs nothing, and neither does a group of one
    assert all_reduce_ms(1e9, 8, Link()) == 0.0
    assert all_reduce_ms(1e9, 1, NV) == 0.0


def test_a_group_must_fit_its_nodes():
    with pytest.raises(ValueError, match="ranks_per_node must divide ranks"):
        Group(12, NV, IB, 8)
    with pytest.raises(ValueError, match="inter-node link"):
        Group(16, NV, None, 8)


def test_sequence_parallelism_pays_two_collectives_per_all_reduce():
    # a tiny activation: each reduce-scatter and all-gather an LL ring of 6.6 + 7 x 0.6 us,
    # against one LL all-reduce of 6.6 + 14 x 0.6
    tiny = 8.0
    plain = tensor_parallel_comm_ms(tiny, 8, NV)
    split = tensor_parallel_comm_ms(tiny, 8, NV, sequence_parallel=True)
    assert plain * 1e3 == pytest.approx(2 * 15.0, abs=1e-3)
    assert split * 1e3 == pytest.approx(2 * (10.8 + 10.8), abs=1e-3)
    assert ring_allreduce_ms(tiny, 8, NV) == all_reduce_ms(tiny, 8, NV)


def test_a_network_link_alone_is_one_gpu_a_node():
    # the ring over the network link alone runs across 2 nodes, one GPU each: LL latency
    # 6.6 + 2 x 5.0 (the network's tree latency, every step exposed)
    assert ring_allreduce_ms(8, 2, IB) * 1e3 == pytest.approx(
        6.6 + 2 * 5.0 + 8 / (1e3 * min(39.0, 24.0)), rel=1e-12
    )


MODEL = TransformerModel(layers=4, hidden=1024, heads=8, seq_len=512, vocab=32000)


def test_gradients_are_reduced_in_buckets_each_paying_its_latency():
    link = Link(latency_us=5.0, bandwidth_gbps=10.0)
    params = stage_parameters(MODEL, (2, 2))  # 57,960,448 each
    bucket = 10_000_000  # six full buckets and a rest: seven all-reduces
    times = data_parallel_allreduce_ms(MODEL, (2, 2), 4, link, bucket_params=bucket)
    for p, t in zip(params, times, strict=True):
        assert p // bucket == 5 and p % bucket > 0
        bytes_ms = 2 * 3 / 4 * p * 2 / 10e6
        assert t == pytest.approx(6 * 6 * 0.005 + bytes_ms, rel=1e-12)
    # Megatron-LM's default: max(40M, 1M x dp) parameters; 57.96M is two buckets
    assert megatron_bucket_params(16) == 40e6 and megatron_bucket_params(64) == 64e6
    default = data_parallel_allreduce_ms(MODEL, (2, 2), 4, link)
    assert default[0] == pytest.approx(2 * 6 * 0.005 + 2 * 3 / 4 * params[0] * 2 / 10e6)
    with pytest.raises(ValueError, match="bucket_params"):
        data_parallel_allreduce_ms(MODEL, (2, 2), 4, link, bucket_params=-1)


def test_a_broadcast_is_a_pipelined_chain():
    # one step's latency (6.6 + 0.6 for LL in a node) and the buffer once at the bus
    # bandwidth: LL's 141 GB/s ceiling for 8 B, the Simple link's 380 GB/s for 1 GB
    assert choice(Collective.BROADCAST, 8, NODE) == (
        Algorithm.RING,
        Protocol.LL,
        pytest.approx(7.2 + 8 / (1e3 * 141.0), rel=1e-12),
    )
    assert choice(Collective.BROADCAST, 1e9, NODE)[2] == pytest.approx(
        8.4 + 3.4 + 1e9 / (1e3 * 380.0), rel=1e-12
    )
