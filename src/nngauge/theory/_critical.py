"""Critical initialization: the (sigma_w, sigma_b) with P'(1) = 1 (the edge of chaos).

For the LayerNorm MLP of the shrinkage paper (eq. 2.3, appendix B),
P'(1) = sigma_w^2 ||phi'||^2 / (sigma_b^2 + sigma_w^2 ||phi||^2), so criticality is
sigma_b^2 / sigma_w^2 = ||phi'||^2 - ||phi||^2 (||f||^2 = E f(z)^2, z ~ N(0, 1)): erf gives
(2 / pi) (2 / sqrt 5 - arctan(2 / sqrt 5)), leaky ReLU gives 0 ("critical initialization
requires sigma_b = 0", appendix B). The ResNet map (eq. A.10) has the same condition; the
unnormalized MLP (Poole et al. 2016) solves chi_1 = sigma_w^2 E[phi'(sqrt(q*) z)^2] = 1.
This module solves P'(1) = 1 numerically (scipy's brentq) for any activation and
architecture, so the closed forms above are tests, not special cases.
"""

from __future__ import annotations

from typing import Callable

from scipy.optimize import brentq

from nngauge._constraints import Choice, Maybe, constrained
from nngauge.activations import DEFAULT_QUADRATURE, Activation, Quadrature
from nngauge.errors import invalid
from nngauge.theory._correlation import (
    CRITICAL_TOL,
    Arch,
    DivergentLengthMap,
    correlation_map,
)
from nngauge.theory._gaussian import Method, resolve
from nngauge.theory._validate import ACTIVATION, QUADRATURE, STD

DEFAULT_SIGMA_W = 1.0
"""sigma_w used when neither sigma is given (for LayerNorm networks only sigma_b / sigma_w
matters, so fixing sigma_w = 1 loses nothing there)."""

_SEARCH_MAX = 1e4  # widest sigma a bracket search tries


@constrained(act=ACTIVATION, sigma_w=Maybe(STD), sigma_b=Maybe(STD), arch=Choice.literal(Arch),
             method=Choice.literal(Method), quadrature=QUADRATURE)
def critical_init(
    act: Activation | str,
    *,
    sigma_w: float | None = None,
    sigma_b: float | None = None,
    arch: Arch = "layernorm",
    method: Method = "auto",
    quadrature: Quadrature = DEFAULT_QUADRATURE,
) -> tuple[float, float]:
    """The critical initialization (sigma_w, sigma_b): slope of the correlation map at 1 is 1.

    Solves P'(1) = 1 for the missing standard deviation with scipy's brentq, P being
    :func:`~nngauge.theory.correlation_map` for ``arch`` (shrinkage paper, section 2.2 and
    appendix B; Schoenholz et al. 2017 for ``"mlp"``). P'(1) decreases in sigma_b and
    increases in sigma_w, so the root is unique when it exists.

    Args:
        act: the activation (an :class:`Activation` or a registry name).
        sigma_w: the weight std, to solve for sigma_b; or None.
        sigma_b: the bias std, to solve for sigma_w; or None. Pass one of the two; with
            neither, sigma_w = ``DEFAULT_SIGMA_W`` = 1.0. When sigma_b = 0 leaves sigma_w free
            (positively homogeneous activations under LayerNorm, e.g. leaky ReLU), sigma_w = 1.
        arch: ``"layernorm"`` (default: the network of the paper's appendix B), ``"resnet"``
            or ``"mlp"``.
        method, quadrature: how Gaussian covariances are computed (see
            :func:`~nngauge.theory.gaussian_covariance`).

    Returns:
        (sigma_w, sigma_b) with |P'(1) - 1| <= 1e-8 (phase ``"critical"``).

    Raises:
        InvalidInputError: both sigmas given, a negative sigma, or no critical value exists
            (e.g. leaky ReLU with sigma_b > 0 under LayerNorm, an activation ordered at every
            sigma).

    Example:
        >>> from nngauge.theory import critical_init
        >>> sw, sb = critical_init("erf")  # appendix B: sb^2 = (2/pi)(2/sqrt(5) - atan(2/sqrt(5)))
        >>> round(sw, 6), round(sb ** 2, 6)
        (1.0, 0.104851)
    """
    where = "critical_init()"
    act = resolve(act)
    if sigma_w is not None and sigma_b is not None:
        raise invalid(where, "one of sigma_w, sigma_b (the other is solved for)",
                      f"both (sigma_w={sigma_w}, sigma_b={sigma_b})",
                      "pass only the one you want to keep fixed")

    def excess(sw: float, sb: float) -> float:
        try:
            cmap = correlation_map(act, sw, sb, arch=arch, method=method, quadrature=quadrature)
        except DivergentLengthMap:  # "mlp" beyond the edge: variances explode, chaotic side
            return 1.0
        return cmap.slope_at_one - 1.0

    if sigma_b is None:
        sw = DEFAULT_SIGMA_W if sigma_w is None else float(sigma_w)
        sb = _solve(lambda sb: -excess(sw, sb), f"sigma_b for {act.label} at sigma_w={sw}",
                    "ordered (slope at one below 1) already at sigma_b = 0",
                    "chaotic (slope at one above 1) for every sigma_b",
                    "use a larger sigma_w, or another activation or arch")
        return sw, sb
    sb = float(sigma_b)
    if abs(excess(DEFAULT_SIGMA_W, sb)) <= CRITICAL_TOL and abs(excess(2.0, sb)) <= CRITICAL_TOL:
        return DEFAULT_SIGMA_W, sb  # sigma_w does not matter (e.g. leaky relu, sigma_b = 0)
    sw = _solve(lambda sw: excess(sw, sb), f"sigma_w for {act.label} at sigma_b={sb}",
                "chaotic (slope at one above 1) for every sigma_w",
                "ordered (slope at one below 1) for every sigma_w",
                "use another sigma_b, or another activation or arch", lowest=1e-6)
    return sw, sb


def _solve(f: Callable[[float], float], what: str, at_lowest: str, never: str, fix: str, *,
           lowest: float = 0.0) -> float:
    """The root of f, increasing from f(lowest) <= 0; brackets by doubling up to _SEARCH_MAX."""
    where = "critical_init()"
    lo = lowest
    f_lo = f(lo)
    if abs(f_lo) <= CRITICAL_TOL:
        return lo
    if f_lo > 0.0:
        raise invalid(where, f"a critical {what}", at_lowest, fix)
    hi = 1.0
    while f(hi) < 0.0:
        lo, hi = hi, 2.0 * hi
        if hi > _SEARCH_MAX:
            raise invalid(where, f"a critical {what}", never, fix)
    return float(brentq(f, lo, hi, xtol=1e-13, rtol=1e-14))
