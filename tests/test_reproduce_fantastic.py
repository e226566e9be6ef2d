"""``nngauge reproduce fantastic``: each judged claim holds on a planted table that bears it out
and fails ("differs", with the numbers) on one that violates it, and the verdict counts the
seeds that agree."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from nngauge.reproduce import _fantastic_claims as claims
from nngauge.studies import KendallTau


def _frame(rows: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    """A ranking table: measure -> (tau, tau_low, psi)."""
    return pd.DataFrame([{"measure": name, "tau": tau, "tau_low": low, "tau_high": tau + 0.1,
                          "psi": psi} for name, (tau, low, psi) in rows.items()])


def _tau(value: float, low: float) -> KendallTau:
    return KendallTau("nlc", "test_error", value, low, value + 0.1, 150, 200, 0)


FILLER = {f"other_{i}": (0.1, 0.0, 0.05 * i + 0.01) for i in range(8)}
"""Eight other measures with Psi 0.01 .. 0.36."""

GOOD = _frame({**FILLER,
               "pacbayes_mag_flatness_after": (0.5, 0.4, 0.6),
               "pacbayes_flatness_after": (0.3, 0.2, 0.2),
               "log_prod_spectral_after": (-0.2, -0.3, -0.1),
               "log_prod_spectral_over_margin_after": (0.0, -0.1, 0.05),
               "n_params": (0.05, -0.05, 0.0),
               "path_norm_over_margin_after": (0.3, 0.2, 0.2),
               "log_prod_frobenius_over_margin_after": (0.1, -0.05, 0.1)})
TAUS = {"nlc": _tau(0.3, 0.2)}


def _replace(frame: pd.DataFrame, name: str, tau: float, low: float, psi: float) -> pd.DataFrame:
    out = frame.copy()
    out.loc[out["measure"] == name, ["tau", "tau_low", "psi"]] = [tau, low, psi]
    return out


def test_every_claim_holds_on_a_table_that_bears_it_out():
    for check in claims.CLAIMS:
        result = check(GOOD, TAUS)
        assert result.holds, result


@pytest.mark.parametrize("check, frame, taus", [
    # the best flatness measure ranks 5th of 15 (the top fraction: ceil(0.25 * 15) = 4)
    (claims.flatness_among_best,
     _replace(_replace(GOOD, "pacbayes_mag_flatness_after", 0.1, 0.0, 0.205),
              "pacbayes_flatness_after", 0.1, 0.0, 0.01), TAUS),
    # flatness first but with a negative Psi (every measure negative)
    (claims.flatness_among_best,
     GOOD.assign(psi=GOOD["psi"] - 1.0), TAUS),
    (claims.spectral_not_positive,
     _replace(GOOD, "log_prod_spectral_after", 0.3, 0.2, 0.25), TAUS),
    (claims.params_no_predictor, _replace(GOOD, "n_params", -0.3, -0.4, -0.2), TAUS),
    (claims.nlc_predicts_test_error, GOOD, {"nlc": _tau(0.1, -0.05)}),
    (claims.neyshabur_norms,
     _replace(GOOD, "log_prod_frobenius_over_margin_after", -0.1, -0.2, 0.0), TAUS),
    (claims.neyshabur_norms,
     _replace(_replace(GOOD, "path_norm_over_margin_after", 0.05, -0.05, 0.1),
              "log_prod_frobenius_over_margin_after", 0.05, -0.05, 0.1), TAUS),
], ids=["flatness-rank", "flatness-negative", "spectral-positive", "params-predict",
        "nlc-no-tau", "neyshabur-negative", "neyshabur-not-significant"])
def test_each_claim_fails_on_a_table_that_violates_it(check, frame, taus):
    result = check(frame, taus)
    assert not result.holds
    assert any(ch.isdigit() for ch in result.numbers)  # the verdict states the numbers


def test_a_claim_without_its_measures_does_not_hold():
    empty = _frame({"something_else": (0.5, 0.4, 0.5)})
    for check in claims.CLAIMS:
        result = check(empty, {"nlc": _tau(math.nan, math.nan)})
        assert not result.holds and "none of" in result.numbers


def test_the_verdict_counts_the_seeds_that_agree():
    bad = _replace(GOOD, "n_params", -0.3, -0.4, -0.2)
    verdicts = claims.judge_claims([GOOD, bad, GOOD], [TAUS, TAUS, TAUS])
    by_claim = {v.claim: v for v in verdicts}
    params = by_claim["the parameter count is not a predictor"]
    assert (params.agree, params.status) == (2, "reproduced")
    assert "holds at 2 of 3 seeds" in params.sentence()
    verdicts = claims.judge_claims([bad, bad, GOOD], [TAUS, TAUS, TAUS])
    params = {v.claim: v for v in verdicts}["the parameter count is not a predictor"]
    assert (params.agree, params.status) == (1, "differs")
    assert "-0.300" in params.sentence()


# ------------------------------------------------------------------ the reproduction, reduced

@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    """A 2-seed zoo of 8 MLPs on digits (width x rate x batch size), trained 40 steps, with
    the NLC and the parameter count at initialization and Jiang's norms and distance after."""
    from nngauge.studies import network_table, parse_spec, run_study

    url = f"sqlite:///{tmp_path_factory.mktemp('zoo') / 'zoo.db'}"
    spec = parse_spec({
        "name": "fantastic-test", "seed": 0, "seeds": [0, 1],
        "data": {"source": "digits", "split": [0.8, 0.2]},
        "grid": {"family": "mlp", "depth": 1, "width": [8, 16], "lr": [0.05, 0.2],
                 "batch_size": [16, 64], "train_size": 200},
        "measures": {"names": ["nlc", "n_params"]},
        "training": {"target_loss": 0.01, "max_steps": 40, "keep_weights": False,
                     "measure_after": ["norm_measures", "distance_from_init"]}})
    run_study(spec, url, workers=1)
    return network_table(url)


def test_the_reproduction_scores_every_seed_and_states_its_claims(tiny_zoo, tmp_path):
    from nngauge.reproduce import _fantastic as fantastic

    computed = fantastic.computed_from(tiny_zoo, seed=0)
    rows = computed.records()
    assert {r["seed"] for r in rows} == {0, 1}
    measures = {r["measure"] for r in rows}
    assert {"nlc", "log_prod_spectral_after", "distance_from_init_after"} <= measures
    assert "n_params" in measures and "gap" not in measures and "lr" not in measures
    for r in rows:  # every score is a number in its range or NaN (no network pair, no group)
        assert -1 <= r["tau"] <= 1 and (math.isnan(r["psi"]) or -1 <= r["psi"] <= 1)
    assert len(computed.extra["claims"]) == len(claims.CLAIMS)
    assert computed.compared("networks").ours == 8
    verdict = fantastic.judge(computed)
    # the flatness measures were not taken: that claim cannot hold, so not every claim does
    assert verdict.status in ("qualitatively", "differs")
    assert "flatness and PAC-Bayes measures are among the best: differs" in verdict.reason
    page = fantastic.write_page(computed, tmp_path)
    text = page.read_text()
    assert text.count("data:image/png;base64,") == len(computed.extra["rankings"][0].rows)
    assert "Psi lr" in text and "log_prod_spectral_after" in text
    # the zoo is written beside the page, and rescoring it gives the same rows
    assert fantastic.NETWORKS_CSV in text
    again = fantastic.rescore(tmp_path / fantastic.NETWORKS_CSV, seed=0)
    assert len(again.rows) == len(computed.rows)
    for a, b in zip(again.records(), computed.records()):
        for column, value in b.items():
            if isinstance(value, float):
                np.testing.assert_allclose(a[column], value, rtol=1e-9, equal_nan=True)
            else:
                assert a[column] == value, column


def test_optimization_measures_are_scored_and_the_rest_of_the_record_is_not(tiny_zoo):
    """Jiang's step.to.0.1 and step.0.1.to.0.01 are measures (where they vary); the gap, the
    accuracies and the step count are the record, never scored."""
    from nngauge.reproduce import _fantastic as fantastic

    table = tiny_zoo.copy()
    table["steps_to_0_1"] = np.arange(len(table), dtype=float)  # as if every network got there
    columns = fantastic.measure_columns(table)
    assert "steps_to_0_1" in columns
    assert not {"gap", "test_error", "steps", "train_accuracy", "epochs"} & set(columns)


def test_the_reproduction_is_listed_with_its_page():
    from nngauge.reproduce import get

    record = get("fantastic")
    assert record.pages is not None and record.judge is not None


def test_the_readme_table_is_written_from_a_runs_files(tiny_zoo, tmp_path):
    """docs/write_fantastic.py reads the CSV and README a run wrote: a row per measure of seed
    0 (its best SHOWN), with the count of seeds that rank it in their top ten, the verdict with
    its reason and the time."""
    import importlib.util
    from pathlib import Path

    from nngauge.reproduce import _fantastic as fantastic
    from nngauge.reproduce._base import write_csv

    computed = fantastic.computed_from(tiny_zoo, seed=0)
    write_csv(tmp_path / "fantastic.csv", computed.columns, computed.rows)
    (tmp_path / "README.md").write_text("**Verdict: differs.** because\n\nRebuilt by `x` in "
                                        "120.0 s.\n")
    path = Path(__file__).resolve().parents[1] / "docs" / "write_fantastic.py"
    spec = importlib.util.spec_from_file_location("write_fantastic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.section(tmp_path)
    first = [r for r in computed.records() if r["seed"] == 0]
    assert text.count("\n| `") == min(module.SHOWN, len(first))
    assert f"| `{first[0]['measure']}` |" in text
    assert "Verdict: differs. because" in text and "The run took 2.0 min" in text
