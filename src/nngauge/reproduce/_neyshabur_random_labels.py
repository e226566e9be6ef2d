"""``neyshabur-random-labels``: capacity over margin vs training-set size, true vs random
labels (Neyshabur et al., "Exploring Generalization in Deep Learning", NIPS 2017, figure 1).

For each training-set size m and each labelling (the true labels, or labels all drawn
uniformly at random, :func:`nngauge.data.random_labels`), a ReLU MLP is trained to zero
training error as in the paper's appendix A (SGD, minibatch 64, learning rate 0.01, momentum
0.9, no weight decay, until the training cross-entropy is below a target: 1e-4 in the paper),
and the four capacities of section 2.2 are measured with :func:`nngauge.capacity` at the 5th
percentile margin, without the constants and width factors (``plain``, what figure 1 plots):

    l2:       prod_i ||W_i||_F^2 / gamma^2            l1-path: (sum_paths |prod_i W_i|)^2 / gamma^2
    l2-path:  sum_paths prod_i W_i^2 / gamma^2        spectral: prod_i ||W_i||_2^2 / gamma^2

The paper's claims (figure 1's caption): in all experiments the training error is zero;
capacity with random labels is higher than with true labels for every measure at every m; the
gap grows with m. The judge holds each: a network that does not fit its labels, a size where a
measure is not higher for random labels, or a gap that does not grow from each size to the
next, for any measure, gives "differs".

Training: :func:`nngauge.training.fit` stops on a stalled *validation* error and rewinds to the
best weights; the paper instead trains until the training loss is below 1e-4, so the plain
loop :func:`train_to_fit` below follows the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

MEASURES = ("l2", "l1_path", "l2_path", "spectral")
COLUMNS = ("labels", "n_train", "measure", "log10_capacity_plain", "log10_capacity", "margin",
           "train_error", "train_loss", "epochs", "test_error")


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    width: int
    depth: int
    loss_target: float
    max_epochs: int
    lr: float = 0.01  # appendix A


SETTINGS = {
    "small": Settings(sizes=(50, 100, 200), width=64, depth=2, loss_target=1e-2,
                      max_epochs=1500, lr=0.05),
    "paper": Settings(sizes=(200, 400, 800, 1600), width=512, depth=3, loss_target=1e-4,
                      max_epochs=20_000),
}
BATCH_SIZE, MOMENTUM = 64, 0.9  # appendix A


@dataclass(frozen=True)
class FittedNetwork:
    """One network of :func:`fitted_networks`: trained on ``m`` digits with ``labelling``
    ("true" or "random") labels ``labels``, how training ended, and its test error."""

    m: int
    labelling: str
    net: torch.nn.Module
    inputs: torch.Tensor
    labels: torch.Tensor
    fitted: "Fitted"
    test_error: float


def digit_pool(generator: torch.Generator):
    """scikit-learn's digits split at random (seeded by one draw from ``generator``) into a
    pool of 1600 training candidates and 197 test digits: (pool, test), unstandardized."""
    from nngauge.data import digits, split

    return split(digits(), (1 - 197 / 1797, 197 / 1797), generator=seed_of(generator))


def first_digits(pool, test, m: int):
    """The first ``m`` digits of the pool and the test digits, standardized per pixel on those
    m: (train, test)."""
    from nngauge.data import standardize

    return standardize((pool.inputs[:m], pool.labels[:m]), test)[0]


def fit_mlp(inputs: torch.Tensor, labels: torch.Tensor, *, width: int, depth: int, lr: float,
            loss_target: float, max_epochs: int, generator: torch.Generator,
            n_classes: int = 10) -> tuple[torch.nn.Module, "Fitted"]:
    """Appendix A's network and training: a ReLU MLP (``inputs``' features in, ``depth``
    weight layers of ``width`` units, ``n_classes`` outputs, Gaussian weights of variance
    2 / fan-in, zero biases) fitted to (inputs, labels) by :func:`train_to_fit`:
    (the network, how training ended)."""
    from nngauge.nn import mlp

    net = mlp(inputs.shape[1], width, depth, n_classes, activation="relu", init="gaussian",
              sigma_w=math.sqrt(2.0), generator=generator)
    return net, train_to_fit(net, inputs, labels, lr=lr, loss_target=loss_target,
                             max_epochs=max_epochs, generator=generator)


@torch.no_grad()
def error_rate(net: torch.nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    """The fraction of ``inputs`` whose highest score is not their label."""
    return float((net(inputs).argmax(1) != labels).double().mean())


def fitted_networks(settings, generator: torch.Generator) -> Iterator[FittedNetwork]:
    """Appendix A's experiment: for each training-set size m of ``settings.sizes``, a ReLU MLP
    (64 inputs, ``settings.width`` x ``settings.depth``, He-scaled Gaussian weights) fitted to
    m standardized digits with true labels, then one with random labels, by :func:`fit_mlp`;
    the test error on 197 held-out digits."""
    from nngauge.data import random_labels

    pool, test = digit_pool(generator)
    for m in settings.sizes:
        train, test_m = first_digits(pool, test, m)
        for labelling in ("true", "random"):
            labels = train.labels if labelling == "true" else random_labels(
                train.labels, 1.0, n_classes=10, generator=generator)
            net, fitted = fit_mlp(train.inputs, labels, width=settings.width,
                                  depth=settings.depth, lr=settings.lr,
                                  loss_target=settings.loss_target,
                                  max_epochs=settings.max_epochs, generator=generator)
            yield FittedNetwork(m, labelling, net, train.inputs, labels, fitted,
                                error_rate(net, test_m.inputs, test_m.labels))


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge import capacity

    settings = SETTINGS[scale]
    rows, comparison = [], []
    for f in fitted_networks(settings, generator):
        result = capacity(f.net, f.inputs, f.labels, percentile=5)
        for name in MEASURES:
            measure = result[name]
            rows.append((f.labelling, f.m, name, measure.log10_plain, measure.log10_capacity,
                         result.margin, f.fitted.train_error, f.fitted.loss, f.fitted.epochs,
                         f.test_error))
    largest = settings.sizes[-1]
    value = {(r[0], r[1], r[2]): r[3] for r in rows}
    for name in MEASURES:
        gap = value["random", largest, name] - value["true", largest, name]
        comparison.append(Comparison(f"log10 {name} / margin^2, random - true labels, "
                                     f"m={largest}", gap, None, "paper: > 0 (random higher)",
                                     key=f"log10_{name}_gap"))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison))


@dataclass(frozen=True)
class Fitted:
    """How training ended: training error and mean cross-entropy on the training set."""

    train_error: float
    loss: float
    epochs: int


def train_to_fit(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float,
                 loss_target: float, max_epochs: int, generator: torch.Generator) -> Fitted:
    """SGD (minibatch 64, momentum 0.9; the paper: lr 0.01) until the training cross-entropy
    is below ``loss_target`` or ``max_epochs`` pass (Neyshabur et al., "Exploring
    Generalization in Deep Learning", NIPS 2017, appendix A)."""
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=MOMENTUM)
    net.train()
    epoch = 0
    loss, error = _evaluate(net, x, y)
    while loss >= loss_target and epoch < max_epochs:
        for batch in torch.randperm(len(x), generator=generator).split(BATCH_SIZE):
            optimizer.zero_grad()
            F.cross_entropy(net(x[batch]), y[batch]).backward()
            optimizer.step()
        epoch += 1
        loss, error = _evaluate(net, x, y)
    net.eval()
    return Fitted(error, loss, epoch)


@torch.no_grad()
def _evaluate(net, x, y) -> tuple[float, float]:
    logits = net(x)
    return (float(F.cross_entropy(logits, y)),
            float((logits.argmax(1) != y).double().mean()))


def plot(computed: Computed, figure) -> None:
    axes = figure.subplots(1, len(MEASURES))
    rows = computed.records()
    for ax, name in zip(axes, MEASURES):
        for labelling, color in (("true", "tab:blue"), ("random", "tab:red")):
            points = [r for r in rows if r["measure"] == name and r["labels"] == labelling]
            ax.plot([r["n_train"] for r in points], [r["log10_capacity_plain"] for r in points],
                    "o-", color=color, label=f"{labelling} labels")
        ax.set_title(name.replace("_", "-"), fontsize=9)
        ax.set_xlabel("training-set size")
    axes[0].set_ylabel("log10 (norm / margin^2)")
    axes[0].legend(fontsize=8)


def judge(computed: Computed) -> Verdict:
    """Figure 1, each part of the claim over every size and measure: every network fits its
    labels (zero training error); every capacity is higher for random labels at every size;
    the gap (random minus true, log10) grows from each size to the next. Any part failing
    gives "differs"; a missing or NaN value fails the part it belongs to."""
    rows = computed.records()
    value = {(r["labels"], r["n_train"], r["measure"]): r["log10_capacity_plain"] for r in rows}
    sizes = sorted({r["n_train"] for r in rows})
    measures = sorted({r["measure"] for r in rows})
    unfitted = sorted({(r["labels"], r["n_train"]) for r in rows if not r["train_error"] == 0},
                      key=str)

    def gap(m, k):
        return value.get(("random", m, k), math.nan) - value.get(("true", m, k), math.nan)

    lower = [(m, k) for m in sizes for k in measures if not gap(m, k) > 0]
    flat = [k for k in measures if len(sizes) < 2
            or not all(gap(b, k) > gap(a, k) for a, b in zip(sizes, sizes[1:]))]
    parts = [
        ("every network fits its labels", ", ".join(
            f"training error above 0 for {labelling} labels, m={m}" for labelling, m in unfitted)),
        ("random labels need more capacity at every size and measure",
         ", ".join(f"not at m={m} for {k}" for m, k in lower)),
        (f"the gap grows with the training set for {len(measures) - len(flat)} of "
         f"{len(measures)} measures", ", ".join(f"not for {k}" for k in flat)),
    ]
    gaps = "; ".join(f"{k}: " + ", ".join(f"{gap(m, k):.2f}" for m in sizes) for k in measures)
    text = "; ".join(f"{part} {'fails: ' + why if why else 'holds'}" for part, why in parts)
    reason = (text[0].upper() + text[1:] + " (log10 capacity gap, random minus true labels, at m = "
              f"{', '.join(str(m) for m in sizes)}: {gaps}).")
    if unfitted or lower or flat or not rows:
        return Verdict("differs", reason)
    return Verdict("reproduced", reason)


REPRODUCTION = Reproduction(
    name="neyshabur-random-labels",
    paper=cite("generalization"),
    target="Figure 1",
    description="l2, l1-path, l2-path and spectral capacity over margin vs training-set size "
                "for networks trained to zero error on true vs random labels (digits)",
    differences={
        "small": (
            "scikit-learn digits (64 features, 10 classes) instead of CIFAR10, and a ReLU MLP "
            "(width 64, 2 layers) instead of VGG",
            "training-set sizes 50, 100, 200 instead of CIFAR10 subsets up to 50000",
            "SGD learning rate 0.05 instead of 0.01, trained until the training cross-entropy "
            "is below 1e-2 (at most 1500 epochs) instead of 1e-4",
            "the paper prints no numbers for figure 1: only the direction is compared",
        ),
        "paper": (
            "scikit-learn digits instead of CIFAR10, and a ReLU MLP (width 512, 3 layers) "
            "instead of VGG: CIFAR10 is not bundled",
            "training-set sizes 200-1600 (digits has 1797 samples, 197 kept for test)",
            "the paper prints no numbers for figure 1: only the direction is compared",
        ),
    },
    small_runtime="~8 s",
    compute=compute,
    plot=plot,
    claim=("Norm-based capacities (l2, l1-path, l2-path, spectral over margin) are higher for "
           "networks fitted to random labels than to true labels, with a gap that grows with the "
           "training set (figure 1)."),
    judge=judge,
    n_seeds=3,
)
