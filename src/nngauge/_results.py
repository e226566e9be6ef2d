"""The one protocol of every nngauge result: ``to_dict``, ``to_frame``, ``plot`` and lookup by
layer name.

Every result of :mod:`nngauge.measures` and :mod:`nngauge.theory`, and every row of their
breakdowns, is a frozen dataclass deriving from :class:`Result`. A subclass declares what it
holds in a few class attributes, and the methods follow from them with no per-class code:

- ``_rows``: the field holding the breakdown, a tuple of row dataclasses. Rows with a ``name``
  are layers: ``result["conv1"]`` is the row of ``conv1``. Rows without one are the points of
  a curve, whose first field is their coordinate (PAC-Bayes points by alpha).
- ``_headline``: what the default plot draws: the row field drawn per row (``"nlc"``), or the
  column(s) of ``_curve`` drawn (default: all).
- ``_curve``: a curve held as sequences of equal length, ``(x, y, ...)``.
- ``_distribution``: the field holding a sample (margins, losses) drawn as a histogram.
- ``_summary``: the headline numbers: drawn as labelled bars when the result has no rows, no
  curve and no distribution, else marked on the distribution.
- ``_derived``: values that are not fields (properties, methods) and belong in ``to_dict()``.

A value is named by an attribute path (``"depth"``, ``"critical_sigma_w.reason"``, reported
under ``"critical_sigma_w_reason"``; a method is called) or given as
``(label, function of the result)``.

``to_dict()`` reports every field except those declared ``repr=False`` or
:func:`unreported`; a field declared :func:`reported_as` is reported through its function.
``to_frame()`` gives the rows (one per layer or point), else the curve's points, else the
summary as one row. ``plot(ax=None, **style)`` draws the headline per layer, the curve, the
distribution or the headline numbers, and returns the Axes; results with a better drawing of
their own override it with the same signature (``ax`` first, options keyword-only).

This module is on the ground floor (numpy only, no torch): pandas and matplotlib are imported
inside ``to_frame`` and ``plot``.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Layer(Result):
    ...     name: str
    ...     value: float
    >>> @dataclass(frozen=True)
    ... class Profile(Result):
    ...     _rows = "layers"
    ...     _headline = "value"
    ...     layers: tuple[Layer, ...]
    ...     total: float
    >>> profile = Profile((Layer("fc1", 1.0), Layer("fc2", 3.0)), 4.0)
    >>> profile.to_dict()
    {'layers': [{'name': 'fc1', 'value': 1.0}, {'name': 'fc2', 'value': 3.0}], 'total': 4.0}
    >>> profile["fc2"].value
    3.0
    >>> profile["fc3"]
    Traceback (most recent call last):
    ...
    nngauge.errors.UnknownNameError: 'fc3' is not a layer of this Profile; known: ['fc1', 'fc2']
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, ClassVar, Iterator, Optional, Union

import numpy as np

from nngauge.errors import UnknownNameError, require_extra

Value = Union[str, tuple[str, Callable[[Any], Any]]]
"""A value of a result: an attribute path, or ``(label, function of the result)``."""

Values = Union[Value, tuple[Value, ...]]
"""One value or several."""

REPORTED = "nngauge.reported"
"""Field metadata key: False keeps the field out of ``to_dict()`` (see :func:`unreported`)."""

AS_PLAIN = "nngauge.as_plain"
"""Field metadata key: a function giving the value ``to_dict()`` reports for the field."""


def unreported(**options: Any) -> Any:
    """A dataclass field left out of ``to_dict()`` although ``repr`` shows it (``options`` as
    :func:`dataclasses.field`'s)."""
    return dataclasses.field(metadata={REPORTED: False}, **options)


def reported_as(convert: Callable[[Any], Any], **options: Any) -> Any:
    """A dataclass field that ``to_dict()`` reports as ``convert(value)`` (e.g. an activation
    by its label)."""
    return dataclasses.field(metadata={AS_PLAIN: convert}, **options)


def plain(value: Any) -> Any:
    """Results (through their ``to_dict()``), dataclasses, tensors, arrays and numpy scalars as
    plain Python values: dicts, lists, floats, ints (exact), strings, None."""
    if isinstance(value, Result):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dict(_reported_fields(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a tensor, without importing torch
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _reported_fields(instance: Any) -> Iterator[tuple[str, Any]]:
    """(name, plain value) of each field of a dataclass instance that ``to_dict()`` reports."""
    for f in dataclasses.fields(instance):
        if f.repr and f.metadata.get(REPORTED, True):
            value = getattr(instance, f.name)
            convert = f.metadata.get(AS_PLAIN)
            yield f.name, plain(convert(value) if convert is not None else value)


def row_named(rows, name: str, what: str):
    """The row of ``rows`` whose ``.name`` is ``name``, or an
    :class:`~nngauge.errors.UnknownNameError` (a KeyError) listing the names there are."""
    for row in rows:
        if row.name == name:
            return row
    raise UnknownNameError(f"{name!r} is not {what}; known: {[row.name for row in rows]}")


def layer_index(field: str, start: int = 1) -> Value:
    """The value ``"layer"``: ``start, start + 1, ...``, one per entry of the sequence
    ``field`` (the coordinate of a curve held per layer, e.g. ``per_layer`` for l = 1..L)."""
    return "layer", lambda result: list(range(start, start + len(getattr(result, field))))


def _specs(declared: Values) -> tuple[Value, ...]:
    """One value declaration or several, as a tuple of declarations."""
    single = isinstance(declared, str) or (
        isinstance(declared, tuple) and len(declared) == 2 and isinstance(declared[0], str)
        and callable(declared[1]))
    return (declared,) if single else tuple(declared)


def _label(spec: Value) -> str:
    return spec.replace(".", "_") if isinstance(spec, str) else spec[0]


def _read(result: Any, spec: Value) -> tuple[str, Any]:
    """(label, value) of one declared value of ``result``."""
    if not isinstance(spec, str):
        return spec[0], spec[1](result)
    value = result
    for part in spec.split("."):
        value = getattr(value, part)
    return _label(spec), value() if inspect.ismethod(value) else value


def _numbers(label: str, value: Any, *, sequences: bool) -> Iterator[tuple[str, Any]]:
    """The real numbers of one value, labelled (``label[i]`` for a sequence's entries)."""
    if isinstance(value, (bool, np.bool_)):
        return
    if isinstance(value, (int, float, np.number)):
        yield label, value
    elif sequences and isinstance(value, (list, tuple, np.ndarray)):
        for i, item in enumerate(np.asarray(value, dtype=object).ravel().tolist()):
            yield from _numbers(f"{label}[{i}]", item, sequences=False)


class Result:
    """Base of every result: ``to_dict``, ``to_frame``, ``plot`` and ``result["layer"]``
    (see the module docstring for the class attributes a subclass declares)."""

    _rows: ClassVar[Optional[str]] = None
    _headline: ClassVar[Values] = ()
    _curve: ClassVar[tuple[Value, ...]] = ()
    _distribution: ClassVar[Optional[str]] = None
    _summary: ClassVar[Values] = ()
    _derived: ClassVar[tuple[Value, ...]] = ()

    __iter__ = None  # __getitem__ takes layer names: a result is not a sequence to iterate

    def to_dict(self) -> dict[str, Any]:
        """Every reported field as plain Python (lists for arrays and tuples, dicts for rows
        and nested results, exact ints), then the declared derived values."""
        if not dataclasses.is_dataclass(self):
            raise TypeError(f"{type(self).__name__} is not a dataclass: it writes its own "
                            "to_dict()")
        out = dict(_reported_fields(self))
        for spec in self._derived:
            label, value = _read(self, spec)
            out[label] = plain(value)
        return out

    def to_frame(self):
        """A pandas DataFrame: one row per row of the breakdown (per layer, or per point of a
        curve), else one row per point of the curve, else the summary (the reported fields
        that are neither lists nor dicts) as one row. Needs pandas (``nngauge[report]``)."""
        pd = require_extra("pandas", "report", f"{type(self).__name__}.to_frame()")
        rows = self._breakdown()
        if rows:
            return pd.DataFrame([plain(row) for row in rows])
        columns = self._curve_columns()
        if columns:
            return pd.DataFrame(columns)
        summary = {k: v for k, v in self.to_dict().items() if not isinstance(v, (list, dict))}
        return pd.DataFrame([summary])

    def plot(self, ax=None, **style: Any):
        """The default drawing, on ``ax`` (default: a new figure); returns the Axes.

        The headline value per layer against the layers' names; for rows that are points, the
        headline against their coordinate; for a curve, its columns against its first; for a
        distribution, its histogram with the headline numbers marked; else the headline numbers
        as labelled bars. ``style`` goes to the main matplotlib call (e.g. ``color``). Needs
        matplotlib (``nngauge[report]``).
        """
        from nngauge import _plots

        rows = self._breakdown()
        if rows:
            headline = self._headline
            values = [_plots.as_float(getattr(row, headline)) for row in rows]
            if _named(rows):
                return _plots.line_per_layer([row.name for row in rows], values,
                                             ylabel=headline, log=_plots.wants_log(values),
                                             ax=ax, **style)
            coordinate = dataclasses.fields(rows[0])[0].name
            return _plots.curve([getattr(row, coordinate) for row in rows], {headline: values},
                                xlabel=coordinate, ax=ax, **style)
        columns = self._curve_columns()
        if columns:
            (xlabel, x), *lines = columns.items()
            drawn = {_label(spec) for spec in _specs(self._headline)}
            return _plots.curve(x, {k: v for k, v in lines if not drawn or k in drawn},
                                xlabel=xlabel, ax=ax, **style)
        if self._distribution is not None:
            return _plots.histogram(getattr(self, self._distribution),
                                    xlabel=self._distribution, marks=self._headline_numbers(),
                                    ax=ax, **style)
        return _plots.labelled_bars(self._headline_numbers(), title=type(self).__name__, ax=ax,
                                    **style)

    def __getitem__(self, name: str):
        """The row of the layer called ``name``.

        Raises:
            UnknownNameError: (a KeyError) no row has that name (the message lists the names),
                or the result has no rows named by layer.
        """
        rows = self._breakdown()
        kind = type(self).__name__
        if not _named(rows):
            why = (f"its {self._rows} are points of a curve, not layers: index them, "
                   f"result.{self._rows}[i]" if rows else
                   f"its {self._rows} is empty" if self._rows else
                   "it is one summary: read its fields as attributes")
            raise UnknownNameError(f"{kind} has no layers to look up {name!r} in: {why}")
        return row_named(rows, name, f"a layer of this {kind}")

    def _breakdown(self) -> tuple:
        """The rows (empty without ``_rows``)."""
        return tuple(getattr(self, self._rows)) if self._rows is not None else ()

    def _curve_columns(self) -> dict[str, list]:
        """``_curve`` as label -> plain list of values; empty without a curve or points."""
        columns = {label: plain(value) for label, value in
                   (_read(self, spec) for spec in self._curve)}
        return columns if columns and all(len(v) for v in columns.values()) else {}

    def _headline_numbers(self) -> dict[str, Any]:
        """``_summary``'s numbers (sequences' entries labelled ``name[i]``), or every reported
        field holding one real number when ``_summary`` is not declared."""
        declared = _specs(self._summary)
        if declared:
            found = (_numbers(*_read(self, spec), sequences=True) for spec in declared)
        else:
            found = (_numbers(label, value, sequences=False)
                     for label, value in self.to_dict().items())
        return {label: value for numbers in found for label, value in numbers}


def _named(rows: tuple) -> bool:
    """Rows named by layer: every row has a string ``name`` (and there is one)."""
    return bool(rows) and all(isinstance(getattr(row, "name", None), str) for row in rows)


__all__ = ["AS_PLAIN", "REPORTED", "Result", "Value", "Values", "layer_index", "plain",
           "reported_as", "row_named", "unreported"]
