"""``shrinkage-critical``: appendix B's closed forms against quadrature (shrinkage paper).

Appendix B of "Gradient Explosion and Representation Shrinkage in Infinite Networks"
(anonymous, under review at ICLR) works out, for the two activations of section 4.1, the
quantities Theorem 1 and the LayerNorm correlation map (eq. 2.3) need:

- leaky ReLU, LReLU_a(x) = a x + (1 - a) ReLU(x):
  C[LReLU_a | rho] = a rho + (1 - a)^2 (sqrt(1 - rho^2) + rho (pi - arccos rho)) / (2 pi),
  bar LReLU_a(x) = (1 - a) / sqrt(2 pi) + (1 + a) / 2 x,
  ||LReLU_a - bar LReLU_a||^2 = (pi - 2) / (4 pi) (1 - a)^2, ||LReLU_a'||^2 = (1 + a^2) / 2,
  and "the critical initialization requires sigma_b = 0";
- erf: C[erf | rho] = (2 / pi) arctan(2 rho / sqrt(9 - 4 rho^2)), bar erf(x) = 2 / sqrt(3 pi) x,
  ||erf - bar erf||^2 = (2 / pi) (arctan(2 / sqrt 5) - 2 / 3), ||erf'||^2 = 4 / (pi sqrt 5),
  critical at (sigma_b / sigma_w)^2 = (2 / pi) (2 / sqrt 5 - arctan(2 / sqrt 5));
- and, from these, the constants of eqs. 4.1 and 4.2 (Theorem 1 at ||J||_op^2 = 1):
  sqrt(L) (1 - rho_max) <= sqrt(16 pi / (pi - 2)) sqrt(1 + a^2) / (1 - a) (leaky ReLU) and
  <= 4 / sqrt((arctan(2 / sqrt 5) - 2 / 3) sqrt 5) (erf).

Each printed closed form (``closed_form``) is set beside nngauge's numerical value computed
without any closed form (``quadrature``): Gaussian covariances by Gauss-Hermite quadrature split
at the kinks (:func:`nngauge.theory.gaussian_covariance` with ``method="quadrature"``), Hermite
coefficients a_0, a_1 (:func:`nngauge.theory.hermite_coefficients`), the error E phi^2 - a_0^2 -
a_1^2, ||phi'||^2 = C[phi' | 1], the critical sigma_b solved from P'(1) = 1 with brentq
(:func:`nngauge.theory.critical_init`), the slope P'(1) of the map (eq. 2.3) at sigma_b > 0
(leaky ReLU: 1 / (1 + sigma_b^2 / ||LReLU_a||^2) < 1, ordered, whence "requires sigma_b = 0"),
and the eq. 4.1 / 4.2 constant sqrt(8 ||phi'||^2 / ||phi - bar phi||^2) from the quadrature
values.

The claim is judged by the largest |closed_form - quadrature| against ``TOLERANCE``: a software
check (identities; only a slip in a printed form or a bug in nngauge's quadrature or root
finding could make the two differ), labelled so in the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("activation", "quantity", "rho", "closed_form", "quadrature")
TOLERANCE = 1e-9
"""Judge: the largest |closed form - quadrature| allowed (nngauge's quadrature is accurate to
~1e-12 on these activations; 1e-9 leaves room for the root finding of critical_init)."""
SIGMA_B_ORDERED = 0.3  # leaky ReLU's slope P'(1) at this sigma_b (sigma_w = 1): below 1
ATAN = float(np.arctan(2 / np.sqrt(5)))


@dataclass(frozen=True)
class Settings:
    slopes: tuple[float, ...]  # leaky ReLU negative slopes a
    n_rho: int  # covariance grid on [-1, 1]


SETTINGS = {
    "small": Settings(slopes=(0.0, 0.2, 0.5), n_rho=11),
    "paper": Settings(slopes=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), n_rho=41),
}


def leaky_relu_closed_forms(a: float, rho: np.ndarray) -> dict:
    """Appendix B's leaky-ReLU closed forms (the covariance on ``rho``)."""
    relu_part = (np.sqrt(1 - rho**2) + rho * (np.pi - np.arccos(rho))) / (2 * np.pi)
    return {
        "covariance": a * rho + (1 - a) ** 2 * relu_part,
        "hermite a_0": (1 - a) / np.sqrt(2 * np.pi),
        "hermite a_1": (1 + a) / 2,
        "linearization error": (np.pi - 2) / (4 * np.pi) * (1 - a) ** 2,
        "||phi'||^2": (1 + a * a) / 2,
        "critical sigma_b^2 / sigma_w^2": 0.0,
        f"P'(1) at sigma_b = {SIGMA_B_ORDERED}":
            1 / (1 + SIGMA_B_ORDERED**2 / ((1 + a * a) / 2)),
        "eq. 4.1 constant": np.sqrt(16 * np.pi / (np.pi - 2)) * np.sqrt(1 + a * a) / (1 - a),
    }


def erf_closed_forms(rho: np.ndarray) -> dict:
    """Appendix B's erf closed forms (the covariance on ``rho``)."""
    return {
        "covariance": 2 / np.pi * np.arctan(2 * rho / np.sqrt(9 - 4 * rho**2)),
        "hermite a_0": 0.0,
        "hermite a_1": 2 / np.sqrt(3 * np.pi),
        "linearization error": 2 / np.pi * (ATAN - 2 / 3),
        "||phi'||^2": 4 / (np.pi * np.sqrt(5)),
        "critical sigma_b^2 / sigma_w^2": 2 / np.pi * (2 / np.sqrt(5) - ATAN),
        "P'(1) at the critical sigmas": 1.0,
        "eq. 4.2 constant": 4 / np.sqrt((ATAN - 2 / 3) * np.sqrt(5)),
    }


def quadrature_values(act: str, rho: np.ndarray, closed: dict) -> dict:
    """The same quantities by quadrature and root finding only (no closed form used)."""
    from nngauge.theory import (
        correlation_map,
        critical_init,
        gaussian_covariance,
        hermite_coefficients,
    )
    from nngauge.theory._gaussian import resolve

    activation = resolve(act)
    a0, a1 = hermite_coefficients(activation, 2)
    second = float(gaussian_covariance(activation, 1.0, method="quadrature"))
    slope_sq = float(gaussian_covariance(activation.derivative_activation(), 1.0,
                                         method="quadrature"))
    error = second - a0**2 - a1**2
    sigma_w, sigma_b = critical_init(activation, sigma_w=1.0, method="quadrature")
    out = {
        "covariance": gaussian_covariance(activation, rho, method="quadrature"),
        "hermite a_0": float(a0), "hermite a_1": float(a1), "linearization error": error,
        "||phi'||^2": slope_sq, "critical sigma_b^2 / sigma_w^2": (sigma_b / sigma_w) ** 2,
    }
    for quantity in closed:
        if quantity.startswith("P'(1) at sigma_b"):
            out[quantity] = correlation_map(activation, 1.0, SIGMA_B_ORDERED,
                                            method="quadrature").slope_at_one
        elif quantity == "P'(1) at the critical sigmas":
            out[quantity] = correlation_map(activation, sigma_w, sigma_b,
                                            method="quadrature").slope_at_one
        elif quantity.endswith("constant"):
            out[quantity] = float(np.sqrt(8 * slope_sq / error))
    return out


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rho = np.linspace(-1.0, 1.0, settings.n_rho)
    cases = [(f"leaky_relu(negative_slope={a!r})", leaky_relu_closed_forms(a, rho))
             for a in settings.slopes] + [("erf", erf_closed_forms(rho))]
    rows = []
    for act, closed in cases:
        numeric = quadrature_values(act, rho, closed)
        for quantity, value in closed.items():
            if quantity == "covariance":
                rows += [(act, quantity, float(r), float(c), float(q))
                         for r, c, q in zip(rho, value, numeric[quantity])]
            else:
                rows.append((act, quantity, None, float(value), float(numeric[quantity])))
    computed = Computed(COLUMNS, tuple(rows))
    errors = _errors(computed)
    comparison = tuple(
        Comparison(f"{act}: max |closed form - quadrature|", errors[act], None,
                   f"over {sum(r[0] == act for r in rows)} values (appendix B; tolerance "
                   f"{TOLERANCE:g})", key=f"error_{act}")
        for act in errors) + (
        Comparison("erf: critical (sigma_b / sigma_w)^2", _value(rows, "erf", "critical sigma_b"
                                                                 "^2 / sigma_w^2"),
                   erf_closed_forms(rho)["critical sigma_b^2 / sigma_w^2"],
                   "solved from P'(1) = 1 by quadrature and brentq", key="erf_critical_ratio"),
        Comparison("erf: eq. 4.2 constant sqrt(L) (1 - rho_max)",
                   _value(rows, "erf", "eq. 4.2 constant"),
                   erf_closed_forms(rho)["eq. 4.2 constant"], "from quadrature values",
                   key="erf_eq42_constant"))
    return Computed(COLUMNS, tuple(rows), comparison, extra={"slopes": settings.slopes})


def _value(rows, act: str, quantity: str) -> float:
    return next(r[4] for r in rows if r[0] == act and r[1] == quantity)


def _errors(computed: Computed) -> dict[str, float]:
    """The largest |closed form - quadrature| per activation (NaN counts as infinite)."""
    out: dict[str, float] = {}
    for r in computed.records():
        gap = abs(r["closed_form"] - r["quadrature"])
        gap = gap if np.isfinite(gap) else float("inf")
        out[r["activation"]] = max(out.get(r["activation"], 0.0), gap)
    return out


def plot(computed: Computed, figure) -> None:
    left, right = figure.subplots(1, 2)
    records = computed.records()
    for act in dict.fromkeys(r["activation"] for r in records):
        cov = [r for r in records if r["activation"] == act and r["quantity"] == "covariance"]
        line, = left.plot([r["rho"] for r in cov], [r["quadrature"] for r in cov], "-",
                          label=act.replace("(negative_slope=", " a=").rstrip(")"))
        left.plot([r["rho"] for r in cov], [r["closed_form"] for r in cov], "o", ms=3,
                  color=line.get_color())
    left.set_xlabel("rho")
    left.set_ylabel("C[phi | rho]")
    left.set_title("covariance: quadrature (lines), appendix B (dots)", fontsize=9)
    left.legend(fontsize=7)
    gaps = [max(abs(r["closed_form"] - r["quadrature"]), 1e-17) for r in records]
    right.plot(range(len(gaps)), gaps, "o", ms=3)
    right.axhline(TOLERANCE, color="red", ls="--", label=f"tolerance {TOLERANCE:g}")
    right.set_yscale("log")
    right.set_xlabel("row of the CSV")
    right.set_ylabel("|closed form - quadrature|")
    right.set_title("every closed form of appendix B", fontsize=9)
    right.legend(fontsize=7)


def judge(computed: Computed) -> Verdict:
    """Every closed form of appendix B equals nngauge's quadrature value within TOLERANCE:
    reproduced; any further apart (or no rows at all): differs. A software check either way."""
    errors = _errors(computed)
    if not errors:
        return Verdict("differs", "No closed form was computed.", software_check=True)
    worst = max(errors, key=errors.get)
    off = sorted({f"{r['activation']}: {r['quantity']}" for r in computed.records()
                  if not abs(r["closed_form"] - r["quadrature"]) <= TOLERANCE})
    text = (f"{len(computed.rows)} values for {len(errors)} activations; the largest "
            f"|closed form - quadrature| is {errors[worst]:.2g} ({worst})")
    if not off:
        return Verdict("reproduced", "Appendix B's covariances, linearizations, Gaussian norms, "
                       "critical initializations and eq. 4.1 / 4.2 constants equal quadrature "
                       f"within {TOLERANCE:g}: {text}.", software_check=True)
    return Verdict("differs", f"Closed forms off quadrature by more than {TOLERANCE:g} ("
                   + "; ".join(off[:6]) + ("; ..." if len(off) > 6 else "") + f"): {text}; "
                   "a slip in the printed form or a bug in nngauge's quadrature.",
                   software_check=True)


REPRODUCTION = Reproduction(
    name="shrinkage-critical",
    paper=cite("shrinkage"),
    target="Appendix B",
    description="appendix B's closed forms for leaky ReLU and erf (covariance, linearization, "
                "Gaussian norms, critical initialization, eq. 4.1 / 4.2 constants) against "
                "quadrature and root finding",
    differences={
        "small": (
            "leaky ReLU at slopes a = 0, 0.2, 0.5 and erf; covariances on 11 values of rho",
            "the leaky-ReLU covariance is read as a rho + (1 - a)^2 (sqrt(1 - rho^2) + rho "
            "(pi - arccos rho)) / (2 pi): the text as transcribed puts the whole numerator under "
            "the root, which gives C[ReLU | 1] = 1 / (2 sqrt(pi)) instead of ||ReLU||^2 = 1/2",
        ),
        "paper": (
            "leaky ReLU at slopes a = 0, 0.1, ..., 0.9 and erf; covariances on 41 values of rho",
            "the leaky-ReLU covariance is read as a rho + (1 - a)^2 (sqrt(1 - rho^2) + rho "
            "(pi - arccos rho)) / (2 pi) (the transcription puts the whole numerator under the "
            "root)",
        ),
    },
    small_runtime="~4 s",
    compute=compute,
    plot=plot,
    claim=("Appendix B's closed forms hold: the leaky-ReLU and erf Gaussian covariances, "
           "Hermite linearizations, linearization errors and ||phi'||^2, critical "
           "initialization at sigma_b = 0 (leaky ReLU) and (sigma_b / sigma_w)^2 = (2 / pi) "
           "(2 / sqrt 5 - arctan(2 / sqrt 5)) (erf), and the constants of eqs. 4.1 and 4.2."),
    judge=judge,
)
