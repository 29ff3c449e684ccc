"""Which link each hop of each serving replica crosses.

A serving scenario lays its GPUs out replica after replica, each replica's pipeline
stages in order and each stage's ``tensor`` GPUs side by side (the order Megatron-LM and
vLLM give ranks, data-parallel copies outermost). Stage ``s`` of replica ``r`` then starts
at GPU ``(r * pipeline + s) * tensor`` and sits on node
``(r * pipeline + s) * tensor // gpus_per_node``. Two stages on one node talk over the
intra-node link (NVLink), two on different nodes over the inter-node link (InfiniBand).
So replicas that hold the same model need not cost the same: with 8-GPU nodes and
3-stage replicas of 2 GPUs a stage, replica 0 fills GPUs 0-5 of node 0, and replica 1
takes GPUs 6-7 of node 0 and 0-3 of node 1, so its first hop and its way back cross
nodes.

``hardware.placement`` overrides the layout: one node per pipeline stage (every replica
alike) or one per stage of every replica in turn.
"""

from __future__ import annotations

from pipesim.scenario import derive
from pipesim.scenario.schema import ScenarioError, ScenarioSpec
from pipesim.sim.links import Link


def replica_links(spec: ScenarioSpec, stages: int, source: str) -> list[list[Link]]:
    """For each replica, the link from stage ``s`` to ``s + 1`` for each boundary, then
    (with two stages or more) the link from the last stage back to the first."""
    intra, inter = derive.hardware_of(spec, source).node_links()
    replicas = []
    for nodes in _replica_nodes(spec, stages, source):
        pairs = [(nodes[s], nodes[s + 1]) for s in range(stages - 1)]
        if stages > 1:
            pairs.append((nodes[-1], nodes[0]))
        replicas.append([intra if a == b else inter for a, b in pairs])
    return replicas


def _replica_nodes(spec: ScenarioSpec, stages: int, source: str) -> list[list[int]]:
    """The node of every stage of every replica (module docstring)."""
    hw, t, replicas = spec.hardware, spec.parallel.tensor, spec.serving.replicas
    if hw.placement is not None:
        nodes = list(hw.placement)
        if len(nodes) == stages:
            return [nodes] * replicas
        if len(nodes) != stages * replicas:
            raise ScenarioError(
                f"{source}: hardware.placement: has {len(nodes)} entries, expected {stages} "
                f"(one node per pipeline stage, every replica alike) or {stages * replicas} "
                "(one per stage of each replica in turn)"
            )
        return [nodes[r * stages : (r + 1) * stages] for r in range(replicas)]
    if hw.gpus_per_node is None:
        return [[0] * stages] * replicas
    return [
        [(r * stages + s) * t // hw.gpus_per_node for s in range(stages)] for r in range(replicas)
    ]
