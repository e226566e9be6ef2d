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
                    ylabel: str, log: bool = False,
                    kinds: Optional[dict[str, str]] = None,
                    labels: Optional[dict[str, str]] = None) -> None:
    """One line per series against layers.

    ``names`` are the layers' site names. When ``kinds`` (site name -> kind: "linear",
    "norm", "activation", ...) gives more than one kind and several layers share a block (the
    name up to its last dot: ``layers.3`` for ``layers.3.linear``), the x axis has one
    position per block and each series is drawn as one line per kind (same colour, a marker
    per kind), so a 50-layer network stays readable; otherwise one position per layer.
    ``labels`` (site name -> display label) name the positions.

    Sites of kind "other" (the input, the output) are drawn as markers without a line.
    Points that cannot be drawn on the axis are shown, not dropped: +inf and nan as a marker
    at the top of the axis labelled "inf" / "nan", -inf (or, on a log axis, a value <= 0) at
    the bottom labelled "-inf" / "<= 0".
    """
    from matplotlib.transforms import blended_transform_factory

    labels = labels or {}
    kinds = kinds or {}
    blocks = [_block(n) for n in names]
    order = list(dict.fromkeys(blocks))
    grouped = (len(order) < len(names)
               and len({kinds.get(n, "other") for n in names}) > 1)
    if grouped:
        kind_order = list(dict.fromkeys(kinds.get(n, "other") for n in names))
        offsets = {k: 0.0 if len(kind_order) == 1 else
                   0.3 * (i / (len(kind_order) - 1) - 0.5) for i, k in enumerate(kind_order)}
        xs_all = [order.index(b) + offsets[kinds.get(n, "other")] for n, b in zip(names, blocks)]
        tick_names = [labels.get(b, b) for b in order]
    else:
        kind_order = [None]
        xs_all = [float(i) for i in range(len(names))]
        tick_names = [labels.get(n, n) for n in names]
    markers = dict(zip(kind_order, ("o", "s", "^", "D", "v", "x", "P", "*")))
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    colors = [f"C{i}" for i in range(10)]
    special: list[tuple[float, str, str]] = []
    for (label, values), color in zip(series.items(), colors):
        for kind in kind_order:
            members = [i for i, n in enumerate(names)
                       if kind is None or kinds.get(n, "other") == kind]
            points = []
            for i in members:
                v = values[i] if i < len(values) else None
                if v is None:
                    continue
                v = float(v)
                if math.isfinite(v) and (not log or v > 0):
                    points.append((xs_all[i], v))
                else:
                    special.append((xs_all[i], _special_label(v), color))
            if not points:
                continue
            xs, ys = zip(*points)
            contiguous = len(points) == len(members)
            name = label if kind is None else f"{label} ({kind})"
            # sites of no known kind (the input, the output) are not one sequence of layers
            style = "none" if kind == "other" else "-" if contiguous else "--"
            ax.plot(xs, ys, marker=markers[kind] if kind is not None else "o", color=color,
                    linestyle=style, label=name, markersize=4)
    if log:
        ax.set_yscale("log")
    for x, text, color in special:
        top = text in ("inf", "nan")
        y = 0.96 if top else 0.04
        ax.plot([x], [y], marker="^" if top else "v", color=color, transform=trans,
                clip_on=False, linestyle="none")
        ax.text(x, y + (0.02 if top else -0.02), text, transform=trans, ha="center",
                va="bottom" if top else "top", fontsize=7, color=color, clip_on=False)
    positions = list(range(len(tick_names))) if grouped else xs_all
    ax.set_xticks(positions)
    step = max(1, len(tick_names) // 40)
    ax.set_xticklabels([n if i % step == 0 else "" for i, n in enumerate(tick_names)],
                       rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    if grouped:
        ax.set_xlabel("block (marker: the kind of sub-layer)")
    if len(series) > 1 or grouped:
        ax.legend(fontsize=7, ncol=2 if len(series) * len(kind_order) > 4 else 1)


def _block(name: str) -> str:
    """The block of a site name: the name up to its last dot (itself without a dot)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def _special_label(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if value == math.inf:
        return "inf"
    if value == -math.inf:
        return "-inf"
    return "<= 0"
