"""The activation registry: ``get(name, **params)`` and ``names()``."""

from __future__ import annotations

from typing import Callable

from nngauge.activations._base import Activation
from nngauge.errors import UnknownNameError, invalid

_FACTORIES: dict[str, Callable[..., Activation]] = {}


def register(name: str) -> Callable[[Callable[..., Activation]], Callable[..., Activation]]:
    """Decorator adding an activation factory to the registry under ``name``."""

    def decorate(factory: Callable[..., Activation]) -> Callable[..., Activation]:
        _FACTORIES[name] = factory
        return factory

    return decorate


def names() -> list[str]:
    """Registered activation names, sorted."""
    return sorted(_FACTORIES)


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
    key = str(name).strip().lower().replace("-", "_")
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
