"""``raghu-figure4``: trajectory length through a random convolutional ReLU network with
pooling (Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017, section
2.2 and figure 4).

The paper propagates a circular trajectory between two CIFAR-10 images through a ReLU conv net
whose layers 3 and 7 are pooling layers, for several initialization scales sigma_w^2. Here the
images are scikit-learn's 8x8 digits (1 x 8 x 8, centred on the mean image, scaled to norm 8)
and the network, sized for them, has eight measured layers:

    1 conv3x3-ReLU, 2 conv3x3-ReLU, 3 maxpool 2 (8x8 -> 4x4), 4-6 conv3x3-ReLU,
    7 maxpool 2 (4x4 -> 2x2), 8 fully connected ReLU, then a linear read-out of 10,

``channels`` channels per conv layer, weights N(0, sigma_w^2 / fan_in) (fan_in = channels x 9
for a conv), no biases. The arc x(t) = cos(pi t / 2) x0 + sin(pi t / 2) x1 between the two
images is propagated and the length of its image after every layer measured with
:func:`nngauge.trajectory_length` (refined to convergence), averaged over ``nets`` networks.

Claims: the length grows with depth for the larger scales (Theorem 3 holds for conv layers too,
"albeit with slightly higher scales"), and every pooling layer reduces it. (Non-overlapping max
pooling is 1-Lipschitz in the Euclidean norm: |max_i a_i - max_i b_i| <= max_i |a_i - b_i|
<= ||a - b|| per window, so it can never lengthen a curve.)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._raghu_figure2 import digit_endpoints

COLUMNS = ("sigma_w2", "layer", "kind", "units", "length", "ratio_to_previous", "converged")
KINDS = ("conv", "conv", "pool", "conv", "conv", "conv", "pool", "fc")
POOLS = (3, 7)


@dataclass(frozen=True)
class Settings:
    sigma_w2: tuple[float, ...]
    channels: int
    nets: int
    n_points: int
    tol: float
    max_points: int


SETTINGS = {
    "small": Settings(sigma_w2=(1.0, 2.0, 4.0, 8.0, 16.0), channels=16, nets=2, n_points=129,
                      tol=1e-2, max_points=2**12 + 1),
    "paper": Settings(sigma_w2=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0), channels=64, nets=10,
                      n_points=1025, tol=1e-3, max_points=2**15 + 1),
}


def conv_net(channels: int, sigma_w2: float, generator: torch.Generator) -> nn.Sequential:
    """The figure's network for 1 x 8 x 8 inputs (module docstring), float64, weights
    N(0, sigma_w^2 / fan_in), no biases."""
    c = channels

    def conv(c_in):
        return nn.Conv2d(c_in, c, 3, padding=1, bias=False)

    net = nn.Sequential(conv(1), nn.ReLU(), conv(c), nn.ReLU(), nn.MaxPool2d(2),
                        conv(c), nn.ReLU(), conv(c), nn.ReLU(), conv(c), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * c, 4 * c, bias=False),
                        nn.ReLU(), nn.Linear(4 * c, 10, bias=False)).to(torch.float64)
    with torch.no_grad():
        for module in net:
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator,
                                                dtype=torch.float64)
                                    * math.sqrt(sigma_w2 / fan_in))
    return net


MEASURED = ("1", "3", "4", "6", "8", "10", "11", "14")
"""Module names of layers 1-8 (ReLU outputs and pooling outputs) in :func:`conv_net`."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.measures.expressivity._trajectory import trajectory_length
    from nngauge.trajectories import arc

    settings = SETTINGS[scale]
    x0, x1, labels = digit_endpoints(generator, (1, 8, 8))
    traj = arc(x0, x1, settings.n_points)
    rows, series = [], {}
    for sigma_w2 in settings.sigma_w2:
        lengths, converged, units = [], True, None
        for _ in range(settings.nets):  # one refinement per network (networks not batched)
            net = conv_net(settings.channels, sigma_w2, generator)
            with warnings.catch_warnings():  # non-convergence is recorded in the CSV
                warnings.simplefilter("ignore", UserWarning)
                result = trajectory_length(net, traj, layers=list(MEASURED), tol=settings.tol,
                                           max_points=settings.max_points)
            lengths.append(result.lengths[:-1])  # input and the 8 layers, not the output
            converged = converged and result.converged
            units = [row.dim for row in result.layers[:-1]]
        mean = np.mean(lengths, axis=0)
        series[sigma_w2] = mean
        for d, length in enumerate(mean):
            rows.append((sigma_w2, d, "input" if d == 0 else KINDS[d - 1], units[d],
                         float(length), float(length / mean[d - 1]) if d else math.nan,
                         converged))
    comparison = []
    for sigma_w2, mean in series.items():
        comparison.append(Comparison(
            f"sigma_w^2={sigma_w2:g}: length after layer 6 / after layer 1",
            float(mean[6] / mean[1]), None,
            "figure 4: grows with depth for the larger scales",
            key=f"sigma_w2_{sigma_w2:g}_growth"))
    for pool in POOLS:
        ratios = [float(series[s][pool] / series[s][pool - 1]) for s in series]
        comparison.append(Comparison(
            f"pooling layer {pool}: length after / before (largest over scales)", max(ratios),
            None, "figure 4: pooling layers reduce the length (< 1)", key=f"pool{pool}_ratio"))
    comparison[0] = replace(comparison[0], note=f"{comparison[0].note}; the arc joins a digit "
                            f"{labels[0]} to a digit {labels[1]}")
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison))


def plot(computed: Computed, figure) -> None:
    ax = figure.subplots()
    rows = [dict(zip(computed.columns, row)) for row in computed.rows]
    for i, sigma_w2 in enumerate(sorted({r["sigma_w2"] for r in rows})):
        points = [r for r in rows if r["sigma_w2"] == sigma_w2]
        ax.plot([r["layer"] for r in points], [r["length"] for r in points], "o-",
                color=f"C{i}", markersize=3, label=f"sigma_w^2={sigma_w2:g}")
    for pool in POOLS:
        ax.axvline(pool, color="grey", linestyle=":", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(KINDS) + 1))
    ax.set_xticklabels(["input"] + [f"{d + 1}\n{k}" for d, k in enumerate(KINDS)], fontsize=7)
    ax.set_xlabel("layer (dotted: pooling)")
    ax.set_ylabel("trajectory length")
    ax.legend(fontsize=7)


def judge(computed: Computed) -> Verdict:
    """Figure 4, with the criteria of the tests: the pooling layers 3 and 7 shorten the
    trajectory at every scale; at sigma_w^2 >= 8 it grows over 2x from layer 1 to layer 6 and
    every conv layer lengthens it; the growth rises with sigma_w^2 and is below 1 (a
    shrinking) at sigma_w^2 = 1."""
    length = {(r["sigma_w2"], r["layer"]): r["length"] for r in computed.records()}
    scales = sorted({s for s, _ in length})
    growth = {s: length[s, 6] / length[s, 1] for s in scales}
    pooling = max(length[s, p] / length[s, p - 1] for s in scales for p in POOLS)
    pools_ok = pooling < 1
    large_ok = all(growth[s] > 2 and all(length[s, d] > length[s, d - 1] for d in (2, 4, 5, 6))
                   for s in scales if s >= 8)
    rising = all(growth[b] > growth[a] for a, b in zip(scales, scales[1:]))
    text = ("length after layer 6 / after layer 1 "
            + ", ".join(f"{growth[s]:.3g}" for s in scales) + " at sigma_w^2 = "
            + ", ".join(f"{s:g}" for s in scales) + f"; pooling keeps at most {pooling:.2f} of "
            "the length (a software check, not evidence: a pooling layer is 1-Lipschitz, so "
            "only a bug could make it lengthen the curve)")
    if pools_ok and large_ok and rising and growth[scales[0]] < 1:
        return Verdict("reproduced", "The length grows with depth at the larger scales, more "
                       f"with sigma_w^2, and every pooling layer shortens it: {text}.")
    if pools_ok and rising and growth[scales[-1]] > 1:
        return Verdict("qualitatively", "Pooling shortens the trajectory and its growth rises "
                       f"with sigma_w^2, but not every criterion of figure 4 holds: {text}.")
    return Verdict("differs", f"The trajectory does not grow with depth as figure 4: {text}.")


REPRODUCTION = Reproduction(
    name="raghu-figure4",
    paper=cite("expressivity"),
    target="Figure 4",
    description="length of an arc between two digit images after each layer of random ReLU "
                "conv nets with max pooling at layers 3 and 7, over sigma_w^2",
    differences={
        "small": (
            "scikit-learn's 8x8 digits (1 x 8 x 8) instead of CIFAR-10 32x32 colour images: "
            "nothing is downloaded",
            "a conv net sized for 8x8 inputs (5 conv layers of 16 channels, max pooling at "
            "layers 3 and 7 as the paper, one fully connected layer), no biases: the paper's "
            "architecture is not stated; 2 networks averaged per scale",
            "sigma_w^2 1, 2, 4, 8, 16; lengths refined to 1% (at most 4097 points); the paper "
            "prints no numbers",
        ),
        "paper": (
            "digits instead of CIFAR-10; 64 channels, 10 networks per scale, sigma_w^2 1-32, "
            "lengths refined to 0.1%",
        ),
    },
    small_runtime="~5 s",
    compute=compute,
    plot=plot,
    claim=("Trajectory length grows with depth in a random convolutional ReLU network too, at "
           "slightly higher initialization scales than fully connected ones, while the pooling "
           "layers 3 and 7 decrease it (section 2.2, figure 4)."),
    judge=judge,
    n_seeds=3,
)
