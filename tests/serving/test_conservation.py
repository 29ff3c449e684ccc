"""Nothing is lost: requests, tokens and KV blocks are conserved, and runs repeat exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import never_fits, simulate_serving
from pipesim.serving.metrics import summarize
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.request import Request
from pipesim.serving.results import ServeResult


def random_requests(count: int, seed: int, rate: float, prompt_max: int, output_max: int):
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, count))
    prompts = rng.integers(1, prompt_max, count, endpoint=True)
    outputs = rng.integers(1, output_max, count, endpoint=True)
    return [
        Request(i, float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))
    ]


def check_invariants(config: ServeConfig, requests: list[Request], result: ServeResult) -> None:
    """What every run must satisfy, whatever its configuration."""
    r = result.requests
    replica = config.replica
    expected_rejects = [never_fits(replica, q) for q in requests]
    assert r.rejected.tolist() == expected_rejects
    done = ~r.rejected
    # every admitted request finished, once, in order of its life's events
    assert not np.isnan(r.finish_s[done]).any()
    assert np.isnan(r.finish_s[~done]).all() and (r.replica[~done] == -1).all()
    assert (r.first_scheduled_s[done] >= r.arrival_s[done]).all()
    assert (r.first_token_s[done] > r.first_scheduled_s[done]).all()
    assert (r.finish_s[done] >= r.first_token_s[done]).all()
    assert ((r.output_tokens[done] > 1) == (r.finish_s[done] > r.first_token_s[done])).all()
    # tokens: each request has exactly output_tokens - 1 gaps between its tokens
    assert result.token_gaps.count.sum() == (r.output_tokens[done] - 1).sum()
    assert (result.token_gaps.gap_s[result.token_gaps.count > 0] > 0).all()
    # prompt tokens computed: every prompt once, more only when preempted and recomputed
    prefilled = result.iterations.prefill_tokens.sum()
    if r.preemptions.sum() == 0:
        assert prefilled == r.prompt_tokens[done].sum()
    else:
        assert prefilled > r.prompt_tokens[done].sum()
    # KV blocks never exceed the capacity, and all come back at the end
    timeline = result.timeline
    assert (timeline.kv_blocks_used <= replica.kv_blocks).all()
    assert (timeline.running <= replica.max_num_seqs * replica.stages).all()
    for rep in range(config.replicas):
        mine = timeline.replica == rep
        if mine.any():
            assert timeline.kv_blocks_used[mine][-1] == 0 and timeline.running[mine][-1] == 0
    check_pipeline(result)


def check_pipeline(result: ServeResult) -> None:
    """A stage runs one batch at a time; a batch flows down the stages; an engine's next
    iteration starts after its previous one left the last stage."""
    log = result.iterations
    assert (log.end_s >= log.start_s).all()
    assert (log.start_s[:, 1:] >= log.end_s[:, :-1]).all()
    assert (log.batch_size <= result.requests.id.size).all()
    for rep in np.unique(log.replica):
        mine = log.replica == rep
        for stage in range(result.stages):
            starts = log.start_s[mine, stage]
            ends = log.end_s[mine, stage]
            assert (starts[1:] >= ends[:-1]).all()
        for engine in np.unique(log.engine[mine]):
            its = mine & (log.engine == engine)
            assert (log.start_s[its, 0][1:] >= log.end_s[its, -1][:-1]).all()


def test_an_overloaded_cache_preempts_and_still_finishes_everything():
    costs = HandTypedCosts((4.0, 4.0), (1.0, 1.0), 128, (0.1,))
    config = ServeConfig(ReplicaConfig(costs, max_num_seqs=16, block_size=8, kv_blocks=2 * 40))
    requests = random_requests(300, 1, 400.0, 120, 120)
    result = simulate_serving(config, requests)
    report = summarize(result)
    assert report.preemptions > 0
    assert report.completed == 300 and report.rejected == 0
    assert result.timeline.kv_blocks_used.max() == config.replica.kv_blocks
    check_invariants(config, requests, result)


def test_oversized_requests_are_rejected_and_counted():
    costs = HandTypedCosts((1.0,), (1.0,), 16)
    config = ServeConfig(
        ReplicaConfig(costs, max_num_seqs=8, max_num_batched_tokens=64, block_size=4, kv_blocks=20)
    )
    requests = [
        Request(0, 0.0, 10, 5),
        Request(1, 0.1, 70, 1),  # prompt over the token budget (no chunked prefill)
        Request(2, 0.2, 40, 42),  # 81 cached tokens: 21 blocks of 4 > 20
        Request(3, 0.3, 40, 41),  # 80 cached tokens: exactly 20 blocks, served
    ]
    result = simulate_serving(config, requests)
    assert result.requests.rejected.tolist() == [False, True, True, False]
    report = summarize(result)
    assert (report.requests, report.completed, report.rejected) == (4, 2, 2)
    check_invariants(config, requests, result)


def test_chunked_prefill_takes_prompts_longer_than_the_token_budget():
    costs = HandTypedCosts((1.0,), (1.0,), 16)
    replica = ReplicaConfig(costs, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=True)
    result = simulate_serving(ServeConfig(replica), [Request(0, 0.0, 150, 3)])
    # chunks of 64, 64 and 22 tokens (the last one emits the first token), two decodes
    assert result.iterations.prefill_tokens.tolist() == [64, 64, 22, 0, 0]
    assert result.iterations.decode_seqs.tolist() == [0, 0, 0, 1, 1]
    np.testing.assert_allclose(result.requests.first_token_s * 1e3, [64 / 16 * 2 + 22 / 16])


def test_same_inputs_same_arrays():
    costs = HandTypedCosts((2.0, 3.0), (0.5, 0.7), 64, (0.2,))
    config = ServeConfig(
        ReplicaConfig(costs, max_num_seqs=8, chunked_prefill=True, kv_blocks=200),
        replicas=2,
        router="least_outstanding",
    )
    requests = random_requests(200, 5, 300.0, 200, 100)
    first, second = simulate_serving(config, requests), simulate_serving(config, requests)
    for name in first.requests.__slots__:
        a, b = getattr(first.requests, name), getattr(second.requests, name)
        assert a.tobytes() == b.tobytes(), name
    assert first.iterations.end_s.tobytes() == second.iterations.end_s.tobytes()
    assert summarize(first).to_dict() == summarize(second).to_dict()


def test_routers_spread_requests():
    costs = HandTypedCosts((1.0,), (1.0,), 16)
    replica = ReplicaConfig(costs)
    # request 0 holds replica 0 for 80 ms; the others arrive 10 ms apart and are done in 2
    requests = [Request(i, 0.01 * i, 16, 80 if i == 0 else 2) for i in range(6)]
    rr = simulate_serving(ServeConfig(replica, replicas=3), requests)
    assert rr.requests.replica.tolist() == [0, 1, 2, 0, 1, 2]
    lo = simulate_serving(ServeConfig(replica, replicas=3, router="least_outstanding"), requests)
    assert lo.requests.replica.tolist() == [0, 1, 1, 1, 1, 1]


@settings(max_examples=150, deadline=None)
@given(
    stages=st.integers(1, 3),
    replicas=st.integers(1, 2),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
    max_num_seqs=st.integers(1, 6),
    extra_tokens=st.integers(0, 40),
    chunked=st.booleans(),
    block_size=st.integers(1, 8),
    engine_blocks=st.integers(1, 30),
    count=st.integers(1, 25),
    seed=st.integers(0, 2**16),
    rate=st.floats(10.0, 2000.0),
)
def test_invariants_hold_on_random_small_workloads(
    stages,
    replicas,
    router,
    max_num_seqs,
    extra_tokens,
    chunked,
    block_size,
    engine_blocks,
    count,
    seed,
    rate,
):
    costs = HandTypedCosts(
        tuple(1.0 + s for s in range(stages)), (0.5,) * stages, 16, (0.05,) * (stages - 1)
    )
    replica = ReplicaConfig(
        costs,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_seqs + extra_tokens,
        chunked_prefill=chunked,
        block_size=block_size,
        kv_blocks=engine_blocks * stages,
    )
    config = ServeConfig(replica, replicas=replicas, router=router)
    requests = random_requests(count, seed, rate, 40, 30)
    result = simulate_serving(config, requests)
    check_invariants(config, requests, result)
