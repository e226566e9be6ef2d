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


def test_rho_max_before_pooling_leaves_out_the_layers_after_global_pooling():
    """A CNN whose pooled read-out is aligned (non-negative features averaged over positions,
    a planted common offset) and whose convolutions are not: rho_max is the read-out's,
    rho_max_before_pooling the convolutions' (brute force); on an MLP they are equal; and a
    CNN whose convolutions themselves align keeps its high value (the rule cannot hide
    shrinkage in the body)."""
    from nngauge.measures.propagation._correlations import has_positions

    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    with torch.no_grad():
        cnn[6].bias.fill_(10.0)
    images = torch.randn(12, 3, 8, 8)
    result = correlations(cnn, images)
    body = [row for row in result.layers[1:] if row.name in ("0", "1", "2", "3")]
    assert result.after_pooling == ("6", "output")
    assert result.rho_max_before_pooling == pytest.approx(max(row.min for row in body))
    assert result.rho_max > 0.99 > result.rho_max_before_pooling
    mlp_result = correlations(net(), X)
    assert mlp_result.after_pooling == ()
    assert mlp_result.rho_max_before_pooling == mlp_result.rho_max
    assert has_positions((8, 4, 4)) and has_positions((16, 32))
    assert not has_positions((128, 1, 1)) and not has_positions((10,))
    aligned = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(8, 5))
    with torch.no_grad():
        aligned[0].bias.fill_(50.0)  # every pixel of every input alike: the body aligns
    assert correlations(aligned, images).rho_max_before_pooling > 0.99


def test_the_shrinkage_verdict_judges_rho_max_before_pooling():
    """The report's verdict on the planted CNN: ok on the convolutions' value, the read-out's
    value named beside it; on the CNN whose body aligns: bad."""
    from nngauge.report._verdicts import shrinkage_verdict

    torch.manual_seed(0)
    images = torch.randn(12, 3, 8, 8)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(8, 5))
    with torch.no_grad():
        cnn[4].bias.fill_(10.0)
    result = correlations(cnn, images)
    verdict = shrinkage_verdict(result, None, None)
    assert verdict.status == "ok" and verdict.value == result.rho_max_before_pooling
    assert f"rho_max = {result.rho_max:.4g}" in verdict.message
    assert "before global pooling" in verdict.message
    with torch.no_grad():
        cnn[0].bias.fill_(50.0)
    assert shrinkage_verdict(correlations(cnn, images), None, None).status == "bad"
