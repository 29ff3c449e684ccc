"""What an iteration costs when the costs come from the model: rooflines and link times.

A serving iteration is one batch's pass through a replica's stages. On each stage it
costs the roofline of its work (``pipesim.cluster.inference.stage_iteration_ms``: the
prefill chunks compute bound, the decode steps bound by the weights and KV entries they
read); between stages, the link time of the batch's hidden states; and after the last
stage, the way back: the sampled token ids going to the first stage, where the batch's
next iteration starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cluster.hardware import GpuProfile
from pipesim.cluster.inference import (
    TOKEN_ID_BYTES,
    BatchShape,
    ServingCosts,
    stage_boundary_bytes,
    stage_iteration_ms,
)
from pipesim.cluster.model import Efficiency, TransformerModel
from pipesim.sim.links import Link


@dataclass(frozen=True, slots=True)
class ModelIterationCosts:
    """Iteration costs of a replica from its model: each stage's roofline time for the
    batch (``stage_iteration_ms``), each hop's link time for its hidden states
    (``links``, one per stage boundary), and the way back over ``back_link``: the last
    stage sends the token ids it sampled (``TOKEN_ID_BYTES`` each) to the first, as
    vLLM's last pipeline rank returns its sampler output to the driver. ``back_link``
    None: the way back is free (one stage). A mixture-of-experts model's routed experts
    are spread over ``expert`` of each stage's ``tensor`` GPUs
    (``pipesim.cluster.inference_moe``).

    The LM head runs for every prompt that finishes in the iteration; the batch shape does
    not say how many do, so it is estimated as ``prefill_tokens**2 / prefill_attention``
    (exact for one whole prompt, or several of one length; a small term next to the
    layers' work in any case). The same estimate counts the tokens sampled.
    """

    model: TransformerModel
    partition: tuple[int, ...]
    gpu: GpuProfile
    tensor: int
    tensor_link: Link | None
    efficiency: Efficiency
    links: tuple[Link, ...]
    back_link: Link | None = None
    serving_costs: ServingCosts | None = None  # None: the calibrated ServingCosts()
    expert: int = 1  # expert-parallel ranks among each stage's tensor GPUs

    @property
    def stages(self) -> int:
        return len(self.partition)

    def stage_ms(self, stage: int, shape: BatchShape) -> float:
        emitting = _prompts_done(shape)
        return stage_iteration_ms(
            self.model,
            self.partition[stage],
            self.gpu,
            shape,
            first=stage == 0,
            last=stage == self.stages - 1,
            tensor=self.tensor,
            tensor_link=self.tensor_link,
            efficiency=self.efficiency,
            emitting=emitting,
            serving=self.serving_costs,
            start=sum(self.partition[:stage]),
            expert=self.expert,
        )

    def hop_ms(self, stage: int, shape: BatchShape) -> float:
        if stage < len(self.links):
            return self.links[stage].transfer_ms(stage_boundary_bytes(self.model, shape))
        if self.back_link is None:
            return 0.0
        sampled = shape.decode_seqs + _prompts_done(shape)
        return self.back_link.transfer_ms(float(sampled * TOKEN_ID_BYTES))


def _prompts_done(shape: BatchShape) -> int:
    """Prompts estimated to finish in the batch (``ModelIterationCosts``)."""
    if shape.prefill_tokens and shape.prefill_attention:
        return max(1, round(shape.prefill_tokens**2 / shape.prefill_attention))
    return 0
