"""The activation zoo: every named activation of the five papers, with closed forms.

Closed forms (u, v centered Gaussian, variances q1, q2, correlation rho; see ``_base``):

- identity: E[uv] = rho sqrt(q1 q2).
- relu: the arc-cosine kernel of order 1 (Cho & Saul 2009; Daniely et al. 2016, table 1):
  E[relu(u) relu(v)] = sqrt(q1 q2) / (2 pi) * (sqrt(1 - rho^2) + (pi - arccos rho) rho).
- step (relu'): arc-cosine kernel of order 0: E[step(u) step(v)] = (pi - arccos rho) / (2 pi).
"""

from __future__ import annotations

import numpy as np

from nngauge.activations._base import Activation
from nngauge.activations._registry import register

_SQRT_2PI = np.sqrt(2.0 * np.pi)


def _torch():
    import torch

    return torch


@register("identity")
def identity() -> Activation:
    """tau(s) = s."""
    return Activation(
        name="identity",
        value=lambda x: x,
        derivative_fn=np.ones_like,
        torch_fn=lambda x: x,
        piecewise_linear=True,
        mean_fn=lambda q: np.zeros_like(np.asarray(q, dtype=np.float64)),
        covariance_fn=lambda rho, q1, q2: rho * np.sqrt(q1 * q2),
        derivative_factory=lambda: constant(1.0),
        description="linear: tau(s) = s",
    )


@register("constant")
def constant(value: float = 1.0) -> Activation:
    """tau(s) = value (the derivative of an affine map)."""
    c = float(value)
    return Activation(
        name="constant",
        value=lambda x: np.full_like(x, c),
        derivative_fn=np.zeros_like,
        torch_fn=lambda x: _torch().full_like(x, c),
        params={"value": c},
        piecewise_linear=True,
        mean_fn=lambda q: np.full_like(np.asarray(q, dtype=np.float64), c),
        covariance_fn=lambda rho, q1, q2: np.full(np.broadcast(rho, q1, q2).shape, c * c),
        description="constant: tau(s) = c",
    )


@register("relu")
def relu() -> Activation:
    """tau(s) = max(s, 0)."""
    return Activation(
        name="relu",
        value=lambda x: np.maximum(x, 0.0),
        derivative_fn=lambda x: (x > 0).astype(np.float64),
        torch_fn=lambda x: _torch().relu(x),
        breakpoints=(0.0,),
        piecewise_linear=True,
        mean_fn=lambda q: np.sqrt(q) / _SQRT_2PI,
        covariance_fn=lambda rho, q1, q2: np.sqrt(q1 * q2) / (2 * np.pi) * (
            np.sqrt(np.clip(1.0 - rho * rho, 0.0, None)) + (np.pi - np.arccos(rho)) * rho
        ),
        derivative_factory=step,
        description="ReLU: max(s, 0)",
    )


@register("step")
def step() -> Activation:
    """tau(s) = 1 if s > 0 else 0 (the derivative of relu)."""
    return Activation(
        name="step",
        value=lambda x: (x > 0).astype(np.float64),
        derivative_fn=np.zeros_like,
        torch_fn=lambda x: (x > 0).to(x.dtype),
        breakpoints=(0.0,),
        piecewise_linear=True,
        mean_fn=lambda q: np.where(np.asarray(q) > 0, 0.5, 0.0),
        covariance_fn=lambda rho, q1, q2: (np.pi - np.arccos(rho)) / (2 * np.pi),
        derivative_factory=lambda: constant(0.0),
        description="Heaviside step: 1[s > 0]",
    )
