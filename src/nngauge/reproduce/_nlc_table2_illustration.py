"""``nlc-table2-illustration``: the discs of the NLC paper's Table 2 (appendix A.2), with its
figures 5 and 6.

Table 2 / A.2: plain fully-connected He-initialized batchnorm-ReLU networks (width 100,
d_in = 100, d_out = 3) at depths 2 to 50, randomly initialized. Three Gaussian inputs x1, x2,
x3 in R^100; each point (a, b, c) of the unit sphere stands for the input a x1 + b x2 + c x3;
every input is propagated (here jointly, as one batch: batchnorm uses the batch statistics, as
at initialization), the 3-dimensional output is divided by its length and coloured by the
output sphere's colouring of figure 6 (RGB = (o + 1) / 2: red largest exactly where the first
output is largest, and so on); the disc is the sphere's azimuthal (equidistant) projection.
A.2's claim: "as depth and the NLC of the network increases, the color, and thus the value of
the output, change more and more quickly."

That claim is measured here by the number of *class changes* (the argmax output, the hue's
dominant channel) along great circles of the input sphere, propagated in the same batch:
``crossings`` is their mean over the circles. Beside it, ``nlc``: the NLC of the same
network (:func:`nngauge.nlc`) on Gaussian inputs N(0, I_100) (batches of 250, section G), and the
paper's Table 2 value (CIFAR10, median of 10 initializations). Section 3 makes a linearly
approximable region about 1 / NLC input diameters wide, so the output along a circle of fixed
length changes about NLC times as often: ``crossings`` should grow with the NLC until the
circle's sampling resolves no more (``n_circle`` points per circle).

Judged: the class changes rise with depth and with the NLC (Spearman rho > 0, p < 0.05, over
the seven depths), the NLC compounds with depth (as ``nlc-table2`` judges it: growth at every
depth at a steady per-layer factor) and figure 5's value equals its closed form; reproduced
when both rho >= 0.9 and every NLC is within a factor 2 of Table 2.

Figure 5 (A.1): f = sin on the domain [0, 2 pi]; its NLC, Q_x |f'(x)| S_x x / S_x f(x), equals
2 pi / sqrt(12) = 1.814 for x uniform on the domain (closed form), measured by
:func:`nngauge.nlc` on a grid; the panel draws the tangents at two points and the intervals
where they stay inside the co-domain [-1, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

DEPTHS = (2, 5, 10, 15, 20, 25, 50)
PAPER = (1.22, 2.25, 5.97, 15.2, 37.7, 95.8, 9952)  # NLC paper, Table 2, row "NLC"
WIDTH, D_IN, D_OUT = 100, 100, 3  # appendix A.2
COLUMNS = ("depth", "crossings", "crossings_min", "crossings_max", "n_circle", "nlc",
           "paper_nlc", "crossings_per_nlc")
SIN_NLC = 2 * math.pi / math.sqrt(12)  # figure 5's f = sin on [0, 2 pi]: Q|cos| S_x x / S sin
TANGENT_POINTS = (0.5, 3.0)  # figure 5's x1 and x2 (red, olive)
SINE_TOLERANCE = 1e-5
"""Relative agreement of the NLC of sin on 2000 grid points of [0, 2 pi) with 2 pi / sqrt(12):
on the grid Q|cos| = S sin = sqrt(1/2) exactly and S_x x is sqrt(1 - 1/2000^2) of the
continuous value (1.3e-7 relative)."""
STRONG_RHO = 0.9
"""Reproduced: class changes rank with depth and with the NLC at Spearman rho >= 0.9."""
PAPER_FACTOR = 2.0
"""Reproduced: the one illustrated network's NLC within a factor 2 of Table 2's median of 10
(CIFAR10) at every depth."""


@dataclass(frozen=True)
class Settings:
    resolution: int  # pixels across the disc
    n_circles: int
    n_circle: int  # points per great circle
    n_nlc: int  # Gaussian samples for the NLC


SETTINGS = {
    "small": Settings(resolution=96, n_circles=4, n_circle=1024, n_nlc=500),
    "paper": Settings(resolution=300, n_circles=16, n_circle=16384, n_nlc=10_000),
}


class Sine(nn.Module):
    """f(x) = sin(x), elementwise: figure 5's example function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)


def disc_points(resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """Points of the unit sphere under the pixels of the azimuthal equidistant projection
    (the north pole (0, 0, 1) at the centre, the south pole on the rim): (n, 3) points and the
    (resolution, resolution) mask of the pixels inside the disc."""
    grid = np.linspace(-1, 1, resolution)
    px, py = np.meshgrid(grid, grid)
    rho = np.hypot(px, py)
    mask = rho <= 1.0
    theta, phi = math.pi * rho[mask], np.arctan2(py[mask], px[mask])
    points = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi),
                       np.cos(theta)], axis=1)
    return points, mask


def great_circles(n_circles: int, n_points: int, generator: torch.Generator) -> np.ndarray:
    """(n_circles, n_points, 3): great circles of random orientation, each closed."""
    frames = torch.randn(n_circles, 3, 3, generator=generator, dtype=torch.float64)
    q, _ = torch.linalg.qr(frames)
    t = torch.linspace(0, 2 * math.pi, n_points + 1, dtype=torch.float64)[:-1]
    circle = torch.cos(t)[None, :, None] * q[:, None, :, 0] + \
        torch.sin(t)[None, :, None] * q[:, None, :, 1]
    return circle.numpy()


def sphere_colours(outputs: np.ndarray) -> np.ndarray:
    """Figure 6's colouring: the output divided by its length, RGB = (o + 1) / 2 (the R, G or
    B component is largest exactly where the first, second or third output is)."""
    unit = outputs / np.linalg.norm(outputs, axis=-1, keepdims=True)
    return np.clip((unit + 1.0) / 2.0, 0.0, 1.0)


def class_changes(classes: np.ndarray) -> np.ndarray:
    """Changes of the class between neighbouring points of each closed circle."""
    return (classes != np.roll(classes, -1, axis=-1)).sum(axis=-1)


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge import nlc
    from nngauge.data import gaussian
    from nngauge.nn import mlp

    settings = SETTINGS[scale]
    basis = torch.randn(3, D_IN, generator=generator, dtype=torch.float64)  # x1, x2, x3
    disc, mask = disc_points(settings.resolution)
    circles = great_circles(settings.n_circles, settings.n_circle, generator)
    sphere = torch.as_tensor(np.concatenate([disc, circles.reshape(-1, 3)]))
    inputs = (sphere @ basis).float()
    data = gaussian(settings.n_nlc, D_IN, generator=seed_of(generator)).inputs
    rows, images = [], {}
    for depth, paper in zip(DEPTHS, PAPER):
        net = mlp(D_IN, WIDTH, depth, D_OUT, activation="relu", norm="batch", init="gaussian",
                  sigma_w=math.sqrt(2.0), generator=generator)
        with torch.no_grad():
            outputs = net(inputs).double().numpy()  # train mode: the batch's statistics
        image = np.ones(mask.shape + (3,))
        image[mask] = sphere_colours(outputs[:len(disc)])
        images[depth] = image
        classes = outputs[len(disc):].argmax(1).reshape(settings.n_circles, settings.n_circle)
        changes = class_changes(classes)
        measured = nlc(net, data, batch_size=250, generator=generator).nlc
        rows.append((depth, float(changes.mean()), int(changes.min()), int(changes.max()),
                     settings.n_circle, measured, paper, float(changes.mean()) / measured))
    sine = _figure5(generator)
    computed = Computed(columns=COLUMNS, rows=tuple(rows),
                        extra={"images": images, "figure6": _figure6(settings.resolution)})
    return replace(computed, comparison=_comparison(computed, sine))


def _figure5(generator: torch.Generator) -> float:
    """NLC of sin on an even grid of [0, 2 pi] (figure 5's toy function)."""
    from nngauge import nlc

    x = torch.linspace(0, 2 * math.pi, 2001, dtype=torch.float64)[:-1, None]
    return nlc(Sine(), x, batch_size=len(x), method="exact", generator=generator).nlc


def _figure6(resolution: int) -> np.ndarray:
    """Figure 6: the output sphere's colouring, as an azimuthal projection."""
    points, mask = disc_points(resolution)
    image = np.ones(mask.shape + (3,))
    image[mask] = sphere_colours(points)
    return image


def _comparison(computed: Computed, sine: float) -> tuple[Comparison, ...]:
    from nngauge.reproduce._regions_and_loss import spearman

    depth, crossings = computed.column("depth"), computed.column("crossings")
    nlcs = computed.column("nlc")
    out = [Comparison(f"NLC depth {d}", v, p, "the illustrated network, Gaussian inputs "
                      f"(class changes along a great circle: {c:.1f})", key=f"nlc_depth_{d}")
           for d, v, p, c in zip(depth, nlcs, computed.column("paper_nlc"), crossings)]
    rho_depth, p_depth = spearman(depth, crossings)
    rho_nlc, p_nlc = spearman(nlcs, crossings)
    out += [
        Comparison("Spearman rho(depth, class changes along circles)", rho_depth,
                   key="rho_depth", statistic="spearman", p_value=p_depth,
                   note="A.2: the colour changes more quickly with depth"),
        Comparison("Spearman rho(NLC, class changes along circles)", rho_nlc, key="rho_nlc",
                   statistic="spearman", p_value=p_nlc, note="A.2: ... and with the NLC"),
        Comparison("figure 5: NLC of sin on [0, 2 pi]", sine, None,
                   f"closed form 2 pi / sqrt(12) = {SIN_NLC:.4f}; the paper prints none",
                   key="sine_nlc"),
    ]
    return tuple(out)


def plot(computed: Computed, figure) -> None:
    axes = figure.subplots(2, 5).ravel()
    images = computed.extra["images"]
    for ax, (depth, paper, ours, changes) in zip(axes, zip(
            computed.column("depth"), computed.column("paper_nlc"), computed.column("nlc"),
            computed.column("crossings"))):
        ax.imshow(images[depth], origin="lower")
        ax.set_title(f"depth {depth}: NLC {ours:.3g} (paper {paper:.3g})\n"
                     f"{changes:.0f} class changes / circle", fontsize=7)
        ax.axis("off")
    axes[7].imshow(computed.extra["figure6"], origin="lower")
    axes[7].set_title("figure 6: output sphere colouring", fontsize=7)
    axes[7].axis("off")
    _plot_figure5(axes[8])
    ax = axes[9]
    ax.plot(computed.column("nlc"), computed.column("crossings"), "o-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("NLC", fontsize=7)
    ax.set_ylabel("class changes / circle", fontsize=7)
    ax.tick_params(labelsize=6)


def _plot_figure5(ax) -> None:
    x = np.linspace(0, 2 * math.pi, 400)
    ax.plot(x, np.sin(x), color="tab:blue")
    for x0, color in zip(TANGENT_POINTS, ("tab:red", "olive")):
        slope, y0 = math.cos(x0), math.sin(x0)
        ax.plot(x, y0 + slope * (x - x0), color=color, lw=2)
        low, high = sorted(((-1 - y0) / slope + x0, (1 - y0) / slope + x0))
        ax.axvspan(max(low, 0), min(high, 2 * math.pi), color=color, alpha=0.2)
        ax.plot([x0], [y0], "o", color=color)
    ax.set_ylim(-1.6, 1.6)
    ax.set_xlim(0, 2 * math.pi)
    ax.set_title("figure 5: f = sin, tangents", fontsize=7)
    ax.tick_params(labelsize=6)


def judge(computed: Computed) -> Verdict:
    """Table 2's pictures (A.2): the NLC of the illustrated networks compounds with depth
    (:func:`nngauge.reproduce._nlc_table2.compounds`), and the output's colour changes more
    often with depth and with the NLC (Spearman rho > 0 at p < 0.05 for both); figure 5's NLC
    of sin equals its closed form (a software check). All of these, rho >= 0.9 for both and
    the NLC within a factor 2 of Table 2 at every depth: reproduced; all of them with other
    numbers: qualitatively; any failing: differs."""
    from nngauge.reproduce._nlc_table2 import compounds

    by_depth, by_nlc = computed.compared("rho_depth"), computed.compared("rho_nlc")
    depths = computed.column("depth")
    nlc = [computed.compared(f"nlc_depth_{d}") for d in depths]
    growth = compounds(depths, [c.ours for c in nlc])
    sine = computed.compared("sine_nlc").ours
    sine_ok = abs(sine / SIN_NLC - 1) <= SINE_TOLERANCE
    close = sum(1 / PAPER_FACTOR <= c.ours / c.paper <= PAPER_FACTOR for c in nlc)
    changes = {"with depth": by_depth, "with the NLC": by_nlc}
    more_often = {k: c.ours > 0 and c.significant() for k, c in changes.items()}
    summary = ("Spearman rho of class changes " + ", ".join(
        f"{k} {c.ours:.2f} ({c.printed_statistics})" for k, c in changes.items())
        + f"; the NLC's {growth.describe()}; NLC within a factor {PAPER_FACTOR:g} of Table 2 at "
        f"{close} of {len(nlc)} depths; figure 5's NLC of sin {sine:.6g} against "
        f"2 pi / sqrt(12) = {SIN_NLC:.6g} (a software check: a closed form)")
    failed = [f"more class changes {k}" for k, ok in more_often.items() if not ok]
    failed += [] if growth.holds else ["the NLC compounding with depth"]
    failed += [] if sine_ok else ["figure 5's closed form"]
    if failed:
        return Verdict("differs", summary + "; failing: " + ", ".join(failed) + ".")
    if by_depth.ours >= STRONG_RHO and by_nlc.ours >= STRONG_RHO and close == len(nlc):
        return Verdict("reproduced", summary + ".")
    return Verdict("qualitatively", summary + ".")


REPRODUCTION = Reproduction(
    name="nlc-table2-illustration",
    paper=cite("nlc"),
    target="Table 2 (illustrations), figures 5-6",
    description="discs of the input sphere coloured by the output of He-initialized "
                "batchnorm-ReLU MLPs at depths 2-50, class changes along great circles vs NLC",
    differences={
        "small": (
            "discs of 96 x 96 pixels; class changes along 4 great circles of 1024 points "
            "each (a count near 1024 * 2 / 3 means the circle no longer resolves the output)",
            "the NLC of the one illustrated network on Gaussian inputs (2 batches of 250) "
            "instead of the median of 10 networks on CIFAR10",
            "the sphere's inputs are propagated as one batch (the paper does not say how it "
            "batched them: batchnorm's statistics depend on it)",
            "the paper prints no count of colour changes: its claim is read off the discs",
        ),
        "paper": (
            "the NLC of the one illustrated network on Gaussian inputs (40 batches of "
            "250) instead of the median of 10 networks on CIFAR10",
            "the sphere's inputs are propagated as one batch; the paper prints no count",
        ),
    },
    small_runtime="~5 s",
    compute=compute,
    plot=plot,
    claim=("The NLC of a He-initialized batchnorm-ReLU network compounds with depth, and the "
           "function grows correspondingly more complex: the colour of the output changes more "
           "and more often across the input disc (Table 2's illustrations, appendix A.2, figures "
           "5-6)."),
    judge=judge,
    n_seeds=3,
)
