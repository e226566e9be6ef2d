"""The claims ``nngauge reproduce fantastic`` judges, with thresholds fixed before any run.

Jiang, Neyshabur, Mobahi, Krishnan and Bengio ("Fantastic Generalization Measures and Where
to Find Them", ICLR 2020, sections 6-7 and table 1) scored 40 measures on 10,000 trained
CNNs: flatness and PAC-Bayes measures (sharpness by a perturbation-scale search, section 7 and
appendix C.3) did best; products of spectral norms correlated negatively with the
generalization gap; the parameter count did not predict it. Our papers add two claims of
their own: the NLC at initialization predicts the test error after training (Philipp and
Carbonell, "The Nonlinearity Coefficient", arXiv 2018, section 4, figure 2), and norm-based
capacities over the margin explain the gap (Neyshabur, Bhojanapalli, McAllester and Srebro,
"Exploring Generalization in Deep Learning", NIPS 2017, sections 2.2-2.3).

Each claim is a function of one seed's ranking table (:func:`nngauge.studies.score_measures`'
``to_frame()``: a row per measure with ``tau``, ``tau_low``, ``tau_high``, ``psi``; the
generalization gap as target) and of the Kendall taus against the test error
(:data:`TEST_ERROR_TAUS`), returning whether it holds and the numbers that decide it. A claim
is reproduced when it holds at a majority of the seeds; the judge names how many agree.
Every threshold is a module constant, set before the first run and never tuned to a result
(tests/test_reproduce_fantastic.py feeds each claim a planted table that violates it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from nngauge.studies._spec import AFTER

FLATNESS: tuple[str, ...] = tuple(f"{kind}_{bound}{AFTER}"
                                  for kind in ("pacbayes", "pacbayes_mag", "sharpness",
                                               "sharpness_mag")
                                  for bound in ("flatness", "init", "orig"))
"""Jiang et al.'s flatness and PAC-Bayes measures (appendix C.3), after training: the
sigma-search family (:func:`nngauge.flatness`)."""
SPECTRAL_PRODUCTS: tuple[str, ...] = (f"log_prod_spectral{AFTER}",
                                      f"log_prod_spectral_over_margin{AFTER}")
"""Jiang et al.'s products of spectral norms (log.prod.of.spec, and over margin), after
training."""
N_PARAMS = "n_params"
"""The parameter count's column."""
NLC_AT_INIT = "nlc"
"""The NLC measured at initialization (the study's column before training)."""
NEYSHABUR: tuple[str, ...] = (f"path_norm_over_margin{AFTER}",
                              f"log_prod_frobenius_over_margin{AFTER}")
"""Neyshabur et al.'s capacities over the margin that Jiang et al. do not single out (sections
2.2-2.3: the l2 path norm and the product of Frobenius norms, over the margin squared), as
:func:`nngauge.norm_measures` records them after training; the spectral one is judged by
:func:`spectral_not_positive`, where the two papers disagree."""

TOP_FRACTION = 0.25
"""Flatness among the best: its best measure ranks within this top fraction by Psi."""
SPECTRAL_MAX_PSI = 0.1
"""Spectral products not positively predictive: Psi and tau at most this."""
PARAMS_MAX_ABS = 0.1
"""The parameter count is no predictor: |tau| and |Psi| at most this."""
MAJORITY = 0.5
"""A claim is reproduced when it holds at more than this fraction of the seeds."""


@dataclass(frozen=True)
class ClaimCheck:
    """One claim at one seed: whether it held, and the numbers that decide it."""

    claim: str
    holds: bool
    numbers: str


def _row(frame: Any, name: str) -> Mapping[str, float]:
    rows = frame[frame["measure"] == name]
    return rows.iloc[0] if len(rows) else {}


def _present(frame: Any, names: Sequence[str]) -> list[str]:
    known = set(frame["measure"])
    return [n for n in names if n in known and math.isfinite(float(_row(frame, n)["psi"]))]


def _missing(claim: str, names: Sequence[str]) -> ClaimCheck:
    return ClaimCheck(claim, False, f"none of {list(names)} was scored (NaN or absent)")


def flatness_among_best(frame: Any, _: Mapping[str, Any]) -> ClaimCheck:
    """Jiang et al. sections 6-7: the best flatness / PAC-Bayes measure ranks in the top
    :data:`TOP_FRACTION` of all scored measures by Psi, with Psi > 0."""
    claim = "flatness and PAC-Bayes measures are among the best"
    present = _present(frame, FLATNESS)
    if not present:
        return _missing(claim, FLATNESS)
    scored = frame[frame["psi"].map(lambda v: math.isfinite(float(v)))]
    order = list(scored.sort_values("psi", ascending=False)["measure"])
    best = min(present, key=order.index)
    rank, top = order.index(best) + 1, max(1, math.ceil(TOP_FRACTION * len(order)))
    psi = float(_row(frame, best)["psi"])
    return ClaimCheck(claim, rank <= top and psi > 0,
                      f"best: {best}, Psi {psi:.3f}, rank {rank} of {len(order)} (top {top})")


def spectral_not_positive(frame: Any, _: Mapping[str, Any]) -> ClaimCheck:
    """Jiang et al. section 6: products of spectral norms do not predict the gap positively:
    Psi and tau of each at most :data:`SPECTRAL_MAX_PSI`."""
    claim = "products of spectral norms are not positively predictive"
    present = _present(frame, SPECTRAL_PRODUCTS)
    if not present:
        return _missing(claim, SPECTRAL_PRODUCTS)
    values = {n: (float(_row(frame, n)["psi"]), float(_row(frame, n)["tau"])) for n in present}
    holds = all(psi <= SPECTRAL_MAX_PSI and tau <= SPECTRAL_MAX_PSI
                for psi, tau in values.values())
    return ClaimCheck(claim, holds, "; ".join(f"{n}: Psi {p:.3f}, tau {t:.3f}"
                                              for n, (p, t) in values.items()))


def params_no_predictor(frame: Any, _: Mapping[str, Any]) -> ClaimCheck:
    """Jiang et al. section 6 (VC-dimension-like measures): the parameter count does not
    predict the gap: |tau| and |Psi| at most :data:`PARAMS_MAX_ABS`."""
    claim = "the parameter count is not a predictor"
    if not _present(frame, (N_PARAMS,)):
        return _missing(claim, (N_PARAMS,))
    row = _row(frame, N_PARAMS)
    psi, tau = float(row["psi"]), float(row["tau"])
    return ClaimCheck(claim, abs(psi) <= PARAMS_MAX_ABS and abs(tau) <= PARAMS_MAX_ABS,
                      f"{N_PARAMS}: Psi {psi:.3f}, tau {tau:.3f}")


def nlc_predicts_test_error(_: Any, test_error_taus: Mapping[str, Any]) -> ClaimCheck:
    """Philipp and Carbonell section 4: the NLC at initialization predicts the test error
    after training: Kendall tau(NLC at init, test error) > 0 with its bootstrap interval
    above 0."""
    claim = "the NLC at initialization predicts the test error"
    result = test_error_taus.get(NLC_AT_INIT)
    if result is None or not math.isfinite(result.tau):
        return _missing(claim, (NLC_AT_INIT,))
    return ClaimCheck(claim, result.low > 0,
                      f"tau(nlc at init, test error) {result.tau:.3f} [{result.low:.3f}, "
                      f"{result.high:.3f}], n = {result.n}")


def neyshabur_norms(frame: Any, _: Mapping[str, Any]) -> ClaimCheck:
    """Neyshabur et al. sections 2.2-2.3: norm-based capacities over the margin grow with the
    gap: every one has tau > 0 and at least one has its interval above 0."""
    claim = "norm-based capacities over the margin grow with the gap"
    present = _present(frame, NEYSHABUR)
    if not present:
        return _missing(claim, NEYSHABUR)
    rows = {n: _row(frame, n) for n in present}
    holds = (all(float(r["tau"]) > 0 for r in rows.values())
             and any(float(r["tau_low"]) > 0 for r in rows.values()))
    return ClaimCheck(claim, holds, "; ".join(
        f"{n}: tau {float(r['tau']):.3f} [{float(r['tau_low']):.3f}, "
        f"{float(r['tau_high']):.3f}]" for n, r in rows.items()))


CLAIMS: tuple[Callable[[Any, Mapping[str, Any]], ClaimCheck], ...] = (
    flatness_among_best, spectral_not_positive, params_no_predictor, nlc_predicts_test_error,
    neyshabur_norms)
"""The judged claims, in the order the verdict states them."""


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim over the seeds: reproduced when it holds at a majority."""

    claim: str
    checks: tuple[ClaimCheck, ...]

    @property
    def agree(self) -> int:
        """Seeds at which the claim holds."""
        return sum(c.holds for c in self.checks)

    @property
    def status(self) -> str:
        return "reproduced" if self.agree > MAJORITY * len(self.checks) else "differs"

    def sentence(self) -> str:
        seeds = "; ".join(f"seed {i}: {c.numbers}" for i, c in enumerate(self.checks))
        return (f"{self.claim}: {self.status} (holds at {self.agree} of {len(self.checks)} "
                f"seeds; {seeds})")


def judge_claims(frames: Sequence[Any], test_error_taus: Sequence[Mapping[str, Any]]
                 ) -> tuple[ClaimVerdict, ...]:
    """Every claim of :data:`CLAIMS` at every seed: ``frames[i]`` the ranking table of seed
    i, ``test_error_taus[i]`` its {column: KendallTau against the test error}."""
    return tuple(ClaimVerdict(check(frames[0], test_error_taus[0]).claim,
                              tuple(check(f, t) for f, t in zip(frames, test_error_taus)))
                 for check in CLAIMS)


__all__ = ["CLAIMS", "ClaimCheck", "ClaimVerdict", "FLATNESS", "MAJORITY", "NEYSHABUR",
           "NLC_AT_INIT", "N_PARAMS", "PARAMS_MAX_ABS", "SPECTRAL_MAX_PSI",
           "SPECTRAL_PRODUCTS", "TOP_FRACTION", "judge_claims"]
