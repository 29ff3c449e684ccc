"""Mutators: what a careless or hostile user does to a file before handing it over.

Structured mutators edit parsed data (JSON or YAML) at a random key path: drop the key,
change its type, negate it, make it NaN, infinite, astronomically large, empty, nested
thousands deep, or a number written in unicode digits. Byte mutators work on the file as
it lies on disk: truncate it, splice in binary garbage, a byte-order mark, a stray NUL,
invalid UTF-8, a 5000-digit number or a '²' in place of a digit. CSV mutators edit one
cell, or drop, add or duplicate a column or a row.
"""

from __future__ import annotations

import json
import math
import random
import re

import yaml

HUGE = 10**400
DIGITS_5000 = "9" * 5000
UNICODE_NUMBERS = ["²", "٣", "１２", "3²", "½", "Ⅳ", "1\u00a0000", "-\u2212" + "1"]
VALUES = [0, -1, -0.0, 1e-320, 2**63, HUGE, math.nan, math.inf, -math.inf, True, None, "", "x"]


def key_paths(data, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside ``data`` (dict keys and list indexes)."""
    if not isinstance(data, dict | list) or len(prefix) > 12:
        return []
    paths = []
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, value in list(items)[:50]:  # a long list needs no more than its head
        paths.append((*prefix, key))
        paths += key_paths(value, (*prefix, key))
    return paths


def nested(depth: int, leaf=1):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def bad_value(rng: random.Random, old):
    """A value to put where ``old`` was."""
    roll = rng.randrange(12)
    if roll == 0 and isinstance(old, int | float) and not isinstance(old, bool):
        return -old if old else -1
    if roll == 1:
        return rng.choice([math.nan, math.inf, -math.inf])
    if roll == 2:
        return rng.choice([HUGE, 2**64, 1e308, 10**18])
    if roll == 3:
        return rng.choice(["", [], {}, None])
    if roll == 4:
        return nested(rng.choice([70, 2000]))
    if roll == 5:
        return rng.choice(UNICODE_NUMBERS)
    if roll == 6 and not isinstance(old, dict | list):  # retype
        return rng.choice([str(old), [old], {"v": old}, bool(old)])
    if roll == 7:
        return rng.choice(["nan", "inf", "1e999", DIGITS_5000, "0x10", "1_0"])
    return rng.choice(VALUES)


def mutate_data(rng: random.Random, data) -> tuple[object, str]:
    """``data`` with one to three keys damaged, and the last key name touched."""
    touched = ""
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = key_paths(data)
        if not paths:
            return bad_value(rng, data), "top level"
        path = rng.choice(paths)
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        touched = str(path[-1])
        if rng.random() < 0.2:
            del parent[path[-1]]
        else:
            parent[path[-1]] = bad_value(rng, parent[path[-1]])
    return data, touched


def dump(data, kind: str) -> bytes:
    """``data`` as JSON (NaN and Infinity as Python's json writes them) or YAML; a value
    either writer refuses falls back to the other's form of an empty mapping."""
    try:
        if kind == "yaml":
            return yaml.safe_dump(data, allow_unicode=True).encode()
        return json.dumps(data).encode()
    except (ValueError, RecursionError, yaml.YAMLError):
        return b"{}"


def mutate_bytes(rng: random.Random, text: bytes) -> bytes:
    roll = rng.randrange(9)
    at = rng.randrange(len(text) + 1)
    if roll == 0:
        return text[:at]
    if roll == 1:
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 64, 2000])))
    if roll == 2:
        return text[:at] + bytes(rng.getrandbits(8) for _ in range(8)) + text[at:]
    if roll == 3:
        return b"\xef\xbb\xbf" + text
    if roll == 4:
        return text[:at] + b"\x00" + text[at:]
    if roll == 5:
        return text[:at] + b"\xff\xfe" + text[at:]
    if roll == 6:
        return re.sub(rb"\d+", DIGITS_5000.encode(), text, count=1)
    if roll == 7:
        return re.sub(rb"\d", rng.choice(UNICODE_NUMBERS).encode(), text, count=1)
    return b""


CSV_CELLS = ["", "nan", "inf", "-1", "0", "1e999", DIGITS_5000, "²", "٣", "x", '"', "1,2"]


def mutate_csv(rng: random.Random, text: bytes) -> bytes:
    """One cell, row or column of a CSV file changed."""
    rows = [line.split(",") for line in text.decode("utf-8", "replace").splitlines()]
    if not rows:
        return b",\n"
    r = rng.randrange(len(rows))
    c = rng.randrange(len(rows[r]))
    match rng.randrange(6):
        case 0 | 1:
            rows[r][c] = rng.choice(CSV_CELLS + [rows[r][c] * 2])
        case 2:
            for row in rows:
                del row[min(c, len(row) - 1)]
        case 3:
            rows.insert(r, list(rows[r]))
        case 4:
            rows[r].append(rng.choice(CSV_CELLS))
        case 5:
            rows[r][c] = re.sub(r"\d", rng.choice(UNICODE_NUMBERS), rows[r][c], count=1)
    return ("\n".join(",".join(row) for row in rows) + "\n").encode()


# Texts no mutator above makes: the parsers' own traps.
RAW_SCENARIOS = [
    "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
    "a: &a [*a]\n",
    "[" * 5000 + "]" * 5000,
    "schema_version: 1\nschema_version: 1\n",
    "schema_version: 1\nname: t\npipeline: !!python/object/apply:os.getcwd []\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 1:30, microbatches: 2}\n",
    "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: ², microbatches: 2}\n",
    f"schema_version: 1\nname: t\npipeline: {{schedule: 1f1b, devices: {DIGITS_5000}}}\n",
    "\t- a\n",
    "--- 1\n--- 2\n",
    "? [a, b]\n: 1\n",
]
SERVING_TRACES = [
    b"",
    b"arrival_s,prompt_tokens,output_tokens\n",
    b"arrival_s,prompt_tokens\n0,10\n",
    b"prompt_tokens,output_tokens,arrival_s\n10,10,0\n",
    b"arrival_s,prompt_tokens,output_tokens\n1,10,10\n0,10,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n-1,10,10\n",
    b"arrival_s,prompt_tokens,output_tokens\nnan,10,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n0,1e999,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n0,\xc2\xb2,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n0,10.5,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n0,0,0\n",
    b"arrival_s,prompt_tokens,output_tokens\n1e300,10,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n0,10,10,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n" + DIGITS_5000.encode() + b",10,10\n",
    b"arrival_s,prompt_tokens,output_tokens\n0,99999999999999999999,10\n",
]


# Overrides a user might really try: valid one by one, extreme together, so that many
# cases get past validation and their reports are judged.
PLAUSIBLE_SETS = {
    "pipeline.microbatches": ["1", "2", "3", "64", "1000"],
    "pipeline.devices": ["1", "2", "3", "8", "32"],
    "pipeline.virtual_stages": ["1", "2", "3"],
    "pipeline.schedule": ["gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "zbv"],
    "costs.forward_ms": ["0", "1e-9", "1e9", "[1, 0, 1, 0]"],
    "costs.backward_ms": ["0", "1e-9", "1e9"],
    "costs.activation_bytes": ["0", "1e18"],
    "hardware.link": ["ideal", "{latency_us: 1e12}", "{bandwidth_gbps: 1e-6}"],
    "model.layers": ["1", "3", "1000"],
    "model.seq_len": ["1", "1000000"],
    "model.global_batch": ["1", "7", "100000"],
    "parallel.tensor": ["1", "3", "64"],
    "parallel.data": ["1", "1000"],
    "serving.max_num_seqs": ["1", "100000"],
    "serving.max_num_batched_tokens": ["1", "16"],
    "serving.block_size": ["1", "4096"],
    "serving.kv_blocks": ["1", "2"],
    "serving.gpu_memory_utilization": ["0.01", "1"],
    "serving.replicas": ["1", "3", "64"],
    "serving.chunked_prefill": ["true"],
    "serving.slo.percentile": ["0.001", "100"],
    "serving.slo.ttft_ms": ["0.001", "1e9"],
    "serving.workload.rate": ["1e-6", "1e6"],
    "serving.workload.duration_s": ["1e-6", "0.5"],
    "decode.tokens": ["1", "10000"],  # 100,000 with --runs 3 takes 25 s, within the size guard
    "decode.prompt_tokens": ["1", "1000000"],
}
