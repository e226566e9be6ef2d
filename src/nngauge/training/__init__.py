"""Training: the NLC paper's protocol (appendix E.2) with loss scaling (appendix C), its
learning-rate search, and the :class:`Tracker` for any training loop (every measure by name,
structured results as flat columns, schedules of steps or epochs, fixed probes, weight
snapshots, CSV / JSON-lines / TensorBoard sinks).

Example:
    >>> from nngauge.training import StallSchedule
    >>> StallSchedule(patience=1, n_decays=0).update(0.5)
    'improved'
"""

from nngauge.training._fit import (
                                   EpochRecord,
                                   FitResult,
                                   StallSchedule,
                                   classification_error,
                                   fit,
                                   output_scale,
                                   steps_to_loss,
)
from nngauge.training._lr_search import LRSearchResult, lr_search, smallest_lr
from nngauge.training._registry import REGISTRY
from nngauge.training._schedules import Schedule, log_steps
from nngauge.training._sinks import CSVSink, JSONLSink, TensorBoardSink
from nngauge.training._tracker import DEFAULT_MEASURES, Tracker

__all__ = [
    "CSVSink",
    "DEFAULT_MEASURES",
    "EpochRecord",
    "FitResult",
    "JSONLSink",
    "LRSearchResult",
    "REGISTRY",
    "Schedule",
    "StallSchedule",
    "TensorBoardSink",
    "Tracker",
    "classification_error",
    "fit",
    "log_steps",
    "lr_search",
    "output_scale",
    "smallest_lr",
    "steps_to_loss",
]
