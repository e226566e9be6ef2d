"""Plots of theory objects (matplotlib, imported lazily: ``pip install 'nngauge[report]'``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from nngauge.errors import require_extra

DEFAULT_STARTS = (-0.5, 0.0, 0.5, 0.9, 0.99)


def plot_correlation_iteration(cmap, depth: int, path: str | Path | None = None,
                               starts: Sequence[float] = DEFAULT_STARTS):
    """Plot 1 - rho_l (log scale) for the map iterated from several starting correlations
    (:meth:`~nngauge.theory.CorrelationMap.plot` on a figure of its own).

    Args:
        cmap: a correlation map (``nngauge.theory.correlation_map(...)``).
        depth: number of layers l = 0..depth.
        path: where to save a PNG; None leaves the figure open and returns it.
        starts: starting correlations rho_0.

    Returns:
        The matplotlib Figure.
    """
    require_extra("matplotlib", "report", "plotting")
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    cmap.plot(ax, depth=depth, starts=starts)
    if path is not None:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig
