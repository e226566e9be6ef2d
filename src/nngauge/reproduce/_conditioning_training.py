"""Shared by ``conditioning-figures3-5`` and ``conditioning-figures7-8``: training the
conditioning paper's networks on a digits proxy, choosing the learning rate on validation
digits, and the statistics their claims are judged by.

Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural Networks" (ALT 2021), section
7 and appendix I.2-I.3: fully connected and residual networks with batch normalization, layer
normalization, NormReLU, SELU or Fixup, each at a cross-validated learning rate, trained on
CIFAR-10. Here: scikit-learn's digits (60/20/20 split, standardized pixels,
:func:`nngauge.reproduce._base.digit_splits`), fully connected :func:`nngauge.nn.mlp` networks
without skips (the paper's "fully connected feedforward networks") and with skips of strength 1
around pairs of layers (its ResNets, ``skip=1.0``), SGD with momentum 0.9 and batches of 64 for a
few epochs (:func:`nngauge.fit`), the rate of each network chosen from :data:`LR_GRID` by the
lowest validation error.

Fixup (Zhang, Dauphin & Ma, ICLR 2019) on a residual MLP of L branches of m = 2 layers: the last
layer of every branch (and the output layer) starts at zero, the first layer of every branch is
scaled by L^(-1 / (2m - 2)) = L^(-1/2); ReLU, no normalization (its scalar multipliers and
biases are not added).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._internal.threads import one_thread
from nngauge._random import seed_of

LR_GRID = (0.003, 0.01, 0.03)
"""The learning rates tried for every network (the paper cross-validated each)."""
CHANCE = 0.9
"""The error counted for the epochs a diverged run did not reach (10 classes)."""

NETWORKS = {  # name -> (activation, norm, fixup)
    "batchnorm": ("relu", "batch", False),
    "layernorm": ("relu", "layer", False),
    "normrelu": ("norm_relu", None, False),
    "selu": ("selu", None, False),
    "fixup": ("relu", None, True),
}
RUN_COLUMNS = ("figure", "network", "depth", "lr", "epoch", "train_error", "val_error",
               "test_error", "selected")


@dataclass(frozen=True)
class TrainSettings:
    width: int
    epochs: int
    plain_depths: tuple[int, ...]  # weight layers of the fully connected networks
    residual_depths: tuple[int, ...]  # weight layers of the residual ones (odd)


SMALL = TrainSettings(width=128, epochs=8, plain_depths=(10, 20), residual_depths=(11, 21))
"""Both commands' small scale: fully connected depths 10 and 20, residual 11 and 21, width 128,
8 epochs."""


def _fixup(net) -> None:
    """Zero the last layer of each branch and the output layer; scale each branch's first layer
    by L^(-1/2) (the module docstring)."""
    depth = net.config.depth
    branches = (depth - 1) // 2
    with torch.no_grad():
        for i, block in enumerate(net.layers):
            if i >= 2 and i % 2 == 0:  # a branch's last layer (i = depth - 1: the output)
                block.linear.weight.zero_()
                block.linear.bias.zero_()
            elif i % 2 == 1:  # a branch's first layer
                block.linear.weight.mul_(branches ** -0.5)


def build(name: str, depth: int, residual: bool, width: int, generator: torch.Generator):
    from nngauge.nn import mlp

    activation, norm, fixup = NETWORKS[name]
    net = mlp(64, width, depth, 10, activation=activation, norm=norm,
              skip=1.0 if residual else None, init="gaussian", generator=generator)
    if fixup:
        _fixup(net)
    return net


def train_grid(figure: str, name: str, depth: int, residual: bool, settings: TrainSettings,
               splits, generator: torch.Generator, lrs=LR_GRID) -> list[tuple]:
    """One run per rate in ``lrs`` (the same initialization for each): per epoch the training
    error (mean over the epoch's minibatches) and the validation error, the test error at the
    end (of the best-validation weights), and whether the run has the lowest validation error
    of the grid (ties: the smaller rate)."""
    seed = seed_of(generator)
    with one_thread():
        runs = [_one_run(name, depth, residual, settings, splits, seed, lr) for lr in lrs]
    best = min(range(len(runs)), key=lambda i: (runs[i][1], runs[i][0]))
    rows = []
    for i, (lr, _, test_error, history) in enumerate(runs):
        rows += [(figure, name, depth, lr, epoch, train_error, val_error, None, i == best)
                 for epoch, train_error, val_error in history]
        rows.append((figure, name, depth, lr, -1, None, None, test_error, i == best))
    return rows


def _one_run(name, depth, residual, settings, splits, seed, lr):
    """(lr, best validation error, test error, [(epoch, training error, validation error)])."""
    from nngauge import fit

    train, val, test = splits
    net = build(name, depth, residual, settings.width, torch.Generator().manual_seed(seed))
    result = fit(net, train, val, test=test, lr=lr, momentum=0.9, batch_size=64,
                 max_epochs=settings.epochs, generator=seed, loss_scaling=not NETWORKS[name][2])
    history = [(h.epoch, h.train_error, h.val_error) for h in result.history]
    return lr, result.best_val_error, result.test_error, history


@dataclass(frozen=True)
class Run:
    """A selected (or any) run read back from the rows."""

    lr: float
    train_curve: tuple[float, ...]  # epochs 1..E, CHANCE where a diverged run stopped
    test_error: float

    @property
    def mean_train_error(self) -> float:
        """The mean training error over the epochs: the area under the training curve."""
        return float(np.mean(self.train_curve))


def runs(records, figure: str, epochs: int) -> dict[tuple[str, int, float], Run]:
    """(network, depth, lr) -> :class:`Run` of one figure, from the rows' records."""
    out = {}
    keys = {(r["network"], r["depth"], r["lr"]) for r in records if r["figure"] == figure}
    for name, depth, lr in keys:
        sel = [r for r in records if r["figure"] == figure and r["network"] == name
               and r["depth"] == depth and r["lr"] == lr]
        curve = {r["epoch"]: r["train_error"] for r in sel if r["epoch"] >= 1}
        train = tuple(CHANCE if not math.isfinite(curve.get(e, math.nan)) else curve[e]
                      for e in range(1, epochs + 1))
        test = next(r["test_error"] for r in sel if r["epoch"] == -1)
        out[name, depth, lr] = Run(lr, train, test)
    return out


def selected(records, figure: str, epochs: int) -> dict[tuple[str, int], Run]:
    """(network, depth) -> the run at its selected rate."""
    chosen = {(r["network"], r["depth"]): r["lr"] for r in records
              if r["figure"] == figure and r["selected"] and r["epoch"] == -1}
    every = runs(records, figure, epochs)
    return {key: every[(*key, lr)] for key, lr in chosen.items()}


def similar_margin(error_a: float, error_b: float, n_test: int) -> float:
    """Two standard errors of the difference of two test errors measured on ``n_test`` digits
    (binomial): the difference a single run per network can resolve."""
    se = math.sqrt(error_a * (1 - error_a) / n_test + error_b * (1 - error_b) / n_test)
    return 2.0 * max(se, 1.0 / n_test)


def epochs_of(records) -> int:
    return max(r["epoch"] for r in records)


def plot_curves(computed, figure, panels) -> None:
    """One axis per (figure, depth): the selected runs' training error per epoch."""
    records = computed.records()
    epochs = epochs_of(records)
    axes = np.atleast_1d(figure.subplots(1, len(panels)))
    for ax, (fig, depth, title) in zip(axes, panels):
        for (name, d), run in sorted(selected(records, fig, epochs).items()):
            if d != depth:
                continue
            ax.plot(range(1, epochs + 1), run.train_curve, "-o", ms=2,
                    label=f"{name} (lr {run.lr:g}, test err {run.test_error:.3f})")
        ax.set_title(title, fontsize=7)
        ax.set_xlabel("epoch")
        ax.set_ylabel("training error")
        ax.set_yscale("log")
        ax.legend(fontsize=5)


def claim_comparisons(found: dict[str, dict], labels: dict[str, tuple[str, str]]):
    """One :class:`Comparison` per claim (key: the claim's name with underscores): its value,
    whether it holds under its rule, and the numbers behind it."""
    from nngauge.reproduce._base import Comparison

    return tuple(Comparison(label, found[key]["value"], None,
                            f"claim {'holds' if found[key]['holds'] else 'fails'} ({rule}): "
                            + found[key]["text"], key=key.replace(" ", "_"))
                 for key, (label, rule) in labels.items())


def claim_verdict(found: dict[str, dict], figures: str, passing: str):
    """"reproduced" when every claim holds (``passing`` opens the reason), else "differs"
    naming the failing claims; every claim's numbers follow."""
    from nngauge.reproduce._base import Verdict

    text = "; ".join(f"{key}: {'holds' if c['holds'] else 'fails'} ({c['text']})"
                     for key, c in found.items())
    failing = [key for key, c in found.items() if not c["holds"]]
    if not failing:
        return Verdict("reproduced", f"{passing}: {text}.")
    return Verdict("differs", f"Not as figures {figures} for: {', '.join(failing)}. {text}.")

