"""loss_landscape(count_regions=True): region boundaries of the data on a loss slice, exact
along a line of one layer (against a dense grid and against weight_transitions), sampled
otherwise (against patterns recomputed point by point), and its refusals."""

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import NNGaugeError, loss_landscape, weight_transitions
from nngauge.nn import mlp


@pytest.fixture(scope="module")
def problem():
    net = mlp(4, 12, 3, 3, activation="relu", dtype=torch.float64,
              generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(40, 4, generator=gen, dtype=torch.float64)
    return net, x, torch.randint(0, 3, (40,), generator=gen)


def _patterns(net, x):
    """Every hidden unit's on/off pattern per sample, (n, units), layer by layer."""
    codes, h = [], x
    for layer in net.layers:
        h = layer.linear(h)
        if hasattr(layer, "act"):
            codes.append(h > 0)
            h = layer.act(h)
    return torch.cat(codes, 1)


def _moved(net, direction, t):
    copy = mlp(4, 12, 3, 3, activation="relu", dtype=torch.float64)
    copy.load_state_dict(net.state_dict())
    with torch.no_grad():
        for name, p in copy.named_parameters():
            if name in direction:
                p.add_(t * direction[name])
    return copy


def test_exact_line_of_one_layer_counts_every_change_of_a_dense_grid(problem):
    net, x, y = problem
    res = loss_landscape(net, (x, y), dims=1, resolution=21, span=0.5, count_regions=True,
                         layers=["layers.1.linear"], generator=torch.Generator().manual_seed(0))
    assert res.regions_method == "exact"
    direction = {k: v for k, v in res.directions[0].items() if bool(v.any())}
    assert set(direction) == {"layers.1.linear.weight"}
    # a dense count of the samples whose pattern changes inside each grid interval
    # (the moved layer's input is fixed; only its own units can change: the last has none)
    t = torch.linspace(-0.5, 0.5, 10_001, dtype=torch.float64)
    with torch.no_grad():
        z = net.layers[0].act(net.layers[0].linear(x))
        layer = net.layers[1].linear
        h = layer(z) + t.view(-1, 1, 1) * (z @ direction["layers.1.linear.weight"].T)
    patterns = h > 0
    changes = (patterns[1:] != patterns[:-1]).any(2)  # (steps, samples)
    interval = np.minimum(np.searchsorted(res.coordinates[0], t[1:].numpy(), side="left") - 1,
                          19)
    dense = np.bincount(interval, weights=changes.sum(1).numpy(), minlength=20)
    assert res.region_changes.sum() > 20
    np.testing.assert_array_equal(res.region_changes, dense.astype(int))
    # the same line through weight_transitions directly
    direct = weight_transitions(net, x, layer="layers.1.linear",
                                direction={"weight": direction["layers.1.linear.weight"]},
                                span=(-0.5, 0.5))
    np.testing.assert_allclose(res.region_breakpoints, direct.breakpoints)
    lo, hi = res.smooth_interval
    assert lo < 0 < hi and not ((direct.breakpoints > lo) & (direct.breakpoints < hi)).any()


def test_sampled_line_equals_patterns_recomputed_point_by_point(problem):
    net, x, y = problem
    res = loss_landscape(net, (x, y), dims=1, resolution=9, span=1.0, count_regions=True,
                         batch_size=16, chunk_size=4,
                         generator=torch.Generator().manual_seed(1))
    assert res.regions_method.startswith("sampled (the direction moves more than one module")
    direction = res.directions[0]
    with torch.no_grad():
        patterns = torch.stack([_patterns(_moved(net, direction, float(a)), x)
                                for a in res.coordinates[0]])
        centre = _patterns(net, x)
    expected_changes = (patterns[1:] != patterns[:-1]).any(2).sum(1).numpy()
    np.testing.assert_array_equal(res.region_changes, expected_changes)
    expected_distance = (patterns != centre).double().mean((1, 2)).numpy()
    np.testing.assert_allclose(res.pattern_distance, expected_distance, atol=1e-15)
    assert res.pattern_distance[4] == 0.0  # alpha = 0 is theta
    lo, hi = res.smooth_interval
    assert lo <= 0 <= hi


def test_plane_distance_is_zero_at_theta_and_grows_away(problem):
    net, x, y = problem
    res = loss_landscape(net, (x, y), resolution=(7, 7), span=1.0, count_regions=True,
                         generator=torch.Generator().manual_seed(2))
    assert res.regions_method == "sampled" and res.region_changes is None
    assert res.pattern_distance.shape == (7, 7) and res.pattern_distance[3, 3] == 0.0
    assert res.pattern_distance[0, 0] > 0 and res.pattern_distance.max() <= 1
    assert res.smooth_interval is None


def test_smooth_and_batchnorm_networks_fall_back_to_sampling_and_say_why():
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(24, 3, generator=gen), torch.randint(0, 2, (24,), generator=gen)
    tanh = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    res = loss_landscape(tanh, (x, y), dims=1, resolution=5, count_regions=True, layers=["0"],
                         generator=gen)
    assert res.regions_method.startswith("sampled (not exact")
    bn = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    res = loss_landscape(bn, (x, y), dims=1, resolution=5, count_regions=True, layers=["0"],
                         norm_mode="train", batch_size=8, generator=gen)
    assert "batch statistics" in res.regions_method
    assert res.settings["count_regions"] is True


def test_counting_regions_leaves_losses_unchanged(problem):
    net, x, y = problem
    plain = loss_landscape(net, (x, y), resolution=(5, 4),
                           generator=torch.Generator().manual_seed(6))
    counted = loss_landscape(net, (x, y), resolution=(5, 4), count_regions=True,
                             generator=torch.Generator().manual_seed(6))
    np.testing.assert_array_equal(plain.losses, counted.losses)
    assert plain.pattern_distance is None and plain.regions_method is None


@pytest.mark.parametrize("kwargs, fragment", [
    ({"count_regions": "yes"}, "count_regions True or False"),
    ({"layers": ["nope"]}, "names of modules with parameters"),
    ({"layers": ["layers.0.linear"], "directions": "hessian"}, "layers= with directions"),
])
def test_bad_region_options_are_refused(problem, kwargs, fragment):
    net, x, y = problem
    with pytest.raises(NNGaugeError, match=fragment):
        loss_landscape(net, (x, y), dims=1, resolution=3, **kwargs)


def test_a_model_without_activations_cannot_count_regions():
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    with pytest.raises(NNGaugeError, match="activation"):
        loss_landscape(nn.Linear(3, 2), (x, y), dims=1, resolution=3, count_regions=True)


def test_plots_draw_the_boundaries(problem):
    import matplotlib

    matplotlib.use("Agg")
    net, x, y = problem
    line = loss_landscape(net, (x, y), dims=1, resolution=11, count_regions=True,
                          layers=["layers.1.linear"], generator=torch.Generator().manual_seed(0))
    ax = line.plot()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("pattern changes per step (exact)" in t for t in labels)
    assert len(ax.lines) > 2  # breakpoints drawn as vertical lines
    plane = loss_landscape(net, (x, y), resolution=(9, 9), count_regions=True,
                           generator=torch.Generator().manual_seed(0))
    labels = [t.get_text() for t in plane.plot().get_legend().get_texts()]
    assert "edge of theta's piece" in labels
