"""The timing harness: time each stage's F, B, I and W, and fit point-to-point links.

Timing one action on a real machine gives a sample, not a number. The harness builds the
stage in torch, runs a few warm-up repetitions (allocator, caches, lazy initialisation),
then times at least 20 repetitions, each on a fresh random input, and keeps the median and
the 10th/90th percentiles. On a GPU each action sits between two CUDA events; on CPU
between ``perf_counter`` calls (CPU work is synchronous). Every action runs inside
``record_function("PP:<action>")`` so a profiler trace of the harness names it exactly as
torch.distributed.pipelining does.

The split backward is timed with torch's own ``stage_backward_input`` and
``stage_backward_weight`` (what the pipelining runtime calls for ``I`` and ``W``), the full
backward with ``stage_backward``. A first stage gets an input that needs no gradient, as in
a real pipeline, so its ``I`` is nearly free and, as torch does, its ``W`` is a full backward.

Links are timed by ping-pong between two processes (gloo on CPU; device-to-device and
host-device copies on a GPU) over a size sweep, and fitted as ``latency + bytes / bandwidth``
by least squares.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import numpy as np

from pipesim.calibrate.ops import StageSpec, build_stage, make_input
from pipesim.calibrate.realrun import free_port
from pipesim.scenario.profile import LinkFit, Profile, Spread, StageTiming, summarize

MIN_REPEATS = 20
DEFAULT_SIZES = (4_096, 65_536, 262_144, 1_048_576, 4_194_304)


class _Clock:
    """Times a callable: CUDA events on a GPU, perf_counter on CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def time_ms(self, name: str, call: Callable[[], object]) -> float:
        import torch
        from torch.profiler import record_function

        if self.cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            begin.record()
            with record_function(f"PP:{name}"):
                call()
            end.record()
            torch.cuda.synchronize()
            return float(begin.elapsed_time(end))
        start = time.perf_counter()
        with record_function(f"PP:{name}"):
            call()
        return (time.perf_counter() - start) * 1000.0


def time_stage(
    spec: StageSpec,
    stage: int = 0,
    *,
    first: bool = False,
    last: bool = False,
    repeats: int = MIN_REPEATS,
    warmup: int = 3,
    device: str = "cpu",
    seed: int = 0,
) -> dict[str, Spread]:
    """Median/p10/p90 of F, B, I and W of one stage over ``repeats`` fresh inputs (ms)."""
    import torch

    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be >= {MIN_REPEATS}, got {repeats}")
    module = build_stage(spec, seed=seed + stage, device=device)
    clock = _Clock(device)
    generator = torch.Generator().manual_seed(seed)
    samples: dict[str, list[float]] = {k: [] for k in ("F", "B", "I", "W")}

    def fresh_input():
        return make_input(spec, generator, device, requires_grad=not first)

    def forward():
        x = fresh_input()
        out = module(x)
        if last:
            return x, ((out - torch.zeros_like(out)) ** 2).mean(), None
        return x, out, torch.randn(out.shape, generator=generator).to(out)

    for rep in range(warmup + repeats):
        module.zero_grad(set_to_none=True)
        name = f"{stage}{{}}{rep}"
        timings = _time_actions(module, clock, fresh_input, forward, name, first)
        if rep >= warmup:
            for kind, value in zip("FBIW", timings, strict=True):
                samples[kind].append(value)
    return {kind: summarize(values) for kind, values in samples.items()}


def _time_actions(module, clock: _Clock, fresh_input, forward, name: str, first: bool) -> tuple:
    """One repetition: F, B, I and W, each on its own fresh forward pass."""
    from torch.distributed.pipelining._backward import (
        stage_backward,
        stage_backward_input,
        stage_backward_weight,
    )

    x = fresh_input()
    forward_ms = clock.time_ms(name.format("F"), lambda: module(x))
    x, out, grad = forward()
    full_ms = clock.time_ms(name.format("B"), lambda: stage_backward(out, grad, [x]))
    x, out, grad = forward()
    grads = None if grad is None else [grad]
    groups: list = []
    input_ms = clock.time_ms(
        name.format("I"),
        lambda: groups.append(stage_backward_input([out], grads, [x], module.parameters())),
    )
    param_groups = groups[0][1]
    if first:  # torch runs a first stage's W as a full backward (its input needs no grad)
        x, out, grad = forward()
        weight_ms = clock.time_ms(name.format("W"), lambda: stage_backward(out, grad, [x]))
    else:
        weight_ms = clock.time_ms(
            name.format("W"), lambda: stage_backward_weight(module.parameters(), param_groups)
        )
    return forward_ms, full_ms, input_ms, weight_ms


def profile_stages(
    specs: list[StageSpec], *, repeats: int = MIN_REPEATS, warmup: int = 3, device: str = "cpu"
) -> Profile:
    """A profile with one timed entry per model stage (first and last stages as in a pipeline)."""
    import torch

    torch.set_num_threads(1) if device == "cpu" else None
    count = len(specs)
    timings = []
    for stage, spec in enumerate(specs):
        try:
            kinds = time_stage(
                spec,
                stage,
                first=stage == 0,
                last=stage == count - 1 and count > 1,
                repeats=repeats,
                warmup=warmup,
                device=device,
            )
        except (MemoryError, RuntimeError) as exc:
            if not _out_of_memory(exc):
                raise
            shape = ", ".join(f"{k}={v}" for k, v in spec.shapes().items())
            raise HarnessError(
                f"stage {stage} ({shape}) does not fit in {device} memory: {_first_line(exc)}"
            ) from None
        timings.append(StageTiming(stage, kinds, float(spec.activation_bytes)))
    return Profile(tuple(timings), (), None, provenance(specs, device))


class HarnessError(ValueError):
    """Stages that cannot be timed here (they do not fit in the device's memory)."""


def _out_of_memory(exc: BaseException) -> bool:
    """Python's MemoryError, or torch's (CUDA's OutOfMemoryError, the CPU allocator's)."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "out of memory" in text or "allocate" in text


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def provenance(specs: list[StageSpec], device: str) -> dict:
    """Where and with what the numbers were taken."""
    import platform

    import torch

    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = (
            f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} thread)"
        )
    return {
        "device": name,
        "torch": torch.__version__,
        "dtype": specs[0].dtype,
        "shapes": [s.shapes() for s in specs],
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "source": "pipesim profile",
    }


# ---------------------------------------------------------------------------
# Links


def fit_link(name: str, points: list[tuple[float, float]]) -> LinkFit:
    """Least-squares ``ms = latency + bytes / bandwidth`` through ``(bytes, ms)`` points.

    Residuals are weighted by ``1 / ms`` (relative error), so the small messages that fix
    the latency count as much as the large ones that fix the bandwidth.
    """
    sizes = np.array([p[0] for p in points], dtype=float)
    times = np.array([p[1] for p in points], dtype=float)
    if len(points) > 1:
        slope, intercept = np.polyfit(sizes, times, 1, w=1.0 / np.maximum(times, 1e-9))
    else:
        slope, intercept = 0.0, times[0]
    latency_us = max(float(intercept), 0.0) * 1000.0
    bandwidth = 1.0 / (float(slope) * 1e6) if slope > 0 else float("inf")
    return LinkFit(name, latency_us, bandwidth, tuple((float(b), float(t)) for b, t in points))


def gloo_link(
    sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = MIN_REPEATS, timeout_s: float = 120.0
) -> LinkFit:
    """Fit the gloo link between two local processes by ping-pong (one-way = round trip / 2)."""
    import tempfile
    from pathlib import Path

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="pipesim-p2p-") as folder:
        context = mp.get_context("spawn")
        port = free_port()
        procs = [
            context.Process(target=_pingpong, args=(r, port, sizes, repeats, folder))
            for r in range(2)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout_s)
            if proc.is_alive():
                proc.kill()
        out = Path(folder, "points.txt")
        if not out.exists():
            raise RuntimeError("the point-to-point sweep did not finish")
        points = [tuple(float(v) for v in line.split()) for line in out.read_text().splitlines()]
    return fit_link("gloo", points)


def _pingpong(rank: int, port: int, sizes, repeats: int, folder: str) -> None:
    import os
    from pathlib import Path

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    lines = []
    for size in sizes:
        buffer = torch.zeros(size // 4, dtype=torch.float32)
        rounds = []
        for rep in range(3 + repeats):
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                dist.send(buffer, 1)
                dist.recv(buffer, 1)
            else:
                dist.recv(buffer, 0)
                dist.send(buffer, 0)
            if rep >= 3:
                rounds.append((time.perf_counter() - start) * 1000.0 / 2)
        lines.append(f"{size} {float(np.median(rounds))}")
    if rank == 0:
        Path(folder, "points.txt").write_text("\n".join(lines) + "\n")
    dist.destroy_process_group()


def cuda_links(sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = MIN_REPEATS) -> list[LinkFit]:
    """Device-to-device (or on-device, with one GPU) and host-to-device copies, fitted."""
    import torch

    clock = _Clock("cuda")
    targets = {"d2d": "cuda:1" if torch.cuda.device_count() > 1 else "cuda:0"}
    fits = []
    for name, kind in (("d2d", "d2d"), ("h2d", "h2d"), ("d2h", "d2h")):
        points = []
        for size in sizes:
            src_device = "cpu" if kind == "h2d" else "cuda:0"
            dst_device = "cpu" if kind == "d2h" else targets["d2d"] if kind == "d2d" else "cuda:0"
            src = torch.empty(size, dtype=torch.uint8, device=src_device)
            dst = torch.empty(size, dtype=torch.uint8, device=dst_device)
            if src_device == "cpu":
                src = src.pin_memory()
            if dst_device == "cpu":
                dst = dst.pin_memory()
            points.append((float(size), _copy_ms(clock, name, src, dst, repeats)))
        fits.append(fit_link(name, points))
    return fits


def _copy_ms(clock: _Clock, name: str, src, dst, repeats: int) -> float:
    times = [
        clock.time_ms(f"copy_{name}", lambda: dst.copy_(src, non_blocking=True))
        for _ in range(3 + repeats)
    ]
    return float(np.median(times[3:]))
