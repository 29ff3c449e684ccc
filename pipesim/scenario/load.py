"""Reading scenario files and ``--set`` overrides, whatever a user hands over.

A scenario is a page of text: YAML, TOML or JSON. Reading it is the one place where
anything can arrive, so every door here is narrow:

* only regular files, at most ``MAX_FILE_BYTES`` (a device such as ``/dev/zero`` or a FIFO
  is refused before a byte is read), and only UTF-8 text;
* YAML is read as YAML 1.2 reads it (its core schema): ``1:30`` is the text "1:30", not
  90; ``yes``, ``no``, ``on`` and ``off`` are text, not switches; ``012`` is twelve;
  dates are text. A key given twice is an error, not "the last one wins" (in JSON too;
  TOML forbids it itself);
* nothing may nest deeper than ``MAX_DEPTH`` levels, and YAML aliases may not expand to
  more than ``MAX_ALIAS_EXPANSION`` extra nodes (a "billion laughs" file is refused at
  once) or refer to themselves.

Every problem is one ``ScenarioError`` line: ``FILE: what is wrong``.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import yaml

from pipesim.scenario.schema import ScenarioError

MAX_FILE_BYTES = 1 << 20  # a scenario is a page of text; a megabyte is hundreds of pages
MAX_DEPTH = 64
MAX_ALIAS_EXPANSION = 100_000

# ---------------------------------------------------------------------------
# Files


def read_text_file(
    path: str | Path,
    limit: int = MAX_FILE_BYTES,
    error: type[ValueError] = ScenarioError,
    what: str = "file",
) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes; ``error`` (one line
    naming the file, "no such ``what``" when it is missing) for anything else. A leading
    byte-order mark is dropped."""
    return decode_text(read_file_bytes(path, limit, error, what), path, error)


def read_file_bytes(
    path: str | Path,
    limit: int = MAX_FILE_BYTES,
    error: type[BaseException] = ScenarioError,
    what: str = "file",
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ``error`` (one line naming
    the file) for a missing file, a FIFO, a device, a folder or a larger file."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
        handle = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, ValueError) as exc:
        raise error(f"{path}: cannot open: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file")
        if info.st_size > limit:
            raise error(f"{path}: {info.st_size:,} bytes; at most {limit:,} bytes are read")
        with os.fdopen(os.dup(handle), "rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(handle)
    if len(data) > limit:
        raise error(f"{path}: more than {limit:,} bytes; at most {limit:,} bytes are read")
    return data


def decode_text(data: bytes, path: str | Path, error: type[BaseException] = ScenarioError) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); ``error`` naming ``path``
    and the first bad byte otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Parse a YAML, TOML or JSON file into a mapping; ScenarioError on any problem."""
    suffix = Path(path).suffix.lower()
    if suffix not in _PARSERS:
        raise ScenarioError(
            f"{path}: unknown file type {suffix!r}; allowed: .yaml, .yml, .toml, .json"
        )
    data = parse_text(read_text_file(path), suffix, str(path))
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of keys at the top level")
    return data


def parse_text(text: str, suffix: str, source: str) -> Any:
    """Parse ``text`` as the format its ``suffix`` names (``.yaml``, ``.toml``, ``.json``)."""
    kind = suffix.lstrip(".").upper().replace("YML", "YAML")
    try:
        data = _PARSERS[suffix](text)
    except RecursionError:
        raise ScenarioError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc.line}") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise ScenarioError(f"{source}: not valid {kind}: {_parse_problem(exc)}") from None
    check_depth(data, source)
    return data


def check_depth(data: Any, source: str, error: type[BaseException] = ScenarioError) -> None:
    """Refuse data nested deeper than ``MAX_DEPTH`` (an iterative walk: no recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise error(f"{source}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            stack += [(v, depth + 1) for v in value]


def _parse_problem(exc: BaseException) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return f"{where}{exc.problem}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ---------------------------------------------------------------------------
# YAML as YAML 1.2 reads it


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core schema instead of YAML 1.1's types.

    Plain scalars resolve to null (``null``, ``~``, empty), booleans (``true``/``false``
    in three spellings), integers (decimal, ``0o`` octal, ``0x`` hex), floats (including
    ``1e3``, ``.inf``, ``.nan``) or text: no base-60 numbers, no yes/no/on/off, no dates,
    no ``<<`` merge keys, and no tags outside the core schema (``!!set``, ``!!binary``...).
    Duplicate keys, nesting past ``MAX_DEPTH`` and alias bombs are errors.
    """

    yaml_implicit_resolvers: dict = {}

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise ScenarioError(
                    f"line {self.peek_event().start_mark.line + 1}: "
                    f"nested deeper than {MAX_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise _construct_error(key_node, "a key must be a plain value") from None
            if duplicate:
                raise _construct_error(key_node, f"duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # noqa: ANN001
        text = self.construct_scalar(node)
        try:
            if text[:2] in ("0o", "0x"):
                return int(text[2:], 8 if text[1] == "o" else 16)
            return int(text)
        except ValueError:
            raise _construct_error(node, f"cannot read {text[:40]!r} as an integer") from None

    def construct_yaml_float(self, node):  # noqa: ANN001
        text = self.construct_scalar(node)
        special = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}
        try:
            return float(special.get(text.lower(), text))
        except ValueError:
            raise _construct_error(node, f"cannot read {text[:40]!r} as a number") from None

    def construct_undefined(self, node):  # noqa: ANN001
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise _construct_error(node, f"the tag {tag[:40]} is not allowed; YAML 1.2 core only")

    def construct_yaml_bool(self, node):  # noqa: ANN001
        text = self.construct_scalar(node)
        if text.lower() not in ("true", "false"):
            raise _construct_error(node, f"{text[:40]!r} is not true or false")
        return text.lower() == "true"


def _construct_error(node, problem: str) -> yaml.constructor.ConstructorError:  # noqa: ANN001
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


_CORE_SCHEMA = (
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+.0123456789"),
    ),
)
for _tag, _pattern, _first in _CORE_SCHEMA:
    Yaml12Loader.add_implicit_resolver(_tag, yaml.resolver.re.compile(_pattern), _first)
# Only the core schema's tags: no !!set, !!omap, !!binary, !!timestamp, !!merge.
_CORE_TAGS = ("null", "bool", "int", "float", "str", "seq", "map")
Yaml12Loader.yaml_constructors = {
    tag: make
    for tag, make in yaml.SafeLoader.yaml_constructors.items()
    if tag is not None and tag.removeprefix("tag:yaml.org,2002:") in _CORE_TAGS
}
Yaml12Loader.add_constructor(None, Yaml12Loader.construct_undefined)
Yaml12Loader.add_constructor("tag:yaml.org,2002:int", Yaml12Loader.construct_yaml_int)
Yaml12Loader.add_constructor("tag:yaml.org,2002:float", Yaml12Loader.construct_yaml_float)
Yaml12Loader.add_constructor("tag:yaml.org,2002:bool", Yaml12Loader.construct_yaml_bool)


def load_yaml(text: str) -> Any:
    """One YAML document, read with ``Yaml12Loader`` once its aliases are checked."""
    loader = Yaml12Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases refer to themselves or expand to more than
    ``MAX_ALIAS_EXPANSION`` nodes beyond those written (sizes memoised per node, so the
    check itself never expands anything)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] - len(sizes) > MAX_ALIAS_EXPANSION:
                raise ScenarioError(
                    f"YAML aliases expand to more than {MAX_ALIAS_EXPANSION:,} extra nodes; "
                    "refusing to expand them"
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ScenarioError(
                f"line {node.start_mark.line + 1}: a YAML alias refers to its own anchor"
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack += [(child, False) for child in _children(node) if id(child) not in sizes]


# ---------------------------------------------------------------------------
# JSON and TOML


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = {}
    for key, value in pairs:
        if key in mapping:
            raise ValueError(f"duplicate key {key!r}")
        mapping[key] = value
    return mapping


def load_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_json_object)


_PARSERS = {
    ".yaml": load_yaml,
    ".yml": load_yaml,
    ".json": load_json,
    ".toml": tomllib.loads,
}


# ---------------------------------------------------------------------------
# --set overrides


def apply_overrides(
    data: dict[str, Any], overrides: list[str], source: str = "--set"
) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key.path=value`` applied (value parsed as YAML,
    with the same rules as a scenario file)."""
    result = json.loads(json.dumps(data, default=str)) if overrides else data
    for item in overrides:
        key, sep, raw = item.partition("=")
        shown = f"{source} {item[:60]!r}{'...' if len(item) > 60 else ''}"
        if not sep or not key.strip():
            raise ScenarioError(f"{shown}: expected key.path=value, e.g. pipeline.microbatches=16")
        parts = key.strip().split(".")
        if len(parts) >= MAX_DEPTH:
            raise ScenarioError(f"{shown}: a key path of more than {MAX_DEPTH} parts")
        value = parse_text(raw, ".yaml", shown) if raw.strip() else None
        target = result
        for part in parts[:-1]:
            nested = target.get(part)
            if nested is None:
                nested = target[part] = {}
            if not isinstance(nested, dict):
                raise ScenarioError(f"{shown}: {part} is not a section")
            target = nested
        target[parts[-1]] = value
    check_depth(result, source)
    return result
