"""Argument declarations and checks shared by the theory entry points (expected / got / fix
messages).

The declarations (:mod:`nngauge._constraints`) cover what a value can fail alone;
the checks below are for data arguments and for the methods of the theory's result objects.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nngauge._constraints import Array, Check, Instance, Integer, Real
from nngauge.activations import Activation, Quadrature
from nngauge.errors import invalid

ACTIVATION = Instance((str, Activation), "an activation name or spec (str, e.g. 'tanh' or "
                      "'leaky_relu(negative_slope=0.2)') or an nngauge Activation",
                      (3, None, ("relu",), np.tanh))
"""An activation argument: what :func:`nngauge.activations.from_spec` accepts."""

QUADRATURE = Instance((Quadrature,), "an nngauge.activations.Quadrature rule, e.g. "
                      "Quadrature('hermite', 25) or DEFAULT_QUADRATURE", ("hermite", None, 16))
"""The rule for Gaussian expectations without a closed form."""

STD = Real(0)
"""A standard deviation (a scalar >= 0)."""

POSITIVE_STD = Real(0, low_open=True)
"""A standard deviation > 0 (weights that carry a signal)."""

CORRELATION_ATOL = 1e-12
"""Correlations this far outside [-1, 1] are float round-off, clipped to [-1, 1]."""

CORRELATION = Array(-1.0 - CORRELATION_ATOL, 1.0 + CORRELATION_ATOL)
"""Correlations rho in [-1, 1] (a number or an array)."""

VARIANCE = Array(0)
"""Variances q >= 0 (a number or an array)."""

POSITIVE = Array(0, low_open=True)
"""Variances or standard deviations > 0 (a number or an array)."""


COUNT = Integer(1)
"""A size: an integer >= 1."""


def _positive_ints(values: Any) -> bool:
    if isinstance(values, (str, bytes)):
        return False
    items = list(values)
    return bool(items) and all(COUNT.accepts(n) for n in items)


WIDTHS = Check(_positive_ints, "a non-empty sequence of hidden-layer widths (integers >= 1), "
               "e.g. [64, 64]", (3, "33", (), [0], [2.5], ["3"], [True], None))
"""Hidden-layer widths n_1..n_L."""

WIDTH_OR_WIDTHS = Check(lambda v: COUNT.accepts(v) or _positive_ints(v),
                        "a hidden width (an integer >= 1) or a non-empty sequence of them",
                        (0, 2.5, "wide", (), [0], [2.5], None))
"""One width for every hidden layer, or one per layer."""


def as_float_array(value: Any, name: str, where: str) -> np.ndarray:
    """``value`` as a float64 array, finite, or an InvalidInputError naming ``name``."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid(where, f"{name} as a real number or array", f"{type(value).__name__}",
                      f"pass {name} as a float or a numpy array of floats") from None
    if not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)].ravel()[:3]
        raise invalid(where, f"finite {name}", f"non-finite values such as {bad.tolist()}",
                      f"remove NaN/inf from {name}")
    return arr


def clipped_correlation(rho: Any) -> np.ndarray:
    """Declared correlations (:data:`CORRELATION`) as a float array clipped to [-1, 1]."""
    return np.clip(np.asarray(rho, dtype=np.float64), -1.0, 1.0)


def check_correlation(rho: Any, where: str, *, atol: float = CORRELATION_ATOL) -> np.ndarray:
    """rho in [-1, 1] (values within ``atol`` outside are clipped, as float round-off)."""
    arr = as_float_array(rho, "rho", where)
    outside = np.abs(arr) > 1.0 + atol
    if np.any(outside):
        raise invalid(where, "correlations rho in [-1, 1]",
                      f"rho={arr[outside].ravel()[:3].tolist()}",
                      "pass cosine similarities; divide covariances by sqrt(q1 q2)")
    return np.clip(arr, -1.0, 1.0)


def check_positive_int(value: Any, name: str, where: str, *, minimum: int = 1) -> int:
    """An integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise invalid(where, f"{name} an integer >= {minimum}", f"{name}={value!r}",
                      f"pass an integer {name} >= {minimum}")
    return int(value)
