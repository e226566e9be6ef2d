"""``raghu-transitions``: number of transitions vs trajectory length (Raghu et al., "On
the Expressive Power of Deep Neural Networks", ICML 2017, figure 5).

Random hard-tanh networks (n hidden layers of width k, weights N(0, sigma_w^2 / k), no biases)
over a grid of widths and weight variances. One circle x(t) between two perpendicular random
vectors of norm sqrt(k) (as in ``raghu-trajectory``) is propagated; for every hidden layer d:

- ``length_in``: the length of the trajectory entering layer d, l(z^(d-1)) (the circle itself
  for d = 1), by :func:`nngauge.trajectory_length`;
- ``transitions``: the number of times a neuron of layer d switches linear region of the hard
  tanh along the trajectory, counted exactly (pieces solved in closed form) on the polygon of
  the circle's points by :func:`nngauge.measures.expressivity._transitions.transitions`.

Section 2.2's claim (figure 5): the number of transitions is linear in the trajectory length,
for every depth, width and sigma_w. ``transitions_per_length`` is the ratio; the log-log slope
of transitions against length over all rows is printed (1 for a linear law).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._raghu_trajectory import circle_endpoints

COLUMNS = ("width", "sigma_w2", "layer", "length_in", "transitions", "transitions_per_length",
           "length_converged")


@dataclass(frozen=True)
class Settings:
    widths: tuple[int, ...]
    sigma_w2: tuple[float, ...]
    hidden: int
    n_points: int  # points of the circle's polygon (transitions are exact on it)
    max_points: int  # of the length refinement


SETTINGS = {
    "small": Settings(widths=(16, 32), sigma_w2=(4.0, 16.0), hidden=5, n_points=513,
                      max_points=2**12 + 1),
    "paper": Settings(widths=(20, 50, 100), sigma_w2=(2.0, 4.0, 8.0, 16.0, 32.0), hidden=10,
                      n_points=4097, max_points=2**17 + 1),
}


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.measures.expressivity._trajectory import trajectory_length
    from nngauge.measures.expressivity._transitions import transitions
    from nngauge.nn import mlp
    from nngauge.trajectories import arc

    settings = SETTINGS[scale]
    hidden_layers = [f"layers.{i}.act" for i in range(settings.hidden)]
    rows = []
    for width in settings.widths:
        for sigma_w2 in settings.sigma_w2:
            net = mlp(width, width, settings.hidden + 1, width, activation="hard_tanh",
                      init="gaussian", sigma_w=math.sqrt(sigma_w2), bias_std=0.0,
                      dtype=torch.float64, generator=generator)
            traj = arc(*circle_endpoints(width, generator), settings.n_points)
            counts = transitions(net, traj, layers=hidden_layers).per_layer
            with warnings.catch_warnings():  # non-convergence is recorded in the CSV instead
                warnings.simplefilter("ignore", UserWarning)
                lengths = trajectory_length(net, traj, layers=hidden_layers, tol=1e-2,
                                            max_points=settings.max_points)
            for d in range(settings.hidden):  # lengths: input, then hidden layers 0..n-1
                length_in = lengths.lengths[d]
                rows.append((width, sigma_w2, d + 1, length_in, counts[d],
                             counts[d] / length_in, lengths.converged))
    x = np.log([r[3] for r in rows])
    y = np.log([max(r[4], 1) for r in rows])
    slope = float(np.polyfit(x, y, 1)[0])
    comparison = [Comparison("log-log slope of transitions vs length (all rows)", slope, None,
                             "figure 5: linear in length, i.e. slope 1", key="slope",
                             statistic="slope")]
    for width in settings.widths:
        for sigma_w2 in settings.sigma_w2:
            ratios = [r[5] for r in rows if r[0] == width and r[1] == sigma_w2]
            comparison.append(Comparison(
                f"k={width}, sigma_w^2={sigma_w2:g}: transitions per unit length",
                float(np.mean(ratios)), None,
                f"range over layers {min(ratios):.3g}-{max(ratios):.3g}",
                key=f"per_length_k{width}_sigma_w2_{sigma_w2:g}"))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison))


def plot(computed: Computed, figure) -> None:
    ax = figure.subplots()
    rows = computed.records()
    settings = list(dict.fromkeys((r["width"], r["sigma_w2"]) for r in rows))
    for i, (width, sigma_w2) in enumerate(settings):
        points = [r for r in rows if (r["width"], r["sigma_w2"]) == (width, sigma_w2)]
        ax.plot([r["length_in"] for r in points], [max(r["transitions"], 0.5) for r in points],
                "o-", color=f"C{i}", markersize=4, label=f"k={width}, sigma_w^2={sigma_w2:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("trajectory length entering the layer")
    ax.set_ylabel("transitions in the layer")
    ax.legend(fontsize=7)


SLOPE_RANGE = (0.8, 1.2)
"""A linear law has log-log slope 1: the tests' tolerance."""
MIN_RANK = 0.9
"""Within every (width, sigma_w^2) the transitions must rise with the length entering the layer
(Spearman at least this), as the tests require."""


def setting_ranks(rows) -> dict[tuple[int, float], float]:
    """(width, sigma_w^2) -> Spearman correlation of transitions with the length entering the
    layer, over its layers."""
    from scipy import stats

    series: dict = {}
    for r in rows:
        series.setdefault((r["width"], r["sigma_w2"]), []).append((r["length_in"],
                                                                   r["transitions"]))
    return {key: float(stats.spearmanr(*zip(*points)).statistic)
            for key, points in series.items()}


def judge(computed: Computed) -> Verdict:
    """Figure 5: transitions linear in trajectory length, for every width and sigma_w^2: the
    log-log slope over all rows within 0.8-1.2 (a linear law has 1) and, within every setting,
    transitions rising with the length (Spearman at least 0.9). Both: reproduced; otherwise
    differs."""
    slope = computed.compared("slope").ours
    ranks = setting_ranks(computed.records())
    rising = bool(ranks) and all(r >= MIN_RANK for r in ranks.values())
    text = (f"log-log slope of transitions against length {slope:.3g} (a linear law has slope "
            "1); Spearman of transitions with length within each setting "
            f"{min(ranks.values()):.2f}-{max(ranks.values()):.2f}" if ranks else
            f"log-log slope {slope:.3g}; no setting to rank")
    if SLOPE_RANGE[0] < slope < SLOPE_RANGE[1] and rising:
        return Verdict("reproduced", text + ".")
    return Verdict("differs", text + ": not the linear law of figure 5.")


REPRODUCTION = Reproduction(
    name="raghu-transitions",
    paper=cite("expressivity"),
    target="Figure 5",
    description="neuron transitions of each hidden layer vs the length of the trajectory "
                "entering it, random hard-tanh MLPs over depth, width and sigma_w^2",
    differences={
        "small": (
            "widths 16, 32; sigma_w^2 4, 16; 5 hidden layers; one network per setting: the "
            "paper's sizes are not stated",
            "a circle between random perpendicular vectors (no biases); transitions exact on "
            "its 512-segment polygon; lengths refined to 1% (at most 4097 points)",
            "transitions per layer against the length entering it (the paper's axes are not "
            "stated precisely); the paper prints no numbers: slope compared with a linear law",
        ),
        "paper": (
            "widths 20-100, sigma_w^2 2-32, 10 hidden layers, one network per setting: the "
            "paper's sizes are not stated",
            "a circle between random vectors, transitions exact on a 4096-segment polygon; "
            "the paper prints no numbers",
        ),
    },
    small_runtime="~5 s",
    compute=compute,
    plot=plot,
    claim=("The number of transitions is linear in the length of the trajectory (section 2.2, "
           "figure 5)."),
    judge=judge,
    n_seeds=3,
)
