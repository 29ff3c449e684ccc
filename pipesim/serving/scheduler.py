"""Replica schedulers: the policy that forms each iteration's batch on a virtual engine.

A replica runs one scheduler per pipeline stage (vLLM's virtual engines). The serving
engine hands each scheduler the requests routed to it and, in a loop, asks it for a
batch, books the batch's passage through the replica's stages, and tells the scheduler
when the batch started and when it left the last stage. Everything else (which requests
join a batch, how the KV cache is shared, when to preempt) is the scheduler's own.

A scheduler is any object with the methods of :class:`ReplicaScheduler`; ``SCHEDULERS``
maps the names a scenario's ``serving.scheduler`` may give to a factory
``(config, recorder, replica, engine) -> ReplicaScheduler``. vLLM v0's policy
(``pipesim.serving.vllm_scheduler``) is ``vllm``, the default. A new policy is one module
with its class plus one line here.

A scheduler writes each request's times into the :class:`~pipesim.serving.recorder.Recorder`
it is given: ``first_scheduled_s[rid]`` when its first iteration starts on the first stage,
``first_token_s[rid]`` and ``finish_s[rid]`` when its first and last tokens leave the last
stage, ``gap(seconds, count)`` and ``longest_gap(rid, seconds)`` for the inter-token
gaps, ``preemptions[rid]``. The engine records iterations, the timeline and rejections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pipesim.cluster.inference import BatchShape
from pipesim.serving.recorder import Recorder
from pipesim.serving.replica import ReplicaConfig
from pipesim.serving.vllm_scheduler import VllmScheduler


class IterationBatch(Protocol):
    """One iteration's batch as the engine sees it: how many sequences, and its shape
    (what the cost model prices)."""

    @property
    def size(self) -> int: ...

    def shape(self) -> BatchShape: ...


class ReplicaScheduler(Protocol):
    """What the serving engine asks of one virtual engine's scheduler (module docstring).

    ``unfinished``: requests it holds and has not finished (the engine routes a request to
    the virtual engine with the fewest); ``running_seqs`` and ``kv_blocks_used``: its state
    for the timeline. ``complete`` returns how many requests finished with that batch.
    """

    @property
    def unfinished(self) -> int: ...

    @property
    def running_seqs(self) -> int: ...

    @property
    def kv_blocks_used(self) -> int: ...

    def add(self, rid: int, prompt_tokens: int, output_tokens: int) -> None: ...

    def schedule(self) -> IterationBatch | None: ...

    def started(self, batch: IterationBatch, start_s: float, exit_s: float) -> None: ...

    def complete(self, batch: IterationBatch, exit_s: float) -> int: ...


SchedulerFactory = Callable[[ReplicaConfig, Recorder, int, int], ReplicaScheduler]

DEFAULT_SCHEDULER = "vllm"
SCHEDULERS: dict[str, SchedulerFactory] = {
    "vllm": VllmScheduler,
}


def scheduler_factory(name: str) -> SchedulerFactory:
    """The scheduler registered as ``name``."""
    if name not in SCHEDULERS:
        raise ValueError(f"scheduler: must be one of {', '.join(SCHEDULERS)}, got {name!r}")
    return SCHEDULERS[name]
