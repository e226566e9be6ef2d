"""Torch side of activations: the module wrapper and autograd derivatives (imports torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

if TYPE_CHECKING:  # pragma: no cover
    from nngauge.activations._base import Activation


class ActivationModule(nn.Module):
    """Applies an :class:`~nngauge.activations.Activation` elementwise.

    Shapes: any input shape; the output has the input's shape.

    Example:
        >>> import torch
        >>> from nngauge.activations import get
        >>> get("relu").module()(torch.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """

    def __init__(self, activation: "Activation") -> None:
        super().__init__()
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation.torch_fn(x)

    def extra_repr(self) -> str:
        return self.activation.label


def elementwise_derivative(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn'(x) for an elementwise ``fn``, by one backward pass (graph kept for higher orders)."""
    with torch.enable_grad():
        xs = x if x.requires_grad else x.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(fn(xs).sum(), xs, create_graph=x.requires_grad)
    return grad
