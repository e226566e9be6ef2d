"""Per-layer correlations: brute-force cosines, rho_max, the input search, and state."""

import pytest
import torch
from torch import nn

from nngauge import InvalidInputError
from nngauge.measures import correlations

X = torch.randn(25, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), nn.LayerNorm(32, elementwise_affine=False), nn.ReLU(),
                         nn.Linear(32, 32), nn.LayerNorm(32, elementwise_affine=False), nn.ReLU(),
                         nn.Linear(32, 4)).double()


def brute_force(values):
    pairs = [torch.nn.functional.cosine_similarity(values[a], values[b], dim=0).item()
             for a in range(len(values)) for b in range(a + 1, len(values))]
    return min(pairs), sum(pairs) / len(pairs), max(pairs)


def test_layer_statistics_equal_brute_force_cosines():
    model = net()
    result = correlations(model, X)
    names = [row.name for row in result.layers]
    assert names == ["input", "0", "1", "2", "3", "4", "5", "6", "output"]
    hidden = X
    for row, module in zip(result.layers[1:], model):
        hidden = module(hidden).detach()
        lo, mean, hi = brute_force(hidden)
        assert (row.min, row.mean, row.max) == pytest.approx((lo, mean, hi), abs=1e-12)
    assert result.rho_max == pytest.approx(max(row.min for row in result.layers[1:]))


def test_search_finds_a_less_correlated_pair():
    result = correlations(net(), X, layers=["5"], n_iter=50)
    row = result.layers[1]
    assert row.searched_min is not None and row.searched_min <= row.min
    assert result.rho_max_searched <= result.rho_max


def test_state_and_grads_untouched():
    model = net()
    correlations(model, X, n_iter=5)
    assert all(p.grad is None and p.requires_grad for p in model.parameters())


def test_needs_two_samples():
    with pytest.raises(InvalidInputError, match="at least 2"):
        correlations(net(), X[:1])
