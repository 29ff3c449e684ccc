"""One fuzz case: the files of a per-case folder and a command line that uses them.

``Builder`` writes a case's inputs into its folder, each of them intact or damaged by one
of the mutators, and hands out the paths to put on the command line: an input may be
replaced by a FIFO nobody writes, ``/dev/zero``, a folder or nothing, and an output by
``/dev/full``, a file in a read-only folder, an input of the same command (directly or
through a symlink), a missing folder or a folder. A case with such a fault must fail.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.cli.fuzz.corpus import Corpus
from tests.cli.fuzz.mutate import (
    DIGITS_5000,
    PLAUSIBLE_SETS,
    RAW_SCENARIOS,
    UNICODE_NUMBERS,
    dump,
    key_paths,
    mutate_bytes,
    mutate_csv,
    mutate_data,
)

AS_ROOT = os.geteuid() == 0  # root writes into read-only folders: that fault is skipped
BAD_NUMBERS = ["0", "-1", "abc", "", "1e3", "2.5", "nan", "inf", DIGITS_5000, *UNICODE_NUMBERS[:3]]
BAD_NUMBERS += ["4294967296", "9223372036854775808", "9" * 30, "0x10", "+3", " 2"]
SET_VALUES = ["0", "-1", ".nan", ".inf", "1e999", DIGITS_5000, "²", "[]", "{}", "null", "x", "'3'"]
SET_VALUES += ["9" * 30, "2", "1e-320", "true", "[1, 2]", "-.inf", "１２", "1:30", "0o17"]


@dataclass
class Case:
    label: str  # command/what-was-done, for grouping outcomes
    args: list[str] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)  # JSON outputs: finite numbers on exit 0
    names: set[str] = field(default_factory=set)  # an error line names one of these
    must_fail: bool = False  # a fault no command can succeed under
    stdout_report: bool = False  # the JSON report goes to standard output


class Builder:
    """Writes one case's files into ``folder`` and collects what the judge needs."""

    def __init__(self, rng: random.Random, corpus: Corpus, folder: Path, command: str):
        self.rng, self.corpus, self.folder = rng, corpus, folder
        self.case = Case(command)
        self.inputs: list[Path] = []  # files on the command line
        self.companion: str | None = None  # the companion file being written, if any
        self.sets: list[str] = []  # --set options, for after the command's name

    def command(self, name: str, *paths: Path) -> None:
        """The command's name, its file arguments and the scenario's ``--set`` options."""
        self.case.args += [name, *map(str, paths), *self.sets]
        self.sets = []

    def damage(self, label: str) -> None:
        self.case.label += f"/{label}"

    def write(self, name: str, content: bytes) -> Path:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if self.companion is None:  # a companion may no longer be named once damaged
            self.inputs.append(path)
        self.case.names.add(path.name)
        return path

    # -- inputs ---------------------------------------------------------------

    def structured(self, name: str, content: bytes, kind: str, odds: float = 0.5) -> Path:
        """``content`` (JSON or YAML) written as ``name``: intact, with keys damaged, or with
        its bytes damaged."""
        roll = self.rng.random()
        if roll < odds * 0.7:
            data = (json.loads if kind == "json" else yaml.safe_load)(content)
            data, touched = mutate_data(self.rng, data)
            self.case.names.add(touched)
            self.damage(f"{Path(name).suffix[1:]}-keys")
            content = dump(data, kind)
        elif roll < odds:
            self.damage(f"{Path(name).suffix[1:]}-bytes")
            content = mutate_bytes(self.rng, content)
        return self.special(self.write(name, content))

    def csv(self, name: str, content: bytes, odds: float = 0.5) -> Path:
        roll = self.rng.random()
        if roll < odds * 0.8:
            self.damage("csv-cells")
            content = mutate_csv(self.rng, content)
        elif roll < odds:
            self.damage("csv-bytes")
            content = mutate_bytes(self.rng, content)
        return self.special(self.write(name, content))

    def special(self, path: Path, odds: float = 0.03) -> Path:
        """Now and then ``path`` replaced by a FIFO, ``/dev/zero``, a folder or nothing.
        Such a file on the command line must fail the case; a companion (a profile beside
        a scenario) fails it only where the scenario still names it, so either way goes."""
        if self.rng.random() >= odds:
            return path
        kind = self.rng.choice(["fifo", "zero", "folder", "missing"])
        self.damage(f"input-{kind}")
        self.case.must_fail = self.companion is None
        if path in self.inputs:
            self.inputs.remove(path)
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "folder":
            path.mkdir()
        return path

    def scenario(self, name: str, **companions: bytes) -> Path:
        """A bundled scenario (or ``name``'s text given as a companion ``scenario``), its
        companion files written beside it, then perhaps damaged by ``--set`` overrides."""
        text = companions.pop("scenario", None) or self.corpus.scenarios[name]
        if self.rng.random() < 0.03:
            self.damage("raw")
            return self.write(
                f"s{self.rng.choice(['.yaml', '.json', '.toml'])}",
                self.rng.choice(RAW_SCENARIOS).encode(),
            )
        for file, content in companions.items():
            self.companion = file
            if file.endswith(".csv"):
                self.csv(file, content, odds=0.3)
            else:
                self.structured(file, content, "json", odds=0.3)
        self.companion = None
        suffix = self.rng.choice([".yaml", ".yaml", ".json"])
        content = text if suffix == ".yaml" else dump(yaml.safe_load(text), "json")
        path = self.structured(f"s{suffix}", content, suffix[1:], odds=0.25)
        if self.rng.random() < 0.25:
            self.overrides(yaml.safe_load(text))
        return path

    def overrides(self, data: dict) -> None:
        """``--set`` options: a key of the scenario set to something wrong, or a plausible
        key (of a section the scenario has) set to a valid extreme."""
        plausible = [k for k in PLAUSIBLE_SETS if k.split(".")[0] in data]
        if plausible and self.rng.random() < 0.5:
            self.damage("set-plausible")
            for key in self.rng.sample(plausible, min(len(plausible), self.rng.choice([1, 2, 3]))):
                self.sets += ["--set", f"{key}={self.rng.choice(PLAUSIBLE_SETS[key])}"]
                self.case.names.update({key, key.split(".")[-1], "--set"})
            return
        self.damage("set")
        for _ in range(self.rng.choice([1, 1, 2])):
            path = ".".join(map(str, self.rng.choice(key_paths(data) or [("name",)])))
            value = self.rng.choice(SET_VALUES)
            self.sets += ["--set", f"{path}={value}" if self.rng.random() < 0.95 else path]
            self.case.names.update({path, path.split(".")[-1], "--set"})

    # -- options --------------------------------------------------------------

    def option(self, name: str, good: list[str], bad: list[str] = BAD_NUMBERS, odds=0.1) -> None:
        value = self.rng.choice(good)
        if self.rng.random() < odds:
            value = self.rng.choice(bad)
            self.damage(f"{name}-value")
        self.case.args += [name, value]
        self.case.names.update({name, f"{name.lstrip('-')}="})  # --hidden, or hidden=...

    def output(self, option: str, suffix: str, report: bool = False, odds: float = 0.08) -> str:
        """The path for ``option``: a new file in the folder, or one of the faults."""
        path = self.folder / "out" / f"{option.strip('-')}{suffix}"
        path.parent.mkdir(exist_ok=True)
        self.case.names.add(option)
        chosen = str(path)
        if self.rng.random() < odds:
            chosen = self.output_fault(path)
        elif report:
            self.case.reports.append(path)
        self.case.args += [option, chosen]
        return chosen

    def output_fault(self, path: Path) -> str:
        kinds = ["full", "input", "link", "missing", "folder"] + ["readonly"] * (not AS_ROOT)
        kind = self.rng.choice(kinds if self.inputs else kinds[:1] + kinds[3:])
        self.damage(f"output-{kind}")
        self.case.must_fail = True
        if kind == "full":
            self.case.names.add("/dev/full")
            return "/dev/full"
        if kind in ("input", "link"):
            target = self.rng.choice(self.inputs)
            if kind == "input":
                return str(target)
            link = path.with_name(f"link{path.suffix}")
            link.symlink_to(target)
            return str(link)
        if kind == "missing":
            return str(path.parent / "nowhere" / path.name)
        if kind == "folder":
            return str(path.parent)
        locked = path.parent / "locked"
        locked.mkdir(exist_ok=True)
        locked.chmod(0o555)
        return str(locked / path.name)
