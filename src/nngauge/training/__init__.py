"""Training: the NLC paper's protocol (appendix E.2) with loss scaling (appendix C), its
learning-rate search, and the :class:`Tracker` for any training loop.

Example:
    >>> from nngauge.training import StallSchedule
    >>> StallSchedule(patience=1, n_decays=0).update(0.5)
    'improved'
"""

from nngauge.training._fit import (EpochRecord, FitResult, StallSchedule, classification_error,
                                   fit, output_scale)
from nngauge.training._lr_search import LRSearchResult, lr_search, smallest_lr
from nngauge.training._sinks import CSVSink, JSONLSink, TensorBoardSink
from nngauge.training._tracker import DEFAULT_MEASURES, REGISTRY, Tracker

__all__ = [
    "CSVSink",
    "DEFAULT_MEASURES",
    "EpochRecord",
    "FitResult",
    "JSONLSink",
    "LRSearchResult",
    "REGISTRY",
    "StallSchedule",
    "TensorBoardSink",
    "Tracker",
    "classification_error",
    "fit",
    "lr_search",
    "output_scale",
    "smallest_lr",
]
