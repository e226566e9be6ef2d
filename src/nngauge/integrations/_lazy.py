"""The integrations' classes are built on first access (PEP 562), so that importing an
integration module never imports its framework."""

from __future__ import annotations

import sys
from typing import Any, Callable


def built_on_access(module: str, builders: dict[str, Callable[[], Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__``: a name of ``builders`` is built by its builder on first
    access and kept in the module ``module``; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name not in builders:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = builders[name]()
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
