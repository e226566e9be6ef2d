"""Curvature of the loss in parameter space: the Hessian's top eigenvalues, trace, spectral
density and per-layer blocks (Lanczos, Hutch++, stochastic Lanczos quadrature on
Hessian-vector products)."""

from nngauge.measures.curvature._hessian import (
    HessianDensity,
    HessianLayer,
    HessianResult,
    hessian,
)

__all__ = ["HessianDensity", "HessianLayer", "HessianResult", "hessian"]
