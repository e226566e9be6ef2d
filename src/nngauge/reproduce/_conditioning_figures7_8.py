"""``conditioning-figures7-8``: NormReLU against SELU, fully connected and residual (fig. 7-8).

Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural Networks" (ALT 2021),
appendix I.2 and I.3, on CIFAR-10, one learning rate per depth shared by both activations:

- figure 7: fully connected networks of two depths with NormReLU or SELU: "the training and
  generalization behavior of the two activations is very similar";
- figure 8: ResNets of two depths without batch normalization: "the two activations behave
  similarly in terms of speed of training and generalization performance, with NormReLU
  achieving slightly higher test accuracies".

Here a digits proxy (:mod:`nngauge.reproduce._conditioning_training`): fully connected MLPs and
residual MLPs (skips around pairs of layers) of two depths each, both activations trained at
every rate of the grid; per depth the rate shared by both is the one with the lowest mean
validation error of the two. Claims, one comparison each:

- ``fig7 training`` / ``fig8 training``: at every depth the mean training errors over the epochs
  differ by at most :data:`SIMILAR_TRAINING`;
- ``fig7 test`` / ``fig8 test``: at every depth the test errors differ by at most two standard
  errors of the difference (binomial, on the test digits);
- ``fig8 higher``: at every depth NormReLU's residual test error is the lower.

The verdict: "reproduced" when every claim holds, else "differs" naming the failing ones. Each
network is one run: run several seeds.
"""

from __future__ import annotations

import math

import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, digit_splits
from nngauge.reproduce._conditioning_training import (
    RUN_COLUMNS,
    SMALL,
    TrainSettings,
    claim_comparisons,
    claim_verdict,
    epochs_of,
    plot_curves,
    runs,
    similar_margin,
    train_grid,
)

SETTINGS = {
    "small": SMALL,
    "paper": TrainSettings(width=512, epochs=40, plain_depths=(10, 20),
                           residual_depths=(21, 41)),
}
SIMILAR_TRAINING = 0.02
"""Two mean training errors over the epochs are "similar" within this (as
``conditioning-figures3-5``'s margin for "faster")."""
PAIR = ("normrelu", "selu")


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    splits = digit_splits(generator)
    rows = []
    for figure, depths, residual in (("7", settings.plain_depths, False),
                                     ("8", settings.residual_depths, True)):
        for depth in depths:
            for name in PAIR:
                rows += train_grid(figure, name, depth, residual, settings, splits, generator)
    rows = _shared_rate(rows)
    computed = Computed(columns=RUN_COLUMNS, rows=tuple(rows),
                        comparison=(Comparison("test digits", len(splits[2].labels), None,
                                               "the standard errors' count", key="n_test"),))
    return Computed(columns=RUN_COLUMNS, rows=tuple(rows),
                    comparison=_comparisons(computed) + computed.comparison)


def _shared_rate(rows: list[tuple]) -> list[tuple]:
    """Mark as selected, per figure and depth, both activations' runs at the rate of the
    lowest mean (over the two) best validation error (ties: the smaller rate)."""
    col = {c: RUN_COLUMNS.index(c) for c in RUN_COLUMNS}
    best = {}
    for row in rows:
        val = row[col["val_error"]]
        if row[col["epoch"]] >= 0 and val is not None and math.isfinite(val):
            key = (row[col["figure"]], row[col["depth"]], row[col["lr"]], row[col["network"]])
            best[key] = min(best.get(key, math.inf), val)
    score = {}
    for (figure, depth, lr, _), val in best.items():
        score.setdefault((figure, depth, lr), []).append(val)
    chosen = {}
    for (figure, depth, lr), vals in sorted(score.items()):
        mean = sum(vals) / len(vals)
        if (figure, depth) not in chosen or mean < chosen[figure, depth][1]:
            chosen[figure, depth] = (lr, mean)
    sel = col["selected"]
    return [row[:sel] + (row[col["lr"]] == chosen[row[col["figure"]], row[col["depth"]]][0],)
            for row in rows]


def claims(computed: Computed) -> dict[str, dict]:
    """Each claim: whether it holds, the value printed and the text, read from the rows."""
    records = computed.records()
    epochs = epochs_of(records)
    n_test = int(computed.compared("n_test").ours)
    out = {}
    for figure in ("7", "8"):
        every = runs(records, figure, epochs)
        rates = {(r["depth"]): r["lr"] for r in records
                 if r["figure"] == figure and r["selected"] and r["epoch"] == -1}
        pairs = {d: (every["normrelu", d, lr], every["selu", d, lr]) for d, lr in rates.items()}
        train_gap = {d: abs(a.mean_train_error - b.mean_train_error) for d, (a, b) in
                     pairs.items()}
        out[f"fig{figure} training"] = dict(
            holds=all(g <= SIMILAR_TRAINING for g in train_gap.values()),
            value=max(train_gap.values()),
            text="|NormReLU - SELU| mean training error " + ", ".join(
                f"{g:.3g} at depth {d} (rate {rates[d]:g})" for d, g in sorted(train_gap.items())))
        apart = {d: abs(a.test_error - b.test_error) - similar_margin(a.test_error,
                                                                       b.test_error, n_test)
                 for d, (a, b) in pairs.items()}
        out[f"fig{figure} test"] = dict(
            holds=all(a <= 0 for a in apart.values()), value=max(apart.values()),
            text="test error " + "; ".join(
                f"depth {d}: NormReLU {a.test_error:.3f}, SELU {b.test_error:.3f}"
                for d, (a, b) in sorted(pairs.items())))
        if figure == "8":
            leads = {d: b.test_error - a.test_error for d, (a, b) in pairs.items()}
            out["fig8 higher"] = dict(
                holds=all(v > 0 for v in leads.values()), value=min(leads.values()),
                text="SELU - NormReLU test error " + ", ".join(
                    f"{v:.3g} at depth {d}" for d, v in sorted(leads.items())))
    return out


def _comparisons(computed: Computed) -> tuple[Comparison, ...]:
    found = claims(computed)
    labels = {
        "fig7 training": ("fig. 7: max |NormReLU - SELU| mean training error",
                          f"<= {SIMILAR_TRAINING:g}"),
        "fig7 test": ("fig. 7: max |NormReLU - SELU| test error minus 2 s.e.", "<= 0"),
        "fig8 training": ("fig. 8: max |NormReLU - SELU| mean training error (residual)",
                          f"<= {SIMILAR_TRAINING:g}"),
        "fig8 test": ("fig. 8: max |NormReLU - SELU| test error minus 2 s.e. (residual)",
                      "<= 0"),
        "fig8 higher": ("fig. 8: min over depths of SELU - NormReLU test error", "> 0"),
    }
    return claim_comparisons(found, labels)


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    panels = [(f, d, f"fig. {f}: {'residual' if f == '8' else 'fully connected'}, {d} layers")
              for f in ("7", "8")
              for d in sorted({r["depth"] for r in records if r["figure"] == f})]
    plot_curves(computed, figure, panels)


def judge(computed: Computed) -> Verdict:
    """Figures 7 and 8 claim by claim (module docstring), as the tests assert: "reproduced"
    when every claim holds, else "differs" naming the ones that fail."""
    return claim_verdict(claims(computed), "7-8",
                         "NormReLU and SELU train and generalize alike, NormReLU slightly "
                         "better in residual networks, on the digits proxy")


REPRODUCTION = Reproduction(
    name="conditioning-figures7-8",
    paper=cite("conditioning"),
    target="Figures 7 and 8 (appendix I.2)",
    description="NormReLU against SELU in fully connected and residual MLPs trained on digits "
                "at a shared cross-validated rate",
    differences={
        "small": (
            "scikit-learn's digits (1,078 train / 360 validation / 359 test, standardized) "
            "instead of CIFAR-10; residual MLPs (skips around pairs of layers) instead of "
            "convolutional ResNets",
            "fully connected depths 10 and 20, residual depths 11 and 21 (the paper's depths "
            "were lost from the text), width 128, 8 epochs of SGD (momentum 0.9, batches of "
            "64), one rate per depth for both activations chosen from 0.003 / 0.01 / 0.03 on "
            "validation digits (the paper: 300 epochs, cross-validated rates, 5 runs)",
            "one run per network: the verdict depends on the seed",
        ),
        "paper": (
            "digits and residual MLPs as at the small scale; residual depths 21 and 41, width "
            "512, 40 epochs",
        ),
    },
    small_runtime="~25 s",
    compute=compute,
    plot=plot,
    claim=("NormReLU and SELU train and generalize very similarly in fully connected networks "
           "(figure 7) and in ResNets without batch normalization, where NormReLU reaches "
           "slightly higher test accuracies (figure 8)."),
    judge=judge,
    n_seeds=3,
)
