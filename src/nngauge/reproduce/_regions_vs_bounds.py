"""``regions-vs-bounds``: measured linear regions of ReLU networks against the literature's
bounds on their number, at initialization and after training (the question Raghu et al.'s
Theorem 2 raises: how many of the convex regions does a network actually have?).

Networks: ReLU MLPs with input in R^2 (so that regions can be counted exactly on the whole
square of interest), hidden widths n in {4, 8, 16, ...} and depths L, weights N(0, 2 / fan_in)
(He), biases N(0, 0.5^2), ten outputs. Trained: the same networks fitted (full-batch Adam) on
scikit-learn's bundled digits projected on their two leading principal directions and scaled
to unit mean square.

Measured, per network:

- ``regions_wide``: exact regions of the whole network in [-8, 8]^2
  (:func:`nngauge.regions`), a lower bound on its regions in R^2;
- ``regions_near``: exact regions in [-1, 1]^2, where the data's bulk lies;
- ``crossings_per_length``: region boundaries crossed per unit length on segments of length 2
  through data points in random directions (:func:`nngauge.region_density`, exact), i.e.
  (regions on the segment - 1) / 2.

Beside them:

- ``serra_upper``: the most regions any weights give the architecture in R^2 (Serra,
  Tjandraatmadja and Ramalingam, "Bounding and Counting Linear Regions of Deep Neural
  Networks", ICML 2018, Theorem 1);
- ``montufar_lower``: regions some weights achieve (Montufar, Pascanu, Cho and Bengio, "On the
  Number of Linear Regions of Deep Neural Networks", NeurIPS 2014), exponential in depth;
- ``hr_crossings_bound``: Hanin and Rolnick, "Complexity of Linear Regions in Deep Networks",
  ICML 2019, Theorem 1 at these constants: expected crossings per unit length at
  initialization at most C_bias sum_l n_l C_grad,l, linear in the number of neurons and not
  exponential in depth;
- ``hr_regions_near``: their growth law for the expected regions in a square of area 4,
  (N C_grad C_bias)^2 / 2! x 4 (Hanin and Rolnick, "Deep ReLU Networks Have Surprisingly Few
  Activation Patterns", NeurIPS 2019): an order of magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite, short
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._raghu_figure1 import unit_square_plane

COLUMNS = ("state", "hidden_layers", "width", "neurons", "seed", "regions_wide",
           "regions_near", "crossings_per_length", "serra_upper", "montufar_lower",
           "hr_crossings_bound", "hr_regions_near", "train_accuracy")
STATES = ("init", "trained")
"""The networks' states: at initialization, and trained on 2-D digits."""
SIGMA_W2 = 2.0
BIAS_STD = 0.5
WIDE = 8.0
NEAR = 1.0
SEGMENT_RADIUS = 1.0
CLASSES = 10


@dataclass(frozen=True)
class Settings:
    widths: tuple[int, ...]
    hidden: tuple[int, ...]
    seeds: int  # networks per architecture
    segment_points: int  # data points whose segments are counted
    directions: int  # segments per point
    train_steps: int
    lr: float


SETTINGS = {
    "small": Settings(widths=(4, 8, 16), hidden=(1, 2, 3), seeds=1, segment_points=32,
                      directions=4, train_steps=300, lr=1e-2),
    "paper": Settings(widths=(4, 8, 16, 32), hidden=(1, 2, 3, 4, 6), seeds=5,
                      segment_points=128, directions=8, train_steps=3000, lr=3e-3),
}


def digits_plane() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits on their two leading principal directions, float64, centred and
    scaled to mean square 1 per coordinate pair, with their labels."""
    from nngauge.data import digits

    data = digits()
    x = data.inputs.to(torch.float64).flatten(1)
    x = x - x.mean(0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    projected = x @ vh[:2].T
    return projected * projected.pow(2).sum(1).mean().rsqrt(), data.labels


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.nn import mlp

    settings = SETTINGS[scale]
    x, y = digits_plane()
    rows = []
    for hidden in settings.hidden:
        for width in settings.widths:
            bounds = _bounds(hidden, width)
            for seed in range(settings.seeds):
                net = mlp(2, width, hidden + 1, CLASSES, activation="relu", init="gaussian",
                          sigma_w=math.sqrt(SIGMA_W2), bias_std=BIAS_STD,
                          dtype=torch.float64, generator=generator)
                points = x[torch.randperm(len(x), generator=generator)
                           [:settings.segment_points]]
                rows.append(("init", hidden, width, hidden * width, seed,
                             *_measure(net, hidden, points, settings, generator), *bounds,
                             _accuracy(net, x, y)))
                _train(net, x, y, settings)
                rows.append(("trained", hidden, width, hidden * width, seed,
                             *_measure(net, hidden, points, settings, generator), *bounds,
                             _accuracy(net, x, y)))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=_comparison(rows))


def _bounds(hidden: int, width: int) -> tuple[int, int, float, float]:
    from nngauge.theory import (
        expected_regions_per_length,
        expected_regions_per_volume,
        gaussian_region_constants,
        max_regions_lower_bound,
        max_regions_upper_bound,
    )

    widths = [width] * hidden
    constants = gaussian_region_constants(hidden, sigma_w=math.sqrt(SIGMA_W2), sigma_b=BIAS_STD)
    per_length = expected_regions_per_length(widths, c_grad=constants.c_grad_per_layer,
                                             c_bias=constants.c_bias)
    near = expected_regions_per_volume(2, widths, c_grad=constants.c_grad,
                                       c_bias=constants.c_bias, volume=(2 * NEAR) ** 2)
    return (max_regions_upper_bound(2, widths).bound, max_regions_lower_bound(2, widths).bound,
            per_length.crossings_per_length, near.regions)


def _measure(net, hidden: int, points: torch.Tensor, settings: Settings,
             generator: torch.Generator) -> tuple[int, int, float]:
    from nngauge.measures.expressivity._density import region_density
    from nngauge.measures.expressivity._regions import regions

    plane = unit_square_plane()
    wide = regions(net, plane, bounds=(-WIDE, WIDE, -WIDE, WIDE)).n_regions
    near = regions(net, plane, bounds=(-NEAR, NEAR, -NEAR, NEAR)).n_regions
    density = region_density(net, points, radius=SEGMENT_RADIUS,
                             n_directions=settings.directions, generator=generator)
    crossings = float((density.regions - 1).mean()) / (2 * SEGMENT_RADIUS)
    return wide, near, crossings


def _train(net, x: torch.Tensor, y: torch.Tensor, settings: Settings) -> None:
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.lr)
    for _ in range(settings.train_steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()


def _accuracy(net, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).double().mean())


def _comparison(rows) -> tuple[Comparison, ...]:
    table = [dict(zip(COLUMNS, row)) for row in rows]
    out = []
    for state in STATES:
        chosen = [r for r in table if r["state"] == state]
        ratio = [r["crossings_per_length"] / r["hr_crossings_bound"] for r in chosen]
        out.append(Comparison(
            f"{state}: measured crossings per length / Hanin-Rolnick bound (mean)",
            float(np.mean(ratio)), None,
            f"range {min(ratio):.2f}-{max(ratio):.2f}; the bound holds on average at init",
            key=f"{state}_hanin_rolnick_ratio"))
        fill = [r["regions_wide"] / r["serra_upper"] for r in chosen]
        out.append(Comparison(f"{state}: regions in [-8, 8]^2 / Serra upper bound (largest)",
                              float(max(fill)), None, "at most 1 for every network",
                              key=f"{state}_serra_fill"))
        for hidden in sorted({r["hidden_layers"] for r in chosen}):
            per_neuron = [r["crossings_per_length"] / r["neurons"] for r in chosen
                          if r["hidden_layers"] == hidden]
            out.append(Comparison(
                f"{state}, {hidden} hidden layer(s): crossings per unit length per neuron",
                float(np.mean(per_neuron)), None,
                "Hanin & Rolnick: about constant in depth (linear in N, not exponential)",
                key=f"{state}_depth{hidden}_crossings_per_neuron"))
    deepest = max(r["hidden_layers"] for r in table)
    for r in table:
        if r["state"] == "init" and r["hidden_layers"] == deepest and r["seed"] == 0:
            out.append(Comparison(
                f"init, {deepest} x {r['width']}: regions in [-8, 8]^2 vs Montufar et al.'s "
                "construction", float(r["regions_wide"]), float(r["montufar_lower"]),
                "random networks have far fewer regions than the architecture allows",
                key=f"montufar_depth{deepest}_width{r['width']}"))
    return tuple(out)


def plot(computed: Computed, figure) -> None:
    table = computed.records()
    left, right = figure.subplots(1, 2)
    for i, hidden in enumerate(sorted({r["hidden_layers"] for r in table})):
        for state, marker in (("init", "o"), ("trained", "s")):
            chosen = [r for r in table if r["state"] == state and r["hidden_layers"] == hidden]
            left.scatter([r["neurons"] for r in chosen],
                         [r["crossings_per_length"] for r in chosen], marker=marker,
                         color=f"C{i}", s=18, label=f"L={hidden}, {state}")
        chosen = sorted((r for r in table if r["hidden_layers"] == hidden
                         and r["state"] == "init" and r["seed"] == 0),
                        key=lambda r: r["neurons"])
        left.plot([r["neurons"] for r in chosen], [r["hr_crossings_bound"] for r in chosen],
                  "--", color=f"C{i}", linewidth=1)
        right.plot([r["neurons"] for r in chosen], [r["serra_upper"] for r in chosen], "--",
                   color=f"C{i}", linewidth=1)
        right.plot([r["neurons"] for r in chosen], [r["montufar_lower"] for r in chosen], ":",
                   color=f"C{i}", linewidth=1)
        for state, marker in (("init", "o"), ("trained", "s")):
            chosen = [r for r in table if r["state"] == state and r["hidden_layers"] == hidden]
            right.scatter([r["neurons"] for r in chosen], [r["regions_wide"] for r in chosen],
                          marker=marker, color=f"C{i}", s=18)
    left.set_xlabel("neurons N")
    left.set_ylabel("boundaries crossed per unit length")
    left.set_title("per line (dashed: Hanin & Rolnick 2019)", fontsize=9)
    left.legend(fontsize=6, ncol=2)
    right.set_xlabel("neurons N")
    right.set_ylabel("regions in [-8, 8]^2")
    right.set_yscale("log")
    right.set_title("per plane (dashed: Serra et al. upper; dotted: Montufar et al. lower)",
                    fontsize=9)


def judge(computed: Computed) -> Verdict:
    """Measured counts never exceed Serra et al.'s upper bound; crossings per length against
    Hanin & Rolnick's expected count. The bounds are proven: the verdict is a software check
    of nngauge's exact counts, not evidence about the papers."""
    fills = [computed.compared(f"{state}_serra_fill").ours for state in STATES]
    ratios = {state: computed.compared(f"{state}_hanin_rolnick_ratio").ours for state in STATES}
    summary = (f"regions / Serra et al.'s upper bound at most {max(fills):.3g}; measured "
               "crossings per length / Hanin & Rolnick's bound: "
               + ", ".join(f"{state} {ratio:.3g}" for state, ratio in ratios.items()))
    if max(fills) <= 1.0:
        return Verdict("reproduced", summary + " (Raghu et al.'s Theorem 2 and the literature's "
                       "bounds hold on every network: proven bounds, so only a counting bug "
                       "could break them).", software_check=True)
    return Verdict("differs", summary + ": an upper bound is exceeded (a proven bound: a "
                   "counting bug in nngauge).", software_check=True)


REPRODUCTION = Reproduction(
    name="regions-vs-bounds",
    paper=cite("expressivity", "Theorem 2") + "; with " + ", ".join(
        short(key) for key in ("montufar", "serra", "hanin-rolnick")),
    target="regions vs bounds",
    description="exact linear regions of 2-D ReLU MLPs over depth and width, at "
                "initialization and trained on 2-D digits, against the upper, lower and "
                "expected-count bounds of the literature",
    differences={
        "small": (
            "not a figure of the papers: the comparison their bounds call for, on networks "
            "with input in R^2 (exact counts on a square); Hanin & Rolnick's figures use "
            "MNIST networks and count along lines",
            "widths 4, 8, 16; 1-3 hidden layers; one network each; 300 Adam steps on digits "
            "projected to 2-D",
        ),
        "paper": (
            "widths 4-32, 1-6 hidden layers, five networks each, 3000 Adam steps",
        ),
    },
    small_runtime="~11 s",
    compute=compute,
    plot=plot,
    claim=("Linear regions are bounded above by Serra et al.'s count, can grow exponentially "
           "with depth (Montufar et al.'s construction), and at initialization their density "
           "along lines is set by the number of neurons (Hanin & Rolnick)."),
    judge=judge,
    n_seeds=3,
)
