"""Figures of the report as inline PNG data URIs (matplotlib's Agg canvas, no pyplot state)."""

from __future__ import annotations

import base64
import io
import math
from typing import Callable, Optional, Sequence

from nngauge.errors import require_extra


def png_data_uri(draw: Callable, *, size: tuple[float, float] = (8.0, 3.6), panes: int = 1
                 ) -> str:
    """Call ``draw(ax)`` on a fresh Agg figure (``draw(axes)``, a list of ``panes`` Axes side
    by side, when ``panes > 1``) and return it as ``data:image/png;base64,...``."""
    require_extra("matplotlib", "report", "nngauge report")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=96)
    FigureCanvasAgg(figure)
    axes = [figure.add_subplot(1, panes, i + 1) for i in range(panes)]
    draw(axes if panes > 1 else axes[0])
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def per_layer_lines(ax, names: Sequence[str], series: dict[str, Sequence[Optional[float]]], *,
                    ylabel: str, log: bool = False) -> None:
    """One line per series against layer names; None / non-finite points are left out, and a
    series whose points are isolated is drawn with markers only."""
    positions = list(range(len(names)))
    for (label, values), marker in zip(series.items(), ("o", "x", "s", "^")):
        points = [(p, float(v)) for p, v in zip(positions, values)
                  if v is not None and math.isfinite(float(v)) and (not log or float(v) > 0)]
        if not points:
            continue
        xs, ys = zip(*points)
        contiguous = len(points) == len(values)
        ax.plot(xs, ys, marker=marker, linestyle="-" if contiguous else "--", label=label)
    ax.set_xticks(positions)
    step = max(1, len(names) // 40)
    ax.set_xticklabels([n if i % step == 0 else "" for i, n in enumerate(names)],
                       rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend(fontsize=8)
