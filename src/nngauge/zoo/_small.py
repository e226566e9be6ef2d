"""Small CNNs and MLPs, each carrying one block or layer type that trips measurement tools:
GroupNorm, timm's MobileNetV3 and ConvNeXt blocks, Dropout, and activations known only by
behaviour."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nngauge._constraints import constrained
from nngauge._vocabulary import renamed
from nngauge.zoo._common import (
    GENERATOR,
    PROBABILITY,
    SIZE,
    counts,
    kaiming_fan_out,
    seeded,
    trunc_normal_init,
)
from nngauge.zoo._vit import Mlp


@renamed(seed="generator")
@constrained(in_channels=SIZE, num_classes=SIZE,
             channels=counts(4, "a non-empty list or tuple of channel counts, each a positive "
                                "multiple of 4 (GroupNorm(4))"), generator=GENERATOR)
def groupnorm_cnn(
    in_channels: int = 3,
    num_classes: int = 10,
    *,
    channels: Sequence[int] = (16, 32),
    generator: torch.Generator | int = 0,
) -> nn.Sequential:
    """A GroupNorm CNN as one ``nn.Sequential``: per stage Conv2d(3x3, padding 1),
    GroupNorm(4 groups), ReLU, MaxPool2d(2); then AdaptiveAvgPool2d(1), Flatten, Linear.
    PyTorch's default initialization.

    Args:
        in_channels: input channels.
        num_classes: output width.
        channels: output channels of each stage (multiples of 4).
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes); H and W are
        halved by each stage.
    """
    with seeded(generator):
        layers: list[nn.Module] = []
        for c_in, c_out in zip((in_channels, *channels), channels):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(4, c_out), nn.ReLU(),
                       nn.MaxPool2d(2)]
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], num_classes)]
        return nn.Sequential(*layers)


class BatchNormAct2d(nn.BatchNorm2d):
    """timm's ``BatchNormAct2d``: an ``nn.BatchNorm2d`` whose forward also applies ``act``.

    An ``isinstance(m, nn.BatchNorm2d)`` test finds it, yet in eval mode it is not affine.
    Shapes: (b, C, H, W) -> (b, C, H, W).

    Args:
        num_features: channels C.
        act_layer: the activation class, instantiated as ``self.act``.
    """

    def __init__(self, num_features: int, act_layer: Callable[[], nn.Module] = nn.ReLU) -> None:
        super().__init__(num_features)
        self.act = act_layer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(super().forward(x))


class SqueezeExcite(nn.Module):
    """Squeeze-excitation: pool, 1x1 conv reduce, ReLU, 1x1 conv expand, Hardsigmoid gate that
    multiplies the input. Shapes: (b, C, H, W) -> (b, C, H, W)."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv_reduce = nn.Conv2d(channels, reduced, 1)
        self.act1 = nn.ReLU(inplace=True)
        self.conv_expand = nn.Conv2d(reduced, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.conv_expand(self.act1(self.conv_reduce(self.pool(x))))
        return x * self.gate(scale)


class InvertedResidual(nn.Module):
    """timm's MobileNetV3 ``InvertedResidual`` (stride 1).

    conv_pw (1x1 expand) + bn1 (BatchNormAct2d, Hardswish), conv_dw (3x3 depthwise) + bn2
    (BatchNormAct2d, ReLU), se, conv_pwl (1x1 project) + bn3 (BatchNorm2d), and the residual
    add when input and output channels match. Shapes: (b, c_in, H, W) -> (b, c_out, H, W).
    """

    def __init__(self, c_in: int, c_out: int, expanded: int) -> None:
        super().__init__()
        self.has_skip = c_in == c_out
        self.conv_pw = nn.Conv2d(c_in, expanded, 1, bias=False)
        self.bn1 = BatchNormAct2d(expanded, act_layer=nn.Hardswish)
        self.conv_dw = nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded, bias=False)
        self.bn2 = BatchNormAct2d(expanded, act_layer=nn.ReLU)
        self.se = SqueezeExcite(expanded, expanded // 4)
        self.conv_pwl = nn.Conv2d(expanded, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv_dw(self.bn1(self.conv_pw(x))))
        out = self.bn3(self.conv_pwl(self.se(out)))
        return out + x if self.has_skip else out


class MobileNetBlockNet(nn.Module):
    """MobileNetV3 stem, one inverted-residual block and a linear head (see
    :func:`mobilenet_block_net`). Shapes: (b, in_channels, H, W) -> (b, num_classes)."""

    def __init__(self, in_channels: int, num_classes: int, width: int) -> None:
        super().__init__()
        self.conv_stem = nn.Conv2d(in_channels, width, 3, stride=2, padding=1, bias=False)
        self.bn1 = BatchNormAct2d(width, act_layer=nn.Hardswish)
        self.blocks = nn.Sequential(InvertedResidual(width, width, 4 * width))
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(width, num_classes)
        kaiming_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.bn1(self.conv_stem(x)))
        return self.classifier(self.flatten(self.global_pool(x)))


@renamed(seed="generator")
@constrained(in_channels=SIZE, num_classes=SIZE, width=SIZE, generator=GENERATOR)
def mobilenet_block_net(
    in_channels: int = 3,
    num_classes: int = 10,
    *,
    width: int = 16,
    generator: torch.Generator | int = 0,
) -> MobileNetBlockNet:
    """A MobileNetV3-style network in timm's layout, built around :class:`BatchNormAct2d`.

    Modules ``conv_stem`` (3x3, stride 2) and ``bn1`` (BatchNormAct2d, Hardswish), then
    ``blocks.0``, an inverted residual of expansion 4 (``conv_pw, bn1, conv_dw, bn2,
    se.conv_reduce, se.act1, se.conv_expand, se.gate, conv_pwl, bn3``, residual add), then
    ``global_pool``, ``flatten`` and ``classifier``. torchvision's convolution initialization.

    Args:
        in_channels: input channels.
        num_classes: output width.
        width: channels of the stem and the block (which expands to 4 * width channels and
            squeezes them to width in the squeeze-excitation).
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).
    """
    with seeded(generator):
        return MobileNetBlockNet(in_channels, num_classes, width)


class LayerNorm2d(nn.LayerNorm):
    """timm's ``LayerNorm2d``: LayerNorm over the channels of a channels-first map.

    Shapes: (b, C, H, W) -> (b, C, H, W).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class GELUTanh(nn.GELU):
    """timm's ``GELUTanh`` as an ``nn.GELU`` subclass: ``isinstance(m, nn.GELU)`` holds, yet it
    is the tanh approximation (``approximate="tanh"``), not the exact GELU."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")


class LayerScale(nn.Module):
    """A learnable per-channel scale ``gamma`` on the last dimension.

    Shapes: (..., dim) -> (..., dim).
    """

    def __init__(self, dim: int, init_value: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_value * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class ConvNeXtBlock(nn.Module):
    """timm's ``ConvNeXtBlock``: depthwise 7x7 conv, channels-last LayerNorm, MLP (GELUTanh),
    LayerScale, residual add. Shapes: (b, dim, H, W) -> (b, dim, H, W)."""

    def __init__(self, dim: int, ls_init_value: float = 0.1) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim, GELUTanh)
        self.ls = LayerScale(dim, ls_init_value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv_dw(x).permute(0, 2, 3, 1)
        x = self.ls(self.mlp(self.norm(x)))
        return x.permute(0, 3, 1, 2) + shortcut


class ConvNeXtBlockNet(nn.Module):
    """ConvNeXt stem, one stage of blocks and a LayerNorm head (see
    :func:`convnext_block_net`). Shapes: (b, in_channels, H, W) -> (b, num_classes)."""

    def __init__(self, in_channels: int, num_classes: int, dim: int, depth: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, dim, 4, stride=4),
                                  LayerNorm2d(dim, eps=1e-6))
        self.blocks = nn.Sequential(*[ConvNeXtBlock(dim) for _ in range(depth)])
        self.head_norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        trunc_normal_init(self, (nn.Conv2d, nn.Linear))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(self.head_norm(x.mean((2, 3))))


@renamed(seed="generator")
@constrained(in_channels=SIZE, num_classes=SIZE, dim=SIZE, depth=SIZE, generator=GENERATOR)
def convnext_block_net(
    in_channels: int = 3,
    num_classes: int = 10,
    *,
    dim: int = 32,
    depth: int = 2,
    generator: torch.Generator | int = 0,
) -> ConvNeXtBlockNet:
    """A ConvNeXt-Atto-style network in timm's layout.

    Modules ``stem`` (Conv2d kernel 4 stride 4, :class:`LayerNorm2d`), ``blocks.<i>``
    (``conv_dw`` 7x7 depthwise, permute to channels-last, ``norm``, ``mlp.fc1`` (dim -> 4 dim),
    ``mlp.act`` (:class:`GELUTanh`), ``mlp.fc2``, ``ls`` (:class:`LayerScale`, gamma 0.1 so that
    the blocks matter at initialization; timm uses 1e-6), permute back, residual add), then a
    global average pool computed in ``forward`` (no module), ``head_norm`` and ``head``.
    timm's initialization: truncated N(0, 0.02^2) conv and Linear weights, zero biases.

    Args:
        in_channels: input channels.
        num_classes: output width.
        dim: channels.
        depth: number of blocks.
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes); H and W are
        multiples of 4.
    """
    with seeded(generator):
        return ConvNeXtBlockNet(in_channels, num_classes, dim, depth)


@renamed(seed="generator")
@constrained(d_in=SIZE, width=SIZE, depth=SIZE, num_classes=SIZE, p=PROBABILITY,
             generator=GENERATOR)
def dropout_mlp(
    d_in: int = 40,
    width: int = 64,
    *,
    depth: int = 3,
    num_classes: int = 3,
    p: float = 0.5,
    generator: torch.Generator | int = 0,
) -> nn.Sequential:
    """An MLP with dropout as one ``nn.Sequential``: ``depth`` times Linear, ReLU, Dropout(p),
    then a Linear head. PyTorch's default initialization.

    Args:
        d_in: input width.
        width: hidden width.
        depth: hidden layers.
        num_classes: output width.
        p: dropout probability.
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode (dropout active): (b, d_in) -> (b, num_classes).
    """
    with seeded(generator):
        layers: list[nn.Module] = []
        features = d_in
        for _ in range(depth):
            layers += [nn.Linear(features, width), nn.ReLU(), nn.Dropout(p)]
            features = width
        layers.append(nn.Linear(features, num_classes))
        return nn.Sequential(*layers)


class QuickGELU(nn.Module):
    """CLIP's ``QuickGELU``: x sigmoid(1.702 x), a GELU approximation that is not ``nn.GELU``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Swish(nn.Module):
    """A parameter-free custom Swish (SiLU): x sigmoid(x), a class no tool has heard of."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


@renamed(seed="generator")
@constrained(d_in=SIZE, width=SIZE, num_classes=SIZE, generator=GENERATOR)
def elementwise_zoo_net(
    d_in: int = 16,
    width: int = 32,
    *,
    num_classes: int = 3,
    generator: torch.Generator | int = 0,
) -> nn.Sequential:
    """An MLP as one ``nn.Sequential`` whose three activations are, in order,
    :class:`QuickGELU`, ``nn.Hardswish`` and :class:`Swish`: measures must recognise
    activations by behaviour, not by class. PyTorch's default initialization.

    Args:
        d_in: input width.
        width: hidden width.
        num_classes: output width.
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: (b, d_in) -> (b, num_classes).
    """
    with seeded(generator):
        return nn.Sequential(
            nn.Linear(d_in, width), QuickGELU(),
            nn.Linear(width, width), nn.Hardswish(),
            nn.Linear(width, width), Swish(),
            nn.Linear(width, num_classes),
        )


__all__ = ["BatchNormAct2d", "GELUTanh", "LayerNorm2d", "LayerScale", "QuickGELU", "Swish",
           "convnext_block_net", "dropout_mlp", "elementwise_zoo_net", "groupnorm_cnn",
           "mobilenet_block_net"]
