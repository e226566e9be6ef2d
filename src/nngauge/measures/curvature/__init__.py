"""Curvature of the loss in parameter space: the Hessian's top eigenvalues, trace, spectral
density and per-layer blocks (Lanczos, Hutch++ or Hutchinson, stochastic Lanczos quadrature on
Hessian-vector products); loss landscapes on lines and planes of weight space (Li et al.,
NeurIPS 2018), with the region boundaries of the data on them; exact pattern changes along a
line of one layer's weights (Raghu et al., ICML 2017, Theorem 2 read in weight space)."""

from nngauge.measures.curvature._hessian import (
    HessianDensity,
    HessianLayer,
    HessianResult,
    hessian,
)
from nngauge.measures.curvature._landscape import LossLandscapeResult, loss_landscape
from nngauge.measures.curvature._weight_transitions import (
    WeightTransitionLayer,
    WeightTransitionsResult,
    weight_transitions,
)

__all__ = ["HessianDensity", "HessianLayer", "HessianResult", "LossLandscapeResult",
           "WeightTransitionLayer", "WeightTransitionsResult", "hessian", "loss_landscape",
           "weight_transitions"]
