"""``neyshabur-figure4``: norm-based capacities and the PAC-Bayes measure of two-layer
perceptrons of growing width (Neyshabur, Bhojanapalli, McAllester & Srebro, "Exploring
Generalization in Deep Learning", NIPS 2017, section 3 "Increasing Network Size", figure 4).

The paper trains a two-layer ReLU perceptron (one hidden layer) on MNIST with a growing number
of hidden units, without explicit regularization (appendix A's SGD until the cross-entropy is
below 1e-4), and plots per width: the training and test error (left; "32 hidden units are
enough to fit the training data", "networks with more hidden units generalize better"), the
l2, l1-path, l2-path and spectral norms over the margin (middle) and the bi-criteria PAC-Bayes
curves (right). Its reading: all margin/norm measures decrease up to 128 hidden units; beyond,
the l2 norm and the l1-path norm increase with the size; the l2-path norm keeps decreasing but
its capacity, with the width factors, does not, nor does the spectral one; the spectral norm
itself increases "beyond 512"; the PAC-Bayes measure decreases up to 128 and "fails to explain
this generalization behavior for larger networks".

We train ``repeats`` networks per width on MNIST-1D (:func:`nngauge.data.mnist1d`, by
:func:`width_sweep`, shared with ``examples/width_sweep.py``) and measure each as figures 1 and
2: :func:`nngauge.capacity` at the 5th-percentile margin (plain: what the figure plots; with
constants and width factors: the capacity), and the PAC-Bayes curve (:func:`nngauge.pac_bayes`,
noise alpha (10 |w_i| + 1)) read at expected sharpness 0.05 (as ``neyshabur-figure2``).

The claim is judged on the fitted networks (zero training error), each trend by Spearman's rho
with the width and its p-value (significant below :data:`SIGNIFICANCE`) over all networks of
the "smaller" widths (up to the median width: the paper's "up to 128") or of the "larger" ones
(from the median width on): the test error falls over all widths; every plain measure falls
over the smaller widths; over the larger ones the plain l2 and l1-path rise, the plain l2-path
falls while its capacity with width factors rises, and the spectral capacity with width
factors rises; the plain spectral ends above its minimum (mean over networks, largest width);
the KL at fixed expected sharpness falls over the smaller widths and does not fall (rho >= 0)
over the larger ones. Every part must hold ("reproduced"); any failing: "differs".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import SIGNIFICANCE, Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._neyshabur_figure2 import EPSILON, kl_at
from nngauge.reproduce._neyshabur_random_labels import Fitted, error_rate, fit_mlp

MEASURES = ("l2", "l1_path", "l2_path", "spectral")
COLUMNS = ("width", "repeat", "train_error", "test_error", "train_loss", "epochs", "margin",
           *(f"log10_{m}" for m in MEASURES), *(f"log10_{m}_capacity" for m in MEASURES),
           "kl_at_epsilon")


@dataclass(frozen=True)
class Settings:
    n_train: int
    n_test: int
    widths: tuple[int, ...]
    repeats: int
    lr: float
    loss_target: float
    max_epochs: int
    alphas: tuple[float, ...]
    n_probes: int


SETTINGS = {
    "small": Settings(n_train=2000, n_test=1000, widths=(64, 128, 256, 512, 1024), repeats=3,
                      lr=0.05, loss_target=1e-2, max_epochs=300,
                      alphas=tuple(float(a) for a in np.geomspace(1e-3, 1e-1, 7)),
                      n_probes=50),
    "paper": Settings(n_train=4000, n_test=1000,
                      widths=(32, 64, 128, 256, 512, 1024, 2048, 4096), repeats=3, lr=0.01,
                      loss_target=1e-4, max_epochs=5000,
                      alphas=tuple(float(a) for a in np.geomspace(1e-3, 1e-1, 13)),
                      n_probes=1000),
}


@dataclass(frozen=True)
class WidthPoint:
    """One network of :func:`width_sweep`: its hidden ``width``, which ``repeat`` at that
    width, the fitted network, how training ended, its test error and its
    :func:`nngauge.capacity` on the training set (5th-percentile margin)."""

    width: int
    repeat: int
    net: torch.nn.Module
    fitted: Fitted
    test_error: float
    capacity: "CapacityResult"  # noqa: F821


def width_sweep(train, test, widths, *, repeats: int, lr: float, loss_target: float,
                max_epochs: int, generator: torch.Generator) -> Iterator[WidthPoint]:
    """Section 3's experiment: for each hidden width, ``repeats`` two-layer ReLU perceptrons
    (one hidden layer, He-scaled Gaussian weights) fitted to ``train`` by appendix A's SGD
    (minibatch 64, momentum 0.9, learning rate ``lr``) until the training cross-entropy is
    below ``loss_target`` or ``max_epochs`` pass (:func:`fit_mlp`), each measured on ``test``
    and by :func:`nngauge.capacity` on ``train``. ``train``, ``test``: (inputs, labels)."""
    import warnings

    from nngauge import capacity

    x, y = train
    for width in widths:
        for repeat in range(repeats):
            net, fitted = fit_mlp(x, y, width=width, depth=2, lr=lr, loss_target=loss_target,
                                  max_epochs=max_epochs, generator=generator)
            with warnings.catch_warnings():  # a network that does not fit: NaN capacities
                warnings.filterwarnings("ignore", message=r"capacity\(\): the margin")
                measured = capacity(net, x, y, percentile=5)
            yield WidthPoint(width, repeat, net, fitted, error_rate(net, *test), measured)


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge import pac_bayes
    from nngauge.data import mnist1d

    settings = SETTINGS[scale]
    train, test = mnist1d(settings.n_train, settings.n_test)
    rows = []
    for point in width_sweep(train, test, settings.widths, repeats=settings.repeats,
                             lr=settings.lr, loss_target=settings.loss_target,
                             max_epochs=settings.max_epochs, generator=generator):
        result = point.capacity
        at_eps = math.nan
        if point.fitted.train_error == 0:
            curve = pac_bayes(point.net, tuple(train), alphas=settings.alphas,
                              n_probes=settings.n_probes, noise="relative",
                              generator=generator)
            at_eps = kl_at(np.array([p.expected_sharpness for p in curve.points]),
                           np.array([p.kl for p in curve.points]), EPSILON)
        rows.append((point.width, point.repeat, point.fitted.train_error, point.test_error,
                     point.fitted.loss, point.fitted.epochs, result.margin,
                     *(result[m].log10_plain for m in MEASURES),
                     *(result[m].log10_capacity for m in MEASURES), at_eps))
    computed = Computed(columns=COLUMNS, rows=tuple(rows))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=_comparisons(computed),
                    extra={"epsilon": EPSILON})


# ---------------------------------------------------------------- the claim, part by part


PARTS = (  # key, column, widths ("all", "smaller", "larger"), direction (-1 falls, +1 rises)
    ("test_error", "test_error", "all", -1),
    *((f"smaller_{m}", f"log10_{m}", "smaller", -1) for m in MEASURES),
    ("larger_l2", "log10_l2", "larger", 1),
    ("larger_l1_path", "log10_l1_path", "larger", 1),
    ("larger_l2_path", "log10_l2_path", "larger", -1),
    ("larger_l2_path_capacity", "log10_l2_path_capacity", "larger", 1),
    ("larger_spectral_capacity", "log10_spectral_capacity", "larger", 1),
    ("smaller_kl", "kl_at_epsilon", "smaller", -1),
)
"""The trends of figure 4 judged by Spearman's rho with the width (significant, this sign)."""
WHAT = {
    "test_error": "the test error falls with the width",
    "smaller": "every norm over the margin falls up to the median width",
    "larger_l2": "the l2 norm over the margin rises beyond it",
    "larger_l1_path": "the l1-path norm over the margin rises beyond it",
    "larger_l2_path": "the plain l2-path falls beyond it",
    "larger_l2_path_capacity": "the l2-path capacity with width factors rises beyond it",
    "larger_spectral_capacity": "the spectral capacity with width factors rises beyond it",
    "spectral_ends_higher": "the plain spectral norm over the margin ends above its minimum",
    "smaller_kl": f"the KL at expected sharpness {EPSILON} falls up to the median width",
    "larger_kl": "and does not fall beyond it",
}


def fitted_records(computed: Computed) -> list[dict]:
    """The networks with zero training error (the paper's setting), as dicts."""
    return [r for r in computed.records() if r["train_error"] == 0]


def width_range(widths, which: str) -> list[int]:
    """All the widths, the smaller ones (up to the median width) or the larger ones (from
    it on)."""
    widths = sorted(set(widths))
    half = len(widths) // 2
    return {"all": widths, "smaller": widths[:half + 1], "larger": widths[half:]}[which]


def trend(computed: Computed, column: str, which: str) -> tuple[float, float, int]:
    """Spearman's rho of ``column`` (log10 for the KL) with the width over the fitted
    networks of the width range ``which``, its two-sided p-value and the count (NaN values
    left out; fewer than 3 networks: NaN)."""
    from scipy import stats

    records = fitted_records(computed)
    chosen = width_range([r["width"] for r in records], which)
    pairs = [(r["width"], r[column]) for r in records
             if r["width"] in chosen and math.isfinite(r[column])]
    if len(pairs) < 3 or len({w for w, _ in pairs}) < 2:
        return math.nan, math.nan, len(pairs)
    rho, p = stats.spearmanr(*zip(*pairs))
    return float(rho), float(p), len(pairs)


def _comparisons(computed: Computed) -> tuple[Comparison, ...]:
    out = []
    for key, column, which, sign in (*PARTS, ("larger_kl", "kl_at_epsilon", "larger", 1)):
        rho, p, n = trend(computed, column, which)
        out.append(Comparison(f"Spearman rho(width, {column}), {which} widths", rho, None,
                              "figure 4: " + ("< 0" if sign < 0 else "> 0")
                              + (" (>= 0 suffices: 'fails to explain')"
                                 if key == "larger_kl" else ""),
                              key=key, statistic="spearman", p_value=p, n=n))
    means = _spectral_means(computed)
    out.append(Comparison("plain spectral over margin^2 (log10, mean): largest width minus its "
                          "minimum over widths",
                          means[-1] - min(means) if means else math.nan, None,
                          "figure 4: > 0 ('some increase in spectral norm ... beyond 512')",
                          key="spectral_ends_higher"))
    return tuple(out)


def _spectral_means(computed: Computed) -> list[float]:
    records = fitted_records(computed)
    widths = sorted({r["width"] for r in records})
    return [float(np.mean([r["log10_spectral"] for r in records if r["width"] == w]))
            for w in widths]


def judge(computed: Computed) -> Verdict:
    """Every part of figure 4's claim (module docstring), each a Spearman trend over the fitted
    networks with p below :data:`SIGNIFICANCE` and the paper's sign, except "does not fall"
    (rho >= 0) and "ends above its minimum" (difference > 0). Missing data fails a part."""
    results = {}
    for key, column, which, sign in PARTS:
        rho, p, n = trend(computed, column, which)
        results[key] = (rho * sign > 0 and p < SIGNIFICANCE,
                        f"rho {rho:.2f}, p = {p:.2g}, n = {n}")
    rho, p, n = trend(computed, "kl_at_epsilon", "larger")
    results["larger_kl"] = (rho >= 0, f"rho {rho:.2f}, p = {p:.2g}, n = {n}")
    means = _spectral_means(computed)
    ends = means[-1] - min(means) if means else math.nan
    results["spectral_ends_higher"] = (ends > 0, f"{ends:.3f} log10 above its minimum")
    smaller = [f"smaller_{m}" for m in MEASURES]
    results["smaller"] = (all(results[k][0] for k in smaller), "; ".join(
        f"{k[len('smaller_'):]}: {results[k][1]}" for k in smaller))
    lines = [f"{WHAT[k]} {'holds' if results[k][0] else 'fails'} ({results[k][1]})"
             for k in WHAT]
    unfitted = len(computed.rows) - len(fitted_records(computed))
    reason = "; ".join(lines) + (f"; {len(fitted_records(computed))} fitted networks"
                                 + (f" ({unfitted} that did not fit left out)" if unfitted
                                    else "") + ".")
    reason = reason[0].upper() + reason[1:]
    if all(results[k][0] for k in WHAT):
        return Verdict("reproduced", reason)
    return Verdict("differs", reason)


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    widths = sorted({r["width"] for r in records})
    left, middle, right = figure.subplots(1, 3)

    def mean(column, w):
        values = [r[column] for r in records if r["width"] == w and math.isfinite(r[column])]
        return float(np.mean(values)) if values else math.nan

    left.plot(widths, [mean("train_error", w) for w in widths], "o-", label="training")
    left.plot(widths, [mean("test_error", w) for w in widths], "s-", label="test")
    left.set_ylabel("error (mean over networks)")
    left.legend(fontsize=7)
    for i, m in enumerate(MEASURES):
        middle.plot(widths, [mean(f"log10_{m}", w) for w in widths], "o-", color=f"C{i}",
                    label=m.replace("_", "-"))
        if m in ("l2_path", "spectral"):
            middle.plot(widths, [mean(f"log10_{m}_capacity", w) for w in widths], "s--",
                        color=f"C{i}", label=f"{m.replace('_', '-')} x widths")
    middle.set_ylabel("log10 norm / margin^2")
    middle.legend(fontsize=6)
    right.plot(widths, [mean("kl_at_epsilon", w) for w in widths], "o-")
    right.set_yscale("log")
    right.set_ylabel(f"KL at expected sharpness {computed.extra.get('epsilon', EPSILON)}")
    for ax in (left, middle, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("hidden units")


REPRODUCTION = Reproduction(
    name="neyshabur-figure4",
    paper=cite("generalization"),
    target="Figure 4",
    description="training and test error, norm-based capacities over margin and KL at a fixed "
                "expected sharpness of two-layer ReLU perceptrons of growing width (MNIST-1D)",
    differences={
        "small": (
            "MNIST-1D (40 features, 2000 training and 1000 test signals) instead of MNIST, "
            "which is not bundled: the network fits its training set from 64 hidden units "
            "(the paper: 32), so the widths are 64-1024 (the paper: 8 up to thousands) and "
            "'up to 128' is read as up to the median width, 256",
            "3 networks per width; SGD learning rate 0.05 instead of 0.01, trained until the "
            "training cross-entropy is below 1e-2 (at most 300 epochs) instead of 1e-4",
            "expected sharpness over 50 perturbations instead of 1000, at 7 alphas (1e-3 to "
            "1e-1); each curve summarized by its KL at expected sharpness 0.05",
            "the paper prints no numbers for figure 4: only directions are compared",
        ),
        "paper": (
            "MNIST-1D (4000 training and 1000 test signals) instead of MNIST, widths 32-4096, "
            "3 networks per width, at most 5000 epochs",
            "the paper prints no numbers for figure 4: only directions are compared",
        ),
    },
    small_runtime="~40 s",
    compute=compute,
    plot=plot,
    claim=("Wider two-layer perceptrons generalize better, but the norm-based measures do not "
           "explain it: every norm over the margin falls up to a moderate width, then the l2 "
           "and l1-path norms rise, the l2-path norm falls while its capacity with the width "
           "factors rises, as does the spectral capacity, the spectral norm rises at the "
           "largest widths, and the PAC-Bayes KL at a fixed expected sharpness falls up to a "
           "moderate width and not beyond (section 3, figure 4)."),
    judge=judge,
    n_seeds=3,
)
