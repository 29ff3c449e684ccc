"""Import PyTorch profiler (Kineto) traces of a real pipeline run.

torch.distributed.pipelining wraps every action it runs in
``record_function("PP:<action>")``, so a profiler trace of a real run names each action in
pipesim's own text form (``PP:2F0``, ``PP:1SEND_B3``). A Kineto trace is Chrome-trace JSON
(plain or gzipped), one file per rank; the user annotations appear as complete (``X``)
events with category ``user_annotation`` (host side) and, on a GPU, a second copy with
category ``gpu_user_annotation`` that spans the kernels the action launched.

The import takes the GPU-side spans when a trace has them (they measure the device's
work), else the CPU-side ones. On CPU a compute action's span also holds any time it
sat blocked on a receive, so the profile keeps medians, which such waits rarely move.
It returns a profile (per stage and kind: median, p10, p90) and the measured timeline as
a pipesim Trace, so a real run can be drawn and compared like a simulated one.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

from pipesim.scenario.load import MAX_DEPTH, check_depth, decode_text, read_file_bytes
from pipesim.scenario.profile import (
    KINDS,
    Profile,
    ProfileError,
    StageTiming,
    profile_from_dict,
    profile_to_dict,
    summarize,
)
from pipesim.schedules.ir import Action, ScheduleError, parse_action
from pipesim.sim.trace import trace_from_frame

PREFIX = "PP:"
HOST, DEVICE = "user_annotation", "gpu_user_annotation"

MAX_TRACE_BYTES = 1 << 30  # raw and decompressed: a long profiled run is hundreds of MB
MAX_TIME_US = 1e18  # |ts|: ~30,000 years of µs since any clock's epoch
MAX_DURATION_US = 1e15  # dur: 1e12 ms, the largest time a profile holds
MAX_RANKS = 1 << 16


class TraceImportError(ValueError):
    """A trace file that cannot be read or holds no ``PP:`` actions (one line, naming it)."""


@dataclass(frozen=True, slots=True)
class ActionSpan:
    """One ``PP:`` action span of one rank; times in ms from the earliest span of all ranks."""

    rank: int
    name: str
    start_ms: float
    end_ms: float
    source: str = ""  # the trace file it was read from

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


def read_profiler_trace(path: str | Path) -> dict:
    """Load a Kineto trace, plain JSON or gzipped, through narrow doors: a regular file of
    at most ``MAX_TRACE_BYTES`` (raw and decompressed), nested at most ``MAX_DEPTH`` deep."""
    path = Path(path)
    raw = read_file_bytes(path, MAX_TRACE_BYTES, TraceImportError, what="trace file")
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, path)
    try:
        data = json.loads(decode_text(raw, path, TraceImportError))
    except RecursionError:
        raise TraceImportError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise TraceImportError(f"{path}: not a readable profiler trace ({exc})") from None
    check_depth(data, str(path), TraceImportError)
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceImportError(f"{path}: no traceEvents list (is this a torch profiler trace?)")
    return data


def _gunzip(raw: bytes, path: Path) -> bytes:
    """The decompressed bytes, at most ``MAX_TRACE_BYTES`` of them (a small file can expand
    to gigabytes: only one byte more than the limit is ever decompressed)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
            data = stream.read(MAX_TRACE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceImportError(f"{path}: not a readable gzip file ({exc})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceImportError(
            f"{path}: expands to more than {MAX_TRACE_BYTES:,} bytes; at most "
            f"{MAX_TRACE_BYTES:,} bytes are read"
        )
    return data


def action_spans(data: dict, rank: int, where: str = "trace") -> list[tuple[str, float, float]]:
    """``(name, start_us, end_us)`` of the ``PP:`` spans of one trace, GPU-side if present.

    Every event must be an object; a ``PP:`` complete event needs numbers ``ts`` (finite)
    and ``dur`` (at least 0): TraceImportError names the event's index and field."""
    events = []
    for index, event in enumerate(data["traceEvents"]):
        if not isinstance(event, dict):
            raise TraceImportError(
                f"{where}: traceEvents[{index}]: expected an object, got {type(event).__name__}"
            )
        name = event.get("name")
        if event.get("ph") == "X" and isinstance(name, str) and name.startswith(PREFIX):
            events.append((index, event))
    device = [(i, e) for i, e in events if e.get("cat") == DEVICE]
    chosen = device if device else [(i, e) for i, e in events if e.get("cat") != DEVICE]
    if not chosen:
        raise TraceImportError(
            f"{where}: no PP:<action> spans (was the run profiled with record_function?)"
        )
    spans = []
    for index, event in chosen:
        at = f"{where}: traceEvents[{index}] ({event['name'][:40]!r})"
        start = _microseconds(event, "ts", at, MAX_TIME_US)
        spans.append((event["name"][len(PREFIX) :], start, start + _microseconds(event, "dur", at)))
    return sorted(spans, key=lambda s: s[1])


def _microseconds(event: dict, key: str, at: str, bound: float = MAX_DURATION_US) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        got = "nothing" if key not in event else type(value).__name__
        raise TraceImportError(f"{at}: {key}: expected a number of µs, got {got}")
    low = -bound if key == "ts" else 0.0
    if not low <= value <= bound:
        raise TraceImportError(
            f"{at}: {key}: {value!r:.40} is not a finite number of µs in [{low:g}, {bound:g}]"
        )
    return float(value)


def _rank(data: dict, position: int, where: str) -> int:
    info = data.get("distributedInfo", {})
    if not isinstance(info, dict):
        raise TraceImportError(
            f"{where}: distributedInfo: expected an object, got {type(info).__name__}"
        )
    rank = info.get("rank", position)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_RANKS:
        raise TraceImportError(
            f"{where}: distributedInfo.rank: {rank!r:.40}; expected a whole number "
            f"from 0 to {MAX_RANKS - 1}"
        )
    return rank


def import_traces(paths: list[str | Path]) -> list[ActionSpan]:
    """Every ``PP:`` span of every rank (file order = rank order), on one time axis."""
    if not paths:
        raise TraceImportError("give at least one trace file, one per rank")
    raw = []
    for position, path in enumerate(paths):
        data = read_profiler_trace(path)
        rank = _rank(data, position, str(path))
        raw += [(rank, *span, str(path)) for span in action_spans(data, rank, str(path))]
    origin = min(start for _, _, start, _, _ in raw)
    return [
        ActionSpan(r, n, (s - origin) / 1000.0, (e - origin) / 1000.0, path)
        for r, n, s, e, path in raw
    ]


def compute_actions(spans: list[ActionSpan]) -> list[tuple[ActionSpan, Action]]:
    """The spans that are compute actions (F, B, I, W, overlapped), parsed."""
    out = []
    for span in spans:
        try:
            out.append((span, parse_action(span.name)))
        except ScheduleError:
            continue  # SEND_F, RECV_B, UNSHARD, REDUCE_GRAD, ...: not compute
    return out


def profile_from_spans(spans: list[ActionSpan], provenance: dict | None = None) -> Profile:
    """Per stage and kind, the spread of the measured compute spans. A problem of the
    traces taken together (no compute at all, a stage without a forward) is one line
    naming the trace files (``provenance["traces"]``)."""
    info = {"source": "pipesim import-trace", **(provenance or {})}
    where = ", ".join(map(str, info.get("traces", ()))) or "the traces"
    table: dict[tuple[int, str], list[float]] = {}
    for span, action in compute_actions(spans):
        if action.sub_actions is None:
            table.setdefault((action.stage, str(action.kind)), []).append(span.duration_ms)
    if not table:
        names = sorted({span.name for span in spans})
        only = ", only " + ", ".join(names[:4] + ["..."] * (len(names) > 4)) if names else ""
        raise TraceImportError(
            f"{_sources(spans, where)}: no compute actions "
            f"(PP:<stage><F|B|I|W><microbatch> spans){only}"
        )
    stages = max(stage for stage, _ in table) + 1
    timings = []
    for stage in range(stages):
        kinds = {k: summarize(table[(stage, k)]) for k in KINDS if (stage, k) in table}
        if "F" not in kinds:
            raise ProfileError(_no_forward(spans, stage, stages))
        timings.append(StageTiming(stage, kinds))
    profile = Profile(tuple(timings), (), None, info)
    try:  # what is written must load: the events were checked, this is the last net
        profile_from_dict(profile_to_dict(profile), where)
    except ProfileError as exc:
        raise TraceImportError(str(exc)) from None
    return profile


def _sources(spans: list[ActionSpan], unknown: str = "the traces") -> str:
    """The trace files the spans came from, in order (``unknown`` where none is known)."""
    files = list(dict.fromkeys(span.source for span in spans if span.source))
    return ", ".join(files) if files else unknown


def _no_forward(spans: list[ActionSpan], stage: int, stages: int) -> str:
    """Why stage ``stage`` has no forward timing, naming the files that hold its other
    actions, or every file where none does."""
    own = [s for s, a in compute_actions(spans) if stage in (atom.stage for atom in a.atoms)]
    if own:
        return (
            f"{_sources(own)}: stage {stage} has no forward (no PP:{stage}F<microbatch> span); "
            "a profile needs every stage's forward"
        )
    return (
        f"{_sources(spans)}: no action of stage {stage}, though stages up to {stages - 1} "
        "ran; give the trace of every rank"
    )


def trace_from_spans(spans: list[ActionSpan]):
    """The measured compute timeline as a pipesim Trace (devices = ranks)."""
    import pandas as pd

    pairs = compute_actions(spans)
    rank_of: dict[int, int] = {}
    for span, action in pairs:
        for atom in action.atoms:
            rank_of.setdefault(atom.stage, span.rank)
    chunk = {s: sorted(t for t in rank_of if rank_of[t] == rank_of[s]).index(s) for s in rank_of}
    rows = {"device": [], "lane": [], "stage": [], "chunk": [], "microbatch": [], "kind": []}
    rows.update(start=[], end=[], peer=[])
    for span, action in pairs:
        rows["device"].append(span.rank)
        rows["lane"].append("compute")
        rows["stage"].append(action.stage)
        rows["chunk"].append(chunk.get(action.stage, -1))
        rows["microbatch"].append(action.microbatch)
        rows["kind"].append(str(action.kind))
        rows["start"].append(span.start_ms)
        rows["end"].append(span.end_ms)
        rows["peer"].append(-1)
    devices = max(span.rank for span in spans) + 1
    return trace_from_frame(pd.DataFrame(rows), devices, [a for _, a in pairs])
