"""``nlc-figure3``: output bias, NLC after training and error robustness over sampled
architectures (NLC paper, figure 3 A, B, C and E; appendices E.2-E.3).

From the NLC study on waveform-noise (:mod:`nngauge.reproduce._nlc_study`, shared with figures
2, 9 and 10), per architecture:

- A: the output bias before training, Q_{j,x} f(x, j) / Q_j(S_x f(x, j)) (section 4), against
  the test error of the selected run;
- B: the NLC before training against the NLC of the trained network (both on the training
  set, as the paper);
- C: the NLC of the trained network against the test error;
- E: the NLC before training against the largest error-preserving perturbation of the test set
  by the trained network (E.3: the relative size k of a random perturbation keeping the error
  over the path within 5% of the error at the data; median over random directions).

Panels D (training error without early stopping over 60 rates) and F (the study retrained with
Adam) are rebuilt by ``nlc-figure3-df`` (:mod:`nngauge.reproduce._nlc_figure3_df`): a
retraining and a second study beside this one.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce import _nlc_study
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_study import GROUPS, panel_verdict, positive

COLUMNS = ("arch_index", "architecture", "skip", "high_bias", "output_bias", "nlc",
           "nlc_after", "output_bias_after", "error_preserving_perturbation", "test_error")
CHANCE_ERROR = 2.0 / 3.0
"""Waveform-noise has 3 balanced classes: a constant classifier errs on 2/3 of the points."""
BETTER_THAN_CHANCE = CHANCE_ERROR - 0.1
"""A test error below this beats chance by a clear margin."""
LOW_BIAS = 10.0
"""An output bias below 10: the constant part of the output is at most about ten times the
part that varies with the input."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    from scipy import stats

    study = _nlc_study.run(scale, seed_of(generator))
    rows = tuple(
        (p["arch_index"], p["architecture"], p["skip"], p["high_bias"],
         p.get("output_bias", math.nan), p.get("nlc", math.nan),
         p.get("nlc_after", math.nan), p.get("output_bias_after", math.nan),
         p.get("error_preserving_perturbation_after", math.nan), p["test_error"])
        for p in study.points())
    records = [dict(zip(COLUMNS, r)) for r in rows]
    usable = [r for r in records if all(positive(r[c]) for c in
                                        ("output_bias", "nlc", "nlc_after"))]

    def spearman(x: str, y: str, chosen=usable) -> tuple[float, float, int]:
        pairs = [(r[x], r[y]) for r in chosen if positive(r[x]) and positive(r[y])]
        rho, p = stats.spearmanr(*zip(*pairs))
        return float(rho), float(p), len(pairs)

    ranked = sorted(usable, key=lambda r: r["test_error"])
    best = ranked[:math.ceil(0.1 * len(ranked))]
    bias_rho, bias_p, n = spearman("output_bias", "test_error")
    before_after = spearman("nlc", "nlc_after")
    before_error = spearman("nlc", "test_error")
    after_error = spearman("nlc_after", "test_error")
    robust = spearman("nlc", "error_preserving_perturbation", records)
    decreased = np.mean([r["nlc_after"] < r["nlc"] for r in usable])
    comparison = (
        Comparison("A: Spearman rho(output bias, test error)", bias_rho, key="a_rho",
                   statistic="spearman", p_value=bias_p, n=n,
                   note="the paper: a low initial bias is needed for a low test error (a "
                   "necessary condition, not a rank relation)"),
        Comparison("A: largest output bias of the best tenth", max(r["output_bias"]
                                                                   for r in best),
                   None, f"median over all: {np.median([r['output_bias'] for r in usable]):.3g}",
                   key="a_best_tenth_largest_bias"),
        Comparison("A: lowest test error with output bias > 1000",
                   min((r["test_error"] for r in usable if r["high_bias"]), default=math.nan),
                   None, f"{sum(r['high_bias'] for r in usable)} architectures (the paper's red "
                   f"points); chance: {CHANCE_ERROR:.3g}", key="a_high_bias_lowest_error"),
        Comparison("B: fraction of architectures whose NLC decreased in training",
                   float(decreased), None, "the paper: the vast majority", key="b_decreased"),
        Comparison("B: Spearman rho(NLC before, NLC after)", before_after[0], key="b_rho",
                   statistic="spearman", p_value=before_after[1],
                   note="the paper: before predicts after"),
        Comparison("C: Spearman rho(NLC after, test error)", after_error[0], key="c_rho",
                   statistic="spearman", p_value=after_error[1],
                   note=f"before training: {before_error[0]:.3f} (p = {before_error[1]:.3g}); "
                   "the paper: significantly lower after"),
        Comparison("E: Spearman rho(NLC before, error-preserving perturbation)", robust[0],
                   key="e_rho", statistic="spearman", p_value=robust[1], n=robust[2],
                   note="the paper: high-NLC architectures lose accuracy under tiny "
                   "perturbations"),
        Comparison("E: median error-preserving perturbation, NLC > 3 / NLC <= 3",
                   _median_ratio(usable), None, "relative sizes k of E.3",
                   key="e_perturbation_ratio"),
    )
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison,
                    extra={"before_error_rho": before_error[0]})


def _median_ratio(records: list[dict]) -> float:
    high = [r["error_preserving_perturbation"] for r in records if r["nlc"] > 3
            and positive(r["error_preserving_perturbation"])]
    low = [r["error_preserving_perturbation"] for r in records if r["nlc"] <= 3
           and positive(r["error_preserving_perturbation"])]
    return float(np.median(high) / np.median(low)) if high and low else math.nan


def judge(computed: Computed) -> Verdict:
    """Each panel's claim, with the deciding numbers: A, the best tenth starts with a low
    bias (< 10), and no architecture with a bias > 1000 beats chance (not tested when none
    was sampled); B, most NLCs decrease and the initial NLC predicts the final one
    (p < 0.05); C, the final NLC correlates less with test error than the initial one; E,
    the initial NLC correlates negatively with the error-preserving perturbation."""
    def ours(key: str) -> float:
        return computed.compared(key).ours

    before = computed.extra["before_error_rho"]
    before_after = computed.compared("b_rho")
    high_bias_error = ours("a_high_bias_lowest_error")
    checks = {
        "A (best tenth)": (ours("a_best_tenth_largest_bias") < LOW_BIAS,
                           f"largest initial bias of the best tenth "
                           f"{ours('a_best_tenth_largest_bias'):.3g} (rho(bias, error) "
                           f"{ours('a_rho'):.2f})"),
        "A (high bias)": (None if math.isnan(high_bias_error)
                          else not high_bias_error < BETTER_THAN_CHANCE,
                          "no architecture with a bias > 1000 was sampled"
                          if math.isnan(high_bias_error) else
                          f"lowest test error with a bias > 1000 {high_bias_error:.3g}"),
        "B": (ours("b_decreased") > 0.5 and before_after.ours > 0
              and before_after.significant(),
              f"NLC decreased for {ours('b_decreased'):.0%}, rho(before, after) "
              f"{before_after.ours:.2f} ({before_after.printed_statistics})"),
        "C": (ours("c_rho") < before,
              f"rho(after, error) {ours('c_rho'):.2f} vs before {before:.2f}"),
        "E": (ours("e_rho") < 0,
              f"rho(NLC, perturbation) {ours('e_rho'):.2f}"),
    }
    return panel_verdict(checks)


def plot(computed: Computed, figure) -> None:
    records = [r for r in computed.records()
               if positive(r["nlc"]) and positive(r["nlc_after"]) and positive(r["output_bias"])]
    axes = figure.subplots(2, 2).ravel()
    panels = (
        ("A", "output_bias", "test_error", "output bias before training", "test error"),
        ("B", "nlc", "nlc_after", "NLC before training", "NLC after training"),
        ("C", "nlc_after", "test_error", "NLC after training", "test error"),
        ("E", "nlc", "error_preserving_perturbation", "NLC before training",
         "error-preserving perturbation (k)"),
    )
    for ax, (panel, x, y, xlabel, ylabel) in zip(axes, panels):
        for label, color, chosen in GROUPS:
            group = [r for r in records if chosen(r) and positive(r[y])]
            ax.scatter([r[x] for r in group], [r[y] for r in group], s=12, color=color,
                       label=label)
        ax.set_xscale("log")
        if y != "test_error":
            ax.set_yscale("log")
        if panel == "B":
            low = min(min(r["nlc"], r["nlc_after"]) for r in records)
            high = max(max(r["nlc"], r["nlc_after"]) for r in records)
            ax.plot([low, high], [low, high], color="gray", lw=0.8, label="no change")
        if y == "test_error":
            ax.axhline(CHANCE_ERROR, color="gray", ls="--", lw=0.8, label="chance")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        rho = computed.compared(f"{panel.lower()}_rho")
        ax.set_title(f"{rho.quantity} {rho.ours:.2f}", fontsize=8)
    axes[0].legend(fontsize=6)


REPRODUCTION = Reproduction(
    name="nlc-figure3",
    paper=cite("nlc"),
    target="Figure 3 (A, B, C, E)",
    description="output bias before training vs test error, NLC before vs after training, "
                "NLC after training vs test error, NLC vs the error-preserving perturbation "
                "(E.3) of sampled architectures on waveform-noise",
    differences={
        scale: (*_nlc_study.DIFFERENCES[scale],
                "the error-preserving perturbation uses one batch of the test set when it "
                "holds at most one batch (the paper's 10 batches of 250 from 1000 points) and "
                "10 random directions",
                "panel D (training error of 50 architectures retrained without early stopping "
                "over 60 rates from 1e-16) and panel F (the study retrained with Adam) are "
                "`nngauge reproduce nlc-figure3-df`")
        for scale in ("small", "paper")},
    small_runtime="~75 s",
    compute=compute,
    plot=plot,
    claim=("A low output bias before training is needed for a low test error (A); training "
           "lowers the NLC of most architectures and the initial NLC predicts the final one "
           "(B); the NLC after training predicts test error less well than before (C); "
           "high-NLC architectures lose accuracy under tiny input perturbations (E)."),
    judge=judge,
    n_seeds=3,
)
