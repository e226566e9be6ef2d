"""weight_transitions: exact pattern changes of the data along a line of one layer's weights,
against a dense count at 10^5 steps, and its refusals."""

import pytest
import torch
from torch import nn

from nngauge import NNGaugeError
from nngauge.measures.curvature._weight_transitions import weight_transitions


def _net(seed=0):
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(3, 12), nn.ReLU(), nn.Linear(12, 12), nn.ReLU(),
                        nn.Linear(12, 12), nn.ReLU(), nn.Linear(12, 2)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.6)
    return net


def _dense_changes(net, x, delta, t):
    """Steps of the grid ``t`` where the pattern (every ReLU) of some sample changes, with
    module 2 moved by t * delta."""
    z = net[1](net[0](x))  # fixed input of the moved layer
    base = net[2](z)
    shift = z @ delta["weight"].T + delta["bias"]
    patterns = []
    for part in t.split(10_000):
        h = base + part.view(-1, 1, 1) * shift  # (T, n, 12)
        a = torch.relu(h)
        g = net[4](a)
        patterns.append(torch.cat([h > 0, g > 0], 2).flatten(1))
    p = torch.cat(patterns)
    return int((p[1:] != p[:-1]).any(1).sum())


def test_exact_breakpoints_equal_a_dense_count_at_100k_steps():
    net = _net()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    delta = {"weight": torch.randn(12, 12, generator=gen, dtype=torch.float64),
             "bias": torch.randn(12, generator=gen, dtype=torch.float64)}
    res = weight_transitions(net, x, layer="2", direction=delta, span=(-1.0, 1.0))
    t = torch.linspace(-1.0, 1.0, 100_001, dtype=torch.float64)
    dense = _dense_changes(net, x, delta, t)
    step = 2.0 / 100_000
    # breakpoints closer than a grid step can share one step: count the steps they fall in
    cells = len(torch.unique(torch.floor((torch.as_tensor(res.breakpoints) + 1.0) / step)))
    assert res.n_changes > 50 and dense == cells
    assert res.n_changes - cells <= 2
    rows = {row.name: row.transitions for row in res.layers}
    assert rows[res.layers[0].name] == 0  # the site before the moved layer never changes
    assert sum(rows.values()) >= res.per_sample.sum() == pytest.approx(
        res.mean_per_sample * len(x))


def test_a_bias_line_moves_each_unit_across_zero_once():
    net = nn.Sequential(nn.Linear(1, 3), nn.ReLU()).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0], [2.0], [-1.0]]))
        net[0].bias.zero_()
    x = torch.tensor([[1.0]], dtype=torch.float64)
    res = weight_transitions(net, x, layer="0",
                             direction={"bias": torch.tensor([1.0, 1.0, 1.0])}, span=(-5, 5))
    # unit i is on where w_i + t > 0: changes at t = -1, -2, 1
    assert res.breakpoints.tolist() == pytest.approx([-2.0, -1.0, 1.0])
    assert res.per_sample.tolist() == [3] and res.layers[0].transitions == 3


def test_bad_inputs_are_refused():
    net, x = _net(), torch.randn(4, 3, dtype=torch.float64)
    ok = {"bias": torch.ones(12, dtype=torch.float64)}
    with pytest.raises(NNGaugeError, match="layer="):
        weight_transitions(net, x, layer="9", direction=ok)
    with pytest.raises(NNGaugeError, match="own parameters"):
        weight_transitions(net, x, layer="1", direction=ok)
    with pytest.raises(NNGaugeError, match="shaped"):
        weight_transitions(net, x, layer="2", direction={"bias": torch.ones(3)})
    with pytest.raises(NNGaugeError, match="increasing"):
        weight_transitions(net, x, layer="2", direction=ok, span=(1.0, 1.0))
    tanh = nn.Sequential(nn.Linear(3, 4), nn.Tanh()).double()
    with pytest.raises(NNGaugeError, match="not piecewise linear"):
        weight_transitions(tanh, x, layer="0", direction={"bias": torch.ones(4)})


def test_more_pieces_than_the_budget_are_refused_before_they_are_made():
    from nngauge import BudgetExceededError

    net = _net()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    delta = {"weight": torch.randn(12, 12, generator=gen, dtype=torch.float64)}
    with pytest.raises(BudgetExceededError, match="max_pieces=10"):
        weight_transitions(net, x, layer="2", direction=delta, max_pieces=10)
    with pytest.raises(NNGaugeError, match="max_pieces None or an integer >= 1"):
        weight_transitions(net, x, layer="2", direction=delta, max_pieces=0)
