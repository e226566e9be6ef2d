"""``raghu-figure10``: trajectory length through the batch norm layers of a conv net, at
initialization and after a few hundred gradient steps (Raghu et al., "On the Expressive Power
of Deep Neural Networks", ICML 2017, section 3.2, figure 10).

The paper trains a conv net with batch norm on CIFAR10 (initialized "as typical, with
sigma_w^2 = 2") and propagates a circular trajectory between two data points through it during
training. Its text: "the batch norm layers in Step 0 are poorly behaved due to division by a
close to 0 variance. But after just a few hundred gradient steps and continuing onwards, we
see the batch norm layers (dotted lines) reduce trajectory length, stabilising the
representation without sacrificing expressivity"; section 3.2: "We see that the batch norm
layers reduce trajectory length, helping stability."

Here: scikit-learn's digits (standardized, :func:`~nngauge.reproduce._base.digit_splits`) and
raghu-figure11's conv net (:func:`~nngauge.reproduce._raghu_figure11.conv_net`: three conv
layers, max pooling, a fully connected layer, five weight layers, weights N(0, 2 / fan_in)),
built twice from one initialization (:func:`~nngauge.reproduce._raghu_figure11.networks`): with
a ``BatchNorm`` after each of its four hidden weight layers (before the ReLU), and without
(identity slots). Both are trained by raghu-figure11's loop (Adam, minibatches of 50, the same
order) for a few hundred steps. Before and after training, the arc
x(t) = cos(pi t / 2) x_a + sin(pi t / 2) x_b between two training digits of different classes
(drawn per network) is propagated and the length of its image after every module is measured
by :func:`nngauge.trajectory_length` (refined to convergence), with the batch norm layers
normalizing by the statistics of the training set (``norm_mode="frozen"``: what the layer
divides by in training, up to the minibatch's noise; the running statistics are the defaults
(0, 1) at step 0).

The claim judged: after training, a batch norm layer's output trajectory is shorter than its
input's. For every network the mean over its batch norm layers of log(length after / length
before); the two-sided Wilcoxon signed-rank test of these means against 0 over the networks
must be significant (p < 0.05) with a geometric mean ratio below 1, and every batch norm layer's
geometric mean ratio over the networks below 1 (the figure: every dotted line shortens it).
The same ratios at step 0, and the length after the last hidden layer with and without batch
norm, are printed beside, not judged (the paper says step 0 is "poorly behaved", and compares
the networks with and without batch norm only through figures 8 and 10 side by side).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, digit_splits
from nngauge.reproduce._raghu_figure11 import SETTINGS as FIGURE11_SETTINGS

COLUMNS = ("network", "variant", "step", "position", "module", "kind", "length",
           "ratio_to_previous", "test_accuracy", "converged")
"""One row per initialization, variant ("batchnorm" or "none"), measured step (0 and the last)
and module in forward order (position 0: the input): the length of the arc's image after it,
its ratio to the previous row's, the network's test accuracy at that step, and whether every
length of the network converged."""
VARIANTS = ("batchnorm", "none")
MEASURED_KINDS = {nn.Conv2d: "conv", nn.Linear: "linear", nn.BatchNorm1d: "batchnorm",
                  nn.BatchNorm2d: "batchnorm", nn.Identity: "identity", nn.ReLU: "relu",
                  nn.MaxPool2d: "pool"}
"""The modules whose outputs are measured (not the reshapes, which keep the length), by kind."""


@dataclass(frozen=True)
class Settings:
    nets: int  # initializations (the judged test runs over them)
    tol: float  # of the length refinement
    max_points: int
    n_points: int  # initial points of the arc


SETTINGS = {
    "small": Settings(nets=6, tol=1e-2, max_points=2**11 + 1, n_points=129),
    "paper": Settings(nets=10, tol=1e-3, max_points=2**14 + 1, n_points=513),
}
"""The networks, their training and their sizes are raghu-figure11's settings at each scale
(:data:`nngauge.reproduce._raghu_figure11.SETTINGS`); these add the number of networks and the
length refinement."""


def measured_modules(net: nn.Sequential) -> list[tuple[str, str]]:
    """(module name, kind) of the modules measured, in forward order, the last linear layer
    (the output, always reported) left out."""
    chosen = [(name, kind) for name, module in net.named_children()
              for cls, kind in MEASURED_KINDS.items() if type(module) is cls]
    return chosen[:-1]


def arc_between_classes(inputs: torch.Tensor, labels: torch.Tensor, n_points: int,
                        generator: torch.Generator):
    """The arc between a random input and a random input of another class."""
    from nngauge.trajectories import arc

    first = int(torch.randint(len(labels), (1,), generator=generator))
    others = torch.nonzero(labels != labels[first]).flatten()
    second = int(others[torch.randint(len(others), (1,), generator=generator)])
    return arc(inputs[first], inputs[second], n_points)


def _lengths(net: nn.Sequential, traj, norm_data: torch.Tensor, settings: Settings):
    from nngauge.measures.expressivity._trajectory import trajectory_length

    modules = measured_modules(net)
    with warnings.catch_warnings():  # non-convergence is recorded in the CSV
        warnings.simplefilter("ignore", UserWarning)
        result = trajectory_length(net, traj, layers=[name for name, _ in modules],
                                   tol=settings.tol, max_points=settings.max_points,
                                   norm_mode="frozen", norm_data=norm_data)
    names = [("input", "input")] + modules + [("output", "output")]
    return list(zip(names, result.lengths)), result.converged


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.reproduce._raghu_figure11 import accuracy, networks, train

    settings, training = SETTINGS[scale], FIGURE11_SETTINGS[scale]
    train_data, _, test_data = digit_splits(generator)
    rows = []
    for i in range(settings.nets):
        variants = networks(training, generator, VARIANTS)
        traj = arc_between_classes(train_data.inputs, train_data.labels, settings.n_points,
                                   generator)
        shuffle_seed = seed_of(generator)  # the same minibatch order for both variants
        for variant, net in variants.items():
            measured = {0: (*_lengths(net, traj, train_data.inputs, settings),
                            accuracy(net, test_data))}
            history = train(net, train_data, test_data, training, shuffle_seed, (i, variant))
            last = history[-1][3]  # raghu-figure11's rows: the step is the fourth column
            measured[last] = (*_lengths(net, traj, train_data.inputs, settings),
                              accuracy(net, test_data))
            for step, (lengths, converged, test_accuracy) in measured.items():
                previous = None
                for position, ((name, kind), length) in enumerate(lengths):
                    rows.append((i, variant, step, position, name, kind, length,
                                 math.nan if previous is None else length / previous,
                                 test_accuracy, converged))
                    previous = length
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(_comparison(rows)),
                    extra={"nets": settings.nets})


def batchnorm_log_ratios(rows, step: str) -> np.ndarray:
    """(networks, batch norm layers) log(length after / length before) of the batchnorm
    variant at ``step`` ("init": step 0, "trained": the last step)."""
    records = [dict(zip(COLUMNS, row)) for row in rows]
    chosen = [r for r in records if r["variant"] == "batchnorm"]
    last = max(r["step"] for r in chosen)
    at = 0 if step == "init" else last
    by_network: dict = {}
    for r in chosen:
        if r["step"] == at and r["kind"] == "batchnorm":
            by_network.setdefault(r["network"], []).append(math.log(r["ratio_to_previous"]))
    return np.array([by_network[n] for n in sorted(by_network)])


def depth_ratio(rows, variant: str, step: str) -> float:
    """Geometric mean over the networks of the length after the last hidden layer (the last
    ReLU) over the input length, for ``variant`` at ``step`` ("init" or "trained")."""
    records = [dict(zip(COLUMNS, row)) for row in rows if row[1] == variant]
    last = max(r["step"] for r in records)
    at = 0 if step == "init" else last
    logs = []
    for network in sorted({r["network"] for r in records}):
        chosen = [r for r in records if r["network"] == network and r["step"] == at]
        top = [r for r in chosen if r["kind"] == "relu"][-1]
        logs.append(math.log(top["length"] / chosen[0]["length"]))
    return float(math.exp(np.mean(logs)))


def _comparison(rows) -> list[Comparison]:
    from scipy import stats

    comparison = []
    for step in ("trained", "init"):
        logs = batchnorm_log_ratios(rows, step)
        means = logs.mean(1)
        test = stats.wilcoxon(means)
        when = ("after training" if step == "trained"
                else "at step 0 (the paper: 'poorly behaved'; not judged)")
        comparison.append(Comparison(
            f"length after / before a batch norm layer {when}: geometric mean",
            float(math.exp(means.mean())), None,
            "Wilcoxon signed-rank over the networks' mean log ratios; figure 10: below 1 "
            "after a few hundred steps", key=f"batchnorm_ratio_{step}", statistic="wilcoxon",
            p_value=float(test.pvalue), n=len(means)))
        for j in range(logs.shape[1]):
            comparison.append(Comparison(
                f"batch norm layer {j + 1}, {when}: length after / before",
                float(math.exp(logs[:, j].mean())), None,
                f"geometric mean over the networks, range {math.exp(logs[:, j].min()):.3g}-"
                f"{math.exp(logs[:, j].max()):.3g}", key=f"batchnorm{j + 1}_ratio_{step}"))
    for step in ("trained", "init"):
        for variant in VARIANTS:
            comparison.append(Comparison(
                f"{variant}, {'after training' if step == 'trained' else 'step 0'}: length "
                "after the last hidden layer / input length", depth_ratio(rows, variant, step),
                None, "geometric mean over the networks; with and without batch norm, printed "
                "(not judged)", key=f"{variant}_depth_ratio_{step}"))
    accuracy = {v: float(np.mean([r[8] for r in rows if r[1] == v and r[2] > 0]))
                for v in VARIANTS}
    comparison.append(Comparison(
        "test accuracy after training, batchnorm", accuracy["batchnorm"], None,
        f"without batch norm {accuracy['none']:.3f}; the paper's net is trained on CIFAR10",
        key="test_accuracy"))
    comparison[0] = replace(comparison[0], note=comparison[0].note + "; batch norm divides by "
                            "the training set's statistics (norm_mode='frozen')")
    return comparison


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    axes = figure.subplots(1, 2)
    for ax, variant in zip(axes, VARIANTS):
        chosen = [r for r in records if r["variant"] == variant]
        steps = sorted({r["step"] for r in chosen})
        positions = sorted({r["position"] for r in chosen})
        kinds = {r["position"]: r["kind"] for r in chosen}
        for step, style in zip(steps, ("--", "-")):
            mean = [math.exp(np.mean([math.log(r["length"]) for r in chosen
                                      if r["step"] == step and r["position"] == p]))
                    for p in positions]
            ax.plot(positions, mean, "o" + style, markersize=3,
                    label="step 0" if step == 0 else f"step {step}")
        for p in positions:
            if kinds[p] == "batchnorm":
                ax.axvline(p, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xticks(positions)
        ax.set_xticklabels([kinds[p] for p in positions], rotation=60, fontsize=6)
        ax.set_yscale("log")
        ax.set_title(f"{variant}: arc length per module (geometric mean of "
                     f"{computed.extra['nets']} nets" + ("; dotted: batch norm)"
                                                        if variant == "batchnorm" else ")"),
                     fontsize=8)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("trajectory length")


def judge(computed: Computed) -> Verdict:
    """Figure 10: after training, the batch norm layers shorten the trajectory: the networks'
    mean log ratios (after / before a batch norm layer) are significantly below 0 (two-sided
    Wilcoxon, p < 0.05, geometric mean below 1), and every batch norm layer shortens it on
    (geometric) average. All: reproduced; significant overall but some layer lengthening on
    average: qualitatively; otherwise differs."""
    overall = computed.compared("batchnorm_ratio_trained")
    layers = batchnorm_log_ratios(computed.rows, "trained").mean(0)
    text = (f"after training, length after / before a batch norm layer {overall.ours:.3g} "
            f"(geometric mean, Wilcoxon p = {overall.p_value:.3g} over {overall.n} networks); "
            "per layer " + ", ".join(f"{math.exp(v):.3g}" for v in layers) + "; at step 0 "
            f"{computed.compared('batchnorm_ratio_init').ours:.3g}")
    shorter = overall.ours < 1 and overall.significant()
    if shorter and bool(np.all(layers < 0)):
        return Verdict("reproduced", f"Every batch norm layer shortens the trajectory after "
                       f"training: {text}.")
    if shorter:
        return Verdict("qualitatively", "The batch norm layers shorten the trajectory overall "
                       f"after training, but not every one of them: {text}.")
    return Verdict("differs", f"The batch norm layers do not shorten the trajectory after "
                   f"training: {text}.")


REPRODUCTION = Reproduction(
    name="raghu-figure10",
    paper=cite("expressivity"),
    target="Figure 10, section 3.2",
    description="length of an arc between two digits after every module of a conv net with "
                "and without batch norm, at initialization and after a few hundred Adam steps",
    differences={
        "small": (
            "scikit-learn digits (8 x 8, standardized) instead of CIFAR10; raghu-figure11's conv "
            "net (conv 8, 8, 16 channels, fully connected 64, sigma_w^2 = 2 as the paper) with "
            "a batch norm after each of its 4 hidden weight layers; the paper's conv net is not "
            "specified",
            "Adam (lr 3e-3, minibatch 50) for 10 epochs (220 steps: 'a few hundred gradient "
            "steps'), as raghu-figure11; the paper's optimizer is not stated; measured at step "
            "0 and at the end only",
            "batch norm normalizes by the training set's statistics (norm_mode='frozen'): the "
            "paper does not say which statistics its figure uses; 6 networks, each with its own "
            "arc, lengths refined to 1%; the paper prints no numbers",
        ),
        "paper": (
            "digits instead of CIFAR10 (not bundled); raghu-figure11's paper-scale conv net (32, "
            "32, 64 channels, fully connected 256) trained with Adam (lr 1e-3) for 60 epochs; "
            "10 networks, lengths refined to 0.1%",
        ),
    },
    small_runtime="~20 s",
    compute=compute,
    plot=plot,
    claim=("After a few hundred gradient steps the batch norm layers of a conv net reduce the "
           "length of a trajectory between two data points (figure 10, section 3.2)."),
    judge=judge,
    n_seeds=3,
)
