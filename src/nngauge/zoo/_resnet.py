"""ResNet-18 in torchvision's and timm's layouts (:func:`resnet18`, :func:`resnet_small`)."""

from __future__ import annotations

from typing import Literal, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Choice, constrained
from nngauge._vocabulary import renamed
from nngauge.zoo._common import GENERATOR, SIZE, counts, kaiming_fan_out, seeded

Stem = Literal["imagenet", "cifar"]
Layout = Literal["torchvision", "timm"]

_RESNET_OPTIONS = dict(
    num_classes=SIZE, in_channels=SIZE, width=SIZE,
    blocks=counts(1, "a non-empty list or tuple of positive block counts, one per stage"),
    stem=Choice.literal(Stem), layout=Choice.literal(Layout), generator=GENERATOR)
"""Declared once for :func:`resnet18` and its fast variant :func:`resnet_small`."""


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


class ResNet(nn.Module):
    """A BasicBlock ResNet with torchvision's module names (see :func:`resnet18`).

    Shapes: (b, in_channels, H, W) -> (b, num_classes).
    """

    def __init__(self, num_classes: int, in_channels: int, width: int, blocks: Sequence[int],
                 stem: str, layout: str) -> None:
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
        block = BasicBlock if layout == "torchvision" else TimmBasicBlock
        in_planes = width
        for i, count in enumerate(blocks):
            planes = width * 2**i
            stride = 1 if i == 0 else 2
            layer = [block(in_planes, planes, stride)]
            layer += [block(planes, planes) for _ in range(count - 1)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*layer))
            in_planes = planes
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


__all__ = ["BasicBlock", "ResNet", "TimmBasicBlock", "resnet18", "resnet_small"]
