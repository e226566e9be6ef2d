"""The reproductions judge from numbers: a comparison is a record (key, value, statistic,
p-value, count), judges look comparisons up by key and read their fields, and the note printed
beside a value is generated from those fields.

The judges that once parsed p-values out of note text (nlc-figure1, nlc-figure2, nlc-figure3,
nlc-lr) and the one that read a split panel's note (nlc-figure10) are fed planted
:class:`Computed` records: one that bears the paper's claim out, one whose p-value lies above
the significance level, one whose statistic has the wrong sign. No reproduction runs: cheap.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from nngauge.errors import InvalidInputError, UnknownNameError
from nngauge.reproduce import Comparison, Computed
from nngauge.reproduce._base import SIGNIFICANCE
from nngauge.reproduce._nlc_figure1 import judge as figure1_judge
from nngauge.reproduce._nlc_figure2 import judge as figure2_judge
from nngauge.reproduce._nlc_figure3 import judge as figure3_judge
from nngauge.reproduce._nlc_figure10 import judge as figure10_judge
from nngauge.reproduce._nlc_lr import judge as lr_judge

ABOVE = 0.2  # a p-value above the significance level
BELOW = 1e-4  # and one below it


def planted(*comparison: Comparison, extra=None, rows=()) -> Computed:
    return Computed(columns=(), rows=rows, comparison=comparison, extra=extra or {})


def value(key: str, ours: float) -> Comparison:
    return Comparison(key, ours, key=key)


def rho(key: str, ours: float, p_value: float, n: int = 50) -> Comparison:
    return Comparison(key, ours, key=key, statistic="spearman", p_value=p_value, n=n)


def with_changed(computed: Computed, key: str, **fields) -> Computed:
    """``computed`` with the comparison ``key`` changed (its other comparisons kept)."""
    return replace(computed, comparison=tuple(
        replace(c, **fields) if c.key == key else c for c in computed.comparison))


# --- the record --------------------------------------------------------------------------------

def test_the_printed_note_states_the_fields():
    """The note as printed starts with the p-value (3 significant digits) and the count, then
    the free text; a comparison without them prints its note alone."""
    full = Comparison("Spearman rho(NLC, test error)", 0.41, key="rho", statistic="spearman",
                      p_value=0.0012345, n=64, note="the paper: > 0")
    assert full.printed_statistics == "p = 0.00123, n = 64"
    assert full.printed_note == "p = 0.00123, n = 64; the paper: > 0"
    assert Comparison("x", 1.0, key="x", statistic="kendall", p_value=0.5).printed_note == \
        "p = 0.5"
    assert Comparison("x", 1.0, key="x", n=7, note="of 9").printed_note == "n = 7; of 9"
    assert Comparison("x", 1.0, None, "as is", key="x").printed_note == "as is"


def test_significance_reads_the_p_value():
    assert rho("r", 0.5, SIGNIFICANCE / 2).significant()
    assert not rho("r", 0.5, SIGNIFICANCE).significant()
    assert not rho("r", 0.5, math.nan).significant()
    assert rho("r", 0.5, 0.02).significant(level=0.05)
    assert not rho("r", 0.5, 0.02).significant(level=0.01)
    with pytest.raises(InvalidInputError, match="p-value"):
        value("slope", -1.0).significant()


def test_a_p_value_names_its_statistic():
    with pytest.raises(InvalidInputError, match="statistic"):
        Comparison("rho", 0.5, key="rho", p_value=0.01)


def test_the_key_is_required():
    with pytest.raises(TypeError, match="key"):
        Comparison("Spearman rho", 0.5, None, "p = 0.01")  # the old positional form


def test_lookup_of_a_missing_key_names_the_known_ones():
    computed = planted(value("slope", -1.0), rho("rho", -0.9, BELOW))
    assert computed.compared("rho").ours == -0.9
    with pytest.raises(UnknownNameError) as raised:
        computed.compared("Spearman")  # a label's prefix is not a key
    message = str(raised.value)
    assert "'Spearman'" in message and "['slope', 'rho']" in message and "Fix:" in message
    with pytest.raises(KeyError):  # UnknownNameError is a KeyError too
        planted().compared("rho")


def test_keys_are_distinct():
    with pytest.raises(InvalidInputError, match=r"\['rho'\]"):
        planted(rho("rho", 0.5, BELOW), rho("rho", 0.4, BELOW), value("slope", 1.0))


# --- nlc-figure1: rho < 0 significant, slope and offset near section 3's ---------------------

FIGURE1 = planted(rho("rho", -0.9, BELOW, n=14), value("slope", -1.0), value("offset", 0.1))


def test_figure1_judge_decides_from_the_fields():
    verdict = figure1_judge(FIGURE1)
    assert verdict.status == "reproduced", verdict.reason
    assert "Spearman rho -0.90 (p = 0.0001)" in verdict.reason
    above = figure1_judge(with_changed(FIGURE1, "rho", p_value=ABOVE))
    assert above.status == "qualitatively" and "(p = 0.2)" in above.reason
    assert figure1_judge(with_changed(FIGURE1, "rho", ours=0.9)).status == "differs"


# --- nlc-figure2: rho(NLC, test error) > 0 significant ---------------------------------------

FIGURE2 = planted(rho("rho", 0.45, BELOW, n=64), value("rho_interval_low", 0.2),
                  value("rho_interval_high", 0.6), value("skip_nlc_ratio", 0.5),
                  value("skip_error_shift", -0.01), value("best_tenth_lowest_nlc", 1.2),
                  value("best_tenth_highest_nlc", 2.8), value("high_bias_lowest_error", 0.66),
                  rows=((),) * 64)


def test_figure2_judge_decides_from_the_fields():
    verdict = figure2_judge(FIGURE2)
    assert verdict.status == "reproduced", verdict.reason
    assert "Spearman rho 0.45 (p = 0.0001, n = 64; 95% bootstrap interval 0.20 to 0.60)" in \
        verdict.reason
    above = figure2_judge(with_changed(FIGURE2, "rho", p_value=ABOVE))
    assert above.status == "qualitatively" and "(p = 0.2, n = 64" in above.reason
    assert figure2_judge(with_changed(FIGURE2, "rho", ours=-0.45)).status == "differs"


def test_figure2_judges_every_part_of_its_printed_claim():
    """The printed claim has three parts; a planted result violating each fails it: the best
    tenth outside the ideal range (by more than the fixed factor 2), a high-bias architecture
    beating chance; none sampled: "not tested", so no "reproduced"."""
    wide = figure2_judge(with_changed(FIGURE2, "best_tenth_highest_nlc", ours=9.0))
    assert wide.status == "qualitatively"
    assert "ideal range fails: best tenth's NLC 1.2 to 9" in wide.reason
    assert figure2_judge(with_changed(FIGURE2, "best_tenth_lowest_nlc", ours=0.6)).status == \
        "reproduced"  # within the factor
    beats = figure2_judge(with_changed(FIGURE2, "high_bias_lowest_error", ours=0.2))
    assert beats.status == "qualitatively" and "high bias (they fail) fails" in beats.reason
    none = figure2_judge(with_changed(FIGURE2, "high_bias_lowest_error", ours=math.nan))
    assert none.status == "qualitatively" and "high bias (they fail) not tested" in none.reason
    both = figure2_judge(with_changed(with_changed(FIGURE2, "rho", p_value=ABOVE),
                                      "best_tenth_highest_nlc", ours=9.0))
    assert both.status == "differs"


# --- nlc-figure3: panel B's rho(NLC before, NLC after) > 0 significant -----------------------

FIGURE3 = planted(value("a_best_tenth_largest_bias", 3.0),
                  value("a_high_bias_lowest_error", 0.65), rho("a_rho", 0.3, BELOW),
                  value("b_decreased", 0.8),
                  rho("b_rho", 0.7, BELOW), rho("c_rho", 0.1, BELOW), rho("e_rho", -0.4, BELOW),
                  extra={"before_error_rho": 0.5})


def test_figure3_judge_decides_from_the_fields():
    verdict = figure3_judge(FIGURE3)
    assert verdict.status == "reproduced", verdict.reason
    assert "B holds: NLC decreased for 80%, rho(before, after) 0.70 (p = 0.0001, n = 50)" in \
        verdict.reason
    for broken in (with_changed(FIGURE3, "b_rho", p_value=ABOVE),
                   with_changed(FIGURE3, "b_rho", ours=-0.7)):
        verdict = figure3_judge(broken)
        assert verdict.status == "qualitatively" and "B fails" in verdict.reason


# --- nlc-lr: figure 8B's rho(log NLC, log rate) < 0 significant ------------------------------

LR = planted(rho("8b_rho", -0.6, BELOW, n=20), value("8b_slope", -2.1),
             value("7a_lowest_index", 1.0), value("7a_highest_index", 5.0), extra={"n_lrs": 8})


def test_lr_judge_decides_from_the_fields():
    verdict = lr_judge(LR)
    assert verdict.status == "reproduced", verdict.reason
    assert "rho(log NLC, log rate) -0.60 (p = 0.0001, n = 20)" in verdict.reason
    above = lr_judge(with_changed(LR, "8b_rho", p_value=ABOVE))
    assert above.status == "differs" and "no significant fall" in above.reason
    assert lr_judge(with_changed(LR, "8b_rho", ours=0.6)).status == "differs"


# --- nlc-figure10: rho(NLC, test error) > 0 in both panels -----------------------------------

FIGURE10 = planted(rho("no_skip_rho", 0.5, BELOW, n=40), value("no_skip_median_nlc", 4.0),
                   rho("skip_rho", 0.3, 0.01, n=20), value("skip_median_nlc", 2.0),
                   Comparison("ratio", 0.5, key="skip_nlc_ratio", statistic="mann-whitney",
                              p_value=0.001, n=60),
                   Comparison("shift", -0.02, key="skip_error_shift",
                              statistic="mann-whitney", p_value=0.01, n=60))


def test_figure10_judge_decides_from_the_fields():
    """Each of the four claims has its test: a sign without significance fails it (the
    skip-connection effect once passed on its sign alone)."""
    verdict = figure10_judge(FIGURE10)
    assert verdict.status == "reproduced", verdict.reason
    assert "relation without skips holds: rho 0.50 (p = 0.0001, n = 40)" in verdict.reason
    assert "relation with skips holds: rho 0.30 (p = 0.01, n = 20)" in verdict.reason
    wrong = figure10_judge(with_changed(FIGURE10, "skip_rho", ours=-0.3))
    assert wrong.status == "qualitatively" and "relation with skips fails" in wrong.reason
    unsure = figure10_judge(with_changed(FIGURE10, "skip_error_shift", p_value=0.3))
    assert unsure.status == "qualitatively"
    assert "skips lower the error at a given NLC fails: -0.020 (p = 0.3, n = 60)" in \
        unsure.reason
    both = with_changed(with_changed(FIGURE10, "skip_nlc_ratio", ours=1.4),
                        "skip_error_shift", ours=0.02)
    assert figure10_judge(with_changed(both, "skip_rho", p_value=ABOVE)).status == "differs"


# --- claims the data cannot speak to: "not tested", never a pass -----------------------------

def test_panel_verdict_never_passes_a_claim_without_data():
    """All tested claims holding with one untested: qualitatively, the untested one named;
    a failure among them: the count decides; everything tested and holding: reproduced."""
    from nngauge.reproduce._nlc_study import panel_verdict

    ok, untested, failed = (True, "x 1"), (None, "no data"), (False, "x 9")
    assert panel_verdict({"A": ok, "B": ok}).status == "reproduced"
    verdict = panel_verdict({"A": ok, "B": untested})
    assert verdict.status == "qualitatively" and "B not tested: no data" in verdict.reason
    assert panel_verdict({"A": ok, "B": untested, "C": failed}).status == "differs"
    assert panel_verdict({"A": ok, "B": ok, "C": untested, "D": failed}).status == \
        "qualitatively"


def test_figure3_high_bias_half_is_not_tested_without_high_bias_architectures():
    """nlc-figure3 passed panel A's high-bias half when none was sampled (the minimum over no
    architecture was NaN and `not NaN < chance` held): now "not tested"; a planted high-bias
    architecture better than chance fails it."""
    none = figure3_judge(with_changed(FIGURE3, "a_high_bias_lowest_error", ours=math.nan))
    assert none.status == "qualitatively"
    assert "A (high bias) not tested: no architecture with a bias > 1000" in none.reason
    beats = figure3_judge(with_changed(FIGURE3, "a_high_bias_lowest_error", ours=0.1))
    assert "A (high bias) fails: lowest test error with a bias > 1000 0.1" in beats.reason
    assert beats.status == "qualitatively"


def test_figure9_claims_without_data_are_not_tested():
    from nngauge.reproduce._nlc_figure9 import judge as figure9_judge

    planted_b = planted(value("a_decreased", 0.8), value("b_good_largest_bias", 5.0),
                        value("b_high_bias_lowest_error", 0.65),
                        value("c_high_bias_low_nlc", 3.0), value("c_partial_rho", 0.2))
    assert figure9_judge(planted_b).status == "reproduced"
    none = figure9_judge(with_changed(planted_b, "b_high_bias_lowest_error", ours=math.nan))
    assert none.status == "qualitatively" and "B (high bias) not tested" in none.reason
    chance = figure9_judge(with_changed(planted_b, "b_good_largest_bias", ours=math.nan))
    assert "B (better than chance) not tested: no architecture beat chance" in chance.reason
    beats = figure9_judge(with_changed(planted_b, "b_high_bias_lowest_error", ours=0.1))
    assert "B (high bias) fails" in beats.reason


# --- raghu-training: three claims, each judged (figures 7, 8-9, 18) --------------------------

def test_raghu_training_judges_each_figures_claim():
    """Figure 9's weight scale, once asserted only in a test, is a claim of the judge; a
    planted run violating any one claim is not "reproduced", violating two is "differs"."""
    from nngauge.reproduce._raghu_training import TRACKED, network_key
    from nngauge.reproduce._raghu_training import judge as training_judge

    keys = [network_key(*network) for network in TRACKED]
    good = planted(*(value(f"{k}_length_ratio", 1.5) for k in keys),
                   *(value(f"{k}_sigma_w2_increased", 7.0) for k in keys),
                   value("one_layer_lowest_minus_highest", 0.1), extra={"hidden": 6})
    assert training_judge(good).status == "reproduced"
    flat = with_changed(good, f"{keys[0]}_sigma_w2_increased", ours=5.0)
    verdict = training_judge(flat)
    assert verdict.status == "qualitatively"
    assert "sigma_w^2 rises fails: weight layers whose sigma_w^2 increased: 5, 7 of 7" in \
        verdict.reason
    shorter = with_changed(flat, f"{keys[1]}_length_ratio", ours=0.9)
    assert training_judge(shorter).status == "differs"
    upper = with_changed(good, "one_layer_lowest_minus_highest", ours=-0.05)
    assert "lower layers train better fails" in training_judge(upper).reason


# --- raghu-figure4, regions-vs-bounds, shrinkage-figure2: planted rows ----------------------

def _figure4(lengths: dict) -> Computed:
    """raghu-figure4 rows: sigma_w^2 -> the length after layers 0..7."""
    from nngauge.reproduce._raghu_figure4 import COLUMNS

    rows = tuple((s, layer, "", 0, length, 1.0, True) for s, values in lengths.items()
                 for layer, length in enumerate(values))
    return Computed(COLUMNS, rows)


def test_raghu_figure4_judge_fails_planted_lengths():
    """Growth with depth rising with sigma_w^2 and shrinking at sigma_w^2 = 1, pools
    shortening: reproduced; a length that does not grow at the large scale: not reproduced;
    no growth anywhere: differs."""
    from nngauge.reproduce._raghu_figure4 import judge

    good = {1.0: [1, 0.9, 0.8, 0.5, 0.45, 0.4, 0.35, 0.2],
            8.0: [1, 1.5, 2.5, 1.5, 2.5, 3.5, 4.5, 2.0],
            16.0: [1, 2.0, 4.0, 2.0, 4.0, 8.0, 16.0, 8.0]}
    assert judge(_figure4(good)).status == "reproduced"
    flat = {**good, 8.0: [1, 1.1, 1.2, 0.9, 1.0, 1.1, 1.2, 0.9]}
    assert judge(_figure4(flat)).status == "qualitatively"
    none = {s: [1, 0.9, 0.8, 0.5, 0.45, 0.4, 0.35, 0.2] for s in good}
    assert judge(_figure4(none)).status == "differs"


def test_regions_vs_bounds_judge_fails_when_a_count_exceeds_the_bound():
    """A planted count above Serra et al.'s bound: "differs", labelled a software check (a
    counting bug), as the passing side is."""
    from nngauge.reproduce._regions_vs_bounds import STATES
    from nngauge.reproduce._regions_vs_bounds import judge as bounds_judge

    def planted_fill(fill: float) -> Computed:
        return planted(*(value(f"{s}_serra_fill", fill) for s in STATES),
                       *(value(f"{s}_hanin_rolnick_ratio", 0.8) for s in STATES))

    ok = bounds_judge(planted_fill(0.4))
    assert ok.status == "reproduced" and ok.software_check
    over = bounds_judge(planted_fill(1.2))
    assert over.status == "differs" and over.software_check
    assert "an upper bound is exceeded" in over.reason


def test_shrinkage_figure2_judge_fails_planted_violations():
    """The bound holding and 1 - rho falling with depth and rising with 1 - a: reproduced, its
    reason naming the software checks (bound and theory) and the evidence (searched
    networks); a searched network past its bound, or its trend broken, differs; the infinite-
    width theory past the bound, or the bound's or the theory's trend broken, differs as a
    software check (only a bug can do that)."""
    from nngauge.reproduce._shrinkage_figure2 import COLUMNS, DEPTH_PANEL, SLOPE_PANEL
    from nngauge.reproduce._shrinkage_figure2 import judge as shrinkage_judge

    def rows(searched_at_depth=(0.5, 0.4, 0.3), slack=0.1, theory_slack=0.1,
             bound_at_depth=None):
        """1 - rho per setting (theory falling with depth, rising with 1 - a), theory_min
        below it and the bound ``theory_slack`` above theory_min (``bound_at_depth``: panel
        a's bounds instead); the searched networks at ``searched_at_depth`` in panel a (at
        the theory in panel b) and their bounds ``slack`` above them (negative: the searched
        network beats its bound)."""
        out = []
        for panel, settings in ((DEPTH_PANEL, zip((2, 4, 8), (0.5, 0.4, 0.3),
                                                  searched_at_depth)),
                                (SLOPE_PANEL, zip((0.6, 0.4, 0.2), (0.3, 0.4, 0.5),
                                                  (0.3, 0.4, 0.5)))):
            for k, (setting, theory, searched) in enumerate(settings):
                bound = theory - 0.05 + theory_slack
                if panel == DEPTH_PANEL and bound_at_depth is not None:
                    bound = bound_at_depth[k]
                out.append(dict(panel=panel, depth=setting if panel == DEPTH_PANEL else 16,
                                negative_slope=setting if panel == SLOPE_PANEL else 0.2,
                                theory=theory, theory_min=theory - 0.05,
                                bound=bound, searched=searched,
                                bound_measured=searched + slack))
        return Computed(COLUMNS, tuple(tuple(r.get(c, 0.0) for c in COLUMNS) for r in out))

    ok = shrinkage_judge(rows())
    assert ok.status == "reproduced" and not ok.software_check
    assert "software checks" in ok.reason and "evidence" in ok.reason
    for evidence in (rows(slack=-0.05), rows(searched_at_depth=(0.3, 0.4, 0.5))):
        verdict = shrinkage_judge(evidence)
        assert verdict.status == "differs" and not verdict.software_check
    for software in (rows(theory_slack=-0.01), rows(bound_at_depth=(0.5, 0.6, 0.7))):
        verdict = shrinkage_judge(software)
        assert verdict.status == "differs" and verdict.software_check
        assert "a bug in nngauge" in verdict.reason
    assert shrinkage_judge(Computed(COLUMNS, ())).status == "differs"
