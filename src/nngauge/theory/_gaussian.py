"""Gaussian covariances of activations: C[tau | rho] with unequal variances.

C(rho; q1, q2) = E[tau(u) tau(v)], (u, v) centered Gaussian with Var u = q1, Var v = q2,
corr(u, v) = rho. At q1 = q2 = 1 this is the dual activation of Daniely et al. (2016) used by
Agarwal et al. 2021 (section 3) and C[phi | rho] of the shrinkage paper (section 2, eq. 2.2).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from nngauge._constraints import Choice, Integer, Maybe, Real, constrained
from nngauge.activations import (
    DEFAULT_QUADRATURE,
    Activation,
    Quadrature,
    cross_expectation,
    expectation,
    from_spec,
)
from nngauge.activations import hermite_coefficients as _hermite_coefficients
from nngauge.errors import ConvergenceError, invalid
from nngauge.theory._validate import (
    ACTIVATION,
    CORRELATION,
    QUADRATURE,
    VARIANCE,
    clipped_correlation,
)

Method = Literal["auto", "closed", "quadrature"]


def resolve(act: Activation | str) -> Activation:
    """An :class:`Activation` from an activation, a registry name or a spec.

    Specs are those of :func:`nngauge.activations.from_spec`, e.g. ``"leaky_relu(negative_slope=0.2)"``
    or ``"normalize(modify(tanh, dilation=1.2))"``.
    """
    return from_spec(act)


@constrained(act=ACTIVATION, rho=CORRELATION, q1=VARIANCE, q2=VARIANCE,
             method=Choice.literal(Method), quadrature=QUADRATURE,
             rtol=Maybe(Real(0, low_open=True)))
def gaussian_covariance(
    act: Activation | str,
    rho: Any,
    *,
    q1: Any = 1.0,
    q2: Any = 1.0,
    method: Method = "auto",
    quadrature: Quadrature = DEFAULT_QUADRATURE,
    rtol: float | None = None,
) -> np.ndarray:
    """E[act(u) act(v)] for centered Gaussians u, v with variances q1, q2 and correlation rho.

    Args:
        act: an activation or a registry name.
        rho: correlation(s) in [-1, 1]; any shape, broadcast with q1 and q2.
        q1, q2: variances >= 0, broadcast with rho.
        method: ``"auto"`` (default: the closed form when the activation has one, quadrature
            otherwise), ``"closed"`` (error when there is none) or ``"quadrature"``.
        quadrature: the rule for the quadrature path (see :class:`~nngauge.activations.Quadrature`).
        rtol: when given, refine the quadrature (doubling its nodes, up to 4 times) until two
            successive values agree to ``rtol`` relative to max(1, |value|).

    Returns:
        An array of the broadcast shape of (rho, q1, q2) (a 0-d array for scalars).

    Raises:
        InvalidInputError: rho outside [-1, 1], negative or non-finite variances, or
            ``method="closed"`` for an activation without a closed form.
        ConvergenceError: ``rtol`` not reached after 4 refinements.

    Example:
        >>> from nngauge.theory import gaussian_covariance
        >>> float(gaussian_covariance("relu", 1.0))  # E[relu(z)^2] = 1/2
        0.5
    """
    act = resolve(act)
    rho = clipped_correlation(rho)
    q1 = np.asarray(q1, dtype=np.float64)
    q2 = np.asarray(q2, dtype=np.float64)
    if method == "closed" and act.covariance_fn is None:
        raise invalid("gaussian_covariance()", "an activation with a closed-form covariance",
                      f"{act.label}, which has none", "use method='quadrature' or 'auto'")
    if method != "quadrature" and act.covariance_fn is not None:
        return np.asarray(act.covariance_fn(*np.broadcast_arrays(rho, q1, q2)), dtype=np.float64)
    return _refine(lambda rule: cross_moment(act, act, rho, q1, q2, rule), quadrature, rtol)


def cross_moment(f: Activation, g: Activation, rho, q1, q2, rule: Quadrature) -> np.ndarray:
    """E[f(u) g(v)] by quadrature, split at both activations' breakpoints."""
    return cross_expectation(f.value, g.value, rho, q1, q2, f_breakpoints=f.breakpoints,
                                 g_breakpoints=g.breakpoints, rule=rule)


@constrained(act=ACTIVATION, q=VARIANCE, quadrature=QUADRATURE)
def gaussian_mean(act: Activation | str, q: Any = 1.0, *, quadrature: Quadrature = DEFAULT_QUADRATURE):
    """E[act(sqrt(q) z)], z ~ N(0, 1): the closed form when known, quadrature otherwise."""
    act = resolve(act)
    q = np.asarray(q, dtype=np.float64)
    if act.mean_fn is not None:
        return np.asarray(act.mean_fn(q), dtype=np.float64)
    return expectation(act.value, q, breakpoints=act.breakpoints, rule=quadrature)


@constrained(act=ACTIVATION, n=Integer(1), q=Real(0), quadrature=QUADRATURE)
def hermite_coefficients(
    act: Activation | str, n: int, *, q: float = 1.0, quadrature: Quadrature = DEFAULT_QUADRATURE
) -> np.ndarray:
    """Normalized Hermite coefficients a_0..a_{n-1} of act(sqrt(q) z), z ~ N(0, 1).

    a_k = E[act(sqrt(q) z) He_k(z)] / sqrt(k!), so act(sqrt(q) z) = sum_k a_k He_k(z) / sqrt(k!)
    and, at equal variances q, E[act(u) act(v)] = sum_k a_k^2 rho^k (Mehler's formula; the
    shrinkage paper's section 2 and Agarwal et al. 2021, appendix C.4 use this expansion).

    Example:
        >>> from nngauge.theory import hermite_coefficients
        >>> hermite_coefficients("identity", 3).round(12) + 0.0  # + 0.0 turns -0. into 0.
        array([0., 1., 0.])
    """
    act = resolve(act)
    return _hermite_coefficients(act.value, int(n), q=float(q), breakpoints=act.breakpoints,
                                 rule=quadrature)


def _refine(compute, rule: Quadrature, rtol: float | None, max_refinements: int = 4):
    value = compute(rule)
    if rtol is None:
        return value
    for _ in range(max_refinements):
        rule = rule.refined()
        finer = compute(rule)
        if np.all(np.abs(finer - value) <= rtol * np.maximum(1.0, np.abs(finer))):
            return finer
        value = finer
    raise ConvergenceError(
        f"quadrature did not reach rtol={rtol} after {max_refinements} refinements "
        f"(degree {rule.degree}). Fix: loosen rtol or pass a finer Quadrature."
    )
