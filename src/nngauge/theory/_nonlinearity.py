"""How nonlinear an activation is: four measures from three papers, one Hermite picture.

Write an activation under Gaussian input s = sqrt(q) z, z ~ N(0, 1), in normalized Hermite
polynomials h_k = He_k / sqrt(k!):  tau(sqrt(q) z) = sum_k a_k h_k(z), so that

    a_0 = E[tau(s)],   a_1 = E[z tau(s)],   E[tau(s)^2] = sum_k a_k^2.

The affine part a_0 + a_1 z is the best affine fit of tau in L2(N(0, q)) (the "linearization"
phi-bar of the shrinkage paper), and every measure here compares the power of what is left,
R = sum_{k>=2} a_k^2 = E[tau^2] - a_0^2 - a_1^2, with some reference power:

- :func:`linearization_error` = R = ||tau - tau_bar||_N^2 (shrinkage paper, section 2);
- :func:`linear_approximation_error` = R / (a_0^2 + a_1^2) (NLC paper, appendix E.4 and
  Table 1 row E);
- :func:`coefficient_of_nonlinearity` = R / (E[tau^2] - a_0^2) = 1 - a_1^2 of the normalized
  activation (Agarwal et al. 2021, Definition 3.1 and appendix C.4);
- :func:`coefficient_of_nonaffinity` = R / E[tau^2] (Agarwal et al. 2021, Definition C.20).

:func:`nlc_activation` is the NLC of the map s -> tau(s) itself (NLC paper, section 5); it uses
the derivative: NLC_tau(sigma) = sigma Q[tau'(s)] / S[tau(s)], s ~ N(0, sigma^2).

Moments come from the activation's closed forms where it carries them (``mean_fn`` for a_0,
``covariance_fn`` at rho = 1 for E[tau^2]); a_1 = E[z tau(s)] and moments without a closed
form come from the quadrature engine of :mod:`nngauge.activations` (accurate near 1e-13,
split at the activation's breakpoints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from nngauge._constraints import Choice, constrained
from nngauge.activations import DEFAULT_QUADRATURE, Activation, Quadrature, expectation
from nngauge.errors import invalid
from nngauge.theory._gaussian import resolve
from nngauge.theory._validate import ACTIVATION, POSITIVE, QUADRATURE

Reference = Literal["absolute", "norm", "derivative"]


@dataclass(frozen=True)
class _Moments:
    """Gaussian moments of tau(s), s = sqrt(q) z (arrays of the shape of q)."""

    mean: np.ndarray  # a_0 = E tau(s)
    linear: np.ndarray  # a_1 = E[z tau(s)]
    second: np.ndarray  # E tau(s)^2 = sum_k a_k^2

    @property
    def residual(self) -> np.ndarray:
        """sum_{k>=2} a_k^2: the power left after the best affine fit (clipped at 0)."""
        return np.maximum(self.second - self.mean**2 - self.linear**2, 0.0)

    @property
    def variance(self) -> np.ndarray:
        """Var tau(s) = sum_{k>=1} a_k^2."""
        return np.maximum(self.second - self.mean**2, 0.0)


def _second_moment(act: Activation, q: np.ndarray, rule: Quadrature) -> np.ndarray:
    """E[act(sqrt(q) z)^2]: the closed-form covariance at rho = 1, or 1-d quadrature."""
    if act.covariance_fn is not None:
        rho, q1, q2 = np.broadcast_arrays(np.ones_like(q), q, q)
        return np.asarray(act.covariance_fn(rho, q1, q2), dtype=np.float64)
    value = act.value
    return expectation(lambda x: value(x) ** 2, q, breakpoints=act.breakpoints, rule=rule)


def _mean(act: Activation, q: np.ndarray, rule: Quadrature) -> np.ndarray:
    """E[act(sqrt(q) z)]: the closed form ``mean_fn``, or 1-d quadrature."""
    if act.mean_fn is not None:
        return np.asarray(act.mean_fn(q), dtype=np.float64) * np.ones_like(q)
    return expectation(act.value, q, breakpoints=act.breakpoints, rule=rule)


def _moments(act: Activation, q: np.ndarray, rule: Quadrature) -> _Moments:
    mean = _mean(act, q, rule)
    value = act.value
    # E[z tau(sqrt(q) z)] = E[s tau(s)] / sqrt(q)  (q > 0 is checked by the callers)
    cross = expectation(lambda x: x * value(x), q, breakpoints=act.breakpoints, rule=rule)
    return _Moments(mean=mean, linear=cross / np.sqrt(q), second=_second_moment(act, q, rule))


def _variance(sigma: Any) -> np.ndarray:
    """q = sigma^2 for declared input standard deviations sigma > 0."""
    return np.asarray(sigma, dtype=np.float64) ** 2


def _require_nonconstant(variance: np.ndarray, second: np.ndarray, act: Activation,
                         where: str) -> None:
    """Var tau > 0, relative to E tau^2 (below 1e-13 of it, cancellation leaves only noise)."""
    if np.any(variance <= 1e-13 * second) or np.any(second <= 1e-300):
        raise invalid(where, "an activation with positive variance under Gaussian input",
                      f"{act.label}, which is (numerically) constant there",
                      "pass a non-constant activation (its ratios are 0/0 otherwise)")


@constrained(act=ACTIVATION, sigma=POSITIVE, quadrature=QUADRATURE)
def nlc_activation(
    act: Activation | str, sigma: Any = 1.0, *, quadrature: Quadrature = DEFAULT_QUADRATURE
) -> np.ndarray:
    """NLC_tau(sigma): the nonlinearity coefficient of an activation applied to N(0, sigma^2).

    NLC_tau(sigma) = sigma * Q_{s ~ N(0, sigma^2)}[tau'(s)] / S_{s ~ N(0, sigma^2)}[tau(s)],

    with Q[X] = sqrt(E X^2) and S the standard deviation (Philipp & Carbonell, "The
    nonlinearity coefficient", section 5; Table 1 row A gives NLC_tau(1)).

    ``sigma`` is a standard deviation. The paper writes s ~ N(0, sigma) and says the input has
    "covariance matrix sigma I", which reads as a variance; but it also states that
    NLC_tau(sigma) equals NLC(f, D) of the elementwise map f = tau on that input, and in the
    NLC definition (section 2) the input enters through its standard deviation
    Q_i S_x x(i) = sigma_std, so the prefactor sigma of the displayed formula is the input's
    standard deviation. We therefore take s ~ N(0, sigma^2), which makes
    NLC_tau(sigma) = NLC(tau, N(0, sigma^2 I)) hold exactly; both readings agree at sigma = 1,
    the only value the paper tabulates. Jumps of tau contribute no delta mass to tau'.

    Args:
        act: an activation or a registry name.
        sigma: input standard deviation(s) > 0; any shape.
        quadrature: the rule for moments without a closed form.

    Returns:
        An array of the shape of ``sigma``.

    Raises:
        InvalidInputError: sigma <= 0 or non-finite; tau constant under N(0, sigma^2).

    Example:
        >>> from nngauge.theory import nlc_activation
        >>> round(float(nlc_activation("relu")), 3)  # Table 1 row A
        1.211
    """
    where = "nlc_activation()"
    act = resolve(act)
    q = _variance(sigma)
    second, mean = _second_moment(act, q, quadrature), _mean(act, q, quadrature)
    variance = np.maximum(second - mean**2, 0.0)
    _require_nonconstant(variance, second, act, where)
    derivative_power = _second_moment(act.derivative_activation(), q, quadrature)
    return np.sqrt(q * derivative_power / variance)


@constrained(act=ACTIVATION, sigma=POSITIVE, quadrature=QUADRATURE)
def linear_approximation_error(
    act: Activation | str, sigma: Any = 1.0, *, quadrature: Quadrature = DEFAULT_QUADRATURE
) -> np.ndarray:
    """Power of tau not captured by its best affine fit, over the power of that fit.

    E(tau) = ( Q_s[tau(s) - tau_bar(s)] / Q_s[tau_bar(s)] )^2,  s ~ N(0, sigma^2),

    where tau_bar(s) = alpha + beta s minimizes Q_s[tau(s) - tau_bar(s)] (NLC paper, appendix
    E.4; Table 1 row E at sigma = 1). "Linear" there means affine: the table's value 2.000 for
    tau(s) = s^2 is (E s^4 - 1) / 1 with tau_bar = 1. In Hermite terms (module docstring),
    alpha = a_0, beta = a_1 / sigma and E = sum_{k>=2} a_k^2 / (a_0^2 + a_1^2).

    Args:
        act: an activation or a registry name.
        sigma: input standard deviation(s) > 0 (the paper uses 1); any shape.
        quadrature: the rule for moments without a closed form.

    Returns:
        An array of the shape of ``sigma`` (inf where the best affine fit is identically 0).

    Raises:
        InvalidInputError: sigma <= 0 or non-finite.

    Example:
        >>> from nngauge.theory import linear_approximation_error
        >>> round(float(linear_approximation_error("relu")), 3)  # Table 1 row E
        0.222
    """
    act = resolve(act)
    q = _variance(sigma)
    m = _moments(act, q, quadrature)
    fit_power = m.mean**2 + m.linear**2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(fit_power > 0, m.residual / np.where(fit_power > 0, fit_power, 1.0),
                        np.where(m.residual > 0, np.inf, 0.0))


@constrained(act=ACTIVATION, q=POSITIVE, relative_to=Choice.literal(Reference),
             quadrature=QUADRATURE)
def linearization_error(
    act: Activation | str,
    *,
    q: Any = 1.0,
    relative_to: Reference = "absolute",
    quadrature: Quadrature = DEFAULT_QUADRATURE,
) -> np.ndarray:
    """The Hermite linearization error ||tau - tau_bar||_N^2 of the shrinkage paper.

    With tau = sum_k a_k h_k in normalized Hermite polynomials and the linearization
    tau_bar(x) = a_0 + a_1 x (the expansion truncated after degree 1), the error is the
    squared Gaussian norm (section 2 and the proof of Property 7, appendix A)

        ||tau - tau_bar||_N^2 = E[(tau(z) - tau_bar(z))^2] = sum_{k>=2} a_k^2
                              = E[tau(z)^2] - a_0^2 - a_1^2,   z ~ N(0, 1).

    Theorem 1 sums it relative to ||tau'||_N^2 = E[tau'(z)^2]: ``relative_to="derivative"``.

    Args:
        act: an activation or a registry name.
        q: input variance(s) > 0 (the paper uses q = 1; the expansion is then of
            tau(sqrt(q) z)); any shape.
        relative_to: ``"absolute"`` (default, the paper's quantity), ``"norm"`` (divided by
            ||tau||_N^2 = E tau^2: the fraction of tau's power that is nonlinear) or
            ``"derivative"`` (divided by E[tau'^2], the ratio in Theorem 1).
        quadrature: the rule for moments without a closed form.

    Returns:
        An array of the shape of ``q``.

    Raises:
        InvalidInputError: q <= 0, an unknown ``relative_to``, or a zero reference power.

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import linearization_error
        >>> bool(np.isclose(linearization_error("relu"), (np.pi - 2) / (4 * np.pi)))  # appendix B
        True
    """
    where = "linearization_error()"
    act = resolve(act)
    q = np.asarray(q, dtype=np.float64)
    m = _moments(act, q, quadrature)
    if relative_to == "absolute":
        return m.residual
    reference = (m.second if relative_to == "norm"
                 else _second_moment(act.derivative_activation(), q, quadrature))
    if np.any(reference <= 1e-300):
        raise invalid(where, f"a positive reference power for relative_to={relative_to!r}",
                      f"zero for {act.label}", "use relative_to='absolute'")
    return m.residual / reference


@constrained(act=ACTIVATION, quadrature=QUADRATURE)
def coefficient_of_nonlinearity(
    act: Activation | str, *, quadrature: Quadrature = DEFAULT_QUADRATURE
) -> float:
    """mu: the coefficient of non-linearity of the normalized activation (Agarwal et al. 2021).

    Agarwal, Awasthi & Kale (2021), Definition 3.1: for an activation normalized so that
    E[sigma(z)] = 0 and E[sigma(z)^2] = 1 (their eq. 2), z ~ N(0, 1),

        mu = 1 - (E[z sigma(z)])^2 = 1 - a_1^2.

    Any non-constant tau is first normalized, sigma = (tau - a_0) / sqrt(Var tau) (appendix
    C.4), so with the Hermite coefficients a_k of tau itself

        mu = sum_{k>=2} a_k^2 / sum_{k>=1} a_k^2 = 1 - dual'(0) / (dual(1) - dual(0)),

    where dual(rho) = sum_k a_k^2 rho^k = E[tau(u) tau(v)] is tau's dual activation. mu is 0
    for affine activations and in (0, 1] otherwise (Lemma C.2).

    Args:
        act: an activation or a registry name (normalized or not).
        quadrature: the rule for moments without a closed form.

    Returns:
        mu as a float.

    Raises:
        InvalidInputError: tau is constant (it cannot be normalized).

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import coefficient_of_nonlinearity
        >>> mu = coefficient_of_nonlinearity("relu")
        >>> bool(np.isclose(mu, (np.pi - 2) / (2 * (np.pi - 1))))  # appendix C.4
        True
    """
    act = resolve(act)
    m = _moments(act, np.asarray(1.0), quadrature)
    _require_nonconstant(m.variance, m.second, act, "coefficient_of_nonlinearity()")
    return float(m.residual / m.variance)


@constrained(act=ACTIVATION, quadrature=QUADRATURE)
def coefficient_of_nonaffinity(
    act: Activation | str, *, quadrature: Quadrature = DEFAULT_QUADRATURE
) -> float:
    """nu: the coefficient of non-affinity of an uncentered activation (Agarwal et al. 2021).

    Agarwal, Awasthi & Kale (2021), Definition C.20 (appendix C.3): for an activation with
    E[sigma(z)^2] = 1 (their eq. 8) whose mean E[sigma(z)] need not be 0, z ~ N(0, 1),

        nu = 1 - (E[sigma(z)])^2 - (E[z sigma(z)])^2 = 1 - a_0^2 - a_1^2 = sum_{k>=2} a_k^2.

    It is 0 exactly for affine activations and equals mu for centered ones. Any tau that is not
    identically 0 is first scaled to E[tau^2] = 1 (eq. 8; scaling cannot center it), so

        nu = sum_{k>=2} a_k^2 / E[tau^2] = ||tau - tau_bar||_N^2 / ||tau||_N^2,

    the shrinkage paper's linearization error relative to tau's power.

    Args:
        act: an activation or a registry name.
        quadrature: the rule for moments without a closed form.

    Returns:
        nu as a float in [0, 1].

    Raises:
        InvalidInputError: tau is 0 almost everywhere.

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import coefficient_of_nonaffinity
        >>> bool(np.isclose(coefficient_of_nonaffinity("relu"), 0.5 - 1 / np.pi))
        True
    """
    act = resolve(act)
    m = _moments(act, np.asarray(1.0), quadrature)
    if m.second <= 1e-300:
        raise invalid("coefficient_of_nonaffinity()", "an activation with E[tau(z)^2] > 0",
                      f"{act.label}, which is 0 almost everywhere under N(0, 1)",
                      "pass an activation that is not identically zero")
    return float(m.residual / m.second)
