"""A family nngauge does not ship, for ``nngauge rank``: a small CNN of custom residual blocks
on 8 x 8 digit images (``--data digits:image``), built from keyword arguments.

    nngauge rank examples/rank_family.py:build --grid depth=1,3,6 --grid width=8,32 \\
        --grid skip=true,false --data digits:image --out rank.html --json rank.json
"""

import torch
from torch import nn


class GatedBlock(nn.Module):
    """conv -> GELU -> conv, scaled by a learned gate, added to the input when ``skip``."""

    def __init__(self, width: int, skip: bool):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.act = nn.GELU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.gate = nn.Parameter(torch.ones(1))
        self.skip = skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.gate * self.conv2(self.act(self.conv1(x)))
        return x + out if self.skip else out


def build(depth: int = 2, width: int = 16, skip: bool = True, classes: int = 10) -> nn.Module:
    """A stem, ``depth`` gated blocks of ``width`` channels, pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
        *(GatedBlock(width, skip) for _ in range(depth)),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))
