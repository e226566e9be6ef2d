"""``raghu-training``: trajectory length, transitions and weight scale of a network as it
trains, and the accuracy reached by training one layer at different depths (Raghu et al., "On
the Expressive Power of Deep Neural Networks", ICML 2017, section 3, figures 8, 9, 18 and 7).

Data: scikit-learn's digits (64 features, 10 classes; :func:`nngauge.data.digits`), split at
random 60/20/20 into train, validation and test and standardized on the training part. The
networks are MLPs with n hidden layers of width k (:func:`nngauge.nn.mlp`): weights
W^(d) ~ N(0, sigma_w^2 / fan_in), biases starting at 0, trained with plain SGD (minibatches of
50, constant rate, softmax cross-entropy) by :func:`nngauge.training.fit`, which keeps the
weights of the epoch with the lowest validation error (its learning-rate decays are switched
off). Hidden layer d (1..n) is z^(d) = phi(W^(d-1) z^(d-1) + b^(d-1)), z^(0) = x; W^(n) is the
linear readout. ``layer`` in the CSV is that d (0: the input, n + 1: the readout).

**Training (figures 8, 9, 18).** A circular trajectory joining two training points,
x(t) = cos(pi t / 2) x_a + sin(pi t / 2) x_b (:func:`nngauge.trajectories.arc`; x_a, x_b of
different classes), is fixed before training. A :class:`nngauge.training.Tracker` measures, at
step 0 (the initialization) and at log-spaced SGD steps up to the last one:

- ``length``: the arc length l(z^(d)) of the trajectory's image at every layer d
  (:func:`nngauge.trajectory_length`, refined to convergence), figures 8 and 18;
- ``transitions``: the number of times a neuron of hidden layer d changes linear piece along
  the trajectory (:func:`nngauge.transitions`, exact on the polygon of its points), section 2.1;
- ``sigma_w2``: the weight scale of W^(d-1), fan_in x mean_ij W_ij^2 (from the Tracker's weight
  snapshots), figure 9.

The paper's claims: training increases trajectory length (figures 8, 18); a typically
initialized network (sigma_w^2 = 2) is not in the exponential-growth regime at step 0 but is
pushed there by training (length growing with depth, figure 8), as the weight scale increases
across all layers (figure 9). Printed: the length at the last hidden layer at the end over that
at step 0, and the growth per hidden layer (l(z^(n)) / l(z^(1)))^(1/(n-1)) at both (the first
layer is left out: it maps the standardized 64-d input into the hidden width, so its change of
length reflects the input's scale, not depth).

**One layer (figure 7, section 3.1).** A hard-tanh network (sigma_w^2 = 1, the figure's) is
initialized; for each hidden layer d = 2..n a copy of it is trained with every parameter
frozen except W^(d-1) and b^(d-1), the weights into layer d (k x k for every d: from the
paper's W^(1), into the second hidden layer, on, so the number of trained parameters is
fixed); the readout stays random too. Every copy sees the same minibatches (a paired
comparison); the accuracies reached are averaged over a few initializations. The remaining
depth above the trained weights is n - d + 1 nonlinear layers. The paper's claim:
performance increases monotonically as lower layers are trained (a perturbation, or a change,
at a layer grows exponentially in the remaining depth); its theory concerns training accuracy.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, digit_splits
from nngauge.reproduce._nlc_study import panel_verdict

COLUMNS = ("experiment", "activation", "sigma_w2_init", "network", "step", "layer", "quantity",
           "value")
"""One row per value: ``experiment`` "training" (figures 8, 9, 18) or "one_layer" (figure 7);
``network`` the random initialization (0 for "training"); ``step`` SGD updates done;
``layer`` d as in the module docstring (empty for network-wide values; for "one_layer" the
hidden layer whose incoming weights are trained); ``quantity`` one of :data:`QUANTITIES`."""
QUANTITIES = {
    "length": "arc length of the trajectory's image at layer d (0: the input)",
    "transitions": "neuron transitions of hidden layer d along the trajectory",
    "sigma_w2": "fan_in x mean W^2 of the weights into layer d (n + 1: the readout)",
    "train_accuracy": "training accuracy during the epoch ending at ``step`` (running mean)",
    "val_accuracy": "validation accuracy at ``step`` (the end of an epoch)",
    "final_train_accuracy": "training accuracy of the weights fit keeps (best validation epoch, "
                            "at ``step``)",
    "final_test_accuracy": "test accuracy of those weights",
}
ONE_LAYER_NETWORK = ("hard_tanh", 1.0)
"""Figure 7's network: hard tanh, sigma_w^2 = 1."""
TRACKED = (("relu", 2.0), ONE_LAYER_NETWORK)
"""(activation, sigma_w^2) of the networks tracked in training: figure 8's "typical"
initialization sigma_w^2 = 2 (He's, for ReLU), and figure 7's network."""
BATCH_SIZE = 50


@dataclass(frozen=True)
class Settings:
    width: int  # k
    hidden: int  # n hidden layers
    epochs: int  # of the tracked trainings
    one_layer_epochs: int
    one_layer_nets: int  # initializations, each trained once per layer
    lr: float
    per_decade: int  # Tracker measurements per factor of 10 in steps
    n_points: int  # points of the arc (its polygon for the transitions; lengths refine it)
    tol: float  # of the length refinement
    max_points: int


SETTINGS = {
    "small": Settings(width=64, hidden=6, epochs=30, one_layer_epochs=30, one_layer_nets=2,
                      lr=0.05, per_decade=3, n_points=129, tol=1e-2, max_points=2**11 + 1),
    "paper": Settings(width=100, hidden=8, epochs=300, one_layer_epochs=200, one_layer_nets=3,
                      lr=0.05, per_decade=6, n_points=513, tol=1e-3, max_points=2**15 + 1),
}


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    splits = digit_splits(generator)
    steps_per_epoch = math.ceil(len(splits[0].labels) / BATCH_SIZE)
    rows, comparison = [], []
    for activation, sigma_w2 in TRACKED:
        network_rows = _tracked_training(activation, sigma_w2, splits, settings,
                                         steps_per_epoch, generator)
        rows += network_rows
        comparison += _training_comparison(network_rows, activation, sigma_w2, settings.hidden)
    one_layer_rows = _one_layer(splits, settings, steps_per_epoch, generator)
    rows += one_layer_rows
    comparison += _one_layer_comparison(one_layer_rows, settings.hidden,
                                        settings.one_layer_nets)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"hidden": settings.hidden})


def _network(activation: str, sigma_w2: float, settings: Settings, generator: torch.Generator):
    from nngauge.nn import mlp

    return mlp(64, settings.width, settings.hidden + 1, 10, activation=activation,
               init="gaussian", sigma_w=math.sqrt(sigma_w2), bias_std=0.0, generator=generator)


def _fit(net, splits, epochs: int, settings: Settings, generator: torch.Generator,
         tracker=None):
    """Plain SGD at a constant rate for ``epochs`` epochs (patience beyond the last epoch: no
    decay); the model ends at the weights of the best validation epoch."""
    from nngauge.training import fit

    train, val, test = splits
    return fit(net, train, val, test=test, lr=settings.lr, batch_size=BATCH_SIZE,
               loss_scaling=False, max_epochs=epochs, patience=epochs + 1, generator=generator,
               tracker=tracker)


def _accuracy_rows(key: tuple, layer, fitted, steps_per_epoch: int) -> list[tuple]:
    """Per-epoch training and validation accuracy, then those of the weights fit kept."""
    rows = []
    for record in fitted.history:
        step = record.epoch * steps_per_epoch
        if record.epoch > 0:  # epoch 0 is the untrained network: no training pass
            rows.append((*key, step, layer, "train_accuracy", 1.0 - record.train_error))
        rows.append((*key, step, layer, "val_accuracy", 1.0 - record.val_error))
    best = fitted.best_epoch * steps_per_epoch
    rows.append((*key, best, layer, "final_train_accuracy", 1.0 - fitted.train_error))
    rows.append((*key, best, layer, "final_test_accuracy", 1.0 - fitted.test_error))
    return rows


def _tracked_training(activation, sigma_w2, splits, settings: Settings, steps_per_epoch: int,
                      generator: torch.Generator) -> list[tuple]:
    """Train one network with a Tracker on a fixed arc between two training points; the
    rows of length and transitions per layer, weight scale per layer and accuracy."""
    from nngauge.training import Tracker, log_steps
    from nngauge.trajectories import arc

    train = splits[0]
    first_other = int(torch.nonzero(train.labels != train.labels[0])[0])
    trajectory = arc(train.inputs[0], train.inputs[first_other], settings.n_points)
    hidden = [f"layers.{i}.act" for i in range(settings.hidden)]
    last = settings.epochs * steps_per_epoch
    tracker = Tracker(
        {"trajectory_length": ("trajectory_length", {
            "trajectory": trajectory, "layers": hidden, "tol": settings.tol,
            "max_points": settings.max_points}),
         "transitions": ("transitions", {"x0": trajectory, "x1": None, "layers": hidden})},
        schedule=sorted({*log_steps(settings.per_decade, last), last}), keep_weights=True)
    net = _network(activation, sigma_w2, settings, generator)
    tracker.step(net)  # step 0: the initialization; fit's k-th update is then step k
    fitted = _fit(net, splits, settings.epochs, settings, generator, tracker)
    key = ("training", activation, sigma_w2, 0)
    rows = []
    for record in tracker.records:
        for d, name in enumerate(["input"] + hidden):
            rows.append((*key, record["step"], d, "length",
                         record[f"trajectory_length/{name}/length"]))
        for d, name in enumerate(hidden, start=1):
            rows.append((*key, record["step"], d, "transitions",
                         record[f"transitions/{name}/transitions"]))
    for step, weights in tracker.weight_snapshots:
        for d in range(1, settings.hidden + 2):
            weight = weights[f"layers.{d - 1}.linear.weight"].double()
            rows.append((*key, step, d, "sigma_w2",
                         weight.shape[1] * float(weight.pow(2).mean())))
    return rows + _accuracy_rows(key, None, fitted, steps_per_epoch)


def _one_layer(splits, settings: Settings, steps_per_epoch: int,
               generator: torch.Generator) -> list[tuple]:
    """Figure 7: from one initialization per network, train only the weights into hidden
    layer d, for d = 2..n (same minibatch order for every d: a paired comparison)."""
    rows = []
    for i in range(settings.one_layer_nets):
        initial = _network(*ONE_LAYER_NETWORK, settings, generator).requires_grad_(False)
        shuffle_seed = seed_of(generator)
        for d in range(2, settings.hidden + 1):
            net = copy.deepcopy(initial)
            net.layers[d - 1].linear.requires_grad_(True)
            fitted = _fit(net, splits, settings.one_layer_epochs, settings,
                          torch.Generator().manual_seed(shuffle_seed))
            rows += _accuracy_rows(("one_layer", *ONE_LAYER_NETWORK, i), d, fitted,
                                   steps_per_epoch)
    return rows


def _mean(rows, quantity: str, by: tuple[str, ...] = ("step", "layer"), **where) -> dict:
    """The mean over networks of ``quantity``, keyed by the columns ``by`` (a tuple key, or
    the value itself for one column), among rows whose columns equal ``where``'s values."""
    index = {name: i for i, name in enumerate(COLUMNS)}
    groups: dict = {}
    for row in rows:
        if row[index["quantity"]] == quantity and all(
                row[index[name]] == value for name, value in where.items()):
            key = tuple(row[index[name]] for name in by)
            groups.setdefault(key[0] if len(by) == 1 else key, []).append(row[index["value"]])
    return {key: float(np.mean(values)) for key, values in groups.items()}


def _training_comparison(rows, activation: str, sigma_w2: float, hidden: int
                         ) -> list[Comparison]:
    label, network = f"{activation}, sigma_w^2={sigma_w2:g}", network_key(activation, sigma_w2)
    length, transitions = _mean(rows, "length"), _mean(rows, "transitions")
    scale = _mean(rows, "sigma_w2")
    first, last = min(s for s, _ in length), max(s for s, _ in length)

    def growth(step: int) -> float:
        return (length[step, hidden] / length[step, 1]) ** (1.0 / (hidden - 1))

    start = np.array([scale[first, d] for d in range(1, hidden + 2)])
    end = np.array([scale[last, d] for d in range(1, hidden + 2)])
    (test_accuracy,) = _mean(rows, "final_test_accuracy", by=("layer",)).values()
    return [
        Comparison(f"{label}: length at hidden layer {hidden}, end / start of training",
                   length[last, hidden] / length[first, hidden], None,
                   f"{length[first, hidden]:.4g} at step 0 -> {length[last, hidden]:.4g} at "
                   f"step {last}; figures 8, 18: training increases trajectory length (> 1)",
                   key=f"{network}_length_ratio"),
        Comparison(f"{label}: length growth per hidden layer at step 0", growth(first), None,
                   "(l(z^(n)) / l(z^(1)))^(1/(n-1)); figure 8: at step 0 the network "
                   "(sigma_w^2 = 2 there) is not in the exponential growth regime (<= ~1)",
                   key=f"{network}_growth_start"),
        Comparison(f"{label}: length growth per hidden layer at step {last}", growth(last),
                   None, "figure 8: training pushes the network into exponential growth with "
                   "depth (> 1)", key=f"{network}_growth_end"),
        Comparison(f"{label}: transitions at hidden layer {hidden}, end - start of training",
                   transitions[last, hidden] - transitions[first, hidden], None,
                   f"{transitions[first, hidden]:g} -> {transitions[last, hidden]:g}; the "
                   "paper does not track transitions in training (figure 5: linear in the "
                   "length at a random network)", key=f"{network}_transitions_change"),
        Comparison(f"{label}: weight layers whose sigma_w^2 increased in training",
                   float(np.sum(end > start)), None,
                   f"of {hidden + 1}; mean {start.mean():.4g} -> {end.mean():.4g}; figure 9: "
                   "it increases across all layers", key=f"{network}_sigma_w2_increased"),
        Comparison(f"{label}: test accuracy reached", test_accuracy, None,
                   "figures 8, 18: networks trained to high test accuracy",
                   key=f"{network}_test_accuracy"),
    ]


def network_key(activation: str, sigma_w2: float) -> str:
    """The key prefix of a tracked network's comparisons (e.g. ``"relu_sigma_w2_2"``)."""
    return f"{activation}_sigma_w2_{sigma_w2:g}"


def _one_layer_comparison(rows, hidden: int, nets: int) -> list[Comparison]:
    train = _mean(rows, "final_train_accuracy", by=("layer",))
    test = _mean(rows, "final_test_accuracy", by=("layer",))
    comparison = [
        Comparison(f"one layer: train accuracy training only the weights into layer {d}",
                   train[d], None, f"remaining depth {hidden - d + 1}; test {test[d]:.3f}; "
                   f"mean of {nets} initialization(s)", key=f"one_layer_{d}_train_accuracy")
        for d in sorted(train)]
    lowest, highest = min(train), max(train)
    inversions = sum(train[a] < train[b] for a in train for b in train if a < b)
    comparison += [
        Comparison(f"one layer: train accuracy, only layer {lowest} - only layer {highest}",
                   train[lowest] - train[highest], None,
                   f"test: {test[lowest] - test[highest]:+.3f}; figure 7: training lower "
                   "layers gives better performance (> 0)", key="one_layer_lowest_minus_highest"),
        Comparison("one layer: pairs where the lower trained layer has the lower train accuracy",
                   float(inversions), None,
                   f"of {len(train) * (len(train) - 1) // 2} pairs; figure 7: monotonically "
                   "better as lower layers are trained (0)", key="one_layer_inversions"),
    ]
    return comparison


def plot(computed: Computed, figure) -> None:
    hidden, rows = computed.extra["hidden"], computed.rows
    figure.set_size_inches(14, 3.2 * len(TRACKED))
    grid = figure.subplots(len(TRACKED), 4)
    panels = (("length", "length per layer (figs. 8, 18)", range(hidden + 1)),
              ("transitions", "transitions per layer", range(1, hidden + 1)),
              ("sigma_w2", "weight scale into layer (fig. 9)", range(1, hidden + 2)))
    for axes, (activation, sigma_w2) in zip(grid, TRACKED):
        for ax, (quantity, title, layers) in zip(axes, panels):
            values = _mean(rows, quantity, experiment="training", activation=activation,
                           sigma_w2_init=sigma_w2)
            steps = sorted({s for s, _ in values})
            for d in layers:
                ax.plot(steps, [values[s, d] for s in steps], "o-", markersize=2,
                        color=_layer_color(d, hidden),
                        label={0: "input", hidden + 1: "readout"}.get(d, f"layer {d}"))
            ax.set_xscale("symlog", linthresh=1)
            ax.set_xlabel("SGD step")
            ax.set_title(f"{activation}, sigma_w^2={sigma_w2:g}: {title}", fontsize=8)
        axes[0].set_yscale("log")
        axes[0].legend(fontsize=6, ncol=2)
        axes[2].legend(fontsize=6, ncol=2)
    _plot_one_layer(grid[0][3], grid[1][3], rows, hidden)


def _layer_color(d: int, hidden: int):
    from matplotlib import colormaps

    return colormaps["viridis"](d / (hidden + 1))


def _plot_one_layer(curves, summary, rows, hidden: int) -> None:
    """Figure 7: training accuracy over training per trained layer; accuracies reached."""
    train = _mean(rows, "train_accuracy", experiment="one_layer")
    for d in range(2, hidden + 1):
        steps = sorted(s for s, layer in train if layer == d)
        curves.plot(steps, [train[s, d] for s in steps], color=_layer_color(d, hidden),
                    label=f"only into layer {d}")
    curves.set_xlabel("SGD step")
    curves.set_ylabel("train accuracy (running)")
    curves.set_title("hard_tanh, sigma_w^2=1: one layer trained (fig. 7)", fontsize=8)
    curves.legend(fontsize=6)
    for quantity, marker in (("final_train_accuracy", "o-"), ("final_test_accuracy", "s--")):
        final = _mean(rows, quantity, by=("layer",), experiment="one_layer")
        summary.plot(sorted(final), [final[d] for d in sorted(final)], marker,
                     label=quantity.replace("final_", "").replace("_", " "))
    summary.set_xlabel("trained: the weights into layer d")
    summary.set_ylabel("accuracy reached")
    summary.set_title("one layer trained: accuracy reached (fig. 7)", fontsize=8)
    summary.legend(fontsize=7)


def judge(computed: Computed) -> Verdict:
    """Figures 7-9, each claim judged on its own: training lengthens the trajectories of every
    tracked network (figures 8, 18), raises sigma_w^2 in every weight layer of every tracked
    network (figure 9), and training the lowest layer alone fits better than the highest
    (figure 7). All three: reproduced; two: qualitatively; fewer: differs."""
    keys = [network_key(*network) for network in TRACKED]
    longer = [computed.compared(f"{key}_length_ratio").ours > 1 for key in keys]
    layers = computed.extra["hidden"] + 1
    raised = [computed.compared(f"{key}_sigma_w2_increased").ours for key in keys]
    lower = computed.compared("one_layer_lowest_minus_highest").ours
    return panel_verdict({
        "trajectories lengthen": (all(longer), f"longer after training in {sum(longer)} of "
                                  f"{len(longer)} networks"),
        "sigma_w^2 rises": (all(r == layers for r in raised), "weight layers whose sigma_w^2 "
                            f"increased: {', '.join(f'{r:g}' for r in raised)} of {layers}"),
        "lower layers train better": (lower > 0, "training only the lowest layer minus only "
                                      f"the highest: {lower:+.3f} train accuracy"),
    })


REPRODUCTION = Reproduction(
    name="raghu-training",
    paper=cite("expressivity"),
    target="Figures 8, 9, 18 and 7, section 3",
    description="trajectory length, transitions and weight scale per layer over training "
                "(digits MLPs), and the accuracy reached training one layer at each depth",
    differences={
        "small": (
            "scikit-learn digits instead of CIFAR10 (figures 8, 9) and MNIST (figures 7, "
            "18); MLPs of 6 hidden layers of width 64 instead of a conv net (figures 8, 9) "
            "and width 100 (figure 7)",
            "figures 8-9 with a ReLU network (sigma_w^2 = 2, the figures' 'typical' He "
            "initialization; the paper does not name the conv net's nonlinearity) and with "
            "figure 7's hard-tanh network (sigma_w^2 = 1); biases start at 0",
            "plain SGD (lr 0.05, minibatch 50) for 30 epochs (660 steps), the weights of the "
            "best validation epoch kept; the paper's optimizer and schedule are not stated",
            "the trajectory: the arc cos(pi t/2) x_a + sin(pi t/2) x_b between two training "
            "points of different classes, 129 points; lengths refined to 1%, transitions "
            "exact on its 128-chord polygon; measured at step 0 and 10 log-spaced steps up to "
            "660",
            "figure 9's weight scale is fan_in x mean W^2 per weight layer; transitions over "
            "training are not in the paper (added beside the lengths)",
            "figure 7: 6 hidden layers of width 64; 2 initializations, each trained once per "
            "layer (same minibatch order) for 30 epochs, accuracies averaged; the paper "
            "prints no numbers: only directions are compared",
        ),
        "paper": (
            "digits instead of CIFAR10 / MNIST (not bundled); MLPs of 8 hidden layers of "
            "width 100 (figure 7's width) instead of a conv net for figures 8-9",
            "plain SGD (lr 0.05, minibatch 50): 300 epochs tracked (6600 steps, 6 "
            "measurements per decade); figure 7: 3 initializations, 200 epochs per trained "
            "layer; arc of 513 points, lengths refined to 0.1%",
            "ReLU (sigma_w^2 = 2) and hard tanh (sigma_w^2 = 1) networks; the paper prints no "
            "numbers: only directions are compared",
        ),
    },
    small_runtime="~16 s",
    compute=compute,
    plot=plot,
    claim=("Training lengthens trajectories and raises the weight scale (figures 8-9), and "
           "training one lower layer alone fits better than training a higher one (remaining "
           "depth, figure 7)."),
    judge=judge,
    n_seeds=3,
)
