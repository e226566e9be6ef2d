"""``regions-and-loss``: linear regions and the curvature of the loss, measured together over
training, and how their ranks move with each other and with the test error.

Raghu et al. ("On the Expressive Power of Deep Neural Networks", ICML 2017, section 2.1,
Theorem 2) show that a ReLU network cuts its input space into convex regions, one affine map
each, and relate their number to the length of a trajectory's image (section 2.2), which
training increases (section 3.2, figure 8). Keskar et al. ("On Large-Batch Training for Deep
Learning: Generalization Gap and Sharp Minima", ICLR 2017, section 2.2.2, Metric 2.1) relate
generalization to the sharpness of the minimum reached, a measure Neyshabur et al. ("Exploring
Generalization in Deep Learning", NIPS 2017, section 2.4) find scale-dependent. Humayun,
Balestriero and Baraniuk ("Deep Networks Always Grok and Here is Why", ICML 2024) follow the
local complexity (the density of region boundaries) near training and test points over
log-spaced optimization steps. No paper draws these measures together: this reproduction
tracks all of them on one network, on one time axis, and states their Spearman rank
correlations over training.

Data: scikit-learn's digits (64 features, 10 classes; :func:`nngauge.data.digits`), split at
random 60/20/20 into train, validation and test, standardized on the training part. The network:
an MLP with n hidden ReLU layers of width k (:func:`nngauge.nn.mlp`, weights N(0, 2 / fan_in),
biases 0), trained by :func:`nngauge.training.fit` with plain SGD on minibatches, softmax
cross-entropy without loss scaling (so that the Hessian and the sharpness measure the loss that
is trained) and a constant rate. A :class:`nngauge.training.Tracker` measures at step 0 (the
initialization) and at the log-spaced steps of :func:`nngauge.training.log_steps` up to the
last update (``step`` is the number of SGD updates done), every measure with the Tracker's
fixed seed (the same probes and directions at every step), its data D the training split:

- ``train_error``, ``test_error``: the fraction of the training (test) split misclassified
  (:func:`nngauge.training.classification_error`);
- ``train_loss``: L(w), the mean cross-entropy on D (the sharpness result's ``loss``);
- ``density_train``, ``density_test``: the linear regions per unit length of segments
  [x - r u, x + r u] through fixed training (test) points x along random unit directions u
  (:func:`nngauge.region_density`, exact);
- ``local_complexity_train``, ``local_complexity_test``: Humayun et al.'s local complexity
  (their figure 4) LC(x) = sum_l #{neurons of hidden layer l whose boundary meets the
  cross-polytope of radius r around x}, averaged over the same points (the same results);
- ``trajectory_length``, ``trajectory_length_output``: the arc length of the image, at the last
  hidden layer and at the output, of the polyline through fixed test points
  (:func:`nngauge.trajectories.through`, :func:`nngauge.trajectory_length`);
- ``hessian_top``: lambda_1, the top eigenvalue of the Hessian of L on a fixed batch of D, by
  Lanczos (:func:`nngauge.hessian`, the Tracker's "hessian"); ``hessian_residual``:
  ||H u - lambda_1 u|| of its Ritz pair;
- ``sharpness``: zeta_alpha(w) = (max_{|nu_i| <= alpha (|w_i| + 1)} L(w + nu) - L(w)) /
  (1 + L(w)) on D by projected gradient ascent, alpha = 5e-4 (:func:`nngauge.sharpness`;
  Neyshabur et al. eq. 4 and appendix A);
- ``nlc``: the nonlinearity coefficient on D (Philipp and Carbonell, "The Nonlinearity
  Coefficient - Predicting Generalization in Deep Neural Networks", arXiv 2018, Definition 1;
  :func:`nngauge.nlc`), that paper's predictor of test error. The standardized digits are far
  from isotropic, so values below 1 do not mean a linear network.

Printed: for every region measure R (density and local complexity near training and test
points, trajectory length) and curvature measure C (lambda_1, sharpness), Spearman's rank
correlation rho(R, C) over the measured steps, then rho of each of them (and of the NLC) with
the test error, each with its two-sided p-value (:func:`scipy.stats.spearmanr`). Spearman's
rho is Pearson's correlation of the ranks, 1 - 6 sum_i d_i^2 / (s (s^2 - 1)) over s steps
without ties, d_i the difference of step i's two ranks. The steps of one run are not
independent samples and every measure moves with training time: a rho says that two measures
move monotonically together along this run, the p-value how unlikely that is for unrelated
orderings, not a law over networks. Then each measure at the last step, beside its value at
step 0 and its largest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from nngauge._citations import cite, short
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, digit_splits

TRACKED_COLUMNS = {
    "train_error": "train_error",
    "test_error": "test_error",
    "train_loss": "sharpness/loss",
    "density_train": "density_train/density",
    "density_test": "density_test/density",
    "local_complexity_train": "density_train/local_complexity",
    "local_complexity_test": "density_test/local_complexity",
    "hessian_top": "hessian/eigenvalues/0",
    "hessian_residual": "hessian/residuals/0",
    "sharpness": "sharpness",
    "nlc": "nlc",
}
"""CSV column -> the Tracker's column (``measure/field``); the trajectory lengths' columns
name the last hidden layer and are added in :func:`compute`."""
COLUMNS = ("step", *TRACKED_COLUMNS, "trajectory_length", "trajectory_length_output")
REGION = ("density_train", "density_test", "local_complexity_train", "local_complexity_test",
          "trajectory_length")
CURVATURE = ("hessian_top", "sharpness")
LABELS = {
    "density_train": "regions per length near train points",
    "density_test": "regions per length near test points",
    "local_complexity_train": "local complexity near train points",
    "local_complexity_test": "local complexity near test points",
    "trajectory_length": "trajectory length (last hidden layer)",
    "hessian_top": "top Hessian eigenvalue",
    "sharpness": "Keskar sharpness",
    "nlc": "NLC",
    "test_error": "test error",
}
SIGMA_W2 = 2.0


@dataclass(frozen=True)
class Settings:
    width: int  # k
    hidden: int  # n hidden layers
    epochs: int
    batch_size: int  # of SGD
    lr: float
    per_decade: int  # Tracker measurements per factor of 10 in steps
    density_points: int  # fixed training points, and as many test points
    directions: int  # segments per point
    radius: float  # r, in standardized input units
    path_points: int  # test points the trajectory goes through
    hessian_batch: int  # samples of D in the Hessian
    lanczos_steps: int
    sharpness_steps: int


SETTINGS = {
    "small": Settings(width=48, hidden=3, epochs=12, batch_size=32, lr=0.05, per_decade=4,
                      density_points=16, directions=4, radius=0.5, path_points=8,
                      hessian_batch=128, lanczos_steps=15, sharpness_steps=50),
    "paper": Settings(width=128, hidden=3, epochs=3000, batch_size=32, lr=0.05, per_decade=8,
                      density_points=128, directions=8, radius=0.5, path_points=32,
                      hessian_batch=1024, lanczos_steps=60, sharpness_steps=500),
}


def held_out_error(model: torch.nn.Module, data, *, held_out) -> float:
    """Classification error of ``model`` on ``held_out`` (the Tracker's data is not read)."""
    from nngauge.training import classification_error

    return classification_error(model, held_out)


def tracked_measures(settings: Settings, train, test) -> dict:
    """The Tracker's measures: column name -> (registry name or callable, options)."""
    from nngauge.training import classification_error
    from nngauge.trajectories import through

    density = {"radius": settings.radius, "n_directions": settings.directions}
    return {
        "train_error": classification_error,
        "test_error": (held_out_error, {"held_out": test}),
        "density_train": ("region_density", {
            "data": train.inputs[:settings.density_points], **density}),
        "density_test": ("region_density", {
            "data": test.inputs[:settings.density_points], **density}),
        "trajectory_length": ("trajectory_length", {
            "trajectory": through(test.inputs[:settings.path_points], 8 * settings.path_points),
            "layers": [last_hidden(settings)], "tol": 1e-2, "max_points": 2**12 + 1}),
        "hessian": ("hessian", {
            "top_k": 1, "trace": False, "batch_size": settings.hessian_batch, "n_batches": 1,
            "n_iter": settings.lanczos_steps, "tol": 1e-3}),
        "sharpness": ("sharpness", {"n_iter": settings.sharpness_steps}),
        "nlc": "nlc",
    }


def last_hidden(settings: Settings) -> str:
    """The module name of the last hidden layer's activation."""
    return f"layers.{settings.hidden - 1}.act"


def network(settings: Settings, generator: torch.Generator) -> torch.nn.Module:
    """n hidden ReLU layers of width k, weights N(0, 2 / fan_in), biases 0, 10 outputs."""
    from nngauge.nn import mlp

    return mlp(64, settings.width, settings.hidden + 1, 10, activation="relu",
               init="gaussian", sigma_w=math.sqrt(SIGMA_W2), bias_std=0.0, generator=generator)


def compute(scale: str, generator: torch.Generator) -> Computed:
    """Train one network with the Tracker on; one row per measured step. ``extra["tracker"]``
    is the Tracker: its ``history``, its ``data`` (D) and ``seed``, and the weights at every
    measured step (``weight_snapshots``), with which any tracked value can be recomputed by
    the functional call."""
    from nngauge.training import Tracker, fit, log_steps

    settings = SETTINGS[scale]
    train, val, test = digit_splits(generator)
    last = settings.epochs * math.ceil(len(train.labels) / settings.batch_size)
    tracker = Tracker(tracked_measures(settings, train, test), data=train,
                      schedule=sorted({*log_steps(settings.per_decade, last), last}),
                      keep_weights=True)
    net = network(settings, generator)
    tracker.step(net)  # step 0: the initialization; fit's k-th update is then step k
    fit(net, train, val, lr=settings.lr, batch_size=settings.batch_size, loss_scaling=False,
        max_epochs=settings.epochs, patience=settings.epochs + 1, generator=generator,
        tracker=tracker)
    hidden = f"trajectory_length/{last_hidden(settings)}/length"
    rows = tuple(
        (record["step"], *(record[column] for column in TRACKED_COLUMNS.values()),
         record[hidden], record["trajectory_length/output/length"])
        for record in tracker.records)
    computed = Computed(columns=COLUMNS, rows=rows, extra={"tracker": tracker})
    return replace(computed, comparison=_comparison(computed))


def spearman(a, b) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value (NaN for a constant sequence)."""
    from scipy import stats

    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan, math.nan
    result = stats.spearmanr(a, b)
    return float(result.statistic), float(result.pvalue)


def _comparison(computed: Computed) -> tuple[Comparison, ...]:
    steps = computed.column("step")
    n = len(steps)
    out = []
    pairs = [(r, c) for r in REGION for c in CURVATURE]
    pairs += [(m, "test_error") for m in (*REGION, *CURVATURE, "nlc")]
    for a, b in pairs:
        rho, p = spearman(computed.column(a), computed.column(b))
        out.append(Comparison(f"Spearman rho: {LABELS[a]} vs {LABELS[b]}", rho,
                              key=f"rho_{a}_{b}", statistic="spearman", p_value=p, n=n,
                              note="over the logged training steps"))
    for name in ("test_error", "train_error", *REGION, *CURVATURE, "nlc"):
        values = computed.column(name)
        peak = int(np.argmax(values))
        out.append(Comparison(
            f"{name} at step {steps[-1]}", values[-1], None,
            f"step 0: {values[0]:.4g}; largest {values[peak]:.4g} at step {steps[peak]}",
            key=f"final_{name}"))
    return tuple(out)


def plot(computed: Computed, figure) -> None:
    figure.set_size_inches(11, 11)
    axes = figure.subplots(4, 2).ravel()
    panels = (
        (("train_error", "test_error"), "classification error", False),
        (("density_train", "density_test"), "regions per unit length (r-segments)", False),
        (("local_complexity_train", "local_complexity_test"), "local complexity (neurons)",
         False),
        (("trajectory_length", "trajectory_length_output"), "trajectory length", False),
        (("hessian_top",), "top Hessian eigenvalue", True),
        (("sharpness",), "Keskar sharpness (alpha = 5e-4)", True),
        (("nlc",), "NLC", False),
    )
    steps = computed.column("step")
    for ax, (names, title, log) in zip(axes, panels):
        for name in names:
            ax.plot(steps, computed.column(name), "o-", markersize=3, label=name)
        ax.set_xscale("symlog", linthresh=1)
        if log and all(v > 0 for name in names for v in computed.column(name)):
            ax.set_yscale("log")  # curvature falls by decades as the loss goes to 0
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        if ax is not axes[0]:
            ax.sharex(axes[0])
    for ax in axes[-3:-1]:
        ax.set_xlabel("SGD step")
    _plot_correlations(axes[-1], computed)


def _plot_correlations(ax, computed: Computed) -> None:
    """Spearman's rho of each region measure (rows) with each curvature measure and the test
    error (columns)."""
    others = (*CURVATURE, "test_error")
    matrix = np.array([[spearman(computed.column(r), computed.column(c))[0] for c in others]
                       for r in REGION])
    image = ax.imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r", aspect="auto")
    for (i, j), value in np.ndenumerate(matrix):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                color="white" if abs(value) > 0.6 else "black")
    ax.set_xticks(range(len(others)), others, fontsize=7)
    ax.set_yticks(range(len(REGION)), REGION, fontsize=7)
    ax.set_title("Spearman rho over training", fontsize=9)
    ax.figure.colorbar(image, ax=ax)


def judge(computed: Computed) -> Verdict:
    """Raghu et al. section 3.2 (training lengthens trajectories through the data) and Humayun
    et al. (local complexity near training points falls after an early rise)."""
    length = computed.column("trajectory_length")
    complexity = computed.column("local_complexity_train")
    error = computed.column("test_error")
    longer, learned = length[-1] > length[0], error[-1] < error[0]
    peak = max(complexity)
    migrated = complexity[-1] < peak and complexity.index(peak) > 0
    summary = (f"trajectory length {length[0]:.3g} -> {length[-1]:.3g}; test error "
               f"{error[0]:.3g} -> {error[-1]:.3g}; local complexity near training points "
               f"peaks at {peak:.3g} and ends at {complexity[-1]:.3g}")
    if longer and learned and migrated:
        return Verdict("reproduced", summary + ".")
    if longer and learned:
        return Verdict("qualitatively", summary + ": no late fall of the local complexity at "
                       "this scale.")
    return Verdict("differs", summary + ".")


REPRODUCTION = Reproduction(
    name="regions-and-loss",
    paper=cite("expressivity", "Theorem 2") + "; with " + ", ".join(
        short(key) for key in ("keskar", "humayun", "generalization", "nlc")),
    target="Regions, curvature and error over training (Raghu et al. Theorem 2; Keskar et al. "
           "2017; Humayun et al. 2024)",
    description="region density and local complexity near train and test points, trajectory "
                "length, top Hessian eigenvalue, Keskar sharpness, NLC and errors of a digits "
                "MLP at log-spaced SGD steps, and their Spearman rank correlations",
    differences={
        "small": (
            "no figure of the papers: the measures they relate to generalization, tracked "
            "together on one network (Humayun et al. follow local complexity over far longer "
            "training of image networks; Keskar et al. compare sharpness across batch sizes, "
            "not over training)",
            "scikit-learn digits (standardized, 60/20/20 split); MLP 64-48-48-48-10 ReLU; "
            "plain SGD, lr 0.05, minibatches of 32, 12 epochs (408 steps), 4 measurements "
            "per decade",
            "density and local complexity at 16 training and 16 test points, r = 0.5, 4 "
            "directions each; trajectory through 8 test points; Hessian on 128 training "
            "points, 15 Lanczos steps; sharpness by 50 ascent steps (Neyshabur et al., appendix A: "
            "2000)",
        ),
        "paper": (
            "as small with width 128, 3,000 epochs (102,000 steps), 8 measurements per decade",
            "128 points per set, 8 directions; trajectory through 32 test points; Hessian on "
            "1,024 training points, 60 Lanczos steps; sharpness by 500 ascent steps",
        ),
    },
    small_runtime="~10 s",
    compute=compute,
    plot=plot,
    claim=("Training lengthens trajectories through the data (Raghu et al. section 3.2) and, "
           "late in training, regions migrate away from the training points: their local "
           "complexity falls after an early rise (Humayun et al. 2024)."),
    judge=judge,
    n_seeds=3,
)
