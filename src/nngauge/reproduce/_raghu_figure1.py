"""``raghu-figure1``: the linear regions of a small ReLU network on its 2-D input space
(Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017, section 2.1,
figure 1 and Theorem 2).

The paper's network: three hidden layers of four ReLUs, input x in R^2 (one output here; the
figure shows none). Its three panes are the partition of the input square by the activation
patterns of the first layer (four straight lines), of the first two layers (second-layer lines
bend where they meet first-layer ones) and of all three (third-layer lines bend at both).
:func:`nngauge.regions` computes each pane exactly: every region a convex polygon with one
affine map (Theorem 2).

The second row draws the same square for wider and deeper networks, as far as a picture can
still show the regions: 2-8-8-8, 2-16-16-16 and 2-8-8-8-8-8-8 (whole network, boundaries
coloured by layer).

For every network (width, hidden layers, seed) and pane k, the CSV holds the regions after k
layers, the edges and vertices of the whole partition, and two independent checks:

- ``arrangement_regions`` (pane 1 only): 1 + (lines crossing the square) + (their crossings
  inside it), the count of regions of an arrangement of lines in general position in a convex
  set, computed from the first layer's weights directly;
- ``upper_bound``: the most regions k layers of that width can make in R^2
  (:func:`nngauge.theory.max_regions_upper_bound`, Serra et al. ICML 2018 Theorem 1; for one
  layer of m units 1 + m + C(m, 2): Raghu et al.'s Theorem 5, Zaslavsky's count of m lines in
  the plane, 11 for four).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("width", "hidden_layers", "seed", "pane", "regions", "edges", "vertices",
           "arrangement_regions", "upper_bound")
WIDTH = 4
HIDDEN = 3
LARGER = ((8, 3), (16, 3), (8, 6))
"""(width, hidden layers) of the second row's networks (one each, drawn whole)."""
HALF_SIDE = 0.5
"""The square is [-0.5, 0.5]^2: the unit square (side 1), centred on the origin."""
SIGMA_W2 = 2.0
BIAS_STD = 0.3


@dataclass(frozen=True)
class Settings:
    networks: int  # random networks (seeds); the figure draws the first


SETTINGS = {"small": Settings(networks=20), "paper": Settings(networks=500)}


def figure1_network(generator: torch.Generator, width: int = WIDTH,
                    hidden: int = HIDDEN) -> torch.nn.Module:
    """The figure's network: 2 -> 4 -> 4 -> 4 -> 1 (or ``hidden`` layers of ``width``), ReLU,
    weights N(0, 2 / fan_in) (He), biases N(0, 0.3^2), float64."""
    from nngauge.nn import mlp

    return mlp(2, width, hidden + 1, 1, activation="relu", init="gaussian",
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


def _count(net, width: int, hidden: int, seed: int) -> tuple[list[tuple], object]:
    """The CSV rows of one network (a row per pane) and its partition of the square."""
    from nngauge.measures.expressivity._regions import regions
    from nngauge.theory import max_regions_upper_bound

    box = (-HALF_SIDE, HALF_SIDE, -HALF_SIDE, HALF_SIDE)
    result = regions(net, unit_square_plane(), bounds=box,
                     layers=[f"layers.{i}.act" for i in range(hidden)])
    first_layer = net.layers[0].linear
    lines = arrangement_regions(first_layer.weight.detach().numpy(),
                                first_layer.bias.detach().numpy(), HALF_SIDE)
    rows = [(width, hidden, seed, k, count, result.n_edges, result.n_vertices,
             lines if k == 1 else None, max_regions_upper_bound(2, [width] * k).bound)
            for k, count in enumerate(result.per_depth, start=1)]
    return rows, result


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rows, first = [], None
    for seed in range(settings.networks):
        counted, result = _count(figure1_network(generator), WIDTH, HIDDEN, seed)
        rows += counted
        first = first or result
    larger = []
    for width, hidden in LARGER:
        counted, result = _count(figure1_network(generator, width, hidden), width, hidden, 0)
        rows += counted
        larger.append(result)
    ours = [r for r in rows if r[0] == WIDTH and r[1] == HIDDEN]
    comparison = [Comparison(f"network 0, pane {k}: regions after {k} layer(s)",
                             float(first.per_depth[k - 1]), None,
                             f"most possible in R^2: {ours[k - 1][8]}",
                             key=f"network0_pane{k}_regions")
                  for k in range(1, HIDDEN + 1)]
    for k in range(1, HIDDEN + 1):
        counts = [r[4] for r in ours if r[3] == k]
        comparison.append(Comparison(
            f"pane {k}: mean regions over {settings.networks} networks", float(np.mean(counts)),
            None, f"range {min(counts)}-{max(counts)}", key=f"pane{k}_mean_regions"))
    agree = [r[4] == r[7] for r in rows if r[3] == 1]
    comparison.append(Comparison("pane 1 equals the direct arrangement count (fraction)",
                                 float(np.mean(agree)), 1.0, "lines in general position",
                                 key="pane1_is_arrangement"))
    for (width, hidden), result in zip(LARGER, larger):
        comparison.append(Comparison(
            f"2-{'-'.join([str(width)] * hidden)}: regions of the whole network",
            float(result.n_regions), None,
            f"most possible in R^2: {max_regions_upper_bound_text(width, hidden)}",
            key=f"regions_width{width}_depth{hidden}"))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"result": first, "larger": larger})


def max_regions_upper_bound_text(width: int, hidden: int) -> str:
    """Serra et al.'s bound for ``hidden`` layers of ``width`` on R^2, as text."""
    from nngauge.theory import max_regions_upper_bound

    bound = max_regions_upper_bound(2, [width] * hidden)
    return str(bound.bound) if bound.bound < 10**9 else f"10^{bound.log10_bound:.1f}"


def plot(computed: Computed, figure) -> None:
    result, larger = computed.extra["result"], computed.extra["larger"]
    figure.set_size_inches(10, 7)
    top, bottom = figure.subfigures(2, 1)
    axes = top.subplots(1, HIDDEN)
    result.plot(depths=list(range(1, HIDDEN + 1)), ax=list(axes), decision_boundary=False)
    for k, ax in enumerate(axes, start=1):
        ax.set_title(f"2-4-4-4, after layer {k}: {result.per_depth[k - 1]} regions",
                     fontsize=9)
    for ax, (width, hidden), big in zip(bottom.subplots(1, len(LARGER)), LARGER, larger):
        big.plot(depths=[hidden], ax=ax, decision_boundary=False)
        ax.set_title(f"2-{'-'.join([str(width)] * hidden)}: {big.n_regions} regions",
                     fontsize=9)


def judge(computed: Computed) -> Verdict:
    """Figure 1: every hidden layer subdivides the regions of the layers below (more regions
    pane after pane); the first layer's lines form a plain arrangement."""
    means = [computed.compared(f"pane{k}_mean_regions").ours for k in range(1, HIDDEN + 1)]
    arrangement = computed.compared("pane1_is_arrangement").ours
    summary = (f"mean regions per pane {', '.join(f'{m:.3g}' for m in means)}; pane 1 equals "
               f"the arrangement of its lines in {arrangement:.0%} of networks")
    if all(b > a for a, b in zip(means, means[1:])) and arrangement == 1.0:
        return Verdict("reproduced", summary + " (the figure prints no numbers).")
    return Verdict("differs", summary + ".")


REPRODUCTION = Reproduction(
    name="raghu-figure1",
    paper=cite("expressivity"),
    target="Figure 1",
    description="exact linear regions of a 2-4-4-4 ReLU network on a square of its input "
                "plane, after one, two and three hidden layers; then wider and deeper nets",
    differences={
        "small": (
            "the paper's network (three hidden layers of four ReLUs, input in R^2) with one "
            "output; weights N(0, 2 / fan_in), biases N(0, 0.09): the paper's are not stated",
            "the square [-0.5, 0.5]^2, the unit square centred on the origin (the paper says "
            "'the unit square'; centred, the first layer's lines, at distance |b| / ||w|| from "
            "the origin, cross it)",
            "20 random networks counted, the first drawn; the paper draws one and prints no "
            "numbers",
            "a second row (not in the paper): one 2-8-8-8, 2-16-16-16 and 2-8-8-8-8-8-8 "
            "network each, drawn whole",
        ),
        "paper": (
            "as small, with 500 random networks counted",
        ),
    },
    small_runtime="~5 s",
    compute=compute,
    plot=plot,
    claim=("A ReLU network's layers subdivide input space into convex polytopes, each layer's "
           "boundaries bending at those of the layers below (figure 1)."),
    judge=judge,
)
