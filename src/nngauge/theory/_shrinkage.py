"""The gradient-explosion / representation-shrinkage trade-off (shrinkage paper, Theorems 1, 2).

For a wide LayerNorm MLP of L layers with activations phi_l (Theorem 1),

    ||d z^(L) / d z^(0)||_op^2
        >= (1 - rho_max)^2 / 8 * sum_l ||phi_l - bar phi_l||^2 / ||phi_l'||^2,

and for the paper's ResNet with residual-branch std sigma_(l) (Theorem 2, as proved in A.2),

    ||d z^(L) / d z^(0)||_op^2 >= (1 - rho_max)^2 / 8 * sum_l sigma_l^2 ||phi_l - bar phi_l||^2
                                                        / (1 + sigma_l^2 ||phi_l'||^2).

||f||^2 = E f(z)^2 (z ~ N(0, 1)) and bar phi = a_0 + a_1 x is the Hermite linearization
(:func:`~nngauge.theory.linearization_error`). Closed forms are used where the activation and
its derivative carry them; a layer whose activation jumps contributes 0 (||phi'|| = inf).
The printed statement of Theorem 2 has ||phi_l||^2 in the denominator; the proof (the last
step of appendix A.2, A <= (1 - rho) ||phi'||^2) gives ||phi_l'||^2, which is what is used here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from nngauge._constraints import Array, Check, Choice, Integer, Maybe, Real, constrained
from nngauge._results import Result, layer_index
from nngauge._vocabulary import renamed
from nngauge.activations import Activation
from nngauge.errors import invalid
from nngauge.theory._correlation import _has_jumps
from nngauge.theory._gaussian import gaussian_covariance, resolve
from nngauge.theory._nonlinearity import linearization_error
from nngauge.theory._validate import ACTIVATION

ShrinkageArch = Literal["layernorm", "resnet"]

ACTIVATIONS = Check(lambda v: ACTIVATION.accepts(v) or (
    isinstance(v, (list, tuple)) and bool(v) and all(ACTIVATION.accepts(a) for a in v)),
    "an activation (name, spec or Activation) or a non-empty list of them, one per layer",
    (3, None, [], ["erf", 3]))
"""One activation for every layer, or one per layer."""


@dataclass(frozen=True)
class ShrinkageBound(Result):
    """One point on the trade-off curve ||J||_op^2 = (1 - rho_max)^2 / 8 * total.

    Attributes:
        arch: ``"layernorm"`` (Theorem 1) or ``"resnet"`` (Theorem 2).
        terms: the per-layer terms of the sum, length L (0 for linear layers and for
            activations with jumps, whose ||phi'|| is infinite).
        rho_max: the maximal correlation: given, or (when a Jacobian budget was given) the
            smallest value the theorem allows (below -1 means the budget does not constrain).
        jacobian_norm_sq: ||J||_op^2: given as a budget, or (when rho_max was given) the
            theorem's lower bound.
        solved_for: ``"jacobian_norm_sq"`` or ``"rho_max"``: which of the two was computed.

    ``to_dict()`` adds ``total``, ``depth`` and ``one_minus_rho_max``; ``to_frame()`` and
    ``plot()`` give the terms per layer.
    """

    _curve = (layer_index("terms"), "terms")
    _derived = ("total", "depth", "one_minus_rho_max")

    arch: str
    terms: tuple[float, ...]
    rho_max: float
    jacobian_norm_sq: float
    solved_for: Literal["jacobian_norm_sq", "rho_max"]

    @property
    def total(self) -> float:
        """The sum over layers in the theorem."""
        return float(sum(self.terms))

    @property
    def depth(self) -> int:
        """L, the number of layers."""
        return len(self.terms)

    @property
    def one_minus_rho_max(self) -> float:
        """1 - rho_max (the shrinkage margin; an upper bound when solved for)."""
        return 1.0 - self.rho_max


@renamed(activations="act")
@constrained(act=ACTIVATIONS, depth=Maybe(Integer(1)), rho_max=Maybe(Real(-1, 1)),
             jacobian_norm_sq=Maybe(Real(0, low_open=True)),
             arch=Choice.literal(ShrinkageArch), residual_std=Array(0))
def shrinkage_bound(
    act: Activation | str | Sequence[Activation | str],
    depth: int | None = None,
    *,
    rho_max: float | None = None,
    jacobian_norm_sq: float | None = None,
    arch: ShrinkageArch = "layernorm",
    residual_std: float | Sequence[float] = 1.0,
) -> ShrinkageBound:
    """Theorems 1 and 2 of the shrinkage paper: Jacobian norm vs maximal correlation.

    Give exactly one of ``rho_max`` (get the lower bound on ||d z^(L)/d z^(0)||_op^2) or
    ``jacobian_norm_sq`` (a budget for ||J||_op^2; get the largest 1 - rho_max it allows,
    1 - rho_max <= sqrt(8 budget / total)). At critical initialization ||J||_op^2 = 1 (the
    product of the slopes P_l'(1)), which gives eq. 4.1 (leaky ReLU) and eq. 4.2 (erf).

    Args:
        act: one activation (repeated ``depth`` times) or one per layer.
        depth: L, required with a single activation; must match a sequence when given.
        rho_max: the maximal correlation max_l min_{x, x'} z^(l)(x).z^(l)(x') / N_l, in
            [-1, 1].
        jacobian_norm_sq: a budget for the squared (RMS-normalized) operator norm, > 0.
        arch: ``"layernorm"`` (default, Theorem 1) or ``"resnet"`` (Theorem 2).
        residual_std: ``"resnet"`` only: sigma_(l), the residual-branch weight std, one value
            or one per layer.

    Returns:
        A :class:`ShrinkageBound`.

    Raises:
        InvalidInputError: neither or both of rho_max / jacobian_norm_sq, a depth mismatch,
            rho_max outside [-1, 1], a non-positive budget, an unknown ``arch``, or a bound
            that is vacuous because every layer is linear (total = 0) when solving for
            rho_max.

    Example:
        >>> from nngauge.theory import shrinkage_bound
        >>> b = shrinkage_bound("erf", 100, jacobian_norm_sq=1.0)  # eq. 4.2 at L = 100
        >>> round(b.one_minus_rho_max, 4)
        1.0652
    """
    where = "shrinkage_bound()"
    if (rho_max is None) == (jacobian_norm_sq is None):
        raise invalid(where, "exactly one of rho_max, jacobian_norm_sq",
                      f"rho_max={rho_max!r}, jacobian_norm_sq={jacobian_norm_sq!r}",
                      "give rho_max to bound the Jacobian, or a Jacobian budget to bound rho_max")
    acts = _layer_activations(act, depth, where)
    stds = np.asarray(residual_std, dtype=np.float64)
    if stds.ndim > 1 or stds.size not in (1, len(acts)):
        raise invalid(where, f"residual_std as one value or {len(acts)} (one per layer)",
                      f"residual_std={residual_std!r}",
                      "pass one standard deviation, or one per layer")
    stds = np.broadcast_to(stds.ravel(), (len(acts),))
    terms = tuple(_layer_term(a, float(s), arch) for a, s in zip(acts, stds))
    total = float(sum(terms))
    if rho_max is not None:
        rho = float(rho_max)
        return ShrinkageBound(arch, terms, rho, (1.0 - rho) ** 2 / 8.0 * total, "jacobian_norm_sq")
    budget = float(jacobian_norm_sq)
    if total == 0.0:
        raise invalid(where, "at least one nonlinear layer (a positive sum)", "total = 0",
                      "every layer is linear: rho_max is not constrained by the Jacobian")
    rho_bound = float(1.0 - np.sqrt(8.0 * budget / total))
    return ShrinkageBound(arch, terms, rho_bound, budget, "rho_max")


def _layer_term(act: Activation, residual_std: float, arch: str) -> float:
    """One summand: ||phi - bar phi||^2 / ||phi'||^2, or Theorem 2's residual version."""
    if _has_jumps(act):  # ||phi'|| is infinite: the layer adds nothing to the bound
        return 0.0
    error = float(linearization_error(act))
    if error == 0.0:
        return 0.0
    slope_sq = float(gaussian_covariance(act.derivative_activation(), 1.0))
    if arch == "layernorm":
        return error / slope_sq
    return residual_std**2 * error / (1.0 + residual_std**2 * slope_sq)


def _layer_activations(activations, depth, where: str) -> list[Activation]:
    if isinstance(activations, (str, Activation)):
        if depth is None:
            raise invalid(where, "depth with a single activation", "depth=None",
                          "pass depth=L, or one activation per layer")
        return [resolve(activations)] * depth
    acts = [resolve(a) for a in activations]
    if depth is not None and depth != len(acts):
        raise invalid(where, "one activation per layer (depth matching their number)",
                      f"{len(acts)} activations, depth={depth!r}",
                      "leave depth out, or pass one activation per layer")
    return acts


@dataclass(frozen=True)
class ExcessConvexityBound(Result):
    """The piecewise-linear upper bound on P_L o ... o P_1 on [0, 1] (shrinkage paper, remark 2).

    With rho~_l = P_l o ... o P_1(0) (rho~_0 = 0) and the lower bound on the excess convexity of
    the cropped composition (A.5 with A.6, or A.12 for the ResNet),

        C = (1 - rho~_max) / 2 * sum_l terms_l,   rho~_max = max_{1<=l<=L} rho~_l,

    property 1 of appendix A.3 bounds the composition for rho in [0, 1] by

        P_L o ... o P_1(rho) <= rho~_L + (1 - rho~_L) g_C(rho),
        g_C(t) = t / (1 + C)  for t <= 1 - 1 / (2 + C),   (1 + C) t - C  otherwise.

    Attributes:
        rho_tilde: rho~_0, ..., rho~_L (length L + 1).
        terms: the per-layer terms ||phi_l - bar phi_l||^2 / ||phi_l'||^2 (Theorem 1) or their
            ResNet version (Theorem 2), length L.
        excess: C, the lower bound on e(P~_L o ... o P~_1).

    ``to_dict()`` adds ``depth`` and ``kink``; ``to_frame()`` and ``plot()`` give rho~_l
    against the layer l = 0..L.
    """

    _curve = (layer_index("rho_tilde", start=0), "rho_tilde")
    _derived = ("depth", "kink")

    rho_tilde: tuple[float, ...]
    terms: tuple[float, ...]
    excess: float

    @property
    def depth(self) -> int:
        """L, the number of layers."""
        return len(self.terms)

    @property
    def kink(self) -> float:
        """The input correlation 1 - 1 / (2 + C) where the bound turns from flat to steep."""
        return 1.0 - 1.0 / (2.0 + self.excess)

    def __call__(self, rho: Any) -> np.ndarray:
        """The upper bound at input correlations ``rho`` in [0, 1] (any shape).

        Raises:
            InvalidInputError: a correlation outside [0, 1] (the bound says nothing there).
        """
        t = np.asarray(rho, dtype=np.float64)
        if not np.all(np.isfinite(t)) or np.any(t < 0.0) or np.any(t > 1.0):
            raise invalid("ExcessConvexityBound()", "input correlations in [0, 1]",
                          f"values in [{np.nanmin(t)}, {np.nanmax(t)}]",
                          "the bound holds on [0, 1] only; clip or drop negative correlations")
        c = self.excess
        cropped = np.where(t <= self.kink, t / (1.0 + c), (1.0 + c) * t - c)
        end = self.rho_tilde[-1]
        return end + (1.0 - end) * cropped


_CALLABLE = Check(callable, "a callable g on [0, 1]", (None, 0.5, "t ** 2"))


def _is_map_or_maps(value: Any) -> bool:
    from nngauge.theory._correlation import CorrelationMap

    maps = [value] if isinstance(value, CorrelationMap) else list(value)
    return bool(maps) and all(isinstance(m, CorrelationMap) for m in maps)


_MAPS = Check(_is_map_or_maps, "a CorrelationMap or a non-empty sequence of them",
              (None, [], "relu", [0.5]))


@constrained(g=_CALLABLE)
def excess_convexity(g: Any) -> float:
    """The excess convexity e(g) = 1 / t - 2, where g(1 - t) = t (shrinkage paper, A.3).

    g: [0, 1] -> [0, 1] non-decreasing and convex with g(0) = 0, g(1) = 1; t is found with
    scipy's brentq on g(1 - t) - t (positive at t = 0, negative at t = 1). e(g) >= 0, with 0
    only for the identity (property 2), and g'(1) >= 1 + e(g) (property 4).

    Args:
        g: a callable on floats in [0, 1].

    Returns:
        e(g), a float.

    Raises:
        InvalidInputError: g(0) != 0 or g(1) != 1 (to 1e-9).

    Example:
        >>> round(excess_convexity(lambda t: t ** 2), 6)  # t = (3 - sqrt 5) / 2
        0.618034
    """
    from scipy.optimize import brentq

    g0, g1 = float(g(0.0)), float(g(1.0))
    if abs(g0) > 1e-9 or abs(g1 - 1.0) > 1e-9:
        raise invalid("excess_convexity()", "g(0) = 0 and g(1) = 1", f"g(0)={g0}, g(1)={g1}",
                      "crop and recentre the function to [0, 1]^2 first")
    t = brentq(lambda s: float(g(1.0 - s)) - s, 0.0, 1.0, xtol=1e-15)
    return 1.0 / t - 2.0


@constrained(maps=_MAPS, depth=Maybe(Integer(1)))
def excess_convexity_bound(maps: Any, depth: int | None = None) -> ExcessConvexityBound:
    """Remark 2 of the shrinkage paper: a piecewise-linear upper bound on P_L o ... o P_1.

    The bound drawn in blue on the paper's figure 1: see :class:`ExcessConvexityBound` for the
    formula. The composition is cropped to [0, 1]^2 (A.2); the excess convexity of the cropped
    composition is at least the sum of its layers' (property 5, superadditivity), each at least
    (1 - rho~_{l-1}) ||phi_l - bar phi_l||^2 / (2 ||phi_l'||^2) (property 7; the ResNet layer
    of eq. A.10 gets sigma_l^2 (1 - rho~_{l-1}) ||phi_l - bar phi_l||^2 / (2 (1 + sigma_l^2
    ||phi_l'||^2)), appendix A.2); rho~_{l-1} is replaced by rho~_max as in remark 2; then
    property 1 turns e >= C into the two line segments through (1 - 1/(2+C), 1/(2+C)).

    Args:
        maps: one :class:`~nngauge.theory.CorrelationMap` (``arch`` ``"layernorm"`` or
            ``"resnet"`` without bias), repeated ``depth`` times, or a sequence of them, one
            per layer (e.g. the paper's linear first layer, ``correlation_map("identity", ...)``,
            then the nonlinear ones).
        depth: L, required with a single map; must match a sequence when given.

    Returns:
        An :class:`ExcessConvexityBound`, callable on input correlations in [0, 1].

    Raises:
        InvalidInputError: no maps, a depth mismatch, an ``"mlp"`` map or a ResNet map with a
            bias (the proof covers neither).

    Example:
        >>> from nngauge.theory import correlation_map, critical_init, excess_convexity_bound
        >>> p = correlation_map("erf", *critical_init("erf"))
        >>> b = excess_convexity_bound(p, 20)
        >>> bool(b(0.5) >= p.iterate(0.5, 20)[-1])
        True
    """
    from nngauge.theory._correlation import CorrelationMap

    where = "excess_convexity_bound()"
    if isinstance(maps, CorrelationMap):
        if depth is None:
            raise invalid(where, "depth with a single map", "depth=None",
                          "pass depth=L, or one map per layer")
        layer_maps = [maps] * int(depth)
    else:
        layer_maps = list(maps)
        if depth is not None and depth != len(layer_maps):
            raise invalid(where, "one map per layer (depth matching their number)",
                          f"{len(layer_maps)} maps, depth={depth!r}",
                          "leave depth out, or pass one map per layer")
    if not layer_maps or not all(isinstance(m, CorrelationMap) for m in layer_maps):
        raise invalid(where, "a CorrelationMap or a non-empty sequence of them",
                      f"{maps!r}", "build them with nngauge.theory.correlation_map")
    for m in layer_maps:
        if m.arch == "mlp" or (m.arch == "resnet" and m.sigma_b != 0.0):
            raise invalid(where, "layernorm maps, or resnet maps without bias (eq. 2.3, A.10)",
                          f"arch={m.arch!r}, sigma_b={m.sigma_b}",
                          "the paper's proof covers only these architectures")
    rho = [0.0]
    for m in layer_maps:
        rho.append(float(m(rho[-1])))
    terms = tuple(_layer_term(m.activation, m.sigma_w, m.arch) for m in layer_maps)
    excess = (1.0 - max(rho[1:])) / 2.0 * float(sum(terms))
    return ExcessConvexityBound(tuple(rho), terms, excess)
