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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipesim.scenario.load import check_depth, read_text_file
from pipesim.sim.costs import Costs
from pipesim.sim.links import Link, Topology

FORMAT = "pipesim-profile"
VERSION = 1
KINDS = ("F", "B", "I", "W")
# Inference: a whole prompt through the stage, and one token step (pipeline.mode: decode).
INFERENCE_KINDS = ("prefill", "decode")


class ProfileError(ValueError):
    """A profile file that cannot be read or does not fit the request (one clear line)."""


@dataclass(frozen=True, slots=True)
class Spread:
    """Summary of repeated timings of one thing: median and the p10-p90 band, in ms."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int


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
        for kind in KINDS + INFERENCE_KINDS:
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
    """Parse and check a profile dict; errors name ``where`` and the field. Every number
    must be finite and in range (durations 0 to 1e12 ms, sizes 0 to 1e18 bytes)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileError(f'{where}: not a pipesim profile (expected "format": "{FORMAT}")')
    if data.get("version") != VERSION or isinstance(data.get("version"), bool):
        raise ProfileError(
            f"{where}: profile version {data.get('version')!r:.40}, this pipesim reads {VERSION}"
        )
    stages = tuple(
        _stage_from_dict(s, f"{where}: stages[{i}]")
        for i, s in enumerate(_list(data, "stages", where))
    )
    if [t.stage for t in stages] != list(range(len(stages))):
        raise ProfileError(f"{where}: stages must be numbered 0..{len(stages) - 1} in order")
    links = tuple(
        _link_from_dict(x, f"{where}: links[{i}]")
        for i, x in enumerate(_list(data, "links", where))
    )
    host = data.get("host")
    host_fit = None
    if host is not None:
        if not isinstance(host, dict) or "overhead_ms" not in host or "hop_ms" not in host:
            raise ProfileError(f"{where}: host needs numbers overhead_ms and hop_ms")
        host_fit = HostOverhead(
            _number(host["overhead_ms"], f"{where}: host.overhead_ms", _MS),
            _number(host["hop_ms"], f"{where}: host.hop_ms", _MS),
            int(_number(host.get("samples", 0), f"{where}: host.samples", _COUNT)),
            _number(host.get("compute_scale", 1.0), f"{where}: host.compute_scale", _SCALE),
        )
    provenance = data.get("provenance", {})
    if not isinstance(provenance, dict):
        raise ProfileError(f"{where}: provenance must be a mapping")
    _check_provenance(provenance, f"{where}: provenance")
    return Profile(stages, links, host_fit, dict(provenance))


def _check_provenance(value: object, where: str) -> None:
    """Provenance is free-form, but it is written again into every profile made from this
    one: text, booleans, nulls, lists and mappings, at most ``MAX_DEPTH`` levels deep, and
    numbers a float holds (no NaN, no infinity, no 400-digit integer)."""
    check_depth(value, where, ProfileError)
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            stack += [(v, f"{at}.{k}") for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(v, f"{at}[{i}]") for i, v in enumerate(item)]
        elif isinstance(item, float) and not math.isfinite(item):
            raise ProfileError(f"{at}: {item!r} is not a finite number")
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > _FLOAT_MAX:
            raise ProfileError(f"{at}: an integer of {len(str(abs(item)))} digits; at most 308")


_MS, _BYTES, _COUNT, _SCALE = (0.0, 1e12), (0.0, 1e18), (0.0, 2.0**53), (1e-6, 1e6)
_FLOAT_MAX = 10**308


def _number(value: object, where: str, bounds: tuple[float, float]) -> float:
    """A finite number within ``bounds``; a positive duration or size is at least 1e-9."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{where}: expected a number, got {type(value).__name__}")
    if not (low <= value <= high) or (low == 0 and 0 < value < 1e-9):
        raise ProfileError(f"{where}: {value!r:.40} is not a finite number in [{low:g}, {high:g}]")
    return float(value)


def _list(data: dict, key: str, where: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ProfileError(f"{where}: {key} must be a list")
    return value


def _stage_from_dict(entry: dict, where: str) -> StageTiming:
    if not isinstance(entry, dict) or "stage" not in entry:
        raise ProfileError(f"{where}: each stage needs a 'stage' index")
    kinds = {}
    for kind in KINDS + INFERENCE_KINDS:
        if kind not in entry:
            continue
        fields = entry[kind]
        names = ("median_ms", "p10_ms", "p90_ms", "samples")
        if not isinstance(fields, dict) or any(name not in fields for name in names):
            raise ProfileError(f"{where}.{kind}: needs median_ms, p10_ms, p90_ms, samples")
        times = [_number(fields[n], f"{where}.{kind}.{n}", _MS) for n in names[:3]]
        samples = int(_number(fields["samples"], f"{where}.{kind}.samples", _COUNT))
        kinds[kind] = Spread(*times, samples)
    if "F" not in kinds and not set(INFERENCE_KINDS) <= set(kinds):
        raise ProfileError(
            f"{where}: a stage needs at least a forward time 'F' (or 'prefill' and 'decode')"
        )
    index = int(_number(entry["stage"], f"{where}.stage", _COUNT))
    size = _number(entry.get("activation_bytes", 0.0), f"{where}.activation_bytes", _BYTES)
    return StageTiming(index, kinds, size)


def _link_from_dict(entry: dict, where: str) -> LinkFit:
    if not isinstance(entry, dict) or "name" not in entry or "latency_us" not in entry:
        raise ProfileError(f"{where}: a link needs name, latency_us and bandwidth_gbps")
    bandwidth = entry.get("bandwidth_gbps")
    points = entry.get("points", [])
    if not isinstance(points, list) or not all(isinstance(p, list) and len(p) == 2 for p in points):
        raise ProfileError(f"{where}.points: must be a list of [bytes, ms] pairs")
    return LinkFit(
        str(entry["name"])[:200],
        _number(entry["latency_us"], f"{where}.latency_us", (0.0, 1e15)),
        math.inf
        if bandwidth is None
        else _number(bandwidth, f"{where}.bandwidth_gbps", (1e-6, 1e9)),
        tuple(
            (_number(b, f"{where}.points", _BYTES), _number(t, f"{where}.points", _MS))
            for b, t in points
        ),
    )


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


MAX_PROFILE_BYTES = 64 << 20


def load_profile(path: str | Path) -> Profile:
    """Read a profile file (a regular file of at most 64 MiB of UTF-8 JSON); a missing,
    special or malformed file raises ProfileError naming it."""
    text = read_text_file(path, MAX_PROFILE_BYTES, ProfileError, what="profile file")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ProfileError(f"{path}: cannot read profile (nested too deeply)") from None
    except ValueError as exc:
        raise ProfileError(f"{path}: cannot read profile ({_first_line(exc)})") from None
    return profile_from_dict(data, str(path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


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
        if f is None:
            raise ProfileError(
                f"stage {timing.stage}: the profile has no forward time F (only prefill and "
                "decode: it is for pipeline.mode: decode)"
            )
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
