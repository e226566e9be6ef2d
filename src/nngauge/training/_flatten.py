"""A tracked measure's output as flat numeric columns ``measure/.../field``.

With ``name`` the tracked name, an output is read through its ``to_dict()`` (measure results)
or as plain values (numbers, dicts, lists, tensors, numpy arrays), and:

- a number is the column ``name``;
- a field ``f`` holding a number is ``name/f``, except a top-level field called ``name``
  itself, which is ``name`` (``nlc``'s nlc, ``margin``'s margin);
- the per-layer breakdown ``layers`` (rows with a ``name``) gives ``name/<layer>/<field>``,
  e.g. ``trajectory_length/layers.2.act/length``; other lists of named rows keep their field:
  ``capacity/measures/l2/capacity``;
- other lists and tuples are indexed: ``trajectory_length/lengths/0``; rows without a name
  too: ``pac_bayes/points/0/bound``; nested dicts add their keys: ``name/f/key``;
- skipped: strings, None, booleans (flags), and the top-level fields ``mode`` and
  ``settings`` (how the measure ran, not what it measured).

An output with no number at all is an error, never an empty column.

Example:
    >>> columns("m", {"a": 1.0, "layers": [{"name": "fc", "w": 2}], "seq": [3, 4], "s": "x"})
    {'m/a': 1.0, 'm/fc/w': 2.0, 'm/seq/0': 3.0, 'm/seq/1': 4.0}
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from nngauge._results import plain
from nngauge.errors import invalid

NOT_MEASURED = ("mode", "settings")


def columns(name: str, output: Any) -> dict[str, float]:
    """The numeric columns of one measure's output at one step (rules in the module docstring).

    Raises:
        InvalidInputError: the output holds no number, or two of its values would share a
            column name.
    """
    value = output.to_dict() if callable(getattr(output, "to_dict", None)) else plain(output)
    out: dict[str, float] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in NOT_MEASURED:
                continue
            top = key == name or (key == "layers" and _named_rows(item))
            _add(out, name if top else f"{name}/{key}", item, name)
    else:
        _add(out, name, value, name)
    if not out:
        text = repr(output)
        raise invalid(f"Tracker measure {name!r}", "an output holding a number (a float, a "
                      "dict or a measure result with numeric fields)",
                      f"{type(output).__name__} {text[:80]}{'...' if len(text) > 80 else ''}, "
                      "with no number", "return a float, a dict name -> float or a measure "
                      "result from the measure")
    return out


def _add(out: dict[str, float], column: str, value: Any, name: str) -> None:
    if isinstance(value, (bool, str)) or value is None:
        return
    if isinstance(value, numbers.Real):
        if column in out:
            raise invalid(f"Tracker measure {name!r}", "distinct column names",
                          f"two values for column {column!r}",
                          "rename the keys of the measure's output")
        out[column] = float(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _add(out, f"{column}/{key}", item, name)
    elif isinstance(value, (list, tuple)):
        if _named_rows(value):
            for row in value:
                _add(out, f"{column}/{row['name']}",
                     {k: v for k, v in row.items() if k != "name"}, name)
        else:
            for i, item in enumerate(value):
                _add(out, f"{column}/{i}", item, name)


def _named_rows(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(row, Mapping) and isinstance(row.get("name"), str) for row in value)
