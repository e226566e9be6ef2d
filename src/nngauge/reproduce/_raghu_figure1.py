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
  the plane, 11 for four);
- ``bent_units``: the units of layer k whose boundary in the square is not one straight line
  (the endpoints of its edges not collinear): none in layer 1 (straight lines), and the
  figure's bending ("the green lines 'bend' at the boundaries") in deeper layers.

The claim is judged on the networks: the mean number of regions rises pane after pane, pane 1
is exactly the arrangement of its straight lines in every network, and in more than half of
the networks some unit of each deeper layer bends.
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
           "arrangement_regions", "upper_bound", "bent_units")
WIDTH = 4
HIDDEN = 3
LARGER = ((8, 3), (16, 3), (8, 6))
"""(width, hidden layers) of the second row's networks (one each, drawn whole)."""
HALF_SIDE = 0.5
"""The square is [-0.5, 0.5]^2: the unit square (side 1), centred on the origin."""
SIGMA_W2 = 2.0
BIAS_STD = 0.3
MIN_BENDING_FRACTION = 0.5
"""Figure 1's bending is judged seen when more than this fraction of the networks has a unit of
the layer whose boundary in the square is not one straight line."""


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
    position: no three through one point; lines of exactly parallel normals, such as a hard
    tanh unit's w . x + b = +-1, never cross)."""
    corners = np.array(list(itertools.product((-half_side, half_side), repeat=2)))
    values = corners @ weight.T + bias  # (4 corners, lines)
    crossing = (values.min(0) < 0) & (values.max(0) > 0)
    count = 1 + int(crossing.sum())
    for i, j in itertools.combinations(np.flatnonzero(crossing), 2):
        if parallel(weight[[i, j]]):
            continue
        point = np.linalg.solve(weight[[i, j]], -bias[[i, j]])
        count += int(np.all(np.abs(point) < half_side))
    return count


def parallel(normals: np.ndarray) -> bool:
    """Whether the m normals (m, m) of m hyperplanes of R^m are linearly dependent to rounding
    (|det| at most 1e-12 of the product of their norms): then the hyperplanes never meet in one
    point."""
    return bool(abs(np.linalg.det(normals))
                <= 1e-12 * np.prod(np.linalg.norm(normals, axis=1)))


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
             lines if k == 1 else None, max_regions_upper_bound(2, [width] * k).bound,
             bent_units(result, k))
            for k, count in enumerate(result.per_depth, start=1)]
    return rows, result


def bent_units(result, depth: int, tol: float = 1e-9) -> int:
    """Units of site ``depth`` (1-based) whose boundary edges in the partition are not all on
    one line (the smallest singular value of their centred endpoints above ``tol`` times
    1 + the largest coordinate)."""
    ends: dict = {}
    for vertices, site, unit in zip(result.edge_vertices, result.edge_depths,
                                    result.edge_units):
        if site == depth:
            ends.setdefault(int(unit), []).append(result.vertices[vertices])
    bent = 0
    for segments in ends.values():
        points = np.concatenate(segments)
        spread = np.linalg.svd(points - points.mean(0), compute_uv=False)[-1]
        bent += bool(spread > tol * (1 + np.abs(points).max()))
    return bent


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
    for k, fraction in bending(rows).items():
        comparison.append(Comparison(
            f"layer {k}: networks with a unit whose boundary bends (fraction)", fraction,
            None, "figure 1: straight lines in layer 1 (0), lines bending at the boundaries "
            "below in deeper layers", key=f"layer{k}_bending"))
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


def bending(rows) -> dict[int, float]:
    """Layer k -> the fraction of the figure's networks (width 4, 3 hidden layers) with a unit
    of layer k whose boundary bends."""
    records = [dict(zip(COLUMNS, row)) for row in rows]
    chosen = [r for r in records if (r["width"], r["hidden_layers"]) == (WIDTH, HIDDEN)]
    return {k: float(np.mean([r["bent_units"] > 0 for r in chosen if r["pane"] == k]))
            for k in sorted({r["pane"] for r in chosen})}


def judge(computed: Computed) -> Verdict:
    """Figure 1, on the figure's networks: every hidden layer subdivides the regions of the
    layers below (the mean regions rise pane after pane); the first layer's boundaries are
    straight lines forming a plain arrangement (in every network); and each deeper layer's
    boundaries bend (a bending unit in more than half of the networks). All: reproduced;
    otherwise differs."""
    records = computed.records()
    panes = sorted({r["pane"] for r in records if (r["width"], r["hidden_layers"]) ==
                    (WIDTH, HIDDEN)})
    means = [float(np.mean([r["regions"] for r in records if (r["width"], r["hidden_layers"],
                                                                  r["pane"]) ==
                            (WIDTH, HIDDEN, k)])) for k in panes]
    first = [r for r in records if (r["width"], r["hidden_layers"], r["pane"]) ==
             (WIDTH, HIDDEN, 1)]
    arrangement = float(np.mean([r["regions"] == r["arrangement_regions"] for r in first]))
    bends = bending(computed.rows)
    straight = bends[1] == 0.0
    bent = all(bends[k] > MIN_BENDING_FRACTION for k in panes[1:])
    summary = (f"mean regions per pane {', '.join(f'{m:.3g}' for m in means)}; pane 1 equals "
               f"the arrangement of its lines in {arrangement:.0%} of networks; a unit's "
               "boundary bends in " + ", ".join(f"{bends[k]:.0%}" for k in panes)
               + f" of networks at layers {', '.join(str(k) for k in panes)}")
    if (all(b > a for a, b in zip(means, means[1:])) and arrangement == 1.0 and straight
            and bent):
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
    n_seeds=3,
)
