"""``nlc-lr``: the learning rates the study selects, against the NLC (NLC paper, figures 7-8;
appendices B.1 and E.2).

A study on waveform-noise (:mod:`nngauge.studies`): sampled architectures (appendix C), each
trained from a geometric grid of starting rates that begins at its own smallest rate (E.2:
``smallest_lr``, the rate at which the summed relative weight update is ``lr_scale``; factor
3 between rates). Per architecture: the NLC at initialization; the grid index and rate of the
run of lowest validation error (figures 7A, 8A) and of the run of lowest training error
(figures 7B, 8B). Architectures that did not beat chance (the paper's filter: better-than-random
test error for A, training error for B) are marked and left out of the fits.

The paper's claims: the selected indices leave a margin of never-chosen runs on each side of
the grid (figure 7: the grid brackets the ideal rate); the selected rate falls as the NLC
grows, and for the training error roughly as NLC^-2 (figure 8B, B.1: "the learning rate should
decay as the square of the NLC").
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import (
    Comparison,
    Computed,
    Reproduction,
    Verdict,
    run_reproduction_study,
)
from nngauge.reproduce._nlc_figure3 import BETTER_THAN_CHANCE
from nngauge.reproduce._nlc_study import positive, undefined_at_initialization

COLUMNS = ("arch_index", "architecture", "nlc", "best_lr_index", "best_lr", "test_error",
           "lowest_train_error_index", "lowest_train_error_lr", "lowest_train_error",
           "generalizes", "trains")

SETTINGS = {
    "small": ({
        "data": {"source": "waveform", "n": 500, "split": [0.6, 0.2, 0.2]},
        "architectures": {"sample": 24, "overrides": {"width": 16}},
        "measures": {"names": ["nlc"], "batch_size": 100},
        "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 8, "lr_scale": 1e-4,
                     "batch_size": 50, "max_epochs": 3},
    }, 2),
    "paper": ({
        "dtype": "float64",
        "data": {"source": "waveform", "n": 5000, "split": [0.6, 0.2, 0.2]},
        "architectures": {"sample": 250},
        "measures": {"names": ["nlc"], "batch_size": 250},
        "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40, "lr_scale": 1e-8,
                     "batch_size": 250},
    }, 0),
}
"""Per scale: (the study spec without name and seed, worker processes; 0: every CPU)."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.reproduce._nlc_study import _architecture_names
    from nngauge.studies import parse_spec, summarize

    raw, workers = SETTINGS[scale]
    spec = parse_spec({"name": f"nlc-lr-{scale}", "seed": seed_of(generator), **raw})
    with tempfile.TemporaryDirectory(prefix="nlc-lr-") as folder:
        url = f"sqlite:///{Path(folder) / 'study.db'}"
        undefined = undefined_at_initialization(
            run_reproduction_study(spec, url, workers).failed)
        summary = summarize(url)
        names = _architecture_names(url, spec.study_id)
    rows = tuple(
        (p["arch_index"], names[p["arch_index"]], p.get("nlc", math.nan), p["best_lr_index"],
         p["best_lr"], p["test_error"], p["lowest_train_error_index"],
         p["lowest_train_error_lr"], p["lowest_train_error"],
         p["test_error"] < BETTER_THAN_CHANCE, p["lowest_train_error"] < BETTER_THAN_CHANCE)
        for p in summary.points)
    n_lrs = spec.training.auto_lr[1]
    return Computed(columns=COLUMNS, rows=rows, comparison=_comparison(rows, n_lrs, undefined),
                    extra={"n_lrs": n_lrs})


def _comparison(rows, n_lrs: int, undefined: int) -> tuple[Comparison, ...]:
    from scipy import stats

    records = [dict(zip(COLUMNS, r)) for r in rows if positive(r[2])]
    general = [r for r in records if r["generalizes"]]
    trained = [r for r in records if r["trains"]]
    indices = [r["best_lr_index"] for r in general]

    def relation(chosen, lr_key):
        x = np.log10([r["nlc"] for r in chosen])
        y = np.log10([r[lr_key] for r in chosen])
        rho, p = stats.spearmanr(x, y)
        return float(rho), float(p), float(np.polyfit(x, y, 1)[0]), len(chosen)

    a = relation(general, "best_lr") if len(general) >= 3 else (math.nan,) * 3 + (0,)
    b = relation(trained, "lowest_train_error_lr") if len(trained) >= 3 else (math.nan,) * 3 + (0,)
    return (
        Comparison("7A: lowest selected grid index (lowest validation error)",
                   float(min(indices)) if indices else math.nan, None,
                   f"grid 0..{n_lrs - 1}; {len(general)} architectures better than chance",
                   key="7a_lowest_index"),
        Comparison("7A: highest selected grid index",
                   float(max(indices)) if indices else math.nan, None,
                   "figure 7: a margin of never-chosen runs on each side",
                   key="7a_highest_index"),
        Comparison("8A: Spearman rho(log NLC, log selected rate)", a[0], key="8a_rho",
                   statistic="spearman", p_value=a[1], n=a[3]),
        Comparison("8A: slope of log rate on log NLC", a[2], None, "least squares",
                   key="8a_slope", statistic="slope"),
        Comparison("8B: Spearman rho(log NLC, log rate of lowest training error)", b[0],
                   key="8b_rho", statistic="spearman", p_value=b[1], n=b[3]),
        Comparison("8B: slope of log rate on log NLC", b[2], -2.0,
                   "B.1: the rate should decay as the square of the NLC", key="8b_slope",
                   statistic="slope"),
        Comparison("architectures with a constant output at initialization", float(undefined),
                   None, "NLC undefined: left out", key="constant_output"),
    )


def judge(computed: Computed) -> Verdict:
    """Figure 8's claim: the selected rate falls with the NLC (negative rank correlation,
    p < 0.05, for the training-error selection), at a slope within 1 of B.1's -2; figure 7's:
    the grid brackets the selected runs (no selection at either end of the grid). Both hold:
    reproduced; the fall alone: qualitatively."""
    rho = computed.compared("8b_rho")
    slope = computed.compared("8b_slope").ours
    low = computed.compared("7a_lowest_index").ours
    high = computed.compared("7a_highest_index").ours
    n_lrs = computed.extra["n_lrs"]
    numbers = (f"rho(log NLC, log rate) {rho.ours:.2f} ({rho.printed_statistics}), slope "
               f"{slope:.2f} (B.1: -2); selected indices {low:.0f}-{high:.0f} of 0-{n_lrs - 1}")
    bracketed = low > 0 and high < n_lrs - 1
    falls = rho.ours < 0 and rho.significant()
    if falls and abs(slope + 2) <= 1 and bracketed:
        return Verdict("reproduced", numbers + ".")
    if falls:
        return Verdict("qualitatively", numbers + ": the rate falls with the NLC" + (
            "" if abs(slope + 2) <= 1 else ", at another power than -2") + (
            "" if bracketed else "; the grid does not bracket every selected run") + ".")
    return Verdict("differs", numbers + ": no significant fall of the rate with the NLC.")


def plot(computed: Computed, figure) -> None:
    records = [r for r in computed.records() if positive(r["nlc"])]
    ax7, ax8a, ax8b = figure.subplots(1, 3)
    n_lrs = computed.extra["n_lrs"]
    ax7.hist([[r["best_lr_index"] for r in records if r["generalizes"]],
              [r["lowest_train_error_index"] for r in records if r["trains"]]],
             bins=np.arange(n_lrs + 1) - 0.5, color=["tab:blue", "tab:orange"],
             label=["A: lowest validation error", "B: lowest training error"])
    ax7.legend(fontsize=7)
    ax7.set_xlabel("selected run (grid index)", fontsize=8)
    ax7.set_ylabel("architectures", fontsize=8)
    ax7.set_title("7: selected runs", fontsize=9)
    for ax, key, flag, title in ((ax8a, "best_lr", "generalizes", "8A: lowest validation error"),
                                 (ax8b, "lowest_train_error_lr", "trains",
                                  "8B: lowest training error")):
        kept = [r for r in records if r[flag]]
        ax.scatter([r["nlc"] for r in kept], [r[key] for r in kept], s=12, color="black")
        if kept:
            x = np.array([r["nlc"] for r in kept])
            middle = float(np.exp(np.mean(np.log([r[key] for r in kept]))))
            ax.plot(np.sort(x), middle * (np.sort(x) / np.exp(np.mean(np.log(x)))) ** -2.0,
                    color="tab:red", lw=0.8, label="NLC^-2")
            ax.legend(fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("NLC at initialization", fontsize=8)
        ax.set_ylabel("starting learning rate", fontsize=8)
        ax.set_title(title, fontsize=9)


REPRODUCTION = Reproduction(
    name="nlc-lr",
    paper=cite("nlc"),
    target="Figures 7-8",
    description="grid index and starting learning rate of the selected runs vs the NLC of "
                "sampled architectures on waveform-noise (E.2's per-network rate grid)",
    differences={
        "small": (
            "24 sampled architectures of width 16 instead of 250 (waveform-noise) and CIFAR10's "
            "(figures 7A, 8A: waveform-noise here)",
            "8 rates per architecture from a relative update of 1e-4 (factor 3) instead of 40 "
            "from 1e-8, and at most 3 epochs per run: with 3 epochs the largest stable rate "
            "tends to win, so the grid's top is selected (figure 7's upper margin is missing); "
            "a grid from 1e-3 selected its top three rates and lost the relation (rho -0.40, "
            "p 0.14 at seed 0)",
            "the paper's 60-rate retraining without early stopping (7B, 8B) is the same "
            "study's run of lowest training error here",
            "500 waveform points (300/100/100) instead of 5000; float32",
        ),
        "paper": (
            "waveform-noise instead of CIFAR10 for figures 7A and 8A",
            "7B and 8B read the 40-rate study's run of lowest training error, not a 60-rate "
            "retraining from 1e-16 without early stopping",
            "10,000 training runs: days on one CPU machine, hence --ray ADDRESS for a cluster",
        ),
    },
    small_runtime="~45 s",
    compute=compute,
    plot=plot,
    claim=("The grid of starting rates brackets the selected ones (figure 7), and the selected "
           "rate falls as the initial NLC grows, for the training error roughly as NLC^-2 "
           "(figure 8, B.1)."),
    judge=judge,
)
