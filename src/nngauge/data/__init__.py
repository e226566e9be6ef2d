"""Bundled data: Breiman's waveform-noise generator, MNIST-1D, scikit-learn's digits, Gaussian
inputs, the NLC paper's preprocessing (appendix D.2) and random splits.

Every data set is a :class:`LabelledData` ``(inputs, labels)`` NamedTuple of torch tensors,
accepted by every measure as a pair; MNIST-1D comes as its fixed training and test splits, a
:class:`TrainTest` of two.

Example:
    >>> from nngauge.data import waveform_noise, split, standardize
    >>> train, val, test = split(waveform_noise(500), (0.6, 0.2, 0.2))
    >>> (train, val, test), _ = standardize(train, val, test)
    >>> tuple(train.inputs.shape)
    (300, 40)
"""

from nngauge.data._digits import digits
from nngauge.data._gaussian import gaussian
from nngauge.data._labels import ConfusionSet, confusion_set, random_labels
from nngauge.data._mnist1d import mnist1d
from nngauge.data._preprocess import Preprocessed, Preprocessing, preprocess, standardize
from nngauge.data._splits import LabelledData, TrainTest, split
from nngauge.data._waveform import base_waves, waveform_noise

__all__ = [
    "ConfusionSet",
    "LabelledData",
    "Preprocessed",
    "Preprocessing",
    "TrainTest",
    "base_waves",
    "confusion_set",
    "digits",
    "gaussian",
    "mnist1d",
    "preprocess",
    "random_labels",
    "split",
    "standardize",
    "waveform_noise",
]

