"""Calibrated verdicts: the committed evidence table (benchmarks/verdict_evidence.py), the
report's evidence per verdict, and coverage of the user's network."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from nngauge.report import _evidence as E
from nngauge.report import _verdicts as V


def test_the_committed_counts_are_those_of_the_committed_rows():
    """The JSON's counts and groups are what count_evidence computes from the CSV's rows, and
    each row's `good` is the rule applied to its test error (both files written by one run)."""
    table = E.committed()
    rows = E.read_rows()
    assert table["provenance"]["networks"] == len(rows) >= 400
    assert table["provenance"]["good_within"] == E.GOOD_WITHIN
    assert table["provenance"]["command"].startswith("python benchmarks/verdict_evidence.py")
    assert len(table["provenance"]["commit"]) == 40 and table["provenance"]["date"]
    regood = E.mark_good([{**row, "good": None} for row in rows])
    assert [r["good"] for r in regood] == [r["good"] for r in rows]
    assert json.loads(json.dumps(E.count_evidence(rows))) == {
        "groups": table["groups"], "counts": table["counts"]}


@pytest.mark.parametrize("key, value", [
    ("nlc", 0.5), ("nlc", 3.0), ("nlc", 3.01), ("nlc", 10.0), ("nlc", 10.5),
    ("output_bias", 999.0), ("output_bias", 1001.0),
    ("shrinkage", 0.5), ("shrinkage", 0.95), ("shrinkage", 0.995),
    ("jacobian", 1.0), ("jacobian", 0.05), ("jacobian", 50.0), ("jacobian", 2000.0),
])
def test_the_counted_status_is_the_verdicts_status(key, value):
    """status_of (what the table counts) agrees with the verdict functions' own statuses."""
    if key == "nlc":
        layer = SimpleNamespace(nlc=value, stderr=0.01, output_bias=1.0)
        verdict = V.nlc_verdict(SimpleNamespace(layers=[layer]))
    elif key == "output_bias":
        verdict = V.bias_verdict(SimpleNamespace(layers=[SimpleNamespace(output_bias=value)]))
    elif key == "shrinkage":
        verdict = V.shrinkage_verdict(SimpleNamespace(rho_max=value), None, None)
    else:
        verdict = V._jacobian_verdict(value, 3, "source")
    assert E.status_of(key, value) == verdict.status


PLANTED = {
    "provenance": {"command": "python benchmarks/verdict_evidence.py", "commit": "a" * 40,
                   "date": "2026-11-29", "good_within": 0.05},
    "groups": {"bench/mlp": {"population": "bench", "family": "mlp", "data": "vectors",
                             "networks": 30, "depth": [2, 10], "width": [16, 512]}},
    "counts": {"nlc": {"bench/mlp": {"ok": {"n": 20, "good": 15}, "warn": {"n": 6, "good": 2},
                                     "bad": {"n": 4, "good": 0}}}},
}


def test_evidence_counts_the_status_against_the_others():
    traits = E.NetworkTraits("mlp", 4, 100, "vectors")
    record = E.evidence_for("nlc", "ok", traits, PLANTED)
    assert record["covered"] and record["provenance"] == PLANTED["provenance"]
    assert record["groups"] == [{"group": "bench/mlp", "status": "ok", "n": 20, "good": 15,
                                 "n_other": 10, "good_other": 2}]
    text = E.evidence_sentence("nlc", record)
    assert "among 20 benchmark networks of bench/mlp with this status (ok), 15 (75%)" in text
    assert "of the 10 in the other statuses, 2 (20%)" in text
    assert "commit aaaaaaaaaa, 2026-11-29" in text
    bad = E.evidence_for("nlc", "bad", traits, PLANTED)["groups"][0]
    assert (bad["n"], bad["good"], bad["n_other"], bad["good_other"]) == (4, 0, 26, 17)
    assert E.evidence_for("kernel", "ok", traits, PLANTED) is None
    assert E.evidence_for("nlc", "n/a", traits, PLANTED) is None


@pytest.mark.parametrize("traits, why", [
    (E.NetworkTraits("resnet", 4, 100, "vectors"), "family resnet, not mlp"),
    (E.NetworkTraits("mlp", 49, 100, "vectors"), "depth 49 outside 2-10"),
    (E.NetworkTraits("mlp", 4, 2048, "vectors"), "width 2048 outside 16-512"),
    (E.NetworkTraits("mlp", 4, 100, "images"), "images data, not vectors"),
])
def test_a_network_outside_every_group_is_said_to_be(traits, why):
    record = E.evidence_for("nlc", "ok", traits, PLANTED)
    assert not record["covered"] and why in record["outside"]
    text = E.evidence_sentence("nlc", record)
    assert text.startswith("No benchmark evidence for this network") and why in text
    assert "not a measured rate" in text


@pytest.mark.parametrize("name, family, data", [
    ("resnet_small", "resnet", "images"), ("resnet_small_timm", "resnet", "images"),
    ("vit_small", "transformer", "images"), ("gpt_small", "transformer", "tokens"),
    ("bert_small", "transformer", "tokens"), ("lstm", "rnn", "sequences"),
    ("lstm_tokens", "rnn", "tokens"), ("groupnorm_cnn", "cnn", "images"),
    ("convnext_block", "resnet", "images"), ("mlp_float64", "mlp", "vectors"),
])
def test_networks_users_bring_are_described_by_family(name, family, data):
    from nngauge.zoo import ZOO, sample_inputs

    traits = E.describe_network(ZOO[name].build(), sample_inputs(name, 2))
    assert (traits.family, traits.data) == (family, data)
    assert traits.width > 0


def test_nngauge_networks_are_described_with_their_depth_and_width():
    from nngauge.nn import cnn, mlp

    plain = E.describe_network(cnn(64, 16, 3, 10, image_shape=(1, 8, 8)), torch.randn(2, 64))
    assert (plain.family, plain.depth, plain.width) == ("cnn", 3, 16)
    skip = E.describe_network(cnn(64, 16, 3, 10, image_shape=(1, 8, 8), skip=1.0),
                              torch.randn(2, 64))
    assert skip.family == "resnet"
    assert E.describe_network(mlp(10, 32, 4, 3), torch.randn(2, 10)) == E.NetworkTraits(
        "mlp", 3, 32, "vectors")


@pytest.fixture(scope="module")
def covered_report():
    """A report on an MLP inside the benchmark's mlp-waveform group."""
    from nngauge.data import waveform_noise
    from nngauge.nn import mlp
    from nngauge.report import build_report

    group = E.committed()["groups"]["mlp-waveform/mlp"]
    depth = (group["depth"][0] + group["depth"][1]) // 2
    width = (group["width"][0] + group["width"][1]) // 2
    net = mlp(40, width, depth + 1, 3, activation="tanh",
              generator=torch.Generator().manual_seed(0))
    x, _ = waveform_noise(200, generator=0)
    return build_report(net, x, quick=True), depth, width


def test_the_reports_json_carries_the_tables_counts_and_provenance(covered_report):
    report, depth, width = covered_report
    table = E.committed()
    verdicts = {v["key"]: v for v in json.loads(report.to_json())["verdicts"]}
    for key in E.JUDGED:
        verdict = verdicts[key]
        evidence = verdict["evidence"]
        assert evidence["provenance"] == table["provenance"]
        assert evidence["traits"] == {"family": "mlp", "depth": depth, "width": width,
                                      "data": "vectors"}
        assert evidence["covered"]
        group = next(g for g in evidence["groups"] if g["group"] == "mlp-waveform/mlp")
        cells = table["counts"][key]["mlp-waveform/mlp"]
        here = cells.get(verdict["status"], {"n": 0, "good": 0})
        assert (group["n"], group["good"]) == (here["n"], here["good"])
        assert group["n_other"] == sum(c["n"] for s, c in cells.items()
                                       if s not in (verdict["status"], "n/a"))
    assert verdicts["kernel"]["evidence"] is None and verdicts["theory"]["evidence"] is None
    page = report.to_html()
    assert page.count('class="small evidence"') == len(E.JUDGED)


def test_the_resnet50_of_the_issue_lies_outside_the_benchmark():
    """timm's ResNet-50 shape (zero-initialized last batchnorms, 1000 classes) on 224 x 224
    images: a residual CNN on images, 49 activation layers and 2048 channels deep, which no
    benchmark group covers: its verdicts carry the papers' thresholds, not rates."""
    from nngauge.zoo import resnet50

    model = resnet50(1000, zero_init_last=True)
    traits = E.describe_network(model, torch.randn(2, 3, 224, 224))
    assert traits.family == "resnet" and traits.data == "images" and traits.width == 2048
    record = E.evidence_for("shrinkage", "ok", traits)
    assert not record["covered"] and "outside" in record["outside"]
    assert not math.isnan(traits.depth) and traits.depth >= 49
    from nngauge import correlations

    result = correlations(model, torch.randn(8, 3, 224, 224,
                                             generator=torch.Generator().manual_seed(0)))
    assert result.rho_max_before_pooling < V.RHO_WARN < result.rho_max
    assert result.after_pooling == ("fc", "output")
    assert V.shrinkage_verdict(result, None, None).status == "ok"


def test_the_docs_page_is_the_committed_table():
    """docs/verdict_evidence.md is render_markdown of the committed JSON (its numbers are
    written by the script, never by hand)."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "verdict_evidence.md"
    assert page.read_text(encoding="utf-8") == E.render_markdown(E.committed())
