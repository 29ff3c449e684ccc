"""The ``pipesim ...`` commands the documentation quotes, found where a reader finds them.

A *recipe* is a run of commands quoted together, to be run in order in one folder (a
later one may read what an earlier one wrote: ``plan --emit best.yaml`` then ``run
best.yaml``):

* README.md and the notebooks' markdown cells: each fenced code block (a ``$ `` prompt
  in a ``text`` block marks a command whose output follows it);
* a scenario file: each paragraph of its opening comment; a command there is indented
  (``#   pipesim run ...``), so prose that starts with "pipesim" is not one.

Lines ending in ``\\`` continue; ``# ...`` after a command is a comment; ``A && pipesim
...`` quotes the ``pipesim`` part; a shell loop ``for m in 1 2 4; do`` ... ``done`` is
one command per value.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
LOOP = re.compile(r"^for (\w+) in (.+); do$")


@dataclass(frozen=True)
class Command:
    line: int  # where it starts in its document, from 1 (a notebook: in its cell)
    args: tuple[str, ...]  # after "pipesim"
    output: tuple[str, ...] = ()  # the lines quoted under a "$ " prompt

    @property
    def text(self) -> str:
        return shlex.join(("pipesim", *self.args))


@dataclass(frozen=True)
class Recipe:
    document: str  # relative to the repository root
    commands: tuple[Command, ...]

    @property
    def name(self) -> str:
        """``README.md:32``: the document and the line of the first command (a notebook's
        lines are counted in the cell its ``document`` names)."""
        return f"{self.document}:{self.commands[0].line}"


def recipes() -> list[Recipe]:
    """Every recipe of README.md, the scenarios and the notebooks, in that order."""
    found = [Recipe("README.md", c) for c in _fenced(_lines(ROOT / "README.md"))]
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        found += [Recipe(f"scenarios/{path.name}", c) for c in _comment(path)]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for number, cell in enumerate(cells):
            if cell["cell_type"] == "markdown":
                blocks = _fenced("".join(cell["source"]).splitlines())
                found += [Recipe(f"notebooks/{path.name} cell {number}", c) for c in blocks]
    return [recipe for recipe in found if recipe.commands]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


SHELL_BLOCKS = ("", "bash", "sh", "shell", "console", "text")  # not yaml, python, ...


def _fenced(lines: list[str]) -> list[tuple[Command, ...]]:
    """The commands of each fenced block of shell or terminal text."""
    blocks, block, start, language = [], None, 0, ""
    for number, line in enumerate(lines, start=1):
        if line.startswith("```"):
            if block is None:
                block, start, language = [], number + 1, line[3:].strip()
            else:
                if language in SHELL_BLOCKS:
                    blocks.append(_commands(block, start, prompt=True))
                block = None
        elif block is not None:
            block.append(line)
    return blocks


def _comment(path: Path) -> list[tuple[Command, ...]]:
    """The opening comment's paragraphs, each a recipe of its indented commands."""
    paragraphs, paragraph, start = [], [], 1
    for number, line in enumerate(_lines(path), start=1):
        if not line.startswith("#"):
            break
        text = line[1:]
        if not text.strip():
            paragraphs.append(_commands(paragraph, start))
            paragraph, start = [], number + 1
        else:
            paragraph.append(text[2:] if text.startswith("   ") else "")
    paragraphs.append(_commands(paragraph, start))
    return paragraphs


def _commands(lines: list[str], start: int, prompt: bool = False) -> tuple[Command, ...]:
    """The commands of a block whose first line is line ``start``. Where the block has
    ``$ `` prompts (a terminal session), only those lines are commands, each followed by
    its output up to the next prompt."""
    session = prompt and any(line.startswith("$ ") for line in lines)
    found: list[Command] = []
    loop: tuple[str, list[str]] | None = None
    pending, first = "", start
    for number, line in enumerate(lines, start=start):
        if session and not line.startswith("$ "):
            if found:
                found[-1] = Command(found[-1].line, found[-1].args, (*found[-1].output, line))
            continue
        first = first if pending else number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = (pending + line).strip().removeprefix("$ "), ""
        if match := LOOP.match(text):
            loop = (match.group(1), match.group(2).split())
        elif text == "done":
            loop = None
        for args in _pipesim_parts(text):
            for value in loop[1] if loop else [None]:
                given = args if value is None else [a.replace(f"${loop[0]}", value) for a in args]
                found.append(Command(first, tuple(given)))
    return tuple(found)


def _pipesim_parts(text: str) -> list[list[str]]:
    if "pipesim " not in text:
        return []
    words = shlex.split(text, comments=True)
    parts, part = [], []
    for word in [*words, "&&"]:
        if word in ("&&", ";"):
            if part and part[0] == "pipesim":
                parts.append(part[1:])
            part = []
        else:
            part.append(word)
    return parts
