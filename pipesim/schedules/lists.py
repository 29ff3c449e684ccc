"""Sequences made on first read: kept as the arrays they come from until an item is read.

A policy that builds its lists in bulk (1F1B, GPipe, interleaved 1F1B, ZB-V) knows each
device's actions as integer columns (stage, kind, microbatch), and the passes a run goes
through (validation, the fast evaluator, the report) read those columns and nothing else.
Making a million ``Action`` tuples out of them would be most of what such a run spends in
Python, so they are made only for a caller that reads them: the text form, the grid
picture, the CSV export, the SimPy engine, search. ``MadeOnRead`` is that promise for any
sequence (a fast Trace's actions are one); ``ActionLists`` is a schedule's per-device
lists, which also answers, without making them, what a schedule asks of its lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


class MadeOnRead(Sequence[T]):
    """A read-only sequence of ``length`` items that ``make()`` builds on first read of
    an item (``made`` says whether that has happened); its length is known before.

    Compares equal to a tuple, a list or another such sequence with the same items."""

    __slots__ = ("_length", "_make", "_items")

    def __init__(self, length: int, make: Callable[[], Sequence[T]]) -> None:
        self._length = length
        self._make = make
        self._items: Sequence[T] | None = None

    @property
    def made(self) -> bool:
        return self._items is not None

    @property
    def items(self) -> Sequence[T]:
        """The items, made now if not yet."""
        if self._items is None:
            self._items = self._make()
            if len(self._items) != self._length:
                raise ValueError(f"made {len(self._items)} items, {self._length} promised")
        return self._items

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        return self.items[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __reversed__(self) -> Iterator[T]:
        return reversed(self.items)

    def __contains__(self, value: object) -> bool:
        return value in self.items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MadeOnRead):
            other = other.items
        if not isinstance(other, tuple | list):
            return NotImplemented
        return len(other) == self._length and tuple(self.items) == tuple(other)

    def __hash__(self) -> int:  # as the tuple of the items hashes
        return hash(tuple(self.items))

    def __repr__(self) -> str:
        return repr(self.items)


class ActionLists(MadeOnRead[tuple[Any, ...]]):
    """A schedule's per-device lists of Actions, made on first read from its columns.

    ``atoms``: how many simple actions the lists hold; ``training``: whether any is not a
    forward; ``columns``: the schedule's columns (``pipesim.schedules.columns.Columns``),
    which the lists are made from; ``content``: the arrays that say what the lists hold
    (equal arrays, equal lists), so two such lists compare without being made. Built by
    ``pipesim.schedules.columns.action_lists``.
    """

    __slots__ = ("atoms", "training", "columns", "content")

    def __init__(
        self,
        devices: int,
        make: Callable[[], Sequence[tuple[Any, ...]]],
        *,
        atoms: int,
        training: bool,
        columns: object,
        content: tuple[np.ndarray, ...],
    ) -> None:
        super().__init__(devices, make)
        self.atoms = atoms
        self.training = training
        self.columns = columns
        self.content = content

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ActionLists) and len(self.content) == len(other.content):
            return len(self) == len(other) and all(
                np.array_equal(mine, theirs)
                for mine, theirs in zip(self.content, other.content, strict=True)
            )
        return super().__eq__(other)

    __hash__ = MadeOnRead.__hash__

    def digest(self) -> int:
        """A hash of the content (not of the Actions: equal lists made otherwise, such as
        a tuple, hash differently), for keys of caches that compare what they find."""
        return hash(tuple(hash(array.tobytes()) for array in self.content))


__all__ = ["ActionLists", "MadeOnRead"]
