"""region_density: linear regions per unit length along lines through points, and the local
complexity of Humayun, Balestriero and Baraniuk (ICML 2024).

The exact density is checked segment by segment against ``transitions`` (the same engine on one
segment at a time), local complexity against its closed form for one hidden layer, and the
measure's invariances: batching, determinism, state of the model, and Hanin and Rolnick's
(ICML 2019) linear growth of the density with the number of neurons at initialization.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge import NNGaugeError
from nngauge.measures.expressivity._density import region_density
from nngauge.measures.expressivity._transitions import transitions


def gen(seed):
    return torch.Generator().manual_seed(seed)


def he_mlp(d, width, depth, seed, act=nn.ReLU):
    """Float64 MLP with weights N(0, 2 / fan_in), biases N(0, 0.1^2) and one output."""
    g, layers, fan = gen(seed), [], d
    for _ in range(depth):
        linear = nn.Linear(fan, width)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) * math.sqrt(2 / fan))
            linear.bias.copy_(torch.randn(width, generator=g) * 0.1)
        layers += [linear, act()]
        fan = width
    return nn.Sequential(*layers, nn.Linear(fan, 1)).double()


class PoolCNN(nn.Module):
    """Conv -> ReLU module -> MaxPool2d -> Linear -> F.relu -> Linear; input (1, 6, 6)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.act, self.pool = nn.Conv2d(1, 3, 3), nn.ReLU(), nn.MaxPool2d(2)
        self.fc1, self.fc2 = nn.Linear(12, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = self.pool(self.act(self.conv(x))).flatten(1)
        return self.fc2(F.relu(self.fc1(h)))


def data(n, shape, seed=10):
    return torch.randn(n, *shape, generator=gen(seed), dtype=torch.float64)


@pytest.mark.parametrize("build, shape", [(lambda: he_mlp(5, 16, 3, 0), (5,)),
                                          (lambda: PoolCNN().double(), (1, 6, 6))],
                         ids=["relu-mlp", "maxpool-cnn"])
def test_exact_density_equals_transitions_on_every_segment(build, shape):
    model, r = build(), 0.8
    res = region_density(model, data(3, shape), radius=r, n_directions=2, generator=gen(0))
    totals = np.zeros(len(res.layers))
    for i in range(3):
        for j in range(2):
            c, u = res.centers[i], res.directions[i, j]
            segment = transitions(model, c - r * u, c + r * u)
            assert res.regions[i, j] == segment.n_pieces
            assert [row.name for row in res.layers] == [row.name for row in segment.layers]
            totals += segment.per_layer
    assert res.regions.min() > 1 and totals.min() > 0  # a non-trivial case
    np.testing.assert_allclose([row.transitions_per_length for row in res.layers],
                               totals / (3 * 2 * 2 * r), rtol=1e-12)
    np.testing.assert_allclose(res.per_point, res.regions.mean(1) / (2 * r), rtol=1e-12)
    assert res.density == pytest.approx(res.per_point.mean())
    assert res.density_std == pytest.approx(res.per_point.std())


def test_one_segment_density_is_pieces_over_length():
    model, r = he_mlp(4, 24, 2, 1), 1.5
    res = region_density(model, data(1, (4,)), radius=r, n_directions=1, generator=gen(1))
    c, u = res.centers[0], res.directions[0, 0]
    segment = transitions(model, c - r * u, c + r * u)
    assert res.density == segment.n_pieces / (2 * r) and res.density_std == 0.0
    assert [row.transitions_per_length * 2 * r for row in res.layers] == list(segment.per_layer)


def test_the_default_radius_is_a_twentieth_of_the_rms_distance_between_two_points():
    """radius=None: r = 0.05 x sqrt(mean over pairs a < b of ||x_a - x_b||^2), here computed
    over all pairs; the same density as that radius given; one point, or identical points,
    have no spread and are refused with the fix."""
    model, x = he_mlp(4, 24, 2, 1), data(6, (4,))
    pairs = torch.cdist(x, x)[tuple(torch.triu_indices(6, 6, 1))]
    r = 0.05 * float(pairs.pow(2).mean().sqrt())
    default = region_density(model, x, n_directions=2, generator=gen(3))
    assert default.radius == pytest.approx(r, rel=1e-12)
    assert default.density == pytest.approx(region_density(
        model, x, radius=default.radius, n_directions=2, generator=gen(3)).density, rel=0)
    for flat in (x[:1], x[:1].expand(3, 4)):
        with pytest.raises(NNGaugeError, match="at least 2 distinct samples.*pass .*radius="):
            region_density(model, flat)


class PoolCNNModules(PoolCNN):
    """PoolCNN with its F.relu a ReLU module named as the functional site is ("relu")."""

    def __init__(self):
        super().__init__()
        self.relu = nn.ReLU()

    def forward(self, x):
        h = self.pool(self.act(self.conv(x))).flatten(1)
        return self.fc2(self.relu(self.fc1(h)))


def test_maxpool_sites_have_no_local_complexity_and_functional_ones_that_of_modules():
    res = region_density(PoolCNN().double(), data(4, (1, 6, 6)), radius=0.8, n_directions=2,
                         generator=gen(0))
    rows = {row.name: row for row in res.layers}
    assert [(row.name, row.kind) for row in res.layers] == [
        ("act", "activation"), ("pool", "maxpool"), ("relu", "activation")]
    assert math.isnan(rows["pool"].local_complexity)
    assert rows["act"].local_complexity > 0 and rows["relu"].local_complexity > 0
    modules = region_density(PoolCNNModules().double(), data(4, (1, 6, 6)), radius=0.8,
                             n_directions=2, generator=gen(0))
    assert modules.layers == res.layers
    assert (modules.local_complexity, modules.local_complexity_std) == (
        res.local_complexity, res.local_complexity_std)


def one_hidden_layer(act, seed=2, d=4, m=40):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(d, m), act(), nn.Linear(m, 3)).double()
    with torch.no_grad():
        model[0].weight.normal_()
        model[0].bias.normal_()
    return model


@pytest.mark.parametrize("act, breakpoints", [(nn.ReLU, (0.0,)), (nn.Hardtanh, (-1.0, 1.0)),
                                              (nn.Tanh, (0.0,))], ids=["relu", "hardtanh", "tanh"])
@pytest.mark.parametrize("shape", ["cross-polytope", "cube"])
def test_local_complexity_of_one_hidden_layer_is_the_closed_form(act, breakpoints, shape):
    """Neuron k's level set {w_k . x + b_k = c} meets the l1 ball of radius r around x iff
    |w_k . x + b_k - c| < r max_i |w_ki|; the l-infinity ball iff < r ||w_k||_1. A neuron
    counts once, however many of its breakpoints the neighbourhood holds."""
    model, x, r = one_hidden_layer(act), data(30, (4,)), 0.5
    res = region_density(model, x, radius=r, n_directions=1, neighbourhood=shape,
                         method="exact" if act is not nn.Tanh else "sampled", n_initial=9)
    w, b = model[0].weight.detach(), model[0].bias.detach()
    h = x @ w.T + b
    reach = r * (w.abs().amax(1) if shape == "cross-polytope" else w.abs().sum(1))
    expected = torch.stack([(h - c).abs() < reach for c in breakpoints]).any(0).sum(1)
    assert 0 < expected.sum() < expected.numel() * 40  # neither none nor all
    np.testing.assert_array_equal(res.per_point_complexity, expected.numpy())
    row, = res.layers
    assert row.local_complexity == pytest.approx(float(expected.double().mean()))
    assert row.local_complexity_std == pytest.approx(float(expected.double().std(correction=0)))
    assert res.settings["vertices_per_point"] == (8 if shape == "cross-polytope" else 16)


def test_random_frames_lie_between_two_l2_balls():
    """P random orthonormal directions: the cross-polytope lies in the l2 ball of radius r,
    which hyperplane k meets iff |w_k . x + b_k| < r ||w_k||_2; for P = d it holds the l2
    ball of radius r / sqrt(d)."""
    model, x, r = one_hidden_layer(nn.ReLU, d=12), data(30, (12,)), 0.5
    w, b = model[0].weight.detach(), model[0].bias.detach()
    h = (x @ w.T + b).abs()
    outer = (h < r * w.norm(dim=1)).sum(1).numpy()
    inner = (h < r * w.norm(dim=1) / math.sqrt(12)).sum(1).numpy()
    for dims in (3, 12):
        res = region_density(model, x, radius=r, n_directions=1, neighbourhood_dims=dims,
                             generator=gen(dims))
        assert np.all(res.per_point_complexity <= outer)
        assert res.settings["vertices_per_point"] == 2 * dims
    assert np.all(res.per_point_complexity >= inner) and inner.sum() > 0


@pytest.mark.parametrize("method", ["exact", "sampled"])
def test_results_do_not_depend_on_batch_size(method):
    model, x = he_mlp(5, 12, 2, 3), data(4, (5,))
    options = dict(radius=0.7, n_directions=2, method=method, n_initial=17,
                   neighbourhood_dims=3)
    runs = [region_density(model, x, batch_size=size, generator=gen(3), **options)
            for size in (8192, 5)]
    a, b = runs
    np.testing.assert_array_equal(a.regions, b.regions)
    np.testing.assert_array_equal(a.per_point_complexity, b.per_point_complexity)
    assert a.layers == b.layers and a.n_evaluations == b.n_evaluations
    assert a.regions.max() > 1


def test_deterministic_under_a_generator():
    model, x = he_mlp(5, 16, 2, 4), data(5, (5,))
    options = dict(radius=0.5, n_directions=3, neighbourhood_dims=2)
    first, again = (region_density(model, x, generator=gen(7), **options) for _ in range(2))
    other = region_density(model, x, generator=gen(8), **options)
    assert torch.equal(first.directions, again.directions)
    np.testing.assert_array_equal(first.regions, again.regions)
    np.testing.assert_array_equal(first.per_point_complexity, again.per_point_complexity)
    assert first.layers == again.layers
    assert not torch.equal(first.directions, other.directions)
    norms = first.directions.flatten(2).norm(dim=2)
    torch.testing.assert_close(norms, torch.ones_like(norms))


def test_density_grows_in_proportion_to_the_number_of_neurons():
    """Hanin and Rolnick (ICML 2019): at initialization regions per unit length along a line
    grow linearly in the number of neurons (a loose check: the ratio stays within 30 %)."""
    x = data(10, (10,), seed=5)
    densities = []
    for width in (8, 32, 128):
        runs = [region_density(he_mlp(10, width, 3, seed), x, radius=1.0, n_directions=4,
                               generator=gen(seed)).density for seed in range(2)]
        densities.append(np.mean(runs))
    assert densities[0] < densities[1] < densities[2]
    per_neuron = np.array(densities) / (3 * np.array([8, 32, 128]))
    assert per_neuron.max() / per_neuron.min() < 1.3


def test_random_points_and_data_points():
    model = he_mlp(6, 16, 2, 5)
    x = 3.0 + 2.0 * data(400, (6,))
    on_data = region_density(model, x, radius=0.5, n_directions=2, max_samples=50,
                             generator=gen(0))
    at_random = region_density(model, x, radius=0.5, n_directions=2, points="random",
                               generator=gen(0))
    assert (on_data.points, on_data.n_samples) == ("data", 50)
    assert torch.equal(on_data.centers, x[:50])
    assert (at_random.points, at_random.n_samples) == ("random", 400)
    centers = at_random.centers
    assert not torch.equal(centers, x)
    torch.testing.assert_close(centers.mean(0), x.mean(0), atol=0.4, rtol=0)
    torch.testing.assert_close(centers.std(0), x.std(0), atol=0.3, rtol=0)
    assert on_data.density > 0 and at_random.density > 0
    assert at_random.to_dict()["points"] == "random"


def test_sampled_finds_at_most_the_exact_regions():
    model, x = he_mlp(5, 16, 3, 6), data(4, (5,))
    options = dict(radius=1.0, n_directions=3, generator=gen(2))
    exact = region_density(model, x, **options)
    options["generator"] = gen(2)
    sampled = region_density(model, x, method="sampled", n_initial=33, **options)
    assert np.all(sampled.regions <= exact.regions)
    assert (sampled.regions == exact.regions).mean() > 0.9
    assert [row.name for row in sampled.layers] == [row.name for row in exact.layers]
    for s, e in zip(sampled.layers, exact.layers):
        assert s.transitions_per_length <= e.transitions_per_length
        assert s.local_complexity == e.local_complexity
    assert sampled.n_evaluations >= 12 * 33 and not sampled.budget_exhausted
    options["generator"] = gen(2)
    starved = region_density(model, x, method="sampled", n_initial=33, max_evaluations=33,
                             **options)
    assert starved.budget_exhausted and starved.n_evaluations == 12 * 33
    assert sampled.near_coincident is None and exact.near_coincident == 0


def test_layers_select_rows():
    model, x = he_mlp(5, 16, 3, 6), data(4, (5,))
    full = region_density(model, x, radius=1.0, n_directions=2, generator=gen(2))
    second = region_density(model, x, radius=1.0, n_directions=2, generator=gen(2),
                            layers=["3"])
    assert second.layers == full.layers[1:2]
    np.testing.assert_array_equal(second.regions, full.regions)  # all sites still cut
    assert second.local_complexity == pytest.approx(full.layers[1].local_complexity)
    with pytest.raises(NNGaugeError, match="names of activation"):
        region_density(model, x, radius=1.0, layers=["0"])


def test_a_smooth_network_refuses_the_exact_method():
    model = he_mlp(5, 8, 2, 0, act=nn.Tanh)
    x = data(3, (5,))
    with pytest.raises(NNGaugeError, match=r"1 \(Tanh\): not piecewise linear.*"
                                           r"method='sampled'"):
        region_density(model, x, radius=0.5)
    res = region_density(model, x, radius=0.5, method="sampled", n_initial=17)
    assert res.density > 0 and res.method == "sampled"


def test_bad_inputs():
    model, x = he_mlp(5, 8, 1, 0), data(3, (5,))
    for radius in (0.0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(NNGaugeError, match="radius"):
            region_density(model, x, radius=radius)
    for n in (0, -2, 1.5):
        with pytest.raises(NNGaugeError, match="n_directions an integer >= 1"):
            region_density(model, x, radius=1.0, n_directions=n)
    for option, value in (("method", "bogus"), ("points", "test"),
                          ("neighbourhood", "ball")):
        with pytest.raises(NNGaugeError, match=option):
            region_density(model, x, radius=1.0, **{option: value})
    with pytest.raises(NNGaugeError, match="at most 12 dimensions"):
        region_density(model, data(3, (13,)), radius=1.0, neighbourhood="cube")
    with pytest.raises(NNGaugeError, match="at most the input's dimension 5"):
        region_density(model, x, radius=1.0, neighbourhood_dims=6)
    with pytest.raises(NNGaugeError, match="at least 2 samples"):
        region_density(model, x[:1], radius=1.0, points="random")
    with pytest.raises(NNGaugeError, match="real-valued inputs.*token ids"):
        region_density(model, torch.ones(3, 5, dtype=torch.long), radius=1.0)
    with pytest.raises(NNGaugeError, match="shape"):
        region_density(model, data(3, (4,)), radius=1.0)


def test_batchnorm_needs_per_sample_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    model = model.double().train()
    x = data(64, (5,))
    with pytest.raises(NNGaugeError, match="norm_mode='frozen'"):
        region_density(model, x, radius=0.5)
    stats = model[1].running_mean.clone()
    res = region_density(model, x, radius=0.5, n_directions=2, norm_mode="frozen")
    assert res.mode.norm_mode == "frozen" and res.density > 0
    assert torch.equal(model[1].running_mean, stats) and model.training


def state(model):
    """Everything a measure must leave as it found: modes, parameters (values, dtypes,
    requires_grad) and hooks."""
    return ([m.training for m in model.modules()],
            [(p.detach().clone(), p.dtype, p.requires_grad) for p in model.parameters()],
            [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()])


def same_state(a, b):
    return a[0] == b[0] and a[2] == b[2] and all(
        torch.equal(p, q) and (dp, rp) == (dq, rq) for (p, dp, rp), (q, dq, rq) in zip(a[1], b[1]))


def test_model_state_and_hooks_are_left_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    model[0].weight.requires_grad_(False)
    before = state(model)
    for method in ("exact", "sampled"):
        res = region_density(model, data(4, (5,)).float(), radius=0.5, n_directions=2,
                             method=method, n_initial=9)
        assert res.mode.dropout == "off" and res.mode.precision == "float32"
        assert same_state(state(model), before)


class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


@pytest.mark.parametrize("method", ["exact", "sampled"])
def test_hooks_removed_when_the_model_raises(method):
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), Boom())
    before = state(model)
    with pytest.raises(NNGaugeError, match="boom"):
        region_density(model, torch.zeros(2, 3), radius=1.0, method=method)
    assert same_state(state(model), before)


def test_result_frame_dict_and_plot():
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    import matplotlib

    matplotlib.use("Agg")
    res = region_density(PoolCNN().double(), data(3, (1, 6, 6)), radius=0.8, n_directions=2,
                         generator=gen(0))
    frame = res.to_frame()
    assert list(frame["name"]) == ["act", "pool", "relu"]
    assert list(frame.columns) == ["name", "kind", "units", "transitions_per_length",
                                   "local_complexity", "local_complexity_std"]
    summary = res.to_dict()
    assert summary["density"] == res.density and summary["n_samples"] == 3
    assert not {"per_point", "regions", "centers", "directions"} & set(summary)
    ax = res.plot()
    assert len(ax.patches) == 3 and len(ax.figure.axes) == 2
