"""A family of networks nngauge does not ship, as a user would write it, for the tests of
studies over a user's builder (tests/test_builder_study.py) and ``nngauge rank``: a small
transformer classifier reading an 8 x 8 digit as 8 tokens of 8 pixels, its data and its
training loop."""

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm transformer block: attention and a two-layer MLP, each on a residual."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class DigitTransformer(nn.Module):
    def __init__(self, depth: int, heads: int, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.position = nn.Parameter(0.02 * torch.randn(8, width))
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(depth)))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        tokens = self.embed(x.reshape(len(x), 8, 8)) + self.position
        return self.head(self.blocks(tokens).mean(dim=1))


def build(depth: int, heads: int, width: int = 16) -> nn.Module:
    """The candidate of ``depth`` blocks with ``heads`` attention heads."""
    if depth == 0:
        raise ValueError("depth must be >= 1")
    return DigitTransformer(depth, heads, width)


def data(seed: int = 0):
    """scikit-learn's digits as (inputs, labels) tensors, scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (torch.tensor(digits.data[:400] / 16.0, dtype=torch.float32),
            torch.tensor(digits.target[:400]))


def dataset():
    """The same data as a map-style Dataset of (input, label) items."""
    return torch.utils.data.TensorDataset(*data())


def train(model, data, config):
    """A few epochs of Adam; the metrics the study records."""
    generator = torch.Generator().manual_seed(config["seed"])
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("lr", 3e-3))
    x, y = data.train
    for _ in range(config.get("epochs", 2)):
        for batch in torch.randperm(len(y), generator=generator).split(32):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = {name: (model(part.inputs).argmax(1) == part.labels).float().mean().item()
                    for name, part in (("train", data.train), ("test", data.test))}
    return {"train_accuracy": accuracy["train"], "test_accuracy": accuracy["test"],
            "epochs": config.get("epochs", 2)}


def train_fails(model, data, config):
    """A training loop that breaks: the candidate's row records it."""
    raise RuntimeError("out of memory (planted)")


def train_warns(model, data, config):
    """The training loop, warning with a number in its text as measures do ("did not
    converge after N iterations"): the study counts the warning per unit."""
    import warnings

    warnings.warn(f"lengths did not converge after {10 + config['seed'] % 7} iterations")
    return train(model, data, config)
