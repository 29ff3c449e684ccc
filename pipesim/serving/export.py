"""A serving run's records as files: one CSV line per request, and a Chrome trace.

The per-request CSV is what a spreadsheet or pandas reads to slice latencies by prompt
length or replica: ``id, replica, arrival_s, prompt_tokens, output_tokens, status,
ttft_ms, tpot_ms, e2e_ms, queue_ms, preemptions``. ``status`` is ``finished`` or
``rejected`` (a request too large for a replica's KV cache, or a prompt over
``max_num_batched_tokens`` without chunked prefill); a rejected request's latencies are
empty, and so is the TPOT of a one-token answer.

The Chrome trace (Perfetto, ``chrome://tracing``) draws the run as a serving engine's
profiler would:

* one process per replica, one thread per pipeline stage, and a complete event (``X``)
  for each iteration on each stage (its batch size, prefill tokens and decoding
  sequences in ``args``);
* each request's life as an async span (``b``/``e``) on its replica, split into nested
  ``queued`` (arrival to its first iteration), ``prefill`` (to its first token) and
  ``decoding`` (to its last token);
* counters (``C``) per replica: KV blocks in use and sequences running after every
  scheduling step, and the batch size of each iteration as it starts;
* rejected requests as instant events (``i``) on a process of their own.

Functions return text or data; writing files is left to the caller. The same records
give the same bytes.
"""

from __future__ import annotations

import math

import numpy as np

from pipesim.serving.report import ServeReport
from pipesim.serving.results import ServeResult

US_PER_S = 1e6  # trace times are microseconds, as in pipesim.sim.export
REQUEST_COLUMNS = (
    "id",
    "replica",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "status",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "queue_ms",
    "preemptions",
)


def _ms(value: float) -> str:
    """Milliseconds to the nanosecond; empty where the request never got there."""
    return "" if math.isnan(value) else f"{value * 1e3:.6f}"


def requests_csv(result: ServeResult) -> str:
    """One line per request, in request order (see the module's docstring)."""
    r = result.requests
    columns = (
        r.id,
        r.replica,
        r.arrival_s,
        r.prompt_tokens,
        r.output_tokens,
        r.rejected,
        r.ttft_s,
        r.tpot_s,
        r.e2e_s,
        r.queue_s,
        r.preemptions,
    )
    lines = [",".join(REQUEST_COLUMNS)]
    for row in zip(*(np.asarray(c).tolist() for c in columns), strict=True):
        ident, replica, arrival, prompt, output, rejected, ttft, tpot, e2e, queue, pre = row
        status = "rejected" if rejected else "finished"
        lines.append(
            f"{ident},{replica},{arrival:.9f},{prompt},{output},{status},"
            f"{_ms(ttft)},{_ms(tpot)},{_ms(e2e)},{_ms(queue)},{pre}"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Chrome trace


def to_chrome_trace(result: ServeResult, label: str = "pipesim serve") -> dict:
    """The run in Chrome's trace event format (object form), times in microseconds."""
    replicas = len(result.kv_blocks)
    events = _metadata(replicas, result.stages, label)
    events += iteration_events(result)
    events += request_spans(result)
    events += counter_events(result)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": label}}


def _metadata(replicas: int, stages: int, label: str) -> list[dict]:
    def meta(kind: str, pid: int, tid: int, args: dict) -> dict:
        return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}

    events = []
    for r in range(replicas):
        events.append(meta("process_name", r, 0, {"name": f"{label}: replica {r}"}))
        events.append(meta("process_sort_index", r, 0, {"sort_index": r}))
        events += [meta("thread_name", r, s, {"name": f"stage {s}"}) for s in range(stages)]
        events.append(meta("thread_name", r, stages, {"name": "requests"}))
    events.append(meta("process_name", replicas, 0, {"name": f"{label}: rejected"}))
    events.append(meta("process_sort_index", replicas, 0, {"sort_index": replicas}))
    return events


def iteration_events(result: ServeResult) -> list[dict]:
    """One complete event per iteration per stage."""
    log = result.iterations
    events = []
    columns = (log.replica, log.engine, log.batch_size, log.prefill_tokens, log.decode_seqs)
    rows = zip(*(np.asarray(c).tolist() for c in columns), strict=True)
    starts, ends = log.start_s.tolist(), log.end_s.tolist()
    for i, (replica, engine, size, prefill, decode) in enumerate(rows):
        name = "prefill+decode" if prefill and decode else ("prefill" if prefill else "decode")
        args = {
            "iteration": i,
            "engine": engine,
            "batch_size": size,
            "prefill_tokens": prefill,
            "decode_seqs": decode,
        }
        for stage, (start, end) in enumerate(zip(starts[i], ends[i], strict=True)):
            events.append(
                {
                    "name": name,
                    "cat": "iteration",
                    "ph": "X",
                    "ts": start * US_PER_S,
                    "dur": (end - start) * US_PER_S,
                    "pid": replica,
                    "tid": stage,
                    "args": args,
                }
            )
    return events


def request_spans(result: ServeResult) -> list[dict]:
    """Each served request's async span with its three phases; rejected ones as instants."""
    r = result.requests
    replicas, stages = len(result.kv_blocks), result.stages
    columns = (
        r.id,
        r.replica,
        r.rejected,
        r.arrival_s,
        r.first_scheduled_s,
        r.first_token_s,
        r.finish_s,
        r.prompt_tokens,
        r.output_tokens,
    )
    events: list[dict] = []
    for row in zip(*(np.asarray(c).tolist() for c in columns), strict=True):
        ident, replica, rejected, arrival, scheduled, first, finish, prompt, output = row
        if rejected:
            events.append(
                {
                    "name": f"request {ident} rejected",
                    "cat": "request",
                    "ph": "i",
                    "s": "p",
                    "ts": arrival * US_PER_S,
                    "pid": replicas,
                    "tid": 0,
                    "args": {"prompt_tokens": prompt, "output_tokens": output},
                }
            )
            continue
        base = {"cat": "request", "id": ident, "pid": replica, "tid": stages}
        marks = (
            (f"request {ident}", arrival, finish),
            ("queued", arrival, scheduled),
            ("prefill", scheduled, first),
            ("decoding", first, finish),
        )
        args = {"prompt_tokens": prompt, "output_tokens": output}
        for n, (name, start, end) in enumerate(marks):
            events.append(
                {
                    **base,
                    "name": name,
                    "ph": "b",
                    "ts": start * US_PER_S,
                    **({"args": args} if n == 0 else {}),
                }
            )
            if n == 0:
                continue
            events.append({**base, "name": name, "ph": "e", "ts": end * US_PER_S})
        events.append({**base, "name": marks[0][0], "ph": "e", "ts": finish * US_PER_S})
    return events


def counter_events(result: ServeResult) -> list[dict]:
    """KV blocks in use and sequences running per replica, and each iteration's batch."""
    t = result.timeline
    rows = zip(
        t.time_s.tolist(),
        t.replica.tolist(),
        t.kv_blocks_used.tolist(),
        t.running.tolist(),
        strict=True,
    )
    events = [
        {
            "name": "KV cache",
            "ph": "C",
            "ts": time * US_PER_S,
            "pid": replica,
            "args": {"blocks used": used, "sequences running": running},
        }
        for time, replica, used, running in rows
    ]
    log = result.iterations
    first_stage = log.start_s[:, 0].tolist() if len(log) else []
    events += [
        {
            "name": "batch size",
            "ph": "C",
            "ts": start * US_PER_S,
            "pid": replica,
            "args": {"sequences": size},
        }
        for start, replica, size in zip(
            first_stage, log.replica.tolist(), log.batch_size.tolist(), strict=True
        )
    ]
    return events


# ---------------------------------------------------------------------------
# The report as one row


def report_scalars(report: ServeReport) -> dict[str, float | int | None]:
    """The report's numbers as one flat row (``ttft_ms_p99``, ``kv_utilization_mean``...),
    for CSV output and sweep tables; per-device figures are left out. An undefined
    latency's cells are ``None`` (empty in CSV)."""
    row: dict[str, float | int | None] = {}
    for name, value in report.to_dict().items():
        if isinstance(value, dict):
            row.update({f"{name}_{k}": v for k, v in value.items()})
        elif not isinstance(value, list):
            row[name] = value
    return row
