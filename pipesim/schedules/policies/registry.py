"""The policy registry: what each schedule policy declares, checked in one place.

A policy is a pure function from sizes to a ``Schedule``. Its registry entry, a
``Policy``, says everything else about it: the name a scenario uses, the summary and the
constraints ``pipesim schedules`` prints, how many chunks per device (virtual stages) it
runs with, the options it takes and, where one holds, its closed form. torch's
``get_schedule_class`` maps names to classes the same way; here the entry is data, so
nothing is read from a module by attribute name.

The registry checks the chunk count and the options before it calls the builder, so a
builder states only the limits that are its own (DualPipe's even device count, the equal
rounds of interleaved 1F1B), and the refusals read the same for every policy.

Adding a policy is one module and one line: the module defines
``build(devices, microbatches, virtual_stages, *, option: type = default, ...)`` and a
``POLICY = Policy(...)`` entry, and ``pipesim.schedules.policies`` lists it in
``POLICIES``. The builder's keyword-only parameters are the options it takes; a builder
may not take ``**options``, so an option it would ignore is refused instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from pipesim.schedules.ir import ConstraintError, Schedule

# build(devices, microbatches, virtual_stages, *, option=...) -> Schedule
Builder = Callable[..., Schedule]
# closed_form(p, m, v, forward_ms, backward_ms, hop_ms, training) -> (makespan_ms, busy_ms)
ClosedForm = Callable[[int, int, int, float, float, float, bool], tuple[float, float] | None]

_SIZES = ("devices", "microbatches", "virtual_stages")  # a builder's positional parameters


@dataclass(frozen=True, slots=True)
class ChunkRule:
    """How many chunks per device (virtual stages) a policy runs with.

    Exactly ``count`` (``exact``: 1 for 1F1B, 2 for the V shapes) or at least ``count``
    (2 for interleaved 1F1B; 1 for any count). ``note`` is added to the refusal, to say
    why the bound is there.
    """

    count: int = 1
    exact: bool = False
    note: str = ""

    @classmethod
    def exactly(cls, count: int) -> ChunkRule:
        return cls(count, exact=True)

    @classmethod
    def at_least(cls, count: int, note: str = "") -> ChunkRule:
        return cls(count, exact=False, note=note)

    @classmethod
    def any(cls) -> ChunkRule:
        return cls(1, exact=False)

    def fit(self, requested: int) -> int:
        """The count the policy runs with when ``requested`` is asked for."""
        return self.count if self.exact else max(requested, self.count)

    def check(self, name: str, virtual_stages: int) -> None:
        """Refuse a count the policy ``name`` cannot run with (ConstraintError)."""
        if self.exact and virtual_stages != self.count:
            raise ConstraintError(
                f"{name} takes virtual_stages = {self.count}, got virtual_stages={virtual_stages}"
            )
        if not self.exact and virtual_stages < self.count:
            note = f" ({self.note})" if self.note else ""
            raise ConstraintError(
                f"{name} needs virtual_stages >= {self.count}{note}, "
                f"got virtual_stages={virtual_stages}"
            )


def builder_options(name: str, build: Builder) -> tuple[str, ...]:
    """The options ``build`` takes: its keyword-only parameters, after the three sizes."""
    signature = inspect.signature(build)
    parameters = list(signature.parameters.values())
    positional = tuple(p.name for p in parameters if p.kind is not p.KEYWORD_ONLY)
    if positional != _SIZES:
        raise TypeError(
            f"policy {name!r}: build must take ({', '.join(_SIZES)}, *, option=default, ...), "
            f"got build{signature}; options are keyword-only and named, never **"
        )
    return tuple(p.name for p in parameters if p.kind is p.KEYWORD_ONLY)


@dataclass(frozen=True, slots=True)
class Policy:
    """One schedule policy: what ``pipesim schedules`` shows and what ``get_schedule`` needs.

    ``build(devices, microbatches, virtual_stages, *, options...)`` returns the Schedule;
    it is called only with a chunk count ``chunks`` allows and options it takes.
    ``closed_form(p, m, v, forward_ms, backward_ms, hop_ms, training)`` gives
    ``(makespan_ms, busy_ms per device)`` under uniform costs, or None where the formula
    does not hold (``pipesim.sim.closed_form`` checks that the costs are uniform).
    ``options`` is read from the builder's keyword-only parameters.
    """

    name: str
    summary: str
    constraints: str
    chunks: ChunkRule
    build: Builder
    closed_form: ClosedForm | None = None
    options: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", builder_options(self.name, self.build))

    def schedule(
        self, devices: int, microbatches: int, virtual_stages: int, **options: object
    ) -> Schedule:
        """Check the chunk count and the options, then build."""
        unknown = [key for key in options if key not in self.options]
        if unknown:
            raise ConstraintError(
                f"{self.name} takes no option {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(self.options) or 'none'}"
            )
        self.chunks.check(self.name, virtual_stages)
        return self.build(devices, microbatches, virtual_stages, **options)


class Registry(Mapping[str, Policy]):
    """Policies by name, in the order they were registered (the order they are listed)."""

    def __init__(self, policies: Iterable[Policy] = ()) -> None:
        self._policies: dict[str, Policy] = {}
        for policy in policies:
            self.register(policy)

    def register(self, policy: Policy) -> Policy:
        """Add ``policy``; a name registered twice is a mistake (ValueError)."""
        if policy.name in self._policies:
            raise ValueError(f"schedule {policy.name!r} is registered already")
        self._policies[policy.name] = policy
        return policy

    def unregister(self, name: str) -> Policy:
        """Remove and return the policy ``name``."""
        return self._policies.pop(name)

    def policy(self, name: str) -> Policy:
        """The policy ``name``, or a ConstraintError that lists the registered ones."""
        found = self._policies.get(name)
        if found is None:
            raise ConstraintError(f"unknown schedule {name!r}; allowed: {', '.join(self)}")
        return found

    def __getitem__(self, name: str) -> Policy:
        return self._policies[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._policies)

    def __len__(self) -> int:
        return len(self._policies)
