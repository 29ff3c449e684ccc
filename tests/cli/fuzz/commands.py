"""A case generator per command: which files it reads, which options it takes, which of
its outputs hold a JSON report. Heavy commands stay light: ``plan`` over a small space on
one worker, ``serve`` over a short trace, ``sweep`` on one worker, ``compare`` over a few
schedules, ``profile`` and ``crosscheck`` (torch) mostly refused before they time a thing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.cli.fuzz.cases import BAD_NUMBERS, Builder, Case
from tests.cli.fuzz.corpus import Corpus
from tests.cli.fuzz.mutate import SERVING_TRACES

SCHEDULES = ["gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "zbv", "dualpipe", "nope", ""]
TRAINING = [
    "gpipe-vs-1f1b.yaml",
    "interleaved.yaml",
    "stragglers.yaml",
    "llama-70b-4x8-h100.yaml",
    "gpt-nvlink-vs-pcie.yaml",
    "microbatch-tradeoff.yaml",
    "seed-pipelined.yaml",
    "seed-whole-batch.yaml",
    "decode-pipeline-fill.yaml",  # last: its critical path takes seconds
]
SEARCHING = "zb-auto-under-memory.yaml"  # a schedule search of seconds: validated only
PROFILED = {
    "schema_version": 1,
    "name": "profiled",
    "pipeline": {"schedule": "1f1b", "devices": 2, "microbatches": 4},
    "costs": {"profile": "p.json"},
}
FROM_CSV = {"schema_version": 1, "name": "csv", "pipeline": {"schedule": "csv"}}
FROM_CSV["pipeline"]["schedule_file"] = "sched.csv"


def training_scenario(b: Builder, names: list[str] = TRAINING) -> Path:
    """A bundled training scenario, or one that reads a profile or a torch CSV schedule."""
    roll = b.rng.random()
    if roll < 0.15:
        text = yaml.safe_dump(PROFILED).encode()
        return b.scenario("", scenario=text, **{"p.json": b.corpus.profile})
    if roll < 0.3:
        csv = b.rng.choice(b.corpus.torch_csvs)
        return b.scenario("", scenario=yaml.safe_dump(FROM_CSV).encode(), **{"sched.csv": csv})
    return b.scenario(b.rng.choice(names))


def serving_scenario(b: Builder) -> Path:
    if b.rng.random() < 0.6:
        text = b.corpus.serving_trace
        if b.rng.random() < 0.15:
            text = b.rng.choice(SERVING_TRACES)
            b.damage("trace-trap")
        trace = {"data/bursty-gamma-cv3.csv": text}
        return b.scenario("serve-bursty-trace.yaml", **trace)
    b.case.names.add("serving.workload")
    return b.scenario("llama-70b-serve-8xh100.yaml")


def report_format(b: Builder, choices: list[str]) -> None:
    """``-o x.json`` or ``--format json`` (the report judged), or ``--format`` with or
    against the suffix."""
    roll = b.rng.random()
    if roll < 0.8:
        b.output("-o", ".json", report=True)
    elif roll < 0.87:  # the report on standard output
        b.case.args += ["--format", "json"]
        b.case.stdout_report = True
    elif roll < 0.95:  # a contradiction: refused, naming -o
        b.output("-o", b.rng.choice([".csv", ".txt"]), odds=0)
        b.case.args += ["--format", "json"]
        b.damage("format-vs-suffix")
    else:
        b.option("--format", choices + ["yaml"], ["yaml", "JSON", ""], odds=0.5)


def run(b: Builder) -> None:
    critical = b.rng.random() < 0.1
    b.command("run", training_scenario(b, TRAINING[: -1 if critical else None]))
    b.case.args += ["--critical-path"] * critical
    report_format(b, ["table", "json", "csv"])
    for option, suffix in (
        ("--schedule-csv", ".csv"),
        ("--trace-csv", ".csv"),
        ("--trace", ".json"),
    ):
        if b.rng.random() < 0.1:
            b.output(option, suffix)
    if b.rng.random() < 0.15:
        b.option("--runs", ["2", "3"])
        b.option("--seed", ["0", "7"])
    if b.rng.random() < 0.1:
        b.option("--evaluator", ["auto", "fast", "simpy"], ["numpy", ""])


def validate(b: Builder) -> None:
    roll = b.rng.random()
    scenario = training_scenario(b, [*TRAINING, SEARCHING]) if roll < 0.8 else serving_scenario(b)
    b.command("validate", scenario)


def schedules(b: Builder) -> None:
    b.case.args += ["schedules", *b.rng.choice([[], [], ["--bogus"], ["x"], ["-o", "y"]])]
    b.case.names.update({"--bogus", "x", "-o"})


def compare(b: Builder) -> None:
    b.command("compare", training_scenario(b))
    names = b.rng.sample(SCHEDULES[:6], 2) + b.rng.choice([[], [], [], ["nope"], [""]])
    b.case.args += ["--schedules", ",".join(names)]
    b.case.names.update({"--schedules", "nope"})
    report_format(b, ["table", "json", "csv"])
    if b.rng.random() < 0.1:
        b.option("--runs", ["2"])


GRIDS = [
    "pipeline.microbatches=2,4",
    "pipeline.schedule=gpipe,1f1b",
    "pipeline.devices=2,4",
    "costs.forward_ms=1,2",
    "pipeline.microbatches=0,-1",
    "pipeline.microbatches=",
    "nokey=1,2",
    "pipeline.microbatches",
    "pipeline.microbatches=1,²",
    "pipeline.microbatches=" + ",".join(map(str, range(1, 100))),
]


def sweep(b: Builder) -> None:
    b.command("sweep", b.scenario(b.rng.choice(TRAINING[:3])))
    grid = b.rng.choice(GRIDS[:4] * 3 + GRIDS[4:])
    b.case.args += ["--grid", grid, "--jobs", "1", "--no-progress"]
    b.case.names.update({"--grid", grid.split("=")[0], "--jobs"})
    if b.rng.random() < 0.15:
        b.option("--max-points", ["100", "3"], odds=0.5)
    suffix = b.rng.choice([".json", ".json", ".csv", ".txt"])
    b.output("-o", suffix, report=suffix == ".json")
    if b.rng.random() < 0.05:
        b.option("--jobs", ["1"], ["0", "-2", "x"], odds=1)


def explain(b: Builder) -> None:
    b.command("explain", training_scenario(b, TRAINING[:-1]))
    report_format(b, ["text", "json"])
    if b.rng.random() < 0.15:
        b.option("--max-gaps", ["0", "3"], odds=0.5)


PLAN_SPACE = [
    "--space",
    "parallel.tensor=8",
    "--space",
    "pipeline.schedule=1f1b",
    "--space",
    "pipeline.microbatch_size=1",
    "--space",
    "model.recompute=false",
]
BAD_SPACES = ["parallel.tensor=3", "nokey=1", "parallel.tensor=", "pipeline.schedule=nope", "x"]


def plan(b: Builder) -> None:
    b.command("plan", b.scenario("plan-llama-70b-64xh100.yaml"))
    b.option("--gpus", ["64", "64", "16"], BAD_NUMBERS + ["7", "100000000000"])
    b.case.args += [*PLAN_SPACE, "--jobs", "1", "--no-progress"]
    if b.rng.random() < 0.1:
        b.case.args += ["--space", b.rng.choice(BAD_SPACES)]
        b.case.names.update({"--space", "parallel.tensor", "nokey", "pipeline.schedule", "x"})
        b.damage("space")
    b.option("--confirm", ["0", "1"])
    b.option("--top", ["3"])
    report_format(b, ["table", "json", "csv"])
    if b.rng.random() < 0.1:
        b.output("--emit", b.rng.choice([".yaml", ".yaml", ".txt"]))


def serve(b: Builder) -> None:
    b.command("serve", serving_scenario(b))
    b.case.args += ["--set", "serving.workload.requests=30"]
    b.case.names.add("--set")
    report_format(b, ["table", "json", "csv"])
    if b.rng.random() < 0.15:
        b.output("--requests", ".csv")
    if b.rng.random() < 0.05:
        b.output("--trace", ".json")


def import_trace(b: Builder) -> None:
    traces = b.corpus.kineto[:2] if b.rng.random() < 0.8 else b.corpus.kineto[2:]
    names = ["r0.json", "r1.json"] if len(traces) == 2 else ["r0.json.gz"]
    paths = []
    for name, text in zip(names, traces, strict=True):
        if name.endswith(".gz"):
            paths.append(b.special(b.write(name, b.rng.choice([text, text[:-9], text[:20]]))))
        else:
            paths.append(b.structured(name, text, "json", odds=0.6))
    if b.rng.random() < 0.05:
        paths.append(b.write("report.json", b.rng.choice(b.corpus.reports)))
        b.damage("wrong-kind")
    b.case.args += ["import-trace", *map(str, paths)]
    b.case.names.update({"traceEvents", "distributedInfo", "TRACES"})
    b.output("-o", ".json", report=True)
    if b.rng.random() < 0.1:
        b.output("--timeline", ".json", report=True)
    if b.rng.random() < 0.1:
        b.output("--timeline-csv", ".csv")


def fit(b: Builder) -> None:
    run_file = b.structured("run.json", b.corpus.run_file, "json", odds=0.7)
    b.case.args += ["fit", str(run_file)]
    b.case.names.update({"ranks", "meta", "RUNS"})
    if b.rng.random() < 0.05:
        b.case.args.append(str(b.write("report.json", b.rng.choice(b.corpus.reports))))
        b.damage("wrong-kind")
    b.output("-o", ".json", report=True)
    if b.rng.random() < 0.3:
        b.case.args += ["--profile", str(b.structured("p.json", b.corpus.profile, "json"))]


def profile(b: Builder) -> None:
    """Mostly refused before torch times anything: a damaged scenario or a bad option."""
    b.command("profile", b.scenario("gpipe-vs-1f1b.yaml"))
    b.case.args += ["--set", "pipeline.devices=2", "--set", "pipeline.microbatches=2"]
    b.case.args += ["--no-links", "--layers", "1", "--batch", "1"]
    b.option("--hidden", ["8"], odds=0.3)
    b.option("--ops", ["mlp"], ["sql", ""], odds=0.2)
    b.option("--repeats", ["20"], ["19", "0", "x"], odds=0.3)
    b.output("-o", ".json", report=True)


def crosscheck(b: Builder) -> None:
    """Refused before anything runs: each case damages the scenario, the profile or an
    option (a real run of two processes is the calibration tests' business)."""
    b.command("crosscheck", b.scenario("gpipe-vs-1f1b.yaml"))
    profile_file = b.write("p.json", b"{}" if b.rng.random() < 0.5 else b.corpus.profile[:40])
    b.case.args += ["--profile", str(profile_file), "--runs", "1"]
    b.option("--ops", ["synthetic"], ["sql", ""], odds=0.3)
    b.option("--format", ["json"], ["csv", ""], odds=0.3)
    b.case.must_fail = True


COMMANDS: list[tuple[Callable[[Builder], None], int]] = [
    (run, 20),
    (validate, 8),
    (schedules, 2),
    (compare, 8),
    (sweep, 8),
    (explain, 8),
    (plan, 3),
    (serve, 6),
    (import_trace, 14),
    (fit, 14),
    (profile, 1),
    (crosscheck, 1),
]


def make_case(rng: random.Random, corpus: Corpus, folder: Path) -> Case:
    """One case in ``folder`` (made empty by the caller)."""
    (generate,) = rng.choices([c for c, _ in COMMANDS], [w for _, w in COMMANDS])
    builder = Builder(rng, corpus, folder, generate.__name__.replace("_", "-"))
    generate(builder)
    return builder.case
