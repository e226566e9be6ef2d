"""Activations from text: ``from_spec("normalize(modify(tanh, dilation=1.2))")``.

The grammar is a Python call expression, parsed with :mod:`ast` (never evaluated):
``NAME`` or ``NAME(key=number, ...)`` for a registry activation, and the wrappers
``modify(SPEC, scale=, dilation=, shift=, offset=)``, ``debias(SPEC)``, ``unit_scale(SPEC)``,
``normalize(SPEC)``. An activation's ``label`` is such a spec, so ``from_spec(act.label)``
rebuilds ``act``. The command line also accepts ``NAME:key=number,...``.
"""

from __future__ import annotations

import ast
from typing import Callable

from nngauge._constraints import Check, constrained
from nngauge.activations._base import Activation
from nngauge.activations._modify import debias, modify, normalize, unit_scale
from nngauge.activations._registry import get
from nngauge.errors import InvalidInputError, invalid

_WHERE = "from_spec()"
_FIX = "write e.g. 'relu', 'leaky_relu(negative_slope=0.2)' or 'normalize(modify(tanh, dilation=1.2))'"


_WRAPPERS: dict[str, Callable[..., Activation]] = {
    "modify": modify, "debias": debias, "unit_scale": unit_scale, "normalize": normalize,
}


SPEC = Check(lambda v: isinstance(v, Activation) or (isinstance(v, str) and bool(v.strip())),
             "an activation spec string (e.g. 'normalize(modify(tanh, dilation=1.2))') or an "
             "Activation", (3, None, "", "  "))


@constrained(spec=SPEC)
def from_spec(spec: str | Activation) -> Activation:
    """Build an activation from its text spec (see the module docstring for the grammar).

    Example:
        >>> from nngauge.activations import from_spec
        >>> from_spec("leaky_relu:negative_slope=0.2").label
        'leaky_relu(negative_slope=0.2)'
    """
    if isinstance(spec, Activation):
        return spec
    text = spec.strip()
    if ":" in text and "(" not in text:
        name, _, args = text.partition(":")
        text = f"{name}({args})"
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise invalid(_WHERE, "a call expression", repr(spec), _FIX) from None
    return _build(tree, spec)


def _build(node: ast.expr, spec: str) -> Activation:
    if isinstance(node, ast.Name):
        return get(node.id)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise invalid(_WHERE, "NAME or NAME(...)", f"{ast.unparse(node)!r} in {spec!r}", _FIX)
    name = node.func.id
    kwargs = {kw.arg: _number(kw.value, spec) for kw in node.keywords}
    if None in kwargs:
        raise invalid(_WHERE, "key=value arguments", f"**kwargs in {spec!r}", _FIX)
    if name in _WRAPPERS:
        if len(node.args) != 1:
            raise invalid(_WHERE, f"{name}() with one activation argument",
                          f"{len(node.args)} positional arguments in {spec!r}", _FIX)
        return _WRAPPERS[name](_build(node.args[0], spec), **kwargs)
    if node.args:
        raise invalid(_WHERE, f"keyword parameters for {name}", f"positional ones in {spec!r}",
                      f"name them, e.g. {name}(param=value)")
    return get(name, **kwargs)


def _number(node: ast.expr, spec: str) -> float | int:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(
            f"{_WHERE} expected numeric parameters; got {ast.unparse(node)!r} in {spec!r}. "
            f"Fix: {_FIX}."
        )
    return value
