"""``nlc-figure4``: depth vs test error over sampled architectures (NLC paper, figure 4 and
section 6, "Depth"; appendix E.2).

Philipp & Carbonell, "The Nonlinearity Coefficient - Predicting Generalization in Deep Neural
Networks" (arXiv:1806.00179), figure 4: the test error of the trained network against the
depth of the architecture, over the sampled architectures (CIFAR10 in the paper). Section 6:
"there is actually a positive correlation between both quantities. We suspect this is mainly
because deeper networks tend to have a larger NLC."

From the NLC study on waveform-noise (:mod:`nngauge.reproduce._nlc_study`, shared with figures
2, 3, 9 and 10), per architecture: its depth (the sampler's odd depth, 3 to 49), the NLC at
initialization and the test error of the run of lowest validation error. Three claims, each
judged by a rank correlation and its p-value against :data:`SIGNIFICANCE`:

- depth and test error correlate positively (Spearman rho > 0, p < 0.05);
- deeper architectures have a larger NLC (Spearman rho(depth, NLC) > 0, p < 0.05);
- the NLC explains most of it: the partial rank correlation of depth and test error given the
  NLC (:func:`nngauge.reproduce._nlc_figure9._partial_spearman`) is not significantly positive
  and at most :data:`MAINLY` times the plain one. Not tested when the plain correlation is not
  significantly positive (nothing to explain).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce import _nlc_study
from nngauge.reproduce._base import SIGNIFICANCE, Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_figure3 import CHANCE_ERROR
from nngauge.reproduce._nlc_figure9 import _partial_spearman
from nngauge.reproduce._nlc_study import GROUPS, finite, panel_verdict, positive

COLUMNS = ("arch_index", "architecture", "depth", "nlc", "high_bias", "skip", "test_error")
MAINLY = 0.5
""""Mainly because" of the NLC: the partial correlation given the NLC keeps at most half of
the plain one."""


def partial_p_value(r: float, n: int) -> float:
    """Two-sided p-value of a partial correlation ``r`` over ``n`` points with one control
    variable: t = r sqrt((n - 3) / (1 - r^2)) on n - 3 degrees of freedom."""
    from scipy import stats

    if n < 4 or not math.isfinite(r):
        return math.nan
    if abs(r) >= 1:
        return 0.0
    t = r * math.sqrt((n - 3) / (1 - r * r))
    return float(2 * stats.t.sf(abs(t), n - 3))


def compute(scale: str, generator: torch.Generator) -> Computed:
    from scipy import stats

    study = _nlc_study.run(scale, seed_of(generator))
    rows = tuple(
        (p["arch_index"], p["architecture"], study.configs[p["arch_index"]]["depth"],
         p.get("nlc", math.nan), p["high_bias"], p["skip"], p["test_error"])
        for p in study.points())
    usable = [r for r in rows if positive(r[3]) and finite(r[6])]
    depth, nlc, error = (np.array([r[i] for r in usable], dtype=float) for i in (2, 3, 6))
    depth_error = stats.spearmanr(depth, error)
    depth_nlc = stats.spearmanr(depth, nlc)
    nlc_error = stats.spearmanr(nlc, error)
    partial = _partial_spearman(depth, error, np.log(nlc)) if len(usable) > 3 else math.nan
    n = len(usable)
    comparison = (
        Comparison("Spearman rho(depth, test error)", float(depth_error.statistic),
                   key="depth_error", statistic="spearman",
                   p_value=float(depth_error.pvalue), n=n,
                   note="the paper (CIFAR10): a positive correlation"),
        Comparison("Spearman rho(depth, NLC)", float(depth_nlc.statistic), key="depth_nlc",
                   statistic="spearman", p_value=float(depth_nlc.pvalue), n=n,
                   note="section 6: deeper networks tend to have a larger NLC"),
        Comparison("partial Spearman rho(depth, test error | NLC)", partial,
                   key="depth_error_given_nlc", statistic="partial spearman",
                   p_value=partial_p_value(partial, n), n=n,
                   note=f"the paper suspects the NLC explains the depth's correlation; "
                   f"rho(NLC, test error) {nlc_error.statistic:.2f}"),
        Comparison("median test error, deepest / shallowest third",
                   _third_ratio(depth, error), None,
                   f"chance {CHANCE_ERROR:.3g}", key="deep_shallow_error_ratio"),
    )
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison)


def _third_ratio(depth: np.ndarray, error: np.ndarray) -> float:
    if len(depth) < 3:
        return math.nan
    order = np.argsort(depth, kind="stable")
    third = len(order) // 3
    return float(np.median(error[order[-third:]]) / np.median(error[order[:third]]))


def judge(computed: Computed) -> Verdict:
    """Figure 4's claim and section 6's explanation, each a part: depth correlates positively
    with test error; depth correlates positively with the NLC; the partial correlation given
    the NLC is not significantly positive and at most :data:`MAINLY` of the plain one (not
    tested when the plain one is not significantly positive). Two of three parts holding, or
    all tested ones: qualitatively; all three: reproduced."""
    depth_error = computed.compared("depth_error")
    depth_nlc = computed.compared("depth_nlc")
    partial = computed.compared("depth_error_given_nlc")

    def positive_and_significant(c: Comparison) -> bool:
        return c.ours > 0 and c.significant(SIGNIFICANCE)

    explained = None
    if positive_and_significant(depth_error):
        explained = (not positive_and_significant(partial)
                     and partial.ours <= MAINLY * depth_error.ours)
    checks = {
        "depth vs test error (figure 4)": (
            positive_and_significant(depth_error),
            f"rho {depth_error.ours:.2f} ({depth_error.printed_statistics})"),
        "depth vs NLC": (positive_and_significant(depth_nlc),
                         f"rho {depth_nlc.ours:.2f} ({depth_nlc.printed_statistics})"),
        "explained by the NLC": (
            explained,
            f"partial rho given the NLC {partial.ours:.2f} ({partial.printed_statistics}; "
            f"at most {MAINLY:g} x {depth_error.ours:.2f} and not significant required)"
            if explained is not None else
            "no significant positive depth-error correlation to explain"),
    }
    return panel_verdict(checks)


def plot(computed: Computed, figure) -> None:
    records = [r for r in computed.records() if finite(r["test_error"])]
    axes = figure.subplots(1, 2)
    for ax, (y, ylabel) in zip(axes, (("test_error", "test error"),
                                      ("nlc", "NLC at initialization"))):
        for label, color, chosen in GROUPS:
            group = [r for r in records if chosen(r) and (y == "test_error" or positive(r[y]))]
            ax.scatter([r["depth"] for r in group], [r[y] for r in group], s=14, color=color,
                       label=label)
        if y == "test_error":
            ax.axhline(CHANCE_ERROR, color="gray", ls="--", lw=0.8, label="chance")
        else:
            ax.set_yscale("log")
        ax.set_xlabel("depth", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    rho = computed.compared("depth_error")
    axes[0].set_title(f"{rho.quantity} {rho.ours:.2f} ({rho.printed_statistics})", fontsize=8)
    rho = computed.compared("depth_nlc")
    axes[1].set_title(f"{rho.quantity} {rho.ours:.2f} ({rho.printed_statistics})", fontsize=8)
    axes[0].legend(fontsize=6)


REPRODUCTION = Reproduction(
    name="nlc-figure4",
    paper=cite("nlc"),
    target="Figure 4",
    description="depth vs test error (and depth vs NLC at initialization) of sampled "
                "architectures trained on waveform-noise",
    differences={
        scale: (*_nlc_study.DIFFERENCES[scale],
                "waveform-noise instead of the paper's CIFAR10 panel",
                "the width is fixed (16) at the small scale, so deeper networks have more "
                "parameters; the paper's width keeps ~1M parameters at every depth"
                if scale == "small" else
                "the width gives ~1M parameters at every depth, as the paper's")
        for scale in ("small", "paper")},
    small_runtime="~100 s",
    compute=compute,
    plot=plot,
    claim=("Depth correlates positively with test error (figure 4), which the paper suspects "
           "is mainly because deeper networks tend to have a larger NLC (section 6)."),
    judge=judge,
    n_seeds=3,
)
