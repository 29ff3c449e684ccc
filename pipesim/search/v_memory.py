"""V candidates under a memory limit: the controllable-memory family, repeated, squeezed
and reordered.

Qi et al. (2024, "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362,
section 3.1 and appendix A) control a V schedule's memory by its building block: device
0's block puts F0 at unit 0 and F1, I1, I0 at three other units of a 6-unit interval (W1
and W0 at the first free units after their backward); each next device shifts the
travelling-down passes (F0, I1) ``k`` units and the travelling-up ones (F1, I0) one unit
back, ``k`` from 1 to 5, changing once along the pipeline to a value no larger. Every
block is repeated (with padding microbatches where m < 2p), squeezed, its warm-up and
cool-down rebuilt without raising the peak (``pipesim.search.v_memory_phases``), and its
free cells filled greedily; the authors' builder (``v_auto_schedule.py`` in
sail-sg/zero-bubble-pipeline-parallelism) then keeps the block whose timing on the
costs is best. Here every block whose peak stays within ``max_chunks`` chunk activations
(held from F to W) becomes a candidate order, and the search offers the few that time
best, by the authors' measure (the longest span from a device's first forward to its last
weight pass) and by the makespan, to the engine.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipesim.schedules.ir import Action, F, I, Schedule, W, single_chain, v_placement
from pipesim.search.greedy import Problem
from pipesim.search.v_memory_phases import (
    EMPTY,
    F0,
    F1,
    I0,
    I1,
    W0,
    W1,
    Line,
    Unusable,
    cool_down,
    keep_first,
    peak,
    relabel_weights,
    release_weights,
    squeezed,
    warm_up,
)

INTERVAL = 6
_MOVES_DOWN = (True, False, True, False)  # F0, F1, I1, I0: down the V moves k, up -1
Order = tuple[tuple[tuple[int, int], ...], ...]  # per device (code, microbatch) in order


def memory_orders(devices: int, microbatches: int, max_chunks: int) -> list[Order]:
    """Every distinct order the family builds within ``max_chunks`` chunk activations per
    device, in the family's order (a block whose peak is over ends its run of turns)."""
    p, m, found = devices, microbatches, {}
    limit = min(2 * p, max_chunks)
    for first in _first_rows():
        for k0 in range(1, INTERVAL):
            for k1 in range(1, k0 + 1):
                for turn in range(1, p):
                    block = _block(first, k0, k1, turn, p)
                    if block is None:
                        continue
                    lines, top = built(p, m, block, limit)
                    if top > limit:
                        break
                    if lines is not None:
                        found.setdefault(_order(lines), None)
    return list(found)


def _first_rows() -> Iterator[list[int]]:
    for f1 in range(1, INTERVAL):
        for i1 in range(1, INTERVAL):
            for i0 in range(1, INTERVAL):
                if len({f1, i1, i0}) == 3:
                    yield _with_weights([0, f1, i1, i0])


def _with_weights(row: list[int]) -> list[int]:
    """(F0, F1, I1, I0) residues and W1, W0: each at the first free one after its I."""
    taken = set(row)
    for backward in (row[2], row[3]):
        unit = next(
            (backward + j) % INTERVAL
            for j in range(1, INTERVAL)
            if (backward + j) % INTERVAL not in taken
        )
        row.append(unit)
        taken.add(unit)
    return row


def _block(first: list[int], k0: int, k1: int, turn: int, p: int) -> list[list[int]] | None:
    rows = [first]
    for device in range(1, p):
        shift = k0 if device <= turn else k1
        row = [
            (r + (shift if down else -1)) % INTERVAL
            for r, down in zip(rows[-1][:4], _MOVES_DOWN, strict=True)
        ]
        if len(set(row)) < 4:
            return None
        rows.append(_with_weights(row))
    return rows


def built(p: int, m: int, block: list[list[int]], limit: int) -> tuple[list[Line] | None, int]:
    """The block's lines after every move, or None; and the peak that decided it."""
    padded = max(m, 2 * p)
    lines = _repeated(block, p, padded)
    first_peak = max(peak(line) for line in lines)
    if (m == padded and first_peak > limit) or first_peak > 2 * p:
        return None, first_peak
    try:
        lines = squeezed(lines, padded)
        warm_up(lines, padded)
        lines = squeezed(lines, padded)
        top = max(peak(line) for line in lines)
        if top > first_peak:
            return None, first_peak
        if m < padded:
            keep_first(lines, m)
            if m <= p and 2 * m <= limit:
                release_weights(lines, min(2 * p, top))
            lines = squeezed(lines, m)
            first_peak = top = max(peak(line) for line in lines)
            if top > limit:
                return None, top
        lines = cool_down(lines, m)
        fill_gaps(lines)
        relabel_weights(lines, m)
    except Unusable:
        return None, 0
    top = max(peak(line) for line in lines)
    if top > first_peak or not _in_order(lines, m):
        return None, min(top, first_peak)
    return lines, top


def _repeated(block: list[list[int]], p: int, m: int) -> list[Line]:
    """Microbatch n of each pass at its first cell plus ``6 n``; the first cells are the
    block's residues met in the order the data flows (F0 down, F1 up, I1 down, I0 up; a
    W at the first of its residue after its I), from cell 6 on."""
    lines = [[EMPTY] * (INTERVAL * (4 * p + m + 1)) for _ in range(p)]
    cell = INTERVAL
    for code, down in zip((F0, F1, I1, I0), _MOVES_DOWN, strict=True):
        for d in range(p) if down else range(p - 1, -1, -1):
            first = cell + (block[d][code] - cell) % INTERVAL
            cell = first + 1
            starts = [(code, first)]
            if code in (I1, I0):
                weight = W1 if code == I1 else W0
                starts.append((weight, cell + (block[d][weight] - cell) % INTERVAL))
            for what, start in starts:
                for n in range(m):
                    lines[d][start + INTERVAL * n] = what
    return lines


def fill_gaps(lines: list[Line]) -> None:
    """Walk the cells column by column; an empty one takes the first later pass of each
    code on its line that could run there (its input already placed in an earlier column,
    its W's backward done) and, for a forward, keeps the line within the peak."""
    p, top = len(lines), max(peak(line) for line in lines)
    width = len(lines[0])
    last = [{code: j for j, code in enumerate(line) if code != EMPTY} for line in lines]
    held = [0] * p
    counts = [[0] * 6 for _ in range(p)]
    placed: dict[tuple[int, int, int], int] = {}
    for j in range(width):
        for d, line in enumerate(lines):
            code = line[j]
            if code == EMPTY:
                code = _pulled(lines, d, j, last[d], counts[d], placed, top - held[d])
            if code == EMPTY:
                continue
            placed[counts[d][code], d, code] = j
            counts[d][code] += 1
            held[d] += 1 if code in (F0, F1) else (-1 if code in (W1, W0) else 0)


def _pulled(lines, d, j, last, counts, placed, room) -> int:
    """Move into cell j of device d the first later pass that may run there; its code."""
    line, p = lines[d], len(lines)
    candidates = {code for code, cell in last.items() if cell > j}
    change = rise = 0
    for k in range(j + 1, len(line)):
        if not candidates:
            break
        code = line[k]
        change += 1 if code in (F0, F1) else (-1 if code in (W1, W0) else 0)
        rise_before, rise = rise, max(rise, change)
        if code not in candidates:
            continue
        candidates.discard(code)
        if code in (F0, F1) and rise_before >= room:
            continue
        if _may_run(code, d, p, j, counts, placed):
            line[j], line[k] = code, EMPTY
            return code
    return EMPTY


def _may_run(code: int, d: int, p: int, j: int, counts: list[int], placed: dict) -> bool:
    n = counts[code]
    if code in (W1, W0):
        return counts[I1 if code == W1 else I0] > n
    neighbour = d - 1 if code in (F0, I1) else d + 1
    if 0 <= neighbour < p:
        return -1 < placed.get((n, neighbour, code), -1) < j
    turn = {I1: F1, F1: F0, I0: I1}.get(code)  # the pass before it where the V turns
    return turn is None or counts[turn] > n


def _in_order(lines: list[Line], m: int) -> bool:
    """Every pass m times, each W after its I, and the order of the V on each line: the
    turns (device 0: F1 before I1; last device: F0 before F1, I1 before I0) and, on the
    devices between, every pass after its neighbour's."""
    p = len(lines)
    cells = [{} for _ in range(p)]
    for d, line in enumerate(lines):
        seen = [0] * 6
        for j, code in enumerate(line):
            if code != EMPTY:
                cells[d][code, seen[code]] = j
                seen[code] += 1
        if seen != [m] * 6:
            return False
    for d in range(p):
        c = cells[d]
        for n in range(m):
            pairs = [((I1, n), (W1, n)), ((I0, n), (W0, n))]
            if d == 0:
                pairs.append(((F1, n), (I1, n)))
            elif d == p - 1:
                pairs += [((F0, n), (F1, n)), ((I1, n), (I0, n))]
            if any(c[a] >= c[b] for a, b in pairs):
                return False
            if 0 < d < p - 1:
                up, down = cells[d - 1], cells[d + 1]
                if any(up[k, n] >= c[k, n] for k in (F0, I1)) or any(
                    down[k, n] >= c[k, n] for k in (F1, I0)
                ):
                    return False
    return True


def _order(lines: list[Line]) -> Order:
    result = []
    for line in lines:
        seen = [0] * 6
        row = []
        for code in line:
            if code != EMPTY:
                row.append((code, seen[code]))
                seen[code] += 1
        result.append(tuple(row))
    return tuple(result)


def timed(order: Order, problem: Problem) -> tuple[float, float]:
    """``(span_ms, makespan_ms)`` of the order on the problem's costs and hops, as the
    authors' builder times it: each pass after its device's previous one and its input
    (plus the hop); the span is the longest from a device's first F0 to its last W."""
    p, m = len(order), problem.microbatches
    ends: dict[tuple[int, int, int], float] = {}
    position, clock = [0] * p, [0.0] * p
    progressed = True
    while progressed:
        progressed = False
        for d in range(p):
            while position[d] < len(order[d]):
                code, n = order[d][position[d]]
                start = _ready_ms(problem, ends, d, code, n, clock[d])
                if start is None:
                    break
                stage, kind = _meaning(d, code, p)
                cost = {F: problem.forward_ms, I: problem.input_ms, W: problem.weight_ms}[kind]
                ends[d, code, n] = clock[d] = start + cost[stage]
                position[d] += 1
                progressed = True
    if any(position[d] < len(order[d]) for d in range(p)):
        return float("inf"), float("inf")
    span = max(
        ends[d, weight, m - 1] - ends[d, F0, 0] + problem.forward_ms[d]
        for d in range(p)
        for weight in (W1, W0)
    )
    return span, max(clock)


def _ready_ms(problem: Problem, ends: dict, d: int, code: int, n: int, free: float):
    """When the pass may start on device d (free from ``free``); None if its input is not
    done yet."""
    p = len(problem.placement) // 2
    if code in (W1, W0):
        return free
    neighbour = d - 1 if code in (F0, I1) else d + 1
    if not 0 <= neighbour < p:
        return free
    if (neighbour, code, n) not in ends:
        return None
    stage = _meaning(d, code, p)[0]
    hop = problem.hop_ms[min(stage, _meaning(neighbour, code, p)[0])]
    return max(free, ends[neighbour, code, n] + hop)


def _meaning(d: int, code: int, p: int) -> tuple[int, object]:
    stage = d if code in (F0, I0, W0) else 2 * p - 1 - d
    return stage, (F, F, I, I, W, W)[code]


def order_schedule(order: Order, microbatches: int, name: str) -> Schedule:
    p = len(order)
    lists = tuple(
        tuple(Action(*_meaning(d, code, p), n) for code, n in row) for d, row in enumerate(order)
    )
    return Schedule(lists, v_placement(p), single_chain(2 * p, microbatches), name)


def memory_schedules(problem: Problem, max_chunks: int, most: int, name: str) -> list[Schedule]:
    """Up to ``most`` of the family's orders within ``max_chunks``, the best timed first:
    by the authors' span, then by the makespan, each with its ties."""
    orders = memory_orders(problem.devices, problem.microbatches, max_chunks)
    if not orders:
        return []
    times = [timed(order, problem) for order in orders]
    chosen: dict[int, None] = {}
    for measure in (0, 1):
        best = min(t[measure] for t in times)
        ties = [k for k, t in enumerate(times) if t[measure] <= best * (1 + 1e-9) + 1e-12]
        chosen.update(dict.fromkeys(ties[: max(1, most // 2)]))
    return [order_schedule(orders[k], problem.microbatches, name) for k in chosen]
