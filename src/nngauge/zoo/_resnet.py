"""ResNet-18 and ResNet-50 in torchvision's and timm's layouts (:func:`resnet18`,
:func:`resnet50`, :func:`resnet_small`)."""

from __future__ import annotations

from functools import partial
from typing import Literal, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Choice, Flag, constrained
from nngauge._vocabulary import renamed
from nngauge.zoo._common import GENERATOR, SIZE, counts, kaiming_fan_out, seeded

Stem = Literal["imagenet", "cifar"]
Layout = Literal["torchvision", "timm"]

_RESNET_OPTIONS = dict(
    num_classes=SIZE, in_channels=SIZE, width=SIZE,
    blocks=counts(1, "a non-empty list or tuple of positive block counts, one per stage"),
    stem=Choice.literal(Stem), layout=Choice.literal(Layout), generator=GENERATOR)
"""Declared once for :func:`resnet18`, :func:`resnet50` and the fast :func:`resnet_small`."""


def _downsample(in_planes: int, planes: int, stride: int) -> Optional[nn.Sequential]:
    """The projection shortcut (1x1 conv + BatchNorm) where the block changes the shape."""
    if stride == 1 and in_planes == planes:
        return None
    return nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                         nn.BatchNorm2d(planes))


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: one ``relu`` module called twice per forward.

    Shapes: (b, in_planes, H, W) -> (b, planes, H / stride, W / stride).
    """

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TimmBasicBlock(nn.Module):
    """timm's ``BasicBlock``: the same function with separate ``act1`` and ``act2`` modules.

    Shapes: (b, in_planes, H, W) -> (b, planes, H / stride, W / stride).
    """

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = _downsample(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        x += shortcut
        return self.act2(x)


class Bottleneck(nn.Module):
    """torchvision's ``Bottleneck`` (ResNet-50): 1x1, 3x3 (the stride), 1x1 convolutions to
    ``4 * planes`` channels, one ``relu`` module called three times; in timm's layout
    (``layout="timm"``) separate ``act1``, ``act2``, ``act3`` modules.

    Shapes: (b, in_planes, H, W) -> (b, 4 planes, H / stride, W / stride).
    """

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1,
                 layout: str = "torchvision") -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.layout = layout
        if layout == "torchvision":
            self.relu = nn.ReLU(inplace=True)
        else:
            self.act1, self.act2, self.act3 = (nn.ReLU(inplace=True) for _ in range(3))
        self.downsample = _downsample(in_planes, out_planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acts = ((self.relu,) * 3 if self.layout == "torchvision"
                else (self.act1, self.act2, self.act3))
        shortcut = x if self.downsample is None else self.downsample(x)
        out = acts[0](self.bn1(self.conv1(x)))
        out = acts[1](self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += shortcut
        return acts[2](out)


class ResNet(nn.Module):
    """A ResNet of BasicBlocks (:func:`resnet18`) or Bottlenecks (:func:`resnet50`) with
    torchvision's or timm's module names.

    Shapes: (b, in_channels, H, W) -> (b, num_classes).
    """

    def __init__(self, num_classes: int, in_channels: int, width: int, blocks: Sequence[int],
                 stem: str, layout: str, bottleneck: bool = False) -> None:
        super().__init__()
        self.layout = layout
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        if layout == "torchvision":
            self.relu = nn.ReLU(inplace=True)
        else:
            self.act1 = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if stem == "imagenet" else nn.Identity()
        if bottleneck:
            block, expansion = partial(Bottleneck, layout=layout), Bottleneck.expansion
        else:
            block, expansion = (BasicBlock if layout == "torchvision" else TimmBasicBlock), 1
        in_planes = width
        for i, count in enumerate(blocks):
            planes = width * 2**i
            stride = 1 if i == 0 else 2
            layer = [block(in_planes, planes, stride)]
            layer += [block(planes * expansion, planes) for _ in range(count - 1)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*layer))
            in_planes = planes * expansion
        self.num_layers = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        kaiming_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stem_act = self.relu if self.layout == "torchvision" else self.act1
        x = self.maxpool(stem_act(self.bn1(self.conv1(x))))
        for i in range(self.num_layers):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


@renamed(seed="generator")
@constrained(**_RESNET_OPTIONS)
def resnet18(
    num_classes: int = 10,
    *,
    in_channels: int = 3,
    width: int = 64,
    blocks: Sequence[int] = (2, 2, 2, 2),
    stem: Stem = "imagenet",
    layout: Layout = "torchvision",
    generator: torch.Generator | int = 0,
) -> ResNet:
    """ResNet-18 (BasicBlocks, BatchNorm2d), as torchvision's ``resnet18`` or timm's.

    Modules ``conv1, bn1, relu | act1, maxpool, layer1..layer4, avgpool, fc``; stage i has
    ``width * 2**i`` channels and stride 2 from the second stage on. Convolutions get
    torchvision's He-normal (fan-out) initialization.

    Args:
        num_classes: output width.
        in_channels: input channels.
        width: channels of the stem and the first stage.
        blocks: BasicBlocks per stage (one ``layer<i>`` per entry).
        stem: ``"imagenet"`` (7x7 stride-2 conv, BN, ReLU, 3x3 stride-2 max pool; 32x32 inputs
            reach the first stage at 8x8) or ``"cifar"`` (3x3 stride-1 conv, BN, ReLU, no pool).
        layout: ``"torchvision"`` (each block calls one ``relu`` module twice; the stem
            activation is ``relu``) or ``"timm"`` (``act1`` and ``act2`` modules).
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).

    Example:
        >>> import torch
        >>> from nngauge.zoo import resnet18
        >>> resnet18(stem="cifar", width=8)(torch.randn(2, 3, 16, 16)).shape
        torch.Size([2, 10])
    """
    with seeded(generator):
        return ResNet(num_classes, in_channels, width, blocks, stem, layout)


@constrained(**_RESNET_OPTIONS, zero_init_last=Flag())
def resnet50(
    num_classes: int = 10,
    *,
    in_channels: int = 3,
    width: int = 64,
    blocks: Sequence[int] = (3, 4, 6, 3),
    stem: Stem = "imagenet",
    layout: Layout = "torchvision",
    zero_init_last: bool = False,
    generator: torch.Generator | int = 0,
) -> ResNet:
    """ResNet-50 (Bottleneck blocks, BatchNorm2d), as torchvision's ``resnet50`` or timm's:
    25,557,032 parameters with ``num_classes=1000``.

    Modules as :func:`resnet18`; stage i ends with ``4 * width * 2**i`` channels. Convolutions
    get torchvision's He-normal (fan-out) initialization.

    Args:
        num_classes, in_channels, width, blocks, stem, layout, generator: as in
            :func:`resnet18` (blocks per stage default (3, 4, 6, 3)).
        zero_init_last: zero the scale of each block's last BatchNorm (``bn3``), so every
            residual branch starts as zero and each block as the identity plus its
            shortcut: timm's default (``zero_init_last=True``), torchvision's
            ``zero_init_residual=True`` (off by default there).

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).

    Example:
        >>> import torch
        >>> from nngauge.zoo import resnet50
        >>> resnet50(width=4, blocks=(1, 1, 1, 1))(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    with seeded(generator):
        model = ResNet(num_classes, in_channels, width, blocks, stem, layout, bottleneck=True)
    if zero_init_last:
        for module in model.modules():
            if isinstance(module, Bottleneck):
                nn.init.zeros_(module.bn3.weight)
    return model


@renamed(seed="generator")
@constrained(**_RESNET_OPTIONS)
def resnet_small(
    num_classes: int = 10,
    *,
    in_channels: int = 3,
    width: int = 16,
    blocks: Sequence[int] = (1, 1, 1, 1),
    stem: Stem = "imagenet",
    layout: Layout = "torchvision",
    generator: torch.Generator | int = 0,
) -> ResNet:
    """A fast :func:`resnet18` for tests: width 16, one block per stage.

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).
    """
    return resnet18(num_classes, in_channels=in_channels, width=width, blocks=blocks, stem=stem,
                    layout=layout, generator=generator)


__all__ = ["BasicBlock", "Bottleneck", "ResNet", "TimmBasicBlock", "resnet18", "resnet50",
           "resnet_small"]
