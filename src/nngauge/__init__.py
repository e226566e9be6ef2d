"""nngauge: measure deep neural networks the way five papers on signal propagation,
expressivity and generalization do, on any ``torch.nn.Module``.

Subpackages: :mod:`nngauge.activations`, :mod:`nngauge.theory` (numpy/scipy only),
:mod:`nngauge.measures`, :mod:`nngauge.nn`. The measures are re-exported here and loaded on
first use (PEP 562), so ``import nngauge.theory`` never imports torch, and the package imports
no optional dependency at import time.

Example:
    >>> import torch, nngauge
    >>> from nngauge.nn import mlp
    >>> net = mlp(10, 64, 3, 2, activation="tanh")
    >>> nngauge.nlc(net, torch.randn(100, 10)).nlc > 0
    True
"""

from importlib import import_module

from nngauge._catalogue import catalogue
from nngauge._version import __version__
from nngauge.errors import (
    BudgetExceededError,
    ConvergenceError,
    InvalidInputError,
    MissingDependencyError,
    NNGaugeError,
    UnknownNameError,
)

_MEASURES = (*dict.fromkeys(name for entry in catalogue().measures()
                            for name in (entry.name, entry.result) if name is not None),
             "MeasurementMode")
"""The measures of the catalogue and their result classes, and how every result states the way
the model was run: loaded from :mod:`nngauge.measures` on first use."""
_TRAINING = ("Tracker", "fit", "lr_search")
_REPORT = ("build_report",)
_LAZY = {**{name: "nngauge.measures" for name in _MEASURES},
         **{name: "nngauge.training" for name in _TRAINING},
         **{name: "nngauge.report" for name in _REPORT}}

__all__ = [
    "BudgetExceededError",
    "ConvergenceError",
    "InvalidInputError",
    "MissingDependencyError",
    "NNGaugeError",
    "UnknownNameError",
    "__version__",
    "catalogue",
    *_MEASURES,
    *_TRAINING,
    *_REPORT,
]


_SUBPACKAGES = ("activations", "data", "measures", "nn", "report", "reproduce", "studies",
                "theory", "training", "trajectories")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return import_module(f"nngauge.{name}")
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nngauge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
