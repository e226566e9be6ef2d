"""``shrinkage-figure4``: a deep network vs its "skimmed" copy (shrinkage paper, figure 4).

Section 4.2 of the shrinkage paper trains a deep critically initialized LayerNorm network
(eq. 2.1: z^(l) = LN(W^(l) phi_l(z^(l-1)) + b^(l)), the first layer an "embedding" with
phi_1 = identity) whose activations alternate between ReLU and erf, beside a "skimmed" copy in
which a block of middle layers is replaced by its linearization around the mean input to the
block (:func:`nngauge.skim`: one affine map, trained like the other layers).

The network is an ``nn.Sequential`` of ``linear, norm, act`` per hidden layer and a last linear
layer (the children of :meth:`nngauge.nn.MLP.to_sequential`), built here because
:func:`nngauge.nn.mlp` takes one activation: hidden layer k (k = 0, 1, ...) has the activation
ReLU for even k and erf for odd k, so phi_{l+1} of the paper is layer k = l - 1's activation.
Weights are N(0, sigma_w^2 / fan_in), biases N(0, sigma_b^2) with, for each linear layer, the
critical (sigma_w, sigma_b) of the activation that feeds it (:func:`nngauge.theory.
critical_init`: ReLU's sigma_b = 0, erf's sigma_b^2 = 0.1049, sigma_w = 1); the embedding has
no bias (its map of correlations is then the identity). The block linearized consists of the
``block`` layers in the middle: from the activation that reads z^(first) to the LayerNorm that
gives z^(first + block), so it maps preactivations to preactivations.

Both networks start from the same weights in their shared layers and are trained (Adam,
cross-entropy) on the same minibatches of digit images, in lock step. The CSV has, per
``quantity``:

- ``min correlation`` and ``1 - rho_max`` (figure 4a) per layer l of the full network (z^(l),
  after the l-th LayerNorm), ``net`` "init" or "trained": the smallest pairwise correlation of
  the training inputs' preactivations and 1 - max_{k <= l} of it (:func:`nngauge.correlations`);
  ``theory``: the same at infinite width (:func:`nngauge.theory.correlation_map` applied layer by
  layer to the least correlated input pair), at initialization;
- ``displacement correlation`` (figure 4b) per shared linear layer l (1-based, the paper's
  count; ``distance``: 1 for the two layers adjacent to the block, 2 for the next, ...): the
  Pearson correlation of the two networks' total displacements theta_trained - theta_init of
  that layer's weights and bias;
- ``train accuracy`` and ``test accuracy`` (figure 4c) per epoch (0: at initialization), ``net``
  "full" or "skimmed".
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

COLUMNS = ("quantity", "net", "layer", "distance", "epoch", "measured", "theory")
ACTIVATIONS = ("relu", "erf")  # hidden layer k has ACTIVATIONS[k % 2]
PAPER_ENTERING_CORRELATION = 0.97
PAPER_FAR, PAPER_NEAR = 0.8, 0.1
ENTERING_THRESHOLD = 0.9  # judge: "high" correlation entering the block
STAYS_TOLERANCE = 0.05  # judge: largest change of that correlation during training
ACCURACY_TOLERANCE = 0.05  # judge: final test accuracies of the two networks at most this apart
LEARNS = 0.5
"""Judge: "trains like the full one" needs both networks to learn: a final test accuracy of
at least this on 10 classes (chance 0.1); two networks that learn nothing are "similar" too,
and that is no evidence."""


@dataclass(frozen=True)
class Settings:
    depth: int  # linear layers, the embedding and the output layer included
    width: int
    block: int  # layers linearized
    epochs: int
    optimizer: str  # "sgd" or "adam" (nngauge.training.make_optimizer)
    lr: float
    batch_size: int


SETTINGS = {
    "small": Settings(depth=30, width=256, block=8, epochs=6, optimizer="adam", lr=1e-4,
                      batch_size=128),
    "paper": Settings(depth=82, width=512, block=16, epochs=20, optimizer="adam", lr=3e-5,
                      batch_size=128),
}


def network(d_in: int, width: int, depth: int, d_out: int,
            generator: torch.Generator) -> nn.Sequential:
    """The full network: ``depth`` linear layers, a LayerNorm (no affine parameters) and an
    activation after each but the last, activations alternating ReLU / erf, each linear layer
    critically initialized for the activation that feeds it (see the module docstring)."""
    from nngauge.activations import from_spec
    from nngauge.theory import critical_init

    critical = {name: critical_init(name) for name in ACTIVATIONS}
    widths = [d_in] + [width] * (depth - 1) + [d_out]
    children: list[nn.Module] = []
    for k in range(depth):
        linear = nn.Linear(widths[k], widths[k + 1])
        sigma_w, sigma_b = (1.0, 0.0) if k == 0 else critical[ACTIVATIONS[(k - 1) % 2]]
        with torch.no_grad():
            linear.weight.copy_(torch.randn(widths[k + 1], widths[k], generator=generator,
                                            dtype=torch.float64) * sigma_w / math.sqrt(widths[k]))
            linear.bias.copy_(torch.randn(widths[k + 1], generator=generator,
                                          dtype=torch.float64) * sigma_b)
        children.append(linear)
        if k < depth - 1:
            children += [nn.LayerNorm(width, elementwise_affine=False),
                         from_spec(ACTIVATIONS[k % 2]).module()]
    return nn.Sequential(*children)


def pixel_digits(generator: torch.Generator):
    """scikit-learn's digits split 80/20 at random (seeded from ``generator``), pixels scaled to
    [0, 1] as MNIST's usually are: (train, test)."""
    from nngauge.data import LabelledData, digits, split

    return tuple(LabelledData(part.inputs / 16.0, part.labels)
                 for part in split(digits(), (0.8, 0.2), generator=seed_of(generator)))


def first_layer(settings: Settings) -> int:
    """The paper's l of the preactivations z^(l) entering the middle block."""
    return (settings.depth - settings.block) // 2


def theory_correlations(rho_0: float, depth: int) -> list[float]:
    """Infinite-width correlation of z^(1..depth - 1) for inputs of correlation ``rho_0``: the
    embedding keeps it (no bias), then each layer applies its activation's map P (eq. 2.3)."""
    from nngauge.theory import correlation_map, critical_init

    maps = [correlation_map(name, *critical_init(name)) for name in ACTIVATIONS]
    out = [rho_0]
    for k in range(depth - 2):
        out.append(float(maps[k % 2](out[-1])))
    return out


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge import skim

    settings = SETTINGS[scale]
    train, test = pixel_digits(generator)
    full = network(train.inputs.shape[1], settings.width, settings.depth, 10, generator)
    first = first_layer(settings)
    start, end = str(3 * first - 1), str(3 * (first + settings.block) - 2)
    skimmed = skim(full, train.inputs, layers=(start, end))
    shared = _shared_linears(full, skimmed.model, first, settings.block)
    initial = [(_flat(f), _flat(s)) for f, s in shared]

    rho_0, *init_min = _min_correlations(full, train.inputs, settings.depth)
    theory = theory_correlations(rho_0, settings.depth)
    curves = _train(full, skimmed.model, train, test, settings, generator)
    trained_min = _min_correlations(full, train.inputs, settings.depth)[1:]

    rows = []
    for net, values in (("init", init_min), ("trained", trained_min)):
        rho_max, rho_max_theory = -1.0, -1.0
        for layer, (value, rho) in enumerate(zip(values, theory), start=1):
            rho_max, rho_max_theory = max(rho_max, value), max(rho_max_theory, rho)
            rows.append(("min correlation", net, layer, None, None, value,
                         rho if net == "init" else None))
            rows.append(("1 - rho_max", net, layer, None, None, 1.0 - rho_max,
                         1.0 - rho_max_theory if net == "init" else None))
    for (layer, distance), (f, s), before in zip(_shared_positions(settings), shared, initial):
        r = float(np.corrcoef(_flat(f) - before[0], _flat(s) - before[1])[0, 1])
        rows.append(("displacement correlation", "full vs skimmed", layer, distance, None, r,
                     None))
    rows += curves
    comparison = _summary(rows, settings, first, skimmed)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"first": first, "block": settings.block,
                           "skim_min_correlation": skimmed.min_input_correlation,
                           "skim_deviation": skimmed.deviation})


def _shared_linears(full: nn.Sequential, skimmed: nn.Sequential, first: int, block: int):
    """(full, skimmed) pairs of the linear layers outside the block, in order."""
    inside = range(first, first + block)
    ours = [m for k, m in enumerate(m for m in full if isinstance(m, nn.Linear))
            if k not in inside]
    theirs = [m for m in skimmed if isinstance(m, nn.Linear)]
    return list(zip(ours, theirs))


def _shared_positions(settings: Settings) -> list[tuple[int, int]]:
    """(l, distance to the block) of the shared linear layers, l = 1..depth (the paper's)."""
    first = first_layer(settings)
    last = first + settings.block  # the paper's l of the block's last linear layer
    return [(k + 1, first - k if k < first else k + 1 - last)
            for k in range(settings.depth) if not first <= k < last]


def _flat(linear: nn.Linear) -> torch.Tensor:
    return torch.cat([linear.weight.detach().reshape(-1), linear.bias.detach()]).double().clone()


def _min_correlations(net: nn.Sequential, inputs: torch.Tensor, depth: int) -> list[float]:
    """The smallest pairwise correlation of the inputs and of z^(1..depth - 1)."""
    from nngauge import correlations

    norms = [str(3 * k + 1) for k in range(depth - 1)]
    result = correlations(net, inputs, layers=norms, max_samples=len(inputs))
    by_name = {row.name: row.min for row in result.layers}
    return [by_name["input"]] + [by_name[name] for name in norms]


def _train(full, skimmed, train, test, settings, generator) -> list[tuple]:
    """Cross-entropy minimized by ``settings.optimizer``, both networks on the same minibatches
    in lock step; the accuracy rows of every epoch (0: before training)."""
    from nngauge.training import classification_error
    from nngauge.training._fit import make_optimizer

    nets = {"full": full, "skimmed": skimmed}
    optimizers = {name: make_optimizer(settings.optimizer, net.parameters(), settings.lr)
                  for name, net in nets.items()}
    rows = []

    def record(epoch):
        for name, net in nets.items():
            for split_name, data in (("train", train), ("test", test)):
                rows.append((f"{split_name} accuracy", name, None, None, epoch,
                             1.0 - classification_error(net, data), None))

    record(0)
    for epoch in range(1, settings.epochs + 1):
        order = torch.randperm(len(train.labels), generator=generator)
        for idx in order.split(settings.batch_size):
            x, y = train.inputs[idx], train.labels[idx]
            for name, net in nets.items():
                optimizers[name].zero_grad(set_to_none=True)
                nn.functional.cross_entropy(net(x), y).backward()
                optimizers[name].step()
        record(epoch)
    return rows


def _series(rows, quantity, net) -> np.ndarray:
    """The ``measured`` values of one quantity and net, in row order."""
    return np.array([r[5] for r in rows if r[0] == quantity and r[1] == net], dtype=float)


def _summary(rows, settings: Settings, first: int, skimmed) -> list[Comparison]:
    entering = {net: float(_series(rows, "min correlation", net)[first - 1])
                for net in ("init", "trained")}
    theory = [r[6] for r in rows if r[0] == "min correlation" and r[1] == "init"][first - 1]
    near, far = _near_far(rows)
    accuracy = {net: float(_series(rows, "test accuracy", net)[-1]) for net in ("full", "skimmed")}
    train_accuracy = {net: float(_series(rows, "train accuracy", net)[-1])
                      for net in ("full", "skimmed")}
    block = f"layers {first + 1}..{first + settings.block}"
    return [
        Comparison(f"min correlation entering the block z^({first}), init",
                   entering["init"], PAPER_ENTERING_CORRELATION,
                   f"over all training pairs; infinite width {theory:.4g}; skim's own "
                   f"measurement {skimmed.min_input_correlation:.4g}",
                   key="entering_correlation_init"),
        Comparison(f"min correlation entering the block z^({first}), trained",
                   entering["trained"], PAPER_ENTERING_CORRELATION,
                   "the paper: 'does not change significantly after training'",
                   key="entering_correlation_trained"),
        Comparison("relative output deviation of the skimmed network at init",
                   skimmed.deviation, None, f"nngauge.skim, the block {block} linearized: "
                   "sqrt(E||f_s - f||^2) / sqrt(E||f - E f||^2) on the training images (the "
                   "paper expects the outputs not to be 'significantly' affected)",
                   key="skimmed_deviation"),
        Comparison("final test accuracy, full", accuracy["full"], None,
                   f"after {settings.epochs} epochs (train {train_accuracy['full']:.3f}); "
                   "figure 4c draws curves only", key="final_test_accuracy_full"),
        Comparison("final test accuracy, skimmed", accuracy["skimmed"], None,
                   f"after {settings.epochs} epochs (train {train_accuracy['skimmed']:.3f})",
                   key="final_test_accuracy_skimmed"),
        Comparison("displacement correlation, largest far from the block", far, PAPER_FAR,
                   "max over the shared layers more than 2 layers from the block; paper: "
                   "'up to 0.8'", key="displacement_far"),
        Comparison("displacement correlation, next to the block", near, PAPER_NEAR,
                   "mean over the 2 layers adjacent to the block; paper: '~0.1 but positive'",
                   key="displacement_near"),
    ]


def _near_far(rows) -> tuple[float, float]:
    """(mean displacement correlation of the two layers adjacent to the block, max over the
    layers more than 2 layers away from it)."""
    pairs = [(r[3], r[5]) for r in rows if r[0] == "displacement correlation"]
    near = float(np.mean([r for d, r in pairs if d == 1]))
    far = float(max(r for d, r in pairs if d > 2))
    return near, far


def plot(computed: Computed, figure) -> None:
    axes = figure.subplots(1, 3)
    rows, first, block = computed.rows, computed.extra["first"], computed.extra["block"]
    ax = axes[0]
    for net, style in (("init", "o"), ("trained", "s")):
        sel = [r for r in rows if r[0] == "1 - rho_max" and r[1] == net]
        ax.plot([r[2] for r in sel], [r[5] for r in sel], style, ms=3, color="red",
                fillstyle="full" if net == "init" else "none", label=f"measured, {net}")
    sel = [r for r in rows if r[0] == "1 - rho_max" and r[1] == "init"]
    ax.plot([r[2] for r in sel], [r[6] for r in sel], "-", color="black", label="infinite width")
    ax.axvspan(first, first + block, color="gray", alpha=0.2, label="linearized block")
    ax.set_yscale("log")
    ax.set(xlabel="layer l", ylabel="1 - rho_max", title="(a) shrinkage, full network")
    ax.legend(fontsize=6)
    ax = axes[1]
    sel = [r for r in rows if r[0] == "displacement correlation"]
    ax.bar([r[2] for r in sel], [r[5] for r in sel], color="tab:blue")
    ax.axvspan(first + 0.5, first + block + 0.5, color="gray", alpha=0.2)
    ax.set(xlabel="linear layer l", ylabel="Pearson correlation",
           title="(b) alignment of parameter displacements")
    ax = axes[2]
    for net, color in (("full", "tab:blue"), ("skimmed", "tab:orange")):
        for split_name, style in (("train", "-"), ("test", "--")):
            sel = [r for r in rows if r[0] == f"{split_name} accuracy" and r[1] == net]
            ax.plot([r[4] for r in sel], [r[5] for r in sel], style, color=color,
                    label=f"{net}, {split_name}")
    ax.set(xlabel="epoch", ylabel="accuracy", title="(c) training")
    ax.legend(fontsize=6)


def judge(computed: Computed) -> Verdict:
    """Reproduced when the smallest correlation entering the block is >= ENTERING_THRESHOLD
    at initialization and after training and changes by at most STAYS_TOLERANCE, the final
    test accuracies are within ACCURACY_TOLERANCE of each other and both at least LEARNS
    (two networks that learn nothing are alike too), the displacement correlation
    next to the block is positive and the largest far from it exceeds it; qualitatively
    when the training claims (accuracies, displacements) hold but the correlation claim does
    not (too low at this depth and width, or changed by training); differs otherwise."""
    rows, first = computed.rows, computed.extra["first"]
    init = float(_series(rows, "min correlation", "init")[first - 1])
    trained = float(_series(rows, "min correlation", "trained")[first - 1])
    theory = [r[6] for r in rows if r[0] == "min correlation" and r[1] == "init"][first - 1]
    full, skimmed = (float(_series(rows, "test accuracy", net)[-1]) for net in ("full", "skimmed"))
    near, far = _near_far(rows)
    smallest = min(r[5] for r in rows if r[0] == "displacement correlation")
    high = min(init, trained) >= ENTERING_THRESHOLD
    stays = abs(trained - init) <= STAYS_TOLERANCE
    similar = abs(full - skimmed) <= ACCURACY_TOLERANCE and min(full, skimmed) >= LEARNS
    aligned = 0 < near < far
    text = (f"smallest correlation entering the block (z^({first})) {init:.3f} at init "
            f"(infinite width {theory:.3f}), {trained:.3f} trained (paper ~"
            f"{PAPER_ENTERING_CORRELATION} before and after; ours must be >= "
            f"{ENTERING_THRESHOLD} and change by <= {STAYS_TOLERANCE}); final test accuracy "
            f"full {full:.3f} vs skimmed {skimmed:.3f} (tolerance {ACCURACY_TOLERANCE}, both "
            f"at least {LEARNS}); "
            f"displacement correlations: smallest {smallest:.3f}, next to the block "
            f"{near:.3f} (paper ~{PAPER_NEAR}), largest far from it {far:.3f} (paper up to "
            f"{PAPER_FAR})")
    if high and stays and similar and aligned:
        return Verdict("reproduced", "The middle block's inputs are nearly collinear and stay "
                       "so; the skimmed network trains like the full one along aligned "
                       "trajectories, as figure 4: " + text + ".")
    if similar and aligned:
        failed = "; ".join(
            ([] if high else [f"the block's inputs are less correlated than the paper's "
                              f"(the infinite-width value at layer {first} is {theory:.3f})"])
            + ([] if stays else ["training changes their correlation, which the paper "
                                 "says it does not"]))
        return Verdict("qualitatively", "The skimmed network trains like the full one along "
                       f"aligned trajectories, as figure 4, but {failed}: " + text + ".")
    return Verdict("differs", f"Not as figure 4 (accuracies within {ACCURACY_TOLERANCE}: "
                   f"{similar}; displacement correlations far > near > 0: {aligned}): "
                   + text + ".")


DATA = ("scikit-learn's 8x8 digits (1438 training / 359 test images, pixels scaled to [0, 1]) "
        "instead of MNIST: nothing is downloaded")
SETUP = ("the paper states no optimizer, learning rate, batch size or epochs: Adam, minibatches "
         "of 128 (the same for both networks, in lock step); the skimmed network's linearized "
         "block is trained too")
MEASURED = ("correlations over all pairs of the training images, not over all possible inputs; "
            "torch's LayerNorm centers the pre-activations, the paper's does not (footnote 3)")
FIRST = ("the embedding (first linear layer) has no bias and the first hidden activation is "
         "ReLU: the paper says neither")


REPRODUCTION = Reproduction(
    name="shrinkage-figure4",
    paper=cite("shrinkage"),
    target="Figure 4",
    description="a deep critically initialized LayerNorm network alternating ReLU and erf vs "
                "its copy with a middle block linearized (nngauge.skim), trained on the same "
                "minibatches: correlations entering the block, accuracy curves, alignment of "
                "parameter displacements",
    differences={
        "small": (
            DATA,
            "30 linear layers of width 256 (the paper states no width) with a block of 8 "
            "linearized (23 layers in the skimmed network) instead of 82 with a block of 16 "
            "(67 layers): the block starts at layer 11, where the infinite-width correlation is "
            "~0.84, not the paper's ~0.97",
            SETUP + "; learning rate 1e-4, 6 epochs",
            MEASURED,
            FIRST,
        ),
        "paper": (
            DATA,
            "width 512 (the paper states none)",
            SETUP + "; learning rate 3e-5, 20 epochs (at 1e-4 an 82-layer network of "
            "width 256 stayed near chance for 6 epochs)",
            MEASURED,
            FIRST,
        ),
    },
    small_runtime="~14 s",
    compute=compute,
    plot=plot,
    claim=("In a deep critically initialized network the preactivations entering a middle "
           "block are nearly collinear (correlation >= ~0.97) before and after training, so "
           "replacing the block by its linearization leaves training almost unchanged: the "
           "skimmed network improves at the rate of the full one, and the displacements of the "
           "shared layers' parameters are correlated, strongly (up to 0.8) far from the block "
           "and weakly (~0.1) but positively next to it (section 4.2, figure 4)."),
    judge=judge,
    n_seeds=3,
)
