"""``raghu-figure1``: the linear regions of a small ReLU network on its 2-D input space
(Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017, section 2.1,
figure 1 and Theorem 2).

The paper's network: three hidden layers of four ReLUs, input x in R^2 (one output here; the
figure shows none). Its three panes are the partition of the input square by the activation
patterns of the first layer (four straight lines), of the first two layers (second-layer lines
bend where they meet first-layer ones) and of all three (third-layer lines bend at both).
:func:`nngauge.regions` computes each pane exactly: every region a convex polygon with one
affine map (Theorem 2).

For every network (seed) and pane k, the CSV holds the regions after k layers, the edges and
vertices of the whole partition, and two independent checks:

- ``arrangement_regions`` (pane 1 only): 1 + (lines crossing the square) + (their crossings
  inside it), the count of regions of an arrangement of lines in general position in a convex
  set, computed from the first layer's weights directly;
- ``zaslavsky_bound``: the most regions k layers of four units can make in R^2
  (:func:`nngauge.theory.max_regions_upper_bound`, Serra et al. ICML 2018 Theorem 1; 11 for
  one layer: Raghu et al.'s Theorem 5 / Zaslavsky's count of four lines in the plane).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction

COLUMNS = ("seed", "pane", "hidden_layers", "regions", "edges", "vertices",
           "arrangement_regions", "zaslavsky_bound")
WIDTH = 4
HIDDEN = 3
HALF_SIDE = 0.5
"""The square is [-0.5, 0.5]^2: the unit square (side 1), centred on the origin."""
SIGMA_W2 = 2.0
BIAS_STD = 0.3


@dataclass(frozen=True)
class Settings:
    networks: int  # random networks (seeds); the figure draws the first


SETTINGS = {"small": Settings(networks=20), "paper": Settings(networks=500)}


def figure1_network(generator: torch.Generator) -> torch.nn.Module:
    """The figure's network: 2 -> 4 -> 4 -> 4 -> 1, ReLU, weights N(0, 2 / fan_in) (He),
    biases N(0, 0.3^2), float64."""
    from nngauge.nn import mlp

    return mlp(2, WIDTH, HIDDEN + 1, 1, activation="relu", init="gaussian",
               sigma_w=math.sqrt(SIGMA_W2), bias_std=BIAS_STD, dtype=torch.float64,
               generator=generator)


def unit_square_plane():
    """The plane whose coordinates (u, v) are the input (x_1, x_2) itself."""
    from nngauge.trajectories import plane

    eye = torch.eye(2, dtype=torch.float64)
    return plane(torch.zeros(2, dtype=torch.float64), eye[0], eye[1])


def arrangement_regions(weight: np.ndarray, bias: np.ndarray, half_side: float) -> int:
    """Regions that the lines w_i . x + b_i = 0 cut the square [-h, h]^2 into: 1 + the lines
    crossing the open square + their pairwise crossings inside it (lines in general
    position: no three through one point, none parallel)."""
    corners = np.array(list(itertools.product((-half_side, half_side), repeat=2)))
    values = corners @ weight.T + bias  # (4 corners, lines)
    crossing = (values.min(0) < 0) & (values.max(0) > 0)
    count = 1 + int(crossing.sum())
    for i, j in itertools.combinations(np.flatnonzero(crossing), 2):
        point = np.linalg.solve(weight[[i, j]], -bias[[i, j]])
        count += int(np.all(np.abs(point) < half_side))
    return count


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.measures.expressivity._regions import regions
    from nngauge.theory import max_regions_upper_bound

    settings = SETTINGS[scale]
    box = (-HALF_SIDE, HALF_SIDE, -HALF_SIDE, HALF_SIDE)
    layers = [f"layers.{i}.act" for i in range(HIDDEN)]
    bounds = [max_regions_upper_bound(2, [WIDTH] * k).bound for k in range(1, HIDDEN + 1)]
    rows, first = [], None
    for seed in range(settings.networks):
        net = figure1_network(generator)
        result = regions(net, unit_square_plane(), bounds=box, layers=layers)
        first = first or result
        first_layer = net.layers[0].linear
        lines = arrangement_regions(first_layer.weight.detach().numpy(),
                                    first_layer.bias.detach().numpy(), HALF_SIDE)
        for k, count in enumerate(result.per_depth, start=1):
            rows.append((seed, k, k, count, result.n_edges, result.n_vertices,
                         lines if k == 1 else None, bounds[k - 1]))
    comparison = [Comparison(f"network 0, pane {k}: regions after {k} layer(s)",
                             float(first.per_depth[k - 1]), None,
                             f"most possible in R^2: {bounds[k - 1]}")
                  for k in range(1, HIDDEN + 1)]
    for k in range(1, HIDDEN + 1):
        counts = [r[3] for r in rows if r[1] == k]
        comparison.append(Comparison(
            f"pane {k}: mean regions over {settings.networks} networks", float(np.mean(counts)),
            None, f"range {min(counts)}-{max(counts)}"))
    agree = [r[3] == r[6] for r in rows if r[1] == 1]
    comparison.append(Comparison("pane 1 equals the direct arrangement count (fraction)",
                                 float(np.mean(agree)), 1.0, "four lines in general position"))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"result": first})


def plot(computed: Computed, figure) -> None:
    result = computed.extra["result"]
    axes = figure.subplots(1, HIDDEN)
    result.plot(depths=list(range(1, HIDDEN + 1)), ax=list(axes), decision_boundary=False)
    for k, ax in enumerate(axes, start=1):
        ax.set_title(f"after layer {k}: {result.per_depth[k - 1]} regions", fontsize=9)


REPRODUCTION = Reproduction(
    name="raghu-figure1",
    paper=cite("expressivity"),
    target="Figure 1",
    description="exact linear regions of a 2-4-4-4 ReLU network on a square of its input "
                "plane, after one, two and three hidden layers",
    differences={
        "small": (
            "the paper's network (three hidden layers of four ReLUs, input in R^2) with one "
            "output; weights N(0, 2 / fan_in), biases N(0, 0.09): the paper's are not stated",
            "the square [-0.5, 0.5]^2, the unit square centred on the origin (the paper says "
            "'the unit square'; centred, the first layer's lines, at distance |b| / ||w|| from "
            "the origin, cross it)",
            "20 random networks counted, the first drawn; the paper draws one and prints no "
            "numbers",
        ),
        "paper": (
            "as small, with 500 random networks counted",
        ),
    },
    small_runtime="~2 s",
    compute=compute,
    plot=plot,
)
