"""Queueing theory where it is exact: M/D/1 waiting time and Little's law."""

from __future__ import annotations

import numpy as np
import pytest

from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.metrics import summarize
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.request import Request


def poisson_requests(rate: float, count: int, seed: int, prompt, output) -> list[Request]:
    """``count`` Poisson arrivals at ``rate``/s; lengths fixed or drawn by ``prompt(rng)``."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, count))
    prompts = prompt(rng, count)
    outputs = output(rng, count)
    return [
        Request(i, float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))
    ]


def fixed(value: int):
    return lambda rng, count: np.full(count, value)


def lognormal(mean: float, cap: int):
    sigma2 = np.log(2.0)  # cv 1
    return lambda rng, count: np.clip(
        np.rint(rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), count)), 1, cap
    )


@pytest.fixture(scope="module")
def md1():
    # one stage, one sequence at a time: a 64-token prompt (8 ms) and one decode step
    # (2 ms) make a deterministic service time S = 10 ms; load rho = lambda * S = 0.5.
    service_s = (8.0 + 2.0) / 1e3
    rate = 0.5 / service_s
    costs = HandTypedCosts((8.0,), (2.0,), 64)
    requests = poisson_requests(rate, 40_000, 0, fixed(64), fixed(2))
    result = simulate_serving(ServeConfig(ReplicaConfig(costs, max_num_seqs=1)), requests)
    return rate, service_s, result


@pytest.mark.slow
def test_md1_mean_queueing_delay(md1):
    rate, service_s, result = md1
    rho = rate * service_s
    expected_ms = rate * service_s**2 / (2 * (1 - rho)) * 1e3  # Pollaczek-Khinchine, M/D/1
    report = summarize(result)
    assert report.queue_ms.mean == pytest.approx(expected_ms, rel=0.05)
    # every request is served in exactly S once it starts
    np.testing.assert_allclose(result.requests.e2e_s - result.requests.queue_s, service_s)


def sampled_in_system(result, seed: int, samples: int = 20_000) -> float:
    """The time-average of requests in the system, estimated independently of
    ``mean_in_system``'s area sum: the count arrived minus finished at random instants."""
    r = result.requests
    instants = np.random.default_rng(seed).uniform(0, result.duration_s, samples)
    arrived = np.searchsorted(np.sort(r.arrival_s), instants, side="right")
    finished = np.searchsorted(np.sort(r.finish_s), instants, side="right")
    return float(np.mean(arrived - finished))


@pytest.mark.slow
def test_littles_law_on_md1(md1):
    rate, _, result = md1
    report = summarize(result)
    assert report.mean_in_system == pytest.approx(rate * report.e2e_ms.mean / 1e3, rel=0.02)
    # mean_in_system sums the requests' times in the system, so the line above mostly checks
    # that requests arrived at ``rate``; the count at random instants checks the average
    assert report.mean_in_system == pytest.approx(sampled_in_system(result, 4), rel=0.03)


@pytest.mark.slow
def test_littles_law_with_continuous_batching_on_a_pipeline():
    # two stages, chunked prefill, lognormal lengths: a busy but stable replica
    costs = HandTypedCosts((3.0, 3.0), (1.5, 1.5), 256)
    config = ServeConfig(
        ReplicaConfig(costs, max_num_seqs=32, max_num_batched_tokens=512, chunked_prefill=True),
    )
    rate = 40.0
    requests = poisson_requests(rate, 20_000, 3, lognormal(256, 2048), lognormal(64, 1024))
    result = simulate_serving(config, requests)
    report = summarize(result)
    assert report.batch_size.mean > 2  # it did batch
    assert report.mean_in_system == pytest.approx(rate * report.e2e_ms.mean / 1e3, rel=0.02)
    # the time-average, estimated independently by looking at 20,000 random instants
    assert report.mean_in_system == pytest.approx(sampled_in_system(result, 9), rel=0.03)
