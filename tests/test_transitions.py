"""Neuron transitions and activation patterns along a trajectory (Raghu et al. 2017, sec. 2.1):
exact pieces vs brute-force dense sampling (10^6 points), Corollary 1, exact >= sampled,
batchnorm folding, conv + average pooling, identity skips, state restoration and errors.
Graphs (max pooling, residual additions, functional activations, modules called twice, zoo
ResNets) are in test_piecewise_engine.py."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge import NNGaugeError
from nngauge.measures.expressivity._transitions import transitions
from nngauge.nn import mlp
from nngauge.trajectories import arc, line

DENSE = 10**6
BREAKPOINTS = {nn.ReLU: (0.0,), nn.Hardtanh: (-1.0, 1.0), nn.LeakyReLU: (0.0,)}


def dense_counts(model, points_at, n=DENSE, chunk=2**16):
    """Brute force: region codes of every activation module at n equally spaced t (inputs
    recorded by hooks installed here), every change between consecutive t counted.
    Returns (transitions per layer, distinct whole patterns, intervals of constant pattern)."""
    acts = [m for m in model.modules() if type(m) in BREAKPOINTS or _nngauge_pl(m)]
    recorded = {}
    handles = [m.register_forward_pre_hook(lambda mod, args: recorded.__setitem__(mod, args[0]))
               for m in acts]
    per_layer = np.zeros(len(acts), dtype=np.int64)
    patterns, changes, last = set(), 0, None
    t = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    try:
        with torch.no_grad():
            for start in range(0, n, chunk):
                model(points_at(t[start:start + chunk]))
                codes = [_regions(recorded[m], m) for m in acts]
                if last is not None:
                    codes = [torch.cat([l, c]) for l, c in zip(last, codes)]
                diffs = [(c[1:] != c[:-1]) for c in codes]
                per_layer += np.array([int(d.sum()) for d in diffs])
                changed = torch.stack([d.any(1) for d in diffs]).any(0)
                changes += int(changed.sum())
                # every sampled pattern is the first row or a row right after a change
                rows = torch.cat([torch.zeros(1, dtype=torch.long),
                                  torch.nonzero(changed).reshape(-1) + 1])
                patterns.update(map(bytes, torch.cat(codes, 1)[rows].numpy()))
                last = [c[-1:] for c in codes]
    finally:
        for h in handles:
            h.remove()
    return per_layer.tolist(), len(patterns), changes + 1


def _nngauge_pl(module):
    return hasattr(module, "activation") and getattr(module.activation, "piecewise_linear", False)


def _regions(h, module):
    flat = h.reshape(len(h), -1)
    cuts = BREAKPOINTS.get(type(module)) or module.activation.breakpoints
    return sum((flat > c).to(torch.int8) for c in cuts)


def segment(x0, x1):
    shape = (-1,) + (1,) * x0.dim()
    return lambda t: (1 - t.reshape(shape)) * x0 + t.reshape(shape) * x1


def random_net(act, width, seed, gain=1.0):
    gen = torch.Generator().manual_seed(seed)
    dims = [5, width, width, width]
    mods = []
    for a, b in zip(dims[:-1], dims[1:]):
        lin = nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=gen) * gain / math.sqrt(a))
            lin.bias.copy_(torch.randn(b, generator=gen) * 0.3)
        mods += [lin, act()]
    mods.append(nn.Linear(width, 2))
    return nn.Sequential(*mods).double()


def endpoints(seed, d=5, scale=3.0):
    gen = torch.Generator().manual_seed(100 + seed)
    return (torch.randn(2, d, generator=gen, dtype=torch.float64) * scale).unbind(0)


def assert_exact_matches_dense(model, x0, x1, result=None):
    res = result or transitions(model, x0, x1)
    lengths = res.pieces[:, 1] - res.pieces[:, 0]
    # precondition of the comparison: every piece holds several grid points of the dense count
    assert lengths.min() > 3.0 / DENSE
    per_layer, n_patterns, n_intervals = dense_counts(model, segment(x0, x1))
    assert list(res.per_layer) == per_layer
    assert res.n_patterns == n_patterns
    assert res.n_pieces == n_intervals
    return res


@pytest.mark.slow
@pytest.mark.parametrize("act, gain", [(nn.ReLU, 1.5), (nn.Hardtanh, 3.0)])
@pytest.mark.parametrize("width, seed", [(8, 0), (12, 1), (16, 2)])
def test_exact_equals_dense_sampling(act, gain, width, seed):
    """Exact transitions per layer, patterns and pieces of random ReLU and hard-tanh MLPs on a
    segment equal a dense scan of 10^6 points (more than 5 transitions); the pieces tile [0, 1]
    and, Raghu et al. (ICML 2017) Corollary 1, each interval has its own pattern."""
    model = random_net(act, width, seed, gain)
    x0, x1 = endpoints(seed)
    res = assert_exact_matches_dense(model, x0, x1)
    assert res.n_transitions > 5  # a non-trivial case
    assert res.n_patterns == res.n_pieces
    np.testing.assert_allclose(res.pieces[0, 0], 0.0)
    np.testing.assert_allclose(res.pieces[-1, 1], 1.0)
    np.testing.assert_array_equal(res.pieces[1:, 0], res.pieces[:-1, 1])


def test_hand_computed_pieces():
    """One hidden hard-tanh layer h = x - b on x in [-3, 3]: breakpoints at x = b +- 1."""
    net = nn.Sequential(nn.Linear(1, 2), nn.Hardtanh())
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.copy_(torch.tensor([0.0, -0.5]))
    res = transitions(net, torch.tensor([-3.0]), torch.tensor([3.0]))
    cuts = sorted([-1.0, 1.0, -0.5, 1.5])
    expected = [(x + 3) / 6 for x in cuts]
    np.testing.assert_allclose(res.pieces[1:, 0], expected, atol=1e-12)
    assert res.per_layer == (4,) and res.n_patterns == 5


@pytest.mark.parametrize("act, gain", [(nn.ReLU, 1.5), (nn.Hardtanh, 3.0), (nn.Tanh, 3.0)])
def test_exact_at_least_sampled(act, gain):
    for seed in range(3):
        model = random_net(act, 12, seed, gain)
        x0, x1 = endpoints(seed)
        coarse = transitions(model, x0, x1, method="sampled", n_initial=9, max_evaluations=30)
        fine = transitions(model, x0, x1, method="sampled")
        assert coarse.n_evaluations <= 30 and coarse.budget_exhausted
        if act is nn.Tanh:  # not piecewise linear: only the sampled sign patterns exist
            with pytest.raises(NNGaugeError, match="sampled"):
                transitions(model, x0, x1)
            assert coarse.n_transitions <= fine.n_transitions
            continue
        exact = transitions(model, x0, x1)
        for approx in (coarse, fine):
            assert exact.n_patterns >= approx.n_patterns
            assert all(e >= a for e, a in zip(exact.per_layer, approx.per_layer))
        assert coarse.n_patterns < exact.n_patterns  # a budget this small misses some
        assert fine.per_layer == exact.per_layer  # well separated transitions are all found


def test_sampled_sign_patterns_of_tanh_match_dense_signs():
    """For a smooth activation the pattern is the sign of the pre-activation."""
    model = random_net(nn.Tanh, 10, 3, 2.0)
    x0, x1 = endpoints(3)
    signs = {}
    handles = [m.register_forward_pre_hook(lambda mod, a: signs.__setitem__(mod, a[0] > 0))
               for m in model if isinstance(m, nn.Tanh)]
    try:
        t = torch.linspace(0, 1, 200_001, dtype=torch.float64)
        model(segment(x0, x1)(t))
    finally:
        for h in handles:
            h.remove()
    dense = [int((s[1:] != s[:-1]).sum()) for s in signs.values()]
    res = transitions(model, x0, x1, method="sampled")
    assert list(res.per_layer) == dense
    assert [row.piecewise_linear for row in res.layers] == [False] * 3


def test_batchnorm_eval_folds_exactly():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 12),
                          nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 2)).double()
    with torch.no_grad():  # non-trivial running statistics
        for _ in range(20):
            model(torch.randn(64, 5, dtype=torch.float64) * 2 + 1)
    model.eval()
    x0, x1 = endpoints(4)
    assert_exact_matches_dense(model, x0, x1)
    assert not model.training


def test_batchnorm_in_train_mode_is_rejected():
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU()).double()
    with pytest.raises(NNGaugeError, match="eval"):
        transitions(model, *endpoints(0))


@pytest.mark.slow
def test_conv_with_average_pooling_matches_dense_sampling():
    """Exact transitions of a conv net with ReLU, average pooling, hard tanh and adaptive
    average pooling equal a dense scan of 10^6 points on a segment (more than 10 transitions)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Conv2d(3, 4, 2),
                          nn.Hardtanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 3)).double()
    gen = torch.Generator().manual_seed(5)
    x0, x1 = torch.randn(2, 1, 8, 8, generator=gen, dtype=torch.float64).unbind(0)
    res = assert_exact_matches_dense(model, x0, x1)
    assert res.n_transitions > 10


@pytest.mark.slow
def test_nngauge_mlp_with_identity_skips_and_leaky_relu():
    """Exact transitions of an nngauge MLP with identity skips and leaky ReLU equal a dense scan
    of 10^6 points on a segment, per layer at its four `layers.i.act` sites."""
    model = mlp(5, 10, 5, 2, activation="leaky_relu", skip=1.0, init="gaussian",
                bias_std=0.3, generator=torch.Generator().manual_seed(0)).double()
    x0, x1 = endpoints(5)
    res = assert_exact_matches_dense(model, x0, x1)
    assert [row.name for row in res.layers] == [f"layers.{i}.act" for i in range(4)]


@pytest.mark.slow
def test_arc_is_exact_on_its_polygon():
    """On an arc trajectory, transitions runs on its polygon of 8 segments, and its per-layer
    transitions and patterns equal a dense scan of 10^6 points along that polygon."""
    model = random_net(nn.ReLU, 10, 6, 1.5)
    x0, x1 = endpoints(6)
    traj = arc(x0, x1, 9)
    res = transitions(model, traj)
    assert res.path == "polyline of 8 segments (arc)"
    vertices = traj.points

    def on_polygon(t):
        scaled = t * 8
        j = scaled.floor().long().clamp(max=7)
        u = (scaled - j).unsqueeze(1)
        return vertices[j] + u * (vertices[j + 1] - vertices[j])

    per_layer, n_patterns, _ = dense_counts(model, on_polygon)
    assert list(res.per_layer) == per_layer and res.n_patterns == n_patterns


def test_layer_selection_counts_only_those_layers():
    model = random_net(nn.ReLU, 10, 7, 1.5)
    x0, x1 = endpoints(7)
    full = transitions(model, x0, x1)
    first = transitions(model, x0, x1, layers=["1"])
    assert first.per_layer == full.per_layer[:1]
    assert first.n_patterns == full.per_layer[0] + 1


def test_model_state_and_hooks_are_left_alone():
    model = random_net(nn.ReLU, 8, 0).float().train()
    model[0].weight.requires_grad_(False)
    before = [p.detach().clone() for p in model.parameters()]
    for method in ("exact", "sampled"):
        transitions(model, *[x.float() for x in endpoints(0)], method=method)
    assert model.training and all(m.training for m in model)
    assert not model[0].weight.requires_grad and model[2].weight.requires_grad
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


class Failing(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.act = nn.Linear(3, 3), nn.ReLU()

    def forward(self, x):
        self.act(self.lin(x))
        raise RuntimeError("boom")


def test_hooks_removed_when_the_model_raises():
    model = Failing()
    for method in ("exact", "sampled"):
        with pytest.raises(NNGaugeError):
            transitions(model, torch.zeros(3), torch.ones(3), method=method)
    assert all(not m._forward_pre_hooks for m in model.modules())


class HiddenRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return F.relu(self.lin(x)) * 2.0


def test_bad_inputs():
    model = random_net(nn.ReLU, 8, 0)
    x0, x1 = endpoints(0)
    with pytest.raises(NNGaugeError, match="x0 != x1"):
        transitions(model, x0, x0.clone())
    with pytest.raises(NNGaugeError, match="same shape"):
        transitions(model, x0, torch.zeros(6, dtype=torch.float64))
    with pytest.raises(NNGaugeError, match="shape"):
        transitions(model, torch.zeros(7), torch.ones(7))
    with pytest.raises(NNGaugeError, match="method"):
        transitions(model, x0, x1, method="bogus")
    with pytest.raises(NNGaugeError, match="x1"):
        transitions(model, x0)
    with pytest.raises(NNGaugeError, match="activation modules"):
        transitions(model, x0, x1, layers=["0"])
    tanh = nn.Sequential(nn.Linear(5, 4), nn.Tanh())
    with pytest.raises(NNGaugeError, match=r"1 \(Tanh.*method='sampled'"):
        transitions(tanh, x0.float(), x1.float())


def test_functional_relu_is_followed():
    """F.relu inside forward() is a site of its own (named after its graph node)."""
    torch.manual_seed(0)
    res = transitions(HiddenRelu(), torch.full((3,), -5.0), torch.full((3,), 5.0))
    assert [row.name for row in res.layers] == ["relu"]
    assert res.n_pieces == res.n_transitions + 1 == res.n_patterns


def test_result_frame_and_plot():
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    import matplotlib

    matplotlib.use("Agg")
    model = mlp(6, 16, 4, 2, activation="hard_tanh", init="gaussian", sigma_w=3.0,
                generator=torch.Generator().manual_seed(0))
    res = transitions(model, line(torch.zeros(6), torch.ones(6) * 3, 2))
    frame = res.to_frame()
    assert list(frame["transitions"]) == list(res.per_layer)
    assert res.theory["theorem4_rate"] == pytest.approx(4.0)
    ax = res.plot()
    assert len(ax.lines) == 2
    assert res.to_dict()["n_patterns"] == res.n_patterns
