"""``raghu-figure11``: a conv net trained without normalization, with batchnorm, and with
trajectory regularization layers in place of the batchnorm layers (Raghu et al., "On the
Expressive Power of Deep Neural Networks", ICML 2017, section 3.3, figure 11).

Data: scikit-learn's digits, split at random 60/20/20 into train, validation (unused) and
test and standardized per pixel on the training part
(:func:`~nngauge.reproduce._base.digit_splits`). The network is a
small conv net (:func:`conv_net`): conv 3x3 (1 -> c) - ReLU - conv 3x3 (c -> c) - ReLU -
max-pool 2 - conv 3x3 (c -> 2c) - ReLU - max-pool 2 - linear (8c -> h) - ReLU - linear
(h -> 10), five weight layers, weights N(0, 2 / fan_in) (sigma_w^2 = 2, figure 10's "typical"
initialization), biases 0, with a normalization slot after each of its four hidden weight
layers (before the ReLU), filled three ways from one initialization:

- ``none``: nothing (identity);
- ``batchnorm``: ``BatchNorm2d`` / ``BatchNorm1d`` (learnt gain and shift; batch statistics
  in training, running statistics at test time), figure 10's network;
- ``trajectory``: :class:`nngauge.nn.TrajectoryRegularization` (section 3.3: scales the
  activations by a learnt lambda and adds 0.01 |lambda| (current length / input length) to the
  loss, the length being that of the piecewise-linear trajectory through the minibatch's
  samples in order; :func:`nngauge.nn.trajectory_penalty` sums the layers' terms). It behaves
  the same in training and at test time.

The three copies are trained by the same plain loop (softmax cross-entropy plus the penalty,
Adam, the same minibatch order) and evaluated on the full train and test sets after every
epoch. The paper's claim (figure 11): "both trajectory regularization and batch norm perform
comparably, and considerably better than not using batch norm". Printed: the final test
accuracy of each variant (mean over initializations; the paper's figure prints no numbers),
the differences between them, and the test accuracy after the first epoch (the early part of
figure 11's curves).

On digits the claim holds only in part: the three variants end within about 2 points of each
other (about 0.95-0.97 test accuracy at seeds 0-2), batchnorm ahead of none by 0.3-1.7 points
and trajectory regularization level with none (-0.7 to 0 points), so neither is
"considerably better"; batchnorm learns much faster (after one epoch 0.67-0.75 test accuracy
against 0.51-0.55 for none), trajectory regularization does not (0.49-0.54). Nor does the
penalty at weight 0.01 shorten the trajectory: its epoch mean
rises over training (0.084 to 0.13 at seed 0). With SGD
(lr 0.02, momentum 0.9) instead of Adam the penalty drove the first layer's lambda to about
0.001 within a few dozen steps and the trajectory-regularized network did not train (0.52
test accuracy): the penalty is linear in every lambda upstream of a layer, so a plain
gradient step on the penalty alone collapses the scales; Adam's normalized steps do not.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, digit_splits

COLUMNS = ("network", "variant", "epoch", "step", "train_loss", "penalty", "train_accuracy",
           "test_accuracy")
"""One row per initialization, variant and epoch end (epoch 0: the initialization): the
epoch's running mean of the cross-entropy and of the trajectory penalty (0 without
trajectory-regularization layers; empty at epoch 0), accuracy on the full train and test
sets (eval mode)."""
VARIANTS = ("none", "batchnorm", "trajectory")
SIGMA_W2 = 2.0
"""Figure 10's "typical" initialization of the conv net whose batchnorm layers figure 11
replaces."""


@dataclass(frozen=True)
class Settings:
    channels: int
    hidden: int
    nets: int
    epochs: int
    lr: float  # Adam
    batch_size: int


SETTINGS = {
    "small": Settings(channels=8, hidden=64, nets=2, epochs=10, lr=3e-3, batch_size=50),
    "paper": Settings(channels=32, hidden=256, nets=5, epochs=60, lr=1e-3, batch_size=50),
}


def conv_net(channels: int, hidden: int, sigma_w2: float, generator: torch.Generator
             ) -> nn.Sequential:
    """The five-weight-layer conv net of the module docstring, on flattened 8 x 8 inputs
    (b, 64); weights N(0, sigma_w2 / fan_in), biases 0, drawn from ``generator``."""
    c = channels
    net = nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, c, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * c, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    with torch.no_grad():
        for module in net:
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.normal_(0.0, math.sqrt(sigma_w2 / fan_in), generator=generator)
                module.bias.zero_()
    return net


def networks(settings: Settings, generator: torch.Generator,
             chosen: Sequence[str] = VARIANTS) -> dict[str, nn.Sequential]:
    """The ``chosen`` variants (default all three) of one initialization: the conv net with a
    normalization slot after each hidden weight layer (before its ReLU), filled with nothing,
    batchnorm or trajectory regularization (the latter attached: its input-length hook is on
    the whole network)."""
    from nngauge.nn import TrajectoryRegularization

    base = conv_net(settings.channels, settings.hidden, SIGMA_W2, generator)
    weights = [i for i, m in enumerate(base) if isinstance(m, (nn.Conv2d, nn.Linear))]
    variants = {}
    for variant in chosen:
        modules = []
        for i, module in enumerate(copy.deepcopy(base)):
            modules.append(module)
            if i in weights[:-1]:
                modules.append(_slot(module, variant))
        net = nn.Sequential(*modules)
        if variant == "trajectory":
            TrajectoryRegularization.attach(net)
        variants[variant] = net
    return variants


def _slot(module: nn.Module, variant: str) -> nn.Module:
    from nngauge.nn import TrajectoryRegularization

    if variant == "none":
        return nn.Identity()
    if variant == "trajectory":
        return TrajectoryRegularization()
    if isinstance(module, nn.Conv2d):
        return nn.BatchNorm2d(module.out_channels)
    return nn.BatchNorm1d(module.out_features)


def accuracy(net: nn.Module, data) -> float:
    net.eval()
    with torch.no_grad():
        accuracy = float((net(data.inputs).argmax(1) == data.labels).double().mean())
    net.train()
    return accuracy


def train(net: nn.Module, train_data, test_data, settings: Settings, shuffle_seed: int,
          key: tuple) -> list[tuple]:
    """Adam on cross-entropy + :func:`nngauge.nn.trajectory_penalty`; one row per
    epoch end (and the initialization) in :data:`COLUMNS` order."""
    from nngauge.nn import trajectory_penalty

    shuffle = torch.Generator().manual_seed(shuffle_seed)
    opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
    n = len(train_data.labels)
    steps_per_epoch = math.ceil(n / settings.batch_size)
    rows = [(*key, 0, 0, None, None, accuracy(net, train_data), accuracy(net, test_data))]
    net.train()
    for epoch in range(1, settings.epochs + 1):
        losses, penalties = [], []
        for idx in torch.randperm(n, generator=shuffle).split(settings.batch_size):
            if len(idx) < 2:  # batchnorm and the trajectory need two samples
                continue
            loss = nn.functional.cross_entropy(net(train_data.inputs[idx]),
                                               train_data.labels[idx])
            penalty = trajectory_penalty(net)
            opt.zero_grad(set_to_none=True)
            (loss + penalty).backward()
            opt.step()
            losses.append(float(loss.detach()))
            penalties.append(float(penalty.detach()))
        rows.append((*key, epoch, epoch * steps_per_epoch, float(np.mean(losses)),
                     float(np.mean(penalties)), accuracy(net, train_data),
                     accuracy(net, test_data)))
    return rows


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    train_data, _, test_data = digit_splits(generator)
    rows = []
    for i in range(settings.nets):
        variants = networks(settings, generator)
        shuffle_seed = seed_of(generator)  # the same minibatch order for every variant
        for variant, net in variants.items():
            rows += train(net, train_data, test_data, settings, shuffle_seed, (i, variant))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(_comparison(rows)),
                    extra={"nets": settings.nets})


def mean_curve(rows, variant: str, quantity: str) -> dict[int, float]:
    """step -> ``quantity`` of ``variant`` averaged over the initializations."""
    groups: dict = {}
    for row in rows:
        record = dict(zip(COLUMNS, row))
        if record["variant"] == variant and record[quantity] is not None:
            groups.setdefault(record["step"], []).append(record[quantity])
    return {step: float(np.mean(values)) for step, values in sorted(groups.items())}


def final(rows, variant: str, quantity: str = "test_accuracy") -> float:
    """``quantity`` of ``variant`` at the last epoch, averaged over the initializations."""
    curve = mean_curve(rows, variant, quantity)
    return curve[max(curve)]


def _comparison(rows) -> list[Comparison]:
    test = {v: final(rows, v) for v in VARIANTS}
    train_acc = {v: final(rows, v, "train_accuracy") for v in VARIANTS}
    first = {v: mean_curve(rows, v, "test_accuracy") for v in VARIANTS}
    first_step = sorted(first["none"])[1]
    comparison = [
        Comparison(f"final test accuracy, {v}", test[v], None,
                   f"train {train_acc[v]:.3f}; mean over initializations; figure 11 prints "
                   "no numbers (curves of test accuracy over training)",
                   key=f"final_test_accuracy_{v}")
        for v in VARIANTS]
    comparison += [
        Comparison("final test accuracy, trajectory - batchnorm",
                   test["trajectory"] - test["batchnorm"], None,
                   "figure 11: trajectory regularization performs comparably to batchnorm (~0)",
                   key="final_trajectory_minus_batchnorm"),
        Comparison("final test accuracy, batchnorm - none", test["batchnorm"] - test["none"],
                   None, "figure 11: batchnorm considerably better than none (> 0)",
                   key="final_batchnorm_minus_none"),
        Comparison("final test accuracy, trajectory - none", test["trajectory"] - test["none"],
                   None, "figure 11: trajectory regularization considerably better than none "
                   "(> 0)", key="final_trajectory_minus_none"),
    ]
    comparison += [
        Comparison("test accuracy after one epoch, batchnorm - none",
                   first["batchnorm"][first_step] - first["none"][first_step], None,
                   "figure 11's curves: batchnorm ahead early", key="epoch1_batchnorm_minus_none"),
        Comparison("test accuracy after one epoch, trajectory - none",
                   first["trajectory"][first_step] - first["none"][first_step], None,
                   "figure 11's curves: trajectory regularization ahead early, as batchnorm",
                   key="epoch1_trajectory_minus_none"),
    ]
    comparison += [
        Comparison(f"test accuracy after one epoch (step {first_step}), {v}",
                   first[v][first_step], None, "the early part of figure 11's curves",
                   key=f"epoch1_test_accuracy_{v}")
        for v in VARIANTS]
    return comparison


def plot(computed: Computed, figure) -> None:
    rows = computed.rows
    test_axes, train_axes, penalty_axes = figure.subplots(1, 3)
    for variant, color in zip(VARIANTS, ("tab:gray", "tab:blue", "tab:red")):
        for axes, quantity in ((test_axes, "test_accuracy"), (train_axes, "train_loss")):
            curve = mean_curve(rows, variant, quantity)
            axes.plot(list(curve), list(curve.values()), "o-", markersize=3, color=color,
                      label=variant)
    curve = mean_curve(rows, "trajectory", "penalty")
    penalty_axes.plot(list(curve), list(curve.values()), "o-", markersize=3, color="tab:red")
    test_axes.set_ylabel("test accuracy")
    test_axes.set_title(f"test accuracy (fig. 11), mean of {computed.extra['nets']} "
                        "initializations", fontsize=8)
    train_axes.set_yscale("log")
    train_axes.set_ylabel("training cross-entropy (epoch mean)")
    train_axes.set_title("training loss", fontsize=8)
    penalty_axes.set_ylabel("sum of 0.01 |lambda| length ratios")
    penalty_axes.set_title("trajectory penalty (trajectory variant)", fontsize=8)
    for axes in (test_axes, train_axes, penalty_axes):
        axes.set_xlabel("Adam step")
    test_axes.legend(fontsize=7)
    train_axes.legend(fontsize=7)


COMPARABLE = 0.03
"""'Perform comparably': final test accuracies within 3 points."""
CONSIDERABLY = 0.03
"""'Considerably better': more than 3 points of final test accuracy above no normalization."""


def judge(computed: Computed) -> Verdict:
    """Figure 11: trajectory regularization performs like batchnorm (final test accuracies
    within 3 points) and both considerably better than no normalization (each more than 3
    points above it). Both: reproduced; otherwise differs."""
    test = {v: final(computed.rows, v) for v in VARIANTS}
    comparable = abs(test["trajectory"] - test["batchnorm"]) < COMPARABLE
    better = min(test["batchnorm"], test["trajectory"]) > test["none"] + CONSIDERABLY
    summary = (f"final test accuracy: none {test['none']:.3f}, batchnorm "
               f"{test['batchnorm']:.3f}, trajectory regularization {test['trajectory']:.3f}")
    if comparable and better:
        return Verdict("reproduced", summary + ".")
    if comparable:
        return Verdict("differs", summary + ": trajectory regularization matches batchnorm, but "
                       "neither is considerably better than no normalization on digits (only "
                       "batchnorm learns faster in the first epoch).")
    return Verdict("differs", summary + ".")


REPRODUCTION = Reproduction(
    name="raghu-figure11",
    paper=cite("expressivity"),
    target="Figure 11, section 3.3",
    description="test accuracy over training of a conv net (digits) without normalization, "
                "with batchnorm, and with trajectory regularization layers instead",
    differences={
        "small": (
            "scikit-learn digits (8 x 8, standardized) instead of CIFAR10; a conv net of three "
            "conv layers (8, 8, 16 channels) and a fully connected layer of 64, with a "
            "normalization slot after each of its 4 hidden weight layers; the paper's conv "
            "net is not specified",
            "Adam (lr 3e-3, minibatch 50) for 10 epochs (220 steps), 2 initializations "
            "averaged, the last epoch's weights evaluated; the paper's optimizer is not "
            "stated; with SGD (lr 0.02, momentum 0.9) the trajectory penalty collapsed the "
            "lambdas and the trajectory-regularized net did not train (0.52 test accuracy)",
            "trajectory regularization as nngauge.nn.TrajectoryRegularization defines it "
            "(weight 0.01, the paper's; 'orig length': the minibatch's length at the network "
            "input)",
            "the claim differs on digits: all three end within ~2 points (batchnorm +0.3 to "
            "+1.7 over none, trajectory -0.7 to 0 at seeds 0-2); only batchnorm learns faster "
            "early",
        ),
        "paper": (
            "digits instead of CIFAR10 (not bundled); conv net of 32, 32, 64 channels and a "
            "fully connected layer of 256; Adam (lr 1e-3) for 60 epochs, 5 initializations "
            "averaged",
        ),
    },
    small_runtime="~14 s",
    compute=compute,
    plot=plot,
    claim=("Replacing batchnorm by trajectory regularization performs comparably to batchnorm, "
           "and both considerably better than no normalization (figure 11, section 3.3)."),
    judge=judge,
    n_seeds=3,
)
