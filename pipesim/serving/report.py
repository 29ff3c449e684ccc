"""The numbers of a serving run, as ``pipesim serve --format json`` prints them.

``pipesim.serving.metrics.summarize(result)`` turns a run's records
(:class:`~pipesim.serving.results.ServeResult`) into a :class:`ServeReport`: latencies in
milliseconds (``_ms``), rates per second of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Mean and percentiles of one latency, milliseconds; every field is ``None`` where
    there is no sample (the latency is undefined, not zero: see :meth:`undefined`)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def undefined(cls) -> LatencyStats:
        """The statistics of no sample (no request completed, no one with two tokens)."""
        return cls(None, None, None, None)

    @property
    def defined(self) -> bool:
        return self.mean is not None


@dataclass(frozen=True, slots=True)
class Usage:
    """A quantity over the run: its (time- or iteration-) mean and its peak."""

    mean: float
    peak: float


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One pipeline stage of one replica (its ``tensor`` GPUs work as one device here)."""

    replica: int
    stage: int
    busy_ms: float
    bubble_fraction: float


@dataclass(frozen=True, slots=True)
class ServeReport:
    """The numbers of a serving run (``pipesim serve --format json``).

    Rates are over ``duration_s``; ``goodput_rps`` counts completed requests within the
    SLO (all completed ones when no SLO is set); ``mean_in_system`` is the time-average of
    requests arrived and not finished; ``bubble_fraction = 1 - sum(busy) / (stages *
    replicas * duration)``.
    """

    requests: int
    completed: int
    rejected: int
    preemptions: int
    duration_s: float
    throughput_rps: float
    output_tokens_per_second: float
    goodput_rps: float
    mean_in_system: float
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    e2e_ms: LatencyStats
    queue_ms: LatencyStats
    itl_ms: LatencyStats
    kv_utilization: Usage
    batch_size: Usage
    bubble_fraction: float
    devices: tuple[DeviceUsage, ...] = field(default=())

    def to_dict(self) -> dict:
        """Plain JSON-ready data, keys as the issue names them; an undefined latency's
        fields are ``None`` (JSON ``null``)."""
        plain: dict = {}
        for name in self.__slots__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            if isinstance(value, LatencyStats | Usage):
                value = {k: getattr(value, k) for k in value.__slots__}  # type: ignore[attr-defined]
            elif name == "devices":
                value = [{k: getattr(s, k) for k in s.__slots__} for s in value]  # type: ignore[attr-defined]
            plain[name] = value
        return plain
