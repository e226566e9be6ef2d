"""The empirical NTK per layer against a plain loop of per-sample gradients.

``kernel_conditioning(kind="ntk")`` forms each layer's NTK from one vmapped backward pass per
chunk of probes, with Linear and convolution weight gradients read from their inputs and
output gradients (``nngauge._internal.ntk``). The check: for every layer, each sample's
gradient of <u, h(x_i)> by ``torch.autograd.grad`` on that sample alone, the same probes u
(drawn in the same order from the same seed), Theta = sum_u G G^T / (units x probes)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import kernel_conditioning
from nngauge.errors import BudgetExceededError
from nngauge.zoo import resnet_small

SEED = 5


def loop_ntk(model: nn.Module, x: torch.Tensor, layers: list[str]) -> dict[str, np.ndarray]:
    """Per-layer NTK by a loop over samples and probes (autograd.grad, one sample at a time),
    probes drawn as kernel_conditioning draws them: exact up to 16 units, else 8 Gaussian."""
    params = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(SEED)
    kernels = {}
    for name in [*layers, "output"]:
        def value(xi, name=name):
            if name == "output":
                return model(xi)
            module, _, call = name.partition("#")  # "twice#2": the second call of twice
            seen = []
            handle = model.get_submodule(module).register_forward_hook(
                lambda m, a, out: seen.append(out))
            try:
                model(xi)
            finally:
                handle.remove()
            return seen[int(call or 1) - 1]

        units = value(x[:1]).numel()
        probes = (torch.eye(units, dtype=torch.float64) if units <= 16 else
                  torch.randn(8, units, generator=gen, dtype=torch.float64))
        theta = torch.zeros(len(x), len(x), dtype=torch.float64)
        for u in probes:
            rows = []
            for i in range(len(x)):
                h = value(x[i:i + 1]).reshape(-1)
                grads = torch.autograd.grad(h, params, grad_outputs=u.to(h.dtype),
                                            allow_unused=True)
                rows.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                                       for g, p in zip(grads, params)]))
            g = torch.stack(rows).double()
            theta += g @ g.T
        kernels[name] = (theta / (units * (1 if units <= 16 else 8))).numpy()
    return kernels


class Mixed(nn.Module):
    """Every kind of weight the NTK meets: grouped and strided convolutions, a Conv1d, a
    Linear over positions, a Linear called twice, a weight tied to an embedding-like use, a
    bare parameter, LayerNorm and BatchNorm (eval)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, stride=2)
        self.grouped = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.conv1d = nn.Conv1d(4, 6, 3, padding=1)
        self.tokens = nn.Linear(6, 5)
        self.norm = nn.LayerNorm(5)
        self.twice = nn.Linear(5, 5)
        self.tied = nn.Linear(5, 3, bias=False)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 5))

    def forward(self, x):
        h = torch.relu(self.bn(self.grouped(torch.tanh(self.conv(x)))))   # (b, 4, 3, 3)
        h = torch.tanh(self.conv1d(h.flatten(2)))                          # (b, 6, 9)
        h = self.norm(self.tokens(h.transpose(1, 2))) * self.scale         # (b, 9, 5)
        h = self.twice(torch.tanh(self.twice(h)))
        h = torch.tanh(h) + h @ self.tied.weight.T @ self.tied.weight      # tied: used 3 times
        return self.tied(h).mean(1)                                        # (b, 3)


CASES = {
    "resnet_small": (lambda: resnet_small(layout="timm", generator=0),
                     lambda g: torch.randn(5, 3, 32, 32, generator=g)),
    "mixed": (Mixed, lambda g: torch.randn(5, 2, 6, 6, generator=g)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ntk_per_layer_equals_the_per_sample_loop(case):
    build, inputs = CASES[case]
    torch.manual_seed(0)
    model = build().double().eval()
    x = inputs(torch.Generator().manual_seed(1)).double()
    result = kernel_conditioning(model, x, kind="ntk", generator=SEED)
    layers = [row.name for row in result.layers if row.name != "output"]
    assert len(layers) >= 5
    expected = loop_ntk(model, x, layers)
    assert [row.name for row in result.layers] == [*layers, "output"]
    for row in result.layers:
        np.testing.assert_allclose(row.kernel, expected[row.name], rtol=1e-9,
                                   atol=1e-12 * np.abs(expected[row.name]).max(),
                                   err_msg=row.name)
    assert not result.mode.notes


def test_the_loop_reference_tells_a_wrong_kernel():
    """The comparison can fail: another seed's probes give another kernel."""
    model = resnet_small(layout="timm", generator=0).double().eval()
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)).double()
    result = kernel_conditioning(model, x, kind="ntk", generator=SEED + 1, layers=["conv1"])
    expected = loop_ntk(model, x, ["conv1"])
    assert not np.allclose(result.layers[0].kernel, expected["conv1"], rtol=1e-3)


class ItemCalling(nn.Module):
    """Data-dependent Python control flow: vmap cannot batch it, a loop can."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        h = self.fc(x)
        return h * 2 if float(h.detach().abs().max()) > 1e6 else h


def test_a_model_vmap_cannot_batch_falls_back_to_the_loop_and_says_so():
    torch.manual_seed(0)
    model = ItemCalling().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    result = kernel_conditioning(model, x, kind="ntk", layers=[])
    assert any("fell back to a loop" in note for note in result.mode.notes)
    np.testing.assert_allclose(result.layers[-1].kernel, loop_ntk(model, x, [])["output"],
                               rtol=1e-10)


class FailsUnderGrad(nn.Module):
    """Raises an error without a message once gradients are on (not a vmap limitation)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        if torch.is_grad_enabled():
            raise ValueError()
        return self.fc(x)


def test_an_error_in_the_model_is_not_swallowed():
    with pytest.raises(ValueError):
        kernel_conditioning(FailsUnderGrad(), torch.randn(4, 3), kind="ntk", layers=[])


class Slow(nn.Module):
    """Three Linear layers and a 0.3 s pause in every forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        time.sleep(0.3)
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def test_an_ntk_past_its_time_budget_is_refused_early_with_the_estimate():
    """Issue 34: the NTK per layer of a full-width ResNet-18 ran 183 s with nothing said. Past
    a second spent, the time per layer so far times the layers estimates the whole; an estimate
    over max_seconds is refused then, with it and the options that shorten the run; None runs
    to the end."""
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    with pytest.raises(BudgetExceededError, match=r"within max_seconds=1.5; got an estimated "
                       r"\d+ s for 4 layers \((1|2|3) took .* s, 6 samples\).*max_seconds=None"):
        kernel_conditioning(Slow(), x, kind="ntk", max_seconds=1.5)
    assert time.perf_counter() - start < 3 * 1.5
    result = kernel_conditioning(Slow(), x, kind="ntk", max_seconds=None)
    assert [row.name for row in result.layers] == ["a", "b", "c", "output"]
    conjugate = kernel_conditioning(Slow(), x, max_seconds=1e-3)  # one forward pass: no budget
    assert len(conjugate.layers) == 4
