"""The passes that turn a repeated V building block into a whole schedule, on a unit grid.

Qi et al. (2024, "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362,
section 3 and appendix A) build a V schedule under a memory limit in three moves: repeat
a building block, squeeze it, and reorder its warm-up and cool-down without raising the
peak. ``pipesim.search.v_memory`` runs them over a family of blocks; this module holds the
moves themselves, as the authors' memory-controllable builder makes them
(``v_auto_schedule.py`` in sail-sg/zero-bubble-pipeline-parallelism), in pipesim's terms.

A device's line is a list of cells, one unit pass each: a pass code or ``EMPTY``. Codes:
``F0``/``F1`` the forwards of chunk 0 (travelling down the V) and chunk 1 (back up),
``I1``/``I0`` the input backwards (chunk 1's travels down, chunk 0's up), ``W1``/``W0`` the
weight passes. The n-th cell of a code on a line is microbatch n. A chunk's activation is
counted from its F to its W (+1, -1): the line's peak is the largest running count.

Each move either returns the lines or raises ``Unusable``: a block whose moves run out of
the grid or break an order is left out of the search, as the authors' builder would fail
on it.
"""

from __future__ import annotations

from collections import deque

EMPTY = -1
F0, F1, I1, I0, W1, W0 = range(6)
DOWN = (F0, I1, W1)  # codes whose input comes from the device above (or none)
KIND_COUNT = 6
Line = list[int]


class Unusable(ValueError):
    """A block the moves cannot turn into a schedule."""


def peak(line: Line) -> int:
    """Most activations the line holds at once (+1 at a forward, -1 at a weight pass)."""
    held = most = 0
    for code in line:
        if code in (F0, F1):
            held += 1
            most = max(most, held)
        elif code in (W1, W0):
            held -= 1
    return most


def squeezed(lines: list[Line], m: int) -> list[Line]:
    """Every pass at the earliest cell its input and its line's previous pass allow, the
    order of each line kept; cells are visited column by column, the down codes from the
    first device, then the up codes from the last. ``m``: passes per code and line."""
    p = len(lines)
    width = max(len(line) for line in lines)
    out = [[EMPTY] * len(line) for line in lines]
    counts = [[0] * KIND_COUNT for _ in range(p)]
    placed: dict[tuple[int, int, int], int] = {}  # (device, code, microbatch) -> cell
    next_cell = [0] * p
    for column in range(width):
        for downward in (True, False):
            for d in range(p) if downward else range(p - 1, -1, -1):
                if column >= len(lines[d]):
                    continue
                code = lines[d][column]
                if code == EMPTY or (code in DOWN) != downward:
                    continue
                n = counts[d][code]
                cell = next_cell[d]
                source = _source(d, code, p)
                if n >= m or not _turn_placed(placed, d, code, n, p):
                    raise Unusable(f"{d=} {code=} {n=}: too many, or its turn not placed")
                if source is not None:
                    if (source, code, n) not in placed:
                        raise Unusable(f"{d=} {code=} {n=}: input not placed")
                    cell = max(cell, placed[source, code, n] + 1)
                if cell >= len(out[d]):
                    raise Unusable(f"{d=}: squeezed past the grid")
                out[d][cell] = code
                counts[d][code] = n + 1
                placed[d, code, n] = cell
                next_cell[d] = cell + 1
    used = max(next_cell)
    return [line[:used] for line in out]


def _turn_placed(placed: dict, d: int, code: int, n: int, p: int) -> bool:
    """Where the V turns (device 0's I1, the last device's F1 and I0), the pass before it
    on the same device must already have its cell."""
    before = {(0, I1): F1, (p - 1, F1): F0, (p - 1, I0): I1}.get((d, code))
    return before is None or (d, before, n) in placed


def _source(d: int, code: int, p: int) -> int | None:
    """The device whose pass of the same code and microbatch this one waits for."""
    if code in (W1, W0):
        return None
    if code in (F0, I1):
        return d - 1 if d > 0 else None
    return d + 1 if d < p - 1 else None


def warm_up(lines: list[Line], m: int) -> None:
    """Rebuild each device's cells before its first I0 in place: device i runs a run of
    chunk-0 forwards, then forwards of both chunks in turn, then steps of I1, W1 and a
    forward (chunk 1's first), holding at most ``min(i + 1, peak // 2)`` chunk-1 and the
    rest of the peak in chunk-0 forwards before it stops adding extra ones."""
    p = len(lines)
    top = min(max(peak(line) for line in lines), 2 * p)
    for i, line in enumerate(lines):
        ups = min(i + 1, top // 2, m)
        downs = min(top - ups, m)
        have = [0] * KIND_COUNT
        for j, code in enumerate(line):
            if code == I0:
                break
            if code not in (EMPTY, F0, F1, I1, W1):
                raise Unusable(f"device {i}: {code=} before the first I0")
            if code != EMPTY:
                have[code] += 1
            line[j] = EMPTY
        _rebuild_warm_up(line, i, p, have, (downs, ups))


def _rebuild_warm_up(line: Line, i: int, p: int, have: list[int], most: tuple[int, int]):
    used = [0] * KIND_COUNT
    cell = i

    def put(code: int, allowed: bool) -> None:
        nonlocal cell
        if allowed:
            _write(line, cell, code)
            used[code] += 1
        cell += 1

    downs, ups = most
    for _ in range(2 * (p - 1 - i)):
        put(F0, used[F0] < downs and used[F0] < have[F0])
    for _ in range(i + 1):
        put(F0, used[F0] < downs and used[F0] < have[F0])
        put(F1, used[F1] < ups and used[F1] < have[F1])
    while any(used[c] < have[c] for c in (F0, F1, I1, W1)):
        put(I1, used[I1] < have[I1])
        put(W1, used[W1] < have[W1])
        if used[F1] < have[F1]:
            if used[F1] >= used[F0]:
                raise Unusable(f"device {i}: a chunk-1 forward before its chunk-0 one")
            put(F1, True)
        else:
            put(F0, used[F0] < have[F0])


def _write(line: Line, cell: int, code: int) -> None:
    """``line[cell] = code`` with Python's indexing (a negative cell counts from the end),
    and ``Unusable`` where the cell is past the end."""
    try:
        line[cell] = code
    except IndexError:
        raise Unusable(f"cell {cell} past the grid of {len(line)}") from None


def keep_first(lines: list[Line], m: int) -> None:
    """Keep the first ``m`` passes of each code on each line (the padding microbatches go)."""
    for line in lines:
        seen = [0] * KIND_COUNT
        for j, code in enumerate(line):
            if code == EMPTY:
                continue
            if seen[code] >= m:
                line[j] = EMPTY
            else:
                seen[code] += 1


def release_weights(lines: list[Line], top: int) -> None:
    """With few microbatches memory is spare in the warm-up: each device moves its first
    ``top - peak`` weight passes to the end, so its backwards run earlier."""
    peaks = [peak(line) for line in lines]
    width = len(lines[0])
    pad = top - min(peaks)
    for line, own in zip(lines, peaks, strict=True):
        moved: Line = []
        for j in range(width):
            if own + len(moved) >= top:
                break
            if line[j] in (W1, W0):
                moved.append(line[j])
                line[j] = EMPTY
        line.extend(moved + [EMPTY] * (pad - len(moved)))


def cool_down(lines: list[Line], m: int) -> list[Line]:
    """Rebuild the cool-down: after the last chunk-1 forward, the last I0 passes (half the
    peak) and I1 passes (up to i + 1 on device i, the rest of the peak) move onto a tight
    staircase counted from device 0's last F1, two cells apart; the W passes of the tail
    are taken out and come back in the free cells after the last W left, chunk 1's first;
    then everything is squeezed."""
    p = len(lines)
    top = max(peak(line) for line in lines)
    if top > 2 * p:
        raise Unusable(f"peak {top} above {2 * p}")
    most_i0 = min((top + 1) // 2, m)
    most_i1 = min(top - most_i0, m)
    start = -1
    for i, line in enumerate(lines):
        taken, last_f1 = _clear_tail(line, min(i + 1, most_i1), most_i0, top)
        if i == 0:
            start = last_f1
        for k in range(taken[I0]):
            cell = start - i + 2 * p - 2 * k
            if _read(line, cell) != EMPTY:
                raise Unusable(f"device {i}: cell {cell} of an I0 is taken")
            _write(line, cell, I0)
        for k in range(taken[I1]):
            _write(line, start + 1 + i - 2 * k, I1)
    for line in lines:
        _weights_back(line)
    width = max(len(line) for line in lines)
    for line in lines:
        line.extend([EMPTY] * (width - len(line)))
    return squeezed(lines, m)


def _clear_tail(line: Line, most_i1: int, most_i0: int, top: int) -> tuple[list[int], int]:
    """Take the last ``most_i1`` I1 and ``most_i0`` I0 passes off the line, then W passes
    from the end until at least as many of each chunk and ``top`` in all; return the counts
    taken and the cell of the last F1."""
    taken, last_f1 = [0] * KIND_COUNT, -1
    for j in range(len(line) - 1, -1, -1):
        code = line[j]
        if code == F1 and last_f1 == -1:
            last_f1 = j
        if code == I1 and taken[I1] < most_i1:
            line[j] = EMPTY
            taken[I1] += 1
        if code == I0 and taken[I0] < most_i0:
            line[j] = EMPTY
            taken[I0] += 1
    for j in range(len(line) - 1, -1, -1):
        if taken[W1] >= taken[I1] and taken[W0] >= taken[I0] and taken[W1] + taken[W0] >= top:
            break
        if line[j] in (W1, W0):
            taken[line[j]] += 1
            line[j] = EMPTY
    return taken, last_f1


def _weights_back(line: Line) -> None:
    """Each free cell after the line's last W takes an owed W (chunk 1's first); the rest
    go at the end."""
    last_w = max((j for j, code in enumerate(line) if code in (W1, W0)), default=-1)
    owed = {W1: 0, W0: 0}
    for j, code in enumerate(line):
        if code in (I1, I0):
            owed[W1 if code == I1 else W0] += 1
        elif code in (W1, W0):
            owed[code] -= 1
        elif code == EMPTY and j > last_w:
            for weight in (W1, W0):
                if owed[weight] > 0:
                    line[j] = weight
                    owed[weight] -= 1
                    break
    line.extend([W1] * owed[W1] + [W0] * owed[W0])


def _read(line: Line, cell: int) -> int:
    try:
        return line[cell]
    except IndexError:
        raise Unusable(f"cell {cell} past the grid of {len(line)}") from None


def relabel_weights(lines: list[Line], m: int) -> None:
    """Each weight cell becomes the W of the oldest backward still owed one (its chunk)."""
    for d, line in enumerate(lines):
        counts = [line.count(code) for code in range(KIND_COUNT)]
        if any(count != m for count in counts):
            raise Unusable(f"device {d}: pass counts {counts}, not {m} each")
        owed: deque[int] = deque()
        for j, code in enumerate(line):
            if code in (I1, I0):
                owed.append(W1 if code == I1 else W0)
            elif code in (W1, W0):
                if not owed:
                    raise Unusable(f"device {d}: a weight pass before its backward")
                line[j] = owed.popleft()


__all__ = [
    "DOWN",
    "EMPTY",
    "F0",
    "F1",
    "I0",
    "I1",
    "KIND_COUNT",
    "Line",
    "Unusable",
    "W0",
    "W1",
    "cool_down",
    "keep_first",
    "peak",
    "relabel_weights",
    "release_weights",
    "squeezed",
    "warm_up",
]
