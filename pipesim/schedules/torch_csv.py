"""torch's schedule CSV in every form torch 2.13 writes, read and written back.

torch.distributed.pipelining writes a schedule as CSV, one row per rank, one cell per
action (``csv.writer``: comma-separated, rows ending ``\\r\\n``, idle steps as empty cells):

* compute-only (``PipelineScheduleMulti._dump_csv``, ``format="compute_only"``): compute
  actions only; GPipe's and 1F1B's order (``_get_pipeline_order``) also holds each
  stage's ``REDUCE_GRAD`` after its last backward;
* lowered (``_PipelineScheduleRuntime._dump_csv``, ``format="compute_comms"``): the same
  compute actions with the runtime's posts between them, ``SEND_F``/``RECV_F``/``SEND_B``/
  ``RECV_B``, ``UNSHARD``/``RESHARD`` (FSDP) and ``REDUCE_GRAD``.

``read_torch_csv`` takes any of them: compute actions become the Schedule's per-device
lists (so every evaluator and check sees an ordinary schedule) and the posts are kept in
``Schedule.posts`` with their place between the compute actions. Empty cells are dropped:
idle steps mean nothing to torch's runtime either, which skips them.

``to_torch_csv`` writes the schedule back with its posts, byte for byte what torch's
``_dump_csv`` writes for the same order of actions.
"""

from __future__ import annotations

import csv
import io
from dataclasses import replace

from pipesim.schedules.ir import (
    Action,
    Schedule,
    ScheduleError,
    parse_action,
    schedule_from_lists,
    to_csv,
)
from pipesim.schedules.posts import Placed, Post, parse_post

TORCH_LINE_END = "\r\n"  # csv.writer's default, which torch's _dump_csv keeps


def read_torch_csv(text: str, name: str = "csv") -> Schedule:
    """A Schedule from torch's CSV, compute-only or lowered (see the module docstring).

    Placement and chains are inferred from the compute actions as ``ir.from_csv`` does;
    whether the posts make sense (a RECV before its consumer, a SEND after its producer,
    REDUCE_GRAD after the stage's last backward) is ``validate``'s job.
    """
    device_actions: list[tuple[Action, ...]] = []
    device_posts: list[tuple[Placed, ...]] = []
    for rank, row in enumerate(csv.reader(io.StringIO(text))):
        actions: list[Action] = []
        posts: list[Placed] = []
        for column, cell in enumerate(row):
            if cell.strip() in ("", "None"):
                continue
            item = _parse_cell(cell, rank, column)
            if isinstance(item, Post):
                posts.append((len(actions), item))
            else:
                actions.append(item)
        device_actions.append(tuple(actions))
        device_posts.append(tuple(posts))
    schedule = schedule_from_lists(device_actions, name=name)
    if not any(device_posts):
        return schedule
    return replace(schedule, posts=tuple(device_posts))


def _parse_cell(cell: str, rank: int, column: int) -> Action | Post:
    where = f"row {rank + 1}, column {column + 1}"
    try:
        post = parse_post(cell)
    except ValueError as exc:
        raise ScheduleError(f"{where}: {exc}") from None
    if post is not None:
        return post
    try:
        return parse_action(cell)
    except ScheduleError as exc:
        raise ScheduleError(
            f"{where}: {exc}; torch's runtime actions (2SEND_F0, 2RECV_B0, 1UNSHARD, "
            "1RESHARD, 1REDUCE_GRAD) are read too"
        ) from None


def to_torch_csv(schedule: Schedule, *, compute_only: bool = False) -> str:
    """What torch's ``_dump_csv`` writes for this order: rows ending ``\\r\\n``, posts kept.

    ``compute_only=True`` drops the posts, giving the form torch's
    ``_load_csv(format="compute_only")`` accepts (it lowers the schedule again itself).
    """
    if compute_only or not schedule.posts:
        return to_csv(schedule, lineterminator=TORCH_LINE_END)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=TORCH_LINE_END)
    for device in range(schedule.devices):
        writer.writerow([str(item) for item in schedule.program(device)])
    return buffer.getvalue()
