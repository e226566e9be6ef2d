"""nngauge: measure deep neural networks the way five papers on signal propagation,
expressivity and generalization do, on any ``torch.nn.Module``.

Subpackages: :mod:`nngauge.activations`, :mod:`nngauge.theory` (numpy/scipy only),
:mod:`nngauge.nn`. The package imports no optional dependency at import time.
"""

from nngauge._version import __version__
from nngauge.errors import (
    ConvergenceError,
    InvalidInputError,
    MissingDependencyError,
    NNGaugeError,
    UnknownNameError,
)

__all__ = [
    "ConvergenceError",
    "InvalidInputError",
    "MissingDependencyError",
    "NNGaugeError",
    "UnknownNameError",
    "__version__",
]
