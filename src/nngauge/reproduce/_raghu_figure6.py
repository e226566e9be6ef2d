"""``raghu-figure6``: accuracy of a trained network when noise is added to the weights of one
layer at a time (Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017,
section 3.1, figure 6).

The paper's setting, in its words: "We then pick a single layer of a conv net trained to high
accuracy on CIFAR10, and add noise to the layer weights of increasing magnitudes, testing the
network accuracy as we do so. We find that the initial (lower) layers of the network are
*least* robust to noise - as the figure shows, adding noise of 0.25 magnitude to the first
layer results in a 0.7 drop in accuracy, while the same amount of noise added to the fifth
layer barely results in a 0.02 drop in accuracy. This pattern is seen for many different
initialization scales, even for a (typical) scaling of sigma_w^2 = 2, used in the experiment."
Section 3.1: "A perturbation at a layer grows exponentially in the *remaining depth* after that
layer."

Data: scikit-learn's digits (8 x 8 images, 10 classes; :func:`nngauge.data.digits`) with
pixel intensities divided by 16 (into [0, 1], as CIFAR10's pixels usually are; not centered),
split at random 60/20/20 into train, validation and test. Two networks are run side by side,
both with the paper's sigma_w^2 = 2 (weights N(0, 2 / fan_in), biases 0):

- ``conv`` (the paper's kind of network; its architecture is not stated beyond a fifth
  layer): raghu-figure11's conv net (:func:`nngauge.reproduce._raghu_figure11.conv_net`:
  conv 3x3 - ReLU - conv 3x3 - ReLU - max-pool - conv 3x3 - ReLU - max-pool - linear - ReLU -
  linear, five weight layers);
- ``mlp`` (the setting chosen after a first look, when the conv net showed no order by
  layer): an MLP (:func:`nngauge.nn.mlp`) of 5 ReLU hidden layers of width 64 and a linear
  readout, six weight layers.

Both are trained alike, with plain SGD on minibatches of 50 by :func:`nngauge.training.fit`
(softmax cross-entropy, the weights of the best validation epoch kept, no learning-rate
decay). Then, for each weight layer d (forward order; the last is the readout) and noise level
a, :func:`nngauge.weight_noise_robustness` replaces W^(d) by W^(d) + a ||W^(d)||_F G / ||G||_F
(G standard Gaussian: noise of relative Frobenius magnitude a; biases untouched) and measures
the test accuracy, averaged over random directions G (the same directions for every level).

The paper's noise magnitude is not defined, so its "0.25" is not a level of ours: the claim is
judged at every level where the noise visibly hurts (some layer loses at least
:data:`MIN_VISIBLE_DROP` of accuracy), not at levels chosen after looking. At such a level the
order holds when the Spearman rank correlation of the layer index with the mean drop is below
:data:`MAX_RHO` and the first layer loses more than every layer of the upper half. Printed per
network: the drop of every layer at a = 0.25 (the paper's layers 1 and 5 beside its numbers),
and at every level the rank correlation and the number of layer pairs d < d' where the lower
layer loses less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("architecture", "network", "layer", "layer_name", "noise", "accuracy",
           "accuracy_std", "accuracy_drop", "clean_accuracy")
"""One row per architecture ("conv" or "mlp"), trained network, weight layer d (forward order,
from 1; ``layer_name`` its module name) and relative noise level a: the mean test accuracy over
the noise directions, its standard deviation over them, the drop from the network's clean test
accuracy."""
ARCHITECTURES = ("conv", "mlp")
SIGMA_W2 = 2.0
"""Figure 6's weight variance ("a (typical) scaling of sigma_w^2 = 2, used in the
experiment")."""
PAPER_LEVEL = 0.25
PAPER_DROP = {1: 0.7, 5: 0.02}
"""Figure 6's printed drops at noise magnitude 0.25: first and fifth layer."""
MIN_VISIBLE_DROP = 0.05
"""A noise level is judged where some layer's mean drop reaches 5 points of accuracy (the
paper's example level costs its first layer 70 points)."""
MAX_RHO = -0.5
"""At a judged level the Spearman correlation of layer index and drop must be below this."""
MIN_CLEAN_ACCURACY = 0.9
"""'trained to high accuracy': the mean clean test accuracy of an architecture's networks."""


@dataclass(frozen=True)
class Settings:
    width: int  # of the MLP
    hidden: int  # hidden layers of the MLP
    nets: int  # trained networks (initializations) per architecture
    epochs: int
    lr: float  # SGD
    batch_size: int
    repeats: int  # noise directions per layer
    levels: tuple[float, ...]


SETTINGS = {
    "small": Settings(width=64, hidden=5, nets=2, epochs=20, lr=0.05, batch_size=50,
                      repeats=8, levels=(0.0, 0.05, 0.1, 0.25, 0.5, 1.0)),
    "paper": Settings(width=100, hidden=5, nets=5, epochs=100, lr=0.05, batch_size=50,
                      repeats=50, levels=(0.0, 0.025, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75,
                                          1.0)),
}
"""The conv net's sizes are raghu-figure11's at the same scale (small: 8, 8, 16 channels and
64 hidden units; paper: 32, 32, 64 and 256)."""


def network(architecture: str, scale: str, generator: torch.Generator) -> nn.Module:
    """The ``"conv"`` or ``"mlp"`` network of the module docstring at ``scale``, weights
    N(0, 2 / fan_in), biases 0."""
    from nngauge.nn import mlp
    from nngauge.reproduce._raghu_figure11 import SETTINGS as FIGURE11_SETTINGS
    from nngauge.reproduce._raghu_figure11 import conv_net

    if architecture == "conv":
        sizes = FIGURE11_SETTINGS[scale]
        return conv_net(sizes.channels, sizes.hidden, SIGMA_W2, generator)
    settings = SETTINGS[scale]
    return mlp(64, settings.width, settings.hidden + 1, 10, activation="relu", init="gaussian",
               sigma_w=math.sqrt(SIGMA_W2), bias_std=0.0, generator=generator)


def pixel_splits(generator: torch.Generator):
    """Digits with intensities / 16, split 60/20/20 at random (seeded from ``generator``)."""
    from nngauge.data import LabelledData, digits, split

    data = digits()
    return split(LabelledData(data.inputs / 16.0, data.labels), (0.6, 0.2, 0.2),
                 generator=seed_of(generator))


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge import weight_noise_robustness
    from nngauge.training import fit

    settings = SETTINGS[scale]
    train, val, test = pixel_splits(generator)
    rows = []
    for architecture in ARCHITECTURES:
        for i in range(settings.nets):
            net = network(architecture, scale, generator)
            fit(net, train, val, lr=settings.lr, batch_size=settings.batch_size,
                loss_scaling=False, max_epochs=settings.epochs, patience=settings.epochs + 1,
                generator=generator)
            result = weight_noise_robustness(net, test.inputs, test.labels,
                                             noise_levels=settings.levels,
                                             n_repeats=settings.repeats, generator=generator)
            for d, layer in enumerate(result.layers, start=1):
                for a, acc, std, drop in zip(result.noise_levels, layer.accuracy,
                                             layer.accuracy_std, layer.accuracy_drop):
                    rows.append((architecture, i, d, layer.name, a, acc, std, drop,
                                 result.clean_accuracy))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(_comparison(rows)),
                    extra={"levels": settings.levels, "nets": settings.nets})


def mean_drop(rows, architecture: str) -> dict[tuple[float, int], float]:
    """(noise level, layer) -> the accuracy drop of ``architecture`` averaged over its
    networks."""
    groups: dict = {}
    for row in rows:
        record = dict(zip(COLUMNS, row))
        if record["architecture"] == architecture:
            groups.setdefault((record["noise"], record["layer"]),
                              []).append(record["accuracy_drop"])
    return {key: float(np.mean(values)) for key, values in groups.items()}


def clean_accuracy(rows, architecture: str) -> float:
    """The mean clean test accuracy of ``architecture``'s networks."""
    return float(np.mean([r[COLUMNS.index("clean_accuracy")] for r in rows
                          if r[0] == architecture]))


def rank_correlation(drop: dict, level: float) -> float:
    """Spearman correlation of the layer index with the mean drop at ``level`` (-1: the drop
    decreases strictly with the layer index)."""
    from scipy import stats

    layers = sorted(d for a, d in drop if a == level)
    return float(stats.spearmanr(layers, [drop[level, d] for d in layers]).statistic)


def order_violations(drop: dict, level: float) -> int:
    """Layer pairs d < d' whose mean drop at ``level`` is smaller at the lower layer d."""
    layers = sorted(d for a, d in drop if a == level)
    return sum(drop[level, lo] < drop[level, hi] for lo in layers for hi in layers if lo < hi)


def visible_levels(drop: dict) -> list[float]:
    """The noise levels at which some layer's mean drop reaches :data:`MIN_VISIBLE_DROP`."""
    levels = sorted({a for a, _ in drop if a > 0})
    return [a for a in levels if max(v for (b, _), v in drop.items() if b == a)
            >= MIN_VISIBLE_DROP]


def order_holds(drop: dict, level: float) -> bool:
    """At ``level``: the rank correlation of layer and drop below :data:`MAX_RHO` (NaN, a tie
    of every drop, fails) and the first layer losing more than every layer of the upper
    half."""
    layers = sorted(d for a, d in drop if a == level)
    upper = layers[len(layers) // 2:]
    return bool(rank_correlation(drop, level) < MAX_RHO
                and drop[level, layers[0]] > max(drop[level, d] for d in upper))


def _comparison(rows) -> list[Comparison]:
    comparison = []
    for architecture in ARCHITECTURES:
        drop = mean_drop(rows, architecture)
        levels = sorted({a for a, _ in drop if a > 0})
        layers = sorted({d for _, d in drop})
        comparison.append(Comparison(
            f"{architecture}: clean test accuracy", clean_accuracy(rows, architecture), None,
            "figure 6: a conv net 'trained to high accuracy' (CIFAR10)",
            key=f"{architecture}_clean_accuracy"))
        comparison += [
            Comparison(f"{architecture}: accuracy drop, noise {PAPER_LEVEL:g} on layer {d}",
                       drop[PAPER_LEVEL, d], PAPER_DROP.get(d),
                       "relative Frobenius noise a ||W||_F G / ||G||_F; test accuracy; mean "
                       "over networks and directions" + ("" if d in PAPER_DROP else
                                                         "; the paper prints layers 1 and 5")
                       + ("; the readout" if d == layers[-1] else ""),
                       key=f"{architecture}_drop_layer{d}")
            for d in layers]
        visible = visible_levels(drop)
        comparison += [
            Comparison(f"{architecture}: rank correlation of layer index and accuracy drop, "
                       f"noise {a:g}", rank_correlation(drop, a), None,
                       "Spearman over the layers' mean drops; figure 6: the drop decreases with "
                       "the layer index (-1); " + ("judged: order " + ("holds" if
                                                   order_holds(drop, a) else "fails")
                                                   if a in visible else "not judged: no layer "
                                                   f"loses {MIN_VISIBLE_DROP:g}"),
                       key=f"{architecture}_rho_noise_{a:g}", statistic="spearman")
            for a in levels]
        pairs = len(layers) * (len(layers) - 1) // 2
        comparison += [
            Comparison(f"{architecture}: layer pairs where the lower layer loses less accuracy, "
                       f"noise {a:g}", float(order_violations(drop, a)),
                       0.0 if a == PAPER_LEVEL else None,
                       f"of {pairs} pairs; drop from layer 1 to {layers[-1]}: "
                       f"{drop[a, layers[0]]:.3f} -> {drop[a, layers[-1]]:.3f}; figure 6: the "
                       "drop decreases with the layer index (0)",
                       key=f"{architecture}_violations_noise_{a:g}")
            for a in levels]
    return comparison


def plot(computed: Computed, figure) -> None:
    from matplotlib import colormaps

    rows = [dict(zip(COLUMNS, r)) for r in computed.rows]
    levels = computed.extra["levels"]
    figure.set_size_inches(12, 6.5)
    for axes, architecture in zip(figure.subplots(2, 2), ARCHITECTURES):
        curves, by_layer = axes
        chosen = [r for r in rows if r["architecture"] == architecture]
        layers = sorted({r["layer"] for r in chosen})
        for d in layers:
            mean = [np.mean([r["accuracy"] for r in chosen
                             if (r["layer"], r["noise"]) == (d, a)]) for a in levels]
            curves.plot(levels, mean, "o-", color=colormaps["viridis"](d / (len(layers) + 1)),
                        label=f"layer {d}")
        curves.set_xlabel("relative weight noise ||E||_F / ||W||_F (one layer)")
        curves.set_ylabel("test accuracy")
        curves.set_title(f"{architecture} on digits, mean of {computed.extra['nets']} networks "
                         "(fig. 6)", fontsize=8)
        curves.legend(fontsize=7)
        drop = mean_drop(computed.rows, architecture)
        for k, a in enumerate(a for a in levels if a > 0):
            by_layer.plot(layers, [drop[a, d] for d in layers], "o-",
                          color=colormaps["magma"](k / len(levels)), label=f"noise {a:g}")
        by_layer.axhline(MIN_VISIBLE_DROP, color="grey", linestyle=":", linewidth=0.8)
        by_layer.set_xticks(layers)
        by_layer.set_xlabel(f"layer with noise ({layers[-1]}: the readout)")
        by_layer.set_ylabel("accuracy drop")
        by_layer.set_title(f"{architecture}: drop by layer (levels judged when above the "
                           "dotted line; paper at 0.25: 0.7, layer 5 0.02)", fontsize=7)
        by_layer.legend(fontsize=6)


def architecture_result(rows, architecture: str) -> tuple[bool, str]:
    """Whether figure 6's order holds for ``architecture`` (trained to high accuracy, at least
    one judged level, the order at every judged level), and the numbers that decide it."""
    drop = mean_drop(rows, architecture)
    clean = clean_accuracy(rows, architecture)
    visible = visible_levels(drop)
    held = [a for a in visible if order_holds(drop, a)]
    layers = sorted({d for _, d in drop})
    text = (f"{architecture} (clean accuracy {clean:.3f}): order by layer at "
            f"{len(held)} of {len(visible)} levels where noise hurts ("
            + ", ".join(f"Spearman {rank_correlation(drop, a):.2f} at {a:g}" for a in visible)
            + f"); at noise {PAPER_LEVEL:g} layer 1 loses {drop[PAPER_LEVEL, 1]:.3f}, layer "
            f"{layers[-1]} {drop[PAPER_LEVEL, layers[-1]]:.3f} (paper: 0.7 at layer 1)")
    return bool(clean >= MIN_CLEAN_ACCURACY and visible and len(held) == len(visible)), text


def judge(computed: Computed) -> Verdict:
    """Figure 6, in the conv net (the paper's kind of network) and in the MLP: each trained to
    high accuracy (mean clean test accuracy at least 0.9), and at every noise level where some
    layer loses at least 5 points the drop falls with the layer index (Spearman below -0.5, the
    first layer losing more than every layer of the upper half). Both: qualitatively (the
    paper's magnitudes are on an undefined noise scale, so never reproduced); otherwise
    differs, naming the architecture that fails."""
    results = {a: architecture_result(computed.rows, a) for a in ARCHITECTURES}
    summary = "; ".join(text for _, text in results.values())
    failing = [a for a, (ok, _) in results.items() if not ok]
    if not failing:
        return Verdict("qualitatively", summary + ": the order holds in both networks, the "
                       "paper's magnitudes are not comparable (its noise scale is undefined; "
                       "digits, not CIFAR10).")
    return Verdict("differs", f"The order fails in the {' and the '.join(failing)} network: "
                   f"{summary}.")


REPRODUCTION = Reproduction(
    name="raghu-figure6",
    paper=cite("expressivity"),
    target="Figure 6, section 3.1",
    description="test accuracy of a trained conv net and MLP (digits) with relative Gaussian "
                "noise added to one weight layer at a time",
    differences={
        "small": (
            "scikit-learn digits (8 x 8, intensities / 16, not centered) instead of CIFAR10",
            "two networks, both at the paper's sigma_w^2 = 2: raghu-figure11's conv net (8, 8, "
            "16 channels, fully connected 64, five weight layers: the paper's conv net is not "
            "specified beyond a fifth layer) and an MLP of 5 ReLU hidden layers of width 64 and "
            "a readout (chosen after a first look, when the conv net showed no order by layer)",
            "plain SGD (lr 0.05, minibatch 50) for 20 epochs, best validation epoch kept; the "
            "paper's optimizer and schedule are not stated",
            "the noise magnitude a is relative to the layer's weight norm (||noise||_F = a "
            "||W||_F, weights only); the paper does not define it, so its drops (0.7 and 0.02 "
            "at 0.25) are not on our scale, and the claim is judged at every level where some "
            "layer loses 5 points; 8 random directions per layer, accuracy on the 359 test "
            "digits, 2 trained networks per architecture averaged",
        ),
        "paper": (
            "digits (intensities / 16) instead of CIFAR10 (not bundled); raghu-figure11's "
            "paper-scale conv net (32, 32, 64 channels, fully connected 256) and an MLP of 5 "
            "ReLU hidden layers of width 100; SGD (lr 0.05) for 100 epochs",
            "relative Frobenius noise (the paper does not define it), 10 levels, 50 directions "
            "per layer, 5 trained networks per architecture averaged",
        ),
    },
    small_runtime="~12 s",
    compute=compute,
    plot=plot,
    claim=("Adding noise to the weights of one layer of a trained network hurts accuracy most in "
           "the lowest layers and least in the upper ones, as remaining depth amplifies "
           "perturbations (figure 6, section 3.1)."),
    judge=judge,
    n_seeds=3,
)
