"""Expressivity (Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017):
trajectory length, neuron transitions and activation patterns along paths and over data,
exact linear regions on a plane (Theorem 2, figure 1), region density and local complexity
near data, dichotomies, robustness to weight noise per layer."""

from nngauge.measures.expressivity._density import (
    DensityLayer,
    RegionDensityResult,
    region_density,
)
from nngauge.measures.expressivity._dichotomies import DichotomiesResult, dichotomies
from nngauge.measures.expressivity._patterns import (
    ActivationPatternsResult,
    PatternCountLayer,
    activation_patterns,
)
from nngauge.measures.expressivity._regions import (
    Edge,
    Region,
    RegionLayer,
    RegionsResult,
    regions,
)
from nngauge.measures.expressivity._robustness import (
    WeightNoiseLayer,
    WeightNoiseResult,
    weight_noise_robustness,
)
from nngauge.measures.expressivity._trajectory import (
    TrajectoryLayer,
    TrajectoryLengthResult,
    trajectory_length,
)
from nngauge.measures.expressivity._transitions import (
    TransitionLayer,
    TransitionsResult,
    transitions,
)

__all__ = [
    "ActivationPatternsResult", "DensityLayer", "DichotomiesResult", "RegionDensityResult",
    "region_density", "Edge", "Region", "RegionLayer", "RegionsResult", "regions",
    "PatternCountLayer", "TrajectoryLayer",
    "TrajectoryLengthResult", "TransitionLayer", "TransitionsResult", "WeightNoiseLayer",
    "WeightNoiseResult", "activation_patterns", "dichotomies", "trajectory_length",
    "transitions", "weight_noise_robustness",
]
