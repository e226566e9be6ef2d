"""``nlc-figure10``: figure 2 split by skip connections (NLC paper, figure 10; appendix B.3).

The points of ``nlc-figure2`` (the shared NLC study, :mod:`nngauge.reproduce._nlc_study`) in
two panels: architectures without skip connections (the paper's top row) and with them
(bottom row), red for high output bias. Per panel: Spearman's rho between the initial NLC and
the test error, the median NLC, and the test error of the best architecture; between panels,
the mean residual of a common fit of test error on log NLC (B.3: skip connections give a lower
test error at a given NLC, and lower NLCs).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce import _nlc_study
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_study import finite, panel_verdict, positive

COLUMNS = ("arch_index", "architecture", "skip", "high_bias", "nlc", "output_bias",
           "test_error")
PANELS = (("without skip connections", False, "no_skip"), ("with skip connections", True, "skip"))
"""Per panel: its label, whether its architectures have skip connections, its comparisons'
key prefix."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    from scipy import stats

    study = _nlc_study.run(scale, seed_of(generator))
    rows = tuple((p["arch_index"], p["architecture"], p["skip"], p["high_bias"],
                  p.get("nlc", math.nan), p.get("output_bias", math.nan), p["test_error"])
                 for p in study.points())
    records = [dict(zip(COLUMNS, r)) for r in rows
               if positive(r[4]) and finite(r[6])]
    clean = [r for r in records if not r["high_bias"]]
    fit = np.polyfit(np.log([r["nlc"] for r in clean]), [r["test_error"] for r in clean], 1)
    comparison = []
    residuals = {}
    for label, skip, panel in PANELS:
        group = [r for r in records if r["skip"] == skip]
        nlc = np.array([r["nlc"] for r in group])
        error = np.array([r["test_error"] for r in group])
        rho, p = stats.spearmanr(nlc, error) if len(group) >= 3 else (math.nan, math.nan)
        residuals[skip] = [r["test_error"] - float(np.polyval(fit, np.log(r["nlc"])))
                           for r in group if not r["high_bias"]]
        comparison += [
            Comparison(f"{label}: Spearman rho(NLC, test error)", float(rho),
                       key=f"{panel}_rho", statistic="spearman", p_value=float(p),
                       n=len(group)),
            Comparison(f"{label}: median NLC", float(np.median(nlc)), None, "",
                       key=f"{panel}_median_nlc"),
            Comparison(f"{label}: lowest test error", float(error.min()), None, "",
                       key=f"{panel}_lowest_error"),
        ]
    nlc = {skip: [r["nlc"] for r in records if r["skip"] == skip] for skip in (False, True)}
    comparison.append(Comparison(
        "median NLC, with / without skip connections",
        float(np.median(nlc[True]) / np.median(nlc[False])), None,
        "two-sided Mann-Whitney U of the NLCs; B.3: lower with skip connections (< 1)",
        key="skip_nlc_ratio", statistic="mann-whitney",
        p_value=float(stats.mannwhitneyu(nlc[True], nlc[False]).pvalue),
        n=len(nlc[True]) + len(nlc[False])))
    comparison.append(Comparison(
        "test error at a given NLC, with - without skip connections",
        float(np.mean(residuals[True]) - np.mean(residuals[False])), None,
        "mean residual of one fit of test error on log NLC (without the high-bias "
        "architectures), two-sided Mann-Whitney U of the residuals; B.3: lower with skip "
        "connections (< 0)", key="skip_error_shift", statistic="mann-whitney",
        p_value=float(stats.mannwhitneyu(residuals[True], residuals[False]).pvalue),
        n=len(residuals[True]) + len(residuals[False])))
    return Computed(columns=COLUMNS, rows=rows, comparison=tuple(comparison))


def judge(computed: Computed) -> Verdict:
    """The paper's four claims, each with its test: figure 2's relation in each panel (NLC
    predicts test error: a positive, significant rank correlation), and B.3's two advantages
    of skip connections, lower NLCs and a lower test error at a given NLC (each in the
    paper's direction, significant by a two-sided Mann-Whitney U at the 5% level). All four:
    reproduced; two or three: qualitatively; fewer: differs."""
    rho = {skip: computed.compared(f"{panel}_rho") for _, skip, panel in PANELS}
    median = {skip: computed.compared(f"{panel}_median_nlc").ours for _, skip, panel in PANELS}
    ratio, shift = computed.compared("skip_nlc_ratio"), computed.compared("skip_error_shift")

    def relation(skip: bool) -> tuple[bool, str]:
        r = rho[skip]
        return (r.ours > 0 and r.significant(), f"rho {r.ours:.2f} ({r.printed_statistics})")

    return panel_verdict({
        "relation without skips": relation(False),
        "relation with skips": relation(True),
        "skips lower the NLC": (ratio.ours < 1 and ratio.significant(),
                                f"median NLC {median[True]:.3g} with, {median[False]:.3g} "
                                f"without ({ratio.printed_statistics})"),
        "skips lower the error at a given NLC": (
            shift.ours < 0 and shift.significant(),
            f"{shift.ours:+.3f} ({shift.printed_statistics})"),
    })


def plot(computed: Computed, figure) -> None:
    records = [r for r in computed.records()
               if positive(r["nlc"]) and finite(r["test_error"])]
    axes = figure.subplots(1, 2, sharex=True, sharey=True)
    for ax, (label, skip, panel) in zip(axes, PANELS):
        group = [r for r in records if r["skip"] == skip]
        for name, color, chosen in (("high output bias", "tab:red", True),
                                    ("others", "tab:blue" if skip else "black", False)):
            chosen_group = [r for r in group if r["high_bias"] == chosen]
            ax.scatter([r["nlc"] for r in chosen_group],
                       [r["test_error"] for r in chosen_group], s=14, color=color, label=name)
        ax.axvspan(1.0, 3.0, color="tab:green", alpha=0.15)
        ax.set_xscale("log")
        ax.set_xlabel("NLC at initialization")
        ax.set_title(f"{label} (rho {computed.compared(f'{panel}_rho').ours:.2f})", fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("test error")


REPRODUCTION = Reproduction(
    name="nlc-figure10",
    paper=cite("nlc"),
    target="Figure 10",
    description="figure 2 split into architectures without and with skip connections, on "
                "waveform-noise",
    differences={scale: _nlc_study.DIFFERENCES[scale] for scale in ("small", "paper")},
    small_runtime="~75 s",
    compute=compute,
    plot=plot,
    claim=("Split by skip connections, each group shows figure 2's relation between the "
           "initial NLC and test error, and the two behave clearly differently: skip "
           "connections give lower NLCs and a lower test error at a given NLC (B.3)."),
    judge=judge,
    n_seeds=3,
)
