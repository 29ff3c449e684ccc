"""The JSON form of a measured run (``crosscheck --save-runs``), read as untrusted input.

A run file comes from a user: every key is checked before a number of it is used, and
every problem is one line naming the file and the key (``ranks[1][4]: end_ms: ...``). The
checks return plain data; ``pipesim.calibrate.realrun`` builds its ``MeasuredRun`` of it.
Times must be finite and a span may not end before it starts, so that a fit of such runs
cannot write a negative or NaN time into a profile.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipesim.scenario.load import parse_text, read_text_file
from pipesim.scenario.schema import ScenarioError
from pipesim.schedules.ir import Action, ScheduleError, from_csv, parse_action

ACTION, WAIT, COMPUTE = "action", "wait", "compute"
SpanData = tuple[str, str, float, float]  # category, name, start_ms, end_ms


def read_run_json(path: str | Path, error: type[Exception]) -> object:
    """The parsed JSON of a run file: a regular file of at most ``MAX_RUN_BYTES``, nested
    at most 64 levels deep; ``error`` (one line naming the file) otherwise."""
    text = read_text_file(path, MAX_RUN_BYTES, error, what="run file")
    try:
        return parse_text(text, ".json", str(path))
    except ScenarioError as exc:
        raise error(exc.line) from None


def check_run(
    data: object, where: str, error: type[Exception]
) -> tuple[str, int, dict, list[list[SpanData]]]:
    """``(schedule name, devices, meta, spans per rank)`` of a run's JSON form; ``error``
    naming ``where`` and the key for anything missing, mistyped or out of range."""

    def expect(ok: bool, at: str, key: str, wanted: str, got: object) -> None:
        if not ok:
            shown = "nothing" if got is None else f"{type(got).__name__} {got!r:.40}"
            raise error(f"{at}: {key}: expected {wanted}, got {shown}")

    expect(isinstance(data, dict), where, "top level", "an object", data)
    expect(data.get("format", RUN) == RUN, where, "format", RUN, data.get("format"))
    name, devices, meta, ranks = (data.get(k) for k in ("schedule", "devices", "meta", "ranks"))
    expect(isinstance(name, str), where, "schedule", "a schedule name", name)
    csv = meta.get("csv") if isinstance(meta, dict) else None
    expect(isinstance(csv, str), where, "meta.csv", "the schedule as CSV text", csv)
    try:
        schedule = from_csv(csv, name)
    except ScheduleError as exc:
        raise error(f"{where}: meta.csv: {exc}".splitlines()[0]) from None
    ok = type(devices) is int and devices == schedule.devices
    expect(ok, where, "devices", f"{schedule.devices}, the schedule's", devices)
    ok = isinstance(ranks, list) and len(ranks) == devices
    expect(ok, where, "ranks", f"a list of {devices} lists of spans", ranks)
    atoms = {_key(a) for actions in schedule.device_actions for x in actions for a in x.atoms}
    spans = list(
        _spans(spans, atoms, expect, f"{where}: ranks[{r}]") for r, spans in enumerate(ranks)
    )
    if not any(span[0] == COMPUTE for rank in spans for span in rank):
        raise error(f"{where}: ranks: no compute spans (a run needs the actions it timed)")
    return name, devices, dict(meta), spans


RUN, MAX_RUN_BYTES = "pipesim-run", 256 << 20
MAX_TIME_MS = 1e11  # |time| on perf_counter's clock: three years


def _spans(spans: object, atoms: set, expect: Callable, where: str) -> list[SpanData]:
    expect(isinstance(spans, list), where, "spans", "a list of spans", spans)
    out = []
    for index, span in enumerate(spans):
        at = f"{where}[{index}]"
        expect(isinstance(span, dict), at, "span", "an object", span)
        kind, name, start, end = (span.get(k) for k in ("category", "name", "start_ms", "end_ms"))
        expect(kind in (ACTION, WAIT, COMPUTE), at, "category", "action, wait or compute", kind)
        expect(isinstance(name, str), at, "name", "an action's text form", name)
        for key, value in (("start_ms", start), ("end_ms", end)):
            ok = type(value) in (int, float) and abs(value) <= MAX_TIME_MS
            expect(ok, at, key, f"a finite number of ms within ±{MAX_TIME_MS:g}", value)
        ok = end == start or end - start >= 1e-6  # a measured span lasts 0 or >= 1 ns
        expect(ok, at, "end_ms", f"start_ms ({start!r}) or at least 1 ns after it", end)
        key = _action_key(name) if kind == COMPUTE else None
        expect(
            kind != COMPUTE or key in atoms, at, "name", "a compute action of the schedule", name
        )
        out.append((kind, name, float(start), float(end)))
    return out


def _key(action: Action) -> tuple:
    return (action.stage, action.kind, action.microbatch)


def _action_key(name: str) -> tuple | None:
    try:
        return _key(parse_action(name))
    except ScheduleError:
        return None
