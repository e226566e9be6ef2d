"""Acceptance tests of trajectory_length (Raghu et al. section 2.2, Theorem 3, figure 13):
exact on linear maps, convergence under refinement against an independent dense reference,
exponential growth in random hard-tanh networks consistent with Theorem 3, hooks and state,
bad input."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.expressivity._trajectory import trajectory_length
from nngauge.nn import mlp
from nngauge.theory import trajectory_growth_bound
from nngauge.trajectories import arc, line, through


def _linear(d_in, d_out, seed):
    torch.manual_seed(seed)
    net = nn.Linear(d_in, d_out).double()
    return net, net.weight.detach().numpy()


def test_line_through_linear_map_is_exact():
    net, a = _linear(5, 3, 0)
    gen = torch.Generator().manual_seed(1)
    x0, x1 = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    res = trajectory_length(net, line(x0, x1, 3), layers=[])
    expected = np.linalg.norm(a @ (x1 - x0).numpy())  # bias cancels
    assert res.lengths[0] == pytest.approx(float((x1 - x0).norm()), rel=1e-12)
    assert res.lengths[-1] == pytest.approx(expected, rel=1e-12)
    assert res.converged and res.n_points <= 5  # exact after one refinement


def test_image_inputs_and_through_path_on_linear_map():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 4)).double()
    a = net[1].weight.detach().numpy()
    points = torch.randn(4, 3, 2, 2, dtype=torch.float64)
    res = trajectory_length(net, through(points, 7), layers=[])
    steps = (points[1:] - points[:-1]).reshape(3, -1).numpy()
    assert res.lengths[-1] == pytest.approx(np.linalg.norm(steps @ a.T, axis=1).sum(),
                                            rel=1e-12)
    assert res.lengths[0] == pytest.approx(np.linalg.norm(steps, axis=1).sum(), rel=1e-12)


def test_arc_through_linear_map_matches_quadrature():
    net, a = _linear(6, 4, 3)
    rng = np.random.default_rng(4)
    x0, x1 = rng.standard_normal(6), rng.standard_normal(6)

    def speed(t):  # ||A x'(t)||, x(t) = cos(pi t/2) x0 + sin(pi t/2) x1
        dx = (math.pi / 2) * (-math.sin(math.pi * t / 2) * x0 + math.cos(math.pi * t / 2) * x1)
        return np.linalg.norm(a @ dx)

    expected, _ = integrate.quad(speed, 0.0, 1.0, epsabs=1e-13, epsrel=1e-13)
    res = trajectory_length(net, arc(torch.from_numpy(x0), torch.from_numpy(x1), 9),
                            layers=[], tol=1e-8, max_points=2**16 + 1)
    assert res.converged
    assert res.lengths[-1] == pytest.approx(expected, rel=1e-7)
    assert res.lengths[-1] <= expected  # inscribed polygon


def _dense_reference(net, x0, x1, n):
    """Polyline length of the output image of the arc at n points, chunked (independent of
    the library's code)."""
    t = torch.linspace(0, 1, n, dtype=torch.float64)
    total, last = 0.0, None
    with torch.no_grad():
        for chunk in t.split(2**15):
            c, s = torch.cos(chunk * math.pi / 2), torch.sin(chunk * math.pi / 2)
            y = net(c[:, None] * x0 + s[:, None] * x1)
            if last is not None:
                y = torch.cat([last, y])
            total += float((y[1:] - y[:-1]).norm(dim=1).sum())
            last = y[-1:]
    return total


def test_refinement_converges_to_dense_reference():
    torch.manual_seed(5)
    net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                        nn.Linear(32, 3)).double()
    with torch.no_grad():
        for m in net:
            if isinstance(m, nn.Linear):
                m.weight.mul_(3.0)
    x0, x1 = torch.randn(2, 8, dtype=torch.float64)
    reference = _dense_reference(net, x0, x1, 2**18 + 1)
    results = [trajectory_length(net, arc(x0, x1, 5), tol=tol) for tol in (1e-2, 1e-3, 1e-4)]
    errors = [r.layers[-1].discretization_error for r in results]
    assert errors[0] > errors[1] > errors[2]
    assert [r.n_points for r in results] == sorted(r.n_points for r in results)
    for tol, res in zip((1e-2, 1e-3, 1e-4), results):
        assert res.converged
        assert abs(res.lengths[-1] - reference) <= tol * reference
        assert res.lengths[-1] <= reference * (1 + 1e-12)  # polygon lengths increase


def test_hard_tanh_growth_matches_theorem_3():
    """Figure 13 setting: width k = 100, weights N(0, sigma_w^2 / k), sigma_w = 4, no bias,
    a circular arc between orthogonal inputs of norm sqrt(k). Theorem 3 (appendix B, eq. (a))
    bounds E[l(z^(d+1))] / E[l(z^(d))] from below by ``rate`` and the identity activation
    bounds it from above by ``upper_rate``; the measured per-layer growth of every seed must
    lie between, and log length must be linear in depth (exponential growth)."""
    width, depth, sigma_w = 100, 7, 4.0
    bound = trajectory_growth_bound(width, depth - 1, sigma_w=sigma_w, act="hard_tanh")
    slopes = []
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        net = mlp(width, width, depth, 10, activation="hard_tanh", init="gaussian",
                  sigma_w=sigma_w, bias_std=0.0, generator=gen, dtype=torch.float64)
        x0, x1 = torch.randn(2, width, generator=gen, dtype=torch.float64)
        x1 = x1 - (x1 @ x0) / (x0 @ x0) * x0
        x0, x1 = x0 / x0.norm() * math.sqrt(width), x1 / x1.norm() * math.sqrt(width)
        res = trajectory_length(net, arc(x0, x1, 65), tol=1e-2)
        assert res.converged
        rows = [r for r in res.layers if r.name.endswith(".act")]
        assert len(rows) == depth - 1
        growth = np.array([r.growth for r in rows[1:]])  # hidden layer d -> d + 1
        assert np.all(growth >= bound.rate), (growth, bound.rate)
        assert np.all(growth <= bound.upper_rate), (growth, bound.upper_rate)
        logs = np.log([r.length for r in rows])
        slope, intercept = np.polyfit(np.arange(len(logs)), logs, 1)
        residual = logs - (slope * np.arange(len(logs)) + intercept)
        assert np.abs(residual).max() < 0.15  # straight line in log scale
        slopes.append(slope)
        assert res.theory is not None and res.theory["rate"] == pytest.approx(bound.rate)
    assert min(slopes) > math.log(bound.rate)


def test_hooks_never_leak_and_state_restored():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), Boom())
    net.train()
    flags = [p.requires_grad for p in net.parameters()]
    with pytest.raises(NNGaugeError):
        trajectory_length(net, line(torch.zeros(3), torch.ones(3), 4))
    assert all(not m._forward_hooks for m in net.modules())
    assert net.training and [p.requires_grad for p in net.parameters()] == flags

    ok = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    before = [p.detach().clone() for p in ok.parameters()]
    trajectory_length(ok, arc(torch.ones(3), -torch.ones(3), 4))
    assert all(not m._forward_hooks for m in ok.modules())
    assert all(torch.equal(a, b) for a, b in zip(before, ok.parameters()))
    assert all(p.requires_grad for p in ok.parameters())


@pytest.mark.parametrize("build", [
    lambda: line(torch.ones(3), torch.ones(3), 5),          # x0 == x1
    lambda: arc(torch.ones(3), torch.ones(2), 5),           # shape mismatch
    lambda: line(torch.zeros(3), torch.ones(3), 1),         # n < 2
    lambda: through(torch.ones(1, 3), 5),                   # one point
    lambda: line(torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long), 5),
])
def test_bad_trajectories(build):
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        build()


def test_bad_options_and_models():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    path = line(torch.zeros(3), torch.ones(3), 5)
    for kwargs in ({"tol": 0.0}, {"max_points": 1}, {"layers": ["nope"]}):
        with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
            trajectory_length(net, path, **kwargs)
    with pytest.raises(NNGaugeError):  # wrong input shape for the model
        trajectory_length(net, line(torch.zeros(5), torch.ones(5), 5))
    bn = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).train()
    with pytest.raises(NNGaugeError, match="eval"):
        trajectory_length(bn, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="converge"):
            trajectory_length(nn.Sequential(nn.Linear(3, 8), nn.Tanh()),
                              arc(torch.tensor([1.0, 0.0, 0.0]), 5 * torch.ones(3), 3),
                              tol=1e-9,
                              max_points=9)


def test_result_frame_dict_and_plot_with_theory_overlay():
    import matplotlib

    matplotlib.use("Agg")
    gen = torch.Generator().manual_seed(0)
    net = mlp(4, 16, 4, 2, activation="hard_tanh", init="gaussian", sigma_w=3.0,
              generator=gen, dtype=torch.float64)
    res = trajectory_length(net, arc(torch.ones(4), -torch.ones(4).cumsum(0), 9), tol=1e-2)
    frame = res.to_frame()
    assert list(frame["name"]) == ["input", "layers.0.act", "layers.1.act", "layers.2.act",
                                   "output"]
    assert res.to_dict()["lengths"] == list(res.lengths)
    ax = res.plot()
    labels = [line.get_label() for line in ax.get_lines()]
    assert "measured" in labels and any("Theorem 3" in label for label in labels)
    assert ax.get_yscale() == "log"
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
    # no overlay for networks the theorem does not cover
    other = mlp(4, 16, 4, 2, activation="tanh", generator=gen)
    assert trajectory_length(other, line(torch.zeros(4), torch.ones(4), 5)).theory is None
