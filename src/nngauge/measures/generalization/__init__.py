"""Generalization (Neyshabur et al., "Exploring Generalization in Deep Learning", NIPS 2017):
margins, norm- and path-based capacity over margin, batchnorm folding, Keskar's sharpness,
expected sharpness and PAC-Bayes, conditions C1-C3 of Theorem 1; the measures Jiang et al.
compare ("Fantastic Generalization Measures and Where to Find Them", ICLR 2020): distance from
initialization, their norm- and margin-based family, sigma-search flatness with its PAC-Bayes
bounds, and the gradient noise; and the data-free layer spectra of Martin and Mahoney (JMLR
2021; Nature Communications 2021)."""

from nngauge.measures.generalization._conditions import (
    ActivationC2,
    ConditionLayer,
    ConditionsResult,
    sharpness_conditions,
)
from nngauge.measures.generalization._distance import (
    DistanceLayer,
    DistanceResult,
    distance_from_init,
)
from nngauge.measures.generalization._flatness import (
    FlatnessPoint,
    FlatnessResult,
    flatness,
)
from nngauge.measures.generalization._fold import fold_batchnorm
from nngauge.measures.generalization._gradient_noise import (
    GradientNoiseResult,
    NoiseParameter,
    gradient_noise,
)
from nngauge.measures.generalization._margin import MarginResult, margin
from nngauge.measures.generalization._norm_measures import (
    NormLayer,
    NormMeasures,
    norm_measures,
)
from nngauge.measures.generalization._norms import (
    CapacityMeasure,
    CapacityResult,
    LayerNorms,
    capacity,
    path_norm,
)
from nngauge.measures.generalization._sharpness import (
    ExpectedSharpnessResult,
    PACBayesPoint,
    PACBayesResult,
    SharpnessResult,
    expected_sharpness,
    pac_bayes,
    pac_bayes_bound,
    sharpness,
)
from nngauge.measures.generalization._spectra import LayerSpectra, LayerSpectrum, layer_spectra

__all__ = [
    "ActivationC2", "CapacityMeasure", "CapacityResult", "ConditionLayer", "ConditionsResult",
    "DistanceLayer", "DistanceResult", "ExpectedSharpnessResult", "FlatnessPoint", "FlatnessResult",
    "GradientNoiseResult", "LayerNorms", "LayerSpectra", "LayerSpectrum", "MarginResult",
    "NoiseParameter", "NormLayer", "NormMeasures", "PACBayesPoint", "PACBayesResult",
    "SharpnessResult", "capacity", "distance_from_init", "expected_sharpness", "flatness",
    "fold_batchnorm", "gradient_noise", "layer_spectra", "margin", "norm_measures", "pac_bayes",
    "pac_bayes_bound", "path_norm",
    "sharpness", "sharpness_conditions",
]
