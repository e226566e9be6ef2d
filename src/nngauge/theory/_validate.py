"""Argument checks shared by the theory entry points (expected / got / fix messages)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nngauge.errors import invalid


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


def check_correlation(rho: Any, where: str, *, atol: float = 1e-12) -> np.ndarray:
    """rho in [-1, 1] (values within ``atol`` outside are clipped, as float round-off)."""
    arr = as_float_array(rho, "rho", where)
    outside = np.abs(arr) > 1.0 + atol
    if np.any(outside):
        raise invalid(where, "correlations rho in [-1, 1]",
                      f"rho={arr[outside].ravel()[:3].tolist()}",
                      "pass cosine similarities; divide covariances by sqrt(q1 q2)")
    return np.clip(arr, -1.0, 1.0)


def check_variance(q: Any, name: str, where: str, *, positive: bool = False) -> np.ndarray:
    """A finite variance q >= 0 (or > 0 when ``positive``)."""
    arr = as_float_array(q, name, where)
    bad = arr <= 0 if positive else arr < 0
    if np.any(bad):
        need = "> 0" if positive else ">= 0"
        raise invalid(where, f"variance {name} {need}", f"{name}={arr[bad].ravel()[:3].tolist()}",
                      f"pass a {'positive' if positive else 'non-negative'} variance "
                      "(a standard deviation squared)")
    return arr


def check_positive_int(value: Any, name: str, where: str, *, minimum: int = 1) -> int:
    """An integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise invalid(where, f"{name} an integer >= {minimum}", f"{name}={value!r}",
                      f"pass an integer {name} >= {minimum}")
    return int(value)


def check_std(value: Any, name: str, where: str, *, positive: bool = False) -> float:
    """A finite scalar standard deviation >= 0 (or > 0 when ``positive``)."""
    arr = as_float_array(value, name, where)
    if arr.ndim != 0 or (arr <= 0 if positive else arr < 0):
        need = "> 0" if positive else ">= 0"
        raise invalid(where, f"{name} a real number {need}", f"{name}={value!r}",
                      f"pass a scalar standard deviation {need}")
    return float(arr)
