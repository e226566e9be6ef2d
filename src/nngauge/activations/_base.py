"""The :class:`Activation` object: a scalar nonlinearity with everything theory needs.

An activation tau: R -> R is applied elementwise. nngauge keeps, for each one, its numpy value
and derivative, a torch implementation (imported lazily: this module never imports torch),
where it is not smooth (``breakpoints``), and closed-form Gaussian quantities where they are
known. Theory functions use a closed form when the activation carries one and fall back to
quadrature (:mod:`nngauge.theory`) otherwise, so any activation, including compositions built
with :func:`nngauge.activations.modify`, works with every theory function.

Closed forms an activation may carry (u, v centered jointly Gaussian with variances q1, q2 and
correlation rho; z ~ N(0, 1)):

- ``mean_fn(q)`` = E[tau(sqrt(q) z)]
- ``covariance_fn(rho, q1, q2)`` = E[tau(u) tau(v)]  (the "dual" of Daniely et al. 2016
  at q1 = q2 = 1; called C[tau | rho] in the shrinkage paper, section 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

ArrayFn = Callable[[np.ndarray], np.ndarray]
MeanFn = Callable[[np.ndarray], np.ndarray]
CovarianceFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True, eq=False)
class Activation:
    """A scalar nonlinearity tau, its derivative, its torch form and its Gaussian closed forms.

    Attributes:
        name: registry name (with parameters, e.g. ``"leaky_relu(negative_slope=0.1)"`` is
            described by ``name="leaky_relu"`` and ``params={"negative_slope": 0.1}``).
        value: numpy function tau(x), elementwise, float64 in and out.
        derivative_fn: numpy function tau'(x) (where tau is not differentiable, a one-sided
            value; delta functions at jumps are dropped).
        torch_fn: torch function tau(x) for tensors, differentiable by autograd.
        params: the parameters the activation was built with.
        breakpoints: the points where tau or tau' is not smooth (kinks and jumps), sorted.
            Quadrature splits its intervals there.
        piecewise_linear: True when tau is piecewise linear (possibly with jumps); then its
            linear pieces are delimited by ``breakpoints``.
        mean_fn: closed form of E[tau(sqrt(q) z)], or None.
        covariance_fn: closed form of E[tau(u) tau(v)], or None.
        derivative_factory: builds tau' as an :class:`Activation` carrying its own closed
            forms; None means "wrap ``derivative_fn``" (quadrature only).
        description: one line for listings and reports.

    Example:
        >>> import numpy as np
        >>> from nngauge.activations import get
        >>> relu = get("relu")
        >>> relu(np.array([-1.0, 2.0])), relu.derivative(np.array([-1.0, 2.0]))
        (array([0., 2.]), array([0., 1.]))
    """

    name: str
    value: ArrayFn
    derivative_fn: ArrayFn
    torch_fn: Callable[["torch.Tensor"], "torch.Tensor"]
    params: Mapping[str, Any] = field(default_factory=dict)
    breakpoints: tuple[float, ...] = ()
    piecewise_linear: bool = False
    mean_fn: Optional[MeanFn] = None
    covariance_fn: Optional[CovarianceFn] = None
    derivative_factory: Optional[Callable[[], "Activation"]] = None
    description: str = ""

    def __call__(self, x: Any) -> np.ndarray:
        """tau(x) elementwise on a numpy array (float64)."""
        return self.value(np.asarray(x, dtype=np.float64))

    def derivative(self, x: Any) -> np.ndarray:
        """tau'(x) elementwise on a numpy array (float64)."""
        return self.derivative_fn(np.asarray(x, dtype=np.float64))

    def derivative_activation(self) -> "Activation":
        """tau' as an :class:`Activation` (used for E[tau'(u) tau'(v)] in NTK and map slopes)."""
        if self.derivative_factory is not None:
            return self.derivative_factory()
        return Activation(
            name=f"d/dx {self.label}",
            value=self.derivative_fn,
            derivative_fn=_numerical_derivative(self.derivative_fn),
            torch_fn=_autograd_derivative(self.torch_fn),
            breakpoints=self.breakpoints,
            piecewise_linear=False,
            description=f"derivative of {self.label}",
        )

    @property
    def label(self) -> str:
        """The name with its parameters, e.g. ``leaky_relu(negative_slope=0.2)``."""
        if not self.params:
            return self.name
        args = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.name}({args})"

    @property
    def has_closed_forms(self) -> bool:
        """True when both the Gaussian mean and covariance have closed forms."""
        return self.mean_fn is not None and self.covariance_fn is not None

    def torch(self, x: "torch.Tensor") -> "torch.Tensor":
        """tau(x) on a torch tensor, differentiable."""
        return self.torch_fn(x)

    def module(self) -> "torch.nn.Module":
        """A ``torch.nn.Module`` applying tau elementwise (torch is imported here, lazily)."""
        from nngauge.activations._torch import ActivationModule

        return ActivationModule(self)

    def __repr__(self) -> str:
        return f"Activation({self.label})"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Activation):
        return value.label
    return repr(value)


def _numerical_derivative(fn: ArrayFn, h: float = 1e-6) -> ArrayFn:
    """Central difference of ``fn``; used only for derivatives of derivatives."""

    def derivative(x: np.ndarray) -> np.ndarray:
        return (fn(x + h) - fn(x - h)) / (2.0 * h)

    return derivative


def _autograd_derivative(torch_fn: Callable) -> Callable:
    """tau'(x) on tensors by autograd of an elementwise ``torch_fn`` (torch imported lazily)."""

    def derivative(x):
        from nngauge.activations._torch import elementwise_derivative

        return elementwise_derivative(torch_fn, x)

    return derivative
