"""Profile files: measured timings that pipesim turns into Costs and a Topology.

A profile is what a stopwatch saw. For each pipeline stage it keeps, per action kind
(``F`` forward, ``B`` full backward, ``I`` input-gradient backward, ``W`` weight-gradient
backward), the median and the 10th/90th percentiles of many repetitions, because one
timing on a real machine is a sample, not a number. It also keeps fitted point-to-point
links (``latency + bytes / bandwidth``), the host overhead a real runtime spends around
each action (posting sends and receives, launching work), and provenance: where, when
and with what the numbers were taken.

The file is versioned JSON (``"format": "pipesim-profile", "version": 1``)::

    {"format": "pipesim-profile", "version": 1,
     "provenance": {"device": ..., "torch": ..., "dtype": ..., "date": ..., "source": ...},
     "stages": [{"stage": 0, "activation_bytes": 4096,
                 "F": {"median_ms": 1.2, "p10_ms": 1.1, "p90_ms": 1.4, "samples": 20}, ...}],
     "links": [{"name": "gloo", "latency_us": 80.0, "bandwidth_gbps": 1.5, "points": [...]}],
     "host": {"overhead_ms": 0.15, "hop_ms": 0.3, "samples": 120}}

A scenario uses it with ``costs: {profile: path}`` through ``costs_from_profile``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from pipesim.sim.costs import Costs
from pipesim.sim.links import Link, Topology

FORMAT = "pipesim-profile"
VERSION = 1
KINDS = ("F", "B", "I", "W")


class ProfileError(ValueError):
    """A profile file that cannot be read or does not fit the request (one clear line)."""


@dataclass(frozen=True, slots=True)
class Spread:
    """Summary of repeated timings of one thing: median and the p10-p90 band, in ms."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    @property
    def relative_spread(self) -> float:
        """(p90 - p10) / median: how noisy the measurement was."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0


def summarize(samples_ms: list[float] | np.ndarray) -> Spread:
    """Median, p10 and p90 of a list of timings (ms)."""
    values = np.asarray(samples_ms, dtype=float)
    if values.size == 0:
        raise ProfileError("cannot summarize zero timings")
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return Spread(float(median), float(p10), float(p90), int(values.size))


@dataclass(frozen=True, slots=True)
class StageTiming:
    """Timings of one stage (layer group): a Spread per action kind, plus boundary bytes."""

    stage: int
    kinds: dict[str, Spread]
    activation_bytes: float = 0.0

    def median_ms(self, kind: str) -> float | None:
        spread = self.kinds.get(kind)
        return None if spread is None else spread.median_ms


@dataclass(frozen=True, slots=True)
class LinkFit:
    """A fitted link: ``time_ms = latency_us / 1000 + bytes / (bandwidth_gbps * 1e6)``.

    ``points`` keeps the measured ``(bytes, median_ms)`` pairs the fit came from.
    """

    name: str
    latency_us: float
    bandwidth_gbps: float
    points: tuple[tuple[float, float], ...] = ()

    def to_link(self) -> Link:
        return Link(self.latency_us, self.bandwidth_gbps, self.name)


@dataclass(frozen=True, slots=True)
class HostOverhead:
    """What a real runtime adds around the compute, fitted from real runs.

    ``overhead_ms`` is the device time spent per compute action outside the compute itself
    (posting sends and receives, Python dispatch); ``hop_ms`` is the time from a
    producer's end (overhead included) to the consumer being able to start, per
    cross-device hop; ``compute_scale`` is how much longer the ops ran inside the real run
    than when profiled alone (median of measured / profiled duration over the calibration
    run's actions: other ranks share the caches, memory bandwidth and cores).
    """

    overhead_ms: float = 0.0
    hop_ms: float = 0.0
    samples: int = 0
    compute_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Profile:
    stages: tuple[StageTiming, ...]
    links: tuple[LinkFit, ...] = ()
    host: HostOverhead | None = None
    provenance: dict = field(default_factory=dict)

    def link(self, name: str | None = None) -> LinkFit | None:
        """The named link fit, or the first one."""
        for fit in self.links:
            if name is None or fit.name == name:
                return fit
        return None


# ---------------------------------------------------------------------------
# JSON


def profile_to_dict(profile: Profile) -> dict:
    stages = []
    for timing in profile.stages:
        entry: dict = {"stage": timing.stage, "activation_bytes": timing.activation_bytes}
        for kind in KINDS:
            if kind in timing.kinds:
                entry[kind] = asdict(timing.kinds[kind])
        stages.append(entry)
    links = [
        {
            "name": fit.name,
            "latency_us": fit.latency_us,
            "bandwidth_gbps": _finite_or_none(fit.bandwidth_gbps),
            "points": [list(p) for p in fit.points],
        }
        for fit in profile.links
    ]
    data = {"format": FORMAT, "version": VERSION, "provenance": dict(profile.provenance)}
    data["stages"] = stages
    data["links"] = links
    if profile.host is not None:
        data["host"] = asdict(profile.host)
    return data


def profile_from_dict(data: dict, where: str = "profile") -> Profile:
    """Parse and check a profile dict; errors name ``where`` and the field."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(f'{where}: not a pipesim profile (expected "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ProfileError(
            f"{where}: profile version {data.get('version')!r}, this pipesim reads {VERSION}"
        )
    stages = tuple(
        _stage_from_dict(s, f"{where}: stages[{i}]") for i, s in enumerate(data.get("stages", []))
    )
    if [t.stage for t in stages] != list(range(len(stages))):
        raise ProfileError(f"{where}: stages must be numbered 0..{len(stages) - 1} in order")
    links = tuple(
        _link_from_dict(x, f"{where}: links[{i}]") for i, x in enumerate(data.get("links", []))
    )
    host = data.get("host")
    host_fit = None
    if host is not None:
        try:
            host_fit = HostOverhead(
                float(host["overhead_ms"]),
                float(host["hop_ms"]),
                int(host.get("samples", 0)),
                float(host.get("compute_scale", 1.0)),
            )
        except (KeyError, TypeError, ValueError):
            raise ProfileError(f"{where}: host needs numbers overhead_ms and hop_ms") from None
    return Profile(stages, links, host_fit, dict(data.get("provenance", {})))


def _stage_from_dict(entry: dict, where: str) -> StageTiming:
    if not isinstance(entry, dict) or "stage" not in entry:
        raise ProfileError(f"{where}: each stage needs a 'stage' index")
    kinds = {}
    for kind in KINDS:
        if kind in entry:
            try:
                kinds[kind] = Spread(
                    **{k: entry[kind][k] for k in ("median_ms", "p10_ms", "p90_ms", "samples")}
                )
            except (KeyError, TypeError):
                raise ProfileError(
                    f"{where}.{kind}: needs median_ms, p10_ms, p90_ms, samples"
                ) from None
            if not kinds[kind].median_ms >= 0:
                raise ProfileError(f"{where}.{kind}.median_ms must be >= 0")
    if "F" not in kinds:
        raise ProfileError(f"{where}: a stage needs at least a forward time 'F'")
    return StageTiming(int(entry["stage"]), kinds, float(entry.get("activation_bytes", 0.0)))


def _link_from_dict(entry: dict, where: str) -> LinkFit:
    try:
        bandwidth = entry.get("bandwidth_gbps")
        return LinkFit(
            str(entry["name"]),
            float(entry["latency_us"]),
            math.inf if bandwidth is None else float(bandwidth),
            tuple((float(b), float(t)) for b, t in entry.get("points", [])),
        )
    except (KeyError, TypeError, ValueError):
        raise ProfileError(f"{where}: a link needs name, latency_us and bandwidth_gbps") from None


def _finite_or_none(value: float) -> float | None:
    return None if math.isinf(value) else value


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write the profile as JSON, whole or not at all (temp file, then rename)."""
    write_atomic(path, json.dumps(profile_to_dict(profile), indent=2) + "\n")


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder and a rename."""
    target = Path(path)
    handle, temp = tempfile.mkstemp(
        dir=target.parent or Path("."), prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def load_profile(path: str | Path) -> Profile:
    """Read a profile file; a missing or malformed file raises ProfileError naming it."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read profile ({exc})") from None
    return profile_from_dict(data, str(path))


# ---------------------------------------------------------------------------
# Profile -> Costs, Topology


def costs_from_profile(profile: Profile, stages: int) -> Costs:
    """Costs for ``stages`` model stages from a profile's medians.

    A profile of one stage is a per-layer-group measurement and applies to every stage;
    otherwise the profile must have exactly ``stages`` entries. A missing split backward
    is taken as half of ``B`` each; a missing ``B`` as ``I + W``. The host overhead, if
    fitted, becomes the per-action overhead, and its compute scale stretches every op.
    """
    if len(profile.stages) == 1:
        timings = profile.stages * stages
    elif len(profile.stages) == stages:
        timings = profile.stages
    else:
        raise ProfileError(
            f"the profile has {len(profile.stages)} stages, the scenario needs {stages} (or 1 for all)"
        )
    forward, full, inp, wgt = [], [], [], []
    for timing in timings:
        f, b, i, w = (timing.median_ms(k) for k in KINDS)
        if b is None and (i is None or w is None):
            raise ProfileError(f"stage {timing.stage}: the profile needs B, or both I and W")
        b = b if b is not None else i + w
        forward.append(f)
        full.append(b)
        inp.append(i if i is not None else b / 2)
        wgt.append(w if w is not None else b / 2)
    act = tuple(t.activation_bytes for t in timings)
    zeros = (0.0,) * stages
    overhead = profile.host.overhead_ms if profile.host is not None else 0.0
    costs = Costs(
        tuple(forward), tuple(full), tuple(inp), tuple(wgt), act, act, zeros, None, overhead
    )
    return costs.scaled(profile.host.compute_scale) if profile.host is not None else costs


def topology_from_profile(profile: Profile, devices: int, link_name: str | None = None) -> Topology:
    """A uniform topology from the profile: the fitted host hop if present, else the link fit.

    A hop fitted from real runs already holds the transfer of that run's tensors, so it is
    used as a pure latency.
    """
    if profile.host is not None and profile.host.hop_ms > 0:
        return Topology(devices, Link(profile.host.hop_ms * 1000.0, math.inf, "fitted hop"))
    fit = profile.link(link_name)
    return Topology(devices, fit.to_link() if fit is not None else Link())


def with_host(profile: Profile, host: HostOverhead) -> Profile:
    return replace(profile, host=host)
