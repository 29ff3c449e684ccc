"""Fuzzing the command line with malformed and extreme scenarios.

A seeded generator writes scenario files a careless or hostile user might hand pipesim:
bundled scenarios with one key set to something wrong (a wrong type, NaN, infinity, a
negative or astronomically large number, an empty or wrong-length list, an unknown name),
``--set`` overrides doing the same, impossible combinations, YAML alias bombs, nesting a
thousand deep, binary garbage, non-UTF-8 text, special files where a file is expected,
broken profiles and CSV schedules beside the scenario. Each case runs ``pipesim run``
(now and then with a short Monte Carlo study), ``compare`` or ``validate`` in process,
writing to new files, existing files, a symlink, a missing folder or a folder, and must
end in one of two ways:

* exit 0 with a JSON report whose every number is finite, or
* exit 2 with exactly one ``pipesim: error:`` line on stderr (a schedule grid may follow),

never a traceback, never a hang (each case has a deadline; the size guard answers at
once), and never an output file written or an existing one touched when it fails.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import resource
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.scenario.schema import ScenarioSpec
from pipesim.schedules import POLICIES

SCENARIOS = Path(__file__).parents[2] / "scenarios"
BUNDLED = {p.name: yaml.safe_load(p.read_text()) for p in sorted(SCENARIOS.glob("*.yaml"))}
SEED = 20240609
CASE_DEADLINE_S = 10
SENTINEL = "an existing file pipesim must not touch\n"


class Hang(BaseException):
    """Raised by the alarm: a case ran past its deadline (BaseException, so that click's
    runner does not swallow it)."""


# ---------------------------------------------------------------------------
# What to throw


def schema_paths(model=ScenarioSpec, prefix: str = "") -> list[str]:
    """Every dotted key path the schema knows, sections included."""
    paths = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        for candidate in getattr(info.annotation, "__args__", (info.annotation,)):
            if isinstance(candidate, type) and hasattr(candidate, "model_fields"):
                paths += schema_paths(candidate, f"{path}.")
    return paths


PATHS = schema_paths()
NAMES = [
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "zb-h1",
    "zbv",
    "dualpipe",
    "dualpipev",
    "chimera",
    "csv",
    "pipedream",
    "nvlink4",
    "ib-ndr",
    "ideal",
    "h100-sxm",
    "forward",
    "train",
    "balanced",
    "even",
    "lognormal",
    "empirical",
]
NUMBERS = [
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    16,
    64,
    -1,
    -7,
    0.5,
    1.5,
    -0.0,
    1e-320,
    1e-9,
    1e308,
    2**31,
    2**53 + 1,
    2**63,
    10**12,
    10**20,
    10**400,
    math.nan,
    math.inf,
    -math.inf,
]
TEXTS = [
    "",
    "abc",
    "1:30",
    "yes",
    "no",
    "on",
    "off",
    "~",
    "null",
    "2024-01-01",
    "0x1F",
    "0o17",
    "012",
    "1_000",
    "1e3",
    ".inf",
    ".nan",
    "-.inf",
    "10**400",
    "1e400",
    "[]",
    "{}",
    "[1, 2]",
    "[1, 2, 3, 4]",
    "{a: 1}",
    "true",
    "!!binary aGk=",
    "&a [*a]",
    "\x00",
    "é\udcff",
]


def nasty_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(NUMBERS)
    if roll < 0.55:
        return rng.choice(NAMES)
    if roll < 0.62:
        return rng.choice(TEXTS)
    if roll < 0.7:
        return rng.choice([True, False, None, "", "x" * rng.choice([1, 300, 20000])])
    if roll < 0.85 and depth < 2:
        return [nasty_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 3, 4, 8, 9]))]
    if roll < 0.92 and depth < 2:
        return {rng.choice(PATHS).split(".")[-1]: nasty_value(rng, depth + 1)}
    return nested(rng.choice([5, 60, 5000]))


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def set_path(data: dict, path: str, value) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[parts[-1]] = value


def mutated(rng: random.Random) -> dict:
    data = json.loads(json.dumps(BUNDLED[rng.choice(sorted(BUNDLED))]))
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        set_path(data, rng.choice(PATHS), nasty_value(rng))
    return data


def as_json(data) -> str:
    try:
        return json.dumps(data)
    except (ValueError, RecursionError):
        return "{}"


def as_yaml(data) -> str:
    try:
        return yaml.safe_dump(data)
    except (yaml.YAMLError, RecursionError):
        return as_json(data)  # JSON is YAML


# Hand-written texts: the parsers' own traps.
RAW_YAML = [
    "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n",
    "a: &a [*a]\n",
    "a: &a {<<: *a}\n",
    "[" * 10000 + "]" * 10000,
    "{a: " * 3000 + "1" + "}" * 3000,
    "- " * 2000 + "1\n",
    "schema_version: 1\nschema_version: 1\nname: t\n",
    "schema_version: true\nname: t\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 1:30, microbatches: 2}\n",
    "schema_version: 1\nname: no\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n",
    "schema_version: 1\nname: t\npipeline: !!python/object:os.system {}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n"
    "costs: {forward_ms: .inf}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n"
    "costs: {forward_ms: .nan}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n"
    "hardware: {link: {bandwidth_gbps: .inf}}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n"
    "costs: {profile: /dev/zero}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n"
    "costs: {profile: /}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: csv, schedule_file: /dev/zero}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 100000000000000000000, "
    "microbatches: 2}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 4, microbatches: 1000000000000}\n",
    "",
    "---\n",
    "--- 1\n",
    "[]\n",
    "- a\n",
    "? [a, b]\n: 1\n",
    "1: 2\n",
    "null: 1\n",
    "%YAML 1.1\n--- {a: 1}\n",
    "? !!set {a, b}\n: 1\n",
    "name: !!binary aGk=\n",
    "? [a, b]\n: 1\n",
    "a: !!timestamp 2001-01-01\n",
    "a: !!merge {b: 1}\n",
    "a: 1\n---\nb: 2\n",
    "\ufeffschema_version: 1\n",
    "\t a: 1\n",
]
RAW_JSON = [
    '{"a": NaN}',
    '{"a": Infinity}',
    "[" * 100000 + "]" * 100000,
    '{"a": 1, "a": 2}',
    '{"schema_version": 1e999}',
    '{"schema_version": 1, "name": "t", "pipeline": '
    '{"schedule": "1f1b", "devices": 2, "microbatches": 2}, "costs": {"forward_ms": -Infinity}}',
    "",
    "nul\x00l",
    '"\\ud800"',
    "1" * 5000,
]
RAW_TOML = [
    "schema_version = 1\nschema_version = 1\n",
    "a = " + "[" * 5000 + "]" * 5000 + "\n",
    "schema_version = 1\nname = 't'\n[pipeline]\nschedule = '1f1b'\ndevices = 2\n"
    "microbatches = 2\n[costs]\nforward_ms = inf\n",
    "schema_version = 1\nname = 't'\n[pipeline]\nschedule = '1f1b'\ndevices = 2\n"
    "microbatches = 2\n[costs]\nforward_ms = nan\n",
    "schema_version = true\n",
    "= 1\n",
    "a = 1979-05-27T07:32:00Z\n",
]
OVERRIDE_VALUES = [
    "0",
    "-1",
    "2",
    "3",
    "8",
    "64",
    "1000000000000",
    "10**400",
    "1" + "0" * 400,
    "1e400",
    ".inf",
    ".nan",
    "-.inf",
    "forward",
    "train",
    "yes",
    "1:30",
    "[]",
    "[1,2]",
    "{}",
    "null",
    "",
    "zbv",
    "dualpipe",
    "interleaved-1f1b",
    "x" * 20000,
    "[" * 3000 + "]" * 3000,
    "&a [*a]",
    "!!python/name:os.system",
    "true",
    "0.5",
    "1e-320",
]


# Values a user might really try, so that many cases get past validation and run.
PLAUSIBLE = {
    "pipeline.schedule": sorted(POLICIES) + ["csv"],
    "pipeline.devices": ["1", "2", "3", "4", "8", "16"],
    "pipeline.microbatches": ["1", "2", "3", "4", "8", "12", "32"],
    "pipeline.virtual_stages": ["1", "2", "3", "4"],
    "pipeline.microbatch_size": ["1", "2", "4"],
    "pipeline.mode": ["forward", "train"],
    "pipeline.max_actions": ["1", "100", "100000000"],
    "costs.forward_ms": ["0", "1", "0.25", "1e-9", "1e12", "[1, 2, 3, 4]", "[0, 0, 0, 0]"],
    "costs.backward_ms": ["0", "2", "3.5", "[2, 2, 2, 2]"],
    "costs.backward_input_ms": ["1", "0"],
    "costs.backward_weight_ms": ["1", "0"],
    "costs.overlapped_fb_ms": ["2", "0"],
    "costs.activation_bytes": ["0", "1e6", "1e18", "1e-9"],
    "costs.overhead_ms": ["0", "0.5"],
    "hardware.link": [
        "ideal",
        "nvlink4",
        "pcie4",
        "ib-ndr",
        "{latency_us: 10}",
        "{latency_us: 1e15, bandwidth_gbps: 1e-6}",
        "{bandwidth_gbps: 1e9}",
    ],
    "hardware.gpus_per_node": ["1", "2", "8"],
    "hardware.intra_node_link": ["nvlink4", "pcie5"],
    "hardware.inter_node_link": ["ib-hdr", "roce-400"],
    "hardware.placement": ["[0, 0, 1, 1]", "[0, 1]", "[0, 0, 0, 0]"],
    "hardware.pcie_switch_share": ["1", "2"],
    "hardware.comm_overlap": ["true", "false"],
    "hardware.runtime_bytes": ["0", "1073741824"],
    "hardware.fragmentation": ["0", "0.1"],
    "hardware.memory_headroom": ["0", "0.5"],
    "hardware.gpu": ["h100-sxm", "a100-sxm-40gb", "l40s"],
    "model.layers": ["1", "4", "8", "80", "1000", "9007199254740992"],
    "model.heads": ["1", "8", "64", "7"],
    "model.vocab": ["1", "32000", "9007199254740992"],
    "model.ffn_hidden": ["1", "28672", "9007199254740992"],
    "model.efficiency.half_tokens": ["0", "1e18"],
    "model.efficiency.max_fraction": ["1e-9", "1"],
    "model.efficiency.gemm_fraction": ["1e-9", "1"],
    "model.efficiency.gemm_half_dim": ["0", "1e9"],
    "model.fp8": ["tensorwise", "blockwise", "null"],
    "model.hidden": ["64", "8192", "100", "9007199254740992"],
    "model.seq_len": ["1", "128", "4096", "1000000", "9007199254740992"],
    "model.global_batch": ["8", "32", "33", "1024", "9007199254740992"],
    "model.partition": ["even", "balanced", "[20, 20, 20, 20]", "[1, 1]"],
    "model.recompute": ["true", "false"],
    "model.microbatch_size": ["1", "2"],
    "parallel.tensor": ["1", "2", "4", "8", "16", "64", "3"],
    "parallel.data": ["1", "2", "4", "64", "9007199254740992"],
    "parallel.zero_stage": ["0", "1", "3"],
    "parallel.sequence_parallel": ["true", "false"],
    "parallel.dp_overlap": ["true", "false"],
    "parallel.expert": ["1", "2", "3", "8", "64"],
    "parallel.expert_tensor": ["1", "2", "3"],
    "model.moe.routing.kind": ["uniform", "zipf", "hot", "histogram"],
    "model.moe.capacity_factor": ["1.0", "1.25"],
    "model.moe.redundant_experts": ["0", "3", "8"],
    "model.moe.max_nodes_per_token": ["1", "4"],
}


@dataclass
class Case:
    text: bytes
    suffix: str
    args: list[str] = field(default_factory=list)
    scenario_path: str | None = None  # a special path instead of the written file
    companions: dict[str, bytes] = field(default_factory=dict)  # profile, CSV schedule


def overrides(rng: random.Random, plausible: bool, name: str = "") -> list[str]:
    """``--set`` options: plausible ones stay within the sections the scenario uses."""
    has_model = "model" in BUNDLED.get(name, {})
    skip = ("costs.",) if has_model else ("model.", "parallel.", "hardware.gpu")
    keys = [k for k in sorted(PLAUSIBLE) if not k.startswith(skip)]
    args = []
    for _ in range(rng.choice([1, 1, 2, 3, 4])):
        if plausible:
            key = rng.choice(keys)
            args += ["--set", f"{key}={rng.choice(PLAUSIBLE[key])}"]
        else:
            args += ["--set", f"{rng.choice(PATHS)}={rng.choice(OVERRIDE_VALUES)}"]
    return args


PROFILE = {
    "format": "pipesim-profile",
    "version": 1,
    "stages": [
        {
            "stage": 0,
            "activation_bytes": 4096,
            "F": {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.2, "samples": 20},
            "B": {"median_ms": 2.0, "p10_ms": 1.8, "p90_ms": 2.4, "samples": 20},
        },
    ],
    "links": [{"name": "gloo", "latency_us": 80.0, "bandwidth_gbps": 1.5, "points": []}],
    "host": {"overhead_ms": 0.1, "hop_ms": 0.2, "samples": 10},
}
CSV = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"
CSV_TRAPS = [
    "",
    "\n",
    "0F0",
    "0F99999999999999999999,1B0\n",
    "x,y\n",
    "0F0," * 5000,
    "0F0,0B0\n" * 3,
    "(0F0;1B0)OVERLAP_F_B\n1F0,1B0\n",
    "0F-1\n",
    "\x00\n",
]


def companion_case(rng: random.Random) -> Case:
    """A scenario that reads a profile or a CSV schedule, either of them broken or not."""
    base = {
        "schema_version": 1,
        "name": "c",
        "pipeline": {"schedule": "1f1b", "devices": 2, "microbatches": 2},
    }
    if rng.random() < 0.5:
        profile = json.loads(json.dumps(PROFILE))
        if rng.random() < 0.7:
            target = rng.choice(
                [
                    profile,
                    profile["stages"][0],
                    profile["stages"][0]["F"],
                    profile["links"][0],
                    profile["host"],
                ]
            )
            target[rng.choice(sorted(target))] = nasty_value(rng)
        data = {**base, "costs": {"profile": "p.json"}}
        if rng.random() < 0.3:
            data["variability"] = {"forward": {"profile": "p.json"}}
        return Case(
            as_yaml(data).encode(), ".yaml", companions={"p.json": as_json(profile).encode()}
        )
    pipeline = {"schedule": "csv", "schedule_file": "s.csv"}
    roll = rng.random()
    if roll < 0.5:  # one of torch's own files, compute-only or lowered, perhaps damaged
        text = damaged(rng, rng.choice(TORCH_CSVS).read_text()) if roll < 0.35 else CSV
    else:
        text = rng.choice(CSV_TRAPS)
        pipeline.update(devices=2, microbatches=2)
    data = {**base, "pipeline": pipeline}
    return Case(
        as_yaml(data).encode(),
        ".yaml",
        overrides(rng, True)[:2] * (rng.random() < 0.3),
        companions={"s.csv": text.encode()},
    )


TORCH_CSVS = sorted((Path(__file__).parents[1] / "schedules" / "golden").glob("torch-*.csv"))


def damaged(rng: random.Random, text: str) -> str:
    """A torch CSV with one cell swapped, dropped, duplicated or renumbered, or intact."""
    rows = [row.split(",") for row in text.splitlines()]
    row = rng.choice(rows)
    k = rng.randrange(len(row))
    match rng.randrange(5):
        case 0:
            j = rng.randrange(len(row))
            row[k], row[j] = row[j], row[k]
        case 1:
            del row[k]
        case 2:
            row.insert(k, row[k])
        case 3:
            row[k] = re.sub(r"\d+", str(rng.choice([0, 7, 99, 10**15])), row[k], count=1)
    return "\n".join(",".join(r) for r in rows) + "\n"


def make_case(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.15:
        data = mutated(rng)
        suffix = rng.choice([".yaml", ".json"])
        text = (as_yaml if suffix == ".yaml" else as_json)(data)
        return Case(text.encode("utf-8", "surrogatepass"), suffix)
    if roll < 0.55:
        name = rng.choice(sorted(BUNDLED))
        return Case((SCENARIOS / name).read_bytes(), ".yaml", overrides(rng, roll < 0.45, name))
    if roll < 0.65:
        return companion_case(rng)
    if roll < 0.8:
        suffix, text = rng.choice(
            [(".yaml", t) for t in RAW_YAML]
            + [(".json", t) for t in RAW_JSON]
            + [(".toml", t) for t in RAW_TOML]
        )
        return Case(text.encode("utf-8", "surrogatepass"), suffix)
    if roll < 0.9:
        garbage = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 16, 200, 3000])))
        return Case(garbage, rng.choice([".yaml", ".json", ".toml"]))
    if roll < 0.95:
        text = (SCENARIOS / rng.choice(sorted(BUNDLED))).read_text()
        encoded = text.replace("#", "# caf\u00e9 ", 1).encode("latin-1", "replace")
        return Case(encoded, ".yaml")
    special = rng.choice(["zero", "null", "fifo", "dir", "missing"])
    return Case(b"", ".yaml", [], special)


# ---------------------------------------------------------------------------
# Running a case and judging its outcome


@dataclass
class Outputs:
    args: list[str]
    report: Path  # where a successful run's JSON report lands
    protected: list[Path] = field(default_factory=list)  # existing files a failure keeps
    links: list[Path] = field(default_factory=list)  # symlinks that must stay symlinks


def output_args(rng: random.Random, out: Path) -> Outputs:
    """Output options for one case: new files, existing files, a symlink, a missing folder,
    a folder, and now and then a Gantt chart."""
    roll = rng.random()
    report, existing = out / "report.json", out / "existing.json"
    if roll < 0.5:
        return Outputs(["-o", str(report)], report)
    existing.write_text(SENTINEL)
    if roll < 0.65:
        return Outputs(["-o", str(existing)], existing, [existing])
    if roll < 0.78:
        return Outputs(["-o", str(report), "--trace", str(existing)], report, [existing])
    if roll < 0.84:
        link = out / "link.json"
        link.symlink_to(existing)
        return Outputs(["-o", str(link)], existing, [existing], [link])
    if roll < 0.9:
        return Outputs(["-o", str(report), "--trace", str(out / "nodir" / "t.json")], report)
    if roll < 0.93:
        return Outputs(["-o", str(out), "--trace", str(existing)], report, [existing])
    if roll < 0.99:
        return Outputs(["-o", str(report), "--trace-csv", str(out / "rows.csv")], report)
    gantt = ["--gantt", str(out / "g.png"), "--trace", str(existing)]
    return Outputs(["-o", str(report), *gantt], report, [existing])


def finite_numbers(value) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int | float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_numbers(v) for v in value)
    return False


def on_alarm(signum, frame):
    raise Hang()


def command(rng: random.Random) -> list[str]:
    """Mostly ``run``; sometimes with a short Monte Carlo study, sometimes ``compare`` (which
    re-cuts the scenario for each schedule) or ``validate``."""
    roll = rng.random()
    if roll < 0.08:
        names = rng.sample(sorted(POLICIES), 3) + rng.choice([[], ["pipedream"], [""]])
        return ["compare", "--format", "json", "--schedules", ",".join(names)]
    if roll < 0.12:
        return ["validate"]
    runs = ["--runs", "2"] if roll < 0.16 else []
    return ["run", "--format", "json", *runs]


def special_file(folder: Path, kind: str) -> Path:
    """A scenario path that is not a regular file: a device, a FIFO, a folder, nothing."""
    path = folder / f"{kind}.yaml"
    if kind in ("zero", "null"):
        path.symlink_to(f"/dev/{kind}")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    return path


def run_case(case: Case, rng: random.Random, tmp: Path) -> tuple[int | None, str | None]:
    """Run one case: its exit code, and None if it kept the contract, else what went
    wrong."""
    inputs, out = tmp / "in", tmp / "out"
    inputs.mkdir(parents=True)
    out.mkdir()
    scenario = inputs / f"s{case.suffix}"
    scenario.write_bytes(case.text)
    for name, text in case.companions.items():
        (inputs / name).write_bytes(text)
    if case.scenario_path is not None:
        scenario = special_file(inputs, case.scenario_path)
    verb = command(rng)
    outputs = output_args(rng, out)
    if verb[0] == "validate":
        outputs = Outputs([], out / "none", outputs.protected, outputs.links)
    elif verb[0] == "compare":  # only -o: keep the report file, drop the trace options
        outputs.args = outputs.args[:2]
        outputs.protected = [p for p in outputs.protected if p == outputs.report]
    before = sorted(p.name for p in out.iterdir())
    args = [*verb, str(scenario), *case.args, *outputs.args]
    signal.alarm(CASE_DEADLINE_S)
    try:
        result = CliRunner().invoke(main, args)
    except Hang:
        return None, f"no answer within {CASE_DEADLINE_S} s"
    finally:
        signal.alarm(0)
    return result.exit_code, judge(result, out, before, outputs)


def judge(result, out: Path, before: list[str], outputs: Outputs) -> str | None:
    stderr = result.stderr
    if "Traceback" in stderr or not isinstance(result.exception, SystemExit | None):
        return f"exception {type(result.exception).__name__}: {result.exception}"[:400]
    if any(not link.is_symlink() for link in outputs.links):
        return "a symlink given as an output was replaced"
    if result.exit_code == 0 and not outputs.args:
        head = result.stdout.partition("\n")[0]  # memory and serving lines may follow
        said_ok = head.endswith(" actions") or ": ok for pipesim serve - " in head
        return None if said_ok else f"validate said {result.stdout!r}"
    if result.exit_code == 0:
        try:
            data = json.loads(outputs.report.read_text())
        except (OSError, ValueError) as exc:
            return f"exit 0 without a JSON report: {exc}"
        return None if finite_numbers(data) else "a report with a non-finite number"
    if result.exit_code != 2:
        return f"exit code {result.exit_code}: {stderr[:300]}"
    lines = [line for line in stderr.splitlines() if not line.startswith("pipesim: note: ")]
    if not lines or not lines[0].startswith("pipesim: error: "):
        return f"exit 2 without an error line: {stderr[:300]!r}"
    if len(lines[0]) > 320 or any(line.startswith("pipesim: error") for line in lines[1:]):
        return f"error text too long or repeated: {stderr[:300]!r}"
    after = sorted(p.name for p in out.iterdir())
    if after != before:
        return f"exit 2 but outputs changed: {before} -> {after}"
    if any(path.read_text() != SENTINEL for path in outputs.protected):
        return "exit 2 but an existing output file was changed"
    return None


def address_space_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def fuzz(cases: int, seed: int, tmp_path: Path) -> tuple[list[str], Counter]:
    """Run ``cases`` cases; a case that tries to allocate without bound meets a MemoryError
    (the address space is capped a few GiB above what the tests use) instead of the OOM
    killer."""
    rng = random.Random(seed)
    failures, exits = [], Counter()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    if address_space_bytes():
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes() + (4 << 30), limits[1]))
    try:
        for index in range(cases):
            case = make_case(rng)
            code, problem = run_case(case, rng, tmp_path / str(index))
            exits[code] += 1
            if problem is not None:
                shown = case.text[:120]
                failures.append(f"case {index} {case.suffix} {case.args[:4]} {shown!r}: {problem}")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.signal(signal.SIGALRM, previous)
    return failures, exits


def test_fuzz_the_command_line(tmp_path):
    cases = int(os.environ.get("PIPESIM_FUZZ_CASES", 1000))
    seed = int(os.environ.get("PIPESIM_FUZZ_SEED", SEED))
    failures, exits = fuzz(cases, seed, tmp_path)
    print(dict(exits))
    assert not failures, f"{len(failures)} cases broke the contract:\n" + "\n".join(failures)


@pytest.mark.fuzz
def test_fuzz_the_command_line_longer(tmp_path):
    failures, _ = fuzz(2000, SEED + 1, tmp_path)  # every command's fuzz: tests/cli/fuzz
    assert not failures, f"{len(failures)} cases broke the contract:\n" + "\n".join(failures)
