"""``nlc-figure9``: the output bias before and after training (NLC paper, figure 9; appendix
B.2).

From the NLC study on waveform-noise (:mod:`nngauge.reproduce._nlc_study`), per architecture,
with the output bias Q_{j,x} f(x, j) / Q_j(S_x f(x, j)) (section 4; >= 1, 1 for an output of
mean zero over the data) computed on the training set:

- A: bias before training against bias of the trained network (the selected run);
- B: bias after training against test error;
- C: bias before training against the NLC before training.

B.2's claims: the bias, like the NLC, decreases during training in many cases, often to near
its floor; a low bias after training is necessary for a better-than-random test error; many
architectures have a high bias but a low NLC, so the bias predicts test error beyond the NLC.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce import _nlc_study
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_figure3 import BETTER_THAN_CHANCE, CHANCE_ERROR
from nngauge.reproduce._nlc_study import finite, panel_verdict, positive

COLUMNS = ("arch_index", "architecture", "skip", "high_bias", "output_bias",
           "output_bias_after", "nlc", "test_error")
HIGH = 10.0
"""An output bias above 10: most of the output is a constant offset (the paper's red flag
is 1000, its figure 9 shows the whole range)."""
LOW_NLC = 3.0
"""The upper end of the paper's ideal NLC range (section 4)."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    from scipy import stats

    study = _nlc_study.run(scale, seed_of(generator))
    rows = tuple((p["arch_index"], p["architecture"], p["skip"], p["high_bias"],
                  p.get("output_bias", math.nan), p.get("output_bias_after", math.nan),
                  p.get("nlc", math.nan), p["test_error"]) for p in study.points())
    records = [dict(zip(COLUMNS, r)) for r in rows
               if positive(r[4]) and positive(r[5]) and positive(r[6]) and finite(r[7])]
    before = np.array([r["output_bias"] for r in records])
    after = np.array([r["output_bias_after"] for r in records])
    error = np.array([r["test_error"] for r in records])
    nlc = np.array([r["nlc"] for r in records])
    good = error < BETTER_THAN_CHANCE
    rho, p = stats.spearmanr(after, error)
    partial = _partial_spearman(before, error, np.log(nlc))
    comparison = (
        Comparison("A: fraction of architectures whose bias decreased in training",
                   float(np.mean(after < before)), None, "B.2: in many cases",
                   key="a_decreased", n=len(records)),
        Comparison("A: median bias - 1, before / after training",
                   float(np.median(before - 1) / np.median(after - 1)), None,
                   f"{np.median(before - 1):.3g} / {np.median(after - 1):.3g}",
                   key="a_median_bias_ratio"),
        Comparison("B: largest bias after training, test error < "
                   f"{BETTER_THAN_CHANCE:.3g}", float(after[good].max()) if good.any()
                   else math.nan, None, f"{int(good.sum())} architectures better than chance",
                   key="b_good_largest_bias"),
        Comparison(f"B: lowest test error with a bias after training > {HIGH:g}",
                   float(error[after > HIGH].min()) if (after > HIGH).any() else math.nan,
                   None, f"{int((after > HIGH).sum())} architectures; chance: "
                   f"{CHANCE_ERROR:.3g}", key="b_high_bias_lowest_error"),
        Comparison("B: Spearman rho(bias after training, test error)", float(rho), key="b_rho",
                   statistic="spearman", p_value=float(p),
                   note="B.2: a low final bias is necessary for a low test error"),
        Comparison(f"C: architectures with bias > {HIGH:g} and NLC <= {LOW_NLC:g}",
                   float(np.sum((before > HIGH) & (nlc <= LOW_NLC))), None,
                   f"of {int(np.sum(before > HIGH))} with bias > {HIGH:g}; B.2: many "
                   "architectures have a high bias but a low NLC", key="c_high_bias_low_nlc"),
        Comparison("C: partial Spearman rho(bias before, test error | log NLC)", partial,
                   None, "the rank correlation left after removing the NLC's linear "
                   "part from both ranks; > 0: the bias predicts beyond the NLC",
                   key="c_partial_rho", statistic="partial spearman"),
    )
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison)


def _partial_spearman(x: np.ndarray, y: np.ndarray, control: np.ndarray) -> float:
    """Spearman's rho of x and y after regressing the control's ranks out of both ranks."""
    from scipy import stats

    rx, ry, rc = (stats.rankdata(v) for v in (x, y, control))
    design = np.column_stack([np.ones_like(rc), rc])
    residual = [r - design @ np.linalg.lstsq(design, r, rcond=None)[0] for r in (rx, ry)]
    return float(np.corrcoef(*residual)[0, 1])


def judge(computed: Computed) -> Verdict:
    """B.2's three claims: A, the bias decreases for many architectures (at least half); B,
    a low final bias is necessary: every architecture better than chance ends with a bias
    <= 10, and none ending above 10 beats chance;
    C, some architectures have a high bias but a low NLC, and the bias predicts test error
    beyond the NLC (positive partial rank correlation)."""
    def ours(key: str) -> float:
        return computed.compared(key).ours

    high_bias_error, good_bias = ours("b_high_bias_lowest_error"), ours("b_good_largest_bias")
    checks = {
        "A": (ours("a_decreased") >= 0.5, f"bias decreased for {ours('a_decreased'):.0%}"),
        "B (better than chance)": (None if math.isnan(good_bias) else good_bias <= HIGH,
                                   "no architecture beat chance" if math.isnan(good_bias)
                                   else f"largest final bias of the architectures better "
                                   f"than chance {good_bias:.3g}"),
        "B (high bias)": (None if math.isnan(high_bias_error)
                          else not high_bias_error < BETTER_THAN_CHANCE,
                          f"no architecture ended with a bias > {HIGH:g}"
                          if math.isnan(high_bias_error) else
                          f"lowest test error with a final bias > {HIGH:g} "
                          f"{high_bias_error:.3g}"),
        "C": (ours("c_high_bias_low_nlc") > 0 and ours("c_partial_rho") > 0,
              f"{ours('c_high_bias_low_nlc'):.0f} with a high bias but a low NLC, partial rho "
              f"{ours('c_partial_rho'):.2f}"),
    }
    return panel_verdict(checks)


def plot(computed: Computed, figure) -> None:
    records = [r for r in computed.records()
               if positive(r["output_bias"]) and positive(r["output_bias_after"])
               and positive(r["nlc"])]
    axes = figure.subplots(1, 3)
    panels = (("A", "output_bias", "output_bias_after", "bias before training",
               "bias after training"),
              ("B", "output_bias_after", "test_error", "bias after training", "test error"),
              ("C", "output_bias", "nlc", "bias before training", "NLC before training"))
    for ax, (panel, x, y, xlabel, ylabel) in zip(axes, panels):
        colors = ["tab:red" if r["high_bias"] else "tab:blue" if r["skip"] else "black"
                  for r in records]
        ax.scatter([r[x] for r in records], [r[y] for r in records], s=10, c=colors)
        ax.set_xscale("log")
        if y != "test_error":
            ax.set_yscale("log")
        if panel == "A":
            low = min(min(r[x], r[y]) for r in records)
            high = max(max(r[x], r[y]) for r in records)
            ax.plot([low, high], [low, high], color="gray", lw=0.8)
        if panel == "B":
            ax.axhline(CHANCE_ERROR, color="gray", ls="--", lw=0.8)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(panel, fontsize=9)


REPRODUCTION = Reproduction(
    name="nlc-figure9",
    paper=cite("nlc"),
    target="Figure 9",
    description="output bias before vs after training, bias after training vs test error, "
                "bias vs NLC of sampled architectures on waveform-noise",
    differences={scale: _nlc_study.DIFFERENCES[scale] for scale in ("small", "paper")},
    small_runtime="~75 s",
    compute=compute,
    plot=plot,
    claim=("The output bias decreases during training in many cases; a low bias after "
           "training is necessary for a better-than-random test error; many architectures "
           "have a high bias but a low NLC, so the bias adds to the NLC in predicting test "
           "error (B.2)."),
    judge=judge,
    n_seeds=3,
)
