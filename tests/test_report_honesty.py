"""The report says no more than its numbers support: the demo report has no failed section, a
section's badge is never better than its verdicts, no table shows an empty column,
non-finite values are drawn, headline numbers carry their meaning, verdicts near a threshold
say so, a quick report says what it changed, and the theory's advice is checked against the
model's own setting."""

import math
import re
from types import SimpleNamespace

import pytest
import torch

from nngauge.data._sources import load_data
from nngauge.nn import mlp
from nngauge.nn._sources import load_model
from nngauge.report import SECTION_BUILDERS, build_report
from nngauge.report import _verdicts as V
from nngauge.report._context import Table
from nngauge.report._figures import per_layer_lines
from nngauge.theory import critical_init, profile

DEMO = "mlp:depth=10,width=100,activation=relu,norm=batch"
RANK = {"ok": 0, "warn": 1, "bad": 2}


@pytest.fixture(scope="module")
def demo():
    """The README's demo report (`nngauge report DEMO --data waveform --quick`), built as the
    CLI builds it."""
    source = load_data("waveform", seed=0)
    model = load_model(DEMO, data=source, seed=0)
    return build_report(model, source.as_pair(), quick=True, model_name=DEMO,
                        data_name="waveform")


def test_demo_report_has_no_failed_section(demo):
    assert demo.failed == [], [(s.key, s.error) for s in demo.sections if s.status == "failed"]
    assert all(s.status == "ok" for s in demo.sections), [(s.key, s.status, s.error)
                                                          for s in demo.sections]
    # the per-point sections say in which batchnorm mode they ran
    for key in ("trajectory", "transitions"):
        notes = " ".join(next(s for s in demo.sections if s.key == key).output.notes)
        assert "norm_mode='frozen'" in notes


def test_no_section_badge_is_better_than_its_verdicts(demo):
    from nngauge.report._build import VERDICT_SECTIONS

    html = demo.to_html()
    for section in demo.sections:
        badge = demo.badge(section)
        judged = [v.status for v in demo.verdicts if VERDICT_SECTIONS.get(v.key) == section.key
                  and v.status in RANK]
        if judged:
            assert RANK[badge] >= max(RANK[s] for s in judged), (section.key, badge, judged)
        shown = re.search(rf'id="section-{section.key}">\s*<h2>[^<]*<span class="badge '
                          rf'status-(\w+)">', html)
        assert shown and shown.group(1) == badge
    assert {demo.badge(s) for s in demo.sections if s.key == "jacobian"} == {
        next(v.status for v in demo.verdicts if v.key == "jacobian")}


def test_no_table_has_an_empty_column(demo):
    tables = [t for s in demo.sections for t in s.output.tables]
    assert tables
    for table in tables:
        for i, column in enumerate(table.columns):
            assert any(row[i] not in ("None", "") for row in table.rows), (table.title, column)
    made = Table("t", ("name", "a", "b"), (("x", "None", "1"), ("y", "None", "inf")))
    assert made.columns == ("name", "b") and made.rows == (("x", "1"), ("y", "inf"))


def test_headlines_have_meaning_and_quick_says_what_it_changed(demo):
    for verdict in demo.verdicts:
        if verdict.value is not None:
            assert verdict.meaning, verdict.key
    theory = next(v for v in demo.verdicts if v.key == "theory")
    assert "P'(1)" in theory.meaning and "critical" in theory.meaning
    html = demo.to_html()
    assert 'id="quick"' in html and "correlation samples: 100 instead of 200" in html
    assert demo.to_dict()["quick_changes"] == demo.quick_changes
    # one NLC batch with batch statistics has no spread to estimate a standard error from
    assert all(v.stderr is None or v.stderr > 0 for v in demo.verdicts)


def test_a_verdict_near_its_threshold_says_it_could_go_either_way():
    # the demo's Jacobian verdict once read 9.38 (ok) and 10.6 (warn) with and without --quick
    assert "either way" in V.close_call(9.38, 0.8, (10.0,))
    assert V.close_call(5.0, 0.8, (10.0,)) == ""
    assert "no standard error" in V.close_call(9.8, None, (10.0,))
    # the Jacobian growth's standard error from paired per-sample norms (delta method)
    gen = torch.Generator().manual_seed(0)
    first = 1 + 0.1 * torch.rand(400, generator=gen).double().numpy()
    last = 9.5 * first * (1 + 0.3 * torch.randn(400, generator=gen).double().numpy())
    se = V.ratio_stderr(first, last)
    boot = [math.sqrt((last[i] ** 2).mean() / (first[i] ** 2).mean()) for i in
            torch.randint(0, 400, (300, 400), generator=gen).numpy()]
    assert se == pytest.approx(float(torch.tensor(boot).std()), rel=0.25)
    layer = SimpleNamespace
    jac = SimpleNamespace(layers=(layer(name="a", norm=float((first ** 2).mean() ** 0.5),
                                        per_sample=first),
                                  layer(name="b", norm=float((last ** 2).mean() ** 0.5),
                                        per_sample=last)), batch_coupled=False, n_samples=400)
    verdict = V.jacobian_verdict(jac, ["a", "b"])
    assert verdict.stderr == pytest.approx(se) and "either way" in verdict.close_call


def test_a_measured_value_below_a_printed_bound_is_called_out():
    corr = SimpleNamespace(rho_max=0.5)
    verdict = V.shrinkage_verdict(corr, SimpleNamespace(jacobian_norm_sq=0.068), 0.0428,
                                  None)
    assert "below the bound" in verdict.message and "finite width" in verdict.message
    assert "LayerNorm" in verdict.message
    fine = V.shrinkage_verdict(corr, SimpleNamespace(jacobian_norm_sq=0.068), 0.5, "layer")
    assert "below the bound" not in fine.message


def test_non_finite_values_are_drawn_not_dropped():
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    per_layer_lines(ax, ["a", "b", "c", "d"], {"condition number": [3.0, math.inf, math.nan,
                                                                    10.0]},
                    ylabel="condition number", log=True)
    assert {t.get_text() for t in ax.texts} == {"inf", "nan"}


def test_sub_layers_are_grouped_by_block():
    from matplotlib.figure import Figure

    names = [f"layers.{i}.{k}" for i in range(50) for k in ("linear", "norm", "act")]
    kinds = {n: {"linear": "linear", "norm": "norm", "act": "activation"}[n.rsplit(".")[-1]]
             for n in names}
    ax = Figure().add_subplot()
    per_layer_lines(ax, names, {"NLC": [1.0 + i for i in range(len(names))]}, ylabel="NLC",
                    kinds=kinds)
    assert len(ax.get_xticks()) == 50 and len(ax.lines) == 3


SETTINGS = [  # activation, sigma_w, sigma_b, norm
    ("tanh", 1.0, 0.0, None),  # q* = 0: the theory breaks down, sigma_w alone cannot fix it
    ("tanh", 1.0, 0.0, "layer"),  # chaotic under LayerNorm
    ("erf", 1.5, 0.3, None),  # chaotic
    ("relu", 1.0, 0.0, "layer"),  # critical
    ("erf", 1.0, None, None),  # critical (solved below)
    ("relu", 1.41, 0.0, None),  # just below He init: ordered (no q*, but P is defined)
]


@pytest.mark.parametrize("act, sigma_w, sigma_b, norm", SETTINGS)
def test_theory_advice_is_consistent_with_the_setting(act, sigma_w, sigma_b, norm):
    arch = "mlp" if norm is None else "layernorm"
    if sigma_b is None:
        sigma_w, sigma_b = critical_init(act, sigma_w=sigma_w, arch=arch)
    net = mlp(12, 64, 12, 2, activation=act, norm=norm, sigma_w=sigma_w, bias_std=sigma_b,
              init="gaussian", generator=torch.Generator().manual_seed(0))
    theory = [b for b in SECTION_BUILDERS if b.key == "theory"]
    report = build_report(net, torch.randn(64, 12, generator=torch.Generator().manual_seed(1)),
                          quick=True, sections=theory)
    verdict = next(v for v in report.verdicts if v.key == "theory")
    advice = report.sections[0].output.result["fix"]  # shown on the card when it warns
    text = verdict.message + " " + advice
    advised = re.search(r"sigma_w = ([\d.e+-]+), sigma_b = ([\d.e+-]+)", advice)
    if "phase critical" in verdict.message:
        assert verdict.status == "ok" and verdict.fix == "" and advice == ""
        return
    assert verdict.fix in ("", advice) and advised, text
    sw, sb = float(advised.group(1)), float(advised.group(2))
    # never the setting it judges, and a setting where the theory holds and is critical
    assert not (math.isclose(sw, sigma_w, rel_tol=1e-5) and math.isclose(sb, sigma_b,
                                                                           abs_tol=1e-9))
    # (at the printed 6 digits: a slope within 1e-4 of 1, a depth scale of 10^4 layers)
    assert abs(profile(act, sw, sb, arch=arch).slope_at_one - 1) < 1e-4
    # the engine's own "use sigma_b > 0" is not repeated beside different advice
    assert "sigma_b > 0" not in text
    if "does not hold" in verdict.message:
        assert sb > 0
