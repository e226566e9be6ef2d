"""NormReLU_b: a ReLU with its kink at b, normalized (Agarwal et al. 2021, section 7, appendix I).

Definition (Agarwal, Awasthi & Kale, ALT 2021, eq. (4)):

    NormReLU_b(s) = lambda_b (max(s, b) - mu_b),

with mu_b, lambda_b such that eq. (2) holds: E[NormReLU_b(z)] = 0 and E[NormReLU_b(z)^2] = 1
for z ~ N(0, 1). With phi, Phi the standard normal pdf and cdf (truncated-normal moments,
appendix I): E[z; z > b] = phi(b) and E[z^2; z > b] = 1 - Phi(b) + b phi(b), so

    mu_b = E[max(z, b)] = b Phi(b) + phi(b),
    E[max(z, b)^2] = b^2 Phi(b) + 1 - Phi(b) + b phi(b),
    lambda_b = 1 / sqrt(E[max(z, b)^2] - mu_b^2).

The paper picks b so that lambda_b equals SELU's scale 1.0507 (the number itself was lost from
the extracted text); solving lambda_b = 1.0507009873554805 gives b = -1.5907658564..., where
mu_b = 0.0237527449..., which is the default here (``SELU_MATCHED_B``).

The covariance has a closed form too, from truncated bivariate normal moments (Rosenbaum 1961):
for x, y standard normal with correlation rho, s = sqrt(1 - rho^2), a_h = (k - rho h) / s,
a_k = (h - rho k) / s and Q = 1 - Phi, on the orthant {x > h, y > k}

    P      = Phi_2(-h, -k; rho)                      (Owen's T function, Owen 1956)
    E[x]   = phi(h) Q(a_h) + rho phi(k) Q(a_k)
    E[x y] = rho P + rho h phi(h) Q(a_h) + rho k phi(k) Q(a_k) + s phi(h) phi(a_h),

with the limits rho = 1 (x = y > max(h, k)) and rho = -1 (h < x = -y < -k) taken exactly. With
u = sqrt(q1) x, v = sqrt(q2) y, E[relu(u - a) relu(v - b)] = sqrt(q1 q2) E[(x - h)(y - k); x > h,
y > k] at h = a / sqrt(q1), k = b / sqrt(q2); NormReLU_b = lambda_b ((b - mu_b) + relu(s - b))
and hard_tanh = lo + relu(s - lo) - relu(s - hi) are sums of such terms.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from nngauge._constraints import Real, constrained
from nngauge.activations._base import Activation
from nngauge.activations._registry import builtin, get
from nngauge.errors import invalid

SELU_MATCHED_B = -1.5907658564411595
"""The kink b where lambda_b is SELU's scale 1.0507009873554805 (Agarwal et al. 2021, sec. 7)."""


def _pdf(x):
    return np.exp(-0.5 * np.square(x)) / np.sqrt(2.0 * np.pi)


def _owens_t(h, num, den):
    """Owen's T(h, num / den), with T(0, a) = arctan(a) / (2 pi) also for den = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = num / den
    return np.where(h == 0.0, np.arctan2(num, den) / (2.0 * np.pi),
                    special.owens_t(h, np.where(np.isfinite(a), a, 0.0)))


def bivariate_normal_cdf(h, k, rho) -> np.ndarray:
    """Phi_2(h, k; rho) = P(x < h, y < k) for standard normals of correlation |rho| < 1.

    Owen (1956): Phi_2 = (Phi(h) + Phi(k)) / 2 - T(h, a_h) - T(k, a_k) - beta with
    a_h = (k - rho h) / (h s), a_k = (h - rho k) / (k s), beta = 1/2 when h k < 0 or
    (h k = 0 and h + k < 0), else 0; Phi_2(0, 0; rho) = 1/4 + arcsin(rho) / (2 pi).
    """
    h, k, rho = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (h, k, rho)))
    s = np.sqrt(np.clip(1.0 - rho * rho, 0.0, None))
    beta = np.where((h * k < 0) | ((h * k == 0) & (h + k < 0)), 0.5, 0.0)
    out = (0.5 * (special.ndtr(h) + special.ndtr(k)) - _owens_t(h, k - rho * h, h * s)
           - _owens_t(k, h - rho * k, k * s) - beta)
    return np.where((h == 0) & (k == 0), 0.25 + np.arcsin(rho) / (2.0 * np.pi), out)


def orthant_moments(h, k, rho) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """P, E[x; A], E[y; A], E[x y; A] on A = {x > h, y > k} (see the module docstring)."""
    h, k, rho = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (h, k, rho)))
    s = np.sqrt(np.clip(1.0 - rho * rho, 0.0, None))
    s_safe = np.where(s > 0, s, 1.0)
    a_h, a_k = (k - rho * h) / s_safe, (h - rho * k) / s_safe
    tail_h, tail_k = special.ndtr(-a_h), special.ndtr(-a_k)
    p = bivariate_normal_cdf(-h, -k, rho)
    ex = _pdf(h) * tail_h + rho * _pdf(k) * tail_k
    ey = _pdf(k) * tail_k + rho * _pdf(h) * tail_h
    exy = rho * (p + h * _pdf(h) * tail_h + k * _pdf(k) * tail_k) + s * _pdf(h) * _pdf(a_h)
    # rho = 1: x = y > m = max(h, k); rho = -1: y = -x with h < x < -k
    m = np.maximum(h, k)
    p_up, e_up = special.ndtr(-m), _pdf(m)
    open_ = h < -k
    p_down = np.where(open_, special.ndtr(-k) - special.ndtr(h), 0.0)
    e_down = np.where(open_, _pdf(h) - _pdf(k), 0.0)
    exy_down = np.where(open_, -(p_down + h * _pdf(h) + k * _pdf(k)), 0.0)
    up, down = rho >= 1.0, rho <= -1.0
    return (np.where(up, p_up, np.where(down, p_down, p)),
            np.where(up, e_up, np.where(down, e_down, ex)),
            np.where(up, e_up, np.where(down, -e_down, ey)),
            np.where(up, p_up + m * e_up, np.where(down, exy_down, exy)))


def kink_mean(a: float, q) -> np.ndarray:
    """E[relu(sqrt(q) z - a)] = sigma phi(a / sigma) - a Q(a / sigma) (relu(-a) at q = 0)."""
    sigma = np.sqrt(np.asarray(q, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        h = a / sigma
        out = sigma * _pdf(h) - a * special.ndtr(-h)
    return np.where(sigma > 0, out, max(-a, 0.0))


def step_mean(a: float, q) -> np.ndarray:
    """P(sqrt(q) z > a) = Q(a / sigma) (1[0 > a] at q = 0)."""
    sigma = np.sqrt(np.asarray(q, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.ndtr(-a / sigma)
    return np.where(sigma > 0, out, float(a < 0))


def kink_cross(a: float, b: float, rho, q1, q2) -> np.ndarray:
    """E[relu(u - a) relu(v - b)], Var u = q1 > 0, Var v = q2 > 0, corr rho."""
    s1, s2 = np.sqrt(q1), np.sqrt(q2)
    h, k = a / s1, b / s2
    p, ex, ey, exy = orthant_moments(h, k, rho)
    return s1 * s2 * (exy - k * ex - h * ey + h * k * p)


def step_cross(a: float, b: float, rho, q1, q2) -> np.ndarray:
    """P(u > a, v > b), Var u = q1 > 0, Var v = q2 > 0, corr rho."""
    return orthant_moments(a / np.sqrt(q1), b / np.sqrt(q2), rho)[0]


def degenerate_safe(covariance, value_at_zero: float, mean):
    """Extend a covariance closed form valid for q1, q2 > 0 to zero variances.

    A zero variance makes that variable the constant 0: E[tau(0) tau(v)] = tau(0) E[tau(v)]
    (``mean`` must return tau(0) at q = 0, so both zero gives tau(0)^2).
    """

    def safe(rho, q1, q2):
        rho, q1, q2 = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (rho, q1, q2)))
        out = covariance(rho, np.where(q1 > 0, q1, 1.0), np.where(q2 > 0, q2, 1.0))
        out = np.where(q1 > 0, out, value_at_zero * mean(q2))
        return np.where(q2 > 0, out, value_at_zero * mean(q1))

    return safe


@constrained(b=Real())
def norm_relu_constants(b: float) -> tuple[float, float]:
    """(mu_b, lambda_b) of NormReLU_b in closed form (Agarwal et al. 2021, appendix I).

    Raises:
        InvalidInputError: b is not finite, or so large that max(z, b) is (numerically) constant.

    Example:
        >>> mu, lam = norm_relu_constants(SELU_MATCHED_B)
        >>> round(lam, 10), round(mu, 6)
        (1.0507009874, 0.023753)
    """
    where = "norm_relu_constants()"
    b = float(b)
    cdf, pdf = special.ndtr(b), _pdf(b)
    mu = b * cdf + pdf
    variance = b * b * cdf + (1.0 - cdf) + b * pdf - mu * mu
    if not variance > 1e-12:
        raise invalid(where, "a kink b where max(z, b) still varies (b below about 6)",
                      f"b={b} (variance {variance:.3g})", "pass a smaller b, e.g. the default")
    return float(mu), float(1.0 / np.sqrt(variance))


@builtin("norm_relu")
def norm_relu(b: float = SELU_MATCHED_B) -> Activation:
    """NormReLU_b(s) = lambda_b (max(s, b) - mu_b), normalized under N(0, 1).

    With max(s, b) = b + relu(s - b) and r = relu(. - b): mean lambda_b (b - mu_b + E r(u)),
    covariance lambda_b^2 ((b - mu_b)^2 + (b - mu_b)(E r(u) + E r(v)) + E[r(u) r(v)]), all in
    closed form (module docstring). The derivative lambda_b 1[s > b] has closed forms too.

    Example:
        >>> import numpy as np
        >>> from nngauge.activations import get
        >>> act = get("norm_relu")
        >>> act(np.array([-3.0, 0.0])).round(4)
        array([-1.6964, -0.025 ])
    """
    mu, lam = norm_relu_constants(b)
    b = float(b)
    c = b - mu

    def torch_fn(x):
        import torch

        return lam * (torch.clamp(x, min=b) - mu)

    def mean(q):
        return lam * (c + kink_mean(b, q))

    def covariance(rho, q1, q2):
        return lam * lam * (c * c + c * (kink_mean(b, q1) + kink_mean(b, q2))
                            + kink_cross(b, b, rho, q1, q2))

    return Activation(
        name="norm_relu",
        value=lambda x: lam * (np.maximum(x, b) - mu),
        derivative_fn=lambda x: lam * (x > b).astype(np.float64),
        torch_fn=torch_fn,
        params={"b": b},
        breakpoints=(b,),
        piecewise_linear=True,
        mean_fn=mean,
        covariance_fn=degenerate_safe(covariance, lam * (max(b, 0.0) - mu), mean),
        derivative_factory=lambda: _norm_relu_step(b, lam),
        description=f"NormReLU: {lam:.6g} (max(s, {b:.6g}) - {mu:.6g})",
    )


def _norm_relu_step(b: float, lam: float) -> Activation:
    """NormReLU_b' = lambda_b 1[s > b]: mean lambda_b Q(b / sigma), covariance
    lambda_b^2 P(u > b, v > b)."""

    def mean(q):
        return lam * step_mean(b, q)

    return Activation(
        name="norm_relu_step",
        value=lambda x: lam * (x > b).astype(np.float64),
        derivative_fn=np.zeros_like,
        torch_fn=lambda x: lam * (x > b).to(x.dtype),
        params={"b": b},
        breakpoints=(b,),
        piecewise_linear=True,
        mean_fn=mean,
        covariance_fn=degenerate_safe(lambda rho, q1, q2: lam * lam * step_cross(b, b, rho, q1, q2),
                                      lam * float(b < 0), mean),
        derivative_factory=lambda: get("constant", value=0.0),
        description=f"derivative of norm_relu(b={b:.6g}): {lam:.6g} 1[s > {b:.6g}]",
    )
