"""Empirical measures on (model, data): one function per measure, torch, one module per family."""

from nngauge.measures._correlations import CorrelationLayer, CorrelationResult, correlations
from nngauge.measures._gradients import GradientMetrics, gradient_metrics
from nngauge.measures._jacobian import JacobianNormLayer, JacobianNormResult, jacobian_norm
from nngauge.measures._kernels import KernelConditioning, KernelLayer, kernel_conditioning
from nngauge.measures._nlc import NLCLayer, NLCProfile, NLCResult, nlc, nlc_profile
from nngauge.measures._skim import LinearizedBlock, SkimResult, skim
from nngauge.measures._regions import (
    RegionSize,
    error_preserving_perturbation,
    linear_region_diameter,
)

__all__ = [
    "CorrelationLayer",
    "CorrelationResult",
    "GradientMetrics",
    "JacobianNormLayer",
    "JacobianNormResult",
    "KernelConditioning",
    "KernelLayer",
    "NLCLayer",
    "NLCProfile",
    "NLCResult",
    "LinearizedBlock",
    "RegionSize",
    "SkimResult",
    "correlations",
    "error_preserving_perturbation",
    "gradient_metrics",
    "jacobian_norm",
    "kernel_conditioning",
    "linear_region_diameter",
    "nlc",
    "nlc_profile",
    "skim",
]
