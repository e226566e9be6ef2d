"""The activation registry: ``get(name, **params)`` and ``names()``."""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from nngauge._constraints import Check, Flag, Instance, constrained
from nngauge.activations._base import Activation
from nngauge.errors import UnknownNameError, invalid

_FACTORIES: dict[str, Callable[..., Activation]] = {}


def builtin(name: str) -> Callable[[Callable[..., Activation]], Callable[..., Activation]]:
    """Decorator registering one of nngauge's own activations (checked by the test suite;
    factories may refer to activations defined after them, so none is built here)."""

    def decorate(factory: Callable[..., Activation]) -> Callable[..., Activation]:
        _FACTORIES[name] = factory
        return factory

    return decorate


def _key(name: str) -> str:
    """The registry key of ``name``: stripped, lower case, "-" read as "_"."""
    return name.strip().lower().replace("-", "_")


NEW_NAME = Check(lambda v: isinstance(v, str) and re.fullmatch(r"[a-z][a-z0-9_]*", _key(v)),
                 "a name of letters, digits and underscores starting with a letter",
                 (3, None, "", "1relu", "my act"))


@constrained(name=NEW_NAME, overwrite=Flag())
def register(name: str, *, overwrite: bool = False
             ) -> Callable[[Callable[..., Activation]], Callable[..., Activation]]:
    """Decorator adding an activation factory to the registry under ``name``.

    Args:
        name: letters, digits and underscores, starting with a letter (case and "-" are
            normalized as :func:`get` does: ``"My-Act"`` is ``"my_act"``).
        overwrite: replace an activation already registered under ``name`` (a built-in
            included: every later ``get(name)`` and ``mlp(activation=name)`` then builds the
            new one); refused otherwise.

    The factory must be callable; when it takes no required arguments it is called once to
    check that it returns an :class:`Activation`.

    Raises:
        InvalidInputError: a name that is not a string of that form, a name already taken
            without ``overwrite=True``, or a factory that is not callable or does not build an
            Activation.

    Example:
        >>> from nngauge.activations import register
        >>> try:
        ...     register("relu")
        ... except ValueError as exc:
        ...     print(str(exc).split(";")[0])
        activations.register() expected a name no activation is registered under
    """
    where = "activations.register()"
    key = _key(name)
    if key in _FACTORIES and not overwrite:
        raise invalid(where, "a name no activation is registered under",
                      f"{name!r}, already registered (get({key!r}) and "
                      f"mlp(activation={key!r}) build it)",
                      "choose another name, or pass overwrite=True to replace it everywhere")

    def decorate(factory: Callable[..., Activation]) -> Callable[..., Activation]:
        _check_factory(factory, key, where)
        _FACTORIES[key] = factory
        return factory

    return decorate


def _check_factory(factory: Any, key: str, where: str) -> None:
    """Callable; built once when it needs no arguments, and an Activation then."""
    if not callable(factory):
        raise invalid(where, f"a factory function for {key!r} (called as factory(**params))",
                      f"a {type(factory).__name__}", "decorate a function returning an "
                      "Activation")
    try:
        required = [p for p in inspect.signature(factory).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD,
                                                           p.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        return
    if required:
        return
    built = factory()
    if not isinstance(built, Activation):
        raise invalid(where, f"a factory for {key!r} returning an nngauge Activation",
                      f"one returning a {type(built).__name__}",
                      "build it with nngauge.activations (e.g. Activation(...) or "
                      "modify(get('tanh'), ...))")


def names() -> list[str]:
    """Registered activation names, sorted."""
    return sorted(_FACTORIES)


@constrained(name=Instance((str, Activation), "an activation name (see names()) or an "
                                                "Activation", (3, None, ("relu",))))
def get(name: str | Activation, **params) -> Activation:
    """The activation registered as ``name``, built with ``params``.

    Args:
        name: a registry name (see :func:`names`), or an :class:`Activation`, returned as is.
        **params: the activation's parameters, e.g. ``negative_slope`` for ``leaky_relu``.

    Raises:
        UnknownNameError: ``name`` is not registered (the message lists the known names).
        InvalidInputError: a parameter is unknown or out of range.

    Example:
        >>> from nngauge.activations import get
        >>> get("leaky_relu", negative_slope=0.2).label
        'leaky_relu(negative_slope=0.2)'
    """
    if isinstance(name, Activation):
        if params:
            raise invalid("get()", "no parameters with an Activation object",
                          f"{sorted(params)}", "pass the name instead, or drop the parameters")
        return name
    key = _key(name)
    if key not in _FACTORIES:
        raise UnknownNameError(
            f"get() expected a known activation name; got {name!r}. "
            f"Fix: use one of {', '.join(names())}."
        )
    try:
        return _FACTORIES[key](**params)
    except TypeError as exc:
        raise invalid(f"get({key!r})", "the activation's own parameters", f"{sorted(params)}",
                      f"check the parameters of {key!r} ({exc})") from None
