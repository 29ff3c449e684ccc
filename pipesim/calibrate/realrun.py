"""Run a pipesim schedule for real with torch.distributed.pipelining and time every action.

The schedule travels as torch's compute-only CSV into ``_PipelineScheduleRuntime``, which
adds the sends and receives itself (``_add_send_recv``) and runs one action after another
on each rank, wrapping each in ``record_function("PP:<action>")``. pipesim listens at three
points, all on the shared monotonic clock of ``time.perf_counter``:

* ``action``: each ``PP:<action>`` span, sends and receives included (the runtime looks
  ``record_function`` up in its module at call time, so a recording wrapper is swapped in);
* ``wait``: each wait for a receive (``_wait_batch_p2p``), i.e. time a rank sat blocked;
* ``compute``: the stage's own forward / backward call, which is the action proper.

Processes talk over gloo on CPU (NCCL when every rank has a GPU). One process group runs
several jobs (schedules) in a row, each with one warm-up step and ``runs`` timed steps,
separated by barriers; raw timings come back as ``RankLog`` lists.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipesim.calibrate.ops import StageSpec, build_stage, make_input
from pipesim.calibrate.run_file import ACTION, COMPUTE, WAIT, check_run, read_run_json
from pipesim.schedules.ir import Schedule, from_csv, to_csv


class RealRunError(RuntimeError):
    """A real pipeline run failed or timed out (one line, with the failing rank's error)."""


@dataclass(frozen=True, slots=True)
class Span:
    """One timed interval on a rank; times in ms on the shared clock, ``name`` is IR text."""

    category: str
    name: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class Job:
    """One schedule to run: ``warmup`` untimed steps, ``calibration`` steps, ``runs`` steps.

    ``specs`` gives each model stage's computation (one spec applies to every stage).
    Calibration steps are timed like the others but kept apart, so host overhead can be
    fitted on steps that the reported figures do not use.
    """

    schedule: Schedule
    specs: tuple[StageSpec, ...]
    runs: int = 5
    warmup: int = 1
    calibration: int = 1

    def spec(self, stage: int) -> StageSpec:
        model_stage = self.schedule.model_stage(stage)
        return self.specs[0] if len(self.specs) == 1 else self.specs[model_stage]


@dataclass(frozen=True)
class MeasuredRun:
    """The spans of every rank for one timed step of one job."""

    schedule_name: str
    devices: int
    ranks: tuple[tuple[Span, ...], ...]
    meta: dict = field(default_factory=dict)
    source: str = field(default="", compare=False)  # the file it was read from, if any

    def to_dict(self) -> dict:
        return {
            "format": "pipesim-run",
            "version": 1,
            "schedule": self.schedule_name,
            "devices": self.devices,
            "meta": self.meta,
            "ranks": [[asdict(s) for s in spans] for spans in self.ranks],
        }

    @staticmethod
    def read(path: str | Path) -> MeasuredRun:
        """A run saved by ``crosscheck --save-runs``, through pipesim's narrow file door (a
        regular file, JSON nested at most 64 levels deep, every key checked)."""
        return MeasuredRun.from_dict(read_run_json(path, RunFileError), str(path))

    @staticmethod
    def from_dict(data: object, where: str = "run") -> MeasuredRun:
        """A run from its JSON form; RunFileError names the key that is missing, of the
        wrong type or out of range (times finite, a span's end not before its start)."""
        name, devices, meta, ranks = check_run(data, where, RunFileError)
        spans = tuple(tuple(Span(*s) for s in rank) for rank in ranks)
        return MeasuredRun(name, devices, spans, meta, source=where)


class RunFileError(RealRunError):
    """A run file that cannot be read (one line naming the file and the key)."""


def run_jobs(
    jobs: list[Job], *, backend: str | None = None, timeout_s: float = 300.0
) -> list[tuple[list[MeasuredRun], list[MeasuredRun]]]:
    """Run each job on ``devices`` spawned processes.

    Returns, per job, ``(calibration_runs, timed_runs)``.
    """
    import torch
    import torch.multiprocessing as mp

    world = jobs[0].schedule.devices
    if any(j.schedule.devices != world for j in jobs):
        raise ValueError("all jobs of one run_jobs call need the same number of devices")
    if backend is None:
        backend = (
            "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo"
        )
    with tempfile.TemporaryDirectory(prefix="pipesim-run-") as folder:
        for job in jobs:
            _check_runnable(job)
        payload = [
            (
                to_csv(j.schedule),
                j.schedule.name,
                [asdict(j.spec(s)) for s in range(j.schedule.stages)],
                j.calibration + j.runs,
                j.warmup,
            )
            for j in jobs
        ]
        context = mp.get_context("spawn")
        port = free_port()
        procs = [
            context.Process(
                target=_worker, args=(rank, world, port, backend, payload, folder, timeout_s)
            )
            for rank in range(world)
        ]
        for proc in procs:
            proc.start()
        _join(procs, folder, timeout_s)
        logs = [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(world)]
    return [_collect(job, index, logs, backend) for index, job in enumerate(jobs)]


def _join(procs, folder: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for proc in alive:
        proc.kill()
        proc.join()
    errors = sorted(Path(folder).glob("rank*.err"))
    if errors:
        raise RealRunError(errors[0].read_text().strip().splitlines()[-1])
    if alive or any(p.exitcode != 0 for p in procs):
        raise RealRunError(
            f"the real run did not finish within {timeout_s:.0f} s or a rank crashed"
        )


def _check_runnable(job: Job) -> None:
    schedule = job.schedule
    if len(schedule.chains) != 1:
        raise RealRunError(
            f"{schedule.name}: real runs take one pipeline chain, this schedule has {len(schedule.chains)}"
        )
    if any(a.sub_actions is not None for actions in schedule.device_actions for a in actions):
        raise RealRunError(f"{schedule.name}: overlapped F/B actions are not timed in real runs")
    if len(job.specs) not in (1, schedule.model_stages):
        raise ValueError(f"give 1 or {schedule.model_stages} stage specs, got {len(job.specs)}")


def _collect(job: Job, index: int, logs: list[dict], backend: str) -> tuple[list, list]:
    runs = []
    for run in range(job.calibration + job.runs):
        ranks = tuple(tuple(Span(*s) for s in log["jobs"][index][run]) for log in logs)
        meta = {
            "backend": backend,
            "csv": to_csv(job.schedule),
            "specs": [asdict(s) for s in job.specs],
            "role": "calibration" if run < job.calibration else "timed",
        }
        runs.append(MeasuredRun(job.schedule.name, job.schedule.devices, ranks, meta))
    return runs[: job.calibration], runs[job.calibration :]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------
# Inside each spawned process


def _worker(rank, world, port, backend, payload, folder, timeout_s) -> None:
    try:
        results = _run_rank(rank, world, port, backend, payload, timeout_s)
        Path(folder, f"rank{rank}.json").write_text(json.dumps({"jobs": results}))
    except BaseException as exc:
        Path(folder, f"rank{rank}.err").write_text(f"rank {rank}: {type(exc).__name__}: {exc}")
        raise SystemExit(1) from None


def _run_rank(rank, world, port, backend, payload, timeout_s) -> list:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
    )
    recorder = _Recorder()
    try:
        with recorder.installed():
            return [_run_job(rank, job, device, recorder) for job in payload]
    finally:
        dist.destroy_process_group()


def _run_job(rank, job, device, recorder) -> list:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    csv_text, name, stage_fields, runs, warmup = job
    specs = [StageSpec(**fields) for fields in stage_fields]
    schedule = from_csv(csv_text, name)
    mine = [s for s, d in enumerate(schedule.placement) if d == rank]
    stages = []
    for s in mine:
        module = build_stage(specs[s], seed=s, device=str(device))
        stage = PipelineStage(module, s, schedule.stages, device)
        recorder.watch(stage, s)
        stages.append(stage)
    runtime = _PipelineScheduleRuntime(
        stages, n_microbatches=schedule.microbatches, loss_fn=_loss, scale_grads=False
    )
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        handle.write(csv_text)
    runtime._load_csv(handle.name)
    os.unlink(handle.name)
    m = schedule.microbatches
    generator = torch.Generator().manual_seed(1234)
    results = []
    for step in range(warmup + runs):
        whole = StageSpec(**{**stage_fields[0], "batch": specs[0].batch * m})
        batch = make_input(whole, generator, str(device))
        kwargs = {}
        if 0 in mine:
            kwargs["args"] = (batch,)
        if schedule.stages - 1 in mine:
            kwargs.update(target=torch.zeros_like(batch), losses=[])
        for stage in stages:
            for p in stage.submod.parameters():
                p.grad = None
        dist.barrier()
        recorder.reset()
        runtime.step(*kwargs.pop("args", ()), **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        if step >= warmup:
            results.append([list(s) for s in recorder.spans])
    return results


def _loss(output, target):
    return ((output - target) ** 2).mean()


class _Recorder:
    """Collects spans on this rank: PP actions, receive waits, and stage compute calls."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, float, float]] = []
        self.cuda = False

    def reset(self) -> None:
        self.spans = []

    def _now_ms(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter() * 1000.0

    def installed(self):
        from contextlib import contextmanager

        import torch
        from torch.distributed.pipelining import schedules

        self.cuda = torch.cuda.is_available() and torch.distributed.get_backend() == "nccl"
        original_record, original_wait = schedules.record_function, schedules._wait_batch_p2p
        recorder = self

        @contextmanager
        def record(name):
            start = recorder._now_ms()
            with original_record(name):
                yield
            recorder.spans.append((ACTION, name.removeprefix("PP:"), start, recorder._now_ms()))

        def wait(work):
            start = recorder._now_ms()
            result = original_wait(work)
            recorder.spans.append((WAIT, "", start, recorder._now_ms()))
            return result

        @contextmanager
        def swapped():
            schedules.record_function, schedules._wait_batch_p2p = record, wait
            try:
                yield
            finally:
                schedules.record_function, schedules._wait_batch_p2p = (
                    original_record,
                    original_wait,
                )

        return swapped()

    def watch(self, stage, index: int) -> None:
        """Time the stage's forward, backward and weight-backward calls as ``compute``."""
        recorder = self
        forward, backward, weight = (
            stage.forward_one_chunk,
            stage.backward_one_chunk,
            stage.backward_weight_one_chunk,
        )

        def timed(label, call, microbatch, *args, **kwargs):
            start = recorder._now_ms()
            result = call(microbatch, *args, **kwargs)
            recorder.spans.append(
                (COMPUTE, f"{index}{label}{microbatch}", start, recorder._now_ms())
            )
            return result

        def backward_call(microbatch, *args, **kwargs):
            full = kwargs.get("full_backward", True)
            return timed("B" if full else "I", backward, microbatch, *args, **kwargs)

        stage.forward_one_chunk = lambda mb, *a, **k: timed("F", forward, mb, *a, **k)
        stage.backward_one_chunk = backward_call
        stage.backward_weight_one_chunk = lambda mb, *a, **k: timed("W", weight, mb, *a, **k)
