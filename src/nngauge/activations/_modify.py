"""Modified activations: c tau(d s + t) + b, debiasing and unit scaling.

The NLC paper (Philipp & Carbonell, arXiv:1806.00179, appendix C) samples activations as
c tau(d s + t) + b: dilation d, lateral shift t, then b so that tau is unbiased under a unit
Gaussian ("debiasing", optional) and c so that its quadratic mean Q_s tau(s) = sqrt(E[tau(s)^2])
is 1 (always, after debiasing). Deep-conditioning (Agarwal, Awasthi & Kale, ALT 2021, eq. (2))
calls an activation *normalized* when E[tau(z)] = 0 and E[tau(z)^2] = 1 for z ~ N(0, 1).

Closed forms carry through when the shift t is 0: with tau~(s) = c tau(d s) + b and u, v of
variances q1, q2 and correlation rho, d u and d v have variances d^2 q1, d^2 q2 and the same
correlation rho (also for d < 0), so

    E[tau~(sqrt(q) z)] = c m(d^2 q) + b,
    E[tau~(u) tau~(v)] = c^2 C(rho, d^2 q1, d^2 q2) + c b (m(d^2 q1) + m(d^2 q2)) + b^2,

with m and C the closed forms of tau. With t != 0 they are None and quadrature is used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Optional

import numpy as np

from nngauge._constraints import Check, Instance, Real, constrained
from nngauge.activations._base import Activation
from nngauge.activations._gaussian import expectation
from nngauge.activations._registry import get
from nngauge.errors import invalid

Wrapper = Literal["modify", "debias", "unit_scale", "normalize"]
_DEFAULTS = {"scale": 1.0, "dilation": 1.0, "shift": 0.0, "offset": 0.0}

ACTIVATION = Instance((Activation, str), "an Activation or a registry name (e.g. 'tanh')",
                      (3, None, ("tanh",)))
"""An activation argument: an :class:`Activation`, or a name :func:`get` builds."""
NONZERO = Check(lambda v: Real().accepts(v) and v != 0, "a finite nonzero number "
                "(0 would make the activation constant)",
                (0, 0.0, float("nan"), float("inf"), "2", True))


@dataclass(frozen=True, eq=False)
class ModifiedActivation(Activation):
    """An activation built from ``base`` by :func:`modify` (or debias / unit_scale / normalize).

    ``params`` holds the effective ``scale``, ``dilation``, ``shift`` and ``offset``; ``label``
    is the text spec that rebuilds it, e.g. ``normalize(modify(tanh, dilation=1.2))``.
    """

    base: Optional[Activation] = None
    wrapper: Wrapper = "modify"

    @property
    def label(self) -> str:
        if self.wrapper != "modify":
            return f"{self.wrapper}({self.base.label})"
        args = "".join(f", {k}={v:.6g}" for k, v in self.params.items() if v != _DEFAULTS[k])
        return f"modify({self.base.label}{args})"


@constrained(act=ACTIVATION, scale=NONZERO, dilation=NONZERO, shift=Real(), offset=Real())
def modify(
    act: Activation | str,
    *,
    scale: float = 1.0,
    dilation: float = 1.0,
    shift: float = 0.0,
    offset: float = 0.0,
) -> Activation:
    """scale * act(dilation * s + shift) + offset, as a new activation (``act`` is unchanged).

    Definition (NLC paper, appendix C): tau~(s) = c tau(d s + t) + b with c = scale,
    d = dilation, t = shift, b = offset. Breakpoints map to (p - t) / d; closed-form mean and
    covariance carry through when t = 0 (see the module docstring); the derivative is
    c d tau'(d s + t), itself a modified activation, so its closed forms carry through too.

    Args:
        act: an activation or a registry name.
        scale: c, finite and nonzero.
        dilation: d, finite and nonzero.
        shift: t, finite.
        offset: b, finite.

    Raises:
        InvalidInputError: a parameter is not finite, or scale / dilation is 0.
        UnknownNameError: ``act`` is a name no activation is registered under.

    Example:
        >>> import numpy as np
        >>> from nngauge.activations import get, modify
        >>> act = modify(get("relu"), scale=2.0, shift=-1.0)
        >>> act.label, act(np.array([0.5, 3.0]))
        ('modify(relu, scale=2, shift=-1)', array([0., 4.]))
    """
    base = _as_activation(act)
    c, d, t, b = float(scale), float(dilation), float(shift), float(offset)

    def value(x):
        return c * base.value(d * x + t) + b

    def derivative(x):
        return c * d * base.derivative_fn(d * x + t)

    def torch_fn(x):
        return c * base.torch_fn(d * x + t) + b

    return ModifiedActivation(
        name="modify",
        value=value,
        derivative_fn=derivative,
        torch_fn=torch_fn,
        params={"scale": c, "dilation": d, "shift": t, "offset": b},
        breakpoints=tuple(sorted((p - t) / d for p in base.breakpoints)),
        piecewise_linear=base.piecewise_linear,
        mean_fn=_mean_fn(base, c, d, t, b),
        covariance_fn=_covariance_fn(base, c, d, t, b),
        derivative_factory=lambda: modify(base.derivative_activation(), scale=c * d,
                                          dilation=d, shift=t),
        description=f"{c:.6g} * {base.label}({d:.6g} s + {t:.6g}) + {b:.6g}",
        base=base,
    )


@constrained(act=ACTIVATION)
def debias(act: Activation | str) -> Activation:
    """act - E[act(z)], z ~ N(0, 1): zero mean under a unit Gaussian (NLC appendix C).

    Example:
        >>> from nngauge.activations import debias, get
        >>> from nngauge.theory import gaussian_mean
        >>> round(float(gaussian_mean(debias(get("relu")))), 12)
        0.0
    """
    base = _as_activation(act)
    return replace(modify(base, offset=-unit_mean(base)), wrapper="debias")


@constrained(act=ACTIVATION)
def unit_scale(act: Activation | str) -> Activation:
    """act / sqrt(E[act(z)^2]), z ~ N(0, 1): quadratic mean 1 (NLC appendix C).

    The NLC paper debiases first and then scales; ``unit_scale(debias(act))`` is that (and
    equals :func:`normalize`). ``unit_scale`` alone keeps the mean.

    Raises:
        InvalidInputError: act(z) = 0 almost surely (nothing to scale).
    """
    where = "unit_scale()"
    base = _as_activation(act)
    second = unit_second_moment(base)
    if not second > 0.0:
        raise invalid(where, "an activation with E[act(z)^2] > 0", f"{base.label} with "
                      f"E[act(z)^2] = {second:.3g}", "use an activation that is not 0 a.s.")
    return replace(modify(base, scale=1.0 / np.sqrt(second)), wrapper="unit_scale")


@constrained(act=ACTIVATION)
def normalize(act: Activation | str) -> Activation:
    """(act - m) / s with m = E[act(z)], s^2 = Var[act(z)], z ~ N(0, 1).

    The normalization of Agarwal et al. 2021, eq. (2): E[tau(z)] = 0 and E[tau(z)^2] = 1.

    Raises:
        InvalidInputError: act(z) is constant almost surely.

    Example:
        >>> from nngauge.activations import get, normalize
        >>> from nngauge.theory import gaussian_covariance
        >>> act = normalize("relu")
        >>> act.label, round(float(gaussian_covariance(act, 1.0)), 12)
        ('normalize(relu)', 1.0)
    """
    where = "normalize()"
    base = _as_activation(act)
    mean, second = unit_mean(base), unit_second_moment(base)
    variance = second - mean * mean
    if not variance > 1e-14 * max(second, 1e-300):
        raise invalid(where, "an activation with Var[act(z)] > 0", f"{base.label} with "
                      f"variance {variance:.3g}", "use a non-constant activation")
    std = np.sqrt(variance)
    return replace(modify(base, scale=1.0 / std, offset=-mean / std), wrapper="normalize")


def unit_mean(act: Activation) -> float:
    """E[act(z)], z ~ N(0, 1): the closed form when present, quadrature otherwise."""
    if act.mean_fn is not None:
        return float(act.mean_fn(np.float64(1.0)))
    return float(expectation(act.value, 1.0, breakpoints=act.breakpoints))


def unit_second_moment(act: Activation) -> float:
    """E[act(z)^2], z ~ N(0, 1): the closed covariance at rho = 1 when present, else quadrature."""
    if act.covariance_fn is not None:
        one = np.float64(1.0)
        return float(act.covariance_fn(one, one, one))
    return float(expectation(lambda x: act.value(x) ** 2, 1.0, breakpoints=act.breakpoints))


def _mean_fn(base: Activation, c: float, d: float, t: float, b: float):
    if t != 0.0 or base.mean_fn is None:
        return None
    return lambda q: c * base.mean_fn(d * d * np.asarray(q, dtype=np.float64)) + b


def _covariance_fn(base: Activation, c: float, d: float, t: float, b: float):
    if t != 0.0 or base.covariance_fn is None or (b != 0.0 and base.mean_fn is None):
        return None
    d2 = d * d

    def covariance(rho, q1, q2):
        out = c * c * base.covariance_fn(rho, d2 * q1, d2 * q2)
        if b != 0.0:
            out = out + c * b * (base.mean_fn(d2 * q1) + base.mean_fn(d2 * q2)) + b * b
        return out

    return covariance


def _as_activation(act: Activation | str) -> Activation:
    return act if isinstance(act, Activation) else get(act)


def finite_param(value, name: str, where: str) -> float:
    """``value`` as a finite float, or an InvalidInputError naming ``name`` and ``where``."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise invalid(where, f"{name} a real number", repr(value),
                      f"pass {name} as a float") from None
    if not np.isfinite(out):
        raise invalid(where, f"a finite {name}", f"{name}={out}", f"pass a finite {name}")
    return out
