"""The drawings every result's ``plot()`` is made of (matplotlib, imported lazily inside each
function: ``pip install 'nngauge[report]'``).

Each function draws on ``ax`` (or a fresh figure's axes) and returns the Axes: a line of
per-layer values against the layers' names, a curve against its coordinate, a histogram with
marked values, and labelled bars of a few numbers.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from nngauge.errors import require_extra

LOG_SPAN = 1e3
"""Default plots use a log scale for positive values spanning this factor or more."""


def new_axes(ax=None):
    """``ax`` or a fresh figure's axes (matplotlib imported here, never at package import)."""
    require_extra("matplotlib", "report", "plot()")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    return ax


def as_float(value: Any) -> float:
    """A number as a float: None is NaN, an exact int beyond float64 is inf."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def wants_log(values: Sequence[float]) -> bool:
    """Whether ``values`` (finite ones) are all positive and span :data:`LOG_SPAN` or more."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) >= LOG_SPAN * min(finite)


def line_per_layer(names: Sequence[str], values: Sequence[float], *, ylabel: str,
                   log: bool = False, ax=None, reference: Optional[Sequence[float]] = None,
                   reference_label: str = "theory", **style: Any):
    """A line of per-layer values against layer names, optionally beside a reference curve.

    Args:
        names: the layers, one tick each.
        values: one value per layer.
        ylabel: what the values are.
        log: a log-scale y axis.
        ax: the Axes to draw on (default: a new figure).
        reference: a second line (e.g. theory's prediction), one value per layer.
        reference_label: its legend entry.
        style: passed to the measured line's ``ax.plot``.
    """
    ax = new_axes(ax)
    positions = range(len(names))
    ax.plot(positions, values, **{"marker": "o", "label": "measured", **style})
    if reference is not None:
        ax.plot(positions, reference, linestyle="--", label=reference_label)
        ax.legend()
    ax.set_xticks(list(positions))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.figure.tight_layout()
    return ax


def curve(x: Sequence[float], ys: Mapping[str, Sequence[float]], *, xlabel: str, ax=None,
          **style: Any):
    """One line per entry of ``ys`` (label -> values) against ``x``; log y when every line
    :func:`wants_log`."""
    ax = new_axes(ax)
    x = [as_float(v) for v in x]
    lines = {label: [as_float(v) for v in values] for label, values in ys.items()}
    for label, values in lines.items():
        ax.plot(x, values, **{"marker": "o", "label": label, **style})
    ax.set_xlabel(xlabel)
    if len(lines) == 1:
        ax.set_ylabel(next(iter(lines)))
    else:
        ax.legend(fontsize=7)
    if all(wants_log(values) for values in lines.values()):
        ax.set_yscale("log")
    ax.figure.tight_layout()
    return ax


def histogram(values: Sequence[float], *, xlabel: str,
              marks: Optional[Mapping[str, float]] = None, ax=None, **style: Any):
    """A histogram of the finite ``values``, each of ``marks`` (label -> value) a vertical
    dashed line."""
    import numpy as np

    ax = new_axes(ax)
    data = np.asarray(values, dtype=np.float64).ravel()
    ax.hist(data[np.isfinite(data)], **{"bins": "auto", "color": "C0", **style})
    marks = marks or {}
    for k, (label, value) in enumerate(marks.items()):
        if value is not None and math.isfinite(value):
            ax.axvline(value, linestyle="--", color=f"C{k + 1}", label=f"{label} = {value:.4g}")
    if marks:
        ax.legend(fontsize=7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.figure.tight_layout()
    return ax


def labelled_bars(numbers: Mapping[str, float], *, title: str = "", ax=None, **style: Any):
    """One bar per entry of ``numbers`` (label -> value), its value written above it; log y
    when the values :func:`wants_log`."""
    ax = new_axes(ax)
    labels = list(numbers)
    values = [as_float(v) for v in numbers.values()]
    bars = ax.bar(range(len(values)), [v if math.isfinite(v) else 0.0 for v in values],
                  **style)
    ax.bar_label(bars, labels=[f"{v:.4g}" for v in values], fontsize=7)
    ax.set_xticks(list(range(len(labels))))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    if wants_log(values):
        ax.set_yscale("log")
    if title:
        ax.set_title(title, fontsize=9)
    ax.figure.tight_layout()
    return ax


__all__ = ["LOG_SPAN", "as_float", "curve", "histogram", "labelled_bars", "line_per_layer",
           "new_axes", "wants_log"]
