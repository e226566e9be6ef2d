"""The judges of nlc-table2 and nlc-table2-illustration (NLC paper, Table 2 and appendix A.2)
fed planted results (issue 36): each claim they print violated in turn gives "differs", and the
passing side gives "reproduced" or "qualitatively". No reproduction runs: cheap."""

import math

from nngauge.reproduce import Comparison, Computed
from nngauge.reproduce._nlc_table2 import DEPTHS, PAPER, compounds
from nngauge.reproduce._nlc_table2 import judge as table2_judge
from nngauge.reproduce._nlc_table2_illustration import COLUMNS, SIN_NLC
from nngauge.reproduce._nlc_table2_illustration import judge as illustration_judge

LINEAR = [1 + 0.2 * (d - 1) for d in DEPTHS]  # grows at every depth, not exponentially


def table2(nlcs) -> Computed:
    return Computed(columns=("depth", "nlc", "paper", "nlc_relu_1_power"),
                    rows=tuple((d, float(v), p, 1.211 ** (d - 1))
                               for d, v, p in zip(DEPTHS, nlcs, PAPER)))


def test_compounding_is_a_steady_per_layer_factor():
    """The paper's column has one per-layer factor (about NLC_relu(1) = 1.21 in both halves);
    linear growth's factor falls from 1.09 to 1.03 (rates 3x apart); a non-positive NLC
    grows nothing."""
    paper = compounds(DEPTHS, PAPER)
    assert paper.holds and 1.19 < math.exp(paper.shallow_rate) < 1.23
    assert 1.19 < math.exp(paper.deep_rate) < 1.23
    linear = compounds(DEPTHS, LINEAR)
    assert linear.grows and not linear.steady and not linear.holds
    assert linear.shallow_rate / linear.deep_rate > 2.9
    assert not compounds(DEPTHS, [0.0, *PAPER[1:]]).holds


def test_table2_judge_fails_planted_columns():
    """The paper's own column: reproduced; 1.5x it (compounding, other values): qualitatively;
    a column that grows but only linearly, one that saturates at depth 50, or one that falls
    at a depth: differs, saying why."""
    assert table2_judge(table2(PAPER)).status == "reproduced"
    scaled = table2_judge(table2([1.5 * v for v in PAPER]))
    assert scaled.status == "qualitatively" and "compounds with depth" in scaled.reason
    linear = table2_judge(table2(LINEAR))
    assert linear.status == "differs" and "not an exponential compounding" in linear.reason
    saturating = table2_judge(table2([*PAPER[:-1], 120.0]))  # deep factor 1.06 against 1.21
    assert saturating.status == "differs" and "not steady" in saturating.reason
    falling = list(PAPER)
    falling[4] = 10.0  # below depth 15's 15.2
    verdict = table2_judge(table2(falling))
    assert verdict.status == "differs" and "does not grow at every depth" in verdict.reason


def illustration(nlcs=PAPER, *, rho_depth=(1.0, 1e-6), rho_nlc=(1.0, 1e-6),
                 sine=SIN_NLC) -> Computed:
    """Planted rows and comparisons of nlc-table2-illustration: the NLC per depth, the
    Spearman rho (value, p-value) of class changes with depth and with the NLC, figure 5."""
    rows = tuple((d, 10.0 * i, 0, 0, 1024, float(v), p, 0.0)
                 for i, (d, v, p) in enumerate(zip(DEPTHS, nlcs, PAPER)))
    comparison = [Comparison(f"NLC depth {d}", float(v), p, key=f"nlc_depth_{d}")
                  for d, v, p in zip(DEPTHS, nlcs, PAPER)]
    comparison += [
        Comparison("rho depth", rho_depth[0], key="rho_depth", statistic="spearman",
                   p_value=rho_depth[1], n=7),
        Comparison("rho nlc", rho_nlc[0], key="rho_nlc", statistic="spearman",
                   p_value=rho_nlc[1], n=7),
        Comparison("sine", sine, key="sine_nlc"),
    ]
    return Computed(columns=COLUMNS, rows=rows, comparison=tuple(comparison))


def test_illustration_judge_fails_each_planted_violation():
    """Class changes rising with depth and the NLC (rho 1), the NLC compounding at Table 2's
    values, figure 5 exact: reproduced; weaker but significant ranks or NLCs 3x off:
    qualitatively. Differs: a rank correlation that is not significant (it once passed on its
    sign), one of the wrong sign, an NLC that does not compound, figure 5 off its closed form
    (a software check)."""
    good = illustration_judge(illustration())
    assert good.status == "reproduced", good.reason
    assert "a software check" in good.reason and not good.software_check
    assert illustration_judge(illustration(rho_depth=(0.82, 0.02))).status == "qualitatively"
    tripled = illustration_judge(illustration([3 * v for v in PAPER]))
    assert tripled.status == "qualitatively" and "at 0 of 7 depths" in tripled.reason
    unsure = illustration_judge(illustration(rho_depth=(0.6, 0.15)))
    assert unsure.status == "differs" and "more class changes with depth" in unsure.reason
    reversed_ = illustration_judge(illustration(rho_nlc=(-0.9, 0.005)))
    assert reversed_.status == "differs" and "more class changes with the NLC" in \
        reversed_.reason
    flat = illustration_judge(illustration(LINEAR))
    assert flat.status == "differs" and "the NLC compounding with depth" in flat.reason
    sine = illustration_judge(illustration(sine=SIN_NLC * 1.01))
    assert sine.status == "differs" and "figure 5's closed form" in sine.reason
