"""The serving simulator: requests arrive, replicas batch them, tokens come out.

Three kinds of SimPy process share one clock:

* **arrivals**: one process walks the requests in arrival order, hands each to the router
  and wakes the virtual engine it lands on if that engine was idle;
* **virtual engines**: per replica, one process per pipeline stage (vLLM's virtual
  engines). Each loops: form a batch (the replica scheduler, ``scheduler``), book its passage through the
  replica's stages (``pipeline``), wait until it leaves the last stage, apply the outcome
  (tokens out, requests finished, blocks freed), and wait for the sampled tokens to
  travel back to the first stage. An engine's next iteration therefore waits for its
  previous one to leave the last stage plus that way back (the next token needs the
  previous one), while up to ``stages`` engines keep the pipeline full. As in vLLM, an engine
  forms its next batch as soon as its previous one is back, even when the first stage is
  still busy with another engine's batch; requests arriving while it waits for the stage
  join the iteration after;
* the **router** is a plain object the arrival process asks (``router``).

Schedulers and routers are picked by name (``ServeConfig.scheduler``, ``ServeConfig.router``)
from their registries.

The simulation costs one event per arrival and one or two per iteration (the second for
the way back, when it takes time), never one per token or per stage: a batch's time on every stage is computed when it is formed.

A request is rejected on arrival, before routing (replica -1), when it can never run: its
prompt and output (``prompt + output - 1`` cached tokens at its last step) need more KV
blocks than a virtual engine has, or, without chunked prefill, its prompt exceeds
``max_num_batched_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence

import simpy

from pipesim.serving.deployment import ServeConfig
from pipesim.serving.kv_cache import blocks_for
from pipesim.serving.pipeline import StagePipeline
from pipesim.serving.recorder import Recorder
from pipesim.serving.replica import ReplicaConfig
from pipesim.serving.request import Request
from pipesim.serving.results import ServeResult
from pipesim.serving.router import Router, make_router
from pipesim.serving.scheduler import SchedulerFactory, scheduler_factory


class _Replica:
    """A replica's pipeline and its virtual engines, and when each idle engine is woken."""

    def __init__(
        self, config: ReplicaConfig, recorder: Recorder, index: int, scheduler: SchedulerFactory
    ) -> None:
        self.index = index
        self.pipeline = StagePipeline(config.costs)
        self.engines = [scheduler(config, recorder, index, e) for e in range(config.stages)]
        self.wake: list[simpy.Event | None] = [None] * config.stages

    def least_loaded(self) -> int:
        loads = [engine.unfinished for engine in self.engines]
        return loads.index(min(loads))

    def running(self) -> int:
        return sum(engine.running_seqs for engine in self.engines)

    def kv_blocks_used(self) -> int:
        return sum(engine.kv_blocks_used for engine in self.engines)


def simulate_serving(
    config: ServeConfig,
    requests: Sequence[Request],
    *,
    progress: Callable[[int], None] | None = None,
) -> ServeResult:
    """Serve ``requests`` (in arrival order) on ``config``'s replicas; everything recorded.

    ``progress(1)`` is called once per request as it finishes or is rejected.
    """
    _check_requests(requests)
    replica_config = config.replica  # limits and KV cache, the same in every replica
    router = make_router(config.router, config.replicas)
    scheduler = scheduler_factory(config.scheduler)

    def on_done(replica: int) -> None:
        if replica >= 0:
            router.finished(replica)
        if progress is not None:
            progress(1)

    recorder = Recorder(requests, on_done)
    replicas = [
        _Replica(config.replica_config(r), recorder, r, scheduler) for r in range(config.replicas)
    ]
    env = simpy.Environment()
    env.process(_arrivals(env, requests, router, replicas, recorder, replica_config))
    for replica in replicas:
        for e in range(replica_config.stages):
            env.process(_engine_loop(env, replica, e, recorder))
    env.run()
    kv_blocks = (replica_config.engine_kv_blocks * replica_config.stages,) * config.replicas
    return recorder.result(kv_blocks, replica_config.stages)


def _check_requests(requests: Sequence[Request]) -> None:
    previous = 0.0
    for r in requests:
        if not (math.isfinite(r.arrival_s) and r.arrival_s >= previous):
            raise ValueError(
                f"request {r.id}: arrival_s must be finite, >= 0 and in order, got {r.arrival_s}"
            )
        if r.prompt_tokens < 1 or r.output_tokens < 1:
            raise ValueError(f"request {r.id}: prompt_tokens and output_tokens must be >= 1")
        previous = r.arrival_s


def never_fits(config: ReplicaConfig, request: Request) -> bool:
    """True when ``request`` could never be served by one virtual engine of ``config``."""
    cached = request.prompt_tokens + request.output_tokens - 1
    if blocks_for(cached, config.block_size) > config.engine_kv_blocks:
        return True
    return not config.chunked_prefill and request.prompt_tokens > config.max_num_batched_tokens


def _arrivals(
    env: simpy.Environment,
    requests: Sequence[Request],
    router: Router,
    replicas: list[_Replica],
    recorder: Recorder,
    config: ReplicaConfig,
) -> Generator[simpy.Event, None, None]:
    for position, request in enumerate(requests):
        if request.arrival_s > env.now:
            yield env.timeout(request.arrival_s - env.now)
        if never_fits(config, request):
            recorder.rejected[position] = True
            recorder.on_done(-1)
            continue
        replica = replicas[router.assign()]
        e = replica.least_loaded()
        recorder.replica[position] = replica.index
        recorder.engine[position] = e
        replica.engines[e].add(position, request.prompt_tokens, request.output_tokens)
        wake = replica.wake[e]
        if wake is not None:
            replica.wake[e] = None
            wake.succeed(request.arrival_s)


def _engine_loop(
    env: simpy.Environment, replica: _Replica, e: int, recorder: Recorder
) -> Generator[simpy.Event, None, None]:
    scheduler = replica.engines[e]
    clock_s = env.now  # kept exactly: env.now after a timeout may be off by a rounding
    while True:
        batch = scheduler.schedule()
        recorder.state(clock_s, replica.index, replica.running(), replica.kv_blocks_used())
        if batch is None:
            wake = env.event()
            replica.wake[e] = wake
            clock_s = yield wake  # the arrival time of the request that woke it
            continue
        shape = batch.shape()
        starts, ends = replica.pipeline.run(clock_s, shape)
        exit_s = ends[-1]
        back_s = exit_s + replica.pipeline.back_s(shape)
        scheduler.started(batch, starts[0], exit_s)
        recorder.iteration(
            replica.index, e, starts, ends, batch.size, shape.prefill_tokens, shape.decode_seqs
        )
        yield env.timeout(max(exit_s - env.now, 0.0))
        for _ in range(scheduler.complete(batch, exit_s)):
            recorder.on_done(replica.index)
        if back_s > exit_s:  # the sampled tokens are on their way to the first stage
            yield env.timeout(max(back_s - env.now, 0.0))
        clock_s = back_s
