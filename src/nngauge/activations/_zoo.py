"""The activation zoo: every named activation of the five papers, with closed forms.

Closed forms use u, v centered Gaussian with variances q1, q2, covariance c = rho sqrt(q1 q2),
theta = arccos(rho); see :mod:`nngauge.activations._base`. All hold for unequal variances:

- identity: E[uv] = c.
- relu^n, n = 0, 1, 2: the arc-cosine kernels (Cho & Saul 2009; Daniely et al. 2016, table 1)
  E[relu(u)^n relu(v)^n] = (q1 q2)^(n/2) J_n(theta) / (2 pi) with J_0 = pi - theta,
  J_1 = sin(theta) + (pi - theta) cos(theta),
  J_2 = 3 sin(theta) cos(theta) + (pi - theta) (1 + 2 cos(theta)^2).
- two-level steps lo + (hi - lo) 1[s > 0] (step, sign, leaky_relu'): from
  P(u > 0, v > 0) = J_0 / (2 pi); sign gives (2 / pi) arcsin(rho).
- leaky_relu = a s + (1 - a) relu(s), using E[u relu(v)] = c / 2 (symmetry (u, v) -> (-u, -v)):
  E = a c + (1 - a)^2 E[relu(u) relu(v)].
- abs = relu(s) + relu(-s), odd_square = relu(s)^2 - relu(-s)^2: sums of arc-cosine kernels
  at rho and -rho.
- square: E[u^2 v^2] = q1 q2 + 2 c^2 (Isserlis).
- erf: (2 / pi) arcsin(2 c / sqrt((1 + 2 q1)(1 + 2 q2))) (Williams 1997).
- Gaussian bumps A exp(-s^2 / (2 w)) (gaussian, erf'): E = A^2 / sqrt(Delta) with
  Delta = (1 + q1 / w)(1 + q2 / w) - c^2 / w^2; their derivatives -(A / w) s exp(-s^2 / (2 w)):
  E = (A / w)^2 c Delta^(-3/2) (the Gaussian integral of u v exp(-(u^2 + v^2) / (2 w))).
- gelu = s Phi(s) = E_xi[s 1(xi < s)], xi ~ N(0, 1) independent: with X1 = u - xi1,
  X2 = v - xi2 (variances A = 1 + q1, B = 1 + q2, covariance c), Stein's lemma on u and the
  Gaussian conditionals at X1 = 0 / X2 = 0 give
  E = c (1/4 + arcsin(c / sqrt(A B)) / (2 pi))
      + (q1 q2 - c^2 + c^2 / A + c^2 / B) / (2 pi sqrt(A B - c^2)).

Means E[tau(sqrt(q) z)] with sigma = sqrt(q), Phi / phi the standard normal cdf / pdf:
odd functions 0; sigmoid 1/2; relu sigma / sqrt(2 pi); abs sigma sqrt(2 / pi); square q;
elu sigma / sqrt(2 pi) + alpha (erfcx(sigma / sqrt 2) - 1) / 2 (erfcx keeps exp(q / 2) Phi(-sigma)
finite); gelu q / sqrt(2 pi (1 + q)) (Stein's lemma); hard_tanh
lo Phi(lo / sigma) + hi Phi(-hi / sigma) + sigma (phi(lo / sigma) - phi(hi / sigma)).

Activations of the NLC paper's table 1 (ReLU, SELU, tanh, sigmoid, even tanh, Gaussian,
square, odd square) are registered under those names; see Philipp & Carbonell (arXiv:1806.00179),
table 1 and appendix C.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from nngauge.activations._base import Activation
from nngauge.activations._modify import finite_param, modify
from nngauge.activations._norm_relu import (  # also registers norm_relu
    degenerate_safe,
    kink_cross,
    kink_mean,
    step_cross,
    step_mean,
)
from nngauge.activations._registry import builtin
from nngauge.errors import invalid

_SQRT_2PI = np.sqrt(2.0 * np.pi)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _torch():
    import torch

    return torch


def _functional():
    import torch.nn.functional as functional

    return functional


def _zeros_like_q(q) -> np.ndarray:
    return np.zeros_like(np.asarray(q, dtype=np.float64))


def _cov(rho, q1, q2) -> np.ndarray:
    return rho * np.sqrt(q1 * q2)


def arc_cosine_kernel(order: int, rho, q1, q2) -> np.ndarray:
    """E[relu(u)^n relu(v)^n] for n = ``order`` in {0, 1, 2} (Cho & Saul 2009), relu(0)^0 = 0."""
    rho = np.clip(np.asarray(rho, dtype=np.float64), -1.0, 1.0)
    theta = np.arccos(rho)
    sin = np.sqrt(np.clip(1.0 - rho * rho, 0.0, None))
    if order == 0:
        j = np.pi - theta
    elif order == 1:
        j = sin + (np.pi - theta) * rho
    else:
        j = 3.0 * sin * rho + (np.pi - theta) * (1.0 + 2.0 * rho * rho)
    return (q1 * q2) ** (order / 2.0) * j / (2.0 * np.pi)


# ---------------------------------------------------------------- piecewise linear activations


@builtin("identity")
def identity() -> Activation:
    """tau(s) = s."""
    return Activation(
        name="identity",
        value=lambda x: x,
        derivative_fn=np.ones_like,
        torch_fn=lambda x: x,
        piecewise_linear=True,
        mean_fn=_zeros_like_q,
        covariance_fn=_cov,
        derivative_factory=lambda: constant(1.0),
        description="linear: tau(s) = s",
    )


@builtin("constant")
def constant(value: float = 1.0) -> Activation:
    """tau(s) = value (the derivative of an affine map)."""
    c = finite_param(value, "value", "get('constant')")
    return Activation(
        name="constant",
        value=lambda x: np.full_like(x, c),
        derivative_fn=np.zeros_like,
        torch_fn=lambda x: _torch().full_like(x, c),
        params={"value": c},
        piecewise_linear=True,
        mean_fn=lambda q: np.full_like(np.asarray(q, dtype=np.float64), c),
        covariance_fn=lambda rho, q1, q2: np.full(np.broadcast(rho, q1, q2).shape, c * c),
        derivative_factory=lambda: constant(0.0),
        description="constant: tau(s) = c",
    )


@builtin("relu")
def relu() -> Activation:
    """tau(s) = max(s, 0)."""
    return Activation(
        name="relu",
        value=lambda x: np.maximum(x, 0.0),
        derivative_fn=lambda x: (x > 0).astype(np.float64),
        torch_fn=lambda x: _torch().relu(x),
        breakpoints=(0.0,),
        piecewise_linear=True,
        mean_fn=lambda q: np.sqrt(q) / _SQRT_2PI,
        covariance_fn=lambda rho, q1, q2: arc_cosine_kernel(1, rho, q1, q2),
        derivative_factory=step,
        description="ReLU: max(s, 0)",
    )


def _two_level(name: str, lo: float, hi: float, params: dict, description: str,
               at_zero: float | None = None) -> Activation:
    """tau(s) = hi for s > 0, lo for s < 0 (and ``at_zero`` at 0, default lo)."""
    zero = lo if at_zero is None else at_zero

    def value(x):
        return np.where(x > 0, hi, np.where(x < 0, lo, zero))

    def torch_fn(x):
        torch = _torch()
        return torch.where(x > 0, torch.full_like(x, hi),
                           torch.where(x < 0, torch.full_like(x, lo), torch.full_like(x, zero)))

    def mean(q):
        q = np.asarray(q, dtype=np.float64)
        return np.where(q > 0, 0.5 * (lo + hi), zero)

    def covariance(rho, q1, q2):
        both_pos = arc_cosine_kernel(0, rho, 1.0, 1.0)  # P(u > 0, v > 0) = P(u < 0, v < 0)
        mixed = 0.5 - both_pos
        return (hi * hi + lo * lo) * both_pos + 2.0 * lo * hi * mixed

    return Activation(
        name=name,
        value=value,
        derivative_fn=np.zeros_like,
        torch_fn=torch_fn,
        params=params,
        breakpoints=(0.0,),
        piecewise_linear=True,
        mean_fn=mean,
        covariance_fn=degenerate_safe(covariance, zero, mean),
        derivative_factory=lambda: constant(0.0),
        description=description,
    )


@builtin("step")
def step() -> Activation:
    """tau(s) = 1 if s > 0 else 0 (the derivative of relu)."""
    return _two_level("step", 0.0, 1.0, {}, "Heaviside step: 1[s > 0]")


@builtin("sign")
def sign() -> Activation:
    """tau(s) = sign(s) (0 at 0); E[sign(u) sign(v)] = (2 / pi) arcsin(rho)."""
    return _two_level("sign", -1.0, 1.0, {}, "sign(s)", at_zero=0.0)


def _leaky_step(negative_slope: float) -> Activation:
    """leaky_relu': negative_slope for s <= 0, 1 for s > 0."""
    return _two_level("leaky_step", negative_slope, 1.0, {"negative_slope": negative_slope},
                      "derivative of leaky_relu: a + (1 - a) 1[s > 0]")


@builtin("leaky_relu")
def leaky_relu(negative_slope: float = 0.01) -> Activation:
    """tau(s) = s for s > 0, negative_slope * s otherwise."""
    a = finite_param(negative_slope, "negative_slope", "get('leaky_relu')")
    return Activation(
        name="leaky_relu",
        value=lambda x: np.where(x > 0, x, a * x),
        derivative_fn=lambda x: np.where(x > 0, 1.0, a),
        torch_fn=lambda x: _functional().leaky_relu(x, a),
        params={"negative_slope": a},
        breakpoints=(0.0,),
        piecewise_linear=True,
        mean_fn=lambda q: (1.0 - a) * np.sqrt(q) / _SQRT_2PI,
        covariance_fn=lambda rho, q1, q2: (
            a * _cov(rho, q1, q2) + (1.0 - a) ** 2 * arc_cosine_kernel(1, rho, q1, q2)
        ),
        derivative_factory=lambda: _leaky_step(a),
        description="leaky ReLU: max(s, a s)",
    )


@builtin("abs")
def abs_() -> Activation:
    """tau(s) = |s| = relu(s) + relu(-s)."""
    return Activation(
        name="abs",
        value=np.abs,
        derivative_fn=np.sign,
        torch_fn=lambda x: _torch().abs(x),
        breakpoints=(0.0,),
        piecewise_linear=True,
        mean_fn=lambda q: np.sqrt(2.0 * np.asarray(q, dtype=np.float64) / np.pi),
        covariance_fn=lambda rho, q1, q2: 2.0 * (
            arc_cosine_kernel(1, rho, q1, q2) + arc_cosine_kernel(1, -rho, q1, q2)
        ),
        derivative_factory=sign,
        description="absolute value |s|",
    )


def _box(lo: float, hi: float) -> Activation:
    """hard_tanh' = 1[s > lo] - 1[s > hi] (1 on (lo, hi)); closed forms from orthant masses."""

    def mean(q):
        return step_mean(lo, q) - step_mean(hi, q)

    def covariance(rho, q1, q2):
        return (step_cross(lo, lo, rho, q1, q2) - step_cross(lo, hi, rho, q1, q2)
                - step_cross(hi, lo, rho, q1, q2) + step_cross(hi, hi, rho, q1, q2))

    inside = float(lo < 0.0 < hi)
    return Activation(
        name="box",
        value=lambda x: ((x > lo) & (x < hi)).astype(np.float64),
        derivative_fn=np.zeros_like,
        torch_fn=lambda x: ((x > lo) & (x < hi)).to(x.dtype),
        params={"lo": lo, "hi": hi},
        breakpoints=(lo, hi),
        piecewise_linear=True,
        mean_fn=mean,
        covariance_fn=degenerate_safe(covariance, inside, mean),
        derivative_factory=lambda: constant(0.0),
        description="derivative of hard_tanh: 1[lo < s < hi]",
    )


@builtin("hard_tanh")
def hard_tanh(min_val: float = -1.0, max_val: float = 1.0) -> Activation:
    """tau(s) = clip(s, min_val, max_val) = lo + relu(s - lo) - relu(s - hi)."""
    where = "get('hard_tanh')"
    lo, hi = finite_param(min_val, "min_val", where), finite_param(max_val, "max_val", where)
    if not lo < hi:
        raise invalid(where, "min_val < max_val", f"min_val={lo}, max_val={hi}",
                      "swap or separate the two bounds")

    def mean(q):
        return lo + kink_mean(lo, q) - kink_mean(hi, q)

    def covariance(rho, q1, q2):
        first = kink_mean(lo, q1) - kink_mean(hi, q1) + kink_mean(lo, q2) - kink_mean(hi, q2)
        return (lo * lo + lo * first + kink_cross(lo, lo, rho, q1, q2)
                - kink_cross(lo, hi, rho, q1, q2) - kink_cross(hi, lo, rho, q1, q2)
                + kink_cross(hi, hi, rho, q1, q2))

    return Activation(
        name="hard_tanh",
        value=lambda x: np.clip(x, lo, hi),
        derivative_fn=lambda x: ((x > lo) & (x < hi)).astype(np.float64),
        torch_fn=lambda x: _torch().clamp(x, lo, hi),
        params={"min_val": lo, "max_val": hi},
        breakpoints=(lo, hi),
        piecewise_linear=True,
        mean_fn=mean,
        covariance_fn=degenerate_safe(covariance, float(np.clip(0.0, lo, hi)), mean),
        derivative_factory=lambda: _box(lo, hi),
        description="hard tanh: clip(s, min_val, max_val)",
    )


# ---------------------------------------------------------------- polynomials


@builtin("square")
def square() -> Activation:
    """tau(s) = s^2 (NLC table 1); E[u^2 v^2] = q1 q2 + 2 c^2."""
    return Activation(
        name="square",
        value=np.square,
        derivative_fn=lambda x: 2.0 * x,
        torch_fn=lambda x: x * x,
        mean_fn=lambda q: np.asarray(q, dtype=np.float64),
        covariance_fn=lambda rho, q1, q2: q1 * q2 + 2.0 * _cov(rho, q1, q2) ** 2,
        derivative_factory=lambda: modify(identity(), scale=2.0),
        description="square: s^2",
    )


@builtin("odd_square")
def odd_square() -> Activation:
    """tau(s) = s |s| (NLC table 1) = relu(s)^2 - relu(-s)^2."""
    return Activation(
        name="odd_square",
        value=lambda x: x * np.abs(x),
        derivative_fn=lambda x: 2.0 * np.abs(x),
        torch_fn=lambda x: x * _torch().abs(x),
        breakpoints=(0.0,),
        mean_fn=_zeros_like_q,
        covariance_fn=lambda rho, q1, q2: 2.0 * (
            arc_cosine_kernel(2, rho, q1, q2) - arc_cosine_kernel(2, -rho, q1, q2)
        ),
        derivative_factory=lambda: modify(abs_(), scale=2.0),
        description="odd square: s |s|",
    )


# ---------------------------------------------------------------- Gaussian bumps and erf


def _bump_delta(rho, q1, q2, width: float) -> np.ndarray:
    c = _cov(rho, q1, q2)
    return (1.0 + q1 / width) * (1.0 + q2 / width) - (c / width) ** 2


def _bump(name: str, amplitude: float, width: float, description: str, params=None) -> Activation:
    """tau(s) = amplitude * exp(-s^2 / (2 width))."""
    amp, w = float(amplitude), float(width)
    return Activation(
        name=name,
        value=lambda x: amp * np.exp(-0.5 * x * x / w),
        derivative_fn=lambda x: -(amp / w) * x * np.exp(-0.5 * x * x / w),
        torch_fn=lambda x: amp * _torch().exp(-0.5 * x * x / w),
        params=params or {},
        mean_fn=lambda q: amp / np.sqrt(1.0 + np.asarray(q, dtype=np.float64) / w),
        covariance_fn=lambda rho, q1, q2: amp * amp / np.sqrt(_bump_delta(rho, q1, q2, w)),
        derivative_factory=lambda: _bump_derivative(amp, w, name),
        description=description,
    )


def _bump_derivative(amp: float, w: float, of: str) -> Activation:
    """tau(s) = -(amp / w) s exp(-s^2 / (2 w)), the derivative of a Gaussian bump."""
    k = amp / w
    return Activation(
        name=f"d/dx {of}",
        value=lambda x: -k * x * np.exp(-0.5 * x * x / w),
        derivative_fn=lambda x: -k * (1.0 - x * x / w) * np.exp(-0.5 * x * x / w),
        torch_fn=lambda x: -k * x * _torch().exp(-0.5 * x * x / w),
        mean_fn=_zeros_like_q,
        covariance_fn=lambda rho, q1, q2: (
            k * k * _cov(rho, q1, q2) * _bump_delta(rho, q1, q2, w) ** -1.5
        ),
        description=f"derivative of {of}",
    )


@builtin("gaussian")
def gaussian() -> Activation:
    """tau(s) = exp(-s^2 / 2) / sqrt(2 pi) (NLC table 1)."""
    return _bump("gaussian", 1.0 / _SQRT_2PI, 1.0, "Gaussian: exp(-s^2 / 2) / sqrt(2 pi)")


@builtin("erf")
def erf() -> Activation:
    """tau(s) = erf(s); E[erf(u) erf(v)] = (2 / pi) arcsin(2 c / sqrt((1 + 2 q1)(1 + 2 q2)))."""
    return Activation(
        name="erf",
        value=special.erf,
        derivative_fn=lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
        torch_fn=lambda x: _torch().erf(x),
        mean_fn=_zeros_like_q,
        covariance_fn=lambda rho, q1, q2: 2.0 / np.pi * np.arcsin(
            np.clip(2.0 * _cov(rho, q1, q2) / np.sqrt((1.0 + 2.0 * q1) * (1.0 + 2.0 * q2)), -1, 1)
        ),
        derivative_factory=lambda: _bump("d/dx erf", 2.0 / np.sqrt(np.pi), 0.5,
                                         "derivative of erf: (2 / sqrt(pi)) exp(-s^2)"),
        description="error function erf(s)",
    )


# ---------------------------------------------------------------- smooth saturating activations


def _tanh_derivative(x):
    return 1.0 - np.tanh(x) ** 2


@builtin("tanh")
def tanh() -> Activation:
    """tau(s) = tanh(s) (odd: zero mean)."""
    return Activation(
        name="tanh",
        value=np.tanh,
        derivative_fn=_tanh_derivative,
        torch_fn=lambda x: _torch().tanh(x),
        mean_fn=_zeros_like_q,
        description="hyperbolic tangent",
    )


@builtin("even_tanh")
def even_tanh() -> Activation:
    """tau(s) = tanh(|s|) (NLC table 1)."""
    return Activation(
        name="even_tanh",
        value=lambda x: np.tanh(np.abs(x)),
        derivative_fn=lambda x: np.sign(x) * _tanh_derivative(x),
        torch_fn=lambda x: _torch().tanh(_torch().abs(x)),
        breakpoints=(0.0,),
        description="even tanh: tanh(|s|)",
    )


@builtin("sigmoid")
def sigmoid() -> Activation:
    """tau(s) = 1 / (1 + exp(-s)); sigmoid - 1/2 is odd, so the mean is 1/2."""
    return Activation(
        name="sigmoid",
        value=special.expit,
        derivative_fn=lambda x: special.expit(x) * special.expit(-x),
        torch_fn=lambda x: _torch().sigmoid(x),
        mean_fn=lambda q: np.full_like(np.asarray(q, dtype=np.float64), 0.5),
        description="logistic sigmoid",
    )


def _elu_parts(alpha: float, scale: float, name: str, params: dict, description: str):
    def value(x):
        return scale * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))

    def derivative(x):
        return scale * np.where(x > 0, 1.0, alpha * np.exp(np.minimum(x, 0.0)))

    def mean(q):
        sigma = np.sqrt(np.asarray(q, dtype=np.float64))
        tail = special.erfcx(sigma / np.sqrt(2.0))  # 2 exp(q / 2) Phi(-sigma), overflow-free
        return scale * (sigma / _SQRT_2PI + 0.5 * alpha * (tail - 1.0))

    def derivative_mean(q):
        sigma = np.sqrt(np.asarray(q, dtype=np.float64))
        return scale * 0.5 * (1.0 + alpha * special.erfcx(sigma / np.sqrt(2.0)))

    def derivative_factory():
        return Activation(
            name=f"d/dx {name}",
            value=derivative,
            derivative_fn=lambda x: scale * np.where(x > 0, 0.0,
                                                     alpha * np.exp(np.minimum(x, 0.0))),
            torch_fn=lambda x: scale * _torch().where(
                x > 0, _torch().ones_like(x), alpha * _torch().exp(_torch().clamp(x, max=0.0))),
            params=params,
            breakpoints=(0.0,),
            mean_fn=derivative_mean,
            description=f"derivative of {name}",
        )

    return Activation(
        name=name,
        value=value,
        derivative_fn=derivative,
        torch_fn=lambda x: scale * _functional().elu(x, alpha),
        params=params,
        breakpoints=(0.0,),
        mean_fn=mean,
        derivative_factory=derivative_factory,
        description=description,
    )


@builtin("elu")
def elu(alpha: float = 1.0) -> Activation:
    """tau(s) = s for s > 0, alpha (exp(s) - 1) otherwise."""
    a = finite_param(alpha, "alpha", "get('elu')")
    return _elu_parts(a, 1.0, "elu", {"alpha": a}, "ELU: s or alpha (exp(s) - 1)")


@builtin("selu")
def selu() -> Activation:
    """tau(s) = lambda elu_alpha(s) with Klambauer et al.'s alpha = 1.6733, lambda = 1.0507."""
    return _elu_parts(_SELU_ALPHA, _SELU_SCALE, "selu", {},
                      "SELU: 1.0507 * (s or 1.6733 (exp(s) - 1))")


# ---------------------------------------------------------------- smooth ReLU-likes


def _std_pdf(x):
    return np.exp(-0.5 * x * x) / _SQRT_2PI


def _gelu_covariance(rho, q1, q2):
    """E[u Phi(u) v Phi(v)] (derivation in the module docstring)."""
    c = _cov(rho, q1, q2)
    a, b = 1.0 + q1, 1.0 + q2
    return (c * (0.25 + np.arcsin(c / np.sqrt(a * b)) / (2.0 * np.pi))
            + (q1 * q2 - c * c + c * c / a + c * c / b) / (2.0 * np.pi * np.sqrt(a * b - c * c)))


@builtin("gelu")
def gelu() -> Activation:
    """tau(s) = s Phi(s) (exact GELU); mean q / sqrt(2 pi (1 + q))."""

    def derivative_factory():
        return Activation(
            name="d/dx gelu",
            value=lambda x: special.ndtr(x) + x * _std_pdf(x),
            derivative_fn=lambda x: (2.0 - x * x) * _std_pdf(x),
            torch_fn=lambda x: (0.5 * (1.0 + _torch().erf(x / np.sqrt(2.0)))
                                + x * _torch().exp(-0.5 * x * x) / _SQRT_2PI),
            # E[Phi(sigma z)] = 1/2 and E[sigma z phi(sigma z)] = 0 (odd)
            mean_fn=lambda q: np.full_like(np.asarray(q, dtype=np.float64), 0.5),
            description="derivative of gelu: Phi(s) + s phi(s)",
        )

    return Activation(
        name="gelu",
        value=lambda x: x * special.ndtr(x),
        derivative_fn=lambda x: special.ndtr(x) + x * _std_pdf(x),
        torch_fn=lambda x: _functional().gelu(x),
        mean_fn=lambda q: np.asarray(q, dtype=np.float64) / np.sqrt(
            2.0 * np.pi * (1.0 + np.asarray(q, dtype=np.float64))),
        covariance_fn=_gelu_covariance,
        derivative_factory=derivative_factory,
        description="GELU: s Phi(s)",
    )


@builtin("silu")
def silu() -> Activation:
    """tau(s) = s sigmoid(s) (swish)."""
    return Activation(
        name="silu",
        value=lambda x: x * special.expit(x),
        derivative_fn=lambda x: special.expit(x) * (1.0 + x * special.expit(-x)),
        torch_fn=lambda x: _functional().silu(x),
        description="SiLU / swish: s sigmoid(s)",
    )


@builtin("softplus")
def softplus(beta: float = 1.0) -> Activation:
    """tau(s) = log(1 + exp(beta s)) / beta."""
    where = "get('softplus')"
    b = finite_param(beta, "beta", where)
    if b <= 0:
        raise invalid(where, "beta > 0", f"beta={b}", "pass a positive beta (1 is standard)")
    return Activation(
        name="softplus",
        value=lambda x: np.logaddexp(0.0, b * x) / b,
        derivative_fn=lambda x: special.expit(b * x),
        torch_fn=lambda x: _torch().logaddexp(_torch().zeros_like(x), b * x) / b,
        params={"beta": b},
        description="softplus: log(1 + exp(beta s)) / beta",
    )

