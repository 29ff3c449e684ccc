"""Link and GPU profiles, and topology building."""

from __future__ import annotations

import math

import pytest

from pipesim.cluster.hardware import (
    GPU_PROFILES,
    LINK_PROFILES,
    UnknownProfileError,
    build_topology,
    gpu_profile,
    link_profile,
)
from pipesim.sim.links import IDEAL, Link, Topology

# The table, written out again by hand: (name, variant, latency_us, GB/s per direction).
EXPECTED_LINKS = [
    ("nvlink3", "line-rate", 0.6, 300.0),
    ("nvlink3", "achievable", 3.4, 230.0),
    ("nvlink4", "line-rate", 0.6, 450.0),
    ("nvlink4", "achievable", 3.4, 380.0),
    ("nvlink4-h800", "line-rate", 0.6, 200.0),
    ("nvlink4-h800", "achievable", 3.4, 168.9),
    ("nvlink5", "line-rate", 0.6, 900.0),
    ("nvlink5", "achievable", 3.4, 760.0),
    ("pcie4", "line-rate", 1.0, 31.5),
    ("pcie4", "achievable", 5.7, 26.3),
    ("pcie5", "line-rate", 1.0, 63.0),
    ("pcie5", "achievable", 5.7, 52.8),
    ("ib-hdr", "line-rate", 2.7, 25.0),
    ("ib-hdr", "achievable", 14.0, 24.0),
    ("ib-ndr", "line-rate", 2.7, 50.0),
    ("ib-ndr", "achievable", 14.0, 48.0),
    ("roce-400", "line-rate", 2.7, 50.0),
    ("roce-400", "achievable", 14.0, 48.0),
]

MESSAGE_BYTES = 64 * 2**20  # one 64 MiB activation


def test_every_profile_is_listed_once():
    listed = {(name, variant) for name, variant, _, _ in EXPECTED_LINKS}
    table = {(name, variant) for name, row in LINK_PROFILES.items() for variant in row}
    assert listed == table
    assert len(listed) == len(EXPECTED_LINKS)


@pytest.mark.parametrize(("name", "variant", "latency_us", "gbps"), EXPECTED_LINKS)
def test_profile_transfer_is_latency_plus_size_over_bandwidth(name, variant, latency_us, gbps):
    link = link_profile(name, variant)
    assert (link.latency_us, link.bandwidth_gbps, link.name) == (
        latency_us,
        gbps,
        f"{name}/{variant}",
    )
    expected_ms = latency_us / 1e3 + MESSAGE_BYTES / (gbps * 1e9) * 1e3
    assert link.transfer_ms(MESSAGE_BYTES) == pytest.approx(expected_ms, rel=1e-12)


def test_achievable_never_beats_line_rate():
    for name in LINK_PROFILES:
        line, real = link_profile(name, "line-rate"), link_profile(name, "achievable")
        assert real.bandwidth_gbps < line.bandwidth_gbps
        assert real.latency_us > line.latency_us


def test_default_variant_is_achievable():
    assert link_profile("nvlink4") == link_profile("nvlink4", "achievable")


def test_unknown_link_names_the_allowed_ones():
    with pytest.raises(UnknownProfileError) as info:
        link_profile("nvlink9")
    message = str(info.value)
    assert "'nvlink9'" in message
    for name in LINK_PROFILES:
        assert name in message
    with pytest.raises(UnknownProfileError, match="allowed: line-rate, achievable"):
        link_profile("nvlink4", "peak")


def test_gpu_profiles():
    assert {
        name: (g.peak_tflops, g.memory_bandwidth_gbps, g.memory_bytes)
        for name, g in GPU_PROFILES.items()
    } == {
        "h100-sxm": (989.4, 3350.0, 80 * 2**30),
        "h100-pcie": (756.0, 2000.0, 80 * 2**30),
        "a100-sxm-40gb": (312.0, 1555.0, 40 * 2**30),
        "a100-sxm-80gb": (312.0, 2039.0, 80 * 2**30),
        "h200": (989.4, 4800.0, 141 * 2**30),
        "b200": (2250.0, 8000.0, 180 * 2**30),
        "l40s": (362.0, 864.0, 48 * 2**30),
        "h800": (989.4, 3350.0, 80 * 2**30),
    }
    assert gpu_profile("h100-sxm").name == "h100-sxm"
    with pytest.raises(UnknownProfileError, match="allowed: h100-sxm, h800, h100-pcie"):
        gpu_profile("h900")


# The measurements, written out again: SMs, bf16 MAMF, streaming GB/s (0.92 of the data
# sheet), FP8 peak and FP8 MAMF; the derived rows use H100 SXM's ratios 792.1 / 989.4 and
# 1453.4 / 1978.9 (h100-pcie: 0.80059 x 756 = 605.2, 0.73445 x 1513 = 1111.2; l40s:
# 0.80059 x 362 = 289.8, 0.73445 x 733 = 538.4).
EXPECTED_MEASURED = {
    "h100-sxm": (132, 792.1, 3082.0, 1978.9, 1453.4),
    "h800": (132, 792.1, 3082.0, 1978.9, 1453.4),
    "h100-pcie": (114, 605.2, 1840.0, 1513.0, 1111.2),
    "a100-sxm-40gb": (108, 267.9, 1430.6, None, None),
    "a100-sxm-80gb": (108, 267.9, 1875.9, None, None),
    "h200": (132, 794.5, 4416.0, 1978.9, 1453.4),
    "b200": (148, 1745.0, 7360.0, 4500.0, 3432.5),
    "l40s": (142, 289.8, 794.9, 733.0, 538.4),
}


def test_gpu_measurements():
    assert {
        name: (
            g.sm_count,
            g.gemm_tflops,
            g.bandwidth_gbps,
            g.fp8_peak_tflops,
            g.fp8_gemm_tflops,
        )
        for name, g in GPU_PROFILES.items()
    } == EXPECTED_MEASURED
    assert {g.kernel_launch_us for g in GPU_PROFILES.values()} == {2.0}
    assert not gpu_profile("a100-sxm-80gb").has_fp8 and gpu_profile("h800").has_fp8


def test_a_hand_made_profile_falls_back_to_its_data_sheet():
    from pipesim.cluster.hardware import GpuProfile

    toy = GpuProfile("toy", 100.0, 1000.0, 2**30)
    assert (toy.gemm_tflops, toy.bandwidth_gbps, toy.fp8_gemm_tflops) == (100.0, 1000.0, None)


# -- topology --------------------------------------------------------------------------------

NV = link_profile("nvlink4")
IB = link_profile("ib-ndr")


def test_existing_topology_api_is_unchanged():
    topo = Topology(devices=2, default=Link(1.0, 10.0, "x"))
    assert topo.link(0, 1) == Link(1.0, 10.0, "x")
    assert topo.link(1, 1) is IDEAL
    assert topo.channel(0, 1) == "0->1"
    assert topo.comm_overlap is True


def test_nodes_by_consecutive_devices():
    topo = build_topology(4, 2, NV, IB)
    intra = {(0, 1), (1, 0), (2, 3), (3, 2)}
    for src in range(4):
        for dst in range(4):
            expected = IDEAL if src == dst else NV if (src, dst) in intra else IB
            assert topo.link(src, dst) == expected, (src, dst)
    assert topo.devices == 4


def test_boundary_between_nodes_uses_the_inter_node_link():
    topo = build_topology(8, 4, "nvlink4", "ib-hdr")
    nbytes = 2**24
    assert topo.link(3, 4).transfer_ms(nbytes) == pytest.approx(14.0e-3 + nbytes / 24e6)
    assert topo.link(2, 3).transfer_ms(nbytes) == pytest.approx(3.4e-3 + nbytes / 380e6)
    assert topo.link(4, 3) == link_profile("ib-hdr")


def test_profile_names_take_the_variant():
    topo = build_topology(2, 1, "nvlink4", "ib-ndr", variant="line-rate")
    assert topo.link(0, 1) == link_profile("ib-ndr", "line-rate")


def test_explicit_placement_overrides_consecutive_nodes():
    topo = build_topology(4, 2, NV, IB, placement=[0, 1, 0, 1])
    assert topo.link(0, 2) == NV and topo.link(1, 3) == NV
    assert topo.link(0, 1) == IB and topo.link(2, 3) == IB


def test_placement_is_checked():
    with pytest.raises(ValueError, match="3 entries, expected 4"):
        build_topology(4, 2, NV, IB, placement=[0, 1, 0])
    with pytest.raises(ValueError, match="3 devices on node 0"):
        build_topology(4, 2, NV, IB, placement=[0, 0, 0, 1])


def test_comm_overlap_is_passed_through():
    assert build_topology(2, 2, NV, IB, comm_overlap=False).comm_overlap is False


def test_pcie_switch_groups_share_one_upstream_channel():
    pcie = link_profile("pcie4")
    topo = build_topology(8, 8, pcie, IB, pcie_switch_share=4)
    # Within a group: peer to peer through the switch, own queue.
    assert topo.channel(0, 1) == "0->1"
    assert topo.channel(5, 7) == "5->7"
    # Leaving a group: the source group's upstream link.
    assert topo.channel(3, 4) == "node0/pcie0/up"
    assert topo.channel(0, 7) == "node0/pcie0/up"
    assert topo.channel(4, 3) == "node0/pcie1/up"
    expected = {
        (s, d): f"node0/pcie{s // 4}/up" for s in range(8) for d in range(8) if s // 4 != d // 4
    }
    assert topo.channels == expected
    assert topo.link(3, 4) == pcie


def test_pcie_groups_are_per_node_and_skip_inter_node_pairs():
    topo = build_topology(8, 4, "pcie5", "roce-400", pcie_switch_share=2)
    assert topo.channel(1, 2) == "node0/pcie0/up"
    assert topo.channel(5, 6) == "node1/pcie0/up"
    assert topo.channel(6, 5) == "node1/pcie1/up"
    assert topo.channel(3, 4) == "3->4"  # different nodes
    assert topo.channel(0, 1) == "0->1"  # same group
    assert len(topo.channels) == 2 * (4 * 4 - 2 * 2 * 2)


def test_pcie_groups_follow_placement_order():
    # Node 0 holds devices 0, 2, 4, 6 (local indices 0..3): groups {0, 2} and {4, 6}.
    topo = build_topology(8, 4, "pcie4", "ib-ndr", placement=[0, 1] * 4, pcie_switch_share=2)
    assert topo.channel(0, 2) == "0->2"
    assert topo.channel(2, 4) == "node0/pcie0/up"
    assert topo.channel(7, 1) == "node1/pcie1/up"


def test_only_the_pairs_that_talk_are_described():
    pcie = link_profile("pcie4")
    ring = [(d, d + 1) for d in range(7)] + [(d + 1, d) for d in range(7)]
    topo = build_topology(8, 8, pcie, IB, pcie_switch_share=4, pairs=ring)
    full = build_topology(8, 8, pcie, IB, pcie_switch_share=4)
    assert set(topo.links) == set(ring)
    assert topo.channels == {(3, 4): "node0/pcie0/up", (4, 3): "node0/pcie1/up"}
    for src, dst in ring:
        assert topo.link(src, dst) == full.link(src, dst)
        assert topo.channel(src, dst) == full.channel(src, dst)


def test_a_large_cluster_costs_what_its_pipeline_uses():
    devices = 100_000  # every pair described would be 10^10 entries
    pairs = [(d, d + 1) for d in range(devices - 1)]
    topo = build_topology(devices, devices, NV, IB, pairs=pairs)
    assert len(topo.links) == devices - 1 and topo.link(0, 1) == NV


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="pcie_switch_share"):
        build_topology(4, 4, NV, IB, pcie_switch_share=0)
    with pytest.raises(ValueError, match="gpus_per_node"):
        build_topology(4, 0, NV, IB)


def test_ideal_link_costs_nothing():
    assert IDEAL.transfer_ms(1e12) == 0.0
    assert Link(latency_us=5.0).transfer_ms(1e12) == 5e-3
    assert math.isinf(IDEAL.bandwidth_gbps)
