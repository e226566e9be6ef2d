"""Trajectories and trajectory length (Raghu et al. 2017, section 2.2, Theorems 3 and 4,
figures 5 and 13): closed forms, convergence under refinement, exponential growth of random
hard-tanh networks against Theorem 3, transitions proportional to length, state and errors."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad
from torch import nn

from nngauge import NNGaugeError
from nngauge.measures.expressivity._trajectory import trajectory_length
from nngauge.measures.expressivity._transitions import transitions
from nngauge.nn import mlp
from nngauge.theory import trajectory_growth_bound
from nngauge.trajectories import Trajectory, arc, as_trajectory, line, through


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- trajectories


def test_line_and_arc_formulas_and_endpoints():
    x0, x1 = torch.randn(2, 1, 4, 4, generator=gen(0), dtype=torch.float64)  # images
    seg, circ = line(x0, x1, 11), arc(x0, x1, 11)
    assert seg.points.shape == circ.points.shape == (11, 1, 4, 4)
    for traj in (seg, circ):
        assert torch.allclose(traj.points[0], x0) and torch.allclose(traj.points[-1], x1)
        np.testing.assert_allclose(traj.t.numpy(), np.linspace(0, 1, 11))
    assert torch.allclose(seg.points[3], 0.7 * x0 + 0.3 * x1)
    angle = math.pi / 2 * 0.3
    assert torch.allclose(circ.points[3], math.cos(angle) * x0 + math.sin(angle) * x1)
    assert torch.allclose(circ.at(torch.tensor([0.3], dtype=torch.float64))[0], circ.points[3])


def test_through_puts_every_data_point_on_the_grid():
    pts = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 2.0]])
    traj = through(pts, 6)  # rounded up to 1 + 2 * ceil(5 / 2) = 7 points
    assert traj.n_points == 7 and traj.kind == "through"
    assert torch.equal(traj.points[[0, 3, 6]], pts)
    assert torch.allclose(traj.points[4], torch.tensor([1.0, 2.0 / 3.0]))
    refined = traj.refine()
    assert refined.n_points == 13 and torch.equal(refined.points[::2], traj.points)
    user = as_trajectory(pts)
    assert user.kind == "points" and torch.equal(user.points, pts)
    vertices, t = user.polyline()
    assert torch.equal(vertices, pts) and t.tolist() == [0.0, 0.5, 1.0]


def test_refinement_halves_every_interval():
    x0, x1 = torch.randn(2, 3, generator=gen(1))
    coarse = arc(x0, x1, 5)
    fine = coarse.refine()
    assert fine.n_points == 9 and torch.allclose(fine.points[::2], coarse.points)


def test_trajectory_bad_inputs():
    x = torch.zeros(3)
    with pytest.raises(NNGaugeError, match="x0 != x1"):
        line(x, x.clone(), 5)
    with pytest.raises(NNGaugeError, match="same shape"):
        arc(x, torch.ones(4), 5)
    with pytest.raises(NNGaugeError, match="n an integer >= 2"):
        line(x, torch.ones(3), 1)
    with pytest.raises(NNGaugeError, match="floating"):
        line(torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long))
    with pytest.raises(NNGaugeError, match="m >= 2"):
        through(torch.zeros(1, 3))
    with pytest.raises(NNGaugeError, match="repeated"):
        through(torch.tensor([[0.0], [1.0], [1.0]]))
    with pytest.raises(NNGaugeError, match="tensor"):
        line([0.0], [1.0])


# ---------------------------------------------------------------- lengths: closed forms


def test_length_of_a_linear_map_is_exact():
    torch.manual_seed(0)
    model = nn.Linear(5, 3).double()
    x0, x1 = torch.randn(2, 5, dtype=torch.float64)
    res = trajectory_length(model, line(x0, x1, 2))
    expected = float(torch.linalg.norm(model.weight.detach() @ (x1 - x0)))
    assert [row.name for row in res.layers] == ["input", "output"]
    assert res.lengths[0] == pytest.approx(float(torch.linalg.norm(x1 - x0)), rel=1e-14)
    assert res.lengths[1] == pytest.approx(expected, rel=1e-14)
    assert res.converged and res.layers[1].discretization_error < 1e-12


@pytest.mark.filterwarnings("ignore:trajectory_length.*did not converge")
def test_arc_length_converges_under_refinement_through_tanh():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh()).double()
    x0, x1 = torch.randn(2, 4, dtype=torch.float64) * 2
    speeds = lambda t: float(torch.linalg.norm(  # noqa: E731  |dx/dt| of the arc
        math.pi / 2 * (-math.sin(math.pi * t / 2) * x0 + math.cos(math.pi * t / 2) * x1)))
    exact_input = quad(speeds, 0, 1, epsabs=1e-13)[0]
    results = [trajectory_length(model, arc(x0, x1, n), tol=1e-12, max_points=n)
               for n in (17, 33, 65, 129, 257)]
    lengths = np.array([r.lengths for r in results])
    # the inscribed polygon's length grows towards the arc length at every layer
    assert np.all(np.diff(lengths, axis=0) >= -1e-12)
    # and its error shrinks like h^2 (Richardson): successive differences fall by about 4
    diffs = np.diff(lengths, axis=0)
    ratios = diffs[:-1] / diffs[1:]
    assert np.all((ratios > 3.5) & (ratios < 4.5))
    assert abs(lengths[-1, 0] - exact_input) < 1e-4 * exact_input
    converged = trajectory_length(model, arc(x0, x1, 17), tol=1e-6)
    assert converged.converged and converged.lengths[0] == pytest.approx(exact_input, rel=1e-6)
    assert all(row.discretization_error <= 1e-6 * row.length for row in converged.layers)


def test_non_convergence_is_reported_not_hidden():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh()).double()
    with pytest.warns(UserWarning, match="did not converge") as record:
        res = trajectory_length(model, arc(torch.ones(3), -torch.ones(3) * 2, 3), tol=1e-9,
                                max_points=9)
    assert not res.converged and res.n_points == 9
    assert record[0].filename == __file__  # the warning points at the caller's line


# ---------------------------------------------------------------- Theorem 3, figures 5 and 13


def hard_tanh_net(depth, seed, sigma_w=4.0, width=100):
    return mlp(width, width, depth, width, activation="hard_tanh", init="gaussian",
               sigma_w=sigma_w, generator=gen(seed))


@pytest.mark.parametrize("seed", range(4))
def test_hard_tanh_length_grows_exponentially_at_theorem_3_rate(seed):
    depth, k, sigma_w = 8, 100, 4.0
    model = hard_tanh_net(depth, seed)
    x0, x1 = torch.randn(2, k, generator=gen(50 + seed))  # ||x||^2 ~ k, as the bound assumes
    res = trajectory_length(model, arc(x0, x1, 129), tol=1e-2)
    assert res.converged
    hidden = np.log(np.array(res.lengths[:depth]))  # input and the depth - 1 hidden layers
    bound = trajectory_growth_bound(k, depth - 1, sigma_w=sigma_w, act="hard_tanh")
    growth = np.exp(np.diff(hidden))
    # every layer grows at least by Theorem 3's explicit factor, and at most by its upper bound
    assert np.all(growth >= bound.rate) and np.all(growth <= bound.upper_rate)
    # exponential: log length is linear in depth (R^2 of a straight-line fit)
    d = np.arange(len(hidden))
    fit = np.polyfit(d, hidden, 1)
    residual = hidden - np.polyval(fit, d)
    r2 = 1 - residual.var() / hidden.var()
    assert r2 > 0.99 and math.exp(fit[0]) > bound.rate
    assert res.theory["rate"] == pytest.approx(bound.rate)


@pytest.mark.slow
def test_transitions_proportional_to_length_figure_5():
    """Figure 5 / Theorem 4: the transitions of layer d are proportional to the length of the
    trajectory entering it. Crofton's formula makes the expected number of crossings of a
    unit's breakpoints by a random projection of a curve proportional to the curve's length in
    the saturated regime; with k = 100 units per layer and units that are correlated through
    the shared curve, per-layer ratios scatter by ~10-20%, so max/min < 1.5 across depths is a
    loose but meaningful check (lengths themselves grow ~6x over these layers)."""
    for seed in range(2):
        model = hard_tanh_net(7, seed)
        x0, x1 = torch.randn(2, 100, generator=gen(60 + seed))
        traj = arc(x0, x1, 129)
        lengths = trajectory_length(model, traj, tol=1e-2).lengths
        counts = transitions(model, traj).per_layer
        ratios = np.array(counts) / np.array(lengths[:len(counts)])
        assert lengths[len(counts) - 1] > 5 * lengths[1]
        assert ratios.max() / ratios.min() < 1.5


# ---------------------------------------------------------------- state, results, errors


def test_model_state_restored_and_no_hooks_left():
    model = nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    model.eval()
    model[0].weight.requires_grad_(False)
    buffers = [b.clone() for b in model.buffers()]
    trajectory_length(model, line(torch.zeros(3), torch.ones(3), 5))
    assert not model.training and not model[0].weight.requires_grad
    assert model[3].weight.requires_grad
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers()))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


class Failing(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        self.act(x)
        raise RuntimeError("boom")


def test_hooks_removed_when_model_raises():
    model = Failing()
    with pytest.raises(NNGaugeError, match="boom"):
        trajectory_length(model, line(torch.zeros(3), torch.ones(3), 5))
    assert not model.act._forward_hooks


def test_bad_arguments():
    model = nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.ReLU())
    traj = line(torch.zeros(3), torch.ones(3), 5)
    with pytest.raises(NNGaugeError, match="eval"):
        trajectory_length(model, traj)
    model.eval()
    with pytest.raises(NNGaugeError, match="tol a finite number > 0"):
        trajectory_length(model, traj, tol=0)
    with pytest.raises(NNGaugeError, match="max_points"):
        trajectory_length(model, traj, max_points=1)
    with pytest.raises(NNGaugeError, match="named_modules"):
        trajectory_length(model, traj, layers=["nope"])
    with pytest.raises(NNGaugeError, match="shape"):
        trajectory_length(model, line(torch.zeros(4), torch.ones(4), 5))


def test_per_layer_rows_frame_and_plot():
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    model = hard_tanh_net(4, 0, width=20)
    res = trajectory_length(model, arc(*torch.randn(2, 20, generator=gen(3)), 65), tol=1e-2)
    names = ["input", "layers.0.act", "layers.1.act", "layers.2.act", "output"]
    assert [row.name for row in res.layers] == names and len(res.lengths) == 5
    assert res.growth[2] == pytest.approx(res.lengths[2] / res.lengths[1])
    frame = res.to_frame()
    assert list(frame["name"]) == names
    ax = res.plot()
    assert len(ax.lines) == 3 and ax.get_yscale() == "log"
    orthogonal = mlp(20, 20, 4, 20, activation="hard_tanh", generator=gen(0))
    assert trajectory_length(orthogonal, res_traj(20)).theory is None


def res_traj(d):
    return line(torch.zeros(d), torch.ones(d), 3)


def test_user_tensor_of_points_is_a_polyline():
    model = nn.Identity()
    pts = torch.tensor([[0.0, 0.0], [3.0, 4.0], [3.0, 0.0]])
    res = trajectory_length(model, pts)
    assert res.lengths[0] == pytest.approx(9.0) and res.kind == "points"
    assert isinstance(as_trajectory(pts), Trajectory)


def test_point_counts_are_declared():
    x0, x1 = torch.zeros(3), torch.ones(3)
    assert len(line(x0, x1, np.int64(5))) == 5 and len(arc(x1, -x1, np.int64(3))) == 3
    for bad in (1, 2.0, "5", True):
        with pytest.raises(NNGaugeError, match="expected n an integer >= 2"):
            through(torch.eye(3), bad)
    with pytest.raises(NNGaugeError, match="expected where"):
        as_trajectory(torch.eye(3), where=3)
