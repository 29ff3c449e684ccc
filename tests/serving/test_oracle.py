"""The engine against a token-by-token oracle (tests/serving/oracle.py) on random workloads:
the same request lifetimes, preemptions and inter-token gaps, to rounding, with the sampled
tokens' way back from the last stage and, at times, replicas on links of their own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.inference import BatchShape
from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.replica import ReplicaConfig
from pipesim.serving.request import Request
from tests.serving import oracle


@dataclass(frozen=True)
class ShapeCosts:
    """A cost that reads every field of the batch shape, so that a wrong context or
    attention sum shows in the times."""

    stages: int
    base_ms: tuple[float, ...]
    hop: float

    def stage_ms(self, stage: int, shape: BatchShape) -> float:
        return self.base_ms[stage] * (
            1
            + 0.01 * shape.prefill_tokens
            + 1e-4 * shape.prefill_attention
            + 0.05 * shape.decode_seqs
            + 1e-3 * shape.decode_context
        )

    def hop_ms(self, stage: int, shape: BatchShape) -> float:
        return self.hop * (1 + 0.01 * shape.tokens)


@settings(max_examples=120, deadline=None)
@given(
    stages=st.integers(1, 3),
    replicas=st.integers(1, 2),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
    max_num_seqs=st.integers(1, 6),
    extra_tokens=st.integers(0, 40),
    chunked=st.booleans(),
    block_size=st.integers(1, 6),
    engine_blocks=st.integers(2, 30),
    base_ms=st.lists(st.floats(0.1, 5.0), min_size=3, max_size=3),
    hop=st.floats(0.0, 1.0),
    own_links=st.booleans(),
    count=st.integers(1, 25),
    seed=st.integers(0, 2**16),
    rate=st.floats(10.0, 3000.0),
)
def test_engine_matches_the_token_by_token_oracle(
    stages,
    replicas,
    router,
    max_num_seqs,
    extra_tokens,
    chunked,
    block_size,
    engine_blocks,
    base_ms,
    hop,
    own_links,
    count,
    seed,
    rate,
):
    costs = ShapeCosts(stages, tuple(base_ms[:stages]), hop)
    replica = ReplicaConfig(
        costs,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_seqs + extra_tokens,
        chunked_prefill=chunked,
        block_size=block_size,
        kv_blocks=engine_blocks * stages,
    )
    # with own_links, replica r's hops (and its tokens' way back) take (1 + r) times longer
    own = tuple(ShapeCosts(stages, costs.base_ms, hop * (1 + r)) for r in range(replicas))
    config = ServeConfig(replica, replicas, router, own if own_links else ())
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, count))
    requests = [
        Request(i, float(t), int(rng.integers(1, 40)), int(rng.integers(1, 30)))
        for i, t in enumerate(times)
    ]
    got = simulate_serving(config, requests)
    want = oracle.simulate(config, requests)
    r = got.requests
    assert r.rejected.tolist() == [w["rejected"] for w in want]
    served = [w for w in want if not w["rejected"]]
    done = ~r.rejected
    assert r.replica[done].tolist() == [w["replica"] for w in served]
    assert r.engine[done].tolist() == [w["engine"] for w in served]
    assert r.preemptions[done].tolist() == [w["preemptions"] for w in served]
    assert [len(w["tokens"]) for w in served] == r.output_tokens[done].tolist()
    np.testing.assert_allclose(r.first_scheduled_s[done], [w["first_scheduled"] for w in served])
    np.testing.assert_allclose(r.first_token_s[done], [w["tokens"][0] for w in served])
    np.testing.assert_allclose(r.finish_s[done], [w["tokens"][-1] for w in served])
    longest = [np.diff(w["tokens"]).max() if len(w["tokens"]) > 1 else np.nan for w in served]
    np.testing.assert_allclose(r.max_itl_s[done], longest, atol=1e-12)
    gaps = np.sort(np.concatenate([np.diff(w["tokens"]) for w in served] + [np.zeros(0)]))
    engine_gaps = np.sort(np.repeat(got.token_gaps.gap_s, got.token_gaps.count))
    np.testing.assert_allclose(engine_gaps, gaps, atol=1e-12)
