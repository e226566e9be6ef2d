"""Plots of theory objects (matplotlib, imported lazily: ``pip install 'nngauge[report]'``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from nngauge.errors import require_extra

DEFAULT_STARTS = (-0.5, 0.0, 0.5, 0.9, 0.99)


def plot_correlation_iteration(cmap, depth: int, path: str | Path | None = None,
                               starts: Sequence[float] = DEFAULT_STARTS):
    """Plot 1 - rho_l (log scale) for the map iterated from several starting correlations.

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

    rhos = np.asarray(cmap.iterate(np.asarray(starts, dtype=np.float64), depth))
    rhos = rhos.reshape(depth + 1, -1) if rhos.shape[0] == depth + 1 else rhos.T
    fig, ax = plt.subplots(figsize=(6, 4))
    layers = np.arange(depth + 1)
    for k, rho0 in enumerate(starts):
        ax.plot(layers, np.clip(1.0 - rhos[:, k], 1e-16, None), label=f"rho_0 = {rho0:g}")
    ax.set_yscale("log")
    ax.set_xlabel("layer l")
    ax.set_ylabel("1 - rho_l")
    ax.set_title(f"{getattr(cmap, 'label', 'correlation map')}: phase {cmap.phase}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig
