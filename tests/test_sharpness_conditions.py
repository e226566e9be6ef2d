"""Conditions C1-C3 (Theorem 1): hand-made cases and brute-force products."""

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures._conditions import sharpness_conditions
from nngauge.nn import mlp


def _set(layer, weight, bias=None):
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(weight, dtype=layer.weight.dtype))
        if layer.bias is not None:
            layer.bias.copy_(torch.as_tensor(bias, dtype=layer.bias.dtype))
    return layer


def test_c1_single_layer_by_hand():
    net = nn.Sequential(_set(nn.Linear(2, 1, bias=False).double(), [[3.0, 4.0]]))
    r = sharpness_conditions(net, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    # one triple (a, c, b) = (0, 0, 1): 1/mu = ||W||_F ||x|| / (sqrt(h_0) ||W x||) = 5 / (3 sqrt 2)
    assert r.triples == ((0, 0, 1),)
    assert r.condition_number == pytest.approx(5 / (3 * math.sqrt(2)))
    assert r.mu == pytest.approx(3 * math.sqrt(2) / 5)


def test_c1_matches_explicit_products():
    gen = torch.Generator().manual_seed(0)
    net = mlp(3, 5, 3, 2, init="gaussian", bias_std=0.3, generator=gen, dtype=torch.float64)
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    r = sharpness_conditions(net, x)
    ws = [blk.linear.weight.detach().numpy() for blk in net.layers]
    bs = [blk.linear.bias.detach().numpy() for blk in net.layers]
    for s in range(4):
        h, ds = x[s].numpy(), []
        for w, b in zip(ws, bs):
            z = w @ h + b
            ds.append(np.diag((z > 0).astype(float)))
            h = np.maximum(z, 0)
        ds[-1] = np.eye(2)
        mats = [x[s].numpy()[:, None]] + [d @ w for d, w in zip(ds, ws)]  # D_i W_i, W_0 = x
        widths = [3, 5, 5, 2]

        def prod(a, b):
            out = mats[a]
            for i in range(a + 1, b + 1):
                out = mats[i] @ out
            return np.linalg.norm(out)

        for col, (a, c, b) in enumerate(r.triples):
            expected = prod(c + 1, b) * prod(a, c) / (math.sqrt(widths[c]) * prod(a, b))
            assert r.c1[s, col] == pytest.approx(expected, rel=1e-10)
    assert len(r.triples) == sum(1 for a, c, b in itertools.product(range(4), repeat=3) if a <= c < b)
    assert r.condition_number == pytest.approx(r.c1.max())
    assert r.c1_interior == pytest.approx(r.c1[:, [i for i, (a, c, b) in enumerate(r.triples)
                                                    if a < c < b - 1]].max())


def test_c2_and_c3_by_hand():
    hidden = _set(nn.Linear(4, 4).double(), np.diag([1.0, 1.0, 1.0, 3.0]), np.zeros(4))
    head = _set(nn.Linear(4, 2, bias=False).double(), np.ones((2, 4)))
    net = nn.Sequential(hidden, nn.ReLU(), head)
    x = torch.tensor([[0.005, 0.05, 0.5, 2.0 / 3.0]], dtype=torch.float64)  # z = .005 .05 .5 2
    r = sharpness_conditions(net, x, deltas=(0.01, 0.1, 1.0))
    row = r.layers[0]
    assert row.c2_fraction == (0.25, 0.5, 0.75)
    assert row.c2 == pytest.approx(25.0) and r.c2 == pytest.approx(25.0)
    # C3: all units active: sqrt(4) * 3 / sqrt(1 + 1 + 1 + 9) = sqrt(3)
    assert row.c3 == pytest.approx(math.sqrt(3))
    assert row.spiky_ratio == pytest.approx(9 / 3)  # 9 over the mean 12 / 4
    assert np.allclose(row.unit_ratios, [1 / 3, 1 / 3, 1 / 3, 3])
    assert math.isnan(r.layers[1].c2) and r.layers[1].c3 == pytest.approx(1.0)


def test_c3_grows_when_units_die():
    hidden = _set(nn.Linear(2, 2, bias=False).double(), [[1.0, 0.0], [0.0, 1.0]])
    net = nn.Sequential(hidden, nn.ReLU(), _set(nn.Linear(2, 1, bias=False).double(), [[1.0, 1.0]]))
    r = sharpness_conditions(net, torch.tensor([[1.0, -1.0]], dtype=torch.float64))
    # only unit 0 active: sqrt(2) * 1 / ||D W||_F = sqrt(2)
    assert r.layers[0].c3 == pytest.approx(math.sqrt(2))
    assert r.to_dict()["layers"][0]["units"] == 2 and len(r.to_frame()) == 2


def test_bad_input():
    with pytest.raises(NNGaugeError, match="ReLU.*Fix"):
        sharpness_conditions(nn.Sequential(nn.Linear(2, 2), nn.LeakyReLU(), nn.Linear(2, 1)),
                             torch.randn(3, 2))
    with pytest.raises(NNGaugeError, match="deltas"):
        sharpness_conditions(nn.Linear(2, 1), torch.randn(3, 2), deltas=(0.0,))
    with pytest.raises(NNGaugeError, match="empty data"):
        sharpness_conditions(nn.Linear(2, 1), torch.zeros(0, 2))
    with pytest.raises(NNGaugeError, match="features"):
        sharpness_conditions(nn.Linear(2, 1), torch.zeros(3, 5))
