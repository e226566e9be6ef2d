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

Two grids at the small scale, both printed and both judged. E.2 fixes the paper's grid: "40
different starting learning rates that form a geometric series with spacing factor 3", the
smallest at a relative update of 1e-8 ("We chose 10^-8 specifically so that our smallest starting
learning rate would be less than the smallest learning rate that can be meaningfully used under
32 bit precision"). Nothing in the paper justifies a shorter grid: B.1 calls the grid "a
heuristic, with the aim of providing a range of learning rates that would contain the ideal
learning rate with very high probability", and E.2 validated it by "checking that no
architecture that obtained a non-random test error attained its lowest validation error with
either the smallest five or largest five starting learning rates". So the small scale runs

- the *chosen* grid (keys as they are: ``8b_rho`` ...): 8 rates from a relative update of 1e-4,
  3 epochs per run, picked after a first look to keep the command short; and
- *E.2's* grid (keys ``e2_8b_rho`` ...): the paper's factor 3 and 40 rates from 1e-8, 1 epoch
  per run (what fits the command in about three minutes).

Each grid is judged alone (:func:`grid_status`; "bracketed" is E.2's validation, scaled to the
grid: no selected index among the lowest or highest :data:`MARGIN_FRACTION` of the rates, at
least one), and the verdict is the weaker of the two, since the chosen grid was picked after
looking; its reason states both. The paper scale runs E.2's grid alone.
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

COLUMNS = ("grid", "arch_index", "architecture", "nlc", "best_lr_index", "best_lr",
           "test_error", "lowest_train_error_index", "lowest_train_error_lr",
           "lowest_train_error", "generalizes", "trains")
MARGIN_FRACTION = 5 / 40
"""E.2: no selection among "the smallest five or largest five" of 40 rates; on a grid of n
rates, none among the round(n / 8) (at least 1) at either end."""
STATUS_ORDER = ("differs", "qualitatively", "reproduced")
"""Weakest first: the verdict over two grids is the weaker of their statuses."""

_SMALL = {
    "data": {"source": "waveform", "n": 500, "split": [0.6, 0.2, 0.2]},
    "architectures": {"sample": 24, "overrides": {"width": 16}},
    "measures": {"names": ["nlc"], "batch_size": 100},
}
SETTINGS = {
    "small": {
        "chosen": ({**_SMALL, "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 8,
                                           "lr_scale": 1e-4, "batch_size": 50,
                                           "max_epochs": 3}}, 2),
        "e2": ({**_SMALL, "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40,
                                       "lr_scale": 1e-8, "batch_size": 50, "max_epochs": 1}},
               2),
    },
    "paper": {
        "e2": ({
            "dtype": "float64",
            "data": {"source": "waveform", "n": 5000, "split": [0.6, 0.2, 0.2]},
            "architectures": {"sample": 250},
            "measures": {"names": ["nlc"], "batch_size": 250},
            "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40, "lr_scale": 1e-8,
                         "batch_size": 250},
        }, 0),
    },
}
"""Per scale and grid: (the study spec without name and seed, worker processes; 0: every
CPU). The first grid's comparisons have plain keys, the others' are prefixed (:data:`PREFIX`)."""
PREFIX = {"chosen": "", "e2": "e2_"}
LABELS = {"chosen": "the chosen grid (8 rates from 1e-4, 3 epochs)",
          "e2": "E.2's grid (40 rates from 1e-8, 1 epoch)"}


def compute(scale: str, generator: torch.Generator) -> Computed:
    seed = seed_of(generator)
    rows, comparison, grids = [], [], {}
    for i, (grid, (raw, workers)) in enumerate(SETTINGS[scale].items()):
        prefix = "" if i == 0 else PREFIX[grid]
        grid_rows, n_lrs, undefined = _run_grid(f"nlc-lr-{scale}-{grid}", seed, raw, workers)
        label = LABELS[grid] if scale == "small" else "E.2's grid"
        rows += [(grid, *r) for r in grid_rows]
        comparison += _comparison(grid_rows, n_lrs, undefined, prefix, label)
        grids[prefix] = (n_lrs, label)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"n_lrs": grids[""][0], "grids": grids})


def _run_grid(name: str, seed: int, raw: dict, workers: int):
    """One study: its rows (COLUMNS without ``grid``), grid size and dead architectures."""
    from nngauge.reproduce._nlc_study import _architecture_names
    from nngauge.studies import parse_spec, summarize

    spec = parse_spec({"name": name, "seed": seed, **raw})
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
    return rows, spec.training.auto_lr[1], undefined


def _comparison(rows, n_lrs: int, undefined: int, prefix: str = "",
                label: str = "") -> list[Comparison]:
    from scipy import stats

    records = [dict(zip(COLUMNS[1:], r)) for r in rows if positive(r[2])]
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
    where = f"{label}: " if label else ""
    return [
        Comparison(f"{where}7A: lowest selected grid index (lowest validation error)",
                   float(min(indices)) if indices else math.nan, None,
                   f"grid 0..{n_lrs - 1}; {len(general)} architectures better than chance",
                   key=f"{prefix}7a_lowest_index"),
        Comparison(f"{where}7A: highest selected grid index",
                   float(max(indices)) if indices else math.nan, None,
                   f"figure 7 and E.2: none within {margin(n_lrs)} of either end",
                   key=f"{prefix}7a_highest_index"),
        Comparison(f"{where}8A: Spearman rho(log NLC, log selected rate)", a[0],
                   key=f"{prefix}8a_rho", statistic="spearman", p_value=a[1], n=a[3]),
        Comparison(f"{where}8A: slope of log rate on log NLC", a[2], None, "least squares",
                   key=f"{prefix}8a_slope", statistic="slope"),
        Comparison(f"{where}8B: Spearman rho(log NLC, log rate of lowest training error)", b[0],
                   key=f"{prefix}8b_rho", statistic="spearman", p_value=b[1], n=b[3]),
        Comparison(f"{where}8B: slope of log rate on log NLC", b[2], -2.0,
                   "B.1: the rate should decay as the square of the NLC",
                   key=f"{prefix}8b_slope", statistic="slope"),
        Comparison(f"{where}architectures with a constant output at initialization",
                   float(undefined), None, "NLC undefined: left out",
                   key=f"{prefix}constant_output"),
    ]


def margin(n_lrs: int) -> int:
    """Rates at each end of a grid of ``n_lrs`` that no selection may use (E.2: 5 of 40)."""
    return max(1, round(n_lrs * MARGIN_FRACTION))


def grid_status(computed: Computed, prefix: str, n_lrs: int) -> tuple[str, str]:
    """One grid's status and numbers: figure 8's fall of the selected rate with the NLC
    (negative rank correlation, p < 0.05, for the training-error selection) at a slope within
    1 of B.1's -2, and figure 7's bracket (no selected index within :func:`margin` of either
    end). Both: reproduced; the fall alone: qualitatively; no fall: differs."""
    rho = computed.compared(f"{prefix}8b_rho")
    slope = computed.compared(f"{prefix}8b_slope").ours
    low = computed.compared(f"{prefix}7a_lowest_index").ours
    high = computed.compared(f"{prefix}7a_highest_index").ours
    ends = margin(n_lrs)
    numbers = (f"rho(log NLC, log rate) {rho.ours:.2f} ({rho.printed_statistics}), slope "
               f"{slope:.2f} (B.1: -2); selected indices {low:.0f}-{high:.0f} of 0-{n_lrs - 1}")
    bracketed = low >= ends and high <= n_lrs - 1 - ends
    falls = rho.ours < 0 and rho.significant()
    if falls and abs(slope + 2) <= 1 and bracketed:
        return "reproduced", numbers
    if falls:
        return "qualitatively", numbers + ": the rate falls with the NLC" + (
            "" if abs(slope + 2) <= 1 else ", at another power than -2") + (
            "" if bracketed else f"; the grid does not bracket every selected run (E.2: none "
            f"within {ends} of either end)")
    return "differs", numbers + ": no significant fall of the rate with the NLC"


def judge(computed: Computed) -> Verdict:
    """Each grid of ``extra["grids"]`` (prefix -> (rates, label); a record without it has one
    grid of ``extra["n_lrs"]`` rates with plain keys) judged by :func:`grid_status`; the
    verdict is the weakest of their statuses, its reason states each."""
    grids = computed.extra.get("grids") or {"": (computed.extra["n_lrs"], "")}
    judged = [(label, *grid_status(computed, prefix, n_lrs))
              for prefix, (n_lrs, label) in grids.items()]
    status = min((s for _, s, _ in judged), key=STATUS_ORDER.index)
    if len(judged) == 1:
        return Verdict(status, judged[0][2] + ".")
    reason = "; ".join(f"{label}: {s}, {text}" for label, s, text in judged)
    return Verdict(status, reason[:1].upper() + reason[1:] + ". The verdict is the weaker of "
                   "the grids' (the chosen grid was picked after a first look).")


def plot(computed: Computed, figure) -> None:
    """Per grid, one row of panels: figure 7's histogram of the selected indices, figure 8's
    selected rates against the NLC (A: validation error, B: training error) with NLC^-2."""
    grids = list(dict.fromkeys(computed.column("grid")))
    sizes = [n for n, _ in computed.extra["grids"].values()]
    labels = [label for _, label in computed.extra["grids"].values()]
    axes = np.atleast_2d(figure.subplots(len(grids), 3))
    for (ax7, ax8a, ax8b), grid, n_lrs, label in zip(axes, grids, sizes, labels):
        records = [r for r in computed.records() if r["grid"] == grid and positive(r["nlc"])]
        selected = ([r["best_lr_index"] for r in records if r["generalizes"]],
                    [r["lowest_train_error_index"] for r in records if r["trains"]])
        if any(selected):  # an empty histogram has no height to scale
            ax7.hist(selected, bins=np.arange(n_lrs + 1) - 0.5, color=["tab:blue", "tab:orange"],
                     label=["A: lowest validation error", "B: lowest training error"])
            ax7.legend(fontsize=6)
        ax7.set_xlabel("selected run (grid index)", fontsize=7)
        ax7.set_ylabel("architectures", fontsize=7)
        ax7.set_title(f"7: selected runs, {label}", fontsize=7)
        for ax, key, flag, title in ((ax8a, "best_lr", "generalizes",
                                      "8A: lowest validation error"),
                                     (ax8b, "lowest_train_error_lr", "trains",
                                      "8B: lowest training error")):
            kept = [r for r in records if r[flag]]
            ax.scatter([r["nlc"] for r in kept], [r[key] for r in kept], s=10, color="black")
            if len(kept) > 1:  # a line through, and log axes around, more than one point
                x = np.array([r["nlc"] for r in kept])
                middle = float(np.exp(np.mean(np.log([r[key] for r in kept]))))
                ax.plot(np.sort(x), middle * (np.sort(x) / np.exp(np.mean(np.log(x)))) ** -2.0,
                        color="tab:red", lw=0.8, label="NLC^-2")
                ax.legend(fontsize=6)
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.set_xlabel("NLC at initialization", fontsize=7)
            ax.set_ylabel("starting learning rate", fontsize=7)
            ax.set_title(title, fontsize=7)


REPRODUCTION = Reproduction(
    name="nlc-lr",
    paper=cite("nlc"),
    target="Figures 7-8",
    description="grid index and starting learning rate of the selected runs vs the NLC of "
                "sampled architectures on waveform-noise (per-network rate grids: a chosen "
                "8-rate grid and E.2's 40-rate grid)",
    differences={
        "small": (
            "24 sampled architectures of width 16 instead of 250 (waveform-noise) and CIFAR10's "
            "(figures 7A, 8A: waveform-noise here)",
            "two rate grids per architecture, both printed and judged, the verdict the weaker "
            "of the two: the chosen grid, 8 rates from a relative update of 1e-4 (factor 3) "
            "and at most 3 epochs per run, picked after a first look and not from the paper "
            "(with 3 epochs the largest stable rate tends to win, so the grid's top is "
            "selected and figure 7's upper margin is missing; a grid from 1e-3 selected its "
            "top three rates and lost the relation: rho -0.40, p 0.14 at seed 0); and E.2's "
            "grid, the paper's 40 rates from 1e-8 (factor 3), at most 1 epoch per run to keep "
            "the command near three minutes (3 epochs, at seed 0: rho -0.30, p 0.24, n 17 for "
            "8B, the same conclusion as 1 epoch)",
            "E.2 trains each run until its validation error stalls (10 / 5 epochs of patience, "
            "ten rate decays); here a run stops after its 3 (chosen grid) or 1 (E.2's grid) "
            "epochs",
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
    small_runtime="~150 s",
    compute=compute,
    plot=plot,
    claim=("The grid of starting rates brackets the selected ones (figure 7), and the selected "
           "rate falls as the initial NLC grows, for the training error roughly as NLC^-2 "
           "(figure 8, B.1)."),
    judge=judge,
    n_seeds=3,
)
