"""``raghu-figure3``: the image of a circle after each hidden layer of a random tanh network,
projected to two dimensions (Raghu et al., "On the Expressive Power of Deep Neural Networks",
ICML 2017, figure 3).

A full circle x(t) = cos(2 pi t) x0 + sin(2 pi t) x1 (x0, x1 random, perpendicular, of norm
sqrt(k)) is fed through a random tanh MLP of width k = 100 (weights N(0, sigma_w^2 / k), no
biases). For the input and every hidden layer d the circle's image z^(d)(t) (``n_points``
points) is projected on its own first two principal components (numpy SVD of the centred
points); the CSV holds the projected coordinates (pc1, pc2) of every point of every layer,
with per layer:

- ``length``: the arc length l(z^(d)) of the whole circle's image, by
  :func:`nngauge.trajectory_length` on its four quarter arcs (refined to convergence);
- ``pc_variance``: the fraction of the image's variance the two components keep (1 for the
  circle; lower when the curve folds into more dimensions);
- ``turning``: the total absolute turning angle of the projected closed curve, in turns (1
  for a circle; more when the picture winds and folds).

Figure 3's claim: the image grows longer and more convoluted with every layer (section 2.2:
exponentially).
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

COLUMNS = ("layer", "point", "t", "pc1", "pc2", "length", "pc_variance", "turning")
WIDTH = 100


@dataclass(frozen=True)
class Settings:
    sigma_w2: float
    hidden: int
    n_points: int  # points of the pictured circle
    tol: float  # of the length's refinement
    max_points: int  # per quarter arc


SETTINGS = {
    "small": Settings(sigma_w2=8.0, hidden=6, n_points=1000, tol=1e-2, max_points=2**12 + 1),
    "paper": Settings(sigma_w2=8.0, hidden=10, n_points=4000, tol=1e-3, max_points=2**16 + 1),
}


def project(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The (n, 2) coordinates of ``points`` (n, dim) on their first two principal components
    and the fraction of the variance they keep."""
    centred = points - points.mean(0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    variance = singular ** 2
    return centred @ vt[:2].T, float(variance[:2].sum() / variance.sum())


def turning(curve: np.ndarray) -> float:
    """Total absolute turning angle of the closed polygon ``curve`` (n, 2), in turns."""
    steps = np.roll(curve, -1, axis=0) - curve
    angles = np.arctan2(steps[:, 1], steps[:, 0])
    change = np.angle(np.exp(1j * (np.roll(angles, -1) - angles)))
    return float(np.abs(change).sum() / (2 * math.pi))


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.measures.expressivity._trajectory import trajectory_length
    from nngauge.nn import mlp
    from nngauge.trajectories import arc

    settings = SETTINGS[scale]
    net = mlp(WIDTH, WIDTH, settings.hidden + 1, WIDTH, activation="tanh", init="gaussian",
              sigma_w=math.sqrt(settings.sigma_w2), bias_std=0.0, dtype=torch.float64,
              generator=generator)
    x0, x1 = circle_endpoints(WIDTH, generator)
    layers = [f"layers.{i}.act" for i in range(settings.hidden)]
    corners = (x0, x1, -x0, -x1, x0)
    lengths, converged = np.zeros(settings.hidden + 1), True
    for a, b in zip(corners[:-1], corners[1:]):  # the circle as four quarter arcs
        with warnings.catch_warnings():  # non-convergence is recorded in ``converged``
            warnings.simplefilter("ignore", UserWarning)
            result = trajectory_length(net, arc(a, b, 129), layers=layers, tol=settings.tol,
                                       max_points=settings.max_points)
        lengths += np.asarray(result.lengths[:-1])
        converged = converged and result.converged
    t = np.arange(settings.n_points) / settings.n_points
    tt = torch.as_tensor(2 * math.pi * t)[:, None]
    circle = torch.cos(tt) * x0 + torch.sin(tt) * x1
    images = [circle]
    with torch.no_grad():
        z = circle
        for block in net.layers[:settings.hidden]:
            z = block.act(block.linear(z))
            images.append(z)
    rows, summary = [], []
    for d, image in enumerate(images):
        coords, kept = project(image.numpy())
        winding = turning(coords)
        summary.append((d, float(lengths[d]), kept, winding))
        rows += [(d, i, float(t[i]), float(coords[i, 0]), float(coords[i, 1]),
                  float(lengths[d]), kept, winding) for i in range(len(t))]
    comparison = [Comparison(f"layer {d}: length / input length", length / lengths[0], None,
                             f"2 components keep {kept:.1%} of the variance; projected curve "
                             f"turns {winding:.3g} times", key=f"layer{d}_length_ratio")
                  for d, length, kept, winding in summary]
    growth = (lengths[-1] / lengths[0]) ** (1 / settings.hidden)
    comparison.append(Comparison("length growth per layer (geometric mean)", float(growth),
                                 None, "figure 3: the image grows with depth (paper: a "
                                 f"picture, no numbers); lengths converged: {converged}",
                                 key="growth"))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"summary": summary, "sigma_w2": settings.sigma_w2,
                           "converged": converged})


def plot(computed: Computed, figure) -> None:
    summary = computed.extra["summary"]
    columns = computed.columns
    ix, iy, il = columns.index("pc1"), columns.index("pc2"), columns.index("layer")
    figure.set_size_inches(2.0 * len(summary), 2.6)
    axes = figure.subplots(1, len(summary))
    for ax, (d, length, kept, _) in zip(axes, summary):
        points = np.array([(r[ix], r[iy]) for r in computed.rows if r[il] == d])
        closed = np.vstack([points, points[:1]])
        ax.plot(closed[:, 0], closed[:, 1], linewidth=0.5)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(("input circle" if d == 0 else f"hidden layer {d}")
                     + f"\nlength {length:.3g}, PC var {kept:.0%}", fontsize=7)


def layer_summary(computed: Computed) -> list[tuple[int, float, float, float]]:
    """(layer, length, pc_variance, turning) per layer, read from the rows."""
    per_layer = {r["layer"]: (r["layer"], r["length"], r["pc_variance"], r["turning"])
                 for r in computed.records()}
    return [per_layer[d] for d in sorted(per_layer)]


def judge(computed: Computed) -> Verdict:
    """Figure 3, with the criteria of the tests: the circle's image grows longer after every
    hidden layer (over 3.5x in all), and more convoluted: two principal components keep less of
    its variance after every layer (under 70% at the last) and its projection never turns less
    (over 5 turns at the last layer, 1 for the circle). Both: reproduced; either failing:
    differs (the claim is both)."""
    summary = layer_summary(computed)
    lengths = [r[1] / summary[0][1] for r in summary]
    kept = [r[2] for r in summary]
    turns = [r[3] for r in summary]
    longer = all(b > a for a, b in zip(lengths, lengths[1:])) and lengths[-1] > 3.5
    convoluted = (all(b < a for a, b in zip(kept, kept[1:])) and kept[-1] < 0.7
                  and all(b >= a - 1e-9 for a, b in zip(turns, turns[1:])) and turns[-1] > 5)
    text = ("length per layer / the circle's " + ", ".join(f"{x:.2f}" for x in lengths[1:])
            + f"; two principal components keep {kept[0]:.0%} -> {kept[-1]:.0%} of its variance "
            f"and the projection turns {turns[0]:.3g} -> {turns[-1]:.3g} times")
    if longer and convoluted:
        return Verdict("reproduced", f"The circle's image grows longer and more convoluted with "
                       f"every layer: {text}.")
    if longer:
        return Verdict("differs", f"The image grows longer with every layer but not more "
                       f"convoluted as the criteria require: {text}.")
    return Verdict("differs", f"The image does not grow longer with every layer: {text}.")


REPRODUCTION = Reproduction(
    name="raghu-figure3",
    paper=cite("expressivity"),
    target="Figure 3",
    description="a circle's image after each hidden layer of a random width-100 tanh MLP, "
                "projected on its first two principal components, with its length per layer",
    differences={
        "small": (
            "width 100 and tanh as the paper; sigma_w^2 = 8, no biases, 6 hidden layers, one "
            "network: the paper does not state its scale or depth",
            "the circle lies in a random plane of the 100-dimensional input, radius 10 "
            "(sqrt(k)); 1000 points per picture; lengths from four quarter arcs refined to 1%",
            "each layer projected on its own principal components (the paper's projection is "
            "not stated); the paper prints no numbers: lengths, kept variance and turning are "
            "ours",
        ),
        "paper": (
            "as small with 10 hidden layers, 4000 points per picture, lengths refined to 0.1%",
        ),
    },
    small_runtime="~4 s",
    compute=compute,
    plot=plot,
    claim=("A circular trajectory fed through a random tanh network of width 100 grows longer and "
           "more convoluted after every hidden layer (figure 3, section 2.2)."),
    judge=judge,
    n_seeds=3,
)
