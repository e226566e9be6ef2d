"""``shrinkage-figure2``: 1 - rho_L vs depth and vs negative slope (shrinkage paper, figure 2).

Critically initialized (sigma_b = 0) LayerNorm MLPs with leaky ReLU of negative slope a, the
paper's eq. 2.1: L layers of linear -> LayerNorm -> LReLU_a, the correlation of two inputs
measured after the L-th linear map (nngauge MLP of depth L + 1, output width = hidden width).
Per setting:

- red, ``empirical``: 1 - rho_L averaged over all pairs of a sample of Gaussian inputs, and
  ``empirical_min``: 1 - the smallest rho_L over those pairs (1 - rho_max on the sample);
- black, ``theory``: 1 - P^L(rho_0) averaged over the same pairs, P the LayerNorm correlation
  map (eq. 2.3, :func:`nngauge.theory.correlation_map`), rho_0 each pair's input correlation;
  ``theory_min``: 1 - P^L(-1), the least correlation any pair can keep at infinite width;
- green, ``searched``: 1 - the smallest rho_L found by gradient descent on a pair of inputs,
  network fixed (:func:`nngauge.correlations` with ``search_steps``);
- blue, ``bound``: Theorem 1 at ||J||_op^2 = 1 (criticality), eq. 4.1:
  1 - rho_max <= sqrt(16 pi / (pi - 2)) L^{-1/2} sqrt(1 + a^2) / (1 - a)
  (:func:`nngauge.theory.shrinkage_bound`); ``jacobian_op_sq``: the measured squared RMS
  operator norm of the network's Jacobian (:func:`nngauge.jacobian_norm`), and
  ``bound_measured``: the bound at that measured Jacobian norm (finite width is not exactly
  critical).

Figure 2a varies L at a fixed slope, figure 2b varies a at a fixed depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict


@dataclass(frozen=True)
class Settings:
    d_in: int
    n_samples: int
    width: int
    depths: tuple[int, ...]  # panel a
    slope_for_depths: float
    slopes: tuple[float, ...]  # panel b
    depth_for_slopes: int
    search_steps: int


SETTINGS = {
    "small": Settings(d_in=32, n_samples=40, width=256, depths=(2, 4, 8, 16, 32),
                      slope_for_depths=0.2, slopes=(0.0, 0.2, 0.4, 0.6, 0.8),
                      depth_for_slopes=16, search_steps=40),
    "paper": Settings(d_in=64, n_samples=200, width=1024, depths=(2, 4, 8, 16, 32, 64, 128),
                      slope_for_depths=0.2, slopes=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                                    0.9),
                      depth_for_slopes=32, search_steps=200),
}
COLUMNS = ("panel", "depth", "negative_slope", "empirical", "theory", "empirical_min",
           "theory_min", "searched", "bound", "jacobian_op_sq", "bound_measured")
DEPTH_PANEL, SLOPE_PANEL = "a: depth", "b: slope"
"""The panel column's values: figure 2a (1 - rho against the depth), 2b (against the slope)."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.data import gaussian

    settings = SETTINGS[scale]
    data = gaussian(settings.n_samples, settings.d_in, generator=seed_of(generator)).inputs
    grid = ([(DEPTH_PANEL, depth, settings.slope_for_depths) for depth in settings.depths]
            + [(SLOPE_PANEL, settings.depth_for_slopes, a) for a in settings.slopes])
    rows = tuple(_point(panel, depth, slope, data, settings, generator)
                 for panel, depth, slope in grid)
    comparison = tuple(
        Comparison(f"{row[0][0]}: L={row[1]}, a={row[2]:g}: 1 - rho searched", row[7], None,
                   f"infinite width (rho_0=-1) {row[6]:.3g}; Theorem 1 bound {row[8]:.3g}",
                   key=f"{row[0][0]}_depth{row[1]}_slope{row[2]:g}")
        for row in rows)
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison)


def _point(panel, depth, slope, data, settings, generator) -> tuple:
    from nngauge import correlations, jacobian_norm
    from nngauge.measures.propagation._correlations import cosine_matrix
    from nngauge.nn import mlp
    from nngauge.theory import correlation_map, shrinkage_bound

    act = f"leaky_relu(negative_slope={slope!r})"
    net = mlp(settings.d_in, settings.width, depth + 1, settings.width, activation=act,
              norm="layer", init="gaussian", generator=generator)
    measured = correlations(net, data, layers=[], max_samples=settings.n_samples,
                            n_iter=settings.search_steps)
    with torch.no_grad():
        outputs = net(data)
    pairs = torch.triu_indices(len(data), len(data), offset=1)
    rho_0 = cosine_matrix(data)[pairs[0], pairs[1]].numpy()
    rho_l = cosine_matrix(outputs)[pairs[0], pairs[1]].numpy()
    p_map = correlation_map(act, arch="layernorm")
    jacobian_sq = jacobian_norm(net, data, ord="op", rms=True, n_iter=30,
                                generator=generator).norm ** 2
    return (panel, depth, slope, float(np.mean(1.0 - rho_l)),
            float(np.mean(1.0 - p_map.iterate(rho_0, depth)[-1])),
            1.0 - measured.rho_max,
            1.0 - float(p_map.iterate(-1.0, depth)[-1]),
            1.0 - measured.rho_max_searched,
            shrinkage_bound(act, depth, jacobian_norm_sq=1.0).one_minus_rho_max,
            jacobian_sq,
            shrinkage_bound(act, depth, jacobian_norm_sq=jacobian_sq).one_minus_rho_max)


def plot(computed: Computed, figure) -> None:
    panels = computed.column("panel")
    axes = figure.subplots(1, 2)
    for ax, panel, x_name in zip(axes, (DEPTH_PANEL, SLOPE_PANEL), ("depth", "negative_slope")):
        keep = [i for i, p in enumerate(panels) if p == panel]

        def values(name):
            column = computed.column(name)
            return [column[i] for i in keep]

        x = values(x_name)
        ax.plot(x, values("empirical"), "o", color="red", label="sample pairs (mean)")
        ax.plot(x, values("theory"), "-", color="black", label="infinite width (mean)")
        ax.plot(x, values("empirical_min"), "v", color="red", label="sample pairs (min rho)")
        ax.plot(x, values("theory_min"), ":", color="black", label="infinite width, rho_0=-1")
        ax.plot(x, values("searched"), "s", color="green", label="gradient search")
        ax.plot(x, values("bound"), "-", color="blue", label="Theorem 1 (eq. 4.1)")
        ax.set_yscale("log")
        ax.set_xlabel("depth L" if x_name == "depth" else "negative slope a")
        ax.set_ylabel("1 - rho_L")
        if x_name == "depth":
            ax.set_xscale("log", base=2)
        ax.set_title(f"figure 2{panel[0]}", fontsize=9)
    axes[0].legend(fontsize=7)


def judge(computed: Computed) -> Verdict:
    """Theorem 1's bound holds (theory and searched network) and shrinkage grows with depth and
    with the nonlinearity 1 - a, in the bound, the theory and the searched networks.

    The bound's and the infinite-width theory's parts are software checks (eq. 4.1 is a closed
    form, P^L(-1) an exact value under a proven bound, and their trends deterministic: only a
    bug can fail them); the searched networks' parts are evidence. A failed software check is a
    bug (differs, labelled a software check); no rows: differs."""
    rows = computed.records()
    if not rows:
        return Verdict("differs", "No rows: figure 2 is not rebuilt.")
    depth = [r for r in rows if r["panel"] == DEPTH_PANEL]
    slope = [r for r in rows if r["panel"] == SLOPE_PANEL]

    def trends(key: str) -> bool:
        """Falls with depth (panel a) and rises with 1 - a, i.e. as the slope falls (b)."""
        falls = [r[key] for r in depth]
        rises = [r[key] for r in slope]
        return (all(y < x for x, y in zip(falls, falls[1:]))
                and all(y > x for x, y in zip(rises, rises[1:])))

    exact_holds = all(r["theory_min"] <= r["bound"] for r in rows)
    exact_trends = trends("bound") and trends("theory")
    networks_hold = all(r["searched"] <= r["bound_measured"] for r in rows)
    networks_trend = trends("searched")
    summary = (f"software checks (exact values, closed forms): the infinite-width 1 - P^L(-1) "
               f"is {'under' if exact_holds else 'NOT under'} eq. 4.1's bound in {len(rows)} "
               f"settings and the bound and the theory "
               f"{'fall' if exact_trends else 'do NOT all fall'} with depth and rise with "
               "1 - a; evidence: the searched networks are "
               f"{'under' if networks_hold else 'NOT under'} the bound at their measured "
               f"Jacobian and {'follow' if networks_trend else 'do NOT follow'} both trends")
    if not (exact_holds and exact_trends):
        return Verdict("differs", summary + ": a software check fails, a bug in nngauge.",
                       software_check=True)
    if networks_hold and networks_trend:
        return Verdict("reproduced", summary + " (the figure prints no numbers).")
    return Verdict("differs", summary + ".")


REPRODUCTION = Reproduction(
    name="shrinkage-figure2",
    paper=cite("shrinkage"),
    target="Figure 2",
    description="1 - rho_L vs depth and vs leaky-ReLU slope in critical LayerNorm MLPs: "
                "sample pairs, infinite-width theory, gradient search, Theorem 1 bound",
    differences={
        "small": (
            "the paper prints no numbers for figure 2: compared with theory and the bound only",
            "Gaussian inputs (d=32, 40 samples); width 256; depths 2-32 at slope 0.2 (2a) and "
            "slopes 0-0.8 at depth 16 (2b): the paper's data, widths and grids are not stated",
            "gradient search: 40 Adam steps on the least-correlated pair, inputs kept at norm",
        ),
        "paper": (
            "the paper prints no numbers for figure 2: compared with theory and the bound only",
            "Gaussian inputs (d=64, 200 samples); width 1024 (as in the paper's figure 1); "
            "depths 2-128 and slopes 0-0.9 (grids not stated in the paper); 200 search steps",
        ),
    },
    small_runtime="~9 s",
    compute=compute,
    plot=plot,
    claim=("In critical LayerNorm networks representations shrink with depth and with the "
           "nonlinearity 1 - a: the largest 1 - rho between two inputs falls, within Theorem 1's "
           "bound (eq. 4.1)."),
    judge=judge,
    n_seeds=3,
)
