"""expected_sharpness(method="local"): the local reparameterization estimator.

Its draw contract replayed by hand, the closed form of a linear model under weight noise,
agreement with the weight-space estimator, and the models it must refuse.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.generalization._sharpness import expected_sharpness, perturbation_seeds


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).double()


def _data(seed=1, m=48):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, 4, generator=gen, dtype=torch.float64)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()


def test_local_replays_its_draw_contract():
    """Per perturbation: its mini-batch, then unit noise layer by layer in call order."""
    net, (x, y) = _net(), _data()
    alpha, n, b = 0.05, 6, 10
    r = expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, n_probes=n,
                           batch_size=b, method="local", chunk_size=4,
                           generator=torch.Generator().manual_seed(4))
    assert r.method == "local"
    first, last = net[0], net[2]
    std = lambda w: alpha * (10 * w.detach().abs() + 1)
    expected, bases = [], []
    with torch.no_grad():
        for seed in perturbation_seeds(torch.Generator().manual_seed(4), n):
            gen = torch.Generator().manual_seed(seed)
            idx = torch.randperm(len(y), generator=gen)[:b]
            h = x[idx]
            for layer in (first, last):
                mean = layer(h)
                var = F.linear(h**2, std(layer.weight) ** 2, std(layer.bias) ** 2)
                h = mean + var.sqrt() * torch.empty_like(mean).normal_(generator=gen)
                if layer is first:
                    h = h.relu()
            expected.append(F.cross_entropy(h, y[idx]).item())
            bases.append(F.cross_entropy(net(x[idx]), y[idx]).item())
    assert np.allclose(r.perturbed_losses, expected, rtol=0, atol=1e-13)
    assert r.loss == pytest.approx(np.mean(bases), abs=1e-13)


def test_linear_model_closed_form():
    """One Linear layer, MSE: E[L(w + nu)] - L(w) = mean_ij (sum_k x_ik^2 s_jk^2 + s_bj^2)."""
    torch.manual_seed(2)
    net = nn.Linear(5, 3).double()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 5, generator=gen, dtype=torch.float64)
    t = torch.randn(40, 3, generator=gen, dtype=torch.float64)
    alpha = 0.02
    s_w = alpha * (10 * net.weight.detach().abs() + 1)
    s_b = alpha * (10 * net.bias.detach().abs() + 1)
    exact = float((F.linear(x**2, s_w**2, s_b**2)).mean())
    for method in ("local", "weights"):
        r = expected_sharpness(net, (x, t), loss=F.mse_loss, alpha=alpha, n_probes=4000,
                               batch_size=40, method=method,
                               generator=torch.Generator().manual_seed(5))
        assert r.method == method
        assert abs(r.expected_sharpness - exact) < 4 * r.stderr, method


def test_local_agrees_with_weights_and_has_lower_variance():
    net, (x, y) = _net(), _data()
    run = lambda method: expected_sharpness(
        net, (x, y), loss=F.cross_entropy, alpha=0.03, n_probes=3000, batch_size=16, method=method,
        generator=torch.Generator().manual_seed(6))
    local, weights = run("local"), run("weights")
    assert local.loss == pytest.approx(weights.loss, rel=0.05)  # different mini-batch draws
    gap = abs(local.expected_sharpness - weights.expected_sharpness)
    assert gap < 4 * math.hypot(local.stderr, weights.stderr)
    assert local.stderr < weights.stderr
    assert local.kl == weights.kl


def test_convolutional_model_agrees():
    torch.manual_seed(7)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1, padding_mode="reflect"), nn.ReLU(),
                        nn.Conv2d(3, 2, 3, stride=2, bias=False), nn.Flatten(),
                        nn.Linear(2 * 3 * 3, 4)).double()
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(30, 1, 8, 8, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (30,), generator=gen)
    run = lambda method: expected_sharpness(
        net, (x, y), loss=F.cross_entropy, alpha=0.02, n_probes=2000, batch_size=8, method=method,
        generator=torch.Generator().manual_seed(9))
    local, weights = run("auto"), run("weights")
    assert local.method == "local"
    gap = abs(local.expected_sharpness - weights.expected_sharpness)
    assert gap < 4 * math.hypot(local.stderr, weights.stderr)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.fc(x) * self.scale


class _TiedOutside(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return F.linear(self.fc(x).relu(), self.fc.weight)[:, :3]


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.out(self.fc(self.fc(x).relu()))


class _Centred(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        h = self.fc(x)
        return self.out(h - h.mean(0))


class _InputSkip(nn.Module):
    """Adds the data to a perturbed output: gathering cannot run, plain rows can."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) + x


@pytest.mark.parametrize("model, reason", [
    (_Scaled(), "belongs to a _Scaled"),
    (_TiedOutside(), "used outside"),
    (_Twice(), "once per forward"),
    (_Centred(), "depends on the other examples"),
    (nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4).eval(), nn.Linear(4, 3)), "BatchNorm1d"),
    (_InputSkip(), "fails"),
])
def test_ineligible_models_fall_back_or_refuse(model, reason):
    model = model.double()
    x, y = _data()
    y = y.clamp(max=2)
    auto = expected_sharpness(model, (x, y), loss=F.cross_entropy, alpha=0.01, n_probes=5,
                              batch_size=8)
    assert auto.method == "weights"
    with pytest.raises(NNGaugeError, match=reason):
        expected_sharpness(model, (x, y), loss=F.cross_entropy, alpha=0.01, n_probes=5,
                           method="local")
    assert not any(m._forward_hooks for m in model.modules())


def test_local_leaves_model_untouched():
    net, (x, y) = _net(), _data()
    net.train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=0.05, n_probes=20, batch_size=8)
    assert net.training and not any(m._forward_hooks for m in net.modules())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_bad_method():
    net, (x, y) = _net(), _data()
    with pytest.raises(NNGaugeError, match="method"):
        expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=0.1, method="fast")
