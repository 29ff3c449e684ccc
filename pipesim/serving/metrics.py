"""Serving metrics: the latencies users feel and what the hardware did meanwhile.

Per request (milliseconds):

* **TTFT**, time to first token: arrival to the first token leaving the last stage;
* **TPOT**, time per output token: ``(finish - first token) / (output_tokens - 1)``,
  undefined for one-token outputs (left out of its statistics);
* **ITL**, inter-token latency: the gap between consecutive tokens of one request (a
  preemption's recomputation shows up as one long gap);
* **e2e**: arrival to the last token; **queue**: arrival to the start of the first
  iteration that includes the request.

Each is summarised as ``{mean, p50, p90, p99}`` (NumPy's linear percentiles; ITL's are
percentiles of the multiset of all gaps of all requests). With no sample (every request
rejected, or no output longer than one token for TPOT and ITL) a latency is undefined:
:meth:`LatencyStats.undefined`, every field ``None``, never zero or NaN.

Over the run: completed requests and output tokens per second of ``duration_s``;
**goodput**, the completed requests per second whose TTFT and TPOT are within the SLO;
``mean_in_system``, the time-average number of requests arrived and not finished (by
Little's law, arrival rate times mean e2e); KV utilisation (time-averaged fraction of the
replicas' blocks in use, and its peak); batch size per iteration; per (replica, stage)
busy time and bubble fraction ``1 - busy / duration``.
"""

from __future__ import annotations

import numpy as np

from pipesim.serving.report import DeviceUsage, LatencyStats, ServeReport, Usage
from pipesim.serving.results import ServeResult, Timeline


def latency_stats(values_s: np.ndarray, weights: np.ndarray | None = None) -> LatencyStats:
    """Mean and p50/p90/p99 of ``values_s`` (seconds) in milliseconds; NaNs are left out;
    ``weights`` counts how often each value occurs; undefined with no sample left."""
    values = np.asarray(values_s, dtype=float)
    keep = ~np.isnan(values)
    values = values[keep] * 1e3
    if weights is None:
        if not len(values):
            return LatencyStats.undefined()
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return LatencyStats(float(values.mean()), float(p50), float(p90), float(p99))
    counts = np.asarray(weights)[keep]
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    if not len(values):
        return LatencyStats.undefined()
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    mean = float(np.dot(values, counts) / counts.sum())
    return LatencyStats(mean, *(_weighted_percentile(values, counts, q) for q in (50, 90, 99)))


def _weighted_percentile(sorted_values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """The linear percentile of the multiset with ``counts[i]`` copies of each value, as
    ``np.percentile`` of the expanded array would give it."""
    total = int(counts.sum())
    rank = q / 100 * (total - 1)
    ends = np.cumsum(counts)  # copies of value i occupy ranks ends[i]-counts[i] .. ends[i]-1
    low, high = int(np.floor(rank)), int(np.ceil(rank))
    value_low = sorted_values[np.searchsorted(ends, low, side="right")]
    value_high = sorted_values[np.searchsorted(ends, high, side="right")]
    return float(value_low + (rank - low) * (value_high - value_low))


def _meets_slo(result: ServeResult, slo_ttft_ms: float | None, slo_tpot_ms: float | None):
    requests = result.requests
    good = ~requests.rejected
    if slo_ttft_ms is not None:
        good &= requests.ttft_s * 1e3 <= slo_ttft_ms
    if slo_tpot_ms is not None:
        tpot_ms = requests.tpot_s * 1e3
        good &= np.isnan(tpot_ms) | (tpot_ms <= slo_tpot_ms)
    return good


def mean_in_system(result: ServeResult) -> float:
    """Time-average of requests arrived and not finished over ``[0, duration_s]``: the
    area under the count, sum of every served request's time in the system, over the
    duration."""
    requests = result.requests
    served = ~requests.rejected
    if result.duration_s <= 0:
        return 0.0
    return float(np.sum(requests.e2e_s[served]) / result.duration_s)


def kv_utilization(timeline: Timeline, kv_blocks: tuple[int, ...], duration_s: float) -> Usage:
    """Fraction of all replicas' KV blocks in use: time-average over the run and peak."""
    total = float(sum(kv_blocks))
    if not len(timeline.time_s) or total <= 0:
        return Usage(0.0, 0.0)
    area = 0.0
    peak = 0.0
    for replica in range(len(kv_blocks)):
        mine = timeline.replica == replica
        times = timeline.time_s[mine]
        used = timeline.kv_blocks_used[mine].astype(float)
        if not len(times):
            continue
        spans = np.diff(np.append(times, max(duration_s, times[-1])))
        area += float(np.dot(used, spans))
        peak = max(peak, float(used.max()) / kv_blocks[replica])
    mean = area / (total * duration_s) if duration_s > 0 else 0.0
    return Usage(mean, peak)


def _devices(result: ServeResult) -> tuple[tuple[DeviceUsage, ...], float]:
    replicas = len(result.kv_blocks)
    busy_s = result.iterations.busy_s(replicas)
    duration = result.duration_s
    devices = tuple(
        DeviceUsage(
            replica=r,
            stage=s,
            busy_ms=float(busy_s[r, s] * 1e3),
            bubble_fraction=float(1 - busy_s[r, s] / duration) if duration > 0 else 0.0,
        )
        for r in range(replicas)
        for s in range(result.stages)
    )
    overall = float(1 - busy_s.sum() / (busy_s.size * duration)) if duration > 0 else 0.0
    return devices, overall


def summarize(
    result: ServeResult, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None
) -> ServeReport:
    """The report of a serving run; goodput counts requests within both SLO limits given
    (every completed request when none is)."""
    requests = result.requests
    served = ~requests.rejected
    duration = result.duration_s

    def per_second(count: float) -> float:
        return float(count / duration) if duration > 0 else 0.0

    devices, bubble = _devices(result)
    batch = result.iterations.batch_size
    return ServeReport(
        requests=len(requests),
        completed=int(served.sum()),
        rejected=int(requests.rejected.sum()),
        preemptions=int(requests.preemptions.sum()),
        duration_s=float(duration),
        throughput_rps=per_second(served.sum()),
        output_tokens_per_second=per_second(requests.output_tokens[served].sum()),
        goodput_rps=per_second(_meets_slo(result, slo_ttft_ms, slo_tpot_ms).sum()),
        mean_in_system=mean_in_system(result),
        ttft_ms=latency_stats(requests.ttft_s[served]),
        tpot_ms=latency_stats(requests.tpot_s[served]),
        e2e_ms=latency_stats(requests.e2e_s[served]),
        queue_ms=latency_stats(requests.queue_s[served]),
        itl_ms=latency_stats(result.token_gaps.gap_s, result.token_gaps.count),
        kv_utilization=kv_utilization(result.timeline, result.kv_blocks, duration),
        batch_size=Usage(
            float(batch.mean()) if len(batch) else 0.0, float(batch.max()) if len(batch) else 0.0
        ),
        bubble_fraction=bubble,
        devices=devices,
    )
