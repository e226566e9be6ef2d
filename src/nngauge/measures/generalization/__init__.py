"""Generalization (Neyshabur et al., "Exploring Generalization in Deep Learning", NIPS 2017):
margins, norm- and path-based capacity over margin, batchnorm folding, Keskar's sharpness,
expected sharpness and PAC-Bayes, conditions C1-C3 of Theorem 1; and the data-free layer spectra
of Martin and Mahoney (JMLR 2021; Nature Communications 2021)."""

from nngauge.measures.generalization._conditions import (
    ActivationC2,
    ConditionLayer,
    ConditionsResult,
    sharpness_conditions,
)
from nngauge.measures.generalization._fold import fold_batchnorm
from nngauge.measures.generalization._margin import MarginResult, margin
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
    "ExpectedSharpnessResult", "LayerNorms", "LayerSpectra", "LayerSpectrum", "MarginResult",
    "PACBayesPoint", "PACBayesResult", "SharpnessResult", "capacity", "expected_sharpness",
    "fold_batchnorm", "layer_spectra", "margin", "pac_bayes", "pac_bayes_bound", "path_norm",
    "sharpness", "sharpness_conditions",
]
