"""``nngauge reproduce fantastic``: each judged claim holds on a planted table that bears it out
and fails ("differs", with the numbers) on one that violates it, and the verdict counts the
seeds that agree."""

from __future__ import annotations

import math

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
               "pacbayes_mag_flatness_after": (0.5, 0.4, 0.6), "pacbayes_flatness_after": (0.3, 0.2, 0.2),
               "log_prod_spectral_after": (-0.2, -0.3, -0.1),
               "log_prod_spectral_over_margin_after": (0.0, -0.1, 0.05),
               "n_params": (0.05, -0.05, 0.0),
               "path_norm_over_margin_after": (0.3, 0.2, 0.2), "log_prod_frobenius_over_margin_after": (0.1, -0.05, 0.1)})
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
     _replace(_replace(GOOD, "pacbayes_mag_flatness_after", 0.1, 0.0, 0.205), "pacbayes_flatness_after",
              0.1, 0.0, 0.01), TAUS),
    # flatness first but with a negative Psi (every measure negative)
    (claims.flatness_among_best,
     GOOD.assign(psi=GOOD["psi"] - 1.0), TAUS),
    (claims.spectral_not_positive,
     _replace(GOOD, "log_prod_spectral_after", 0.3, 0.2, 0.25), TAUS),
    (claims.params_no_predictor, _replace(GOOD, "n_params", -0.3, -0.4, -0.2), TAUS),
    (claims.nlc_predicts_test_error, GOOD, {"nlc": _tau(0.1, -0.05)}),
    (claims.neyshabur_norms, _replace(GOOD, "log_prod_frobenius_over_margin_after", -0.1, -0.2, 0.0), TAUS),
    (claims.neyshabur_norms,
     _replace(_replace(GOOD, "path_norm_over_margin_after", 0.05, -0.05, 0.1), "log_prod_frobenius_over_margin_after",
              0.05, -0.05, 0.1), TAUS),
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
