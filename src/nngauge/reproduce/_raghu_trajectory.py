"""``raghu-trajectory``: trajectory length vs depth in random networks, with Theorem 3's bounds
(Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017, figures 13 and
12, the setting of figure 4).

Random fully-connected networks with n hidden layers of width k, weights N(0, sigma_w^2 / k),
no biases, hard tanh (figure 13) or ReLU (figure 12; figure 4 is its convolutional version).
A circle x(t) = cos(pi t / 2) x0 + sin(pi t / 2) x1 with x0 perpendicular to x1 and
||x0|| = ||x1|| = sqrt(k) (the theorem's ||x||^2 <= k; a circle has dx perpendicular to x, so
c = 1) is propagated, and the length l(z^(d)) of its image after each hidden layer d is
measured with :func:`nngauge.trajectory_length` (polygon length, refined to convergence), then
averaged over networks (the theorem bounds the expectation). Beside it, Theorem 3 per layer
(:func:`nngauge.theory.trajectory_growth_bound`):

    l(x) rate^d  <=  E[l(z^(d))]  <=  l(x) upper_rate^d,

with ``rate`` the explicit lower factor of the proof and ``upper_rate`` appendix B's identity
bound; ``asymptotic_rate`` is the base in the theorem's statement (without its O constant):
sigma_w sqrt(k) / sqrt(k + 1) (ReLU), sigma_w sqrt(k) / sqrt(sigma_w^2 + k sigma_w) (hard tanh,
sigma_b = 0).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("activation", "width", "sigma_w2", "layer", "length", "ratio", "lower_bound",
           "upper_bound", "asymptotic", "converged")


@dataclass(frozen=True)
class Settings:
    grid: tuple[tuple[str, int, float], ...]  # (activation, width k, sigma_w^2)
    hidden: int  # n hidden layers
    nets: int  # networks averaged per setting
    n_points: int  # initial points of the circle
    tol: float  # of trajectory_length's refinement
    max_points: int


def _grid(width: int, hard_tanh_scales, widths, relu_scales, width_scale: float):
    return (tuple(("hard_tanh", width, s) for s in hard_tanh_scales)
            + tuple(("hard_tanh", k, width_scale) for k in widths if k != width)
            + tuple(("relu", width, s) for s in relu_scales))


SETTINGS = {
    "small": Settings(grid=_grid(32, (1.0, 4.0, 16.0, 64.0), (8, 64), (1.0, 2.0, 4.0), 16.0),
                      hidden=6, nets=2, n_points=257, tol=1e-2, max_points=2**12 + 1),
    "paper": Settings(grid=_grid(100, (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0),
                                 (10, 20, 50, 200, 400), (1.0, 2.0, 4.0, 8.0), 16.0),
                      hidden=15, nets=10, n_points=1025, tol=1e-3, max_points=2**17 + 1),
}


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rows, comparison = [], []
    for activation, width, sigma_w2 in settings.grid:
        lengths, converged = _mean_lengths(activation, width, sigma_w2, settings, generator)
        theory = _bound(activation, width, settings.hidden, sigma_w2)
        base = lengths[0]
        for d, length in enumerate(lengths):
            rows.append((activation, width, sigma_w2, d, length, length / base,
                         base * math.exp(theory.log_lower[d]),
                         base * math.exp(theory.log_upper[d]),
                         base * math.exp(theory.log_asymptotic[d]), converged))
        growth = (lengths[-1] / lengths[0]) ** (1.0 / settings.hidden)
        comparison.append(Comparison(
            f"{activation}, k={width}, sigma_w^2={sigma_w2:g}: growth per layer", growth, None,
            f"Theorem 3: lower {theory.rate:.3g}, statement {theory.asymptotic_rate:.3g}, "
            f"upper {theory.upper_rate:.3g}",
            key=f"{activation}_k{width}_sigma_w2_{sigma_w2:g}_growth"))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"hidden": settings.hidden})


def _bound(activation: str, width: int, hidden: int, sigma_w2: float):
    from nngauge.theory import trajectory_growth_bound

    return trajectory_growth_bound(width, hidden, sigma_w=math.sqrt(sigma_w2), sigma_b=0.0,
                                   act=activation)


def _mean_lengths(activation, width, sigma_w2, settings, generator) -> tuple[list[float], bool]:
    """Mean length at the input and after each hidden layer over ``settings.nets`` networks,
    and whether every length converged."""
    from nngauge.measures.expressivity._trajectory import trajectory_length
    from nngauge.nn import mlp
    from nngauge.trajectories import arc

    x0, x1 = circle_endpoints(width, generator)
    traj = arc(x0, x1, settings.n_points)
    hidden_layers = [f"layers.{i}.act" for i in range(settings.hidden)]
    all_lengths, converged = [], True
    for _ in range(settings.nets):
        net = mlp(width, width, settings.hidden + 1, width, activation=activation,
                  init="gaussian", sigma_w=math.sqrt(sigma_w2), bias_std=0.0,
                  dtype=torch.float64, generator=generator)
        with warnings.catch_warnings():  # non-convergence is recorded in the CSV instead
            warnings.simplefilter("ignore", UserWarning)
            result = trajectory_length(net, traj, layers=hidden_layers, tol=settings.tol,
                                       max_points=settings.max_points)
        all_lengths.append(result.lengths[:-1])  # input and hidden layers, not the output
        converged = converged and result.converged
    return np.mean(all_lengths, axis=0).tolist(), converged


def circle_endpoints(width: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two perpendicular random vectors of norm sqrt(k) (float64): the arc between them is a
    quarter circle of length pi sqrt(k) / 2.

    Example:
        >>> x0, x1 = circle_endpoints(4, torch.Generator().manual_seed(0))
        >>> round(float(x0 @ x1), 12), round(float(x0.norm() ** 2), 9)
        (0.0, 4.0)
    """
    q, _ = torch.linalg.qr(torch.randn(width, 2, generator=generator, dtype=torch.float64))
    x0, x1 = q[:, 0] * math.sqrt(width), q[:, 1] * math.sqrt(width)
    return x0, x1


def plot(computed: Computed, figure) -> None:
    rows = computed.records()
    settings = list(dict.fromkeys((r["activation"], r["width"], r["sigma_w2"]) for r in rows))
    panels = (("hard_tanh: sigma_w^2 (fig. 13b)", lambda a, k, s: a == "hard_tanh" and
               k == settings[0][1]),
              ("hard_tanh: width k (fig. 13a)", lambda a, k, s: a == "hard_tanh" and
               s == 16.0),
              ("relu: sigma_w^2 (fig. 12)", lambda a, k, s: a == "relu"))
    axes = figure.subplots(1, len(panels))
    for ax, (title, chosen) in zip(axes, panels):
        for i, key in enumerate(s for s in settings if chosen(*s)):
            points = [r for r in rows if (r["activation"], r["width"], r["sigma_w2"]) == key]
            layer = [r["layer"] for r in points]
            color = f"C{i}"
            ax.plot(layer, [r["length"] for r in points], "o-", color=color,
                    label=f"k={key[1]}, sigma_w^2={key[2]:g}", markersize=3)
            lower = [r["lower_bound"] for r in points]
            if all(v > 0 for v in lower):
                ax.plot(layer, lower, "--", color=color, linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("hidden layer d")
        ax.set_title(title + ", dashed: lower bound", fontsize=8)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("trajectory length")


EXPONENTIAL = {"hard_tanh": 16.0, "relu": 4.0}
"""Per activation, the sigma_w^2 from which the length must grow exponentially with depth (the
tests' criteria: every layer lengthens it, log-length linear in depth with r^2 > 0.95 and a
factor over 1.3 per layer)."""
MIN_FACTOR = 1.3
MIN_R2 = 0.95
WIDTH_SCALE = 16.0
"""The sigma_w^2 at which the widths are compared (figure 13a)."""


def growth_checks(rows) -> dict[str, bool]:
    """Theorem 3's and figures 12-13's shape on the rows: exponential growth in depth at the
    large scales, growth rising with sigma_w^2 (per activation and the grid's width) and with
    the width (hard tanh at sigma_w^2 = 16); a claim without the settings to test it fails."""
    from scipy import stats

    settings: dict = {}
    for r in rows:
        settings.setdefault((r["activation"], r["width"], r["sigma_w2"]), []).append(r)
    growth, exponential = {}, []
    for (activation, width, sigma_w2), points in settings.items():
        lengths = np.array([p["length"] for p in sorted(points, key=lambda p: p["layer"])])
        growth[activation, width, sigma_w2] = (lengths[-1] / lengths[0]) ** (1 / (len(lengths)
                                                                                  - 1))
        if sigma_w2 >= EXPONENTIAL[activation]:
            fit = stats.linregress(np.arange(len(lengths)), np.log(lengths))
            exponential.append(bool(np.all(np.diff(lengths) > 0) and fit.slope >
                                    math.log(MIN_FACTOR) and fit.rvalue ** 2 > MIN_R2))
    scale_series = []
    for activation in EXPONENTIAL:
        keys = [k for k in growth if k[0] == activation]
        if keys:
            width = max((k[1] for k in keys), key=lambda w: sum(k[1] == w for k in keys))
            scale_series.append([growth[k] for k in sorted(k for k in keys if k[1] == width)])
    by_width = [growth[k] for k in sorted(k for k in growth
                                          if k[0] == "hard_tanh" and k[2] == WIDTH_SCALE)]

    def rising(series):
        return len(series) > 1 and all(b > a for a, b in zip(series, series[1:]))

    return {"exponential in depth": bool(exponential) and all(exponential),
            "rising with sigma_w": bool(scale_series) and all(map(rising, scale_series)),
            "rising with the width": rising(by_width)}


def judge(computed: Computed) -> Verdict:
    """Theorem 3 and figures 12-13: the length lies between the proof's lower and appendix B's
    upper bound at every layer, grows exponentially in depth at the large scales, and its rate
    rises with sigma_w and with the width (:func:`growth_checks`); any failing: differs. All
    holding: qualitatively where the growth falls below the rate the theorem states (without its
    O constant) in some setting, else reproduced."""
    rows = computed.records()
    within = all(r["lower_bound"] <= r["length"] <= r["upper_bound"] * (1 + 1e-9) for r in rows)
    settings = {}
    for r in rows:
        settings.setdefault((r["activation"], r["width"], r["sigma_w2"]), []).append(r)
    below = 0
    for points in settings.values():
        hidden = len(points) - 1
        measured = (points[-1]["length"] / points[0]["length"]) ** (1 / hidden)
        stated = (points[-1]["asymptotic"] / points[0]["length"]) ** (1 / hidden)
        below += measured < stated
    shape = growth_checks(rows)
    summary = (f"lengths lie between the proof's lower bound and appendix B's upper bound at "
               f"every layer: {within}; "
               + "; ".join(f"{name}: {ok}" for name, ok in shape.items())
               + f"; the growth per layer is below the rate the theorem states in {below} of "
               f"{len(settings)} settings")
    if not (within and all(shape.values())):
        return Verdict("differs", summary + ".")
    if below:
        return Verdict("qualitatively", summary + ": the exponential growth is reproduced, but "
                       "Theorem 3 as printed is not a lower bound (only the proof's explicit "
                       "factor is).")
    return Verdict("reproduced", summary + ".")


REPRODUCTION = Reproduction(
    name="raghu-trajectory",
    paper=cite("expressivity"),
    target="Figures 13, 12 and 4",
    description="length of a circle's image after each layer of random hard-tanh / ReLU "
                "MLPs over sigma_w^2 and width, with Theorem 3's lower and upper bounds",
    differences={
        "small": (
            "6 hidden layers, width 32 (and 8, 64 at sigma_w^2 = 16), 2 networks averaged "
            "per setting; the paper's exact depths, widths and number of networks are not "
            "stated",
            "lengths refined to 1% (at most 4097 points; the polygon length is below the arc "
            "length, so an unconverged length is an underestimate)",
            "no biases (sigma_b = 0); a circle between two random perpendicular vectors of "
            "norm sqrt(k), not between MNIST / CIFAR10 data points (figures 12, 4)",
            "figure 4's convolutional network is replaced by the ReLU MLP of figure 12; the "
            "paper prints no numbers: compared with Theorem 3 only",
        ),
        "paper": (
            "15 hidden layers, width 100 (and 10-400 at sigma_w^2 = 16), 10 networks per "
            "setting: the paper does not state its sizes",
            "no biases; a circle between random vectors, not data points; figure 4's "
            "convolutional network is replaced by a ReLU MLP; compared with Theorem 3 only",
        ),
    },
    small_runtime="~5 s",
    compute=compute,
    plot=plot,
    claim=("The length of a trajectory's image grows exponentially with depth, at a rate that "
           "rises with sigma_w and the width (Theorem 3, figures 12-13)."),
    judge=judge,
    n_seeds=3,
)
