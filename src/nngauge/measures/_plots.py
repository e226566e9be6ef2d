"""Plots of measure results (matplotlib, imported lazily: ``pip install 'nngauge[report]'``)."""

from __future__ import annotations

from typing import Optional, Sequence

from nngauge.errors import require_extra


def new_axes(ax=None):
    """``ax`` or a fresh figure's axes (matplotlib imported here, never at package import)."""
    require_extra("matplotlib", "report", "plot()")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    return ax


def bar_per_layer(names: Sequence[str], values: Sequence[float], *, ylabel: str,
                  log: bool = False, ax=None, reference: Optional[Sequence[float]] = None,
                  reference_label: str = "theory"):
    """A line of per-layer values against layer names, optionally beside a reference curve."""
    ax = new_axes(ax)
    positions = range(len(names))
    ax.plot(positions, values, marker="o", label="measured")
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
