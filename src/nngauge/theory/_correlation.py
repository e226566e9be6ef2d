"""Mean-field correlation maps of wide networks: P(rho), its slope, phase and fixed point.

For two inputs whose pre-activations have correlation rho, one layer of an infinitely wide
network maps rho to P(rho). All three architectures share one form,

    P(rho) = (s rho + sigma_b^2 + sigma_w^2 C_q(rho)) / (s + sigma_b^2 + sigma_w^2 C_q(1)),
    C_q(rho) = E[phi(u) phi(v)],  Var u = Var v = q,  corr(u, v) = rho,

with P'(rho) = (s + sigma_w^2 q E[phi'(u) phi'(v)]) / (s + sigma_b^2 + sigma_w^2 C_q(1))
(Price's theorem / Stein's lemma: d C_q / d rho = q E[phi'(u) phi'(v)]):

- ``"layernorm"``: s = 0, q = 1. The LayerNorm MLP of the shrinkage paper (Gradient explosion
  and representation shrinkage, eq. 2.1-2.3); its normalization has no centering and no affine
  parameters: z = sqrt(N) y / ||y||.
- ``"resnet"``: s = 1, q = 1. The paper's residual block (section 3, eq. A.10):
  y = z + V phi(normalize(U z)) / sqrt(m) (+ b), z_next = normalize(y); ``sigma_w`` is the
  residual-branch weight std sigma_(l) of V (U has unit variance), ``sigma_b`` the std of an
  optional bias added in the branch (0 in the paper).
- ``"mlp"``: s = 0, q = q*. The unnormalized MLP of Poole et al. (2016) and Schoenholz et al.
  (2017), h_next = W phi(h) / sqrt(N) + b, at the fixed point q* of the length map
  q -> sigma_w^2 E[phi(sqrt(q) z)^2] + sigma_b^2 (so the denominator equals q*, and the slope
  at one is chi_1 = sigma_w^2 E[phi'(sqrt(q*) z)^2]). A positively homogeneous activation
  (relu, leaky relu, identity) without bias is the exception: C_q = q C_1, so P is the same at
  every variance and needs no fixed point; q is then the input variance q0, the variance is
  multiplied by sigma_w^2 C_1(1) per layer (:attr:`CorrelationMap.variance_ratio`), P'(1) = 1,
  and chi_1 = sigma_w^2 E[phi'(z)^2] (which sets the growth of gradients, and is 1 only at the
  He initialization sigma_w^2 = 1 / C_1(1), e.g. 2 for relu) is the slope reported.

One map is one layer; a depth-L network with the same layer throughout is P^L
(:meth:`CorrelationMap.iterate`). The paper's first layer is linear (phi_1 = identity): build
that layer's map with ``correlation_map("identity", ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np
from scipy.optimize import brentq

from nngauge._constraints import Choice, Real, constrained
from nngauge._results import Result, reported_as
from nngauge.activations import DEFAULT_QUADRATURE, Activation, Quadrature
from nngauge.errors import ConvergenceError, InvalidInputError, invalid
from nngauge.theory._gaussian import Method, gaussian_covariance, resolve
from nngauge.theory._plots import DEFAULT_STARTS
from nngauge.theory._validate import (
    ACTIVATION,
    QUADRATURE,
    STD,
    check_correlation,
    check_positive_int,
)

Arch = Literal["layernorm", "resnet", "mlp"]
Phase = Literal["ordered", "critical", "chaotic"]

CRITICAL_TOL = 1e-8
"""|P'(1) - 1| <= CRITICAL_TOL is classified "critical": loose enough for sigmas solved by
:func:`~nngauge.theory.critical_init` (accurate to ~1e-12), tight enough that any visibly
off-critical setting is ordered or chaotic."""


class DivergentLengthMap(InvalidInputError):
    """The length map of an unnormalized MLP has no finite fixed point (variances explode)."""


_Q_MAX = 1e12  # a length map still growing past this variance is reported as divergent


@dataclass(frozen=True, eq=False)
class CorrelationMap(Result):
    """The one-layer correlation map P of a wide network (see the module docstring).

    Build it with :func:`correlation_map`. Callable on correlations (numpy in, numpy out).

    Attributes:
        activation: the activation phi.
        sigma_w: weight std (residual-branch weight std for ``arch="resnet"``).
        sigma_b: bias std.
        arch: ``"layernorm"``, ``"resnet"`` or ``"mlp"``.
        q: variance of the pre-activations phi is applied to (1, or q* for ``"mlp"``).
        method: how Gaussian covariances are computed (``"auto"``: closed form when the
            activation has one, quadrature otherwise).
        quadrature: the rule for the quadrature path.

    ``to_dict()`` gives the activation by its label, then the slope at one, the phase and the
    fixed point (None when q = 0).
    """

    _derived = ("slope_at_one", "phase",
                ("fixed_point", lambda cmap: cmap.fixed_point() if cmap.q > 0 else None))

    activation: Activation = reported_as(lambda activation: activation.label)
    sigma_w: float
    sigma_b: float
    arch: str
    q: float
    method: Method = "auto"
    quadrature: Quadrature = field(default=DEFAULT_QUADRATURE, repr=False)

    @property
    def _skip(self) -> float:
        return 1.0 if self.arch == "resnet" else 0.0

    @property
    def _denominator(self) -> float:
        """The next layer's variance; q itself at the fixed point of an ``"mlp"``."""
        return self._skip + self.sigma_b**2 + self.sigma_w**2 * float(self._covariance(1.0))

    @property
    def variance_ratio(self) -> float:
        """q_next / q: how the pre-activation variance changes per layer.

        1 for the normalized architectures and at an ``"mlp"``'s fixed point q*; sigma_w^2
        C_1(1) for a positively homogeneous activation without bias (e.g. sigma_w^2 / 2 for
        relu: below 1 the signal vanishes with depth, above 1 it explodes); 0 at q* = 0.
        """
        if self.arch != "mlp":
            return 1.0
        if self.q == 0.0:
            return 0.0
        return self._denominator / self.q

    def _covariance(self, rho) -> np.ndarray:
        return gaussian_covariance(self.activation, rho, q1=self.q, q2=self.q, method=self.method,
                                   quadrature=self.quadrature)

    def __call__(self, rho: Any) -> np.ndarray:
        """P(rho), elementwise on correlations in [-1, 1] (any shape; 0-d array for a scalar).

        Example:
            >>> from nngauge.theory import correlation_map
            >>> float(correlation_map("relu")(1.0))
            1.0
        """
        rho = check_correlation(rho, "CorrelationMap()")
        self._require_signal("CorrelationMap()")
        numerator = self._skip * rho + self.sigma_b**2 + self.sigma_w**2 * self._covariance(rho)
        return np.clip(numerator / self._denominator, -1.0, 1.0)

    def derivative(self, rho: Any) -> np.ndarray:
        """P'(rho) = (s + sigma_w^2 q E[phi'(u) phi'(v)]) / denominator, elementwise.

        Raises:
            InvalidInputError: for an activation with jumps (its derivative has delta
                functions, so P' is infinite at rho = 1 and Stein's lemma does not apply).
        """
        rho = check_correlation(rho, "CorrelationMap.derivative()")
        self._require_signal("CorrelationMap.derivative()")
        if _has_jumps(self.activation):
            raise invalid("CorrelationMap.derivative()", "a continuous activation",
                          f"{self.activation.label}, which jumps at {self.activation.breakpoints}",
                          "use a continuous activation; P'(1) is infinite for this one")
        derivative = gaussian_covariance(self.activation.derivative_activation(), rho, q1=self.q,
                                         q2=self.q, method=self.method, quadrature=self.quadrature)
        return (self._skip + self.sigma_w**2 * self.q * derivative) / self._denominator

    @property
    def slope_at_one(self) -> float:
        """P'(1): the growth factor of 1 - rho near rho = 1 (inf for activations with jumps).

        For ``"mlp"`` this is chi_1 of Schoenholz et al. (2017), which equals P'(1) at the
        fixed point q*; for ``"layernorm"`` the shrinkage paper's P'(1) (section 2.2). At
        q* = 0 (``"mlp"``) it is the limit sigma_w^2 phi'(0)^2. For a positively homogeneous
        activation without bias (``"mlp"``) P'(1) = 1 at every sigma_w, and chi_1 (the factor
        by which squared gradient norms grow per layer) is the slope reported.
        """
        if _has_jumps(self.activation):
            return float("inf")
        if self.arch == "mlp":  # chi_1 = sigma_w^2 E[phi'(sqrt(q*) z)^2], defined at q* = 0 too
            d_act = self.activation.derivative_activation()
            return self.sigma_w**2 * float(gaussian_covariance(
                d_act, 1.0, q1=self.q, q2=self.q, method=self.method, quadrature=self.quadrature))
        return float(self.derivative(1.0))

    @property
    def phase(self) -> Phase:
        """``"ordered"`` (P'(1) < 1), ``"critical"`` (|P'(1) - 1| <= CRITICAL_TOL = 1e-8) or
        ``"chaotic"`` (P'(1) > 1), as in the shrinkage paper, section 2.2."""
        slope = self.slope_at_one
        if abs(slope - 1.0) <= CRITICAL_TOL:
            return "critical"
        return "ordered" if slope < 1.0 else "chaotic"

    def fixed_point(self) -> float:
        """The stable fixed point rho* = lim P^n(rho0) for every rho0 in [0, 1).

        P is a power series in rho with non-negative coefficients (shrinkage paper,
        observation 1), so P^n(0) increases to the smallest fixed point in [0, 1]. Returns 1.0
        when rho = 1 is the attractor (ordered and critical phases), the fixed point
        rho_fp < 1 in the chaotic phase, and 0.0 when P is the identity (linear networks).

        Example:
            >>> from nngauge.theory import correlation_map
            >>> correlation_map("relu", 1.0, 0.5).fixed_point()
            1.0
        """
        self._require_signal("CorrelationMap.fixed_point()")
        gap = lambda rho: float(self(rho)) - rho  # noqa: E731  (>= 0 at 0, convex)
        if gap(0.0) <= 0.0:
            return 0.0
        if self.slope_at_one <= 1.0:
            return 1.0
        below = next((1.0 - 2.0**-k for k in range(1, 48) if gap(1.0 - 2.0**-k) < 0.0), None)
        if below is None:  # chaotic only within float precision of 1
            return 1.0
        return float(brentq(gap, 0.0, below, xtol=1e-14, rtol=4 * np.finfo(float).eps))

    def iterate(self, rho0: Any, depth: int) -> np.ndarray:
        """rho_0, P(rho_0), ..., P^depth(rho_0): correlations after 0..depth layers.

        Args:
            rho0: starting correlation(s) in [-1, 1], any shape.
            depth: number of layers, >= 0.

        Returns:
            Array of shape (depth + 1, *rho0.shape), rho0 first.

        Example:
            >>> from nngauge.theory import correlation_map
            >>> correlation_map("relu").iterate(0.0, 2).round(4)
            array([0.    , 0.3183, 0.4937])
        """
        rho = check_correlation(rho0, "CorrelationMap.iterate()")
        depth = check_positive_int(depth, "depth", "CorrelationMap.iterate()", minimum=0)
        trace = [rho]
        for _ in range(depth):
            trace.append(self(trace[-1]))
        return np.stack(trace)

    def plot(self, ax=None, *, depth: int = 50, starts: Sequence[float] = DEFAULT_STARTS):
        """1 - rho_l (log scale) over the layers l = 0..depth, the map iterated from each
        starting correlation of ``starts``; returns the Axes. Needs matplotlib.

        Raises:
            InvalidInputError: the map has q = 0 (no signal to correlate; see :meth:`iterate`).
        """
        from nngauge._plots import new_axes

        rhos = self.iterate(np.asarray(starts, dtype=np.float64), depth)
        ax = new_axes(ax)
        layers = np.arange(depth + 1)
        for k, rho0 in enumerate(starts):
            ax.plot(layers, np.clip(1.0 - rhos[:, k], 1e-16, None), label=f"rho_0 = {rho0:g}")
        ax.set_yscale("log")
        ax.set_xlabel("layer l")
        ax.set_ylabel("1 - rho_l")
        ax.set_title(f"correlation map: phase {self.phase}")
        ax.legend(fontsize=8)
        ax.figure.tight_layout()
        return ax

    def _require_signal(self, where: str) -> None:
        if self.q == 0.0:
            raise invalid(where, "a length map with a positive fixed point q*",
                          f"q* = 0 for {self.activation.label} at sigma_w={self.sigma_w}, "
                          f"sigma_b={self.sigma_b} (pre-activations vanish with depth, so their "
                          "correlation is undefined)",
                          "use sigma_b > 0 (nngauge.theory.critical_init(act, sigma_b=..., "
                          f"arch={self.arch!r}) gives the critical sigma_w for it), or a larger "
                          "sigma_w (for an odd "
                          "activation such as tanh at sigma_b = 0, the chaotic phase)")


@constrained(act=ACTIVATION, sigma_w=STD, sigma_b=STD, arch=Choice.literal(Arch),
             q0=Real(0, low_open=True), method=Choice.literal(Method), quadrature=QUADRATURE)
def correlation_map(
    act: Activation | str,
    sigma_w: float = 1.0,
    sigma_b: float = 0.0,
    *,
    arch: Arch = "layernorm",
    q0: float = 1.0,
    method: Method = "auto",
    quadrature: Quadrature = DEFAULT_QUADRATURE,
) -> CorrelationMap:
    """The mean-field correlation map P of one layer of a wide network.

    P(rho) = (s rho + sigma_b^2 + sigma_w^2 C_q(rho)) / (s + sigma_b^2 + sigma_w^2 C_q(1)),
    C_q(rho) = E[phi(u) phi(v)] for Var u = Var v = q, corr(u, v) = rho; see the module
    docstring for s and q per architecture. ``"layernorm"`` is eq. 2.3 and ``"resnet"`` eq. A.10
    of the shrinkage paper; ``"mlp"`` is Poole et al. (2016) / Schoenholz et al. (2017) at the
    fixed point q* of the length map.

    Args:
        act: the activation phi (an :class:`Activation` or a registry name).
        sigma_w: weight std (entries of W have variance sigma_w^2 / fan_in); for ``"resnet"``
            the residual-branch std sigma_(l) of V.
        sigma_b: bias std.
        arch: ``"layernorm"`` (default, the shrinkage paper's network), ``"resnet"`` or
            ``"mlp"``.
        q0: ``"mlp"`` only: the input variance the length map starts from (it selects the
            fixed point q* when there are several, e.g. every q for relu at sigma_w^2 = 2).
        method: ``"auto"`` (closed forms when available), ``"closed"`` or ``"quadrature"``.
        quadrature: the quadrature rule for activations without closed forms.

    Returns:
        A :class:`CorrelationMap`.

    Raises:
        InvalidInputError: negative or non-finite sigmas, an unknown ``arch``, a zero
            denominator (e.g. sigma_w = sigma_b = 0), or (``"mlp"``) a length map that
            diverges.

    Example:
        >>> from nngauge.theory import correlation_map
        >>> p = correlation_map("relu", 1.0, 0.0)
        >>> p.phase, round(p.slope_at_one, 12)
        ('critical', 1.0)
    """
    act = resolve(act)
    sigma_w, sigma_b = float(sigma_w), float(sigma_b)
    q = 1.0
    if arch == "mlp" and sigma_b == 0.0 and _positively_homogeneous(act):
        q = float(q0)  # C_q = q C_1: P is the same at every variance (module docstring)
    elif arch == "mlp":
        q = length_fixed_point(act, sigma_w, sigma_b, q0=float(q0), method=method,
                               quadrature=quadrature)
    cmap = CorrelationMap(act, sigma_w, sigma_b, arch, q, method, quadrature)
    if arch != "mlp" and cmap._denominator <= 0.0:
        raise invalid("correlation_map()", "a layer whose outputs have positive variance",
                      f"zero variance for {act.label} at sigma_w={sigma_w}, sigma_b={sigma_b}",
                      "use sigma_w > 0 or sigma_b > 0 with an activation that is not 0 a.e.")
    return cmap


@constrained(act=ACTIVATION, sigma_w=STD, sigma_b=STD, q0=Real(0),
             method=Choice.literal(Method), quadrature=QUADRATURE)
def length_fixed_point(
    act: Activation | str,
    sigma_w: float,
    sigma_b: float,
    *,
    q0: float = 1.0,
    method: Method = "auto",
    quadrature: Quadrature = DEFAULT_QUADRATURE,
) -> float:
    """The fixed point q* of the length map q -> sigma_w^2 E[phi(sqrt(q) z)^2] + sigma_b^2.

    The one the iteration from ``q0`` converges to (Poole et al. 2016, eq. 3): the first root
    of F(q) = V(q) - q above q0 when F(q0) > 0, below q0 when F(q0) < 0. Returns 0.0 when
    the variances vanish with depth (e.g. tanh, sigma_w <= 1, sigma_b = 0).

    Raises:
        DivergentLengthMap: (an InvalidInputError) the length map diverges (F > 0 up to
            q = 1e12, e.g. relu with sigma_w^2 > 2 and sigma_b > 0).

    Example:
        >>> from nngauge.theory._correlation import length_fixed_point
        >>> round(length_fixed_point("relu", 1.0, 1.0), 12)  # q = q/2 + 1
        2.0
    """
    act = resolve(act)
    gap = lambda q: sigma_w**2 * float(gaussian_covariance(  # noqa: E731
        act, 1.0, q1=q, q2=q, method=method, quadrature=quadrature)) + sigma_b**2 - q
    tol = 1e-12 * max(1.0, q0)
    start = gap(q0)
    if abs(start) <= tol:
        return q0
    if start > 0.0:
        lo, hi = q0, 2.0 * q0 if q0 > 0 else 1.0
        while gap(hi) > 0.0:
            lo, hi = hi, 2.0 * hi
            if hi > _Q_MAX:
                raise DivergentLengthMap(
                    f"correlation_map(arch='mlp') expected a length map with a finite fixed point; "
                    f"got q growing past {_Q_MAX:g} for {act.label} at sigma_w={sigma_w}, "
                    f"sigma_b={sigma_b}. Fix: lower sigma_w (towards the ordered side).")
    else:
        hi, lo = q0, q0 / 2.0
        while gap(lo) < 0.0:
            hi, lo = lo, lo / 2.0
            if lo < 1e-12 * q0:
                return 0.0
    try:
        return float(brentq(gap, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps))
    except ValueError as exc:  # pragma: no cover - the bracket has a sign change by construction
        raise ConvergenceError(f"length map root not bracketed on [{lo}, {hi}]") from exc


_HOMOGENEITY_PROBES = np.array([-2.1, -0.7, -0.3, 0.4, 1.3])


def _positively_homogeneous(act: Activation) -> bool:
    """phi(a x) = a phi(x) for a > 0: piecewise linear with its only kink at 0 and phi(0) = 0
    (relu, leaky relu, identity, abs), checked on probe points."""
    if not act.piecewise_linear or any(b != 0.0 for b in act.breakpoints):
        return False
    x = _HOMOGENEITY_PROBES
    return bool(np.allclose(act(3.0 * x), 3.0 * act(x), rtol=1e-12, atol=1e-12))


def _has_jumps(act: Activation) -> bool:
    """True when phi is discontinuous at one of its breakpoints."""
    for b in act.breakpoints:
        h = 1e-9 * max(1.0, abs(b))
        if abs(float(act(b + h)) - float(act(b - h))) > 1e-6:
            return True
    return False
