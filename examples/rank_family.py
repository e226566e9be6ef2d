"""A family nngauge does not ship, for ``nngauge rank`` and a study over it: a small CNN of
custom residual blocks on 8 x 8 digit images (``--data digits:image``), built from keyword
arguments, and the training loop a user would bring (``train``).

    nngauge rank examples/rank_family.py:build --grid depth=1,3,6 --grid width=8,32 \\
        --grid skip=true,false --data digits:image --out rank.html --json rank.json
    nngauge study run examples/study_builder.toml --db sqlite:///family.db
    nngauge study report sqlite:///family.db --out family.html
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


def train(model: nn.Module, data, config: dict) -> dict:
    """Adam for ``config["epochs"]`` epochs over ``data.train`` in minibatches of 32; the
    accuracies the study records (``data`` has ``train`` and ``test``, each (inputs, labels))."""
    generator = torch.Generator().manual_seed(config["seed"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("lr", 1e-3))
    inputs, labels = data.train
    model.train()
    for _ in range(config.get("epochs", 5)):
        for batch in torch.randperm(len(labels), generator=generator).split(32):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(inputs[batch]), labels[batch]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = {name: (model(x).argmax(1) == y).float().mean().item()
                    for name, (x, y) in (("train", data.train), ("test", data.test))}
    return {"train_accuracy": accuracy["train"], "test_accuracy": accuracy["test"]}
