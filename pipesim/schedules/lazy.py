"""A package's front whose names are imported on first use (PEP 562).

A package lists each public name with the module it lives in; a name is imported from
there when first read and kept in the package, so ``from pipesim.plot import save_figure``
loads the figure modules only when some code asks for a figure. It sits in the lowest
layer so that any package's ``__init__`` can use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_front(
    namespace: dict, public: dict[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose ``globals()`` is ``namespace`` and
    whose public names live in the modules ``public`` gives (name -> module)."""

    def __getattr__(name: str) -> object:
        if name not in public:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(public[name]), name)
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__


__all__ = ["lazy_front"]
