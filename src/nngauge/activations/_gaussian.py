"""Gaussian expectations of scalar functions by quadrature (numpy only).

Two rules, both vectorized over arrays of variances and correlations:

- ``"legendre"`` (default): composite Gauss-Legendre on [-L, L] (L = 10 standard deviations,
  truncation below 1e-20), split into ``segments`` equal pieces and, in addition, at every
  breakpoint of the integrand mapped to the standard-normal variable. Splitting at kinks and
  jumps keeps the rule spectrally accurate for ReLU-like and step-like functions, where plain
  Gauss-Hermite converges only algebraically. Accuracy near 1e-13 at the default size.
- ``"hermite"``: tensor Gauss-Hermite (probabilists'), ``degree`` nodes per dimension. Fast and
  accurate for smooth functions (what neural-tangents uses for generic nonlinearities), poor
  at kinks.

Bivariate expectations E[f(u) g(v)] with (u, v) centered Gaussian, Var u = q1, Var v = q2,
corr rho, use u = sqrt(q1) z1 and v = sqrt(q2) (rho z1 + sqrt(1 - rho^2) z2), z1, z2 iid N(0, 1):
an outer integral over z1 (split at f's breakpoints and at the z1 where g's breakpoints are
met when rho = +-1) and an inner one over z2 (split where g's argument crosses a breakpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Literal, Sequence

import numpy as np

from nngauge._constraints import CALLABLE, Array, Check, Instance, Integer, Real, constrained

ArrayFn = Callable[[np.ndarray], np.ndarray]

HALF_WIDTH = 10.0
"""Integration half-width in standard deviations: the N(0, 1) mass beyond is below 2e-23."""

_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)
_ENTRIES_PER_CHUNK_BUDGET = 2_000_000  # float64 values per chunk of a bivariate evaluation


@dataclass(frozen=True)
class Quadrature:
    """A quadrature rule for Gaussian expectations.

    Attributes:
        method: ``"legendre"`` (composite, split at breakpoints; robust, default) or
            ``"hermite"`` (tensor Gauss-Hermite; fast for smooth functions).
        degree: nodes per segment (legendre) or nodes per dimension (hermite).
        segments: number of equal pieces of [-L, L] before breakpoint splits (legendre only).
    """

    method: Literal["legendre", "hermite"] = "legendre"
    degree: int = 16
    segments: int = 16

    def refined(self) -> "Quadrature":
        """The same rule with twice the nodes (for adaptive refinement)."""
        return Quadrature(self.method, 2 * self.degree, self.segments)


DEFAULT_QUADRATURE = Quadrature()
FAST_QUADRATURE = Quadrature("legendre", degree=8, segments=8)

RULE = Instance((Quadrature,), "a Quadrature rule, e.g. nngauge.activations.DEFAULT_QUADRATURE",
                ("legendre", None, 16))
BREAKPOINTS = Check(lambda v: not isinstance(v, (str, bytes)) and all(Real().accepts(b) for b in v),
                    "a sequence of finite numbers (possibly empty)",
                    ("0", 0.0, (float("nan"),), ("a",), None))
"""Points where an integrand is not smooth (an Activation's ``breakpoints``)."""
SPLITS = Check(lambda v: not isinstance(v, (str, bytes)) and np.asarray(v, dtype=np.float64).ndim >= 1
               and not np.isnan(np.asarray(v, dtype=np.float64)).any(),
               "split points as a real array of shape (..., k), without NaN (k may be 0)",
               (0.5, "0", [float("nan")], [["a"]]))


@lru_cache(maxsize=None)
def _legendre_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


@lru_cache(maxsize=None)
def _hermite_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss-Hermite nodes with weights summing to 1 (an N(0, 1) rule)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, w / w.sum()


@constrained(splits=SPLITS, rule=RULE)
def standard_normal_rule(splits: np.ndarray, rule: Quadrature) -> tuple[np.ndarray, np.ndarray]:
    """Nodes z and weights w with sum(w * h(z)) ~ E[h(z)], z ~ N(0, 1).

    Args:
        splits: extra split points, shape (..., k) (values beyond +-L are clipped; NaN not
            allowed). Ignored by the hermite rule.
        rule: the quadrature rule.

    Returns:
        z, w of shape (..., P): P = (segments + k) * degree for legendre, degree for hermite.
    """
    return _rule(splits, rule)


def _rule(splits: np.ndarray, rule: Quadrature) -> tuple[np.ndarray, np.ndarray]:
    """:func:`standard_normal_rule` without the checks (the quadratures' inner loop)."""
    splits = np.asarray(splits, dtype=np.float64)
    batch = splits.shape[:-1]
    if rule.method == "hermite":
        x, w = _hermite_nodes(rule.degree)
        return np.broadcast_to(x, batch + x.shape), np.broadcast_to(w, batch + w.shape)
    grid = np.linspace(-HALF_WIDTH, HALF_WIDTH, rule.segments + 1)
    points = np.concatenate(
        [np.broadcast_to(grid, batch + grid.shape), np.clip(splits, -HALF_WIDTH, HALF_WIDTH)],
        axis=-1,
    )
    points = np.sort(points, axis=-1)
    lo, hi = points[..., :-1, None], points[..., 1:, None]
    x, wl = _legendre_nodes(rule.degree)
    half = 0.5 * (hi - lo)
    z = 0.5 * (hi + lo) + half * x
    w = half * wl * _INV_SQRT_2PI * np.exp(-0.5 * z * z)
    return z.reshape(batch + (-1,)), w.reshape(batch + (-1,))


def _scaled_splits(breakpoints: Sequence[float], scale: np.ndarray) -> np.ndarray:
    """Breakpoints b mapped to the standard-normal variable, b / scale; +L where scale = 0."""
    b = np.asarray(breakpoints, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(scale != 0.0, b / np.where(scale != 0.0, scale, 1.0), HALF_WIDTH)
    return out


@constrained(fn=CALLABLE, q=Array(0), breakpoints=BREAKPOINTS, rule=RULE)
def expectation(
    fn: ArrayFn,
    q: np.ndarray | float = 1.0,
    *,
    breakpoints: Sequence[float] = (),
    rule: Quadrature = DEFAULT_QUADRATURE,
) -> np.ndarray:
    """E[fn(sqrt(q) z)] for z ~ N(0, 1), elementwise over an array of variances q >= 0."""
    q = np.asarray(q, dtype=np.float64)
    scale = np.sqrt(q)
    z, w = _rule(_scaled_splits(breakpoints, scale), rule)
    return np.sum(w * fn(scale[..., None] * z), axis=-1)


@constrained(fn=CALLABLE, n=Integer(1), q=Real(0), breakpoints=BREAKPOINTS, rule=RULE)
def hermite_coefficients(
    fn: ArrayFn,
    n: int,
    *,
    q: float = 1.0,
    breakpoints: Sequence[float] = (),
    rule: Quadrature = DEFAULT_QUADRATURE,
) -> np.ndarray:
    """Normalized Hermite coefficients a_k = E[fn(sqrt(q) z) He_k(z)] / sqrt(k!), k < n.

    With h_k = He_k / sqrt(k!) orthonormal under N(0, 1), fn(sqrt(q) z) = sum_k a_k h_k(z) and
    E[fn(u) fn(v)] = sum_k a_k^2 rho^k for Var u = Var v = q (Mehler; Agarwal et al. 2021
    appendix C.4, shrinkage paper section 2).
    """
    scale = float(np.sqrt(q))
    z, w = _rule(_scaled_splits(breakpoints, np.asarray(scale)), rule)
    values = w * fn(scale * z)
    coeffs = np.empty(n)
    h_prev, h = np.zeros_like(z), np.ones_like(z)
    for k in range(n):
        coeffs[k] = np.sum(values * h)
        h_prev, h = h, (z * h - np.sqrt(k) * h_prev) / np.sqrt(k + 1.0)
    return coeffs


@constrained(f=CALLABLE, g=CALLABLE, rho=Array(-1, 1), q1=Array(0), q2=Array(0),
             f_breakpoints=BREAKPOINTS, g_breakpoints=BREAKPOINTS, rule=RULE)
def cross_expectation(
    f: ArrayFn,
    g: ArrayFn,
    rho: np.ndarray | float,
    q1: np.ndarray | float = 1.0,
    q2: np.ndarray | float = 1.0,
    *,
    f_breakpoints: Sequence[float] = (),
    g_breakpoints: Sequence[float] = (),
    rule: Quadrature = DEFAULT_QUADRATURE,
) -> np.ndarray:
    """E[f(u) g(v)], (u, v) centered Gaussian with variances q1, q2 and correlation rho.

    Broadcasts rho, q1, q2 against each other and returns an array of their common shape:
    |rho| <= 1 and q1, q2 >= 0, finite.
    """
    rho, q1, q2 = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (rho, q1, q2)))
    shape = rho.shape
    rho, q1, q2 = rho.ravel(), q1.ravel(), q2.ravel()
    out = np.empty(rho.size)
    n_nodes = _nodes_per_dim(rule, len(f_breakpoints) + 2 * len(g_breakpoints))
    chunk = max(1, _ENTRIES_PER_CHUNK_BUDGET // (n_nodes * n_nodes))
    for start in range(0, rho.size, chunk):
        sl = slice(start, start + chunk)
        out[sl] = _cross_moment_flat(
            f, g, rho[sl], q1[sl], q2[sl], tuple(f_breakpoints), tuple(g_breakpoints), rule
        )
    return out.reshape(shape)


def _nodes_per_dim(rule: Quadrature, n_splits: int) -> int:
    if rule.method == "hermite":
        return rule.degree
    return (rule.segments + n_splits) * rule.degree


def _cross_moment_flat(f, g, rho, q1, q2, f_breaks, g_breaks, rule) -> np.ndarray:
    s1, s2 = np.sqrt(q1), np.sqrt(q2)
    perp = np.sqrt(np.clip(1.0 - rho * rho, 0.0, None))
    outer_splits = np.concatenate(
        [_scaled_splits(f_breaks, s1), _scaled_splits(g_breaks, rho * s2)], axis=-1
    )
    z1, w1 = _rule(outer_splits, rule)  # (N, P1)
    b_g = np.asarray(g_breaks, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner_splits = np.where(
            perp[:, None, None] > 0.0,
            (_scaled_splits(g_breaks, s2)[:, None, :] - rho[:, None, None] * z1[..., None])
            / np.where(perp > 0.0, perp, 1.0)[:, None, None],
            HALF_WIDTH,
        ) if b_g.size else np.empty(z1.shape + (0,))
    z2, w2 = _rule(inner_splits, rule)  # (N, P1, P2)
    v = s2[:, None, None] * (rho[:, None, None] * z1[..., None] + perp[:, None, None] * z2)
    inner = np.sum(w2 * g(v), axis=-1)  # (N, P1)
    return np.sum(w1 * f(s1[:, None] * z1) * inner, axis=-1)
