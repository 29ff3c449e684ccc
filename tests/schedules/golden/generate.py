"""Write the torch golden schedules in this folder, with torch's own exporters.

    python tests/schedules/golden/generate.py

Each file is what torch 2.13's ``_dump_csv`` writes for a small schedule: the compute-only
form (``torch-<name>.csv``; GPipe and 1F1B carry ``REDUCE_GRAD`` there) and, for the
runtime schedules, the lowered form with communication and FSDP actions
(``torch-<name>.lowered.csv``). No process group is needed: a schedule's rank generator
and its lowering passes are plain functions of its sizes, so the schedule object is
made without ``__init__`` and given the attributes those passes read. torch's helpers
are private and may change; rerun this script and review the diff when torch moves.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).parent


def single_order(cls_name: str, ranks: int, microbatches: int) -> dict:
    """GPipe / 1F1B: the order ``_get_pipeline_order`` returns (idle steps, REDUCE_GRAD)."""
    from torch.distributed.pipelining import schedules

    schedule = object.__new__(getattr(schedules, cls_name))
    schedule._num_stages, schedule._n_microbatches = ranks, microbatches
    return schedule._get_pipeline_order()


def runtime_schedule(cls_name: str, ranks: int, microbatches: int, chunks: int, **options):
    """A ``_PipelineScheduleRuntime`` subclass with its compute order and its lowered order."""
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    schedule = object.__new__(getattr(schedules, cls_name))
    stages = ranks * chunks
    style = "v" if cls_name in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV") else "loop"
    rounds = max(1, microbatches // ranks)
    schedule.__dict__.update(
        pp_group_size=ranks,
        n_local_stages=chunks,
        _n_microbatches=microbatches,
        _num_stages=stages,
        num_stages=stages,
        number_of_rounds=rounds,
        microbatches_per_round=microbatches // rounds,
        stage_index_to_group_rank=generate_stage_to_rank_mapping(ranks, stages, style=style),
        _stages=[],
        _defer_pp_recv=options.get("defer_pp_recv", False),
    )
    schedule.pipeline_order = {
        rank: schedule._calculate_single_rank_operations(rank) for rank in range(ranks)
    }
    schedule._prepare_schedule_with_comms(schedule.pipeline_order)
    return schedule


def dump(order: dict, path: Path) -> None:
    """torch's own CSV writer (``PipelineScheduleMulti._dump_csv``) on a bare order."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti

    PipelineScheduleMulti._dump_csv(SimpleNamespace(pipeline_order=order), str(path))


RUNTIME = {
    "interleaved-1f1b_p2_m4_v2": ("ScheduleInterleaved1F1B", 2, 4, 2, {}),
    "interleaved-1f1b-deferred_p2_m4_v2": (
        "ScheduleInterleaved1F1B",
        2,
        4,
        2,
        {"defer_pp_recv": True},
    ),
    "zbv_p2_m4_v2": ("ScheduleZBVZeroBubble", 2, 4, 2, {}),
    "dualpipev_p2_m4_v2": ("ScheduleDualPipeV", 2, 4, 2, {}),
}


def main(folder: Path = HERE) -> list[Path]:
    written = []
    for name, (cls_name, ranks, microbatches) in {
        "gpipe_p2_m3": ("ScheduleGPipe", 2, 3),
        "1f1b_p3_m4": ("Schedule1F1B", 3, 4),
    }.items():
        written.append(folder / f"torch-{name}.csv")
        dump(single_order(cls_name, ranks, microbatches), written[-1])
    for name, (cls_name, ranks, microbatches, chunks, options) in RUNTIME.items():
        schedule = runtime_schedule(cls_name, ranks, microbatches, chunks, **options)
        if not options:
            written.append(folder / f"torch-{name}.csv")
            schedule._dump_csv(str(written[-1]), format="compute_only")
        written.append(folder / f"torch-{name}.lowered.csv")
        schedule._dump_csv(str(written[-1]), format="compute_comms")
    return written


if __name__ == "__main__":
    for path in main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
