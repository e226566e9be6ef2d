"""Infinite-width theory: numpy/scipy only (this package never imports torch).

Gaussian covariances of activations, mean-field correlation maps and phases, critical
initialization, infinite-width NNGP/NTK kernels, the nonlinearity of activations, the
papers' bounds and the literature's bounds on the number of linear regions.

The result classes share the measures' protocol (:class:`nngauge._results.Result`):
``to_dict()``, ``to_frame()`` (the per-layer or per-depth curve where there is one) and
``plot(ax=None)``.
"""

from nngauge.theory._correlation import (
    CRITICAL_TOL,
    CorrelationMap,
    DivergentLengthMap,
    correlation_map,
    length_fixed_point,
)
from nngauge.theory._critical import critical_init
from nngauge.theory._expressivity import (
    ActivationPatternBound,
    TrajectoryGrowthBound,
    hyperplane_regions,
    max_activation_patterns,
    trajectory_growth_bound,
)
from nngauge.theory._gaussian import gaussian_covariance, gaussian_mean, hermite_coefficients
from nngauge.theory._kernels import (
    KernelTrace,
    condition_number,
    mean_normalized_dot_product,
    nngp,
    ntk,
)
from nngauge.theory._nonlinearity import (
    coefficient_of_nonaffinity,
    coefficient_of_nonlinearity,
    linear_approximation_error,
    linearization_error,
    nlc_activation,
)
from nngauge.theory._profile import ActivationProfile, profile
from nngauge.theory._regions import (
    ExpectedRegionsInVolume,
    ExpectedRegionsOnSegment,
    GaussianRegionConstants,
    RegionCountBound,
    expected_regions_per_length,
    expected_regions_per_volume,
    gaussian_region_constants,
    max_regions_lower_bound,
    max_regions_upper_bound,
)
from nngauge.theory._sharpness_bound import SharpnessBound, sharpness_bound
from nngauge.theory._shrinkage import (
    ExcessConvexityBound,
    ShrinkageBound,
    excess_convexity,
    excess_convexity_bound,
    shrinkage_bound,
)

__all__ = [
    "CRITICAL_TOL",
    "ActivationPatternBound",
    "ActivationProfile",
    "CorrelationMap",
    "DivergentLengthMap",
    "ExcessConvexityBound",
    "ExpectedRegionsInVolume",
    "ExpectedRegionsOnSegment",
    "GaussianRegionConstants",
    "KernelTrace",
    "RegionCountBound",
    "SharpnessBound",
    "ShrinkageBound",
    "TrajectoryGrowthBound",
    "coefficient_of_nonaffinity",
    "coefficient_of_nonlinearity",
    "condition_number",
    "correlation_map",
    "critical_init",
    "excess_convexity",
    "excess_convexity_bound",
    "expected_regions_per_length",
    "expected_regions_per_volume",
    "gaussian_region_constants",
    "gaussian_covariance",
    "gaussian_mean",
    "hermite_coefficients",
    "hyperplane_regions",
    "length_fixed_point",
    "linear_approximation_error",
    "linearization_error",
    "max_activation_patterns",
    "max_regions_lower_bound",
    "max_regions_upper_bound",
    "mean_normalized_dot_product",
    "nlc_activation",
    "nngp",
    "ntk",
    "profile",
    "sharpness_bound",
    "shrinkage_bound",
    "trajectory_growth_bound",
]
