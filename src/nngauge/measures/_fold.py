"""Batchnorm folding: the same function without batchnorm layers (generalization paper, app. A).

In eval mode a batchnorm layer is the affine map y = s (x - mu) + beta per unit (channel) with
s = gamma / sqrt(var + eps) (gamma = 1, beta = 0 without affine parameters). Following the
linear (or convolution) layer W x + b that feeds it, the pair is the single layer

    W' = diag(s) W,    b' = s (b - mu) + beta,

which is how the generalization paper computes norms of batchnorm networks ("we reparametrize
the network to one that represents the exact same function without Batch Normalization", after
Neyshabur et al. 2016). The folded model computes the eval-mode function of the original one.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from nngauge.errors import invalid

_WHERE = "fold_batchnorm()"
_BATCHNORM = nn.modules.batchnorm._BatchNorm
_FOLDABLE = (nn.Linear, nn.modules.conv._ConvNd)


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` computing its eval-mode function without batchnorm layers.

    Every batchnorm layer must directly follow a ``nn.Linear`` or ``nn.Conv{1,2,3}d`` as the
    next child of the same container (``nn.Sequential`` order, or registration order of the
    blocks of :func:`nngauge.nn.mlp`); it is folded into that layer (W' = diag(s) W,
    b' = s (b - mu) + beta, s = gamma / sqrt(var + eps), running statistics) and replaced by
    ``nn.Identity``. The user's model is never changed; the copy is returned in eval mode.

    Args:
        model: any module; batchnorm layers must keep running statistics.

    Returns:
        The folded copy (no batchnorm modules left).

    Raises:
        InvalidInputError: a batchnorm layer that does not follow a linear/conv layer, that has
            no running statistics, or an nngauge MLP whose skip connections read the linear
            output before its normalization.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
        >>> _ = net(torch.randn(16, 3)); _ = net.eval()
        >>> folded = fold_batchnorm(net)
        >>> x = torch.randn(5, 3)
        >>> torch.allclose(folded(x), net(x), atol=1e-6)
        True
    """
    if not isinstance(model, nn.Module):
        raise invalid(_WHERE, "a torch.nn.Module", type(model).__name__, "pass the network")
    config = getattr(model, "config", None)
    if (getattr(config, "skip", None) is not None and getattr(config, "norm", None) == "batch"
            and getattr(config, "skip_start", None) == "linear"):
        raise invalid(_WHERE, "an MLP whose skips start after the normalization",
                      "skip connections that read the linear output before batchnorm",
                      "build the MLP with skip_start='norm' or skip=None to fold batchnorm")
    folded = copy.deepcopy(model).eval()
    _fold_children(folded, prefix="")
    leftover = [name for name, m in folded.named_modules() if isinstance(m, _BATCHNORM)]
    if leftover:
        raise invalid(_WHERE, "batchnorm layers that directly follow a Linear or Conv layer",
                      f"batchnorm not preceded by one: {leftover}",
                      "put each BatchNorm right after its Linear/Conv in the same container")
    return folded


def _fold_children(parent: nn.Module, prefix: str) -> None:
    children = list(parent.named_children())
    previous = None
    for name, child in children:
        full = f"{prefix}{name}"
        if isinstance(child, _BATCHNORM) and previous is not None:
            prev_name, prev_module = previous
            setattr(parent, prev_name, _folded_layer(prev_module, child, full))
            setattr(parent, name, nn.Identity())
            previous = None
            continue
        _fold_children(child, prefix=f"{full}.")
        foldable = (isinstance(child, _FOLDABLE)
                    and not isinstance(child, nn.modules.conv._ConvTransposeNd))
        previous = (name, child) if foldable else None


def _folded_layer(layer: nn.Module, norm: nn.Module, name: str) -> nn.Module:
    if norm.running_mean is None or norm.running_var is None:
        raise invalid(_WHERE, "batchnorm layers with running statistics",
                      f"{name!r} with track_running_stats=False (batch statistics only)",
                      "train with track_running_stats=True; such a layer has no fixed function")
    with torch.no_grad():
        dtype = layer.weight.dtype
        scale = torch.rsqrt(norm.running_var.to(torch.float64) + norm.eps)
        shift = norm.running_mean.to(torch.float64)
        gamma = norm.weight.to(torch.float64) if norm.weight is not None else 1.0
        beta = norm.bias.to(torch.float64) if norm.bias is not None else 0.0
        scale = scale * gamma
        bias = layer.bias.to(torch.float64) if layer.bias is not None else torch.zeros_like(shift)
        new = copy.deepcopy(layer)
        if layer.bias is None:
            new.bias = nn.Parameter(torch.zeros(scale.shape[0], dtype=dtype,
                                                device=layer.weight.device))
        shape = (-1,) + (1,) * (layer.weight.dim() - 1)
        new.weight.copy_((layer.weight.to(torch.float64) * scale.reshape(shape)).to(dtype))
        new.bias.copy_((scale * (bias - shift) + beta).to(dtype))
    return new
