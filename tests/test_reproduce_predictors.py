"""``nngauge reproduce predictors`` (issue 21): every predictor at initialization against the
zero-cost proxies and the cost baselines on one set of sampled architectures. The command runs
at a test scale (12 architectures, 1 epoch: the default's 100 take minutes, recorded in the
README); the table's statistics are checked against scipy in tests/test_study_predictors.py,
the combined predictors here by hand."""

import csv
import math

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from nngauge.reproduce import _predictors
from nngauge.reproduce._predictors import COLUMNS, COMBINATIONS, REPRODUCTION, with_combinations
from nngauge.studies._spec import PROXIES

TEST_SCALE = ({
    "data": {"source": "waveform", "n": 200, "split": [0.6, 0.2, 0.2]},
    "architectures": {"sample": 12, "overrides": {"width": 8}},
    "measures": {"names": list(_predictors.MEASURES), "batch_size": 60},
    "training": {"lrs": [0.1], "batch_size": 30, "max_epochs": 1},
}, 2)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(_predictors.SETTINGS["mlp"], "small", TEST_SCALE)
        out = tmp_path_factory.mktemp("predictors")
        return REPRODUCTION.run(out, scale="small", generator=0)  # its default: 3 seeds


@pytest.mark.slow
def test_the_verdict_is_the_majority_of_three_seeds_with_each_rhos_spread(result):
    """At its default three seeds (0, 1, 2) each seed's study is judged on its own; the verdict
    is the majority's with how many agree, each printed rho has its spread over the seeds, and
    predictors_seeds.csv holds every seed's verdict and values (issue 36)."""
    assert REPRODUCTION.n_seeds == 3
    assert [o.seed for o in result.per_seed] == [0, 1, 2]
    statuses = [o.status for o in result.per_seed]
    agree = statuses.count(result.verdict.status)
    assert agree == max(statuses.count(s) for s in statuses)
    assert result.verdict.reason.startswith(f"{agree} of 3 seeds agree on "
                                            f"{result.verdict.status}: seed 0 {statuses[0]}")
    rhos = [o.computed.compared("rho_nlc_rule").ours for o in result.per_seed]
    finite = [r for r in rhos if not math.isnan(r)]
    if len(finite) >= 2:
        assert result.spread("rho_nlc_rule") == (min(finite), max(finite))
    readme = result.readme_path.read_text(encoding="utf-8")
    assert "--seed 0 --seeds 3" in readme and "| quantity | ours | over seeds |" in readme
    with open(result.seeds_csv_path, newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if row["key"] == "rho_nlc_rule"]
    assert [(row["seed"], row["verdict"]) for row in rows] == [
        (str(o.seed), o.status) for o in result.per_seed]


@pytest.mark.slow
def test_the_table_ranks_every_predictor_with_the_baselines_marked(result):
    """One row per predictor (the zero-cost proxies, the cost baselines, nngauge's and the
    three combinations), best first, with known directions (none taken from the data), the
    baselines flagged, n at most the 12 architectures, bootstrap intervals around each rho,
    and the paper's NAS-Bench-201 numbers beside the proxies that have one; the CSV, the
    figure and the README with its verdict are written."""
    with open(result.csv_path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == COLUMNS
    names = [r["predictor"] for r in rows]
    expected = {*PROXIES, "nlc", "output_bias", "rho_max", "rho_max_before_pooling",
                *COMBINATIONS}
    assert set(names) == expected and len(names) == len(expected)
    table = result.computed.extra["table"]
    assert not any(r.direction_from_data for r in table.rows)
    assert {r.name for r in table.rows if r.baseline} == {"n_params", "flops"}
    defined = [r for r in table.rows if not math.isnan(r.spearman)]
    assert [r.spearman for r in defined] == sorted((r.spearman for r in defined), reverse=True)
    for r in defined:
        assert 3 <= r.n <= 12 and r.spearman_low <= r.spearman <= r.spearman_high
    synflow = result.computed.compared("rho_synflow")
    assert synflow.paper == 0.74 and "NAS-Bench-201" in synflow.note
    assert result.png_path.stat().st_size > 10_000
    readme = result.readme_path.read_text(encoding="utf-8")
    assert "beat n_params significantly" in readme and "nlc_rule+skip (rho" in readme
    assert "every zero-cost proxy" in readme
    assert result.verdict.status in ("reproduced", "qualitatively", "differs")


def test_combinations_average_the_signed_ranks():
    """A combined predictor is the mean of its columns' direction-signed ranks (TE-NAS's sum
    of ranks, section 3.3), on the points where every column is finite: by hand on four
    points, with the condition number's direction -1 and a NaN left out."""
    from nngauge.studies._summarize import StudySummary

    points = tuple({"arch_index": i, "skip": skip, "test_error": 0.1 * i, "te_nas": kappa,
                    "te_nas_regions": regions, "synflow": 1.0, "jacob_cov": 1.0,
                    "naswot": 1.0, "nlc_rule": rule}
                   for i, (skip, kappa, regions, rule) in enumerate(
                       [(True, 10.0, 5.0, 0.0), (False, 20.0, 7.0, 0.5),
                        (True, 30.0, 6.0, 1.0), (False, math.nan, 9.0, 0.0)]))
    summary = StudySummary("id", "hand", ("te_nas", "te_nas_regions"), points, (), None, 0.1)
    combined = with_combinations(summary, {"te_nas": -1, "te_nas_regions": 1, "nlc_rule": -1})
    assert combined.columns[-3:] == tuple(COMBINATIONS)
    te = [p["te_nas_combined"] for p in combined.points]
    expected = (rankdata([-10.0, -20.0, -30.0]) + rankdata([5.0, 7.0, 6.0])) / 2
    np.testing.assert_allclose(te[:3], expected)
    assert math.isnan(te[3])
    rule = [p["nlc_rule+skip"] for p in combined.points]
    np.testing.assert_allclose(rule, (rankdata([0.0, -0.5, -1.0, 0.0])
                                      + rankdata([1.0, 0.0, 1.0, 0.0])) / 2)
    assert summary.points[0].get("vote") is None  # the summary given is not changed


def test_study_reproductions_send_their_units_where_asked(monkeypatch, tmp_path):
    """The reproductions that run a study use a local process pool by default and the Ray
    cluster given to ``nngauge reproduce --ray ADDRESS`` (issue 20: "process pool by default,
    Ray when asked"): the options reach run_study, through the command line too."""
    import nngauge.studies
    from typer.testing import CliRunner

    from nngauge.cli import app
    from nngauge.reproduce._base import run_reproduction_study, study_executor

    calls = []

    class Stop(Exception):
        pass

    def recorded(spec, url, **options):
        calls.append(options)
        raise Stop

    monkeypatch.setattr(nngauge.studies, "run_study", recorded)
    for context, expected in ((study_executor(), {"workers": 2}),
                              (study_executor("10.0.0.1:6379"),
                               {"executor": "ray", "address": "10.0.0.1:6379"})):
        with context, pytest.raises(Stop):
            run_reproduction_study(None, "sqlite://", 2)
        assert calls.pop() == expected
    result = CliRunner().invoke(app, ["reproduce", "nlc-lr", "--ray", "auto", "--out",
                                       str(tmp_path / "lr")])
    assert isinstance(result.exception, Stop)
    assert calls == [{"executor": "ray", "address": "auto"}]


@pytest.mark.slow
def test_the_cnn_family_runs_the_same_benchmark_on_digits(tmp_path):
    """``predictors-cnn``: the same table over sampled CNNs on the digits images (test scale:
    6 CNNs of width 8 and depth 3, 1 epoch): every predictor has its row, the baselines are
    measured on every CNN, and the verdict is written."""
    from nngauge.reproduce import _predictors_cnn

    scale = ({"data": {"source": "digits", "split": [0.6, 0.2, 0.2]},
              "architectures": {"family": "cnn", "sample": 6,
                                "overrides": {"width": 8, "depth": 3}},
              "measures": {"names": list(_predictors.MEASURES), "batch_size": 60},
              "training": {"lrs": [0.1], "batch_size": 50, "max_epochs": 1}}, 2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(_predictors.SETTINGS["cnn"], "small", scale)
        result = _predictors_cnn.REPRODUCTION.run(tmp_path, scale="small",
                                                  generator=torch.Generator().manual_seed(0))
    table = result.computed.extra["table"]
    assert {r.name for r in table.rows} == {*PROXIES, "nlc", "output_bias", "rho_max",
                                            "rho_max_before_pooling", *COMBINATIONS}
    assert table["n_params"].n == 6 and table["flops"].n == 6
    assert result.verdict is not None and result.readme_path.exists()
