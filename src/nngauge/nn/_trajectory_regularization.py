"""Trajectory regularization (Raghu et al., "On the expressive power of deep neural networks",
section 3.3 and Figure 11).

The paper replaces every batchnorm layer of a network with a *trajectory regularization
layer*: it "adds to the loss lambda (current length / orig length), and then scales the
outgoing activations by lambda, where lambda is a parameter to be learnt", the added loss being
scaled "with a constant (0.01)"; the length is that of "a piecewise linear trajectory between
adjacent datapoints in the minibatch", and the layer "behaves the same during train and test".

For a minibatch x_1, ..., x_b (batch order) reaching the layer as representations h_1..h_b:

    current = sum_{i=1}^{b-1} ||h_{i+1} - h_i||_2         (h_i flattened)
    orig    = sum_{i=1}^{b-1} ||x_{i+1} - x_i||_2         (the network's inputs, same batch)
    penalty = weight * |lambda| * current / orig,          output = lambda * h.

Choices where the paper is vague, documented:

- "orig length" is read as the length of the same minibatch trajectory in the network's input
  space (the trajectory before the network acted on it: the ratio is the growth factor of
  section 2.2). The layer learns it from a forward pre-hook on the whole model, installed
  once with :meth:`TrajectoryRegularization.attach`; gradients do not flow through it.
- "current length" is the length of the representation arriving at the layer, before the
  scaling by lambda (lambda restores the scale the penalty takes away, as batchnorm's gain).
- |lambda| in the penalty keeps it non-negative (a negative lambda would otherwise reward long
  trajectories); lambda starts at 1.
- weight = 0.01 by default, the paper's constant.
- With fewer than two samples, or a zero-length input trajectory, the penalty is 0.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from nngauge._constraints import constrained
from nngauge._numbers import is_finite
from nngauge.errors import invalid
from nngauge.trajectories import polyline_length

__all__ = ["TrajectoryRegularization", "trajectory_penalty"]


class TrajectoryRegularization(nn.Module):
    """Scales activations by a learnt lambda and exposes lambda * (trajectory growth) as a
    penalty (Raghu et al. section 3.3; see the module docstring for the exact definition).

    After each forward pass, :attr:`penalty` (a scalar tensor with its graph) holds
    weight * |lambda| * current / orig, :attr:`ratio` the detached ratio current / orig; add
    :func:`trajectory_penalty` (the sum over the model's layers) to the loss. Behaves the same
    in train and eval mode.

    Args:
        weight: the constant multiplying the penalty (paper: 0.01).
        init_scale: initial lambda.

    Shapes: input (b, ...) -> output (b, ...).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), TrajectoryRegularization(),
        ...                     nn.Linear(4, 2))
        >>> handle = TrajectoryRegularization.attach(net)
        >>> y = net(torch.randn(8, 3))
        >>> loss = y.pow(2).mean() + trajectory_penalty(net)
        >>> loss.backward()
        >>> net[2].scale.grad is not None
        True
    """

    def __init__(self, *, weight: float = 0.01, init_scale: float = 1.0) -> None:
        super().__init__()
        where = "TrajectoryRegularization()"
        for name, value in (("weight", weight), ("init_scale", init_scale)):
            if not is_finite(value):
                raise invalid(where, f"a finite number {name}", f"{name}={value!r}",
                              f"pass a float {name}")
        if weight < 0:
            raise invalid(where, "weight >= 0", f"weight={weight}", "pass e.g. weight=0.01")
        self.weight = float(weight)
        self.scale = nn.Parameter(torch.tensor(float(init_scale)))
        self.penalty: Optional[torch.Tensor] = None
        self.ratio: float = float("nan")
        self._reference: Optional[tuple[torch.Tensor, int]] = None

    @staticmethod
    def attach(model: nn.Module) -> RemovableHandle:
        """Register on ``model`` the forward pre-hook that records the input trajectory length
        of each batch (the "orig length") for every TrajectoryRegularization inside it.

        Returns the hook's handle (``handle.remove()`` detaches it).
        """
        layers = [m for m in model.modules() if isinstance(m, TrajectoryRegularization)]
        if not layers:
            raise invalid("TrajectoryRegularization.attach()",
                          "a model containing TrajectoryRegularization layers", "none",
                          "insert TrajectoryRegularization() modules first")

        def record(module: nn.Module, args: Any) -> None:
            x = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if x is None or x.ndim == 0:
                return
            with torch.no_grad():
                reference = polyline_length(x.detach())
            for layer in layers:
                layer._reference = (reference, x.shape[0])

        return model.register_forward_pre_hook(record)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        current = polyline_length(x)
        if x.shape[0] < 2:
            self.penalty, self.ratio = current * 0.0, float("nan")
            return self.scale * x
        if self._reference is None or self._reference[1] != x.shape[0]:
            got = ("no input length recorded" if self._reference is None else
                   f"an input batch of {self._reference[1]} samples and {x.shape[0]} here")
            raise invalid("TrajectoryRegularization.forward()",
                          "the length of the same minibatch at the network input", got,
                          "call TrajectoryRegularization.attach(model) once on the whole "
                          "model, and keep the batch's samples in order through it")
        reference = self._reference[0].to(dtype=current.dtype, device=current.device)
        if float(reference) == 0.0:
            self.penalty, self.ratio = current * 0.0, float("nan")
        else:
            ratio = current / reference
            self.penalty = self.weight * self.scale.abs() * ratio
            self.ratio = float(ratio.detach())
        return self.scale * x

    def extra_repr(self) -> str:
        return f"weight={self.weight}"


@constrained()
def trajectory_penalty(model: nn.Module) -> torch.Tensor:
    """Sum of the penalties of the model's TrajectoryRegularization layers from the last
    forward pass (add it to the loss); a zero tensor when none has run."""
    penalties = [m.penalty for m in model.modules()
                 if isinstance(m, TrajectoryRegularization) and m.penalty is not None]
    return torch.stack(penalties).sum() if penalties else torch.zeros(())
