"""Signal propagation at initialization: the nonlinearity coefficient and output bias (NLC
paper), Jacobian norms and gradient comparators, per-layer correlations and skimming (shrinkage
paper), kernel conditioning (Agarwal et al. 2021), the size of linearly approximable
regions (NLC paper, appendix E)."""

from nngauge.measures.propagation._correlations import (
    CorrelationLayer,
    CorrelationResult,
    correlations,
)
from nngauge.measures.propagation._gradients import GradientMetrics, gradient_metrics
from nngauge.measures.propagation._jacobian import (
    JacobianNormLayer,
    JacobianNormResult,
    jacobian_norm,
)
from nngauge.measures.propagation._kernels import (
    KernelConditioning,
    KernelLayer,
    kernel_conditioning,
)
from nngauge.measures.propagation._nlc import NLCLayer, NLCProfile, NLCResult, nlc, nlc_profile
from nngauge.measures.propagation._region_size import (
    RegionSize,
    error_preserving_perturbation,
    linear_region_diameter,
)
from nngauge.measures.propagation._skim import LinearizedBlock, SkimResult, skim

__all__ = [
    "CorrelationLayer", "CorrelationResult", "GradientMetrics", "JacobianNormLayer",
    "JacobianNormResult", "KernelConditioning", "KernelLayer", "LinearizedBlock", "NLCLayer",
    "NLCProfile", "NLCResult", "RegionSize", "SkimResult", "correlations",
    "error_preserving_perturbation", "gradient_metrics", "jacobian_norm", "kernel_conditioning",
    "linear_region_diameter", "nlc", "nlc_profile", "skim",
]
