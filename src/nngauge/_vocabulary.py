"""Old parameter and result attribute names that keep working for one release (the vocabulary
of ``docs/api.md``).

When a parameter is renamed to the vocabulary's name, the function is decorated with
:func:`renamed`: a call with the old keyword emits one :class:`DeprecationWarning` naming the
new keyword and the release that removes the old one, and runs with the value passed under the
new name, so the old and the new spelling give the same values. Every rename is recorded in
:data:`RENAMES`, from which ``docs/api.md``'s table of deprecated names is written and the
tests call each old name beside its new one.

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

When a field of a result is renamed, the old name stays a read-only attribute for one release
(:func:`deprecated_attribute`): reading it emits one DeprecationWarning naming the new field
and returns the new field's value. Every one is recorded in :data:`DEPRECATED_ATTRIBUTES`.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Curve:
    ...     points: tuple
    ...     layers = deprecated_attribute("points")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     Curve((1, 2)).layers
    (1, 2)
    >>> str(caught[0].message)
    "Curve: the attribute 'layers' is deprecated and will be removed in nngauge 0.3; use 'points'"
"""

from __future__ import annotations

import functools
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
            (None: the value passes unchanged).
    """

    function: str
    old: str
    new: str
    translate: Optional[Callable[[Any], Any]] = None


RENAMES: list[Rename] = []
"""Every deprecated keyword, in the order the decorated modules were imported."""


def deprecation_message(where: str, old: str, new: str, *, kind: str = "argument") -> str:
    """The warning's text: the function (or class), the kind of name (``"argument"`` or
    ``"attribute"``), the old name, the release that removes it, the new name."""
    return (f"{where}: the {kind} {old!r} is deprecated and will be removed in nngauge "
            f"{REMOVED_IN}; use {new!r}")


def renamed(**names: str | tuple[str, Callable[[Any], Any]]) -> Callable[[F], F]:
    """Accept each ``old=new`` keyword under its old name with a DeprecationWarning.

    Args:
        names: old keyword -> new keyword, or -> ``(new keyword, translate)`` where the
            value's meaning changed with the name (``translate(old_value) -> new_value``).

    A call giving both the old and the new keyword is refused with an
    :class:`~nngauge.errors.InvalidInputError`.
    """

    def decorate(function: F) -> F:
        where = f"{function.__name__}()"
        table = {old: (spec, None) if isinstance(spec, str) else spec
                 for old, spec in names.items()}
        qualified = f"{function.__module__}.{function.__qualname__}"
        for old, (new, translate) in table.items():
            RENAMES.append(Rename(qualified, old, new, translate))

        @functools.wraps(function)
        def accepting_old_names(*args: Any, **kwargs: Any) -> Any:
            for old in [k for k in kwargs if k in table]:
                new, translate = table[old]
                if new in kwargs:
                    raise invalid(where, f"{new!r} alone", f"both {old!r} (deprecated) and "
                                  f"{new!r}", f"drop {old!r}")
                value = kwargs.pop(old)
                kwargs[new] = translate(value) if translate is not None else value
                warnings.warn(deprecation_message(where, old, new), DeprecationWarning,
                              stacklevel=2)
            return function(*args, **kwargs)

        return accepting_old_names  # type: ignore[return-value]

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
        warnings.warn(deprecation_message(self.where, self.old, self.new, kind="attribute"),
                      DeprecationWarning, stacklevel=2)
        return getattr(instance, self.new)


__all__ = ["DEPRECATED_ATTRIBUTES", "REMOVED_IN", "RENAMES", "AttributeRename", "Rename",
           "deprecated_attribute", "deprecation_message", "renamed"]
