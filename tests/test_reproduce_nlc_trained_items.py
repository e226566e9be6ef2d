"""The NLC paper's remaining trained-network items: figure 3 D and F (``nlc-figure3-df``),
figure 4 (``nlc-figure4``) and section 6's confounders (``nlc-confounders``).

Each judge is fed planted comparisons: one set bearing every claim out, and one per claim
violating it (the failing status), or lacking the data it needs ("not tested", never passed).
Each command's compute runs once on reduced settings (a study of a few architectures, a few
twins), and its numbers are checked against what must hold exactly: the identities of section
6, the same architectures and initializations in the Adam study as in the SGD one, the printed
statistics recomputed from the rows.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from scipy import stats

from nngauge._random import seed_of
from nngauge.reproduce import Comparison, Computed
from nngauge.reproduce import _nlc_confounders as confounders
from nngauge.reproduce import _nlc_figure3_df as figure3_df
from nngauge.reproduce import _nlc_figure4 as figure4
from nngauge.reproduce import _nlc_study

ABOVE, BELOW = 0.2, 1e-4  # p-values above and below the significance level


def planted(*comparison: Comparison) -> Computed:
    return Computed(columns=(), rows=(), comparison=comparison)


def value(key: str, ours: float) -> Comparison:
    return Comparison(key, ours, key=key)


def with_p(key: str, ours: float, p_value: float, n: int = 40, statistic="spearman"):
    return Comparison(key, ours, key=key, statistic=statistic, p_value=p_value, n=n)


def changed(computed: Computed, key: str, **fields) -> Computed:
    return replace(computed, comparison=tuple(
        replace(c, **fields) if c.key == key else c for c in computed.comparison))


# --- nlc-figure3-df: the judge --------------------------------------------------------------

DF = planted(
    with_p("d_near_zero", 0.9, BELOW, 10, "binomial"),
    with_p("d_high_nlc", 0.75, 0.6, 4, "fisher"),
    with_p("d_rho", 0.1, 0.7, 10),
    with_p("f_rho", 0.5, BELOW),
    with_p("f_rho_sgd", 0.45, BELOW),
    with_p("f_agree", 0.7, BELOW),
    value("f_median_ratio", 1.0),
)


def test_figure3_df_judge_fails_each_planted_violation():
    """Figure 3D/F: all four parts holding is "reproduced"; a minority reaching zero training
    error, a majority without significance, high-NLC architectures failing to train (or
    significantly less often than the others), Adam's NLC correlation absent or far from
    SGD's, or the two optimizers' errors unrelated: each alone gives "differs"; no
    architecture above the NLC threshold leaves that part "not tested" (never passed)."""
    assert figure3_df.judge(DF).status == "reproduced"
    broken = {
        "minority": changed(DF, "d_near_zero", ours=0.6),
        "majority, not significant": changed(DF, "d_near_zero", p_value=ABOVE),
        "high NLC untrainable": changed(DF, "d_high_nlc", ours=0.25),
        "high NLC significantly fewer": changed(DF, "d_high_nlc", p_value=0.01),
        "Adam, no prediction": changed(DF, "f_rho", p_value=ABOVE),
        "Adam, wrong sign": changed(DF, "f_rho", ours=-0.5),
        "Adam far from SGD": changed(DF, "f_rho_sgd", ours=0.8),
        "optimizers disagree": changed(DF, "f_agree", ours=0.1, p_value=ABOVE),
    }
    for name, computed in broken.items():
        assert figure3_df.judge(computed).status == "differs", name
    untested = figure3_df.judge(changed(DF, "d_high_nlc", ours=math.nan, p_value=math.nan,
                                        n=0))
    assert untested.status == "qualitatively"
    assert "D (independent of the NLC) not tested" in untested.reason


# --- nlc-figure4: the judge -----------------------------------------------------------------

F4 = planted(with_p("depth_error", 0.4, BELOW), with_p("depth_nlc", 0.5, BELOW),
             with_p("depth_error_given_nlc", 0.1, 0.5, statistic="partial spearman"),
             value("deep_shallow_error_ratio", 1.5))


def test_figure4_judge_fails_planted_violations():
    """Figure 4: depth correlating with test error, depth with the NLC, and the NLC
    explaining the first: "reproduced"; the figure's correlation not significant or negative:
    "differs" (the explanation is then not tested); the NLC not explaining it (a significant
    partial correlation, or one above half the plain one) or depth not raising the NLC: two
    of three, "qualitatively"; both: "differs"."""
    assert figure4.judge(F4).status == "reproduced"
    for broken in (changed(F4, "depth_error", p_value=ABOVE),
                   changed(F4, "depth_error", ours=-0.4)):
        verdict = figure4.judge(broken)
        assert verdict.status == "differs"
        assert "explained by the NLC not tested" in verdict.reason
    for broken in (changed(F4, "depth_error_given_nlc", ours=0.35, p_value=ABOVE),
                   changed(F4, "depth_error_given_nlc", ours=0.15, p_value=0.01),
                   changed(F4, "depth_nlc", p_value=ABOVE)):
        assert figure4.judge(broken).status == "qualitatively"
    both = changed(changed(F4, "depth_nlc", ours=-0.1), "depth_error_given_nlc", ours=0.39)
    assert figure4.judge(both).status == "differs"


def test_partial_p_value_matches_the_t_distribution():
    """The partial correlation's p-value: t = r sqrt((n - 3) / (1 - r^2)), n - 3 degrees of
    freedom (one control variable); r = 0 gives 1."""
    r, n = 0.3, 40
    t = r * math.sqrt((n - 3) / (1 - r * r))
    assert figure4.partial_p_value(r, n) == pytest.approx(2 * stats.t.sf(t, n - 3))
    assert figure4.partial_p_value(0.0, n) == pytest.approx(1.0)
    assert math.isnan(figure4.partial_p_value(0.5, 3))


# --- nlc-confounders: the judge -------------------------------------------------------------

CONFOUNDED = planted(
    value("scale_nlc", 1e-7), value("scale_gvcs", 1e-7), value("scale_lipschitz", 1e-7),
    value("scale_error", 0.0), value("output_nlc", 0.0), value("output_gvcs", 1.1),
    value("output_lipschitz", 0.0), value("output_error", 0.0), value("width_nlc", 0.02),
    value("width_gvcs", 0.01), value("width_length", 0.01), value("width_lipschitz", 0.05),
    value("width_error", 0.0), value("bias_input_correlation", 0.99),
    value("bias_output_correlation", 0.0), value("bias_nlc", 0.0), value("bias_error", 0.0),
    with_p("sine_nlc", 0.9, BELOW, 12), value("sine_gvcs_spread", 1.3),
    with_p("sine_error", 0.0, 0.014, 4, "fisher"), with_p("relu_nlc", 0.9, BELOW, 15),
    value("relu_gvcs_spread", 1.4),
)


def test_confounders_judge_fails_each_planted_violation():
    """Section 6: every confounder bearing the paper out is "reproduced"; any one violated
    (an NLC that moves with the input scale, a GVCS that does not shrink by c, a test error
    that changes, an input width that moves the gradient length, an output correlation that
    moves with an input bias, a sine series whose NLC does not grow, whose GVCS is not stable
    or whose networks of the largest k still learn, a He ReLU series whose NLC does not grow)
    gives "differs" (strict); a series of fewer than 3 points is "not tested"."""
    assert confounders.judge(CONFOUNDED).status == "reproduced"
    broken = {
        "scale moves the NLC": ("scale_nlc", {"ours": 0.1}),
        "GVCS not / c": ("scale_gvcs", {"ours": 0.5}),
        "scale changes test error": ("scale_error", {"ours": 0.05}),
        "output GVCS shrinks": ("output_gvcs", {"ours": 0.1}),
        "output changes test error": ("output_error", {"ours": 0.1}),
        "width moves the gradient length": ("width_length", {"ours": 0.5}),
        "width moves the NLC": ("width_nlc", {"ours": 0.3}),
        "bias does not raise input correlation": ("bias_input_correlation", {"ours": 0.2}),
        "bias moves output correlation": ("bias_output_correlation", {"ours": 0.1}),
        "sine NLC flat": ("sine_nlc", {"p_value": ABOVE}),
        "sine GVCS unstable": ("sine_gvcs_spread", {"ours": 10.0}),
        "sine networks still learn": ("sine_error", {"ours": 0.75, "p_value": ABOVE}),
        "ReLU NLC flat": ("relu_nlc", {"ours": -0.3}),
        "ReLU GVCS unstable": ("relu_gvcs_spread", {"ours": 3.0}),
        "NaN is no pass": ("width_gvcs", {"ours": math.nan}),
    }
    for name, (key, fields) in broken.items():
        assert confounders.judge(changed(CONFOUNDED, key, **fields)).status == "differs", name
    short = confounders.judge(changed(CONFOUNDED, "relu_nlc", n=2, ours=math.nan,
                                      p_value=math.nan))
    assert short.status == "qualitatively" and "He ReLU depth not tested" in short.reason
    bias = confounders.judge(changed(CONFOUNDED, "bias_error", ours=0.1))
    assert "input bias (trained) fails" in bias.reason
    assert "input bias (initialization) holds" in bias.reason


# --- the commands on reduced settings --------------------------------------------------------

TINY_STUDY = {
    "data": {"source": "waveform", "n": 200, "split": [0.6, 0.2, 0.2]},
    "architectures": {"sample": 8, "overrides": {"width": 8}},
    "measures": {"names": ["nlc"], "batch_size": 60},
    "training": {"lrs": [0.1], "batch_size": 40, "max_epochs": 1},
}
"""A study of 8 sampled architectures of width 8, one rate, one epoch (seconds)."""


@pytest.fixture(scope="module")
def tiny_study():
    """The shared study's entry point replaced by an uncached tiny study (the real one's cache
    is left alone), with the SETTINGS that figure 3D rebuilds its architectures from."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(_nlc_study.SETTINGS, "small", (TINY_STUDY, 1))
        seed = seed_of(torch.Generator().manual_seed(0))  # the seed compute() draws first
        points = _nlc_study.study_points("tiny", TINY_STUDY, 1, seed)
        patch.setattr(_nlc_study, "run", lambda scale, seed: points)
        patch.setitem(figure3_df.SETTINGS, "small", {
            "retrain": {"architectures": 2, "scale": 1e-2, "factor": 3.0, "n_rates": 2,
                        "max_epochs": 2, "batch_size": 40, "stop_after": None},
            "adam": {"lrs": [0.01]}})
        yield points


def test_figure4_rows_are_the_studys_depths_and_the_statistics_recompute(tiny_study):
    """nlc-figure4: one row per architecture, its depth the sampler's (odd, 3 to 49, as its
    config); the printed Spearman rho(depth, test error), rho(depth, NLC) and the partial rho
    given log NLC equal scipy's / the rank regression's on the rows."""
    computed = figure4.compute("small", torch.Generator().manual_seed(0))
    records = computed.records()
    assert len(records) == len(tiny_study.summary.points)
    for r in records:
        assert r["depth"] == tiny_study.configs[r["arch_index"]]["depth"]
        assert r["depth"] % 2 == 1 and 3 <= r["depth"] <= 49
    usable = [r for r in records if r["nlc"] > 0 and math.isfinite(r["test_error"])]
    depth, nlc, error = (np.array([r[c] for r in usable], dtype=float)
                         for c in ("depth", "nlc", "test_error"))
    rho = stats.spearmanr(depth, error)
    printed = computed.compared("depth_error")
    assert printed.ours == pytest.approx(rho.statistic) and printed.n == len(usable)
    assert printed.p_value == pytest.approx(rho.pvalue)
    assert computed.compared("depth_nlc").ours == pytest.approx(
        stats.spearmanr(depth, nlc).statistic)
    rx, ry, rc = (stats.rankdata(v) for v in (depth, error, np.log(nlc)))
    residual = [r - np.polyval(np.polyfit(rc, r, 1), rc) for r in (rx, ry)]
    assert computed.compared("depth_error_given_nlc").ours == pytest.approx(
        np.corrcoef(*residual)[0, 1])
    assert figure4.judge(computed).status in ("reproduced", "qualitatively", "differs")
    figure4.plot(computed, Figure())


def test_figure3_df_retrains_on_the_training_error_and_adam_trains_the_same_networks(
        tiny_study):
    """nlc-figure3-df: the Adam study trains the SGD study's architectures from the same
    initializations (the same initial NLC for every one); 2 architectures are retrained, and
    their lowest training error is that of lr_search with the training set as the schedule's
    validation set (figure 3D's protocol: no early stopping on the validation error)."""
    from nngauge.studies import parse_spec
    from nngauge.studies._units import (
        UnitTask,
        build_model,
        plan_units,
        resolve_architectures,
        study_data,
    )
    from nngauge.training import lr_search, smallest_lr

    computed = figure3_df.compute("small", torch.Generator().manual_seed(0))
    assert computed.compared("f_other_initializations").ours == 0
    records = computed.records()
    retrained = [r for r in records if r["retrained"]]
    assert len(retrained) == 2
    assert all(math.isfinite(r["test_error_adam"]) for r in records)
    seed = seed_of(torch.Generator().manual_seed(0))
    spec = parse_spec({"name": "x", "seed": seed, **TINY_STUDY})
    r = retrained[0]
    architecture = resolve_architectures(spec)[r["arch_index"]]
    unit = next(u for u in plan_units(spec) if u.kind == "init"
                and u.arch_index == r["arch_index"])
    train = study_data(spec.data, spec.seed)[0]
    model = build_model(UnitTask(spec, architecture, unit))
    start = smallest_lr(model, train, batch_size=40, scale=1e-2, generator=seed)
    search = lr_search(model, train, train, start=start, n_rates=2, batch_size=40,
                       max_epochs=2, edge=0, dtype=torch.float64, generator=seed)
    assert r["lowest_train_error_lr"] == pytest.approx(search.rates[search.best_index])
    assert r["lowest_train_error"] == pytest.approx(min(x.best_val_error for x in search.runs))
    assert r["lowest_train_error"] == pytest.approx(search.best.train_error)
    adam = computed.compared("f_rho")
    both = [x for x in records if math.isfinite(x["test_error_adam"])]
    assert adam.ours == pytest.approx(stats.spearmanr(
        [x["nlc"] for x in both], [x["test_error_adam"] for x in both]).statistic)
    assert figure3_df.judge(computed).status in ("reproduced", "qualitatively", "differs")
    figure3_df.plot(computed, Figure())


def test_confounders_identities_hold_on_a_reduced_run(monkeypatch):
    """nlc-confounders on one base network and short series: scaling the input by c leaves the
    NLC and multiplies GVCS, gradient length and Lipschitz estimate by 1 / c; scaling the
    output by c multiplies the Lipschitz estimate by c and leaves the NLC and, through the
    loss scaling, the whole training (the same test error); the input-width twin trains
    exactly as its base (the same test error), its GVCS shrinks by about sqrt(c) and its
    gradient length stays; an input bias raises the inputs' correlation and leaves the
    outputs' and the NLC; the sine network's NLC grows with k."""
    monkeypatch.setitem(confounders.SETTINGS, "small", {
        **confounders.SETTINGS["small"], "n": 200, "bases": ("tanh",), "lr_start": 0.3, "n_lrs": 1,
        "epochs": 2, "input_scales": (10.0,), "ks": (1.0, 16.0), "sine_seeds": 1,
        "relu_depths": (2, 6), "relu_seeds": 1})
    computed = confounders.compute("small", torch.Generator().manual_seed(0))
    rows = {(r["part"], r["factor"]): r for r in computed.records()}
    base = rows[("base", 1.0)]
    scaled, output = rows[("input scale", 10.0)], rows[("output scale", 10.0)]
    assert scaled["nlc"] == pytest.approx(base["nlc"], rel=1e-4)
    for column in ("gvcs", "gradient_length", "lipschitz"):
        assert scaled[column] * 10 == pytest.approx(base[column], rel=1e-3)
    assert output["lipschitz"] == pytest.approx(10 * base["lipschitz"], rel=1e-6)
    assert output["nlc"] == pytest.approx(base["nlc"], rel=1e-9)
    assert output["test_error"] == base["test_error"]
    wide = rows[("input width", 4)]
    assert wide["test_error"] == base["test_error"]
    assert wide["gvcs"] * 2 == pytest.approx(base["gvcs"], rel=0.15)
    assert wide["gradient_length"] == pytest.approx(base["gradient_length"], rel=0.15)
    biased = rows[("input bias", 10.0)]
    assert biased["input_correlation"] > 0.9 > abs(base["input_correlation"])
    assert biased["output_correlation"] == pytest.approx(base["output_correlation"], rel=1e-6)
    assert biased["nlc"] == pytest.approx(base["nlc"], rel=1e-6)
    assert rows[("sine", 16.0)]["nlc"] > 5 * rows[("sine", 1.0)]["nlc"]
    assert computed.compared("scale_nlc").ours < confounders.IDENTITY
    assert confounders.judge(computed).status in ("qualitatively", "differs")  # n < 3 series
    confounders.plot(computed, Figure())
