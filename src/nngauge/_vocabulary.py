"""Old parameter names, call layouts and result attribute names that keep working for one
release (the vocabulary of ``docs/api.md``).

When a parameter is renamed to the vocabulary's name, the function is decorated with
:func:`renamed`: a call with the old keyword emits one :class:`DeprecationWarning` naming the
new keyword and the release that removes the old one, and runs with the value passed under the
new name, so the old and the new spelling give the same values. When the order of the
positional arguments changed (``skim(model, start, end, data)`` became
``skim(model, data, *, layers=(start, end))``), :func:`legacy_layout` recognizes the old call
and rewrites it the same way. Every rename is recorded in :data:`RENAMES` and every old layout
in :data:`LAYOUTS`; a renamed result field keeps its old name as a
:class:`deprecated_attribute`, recorded in :data:`DEPRECATED_ATTRIBUTES`. From these
registries ``docs/api.md``'s table of deprecated names is written
(``docs/write_api.py``) and the tests call each old spelling beside its new one.

The warning is attributed to the first caller outside this module (``warnings.warn``'s
``stacklevel`` counts the decorators' frames), so that a filter on the caller's module (the
test configuration's ``error::DeprecationWarning:nngauge.*``) catches the library calling an
old name and lets a user's code (or a test) call it with a warning. Put these decorators
outermost, above :func:`nngauge._constraints.constrained`. Keyword arguments a user hands the
library to pass on (the Tracker's options) go through :func:`with_new_names`, whose warning
points at the user's code.

Example:
    >>> import warnings
    >>> @renamed(steps="n_iter")
    ... def ascend(*, n_iter=10):
    ...     return n_iter
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     ascend(steps=3)
    3
    >>> str(caught[0].message)
    "ascend(): the argument 'steps' is deprecated and will be removed in nngauge 0.3; use 'n_iter'"
"""

from __future__ import annotations

import functools
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

from nngauge.errors import invalid

F = TypeVar("F", bound=Callable)

REMOVED_IN = "0.3"
"""The release in which the deprecated names stop working."""


@dataclass(frozen=True)
class Rename:
    """One deprecated keyword of one function.

    Attributes:
        function: the function's qualified name (``"nngauge.measures.generalization._margin.capacity"``).
        old: the deprecated keyword.
        new: the keyword that replaces it.
        translate: maps an old value to the new one where the meaning of values changed too
            (None: the value passes unchanged); its docstring's first line says how (the
            generated docs quote it).
        merge: ``merge(old_value, new_value) -> new value`` for a call giving both keywords
            where that is meaningful (None: such a call is refused).
    """

    function: str
    old: str
    new: str
    translate: Optional[Callable[[Any], Any]] = None
    merge: Optional[Callable[[Any, Any], Any]] = None


@dataclass(frozen=True)
class Layout:
    """One deprecated positional layout of one function's arguments.

    Attributes:
        function: the function's qualified name.
        old: the old call, as users wrote it (``"skim(model, start, end, data)"``).
        new: the call that replaces it (``"skim(model, data, *, layers=(start, end))"``).
        matches: ``matches(args, kwargs)``: whether a call is in the old layout (never true of
            a call in the new one).
        translate: ``translate(args, kwargs) -> (args, kwargs)`` in the new layout.
    """

    function: str
    old: str
    new: str
    matches: Callable[[tuple, dict], bool]
    translate: Callable[[tuple, dict], tuple[tuple, dict]]


RENAMES: list[Rename] = []
"""Every deprecated keyword, in the order the decorated modules were imported."""

LAYOUTS: list[Layout] = []
"""Every deprecated positional layout, in the order the decorated modules were imported."""


def deprecation_message(where: str, old: str, new: str, *, kind: str = "argument") -> str:
    """The warning's text: the function (or class), the kind of name (``"argument"`` or
    ``"attribute"``), the old name, the release that removes it, the new name."""
    return (f"{where}: the {kind} {old!r} is deprecated and will be removed in nngauge "
            f"{REMOVED_IN}; use {new!r}")


def layout_message(old: str, new: str) -> str:
    """The warning's text for an old positional layout: the old call, the release that
    removes it, the new call."""
    return (f"the call {old} is deprecated and will be removed in nngauge {REMOVED_IN}; "
            f"use {new}")


def _warn(message: str, *, outside_nngauge: bool = False) -> None:
    """A DeprecationWarning attributed to the first frame outside this module (the caller of
    the outermost decorator, however many of this module's wrappers are stacked), or outside
    the whole package for names a user passed through it (:func:`with_new_names`)."""

    def inside(frame: Any) -> bool:
        if frame.f_code.co_filename == __file__:
            return True
        module = frame.f_globals.get("__name__", "")
        return outside_nngauge and (module == "nngauge" or module.startswith("nngauge."))

    frame, level = sys._getframe(0), 1
    while frame is not None and inside(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _qualified(function: Callable) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def renamed(**names: str | tuple) -> Callable[[F], F]:
    """Accept each ``old=new`` keyword under its old name with a DeprecationWarning.

    Args:
        names: old keyword -> new keyword, or -> ``(new keyword, translate)`` where the
            value's meaning changed with the name (``translate(old_value) -> new_value``), or
            -> ``(new keyword, translate, merge)`` where a call may give both
            (``merge(old_value, new_value) -> new_value``; it raises for the combinations it
            refuses).

    A call giving both the old and the new keyword is refused with an
    :class:`~nngauge.errors.InvalidInputError` unless the rename has a ``merge``.
    """

    def decorate(function: F) -> F:
        where = f"{function.__name__}()"
        qualified = _qualified(function)
        table = {}
        for old, spec in names.items():
            new, translate, merge = ((spec, None, None) if isinstance(spec, str)
                                     else (*spec, None, None)[:3])
            table[old] = Rename(qualified, old, new, translate, merge)
            RENAMES.append(table[old])

        @functools.wraps(function)
        def accepting_old_names(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **_renewed(table, kwargs, where))

        return accepting_old_names  # type: ignore[return-value]

    return decorate


def _renewed(table: dict[str, Rename], kwargs: dict, where: str, *,
             outside_nngauge: bool = False) -> dict:
    """``kwargs`` with every old keyword of ``table`` under its new name (translated, or
    merged with the new one), one warning each."""
    for old in [k for k in kwargs if k in table]:
        rename = table[old]
        value = kwargs.pop(old)
        if rename.new in kwargs:
            if rename.merge is None:
                raise invalid(where, f"{rename.new!r} alone", f"both {old!r} "
                              f"(deprecated) and {rename.new!r}", f"drop {old!r}")
            kwargs[rename.new] = rename.merge(value, kwargs[rename.new])
        else:
            kwargs[rename.new] = value if rename.translate is None else rename.translate(value)
        _warn(deprecation_message(where, old, rename.new), outside_nngauge=outside_nngauge)
    return kwargs


def with_new_names(function: Callable, options: dict, where: str) -> dict:
    """Keyword arguments a user gave for ``function`` through the library (the Tracker's
    options), deprecated names replaced by the new ones as ``function`` itself would, the
    warning attributed to the user's code.

    Example:
        >>> from nngauge.measures import capacity
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     with_new_names(capacity, {"margin_percentile": 10}, "Tracker")
        {'percentile': 10}
        >>> len(caught)
        1
    """
    qualified = _qualified(function)
    table = {r.old: r for r in RENAMES if r.function == qualified}
    return _renewed(table, dict(options), where, outside_nngauge=True)


def legacy_layout(old: str, new: str, *, matches: Callable[[tuple, dict], bool],
                  translate: Callable[[tuple, dict], tuple[tuple, dict]]
                  ) -> Callable[[F], F]:
    """Accept calls in an old positional layout with a DeprecationWarning.

    Args:
        old: the old call, e.g. ``"skim(model, start, end, data)"``.
        new: the new call, e.g. ``"skim(model, data, *, layers=(start, end))"``.
        matches: ``matches(args, kwargs)``: whether a call is in the old layout; it must be
            false for every call in the new layout (decide on what the new layout cannot
            hold, e.g. a string where the data goes).
        translate: ``translate(args, kwargs) -> (args, kwargs)`` in the new layout.

    Example:
        >>> @legacy_layout("span(lo, hi, x)", "span(x, *, bounds=(lo, hi))",
        ...                matches=lambda args, kwargs: len(args) == 3,
        ...                translate=lambda args, kwargs: ((args[2],), {**kwargs,
        ...                                                "bounds": args[:2]}))
        ... def span(x, *, bounds=(0, 1)):
        ...     return x, bounds
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     span(0, 2, "x")
        ('x', (0, 2))
        >>> print(caught[0].message)  # doctest: +NORMALIZE_WHITESPACE
        span(): the call span(lo, hi, x) is deprecated and will be removed in nngauge 0.3;
        use span(x, *, bounds=(lo, hi))
    """

    def decorate(function: F) -> F:
        where = f"{function.__name__}()"
        LAYOUTS.append(Layout(_qualified(function), old, new, matches, translate))
        message = f"{where}: {layout_message(old, new)}"

        @functools.wraps(function)
        def accepting_old_layout(*args: Any, **kwargs: Any) -> Any:
            if matches(args, kwargs):
                args, kwargs = translate(args, kwargs)
                _warn(message)
            return function(*args, **kwargs)

        return accepting_old_layout  # type: ignore[return-value]

    return decorate


@dataclass(frozen=True)
class AttributeRename:
    """One deprecated attribute of one result class.

    Attributes:
        owner: the class's qualified name
            (``"nngauge.measures.generalization._sharpness.PACBayesResult"``).
        old: the deprecated attribute.
        new: the field that replaces it.
    """

    owner: str
    old: str
    new: str


DEPRECATED_ATTRIBUTES: list[AttributeRename] = []
"""Every deprecated result attribute, in the order the defining modules were imported."""


class deprecated_attribute:  # noqa: N801 (used like ``property``)
    """A read-only class attribute standing for the renamed field ``new`` for one release.

    Declared in the class body as ``old = deprecated_attribute("new")`` (the old name is the
    attribute's own); reading ``instance.old`` emits one :class:`DeprecationWarning` naming
    ``new`` and returns ``instance.new``. It is not a dataclass field (it has no annotation),
    so ``to_dict()`` and ``repr`` show only the new field.
    """

    def __init__(self, new: str):
        self.new = new

    def __set_name__(self, owner: type, old: str) -> None:
        self.old, self.where = old, owner.__name__
        DEPRECATED_ATTRIBUTES.append(
            AttributeRename(f"{owner.__module__}.{owner.__qualname__}", old, self.new))

    def __get__(self, instance: Any, owner: Optional[type] = None) -> Any:
        if instance is None:
            return self
        _warn(deprecation_message(self.where, self.old, self.new, kind="attribute"))
        return getattr(instance, self.new)


__all__ = ["DEPRECATED_ATTRIBUTES", "LAYOUTS", "AttributeRename", "Layout", "REMOVED_IN",
           "RENAMES", "Rename", "deprecated_attribute", "deprecation_message", "layout_message",
           "legacy_layout", "renamed", "with_new_names"]
