"""The local estimator's fast paths against a brute-force replay of its draw contract.

The local reparameterization computes data-only layers once per distinct point of a block
(cached, then gathered) and runs the perturbations in small chunks. A brute-force replay, one
perturbation at a time with each Linear/ConvNd output drawn from its Gaussian on the
perturbation's own rows (no cache, no gathering), must give the same losses, for in-place
activations, two data-only branches, a parameter-free prefix, and several blocks.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.measures.generalization import _local_noise
from nngauge.measures.generalization._sharpness import (expected_sharpness, pac_bayes,
                                                       perturbation_seeds)

ALPHA, N, B, SEED = 0.05, 7, 10, 3


def _replay(model, x, y, seed):
    """Per perturbation: its mini-batch, then each layer's output mean + std * N(0, 1)."""
    std = {n: ALPHA * (10 * w.detach().abs() + 1) for n, w in model.named_parameters()}
    names = {m: n for n, m in model.named_modules() if type(m) in _local_noise.LOCAL_MODULES}
    losses, bases = [], []
    for s in perturbation_seeds(torch.Generator().manual_seed(seed), N):
        gen = torch.Generator().manual_seed(s)
        idx = torch.randperm(len(y), generator=gen)[:B]

        def hook(module, args, out):
            prefix = names[module] + "." if names[module] else ""
            bias_var = None if module.bias is None else std[prefix + "bias"] ** 2
            var = _local_noise._affine(module, args[0] ** 2, std[prefix + "weight"] ** 2,
                                       bias_var)
            return out + var.sqrt() * torch.empty_like(out).normal_(generator=gen)

        with torch.no_grad():
            bases.append(F.cross_entropy(model(x[idx]), y[idx]).item())
            handles = [m.register_forward_hook(hook) for m in names]
            try:
                losses.append(F.cross_entropy(model(x[idx]), y[idx]).item())
            finally:
                for h in handles:
                    h.remove()
    return np.array(losses), np.array(bases)


class _Branches(nn.Module):
    """Two data-only layers read the input; their sum feeds the head."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(6, 8), nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.a(x).relu() + self.b(x).tanh())


def _models():
    torch.manual_seed(0)
    return {
        "in-place relu": nn.Sequential(nn.Linear(6, 16), nn.ReLU(inplace=True),
                                       nn.Linear(16, 3)),
        "branches": _Branches(),
        "pooled conv": nn.Sequential(nn.Unflatten(1, (1, 6)), nn.AvgPool1d(2, stride=1),
                                     nn.Conv1d(1, 4, 3), nn.ReLU(inplace=True), nn.Flatten(),
                                     nn.Linear(12, 3, bias=False)),
    }


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(120, 6, generator=gen, dtype=torch.float64)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()


@pytest.mark.parametrize("name", list(_models()))
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_cached_chunks_equal_brute_force_replay(name, chunk_size, data):
    """Cached data-only layers and chunking reproduce the one-by-one replay (float64)."""
    x, y = data
    model = _models()[name].double()
    r = expected_sharpness(model, (x, y), loss=F.cross_entropy, alpha=ALPHA, n_probes=N,
                           batch_size=B, method="local", chunk_size=chunk_size,
                           generator=torch.Generator().manual_seed(SEED))
    losses, bases = _replay(model, x, y, SEED)
    assert r.method == "local"
    assert np.allclose(r.perturbed_losses, losses, rtol=0, atol=1e-12)
    assert r.loss == pytest.approx(bases.mean(), abs=1e-12)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_several_blocks_equal_one_block(data, monkeypatch):
    """A cache budget too small for the data splits the perturbations into blocks of 5 (chunks
    of 2, 2, 1): the losses are those of the one-block run and of the replay."""
    x, y = data
    model = _models()["in-place relu"].double()
    run = lambda: expected_sharpness(
        model, (x, y), loss=F.cross_entropy, alpha=ALPHA, n_probes=N, batch_size=B,
        method="local", chunk_size=2, generator=torch.Generator().manual_seed(SEED))
    one = run()
    monkeypatch.setattr(_local_noise, "ELEMENT_BUDGET", 5 * B * 16)  # widest output: 16
    several = run()
    assert np.allclose(several.perturbed_losses, one.perturbed_losses, rtol=0, atol=1e-13)
    assert np.allclose(several.perturbed_losses, _replay(model, x, y, SEED)[0], rtol=0,
                       atol=1e-12)


@pytest.mark.parametrize("method", ["local", "weights"])
def test_pac_bayes_curve_equals_separate_expected_sharpness_calls(method, data):
    """pac_bayes shares the unperturbed pass (on all points) across alphas; each point equals
    expected_sharpness at that alpha drawing from the same generator in turn (which, with
    N * B < m points drawn, runs on the distinct points only)."""
    x, y = data
    model = _models()["branches"].double()
    alphas = [0.01, 0.05]
    curve = pac_bayes(model, (x, y), loss=F.cross_entropy, alphas=alphas, n_probes=N,
                      batch_size=B, method=method, generator=torch.Generator().manual_seed(SEED))
    gen = torch.Generator().manual_seed(SEED)
    for alpha, point in zip(alphas, curve.points):
        r = expected_sharpness(model, (x, y), loss=F.cross_entropy, alpha=alpha, n_probes=N,
                               batch_size=B, method=method, generator=gen)
        assert point.expected_sharpness == pytest.approx(r.expected_sharpness, abs=1e-12)
        assert point.stderr == pytest.approx(r.stderr, abs=1e-12)
        assert point.kl == pytest.approx(r.kl, rel=1e-12)
    assert curve.method == method
