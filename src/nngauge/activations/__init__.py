"""Activations: what a nonlinearity is (value, derivative, Gaussian moments, closed-form duals).

Example:
    >>> from nngauge import activations
    >>> import numpy as np
    >>> relu = activations.get("relu")
    >>> relu(np.array([-1.0, 2.0]))
    array([0., 2.])
"""

from nngauge.activations import _zoo  # noqa: F401  (registers the built-in activations)
from nngauge.activations._base import Activation
from nngauge.activations._gaussian import (
    DEFAULT_QUADRATURE,
    FAST_QUADRATURE,
    Quadrature,
    cross_expectation,
    expectation,
    hermite_coefficients,
    standard_normal_rule,
)
from nngauge.activations._modify import ModifiedActivation, debias, modify, normalize, unit_scale
from nngauge.activations._norm_relu import SELU_MATCHED_B, norm_relu_constants
from nngauge.activations._registry import get, names, register
from nngauge.activations._spec import from_spec

__all__ = [
    "Activation",
    "DEFAULT_QUADRATURE",
    "FAST_QUADRATURE",
    "ModifiedActivation",
    "Quadrature",
    "SELU_MATCHED_B",
    "cross_expectation",
    "debias",
    "expectation",
    "from_spec",
    "get",
    "hermite_coefficients",
    "modify",
    "names",
    "norm_relu_constants",
    "normalize",
    "register",
    "standard_normal_rule",
    "unit_scale",
]
