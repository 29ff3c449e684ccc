"""How far pipesim's numbers land from published measurements, for a scenario's regime.

pipesim's timelines are exact for the costs they are given; model-derived costs are where
it is wrong, and by how much depends on the regime: the GPU, the scale, the quantity (step
time, peak memory, TTFT, TPOT). The ledger of published runs lives with the tests
(``tests/cluster/data/published_runs.csv`` and its siblings, each row marked calibration
or held out); ``python -m tests.cluster.accuracy_bands --write`` summarises it per regime
into ``pipesim/data/accuracy.json``, which ships with the package, and a test keeps the
two in step. This module reads that summary and picks the band of a scenario: the
held-out rows' median and largest |error| where the regime has held-out rows, all its
rows' otherwise, and where it has none, says so and names the nearest regime that has.
A mixture-of-experts model's step time has regimes of its own (``step_time/H100/9-1024/moe``):
its all-to-alls and many small experts miss in ways a dense step does not, and the two
kinds of run never share a band.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from pipesim.cluster.hardware import GPU_PROFILES
from pipesim.cluster.transformer import stage_parameters
from pipesim.scenario.build import Scenario
from pipesim.scenario.derive import build_job
from pipesim.scenario.schema import Mode, ScenarioSpec

FORMAT, VERSION = "pipesim-accuracy", 1
# What each quantity is called in a sentence, and what one ledger row of it is.
QUANTITIES = {
    "step_time": ("step time", "run"),
    "schedule_ratio": ("schedule ratio", "schedule pair"),
    "peak_memory": ("peak memory", "measurement"),
    "ttft": ("TTFT", "measurement"),
    "tpot": ("TPOT", "measurement"),
}
# Step-time regimes split by scale: one node, up to 1,024 GPUs, more (upper bound, key).
SIZE_CLASSES = ((8, "1-8"), (1024, "9-1024"), (None, "over-1024"))
SIZE_WORDS = {"1-8": "1-8 GPUs", "9-1024": "9-1,024 GPUs", "over-1024": "over 1,024 GPUs"}
GIVEN, PROFILE = "given_costs", "profile"


def family(gpu: str) -> str:
    """A GPU type's family as the ledger groups it: ``h100-sxm`` -> ``H100``."""
    return gpu.split("-")[0].upper()


def size_class(gpus: int) -> str:
    return next(key for bound, key in SIZE_CLASSES if bound is None or gpus <= bound)


def regime_key(quantity: str, gpu: str, gpus: int | None = None, moe: bool = False) -> str:
    """``step_time/H100/9-1024``: the quantity, the GPU family, and for step time the
    scale, then ``/moe`` for a mixture-of-experts model's; the other quantities are one
    regime per family."""
    parts = [quantity, family(gpu)]
    if quantity == "step_time":
        parts.append(size_class(gpus or 1))
        if moe:
            parts.append("moe")
    return "/".join(parts)


@cache
def ledger() -> dict[str, Any]:
    """The packaged summary (``pipesim/data/accuracy.json``)."""
    text = resources.files("pipesim").joinpath("data", "accuracy.json").read_text("utf-8")
    return json.loads(text)


@dataclass(frozen=True, slots=True)
class AccuracyBand:
    """The error to expect on one quantity of a scenario. ``median_pct`` and ``max_pct``
    are |error| in percent over ``basis`` (``held_out`` rows, or ``all`` where the regime
    has none held out); None where the regime has no row (``nearest`` names the regime
    the text quotes instead) or the costs were given (the timeline is exact for them)."""

    regime: str
    quantity: str
    costs: str  # model-derived | given | profile
    rows: int
    held_out: int
    median_pct: float | None
    max_pct: float | None
    text: str
    basis: str | None = None
    nearest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def band(
    quantity: str,
    gpu: str | None,
    gpus: int | None = None,
    parameters: float | None = None,
    data: dict[str, Any] | None = None,
    moe: bool = False,
) -> AccuracyBand:
    """The band of a model-derived ``quantity`` on ``gpus`` GPUs of type ``gpu`` (a model
    of ``parameters`` weights, for the note that it lies outside the rows' range; ``moe``:
    a mixture-of-experts model, whose step time has regimes of its own)."""
    regimes = {r["key"]: r for r in (data or ledger())["regimes"]}
    name = QUANTITIES[quantity][0]
    if gpu is None:
        text = f"model-derived {name}: no GPU named (hardware.gpu), so no published row applies"
        return AccuracyBand(quantity, quantity, "model-derived", 0, 0, None, None, text)
    moe = moe and quantity == "step_time"
    key = regime_key(quantity, gpu, gpus, moe)
    found = regimes.get(key)
    if found is not None and found["rows"]:
        held = found["held_out"]
        basis = "held_out" if held else "all"
        median = found["held_out_median_pct" if held else "median_pct"]
        largest = found["held_out_max_pct" if held else "max_pct"]
        text = f"model-derived {name}: {regime_text(found)}{_outside(found, gpus, parameters)}"
        return AccuracyBand(
            key, quantity, "model-derived", found["rows"], held, median, largest, text, basis
        )
    what = f"{family(gpu)} {'MoE ' * moe}{QUANTITIES[quantity][1]}"
    if quantity == "step_time" and any(
        r["quantity"] == quantity and r["family"] == family(gpu) and _moe(r) == moe
        for r in regimes.values()
    ):
        what += f" of {SIZE_WORDS[size_class(gpus or 1)]}"
    text = f"model-derived {name}: no published {what} in pipesim's ledger"
    near = nearest(key, gpu, regimes)
    if near is not None:
        text += f"; nearest: {regime_text(regimes[near])}"
    return AccuracyBand(key, quantity, "model-derived", 0, 0, None, None, text, nearest=near)


def nearest(key: str, gpu: str, regimes: dict[str, dict[str, Any]]) -> str | None:
    """The regime with rows nearest ``key``: the same family if it has rows, else the
    family whose GPU's peak TFLOP/s is closest to ``gpu``'s (unknown GPUs: most rows); in
    that family, for step time, the closest scale."""
    quantity, fam = key.split("/")[:2]
    moe = key.endswith("/moe")
    candidates = [
        r for r in regimes.values() if r["quantity"] == quantity and r["rows"] and _moe(r) == moe
    ]
    if not candidates:
        return None
    if not any(r["family"] == fam for r in candidates):
        peak = GPU_PROFILES[gpu].peak_tflops if gpu in GPU_PROFILES else None

        def distance(regime: dict[str, Any]) -> tuple[float, int]:
            peaks = [GPU_PROFILES[g].peak_tflops for g in regime["gpu_types"] if g in GPU_PROFILES]
            gap = abs(peaks[0] - peak) if peak is not None and peaks else float("inf")
            return gap, -regime["rows"]

        fam = min(candidates, key=distance)["family"]
    same = [r for r in candidates if r["family"] == fam]
    if quantity != "step_time":
        return same[0]["key"]
    order = [k for _, k in SIZE_CLASSES]
    here = order.index(key.split("/")[2])
    return min(same, key=lambda r: (abs(order.index(r["size"]) - here), -r["rows"]))["key"]


def _moe(regime: dict[str, Any]) -> bool:
    return bool(regime.get("moe"))


def regime_text(regime: dict[str, Any]) -> str:
    """``typically within ±3.1% (max 11.1%) on the 3 held-out of 6 published H100 runs of
    48-768 GPUs``: the held-out rows' |error| where there are any, all rows' otherwise
    (and "typically", the median, only from three rows up)."""
    held, rows = regime["held_out"], regime["rows"]
    median = regime["held_out_median_pct" if held else "median_pct"]
    largest = regime["held_out_max_pct" if held else "max_pct"]
    within = (
        f"typically within ±{median:.1f}% (max {largest:.1f}%)"
        if (held or rows) >= 3
        else f"within ±{largest:.1f}%"
    )
    noun = "MoE " * _moe(regime) + QUANTITIES[regime["quantity"]][1] + ("s" if rows != 1 else "")
    on = f"the {held} held-out of {rows}" if held else f"{rows}"
    text = f"{within} on {on} published {regime['family']} {noun}{_scale_words(regime)}"
    return text if held else text + " (calibration rows: none held out)"


def _scale_words(regime: dict[str, Any]) -> str:
    low, high = regime["gpus"]
    if regime["quantity"] != "step_time":
        return f" on {_range(low, high)} GPU{'s' * (high > 1)}"
    return f" of {_range(low, high)} GPUs"


def _range(low: float, high: float) -> str:
    return f"{low:,.0f}" if low == high else f"{low:,.0f}-{high:,.0f}"


def _outside(regime: dict[str, Any], gpus: int | None, parameters: float | None) -> str:
    """A caveat where the scenario's scale lies beyond the rows the band is made of."""
    notes = []
    span = regime.get("parameters")
    if parameters and span and not span[0] * 0.9 <= parameters <= span[1] * 1.1:
        notes.append(
            f"this model's {parameters / 1e9:,.1f}B parameters lie outside the rows' "
            f"{span[0] / 1e9:,.1f}B-{span[1] / 1e9:,.1f}B"
        )
    low, high = regime["gpus"]
    if gpus and not low / 2 <= gpus <= high * 2:
        notes.append(f"its {gpus:,} GPUs far outside their {_range(low, high)}")
    return f"; {', '.join(notes)}" if notes else ""


def given_band(kind: str, data: dict[str, Any] | None = None) -> AccuracyBand:
    """Costs typed by hand (``given_costs``) or measured (``profile``): the timeline is
    exact for them; the text says what is and is not known beyond that."""
    regime = next(r for r in (data or ledger())["regimes"] if r["key"] == kind)
    costs = "given" if kind == GIVEN else "profile"
    return AccuracyBand(kind, "step_time", costs, 0, 0, None, None, regime["text"])


# ---------------------------------------------------------------------------
# Scenarios


def parameter_count(spec: ScenarioSpec, source: str) -> float | None:
    """The model's weights (embedding and head included), None without a model."""
    if spec.model is None:
        return None
    model = build_job(spec, source).model
    return float(sum(stage_parameters(model, (model.layers,))))


def costs_kind(spec: ScenarioSpec) -> str | None:
    """``given_costs``, ``profile``, or None where the model derives the costs."""
    if spec.costs.profile is not None:
        return PROFILE
    return GIVEN if spec.model is None else None


def scenario_bands(scenario: Scenario) -> dict[str, AccuracyBand]:
    """``pipesim run``'s bands: step time (in decode mode TTFT and TPOT) and, with a
    model, peak memory."""
    spec = scenario.spec
    kind = costs_kind(spec)
    if kind is not None:
        return {"step_time": given_band(kind)}
    par = spec.parallel
    gpus = scenario.schedule.devices * par.tensor * par.data * getattr(par, "context", 1)
    params = parameter_count(spec, scenario.name)
    gpu = spec.hardware.gpu
    if scenario.mode == Mode.DECODE:
        per_replica = scenario.schedule.devices * spec.parallel.tensor
        return {q: band(q, gpu, per_replica, params) for q in ("ttft", "tpot")}
    step = band("step_time", gpu, gpus, params, moe=spec.model.moe is not None)
    if scenario.mode == Mode.FORWARD:
        step = forward_band(step)
    return {"step_time": step, "peak_memory": band("peak_memory", gpu, gpus, params)}


def forward_band(step: AccuracyBand) -> AccuracyBand:
    """A forward-only step: the ledger holds training steps only; quote them as nearest."""
    quoted = step.text.removeprefix("model-derived step time: ")
    text = f"model-derived forward time: no published forward-only run; nearest: {quoted}"
    nearest_key = step.nearest or step.regime
    return AccuracyBand(
        step.regime, "step_time", step.costs, 0, 0, None, None, text, nearest=nearest_key
    )


def serving_bands(spec: ScenarioSpec, costs_from: str, source: str) -> dict[str, AccuracyBand]:
    """``pipesim serve``'s bands, TTFT and TPOT, for a replica's GPUs (``costs_from``:
    ``model``, ``hand-typed`` or ``profile``, as the serving scenario says)."""
    if costs_from != "model":
        kind = PROFILE if costs_from == "profile" else GIVEN
        return {"latency": given_band(kind)}
    gpus = (spec.pipeline.devices or 1) * spec.parallel.tensor
    params = parameter_count(spec, source)
    return {q: band(q, spec.hardware.gpu, gpus, params) for q in ("ttft", "tpot")}
