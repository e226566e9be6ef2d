"""What kind of layer a module is, and restoring a model's state after a measure.

State changed during a measure (train/eval mode, requires_grad, buffers, parameters when
asked) is restored on exit, also when the model raises.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Literal

import torch
from torch import nn

from nngauge.activations._torch import ActivationModule

LayerKind = Literal["linear", "conv", "norm", "activation", "pool", "other"]

ACTIVATIONS = (
    nn.ReLU, nn.LeakyReLU, nn.Hardtanh, nn.Tanh, nn.Sigmoid, nn.SELU, nn.ELU, nn.GELU, nn.SiLU,
    nn.Softplus, nn.Mish, nn.PReLU, nn.ReLU6, nn.Softsign, nn.Tanhshrink, nn.Hardswish,
    nn.Hardsigmoid, nn.CELU, nn.RReLU, nn.LogSigmoid, nn.Hardshrink, nn.Softshrink,
    nn.Threshold, ActivationModule,
)
"""torch's elementwise activation classes (and nngauge's wrapper)."""
RESHAPES = (nn.Identity, nn.Flatten, nn.Unflatten, nn.PixelShuffle, nn.PixelUnshuffle,
            nn.ChannelShuffle)
"""torch's modules that only move entries: the identity (timm's ``drop_block`` and ``aa``
placeholders) and reshapes."""
_PASSTHROUGH = (*RESHAPES, nn.modules.dropout._DropoutNd)
_NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm,
          nn.modules.instancenorm._InstanceNorm)
_POOLS = (nn.modules.pooling._AvgPoolNd, nn.modules.pooling._MaxPoolNd,
          nn.modules.pooling._AdaptiveAvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)


def layer_kind(module: nn.Module) -> LayerKind:
    """Classify a module: linear, conv, norm, activation, pool or other."""
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    if isinstance(module, _NORMS):
        return "norm"
    if isinstance(module, ACTIVATIONS) or getattr(module, "is_activation", False):
        return "activation"
    if isinstance(module, _POOLS):
        return "pool"
    return "other"


def passthrough(module: nn.Module) -> bool:
    """Whether ``module`` is one of torch's no-op or reshape classes (not a user's subclass,
    which may do more): the identity, reshapes, and dropout (the identity in eval mode). No
    measure reads them as layers, and results do not list them as unclassified."""
    return isinstance(module, _PASSTHROUGH) and type(module).__module__.startswith("torch.nn")


@contextmanager
def preserved_state(model: nn.Module, *, parameters: bool = False) -> Iterator[nn.Module]:
    """Restore, on exit and also on error: the train/eval mode of every submodule, the
    requires_grad flag of every parameter, every buffer (batchnorm running statistics move in
    train-mode forward passes) and, when ``parameters`` is True, every parameter value."""
    modes = {m: m.training for m in model.modules()}
    grads = {p: p.requires_grad for p in model.parameters()}
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    if parameters:
        saved += [(p, p.detach().clone()) for p in model.parameters()]
    try:
        yield model
    finally:
        for module, mode in modes.items():
            module.training = mode
        for param, flag in grads.items():
            param.requires_grad_(flag)
        with torch.no_grad():
            for tensor, value in saved:
                tensor.copy_(value)
