"""Varying a scenario: the base scenario with some keys set, as ``--set`` sets them.

Every analysis that runs a scenario under other values (``pipesim compare`` under another
schedule, a sweep's grid point, the planner's candidate and the scenario ``--emit``
writes) asks for the same thing: the base mapping, copied, with a few keys set by the
dotted paths a user already types after ``--set`` (``pipeline.microbatches``,
``parallel.tensor``, ``hardware.intra_node_link``)::

    vary(base, {"pipeline.schedule": "zbv", "pipeline.virtual_stages": 2})

The values are typed already (``--set`` parses its text as YAML first; ``vary`` takes
what that parse gives). A key the schema does not know is refused before anything is
built, in the very line validation gives for it under ``--set``
(``pipeline.bogus: unknown key; allowed keys here: ...``). Values are not validated here:
the result is a mapping, and ``parse_spec`` validates it as it validates a file.

The input is never changed. As ``dataclasses.replace`` does, the result is new only where
it differs: the top level and every section on the way to a changed key are new dicts, and
the rest is shared with the input (plain data, read, never written in place), so a
planner can vary one base thousands of times for the price of a few dict copies.
"""

from __future__ import annotations

import reprlib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from pipesim.scenario.load import check_depth
from pipesim.scenario.schema import ScenarioError, ScenarioSpec


def vary(
    mapping: Mapping[str, Any],
    changes: Mapping[str, Any],
    *,
    drop: Iterable[str] = (),
    source: str = "vary",
) -> dict[str, Any]:
    """A copy of the scenario ``mapping`` with each dotted key of ``changes`` set to its
    value (sections created where missing) and each key of ``drop`` removed where present.

    ``source`` names the scenario in errors: ScenarioError, one line, for a key the schema
    does not know or a path through a value that is not a section."""
    result = dict(mapping)
    fresh = {id(result)}  # the dicts this call made, which it may write to
    for key, value in changes.items():
        section, name = _parent(result, key, source, fresh, create=True)
        section[name] = value
    for key in drop:
        section, name = _parent(result, key, source, fresh, create=False)
        if section is not None:
            section.pop(name, None)
    if any(isinstance(value, dict | list) for value in changes.values()):
        check_depth(result, source)  # a section or a list given whole: as deep as allowed
    return result


def _parent(
    data: dict[str, Any], key: str, source: str, fresh: set[int], *, create: bool
) -> tuple[dict[str, Any] | None, str]:
    """The section of ``data`` that holds ``key``'s last part (copied on the way, where
    ``fresh`` does not hold it yet), and that part. None for the section where one on the
    way is absent and ``create`` is false."""
    parts = key.split(".")
    section = data
    for part in parts[:-1]:
        nested = section.get(part)
        if nested is not None and not isinstance(nested, dict):  # what --set says first
            raise ScenarioError(f"{source}: {key}: {part} is not a section")
        if nested is None and not create:
            section = None
            break
        if nested is None or id(nested) not in fresh:
            nested = {} if nested is None else dict(nested)
            fresh.add(id(nested))
            section[part] = nested
        section = nested
    check_key(parts, source)
    return section, parts[-1]


def check_key(parts: list[str], source: str) -> None:
    """ScenarioError unless ``parts`` name a key of the scenario schema, worded as
    validation words an unknown key (``pipesim.scenario.schema.describe_validation_error``)."""
    if tuple(parts) in KEY_PATHS:
        return
    model: type[BaseModel] | None = ScenarioSpec
    for depth, part in enumerate(parts):
        if model is None:
            raise ScenarioError(f"{source}: {'.'.join(parts)}: {parts[depth - 1]} is not a section")
        if part not in model.model_fields:
            loc = ".".join([*parts[:depth], _key_text(part)])
            allowed = ", ".join(model.model_fields)
            raise ScenarioError(f"{source}: {loc}: unknown key; allowed keys here: {allowed}")
        model = _section(model.model_fields[part].annotation)


def _section(annotation: object) -> type[BaseModel] | None:
    """The model of a field that holds a section (``ModelSpec | None``, ``str | LinkSpec``),
    or None for a value (a number, a name, a list)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
    else:
        options = (annotation,)
    models = [o for o in options if isinstance(o, type) and issubclass(o, BaseModel)]
    return models[0] if models else None


def _key_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every key path of ``model``'s schema, sections and values alike."""
    paths = set()
    for name, info in model.model_fields.items():
        paths.add((*prefix, name))
        nested = _section(info.annotation)
        if nested is not None:
            paths |= _key_paths(nested, (*prefix, name))
    return paths


# Every key a scenario may hold, as a path of parts: what the schema says, spelt out once.
KEY_PATHS = frozenset(_key_paths(ScenarioSpec))


_SHORT = reprlib.Repr()
_SHORT.maxstring = 60


def _key_text(part: str) -> str:
    """A key as validation quotes it: plain where it reads plainly, else a short repr."""
    if part.isprintable() and part and not set(part) & set(" .'\""):
        return part if len(part) <= 60 else _SHORT.repr(part)
    return _SHORT.repr(part)


__all__ = ["KEY_PATHS", "check_key", "vary"]
