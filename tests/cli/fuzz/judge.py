"""The contract every fuzz case is held to (issue 18).

* exit 0: every JSON output parses and every number in it is finite; or
* exit 2: stderr holds exactly one ``pipesim: error:`` line (notes aside) naming a file,
  a field or an option of the case, and nothing else; no new file anywhere in the case's
  folder and every existing file's bytes unchanged.

Anything else is a broken contract: exit 1, a traceback, an exception, a hang, a success
under a fault no command can succeed under (a full disk, an output that is an input).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from tests.cli.fuzz.cases import Case

PICTURE = re.compile(r"^( +Rank \d|Step \d+ |\.\.\.( \(\d+ more lines\))?$)")


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, else what it is (a FIFO is never
    opened, a symlink never followed)."""
    entries: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            key = str(path.relative_to(folder))
            if path.is_symlink():
                entries[key] = f"link to {os.readlink(path)}"
            elif path.is_fifo():
                entries[key] = "fifo"
            elif path.is_dir():
                entries[key] = "folder"
            else:
                entries[key] = path.read_bytes()
    return entries


def non_finite(value, where: str = "") -> str | None:
    """Where a non-finite number (or a number too large for a float) is in ``value``."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else where or "top level"
    if isinstance(value, int):
        return None if abs(value) < 2**1024 else where
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        found = non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def judge_success(case: Case, stdout: str, before: dict, after: dict) -> str | None:
    if case.must_fail:
        return "exit 0 under a fault that must fail"
    changed = [name for name in before if before[name] != after.get(name)]
    if changed:
        return f"exit 0 but existing files changed: {changed}"
    reports = [(r.name, r.read_text) for r in case.reports]
    if case.stdout_report:
        reports.append(("standard output", lambda: stdout))
    for name, read in reports:
        try:
            data = json.loads(read(), parse_constant=lambda c: math.nan)
        except (OSError, ValueError) as exc:
            return f"exit 0 but {name} is no JSON report: {exc}"[:200]
        where = non_finite(data)
        if where is not None:
            return f"exit 0 but {name} holds a non-finite number at {where}"
        if every_row_failed(data):
            return f"{EVERY_ROW_AN_ERROR}: exit 0 but every row of {name} is an error: {data[0]['error']!r:.200}"
    return None


EVERY_ROW_AN_ERROR = "every-row-an-error"


def every_row_failed(data) -> bool:
    """A table (compare's) none of whose rows ran: the scenario itself was refused, which
    is exit 2 naming the file and field, not a report of nothing."""
    rows = data if isinstance(data, list) else []
    return bool(rows) and all(isinstance(r, dict) and r.get("error") for r in rows)


def judge_refusal(case: Case, stderr: str, stdout: str, before: dict, after: dict) -> str | None:
    lines = [line for line in stderr.splitlines() if not line.startswith("pipesim: note: ")]
    if lines:  # an invalid schedule or a deadlock draws its step x rank grid under the line
        lines = lines[:1] + [line for line in lines[1:] if not PICTURE.match(line)]
    if len(lines) != 1 or not lines[0].startswith("pipesim: error: "):
        return f"exit 2 without exactly one error line: {stderr[-300:]!r}"
    if not any(name and name in lines[0] for name in case.names):
        return f"an error line naming none of the case's files, fields or options: {lines[0]!r}"
    if stdout:
        return f"exit 2 with output on stdout: {stdout[:100]!r}"
    if after.keys() != before.keys():
        return f"exit 2 but files came or went: {sorted(after.keys() ^ before.keys())}"
    changed = [name for name in before if before[name] != after[name]]
    return f"exit 2 but files changed: {changed}" if changed else None


def judge(case: Case, result, before: dict, after: dict) -> str | None:
    """None if ``result`` (click's) kept the contract, else what broke."""
    if "Traceback" in result.stderr or not isinstance(result.exception, SystemExit | None):
        return f"exception {type(result.exception).__name__}: {result.exception}"[:300]
    if result.exit_code == 0:
        return judge_success(case, result.stdout, before, after)
    if result.exit_code == 2:
        return judge_refusal(case, result.stderr, result.stdout, before, after)
    return f"exit {result.exit_code}: {result.stderr[-300:]!r}"
