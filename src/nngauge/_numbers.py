"""What the library counts as a number: one predicate for a real scalar and one for a finite one.

Settings, constraints, study records and reproduction tables all ask the same question ("is this
value a usable real number?"); they ask it here, so that a bool is never a number and a numpy
scalar always is, wherever the question is asked. Ground floor: no torch, nothing of nngauge.

Example:
    >>> import numpy as np
    >>> is_finite(0.5), is_finite(np.float32(2)), is_finite(float("nan")), is_finite(True)
    (True, True, False, False)
    >>> is_finite(None), is_finite("1.0")
    (False, False)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def is_number(value: Any) -> bool:
    """A real scalar: a Python or numpy int or float, not a bool (Python's ``True`` is an
    int, but never a count, a size or a measurement here)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def is_finite(value: Any) -> bool:
    """A real scalar (:func:`is_number`) that is neither NaN nor infinite; None, flags,
    strings and arrays are not."""
    return is_number(value) and math.isfinite(value)


__all__ = ["is_finite", "is_number"]
