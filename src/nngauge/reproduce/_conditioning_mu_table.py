"""``conditioning-mu-table``: the coefficient of non-linearity mu per activation (appendix C.4).

Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural Networks" (ALT 2021),
Definition 3.1 and appendix C.4: for an activation normalized by eq. (2) (E sigma(z) = 0,
E sigma(z)^2 = 1, z ~ N(0, 1)), mu = 1 - (E[z sigma(z)])^2; for any activation with Hermite
coefficients a_k and dual sigma_hat(rho) = sum_k a_k^2 rho^k, its normalized version has

    mu = 1 - sigma_hat'(0) / (sigma_hat(1) - sigma_hat(0))          (appendix C.4),

which the paper's table evaluates on the duals of Daniely, Frostig & Singer (2016, table 1):
identity (u, dual rho), the 2nd Hermite polynomial ((u^2 - 1) / sqrt 2, rho^2), ReLU
(sqrt 2 max(0, u), (sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi), the step
(sqrt 2 1[u >= 0], (pi - arccos rho) / pi) and the exponential (e^(u - 1), e^(rho - 1)); the
appendix adds NormReLU_b (section 7) by Stein's lemma: mu = 1 - lambda_b^2 (1 - Phi(b))^2.

Per row we compute: sigma_hat(0), sigma_hat'(0) and sigma_hat(1) of the dual in closed form
and mu by the paper's formula (``mu_formula``; NormReLU's by its own formula); mu by nngauge
(:func:`nngauge.theory.coefficient_of_nonlinearity`: quadrature of the explicitly normalized
activation, ``mu_nngauge``); the largest gap between the dual as the table writes it and
E[sigma(u) sigma(v)] by quadrature on 41 correlations (``dual_gap``: checks the activation and
dual columns against each other). mu does not depend on a shift of the exponent (e^(u - c)
= e^(-c) e^u, and mu is scale-free), so the exponential's mu is (e - 2) / (e - 1) whichever
shift a table prints.

The judge: a software check (the formula against quadrature within 1e-9, the dual columns
within 1e-8, Lemma C.2's 0 < mu <= 1 for non-linear and mu = 0 for the affine identity)
where the table's cells cannot be read; where a printed value is given (column ``printed``,
with its number of decimals), "reproduced" when the exact value rounds to it and "paper error"
(the paper's own formula contradicts its printed number) when it does not.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("activation", "sigma", "dual", "dual_at_0", "dual_slope_at_0", "dual_at_1",
           "mu_formula", "mu_nngauge", "dual_gap", "printed", "printed_decimals")

PRINTED: dict[str, tuple[float, int]] = {}
"""Activation -> (the value the paper prints, its number of decimals). Empty: the table's
cells (and NormReLU's value in the text of appendix C.4) were lost from the stored text of the
paper; fill it from the PDF and the judge compares them to the printed digits."""

FORMULA_TOL = 1e-9
"""The paper's formula and nngauge's quadrature agree to this (a software check)."""
DUAL_TOL = 1e-8
"""The table's dual and the quadrature of E[sigma(u) sigma(v)] agree to this."""
N_RHO = 41


def _exponential():
    """e^(u - 1): E e^(2u - 2) = 1, Daniely et al.'s normalization."""
    from nngauge.activations import Activation

    return Activation(name="exponential", value=lambda x: np.exp(x - 1.0),
                      derivative_fn=lambda x: np.exp(x - 1.0),
                      torch_fn=lambda x: torch.exp(x - 1.0),
                      description="e^(s - 1)")


def _rows_spec():
    """(name, activation, sigma text, dual text, dual(rho), sigma_hat(0), sigma_hat'(0),
    sigma_hat(1)) of the table's rows (Daniely et al. 2016, table 1)."""
    from nngauge.activations import get, modify

    root2 = math.sqrt(2.0)
    return (
        ("identity", get("identity"), "u", "rho", lambda r: r, 0.0, 1.0, 1.0),
        ("2nd Hermite", modify("square", scale=1 / root2, offset=-1 / root2),
         "(u^2 - 1) / sqrt 2", "rho^2", lambda r: r * r, 0.0, 0.0, 1.0),
        ("relu", modify("relu", scale=root2), "sqrt 2 max(0, u)",
         "(sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi",
         lambda r: (np.sqrt(1 - r * r) + (np.pi - np.arccos(r)) * r) / np.pi,
         1 / math.pi, 0.5, 1.0),
        ("step", modify("step", scale=root2), "sqrt 2 1[u >= 0]", "(pi - arccos rho) / pi",
         lambda r: (np.pi - np.arccos(r)) / np.pi, 0.5, 1 / math.pi, 1.0),
        ("exponential", _exponential(), "e^(u - 1)", "e^(rho - 1)",
         lambda r: np.exp(r - 1.0), math.exp(-1.0), math.exp(-1.0), 1.0),
    )


def norm_relu_mu(b: float) -> float:
    """Appendix C.4: mu of NormReLU_b = 1 - lambda_b^2 (1 - Phi(b))^2 (Stein's lemma:
    E[z max(z, b)] = P(z > b))."""
    from nngauge.activations._norm_relu import norm_relu_constants

    _, lam = norm_relu_constants(b)
    return float(1.0 - lam * lam * (1.0 - special.ndtr(b)) ** 2)


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.activations import get
    from nngauge.activations._norm_relu import SELU_MATCHED_B
    from nngauge.theory import coefficient_of_nonlinearity, gaussian_covariance

    rho = np.linspace(-1.0, 1.0, N_RHO)
    rows = []
    for name, act, sigma, dual_text, dual, at0, slope0, at1 in _rows_spec():
        formula = 1.0 - slope0 / (at1 - at0)
        gap = float(np.max(np.abs(gaussian_covariance(act, rho, method="quadrature")
                                  - dual(rho))))
        printed, decimals = PRINTED.get(name, (None, None))
        rows.append((name, sigma, dual_text, at0, slope0, at1, formula,
                     coefficient_of_nonlinearity(act), gap, printed, decimals))
    norm_relu = get("norm_relu")
    printed, decimals = PRINTED.get("norm_relu", (None, None))
    rows.append(("norm_relu", f"NormReLU_b, b = {SELU_MATCHED_B:.6g}", "-", None, None, None,
                 norm_relu_mu(SELU_MATCHED_B), coefficient_of_nonlinearity(norm_relu), None,
                 printed, decimals))
    comparison = tuple(
        Comparison(f"mu of normalized {name}", nngauge_mu, printed,
                   f"paper's formula {formula:.12g}"
                   + ("" if printed is not None else "; printed value lost from the text"),
                   key=f"mu_{name.replace(' ', '_')}")
        for name, *_, formula, nngauge_mu, _gap, printed, _dec in rows)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=comparison)


def plot(computed: Computed, figure) -> None:
    ax = figure.subplots(1, 1)
    names = computed.column("activation")
    x = np.arange(len(names))
    ax.bar(x - 0.2, computed.column("mu_formula"), 0.4, label="paper's formula (appendix C.4)")
    ax.bar(x + 0.2, computed.column("mu_nngauge"), 0.4, label="nngauge (quadrature)")
    printed = [(i, p) for i, p in enumerate(computed.column("printed")) if p is not None]
    if printed:
        ax.plot(*zip(*printed), "k*", ms=10, label="printed")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("coefficient of non-linearity mu")
    ax.legend(fontsize=7)


def _rounds_to(value: float, printed: float, decimals: int) -> bool:
    return abs(value - printed) <= 0.5 * 10.0 ** (-decimals) + 1e-12


def judge(computed: Computed) -> Verdict:
    """Appendix C.4 and Lemma C.2, as the tests assert: the paper's formula and nngauge's
    quadrature agree within :data:`FORMULA_TOL` and each row's dual equals the quadrature of
    E[sigma(u) sigma(v)] within :data:`DUAL_TOL`; mu = 0 for the identity and 0 < mu <= 1
    for the others (else "differs", a software check); a printed value the exact mu does not
    round to: "paper error"; printed values matched: "reproduced"; none printed: "reproduced"
    as a software check."""
    software, lemma, wrong, matched = [], [], [], []
    for r in computed.records():
        name, formula, ours = r["activation"], r["mu_formula"], r["mu_nngauge"]
        if not abs(formula - ours) <= FORMULA_TOL:
            software.append(f"{name}: formula {formula:.10g} vs quadrature {ours:.10g}")
        if r["dual_gap"] is not None and not r["dual_gap"] <= DUAL_TOL:
            software.append(f"{name}: dual off by {r['dual_gap']:.3g}")
        affine = name == "identity"
        if not (abs(formula) <= FORMULA_TOL if affine else 0.0 < formula <= 1.0 + FORMULA_TOL):
            lemma.append(f"{name}: mu = {formula:.6g}")
        if r["printed"] is not None:
            decimals = int(r["printed_decimals"])
            (matched if _rounds_to(formula, r["printed"], decimals) else wrong).append(
                f"{name}: printed {r['printed']:.{decimals}f}, exact {formula:.{decimals + 3}f}"
                f" (quadrature {ours:.{decimals + 3}f})")
    values = "; ".join(f"{r['activation']} {r['mu_formula']:.6g}" for r in computed.records())
    if software or lemma:
        return Verdict("differs", "The formula, the duals or Lemma C.2 fail: "
                       + "; ".join(software + lemma) + f". mu: {values}.", software_check=True)
    if wrong:
        return Verdict("paper error", "The paper's own formula (appendix C.4, mu = 1 - "
                       "sigma_hat'(0) / (sigma_hat(1) - sigma_hat(0)) on the duals it prints) "
                       "contradicts its printed value: " + "; ".join(wrong)
                       + (f"; matched: {'; '.join(matched)}" if matched else "") + ".")
    if matched:
        return Verdict("reproduced", "Every printed mu is the exact value to the printed "
                       f"digits ({'; '.join(matched)}); formula and quadrature agree within "
                       f"{FORMULA_TOL:g}, 0 < mu <= 1 (Lemma C.2). mu: {values}.")
    return Verdict("reproduced", "The table's printed cells were lost from the paper's "
                   "stored text, so only nngauge is checked: the paper's formula on the duals "
                   f"of Daniely et al. and nngauge's quadrature agree within {FORMULA_TOL:g}, "
                   f"the duals match quadrature within {DUAL_TOL:g}, mu = 0 for the identity and "
                   f"in (0, 1] otherwise (Lemma C.2). mu: {values}.", software_check=True)


REPRODUCTION = Reproduction(
    name="conditioning-mu-table",
    paper=cite("conditioning"),
    target="Appendix C.4 (table of mu)",
    description="the coefficient of non-linearity mu per activation: the paper's formula on "
                "Daniely et al.'s duals, NormReLU's, and nngauge's quadrature",
    differences={
        "small": (
            "the table's cells and NormReLU's value in appendix C.4 were lost from the stored "
            "text of the paper: the duals are Daniely et al. (2016, table 1)'s, which the "
            "paper says it uses; no printed value is compared until PRINTED is filled",
            "the exponential is e^(u - 1) (unit second moment); mu is the same for every "
            "shift of the exponent",
            "NormReLU at b = -1.59077, where lambda_b is SELU's scale 1.0507 (section 7)",
        ),
        "paper": ("as at the small scale: the table is exact, it has no size",),
    },
    small_runtime="~5 s",
    compute=compute,
    plot=plot,
    claim=("The coefficient of non-linearity of the normalized activation is mu = 1 - "
           "sigma_hat'(0) / (sigma_hat(1) - sigma_hat(0)), 0 for the identity, 1 for the 2nd "
           "Hermite polynomial and between for ReLU, the step and the exponential (appendix "
           "C.4, from Daniely et al.'s duals), 1 - lambda_b^2 (1 - Phi(b))^2 for NormReLU; "
           "0 < mu <= 1 for every non-linear activation (Lemma C.2)."),
    judge=judge,
)
