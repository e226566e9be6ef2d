"""Curvature of the loss in parameter space: the Hessian's top eigenvalues, trace, spectral
density and per-layer blocks (Lanczos, Hutch++, stochastic Lanczos quadrature on
Hessian-vector products); loss landscapes on lines and planes of weight space (Li et al.,
NeurIPS 2018)."""

from nngauge.measures.curvature._landscape import LossLandscapeResult, loss_landscape
from nngauge.measures.curvature._hessian import (
    HessianDensity,
    HessianLayer,
    HessianResult,
    hessian,
)

__all__ = ["HessianDensity", "HessianLayer", "HessianResult", "LossLandscapeResult", "hessian",
           "loss_landscape"]
