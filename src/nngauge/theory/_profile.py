"""An activation's infinite-width profile: what ``nngauge theory ACT`` prints.

One call gathers, for an activation and an initialization (sigma_w, sigma_b) of a given
architecture, the quantities the papers use to judge it before training:

- slope at one chi = P'(1), phase and stable fixed point of the correlation map P
  (shrinkage paper eq. 2.3 / A.10, or the classic length-then-correlation map);
- NLC_tau(1) and the linear approximation error (NLC paper section 5, Table 1 rows A and E);
- the coefficient of non-linearity mu of the normalized activation (Agarwal et al. 2021, Def. 3.1);
- the Hermite linearization error (shrinkage paper section 2);
- the critical initialization: sigma_w for the given sigma_b, and sigma_b for the given sigma_w,
  that put the slope at one to 1 (``None`` with the reason when no such value exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from nngauge._constraints import Choice, constrained
from nngauge._results import Result, reported_as, unreported
from nngauge.errors import NNGaugeError
from nngauge.theory._correlation import Arch, CorrelationMap, correlation_map
from nngauge.theory._critical import critical_init
from nngauge.theory._gaussian import resolve
from nngauge.theory._nonlinearity import (
    coefficient_of_nonlinearity,
    linear_approximation_error,
    linearization_error,
    nlc_activation,
)
from nngauge.theory._validate import ACTIVATION, STD

PAPER_SHRINKAGE = "shrinkage"
PAPER_NLC = "NLC"
PAPER_CONDITIONING = "conditioning"
PAPER_POOLE = "Poole"


@dataclass(frozen=True)
class CriticalValue:
    """One critical initialization: the value found, or why there is none."""

    value: Optional[float]
    reason: str = ""

    def display(self) -> float | str:
        return self.value if self.value is not None else f"none: {self.reason}"


@dataclass(frozen=True)
class ActivationProfile(Result):
    """The infinite-width summary of one activation at one initialization.

    Attributes:
        activation: the activation's label (a spec ``from_spec`` rebuilds).
        sigma_w, sigma_b, arch: the initialization and architecture of the correlation map.
        correlation_map: the map P itself (for plots and further questions).
        slope_at_one: chi = P'(1); < 1 ordered, = 1 critical, > 1 chaotic.
        phase: "ordered", "critical" or "chaotic".
        fixed_point: the stable fixed point rho* the iteration converges to.
        variance_ratio: q_next / q, the per-layer change of the pre-activation variance (1 at
            the fixed point q* and for normalized architectures; sigma_w^2 / 2 for relu
            without bias, whose correlation map needs no fixed point).
        nlc: NLC_tau(1) = sqrt(E[tau'(s)^2] / Var tau(s)), s ~ N(0, 1) (NLC paper eq. 5).
        linear_approximation_error: NLC paper E.4 / Table 1 row E.
        mu: coefficient of non-linearity of the normalized activation (Agarwal et al. 2021, 3.1).
        linearization_error: Hermite linearization error (shrinkage paper section 2).
        critical_sigma_w: sigma_w with slope at one 1 at this sigma_b.
        critical_sigma_b: sigma_b with slope at one 1 at this sigma_w.

    ``to_dict()`` leaves the correlation map out and gives each critical value as its value
    and its reason (``critical_sigma_w``, ``critical_sigma_w_reason``, likewise for sigma_b).
    """

    _derived = ("critical_sigma_w.reason", "critical_sigma_b.reason")

    activation: str
    sigma_w: float
    sigma_b: float
    arch: str
    correlation_map: CorrelationMap = unreported()
    slope_at_one: float
    phase: str
    fixed_point: float
    variance_ratio: float
    nlc: float
    linear_approximation_error: float
    mu: float
    linearization_error: float
    critical_sigma_w: CriticalValue = reported_as(lambda critical: critical.value)
    critical_sigma_b: CriticalValue = reported_as(lambda critical: critical.value)

    def rows(self) -> list[tuple[str, float | str, str]]:
        """(quantity, value, source) rows, in the order ``nngauge theory`` prints them."""
        if self.arch == "mlp":  # Poole et al.'s unnormalized network: chi_1 and the length map
            slope = ("slope at one chi_1 = sigma_w^2 E[phi'(u)^2]", self.slope_at_one,
                     f"{PAPER_POOLE} section 3")
            variance = [("variance ratio per layer q_next / q", self.variance_ratio,
                         f"{PAPER_POOLE} section 2")]
            critical_source = f"{PAPER_POOLE} section 3"
        else:
            slope = ("slope at one P'(1)", self.slope_at_one, f"{PAPER_SHRINKAGE} eq. 2.3")
            variance = []
            critical_source = f"{PAPER_SHRINKAGE} appendix B"
        return [
            slope,
            ("phase", self.phase, f"{PAPER_SHRINKAGE} section 3"),
            ("stable fixed point rho*", self.fixed_point, f"{PAPER_SHRINKAGE} section 3"),
            *variance,
            ("NLC_tau(1)", self.nlc, f"{PAPER_NLC} section 5, Table 1 row A"),
            ("linear approximation error", self.linear_approximation_error,
             f"{PAPER_NLC} E.4, Table 1 row E"),
            ("mu (coefficient of non-linearity)", self.mu, f"{PAPER_CONDITIONING} Def. 3.1"),
            ("linearization error", self.linearization_error, f"{PAPER_SHRINKAGE} section 2"),
            (f"critical sigma_w at sigma_b={self.sigma_b:g}", self.critical_sigma_w.display(),
             critical_source),
            (f"critical sigma_b at sigma_w={self.sigma_w:g}", self.critical_sigma_b.display(),
             critical_source),
        ]

    def plot(self, ax=None, **options: Any):
        """The correlation map's iteration (:meth:`CorrelationMap.plot`, ``options`` its
        ``depth`` and ``starts``); returns the Axes. Needs matplotlib."""
        return self.correlation_map.plot(ax, **options)


@constrained(act=ACTIVATION, sigma_w=STD, sigma_b=STD, arch=Choice.literal(Arch))
def profile(act, sigma_w: float = 1.0, sigma_b: float = 0.0, *,
            arch: Arch = "layernorm") -> ActivationProfile:
    """Summarize an activation's infinite-width behaviour at one initialization.

    Args:
        act: an Activation, a registry name or a spec such as
            ``"normalize(modify(tanh, dilation=1.2))"``.
        sigma_w: weight standard deviation (weights ~ N(0, sigma_w^2 / fan_in)).
        sigma_b: bias standard deviation.
        arch: which correlation map: "layernorm" (shrinkage eq. 2.3), "resnet" (eq. A.10) or
            "mlp" (length map to q*, then the c-map).

    Returns:
        An :class:`ActivationProfile`.

    Example:
        >>> from nngauge.theory import profile
        >>> profile("relu").phase  # LayerNorm relu without bias: P'(1) = 1
        'critical'
        >>> profile("relu", sigma_b=0.5).phase
        'ordered'
    """
    activation = resolve(act)
    cmap = correlation_map(activation, sigma_w, sigma_b, arch=arch)
    return ActivationProfile(
        activation=activation.label,
        sigma_w=float(sigma_w),
        sigma_b=float(sigma_b),
        arch=arch,
        correlation_map=cmap,
        slope_at_one=float(cmap.slope_at_one),
        phase=cmap.phase,
        fixed_point=float(cmap.fixed_point()),
        variance_ratio=float(cmap.variance_ratio),
        nlc=float(nlc_activation(activation, 1.0)),
        linear_approximation_error=float(linear_approximation_error(activation)),
        mu=float(coefficient_of_nonlinearity(activation)),
        linearization_error=float(linearization_error(activation)),
        critical_sigma_w=_critical(activation, arch, sigma_b=sigma_b),
        critical_sigma_b=_critical(activation, arch, sigma_w=sigma_w),
    )


def _critical(activation, arch: str, **given: float) -> CriticalValue:
    """Solve critical_init for the missing sigma; no solution is an answer, not a crash."""
    try:
        sigma_w, sigma_b = critical_init(activation, arch=arch, **given)
    except NNGaugeError as error:  # "... expected X; got WHY. Fix: ..." -> WHY
        return CriticalValue(None, str(error).split(". Fix:")[0].split("; got ", 1)[-1])
    return CriticalValue(float(sigma_b if "sigma_w" in given else sigma_w))
