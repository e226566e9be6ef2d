"""Linearly approximable region (E.1) and error-preserving perturbation (E.3)."""

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import InvalidInputError
from nngauge.measures import error_preserving_perturbation, linear_region_diameter, nlc
from nngauge.measures.propagation._region_size import K_MIN, k_grid

X = torch.randn(200, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
SMALL = dict(batch_size=50, n_batches=2, n_input_directions=2)


def test_grid_is_the_papers():
    grid = k_grid(1.0)
    assert grid[0] == K_MIN and len(grid) == 91
    np.testing.assert_allclose(grid[1:] / grid[:-1], 10 ** 0.1)


def test_affine_map_is_linear_everywhere():
    result = linear_region_diameter(nn.Linear(8, 3).double(), X, n_output_directions=3, **SMALL)
    assert result.median == 1e3 and result.above_grid == len(result.values)


def test_one_dimensional_closed_form():
    """f = exp at x = 0, diameter 1 (data {0, 1}), step s = +-1: the Jacobian predicts s k,
    the truth is e^{s k} - 1. The ratio s k / (e^{s k} - 1) leaves [1/2, 2] at
    e^k = 1 + 2k (k = 1.2564, s = +1) or k = 2 (1 - e^{-k}) (k = 1.5936, s = -1)."""
    from scipy.optimize import brentq

    class Exp(nn.Module):
        def forward(self, x):
            return x.exp()

    data = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    thresholds = [brentq(lambda k: np.exp(k) - 1 - 2 * k, 0.5, 3),
                  brentq(lambda k: k - 2 * (1 - np.exp(-k)), 0.5, 3)]
    grid = k_grid(1e3)
    expected = {float(grid[grid <= t].max()) for t in thresholds}
    seen = set()
    for seed in range(6):
        result = linear_region_diameter(Exp(), data, batch_size=1, n_batches=1,
                                        n_input_directions=1, n_output_directions=1,
                                        generator=torch.Generator().manual_seed(seed))
        assert result.input_diameter == pytest.approx(1.0)
        seen.add(result.median)
    assert seen <= expected and len(seen) == 2


def test_region_shrinks_as_the_nlc_grows():
    medians, nlcs = [], []
    for gain in (0.5, 2.0, 4.0):
        torch.manual_seed(3)
        layers = []
        for i in range(4):
            linear = nn.Linear(8 if i == 0 else 32, 32)
            nn.init.normal_(linear.weight, std=gain / linear.in_features ** 0.5)
            layers += [linear, nn.Tanh()]
        model = nn.Sequential(*layers, nn.Linear(32, 3)).double()
        medians.append(linear_region_diameter(model, X, n_output_directions=3,
                                              generator=torch.Generator().manual_seed(4),
                                              **SMALL).median)
        nlcs.append(nlc(model, X, method="exact").nlc)
    assert nlcs[0] < nlcs[1] < nlcs[2]
    assert medians[0] > medians[1] > medians[2]


def test_error_preserving_perturbation_of_a_linear_classifier():
    torch.manual_seed(5)
    model = nn.Linear(8, 3).double()
    labels = model(X).argmax(1)
    result = error_preserving_perturbation(model, (X, labels), **SMALL)
    assert result.base_error == 0.0
    assert 0.0 < result.median < 1e3
    with pytest.raises(InvalidInputError, match="labels"):
        error_preserving_perturbation(model, X, **SMALL)


def test_batch_statistics_walks_are_mapped_per_k_exactly():
    """A network normalizing with batch statistics couples its batch, so the walk cannot
    stack the k values into one batch: it maps them with vmap, each k's batch normalized by
    its own statistics. Brute force: one call per k gives the same outputs up to float64
    rounding (the mapped batch statistics may sum in another order: differences of a few
    units in the last place, 2e-16 absolute, were seen on some CPUs; stacking the k values
    into one batch would differ by O(1)), and the network's running buffers and parameters
    are left as they were."""
    from nngauge._internal.adapter import ModelAdapter
    from nngauge.measures.propagation._region_size import _forward_along

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3))
    model.double().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    adapter = ModelAdapter(model, where="test")
    ks = k_grid(1e3)
    step = torch.randn_like(X[:50])
    with adapter.active(data=X):
        assert adapter.coupled
        mapped = _forward_along(adapter, X[:50], X[:50], step, ks, coupled=True)
        looped = [adapter(X[:50] + k * step, X[:50]) for k in (0.0, *ks.tolist())]
    assert len(mapped) == len(ks) + 1
    for a, b in zip(mapped, looped):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-15)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
