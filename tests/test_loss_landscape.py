"""loss_landscape: batched grid == loop over perturbed copies, filter normalization, exact
quadratics, PCA of a planted trajectory, batchnorm handling, model left as found, bad inputs."""

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.curvature._landscape import loss_landscape


def _mlp(seed=0, bn=False):
    torch.manual_seed(seed)
    layers = [nn.Linear(5, 12)] + ([nn.BatchNorm1d(12)] if bn else []) + [
        nn.ReLU(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 3)]
    return nn.Sequential(*layers).double()


def _data(n=50, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=gen, dtype=torch.float64)
    return x, torch.randint(0, 3, (n,), generator=gen)


def _state(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {m: m.training for m in model.modules()},
            {n: p.requires_grad for n, p in model.named_parameters()})


def _same_state(model, state):
    tensors, modes, grads = state
    return (all(torch.equal(tensors[k], v) for k, v in model.state_dict().items())
            and all(m.training == modes[m] for m in model.modules())
            and all(p.requires_grad == grads[n] for n, p in model.named_parameters()))


def _looped(model, r, x, y, *, train=False, batch_size=None, loss=F.cross_entropy):
    """Losses and accuracies on r's grid from deep copies whose weights are loaded."""
    batch_size = batch_size or len(y)
    grids = np.meshgrid(*r.coordinates, indexing="ij")
    losses, accs = np.zeros(grids[0].shape), np.zeros(grids[0].shape)
    for idx in np.ndindex(grids[0].shape):
        copied = copy.deepcopy(model).train(train)
        state = copied.state_dict()
        for name, w in model.named_parameters():
            state[name] = w.detach() + sum(float(g[idx]) * d[name]
                                           for g, d in zip(grids, r.directions))
        copied.load_state_dict(state)
        with torch.no_grad():
            for b in range(0, len(y), batch_size):
                out, yb = copied(x[b:b + batch_size]), y[b:b + batch_size]
                losses[idx] += float(loss(out, yb)) * len(yb) / len(y)
                accs[idx] += float((out.argmax(-1) == yb).double().mean()) * len(yb) / len(y)
    return losses, accs


def test_batched_grid_equals_loop_and_leaves_model_as_found():
    model, (x, y) = _mlp(), _data()
    model.train()
    state = _state(model)
    rng = torch.get_rng_state()
    r = loss_landscape(model, (x, y), resolution=(4, 5), span=((-1, 0.5), (-0.5, 1.5)),
                       batch_size=20, chunk_size=3, generator=torch.Generator().manual_seed(0))
    losses, accs = _looped(model, r, x, y)
    np.testing.assert_allclose(r.losses, losses, rtol=0, atol=1e-10)
    np.testing.assert_allclose(r.accuracies, accs, rtol=0, atol=1e-12)
    with torch.no_grad():
        assert r.center_loss == pytest.approx(float(F.cross_entropy(model.eval()(x), y)),
                                              abs=1e-12)
    model.train()
    assert _same_state(model, state) and torch.equal(torch.get_rng_state(), rng)
    assert r.losses.shape == (4, 5) and [len(a) for a in r.coordinates] == [4, 5]
    assert r.coordinates[1][0] == -0.5 and r.coordinates[1][-1] == 1.5
    assert r.min_loss == r.losses.min()
    i, j = np.unravel_index(r.losses.argmin(), r.losses.shape)
    assert r.min_coordinates == (r.coordinates[0][i], r.coordinates[1][j])
    assert r.settings["chunk_size"] == 3 and r.mode.norm_mode == "no batch statistics"
    again = loss_landscape(model, (x, y), resolution=(4, 5), span=((-1, 0.5), (-0.5, 1.5)),
                           generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(again.losses, r.losses, rtol=0, atol=1e-12)  # one chunk, batch


def test_line_inferred_from_steps_or_direction():
    model, (x, y) = _mlp(), _data()
    r = loss_landscape(model, x, y, resolution=(9,), generator=torch.Generator().manual_seed(1))
    assert r.dims == 1 and r.losses.shape == (9,) and len(r.directions) == 1
    given = loss_landscape(model, (x, y), directions=r.directions[0], resolution=9)
    np.testing.assert_allclose(given.losses, r.losses, rtol=0, atol=1e-12)
    assert given.settings["directions"] == "given"
    mse = loss_landscape(model, (x, y), directions=r.directions[0], resolution=9, loss="mse")
    one_hot = lambda out, labels: F.mse_loss(out, F.one_hot(labels, 3).double())  # noqa: E731
    looped, accs = _looped(model, mse, x, y, loss=one_hot)
    np.testing.assert_allclose(mse.losses, looped, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mse.accuracies, accs, rtol=0, atol=1e-12)


class _ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.norm(self.conv(x))).flatten(1))


@pytest.mark.parametrize("include", [False, True])
def test_filter_normalization_matches_weight_filters(include):
    torch.manual_seed(0)
    model = _ConvNet().double()
    x = torch.randn(8, 2, 6, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (8,))
    r = loss_landscape(model, (x, y), resolution=2, include_bias_bn=include,
                       generator=torch.Generator().manual_seed(0))
    for d in r.directions:
        for name, w in model.named_parameters():
            if w.dim() > 1:  # conv: per output channel; linear: per row
                torch.testing.assert_close(d[name].flatten(1).norm(dim=1),
                                           w.detach().flatten(1).norm(dim=1))
            elif include:  # a 1-D parameter is one filter
                assert float(d[name].norm()) == pytest.approx(float(w.detach().norm()))
            else:
                assert not d[name].any()
    assert not torch.allclose(r.directions[0]["conv.weight"], r.directions[1]["conv.weight"])


def test_layer_and_random_normalization():
    model, (x, y) = _mlp(), _data()
    layer = loss_landscape(model, (x, y), directions="layer", resolution=2)
    for name, w in model.named_parameters():
        expected = float(w.norm()) if w.dim() > 1 else 0.0
        assert float(layer.directions[0][name].norm()) == pytest.approx(expected)
    plain = loss_landscape(model, (x, y), directions="random", resolution=2, include_bias_bn=True)
    assert plain.direction_norms == pytest.approx((1.0, 1.0))
    assert all(v.any() for v in plain.directions[0].values())


def test_quadratic_loss_is_exact_on_the_grid():
    """A linear model under mse: L(W) = mean((X W^T - T)^2) is a quadratic in W, so
    L(W + a D1 + b D2) = L0 + a g1 + b g2 + a^2 q11 + 2ab q12 + b^2 q22 exactly."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3, bias=False).double()
    x = torch.randn(30, 4, dtype=torch.float64)
    t = torch.randn(30, 3, dtype=torch.float64)
    d1, d2 = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    r = loss_landscape(model, (x, t), directions=({"weight": d1}, {"weight": d2}),
                       resolution=(5, 6), span=2.0, loss="mse")
    residual, n = x @ model.weight.detach().T - t, t.numel()
    p1, p2 = x @ d1.T, x @ d2.T
    g1, g2 = 2 * (residual * p1).sum() / n, 2 * (residual * p2).sum() / n
    q11, q12, q22 = (p1 * p1).sum() / n, (p1 * p2).sum() / n, (p2 * p2).sum() / n
    a, b = np.meshgrid(*r.coordinates, indexing="ij")
    exact = (float(residual.square().mean()) + a * float(g1) + b * float(g2)
             + a**2 * float(q11) + 2 * a * b * float(q12) + b**2 * float(q22))
    np.testing.assert_allclose(r.losses, exact, rtol=1e-12, atol=1e-12)
    assert r.settings["loss"] == "mse" and r.accuracies is None
    # the same quadratic through a custom loss callable (twice the squared error per sample)
    custom = loss_landscape(model, (x, t), directions=({"weight": d1}, {"weight": d2}),
                            resolution=(5, 6), span=2.0,
                            loss=lambda out, target: (out - target).square().sum(-1).mean() * 2)
    np.testing.assert_allclose(custom.losses, exact * 2 * t.shape[1], rtol=1e-12)
    # "auto" on floating targets is every loss measure's default: the squared error summed
    # over a sample's entries (before 0.2 the landscape's "auto" was "mse": width times less)
    auto = loss_landscape(model, (x, t), directions=({"weight": d1}, {"weight": d2}),
                          resolution=(5, 6), span=2.0)
    np.testing.assert_allclose(auto.losses, exact * t.shape[1], rtol=1e-12)
    assert auto.settings["loss"] == "squared_error"


def test_pca_recovers_a_planted_trajectory():
    model = _mlp()
    x, y = _data()
    gen = torch.Generator().manual_seed(3)
    weights = {n: w for n, w in model.named_parameters() if w.dim() > 1}
    u = {n: torch.randn(w.shape, generator=gen, dtype=w.dtype) for n, w in weights.items()}
    v = {n: torch.randn(w.shape, generator=gen, dtype=w.dtype) for n, w in weights.items()}
    steps = torch.linspace(0, 3, 12, dtype=torch.float64)
    path = [(2 * torch.cos(s), torch.sin(2 * s) + s) for s in steps]
    trajectory = []
    for a, b in path:
        snapshot = copy.deepcopy(model.state_dict())
        for n in weights:
            snapshot[n] = snapshot[n] + a * u[n] + b * v[n]
        trajectory.append(snapshot)
    r = loss_landscape(model, (x, y), directions="pca", trajectory=trajectory, resolution=(3, 3))
    assert sum(r.explained_variance) == pytest.approx(1.0, abs=1e-10)
    assert r.explained_variance[0] >= r.explained_variance[1] > 0
    flat = [torch.cat([d[n].flatten() for n in weights]) for d in r.directions]
    basis = torch.stack(flat, 1)
    torch.testing.assert_close(basis.T @ basis, torch.eye(2, dtype=torch.float64))
    for planted in (u, v):  # u and v lie in the plane of the principal directions
        vec = torch.cat([planted[n].flatten() for n in weights])
        assert float((vec - basis @ (basis.T @ vec)).norm()) < 1e-10 * float(vec.norm())
    assert all(not r.directions[0][n].any() for n, w in model.named_parameters()
               if w.dim() <= 1)
    # trajectory coordinates give back every snapshot
    for (a, b), coords in zip(path, r.trajectory_coordinates):
        offset = a * torch.cat([u[n].flatten() for n in weights]) + b * torch.cat(
            [v[n].flatten() for n in weights])
        torch.testing.assert_close(basis @ torch.as_tensor(coords), offset)


def _bn_model():
    model = _mlp(bn=True)
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2.0)
        model[1].num_batches_tracked.fill_(7)
    return model


def test_batchnorm_frozen_and_recompute_each_match_explicit_computation():
    model, (x, y) = _bn_model(), _data(n=40)
    model.train()
    state = _state(model)
    kwargs = dict(resolution=(3, 3), span=0.5, batch_size=20,
                  generator=torch.Generator().manual_seed(0))
    frozen = loss_landscape(model, (x, y), **kwargs)
    recompute = loss_landscape(model, (x, y), norm_mode="train", **kwargs)
    assert _same_state(model, state)
    assert frozen.mode.norm_mode == "eval" and recompute.mode.norm_mode == "train"
    assert frozen.settings["norm_mode"] == "eval" and recompute.settings["norm_mode"] == "train"
    np.testing.assert_allclose(frozen.losses, _looped(model, frozen, x, y)[0], atol=1e-10)
    np.testing.assert_allclose(recompute.losses,
                               _looped(model, recompute, x, y, train=True, batch_size=20)[0],
                               atol=1e-10)
    assert np.abs(frozen.losses - recompute.losses).max() > 1e-3
    data_stats = loss_landscape(model, (x, y), norm_mode="frozen", **kwargs)
    assert data_stats.mode.norm_mode == "frozen"
    assert np.abs(data_stats.losses - frozen.losses).max() > 1e-3


def test_result_to_dict_frame_and_plots():
    pytest.importorskip("pandas")
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, (x, y) = _mlp(), _data()
    r = loss_landscape(model, (x, y), resolution=(3, 4), generator=torch.Generator().manual_seed(0))
    json.dumps(r.to_dict())
    frame = r.to_frame()
    assert list(frame.columns) == ["alpha", "beta", "loss", "accuracy"] and len(frame) == 12
    assert frame["loss"].tolist() == pytest.approx(r.losses.ravel().tolist())
    for kind in ("contour", "surface"):
        ax = r.plot(kind=kind)
        assert any("minimum" in str(line.get_label()) for line in ax.get_lines())
    line = loss_landscape(model, (x, y), dims=1, resolution=5)
    assert any("minimum" in str(h.get_label()) for h in line.plot().get_lines())
    with pytest.raises(NNGaugeError, match="kind"):
        line.plot(kind="contour")
    plt.close("all")


@pytest.mark.parametrize("call, match", [
    (lambda m, x, y: loss_landscape(m, x), "labelled data"),
    (lambda m, x, y: loss_landscape(m, (x, y + 3)), "labels in"),
    (lambda m, x, y: loss_landscape(nn.ReLU(), (x, y)), "model with parameters"),
    (lambda m, x, y: loss_landscape(nn.ReLU(), (x, y), directions="hessian"),
     "model with parameters"),
    (lambda m, x, y: loss_landscape(m, (x, y), span=0.0), "span"),
    (lambda m, x, y: loss_landscape(m, (x, y), span=-1.0), "span"),
    (lambda m, x, y: loss_landscape(m, (x, y), span=(1.0, -1.0)), "span"),
    (lambda m, x, y: loss_landscape(m, (x, y), resolution=1), "resolution >= 2"),
    (lambda m, x, y: loss_landscape(m, (x, y), resolution=(5, 1)), "resolution >= 2"),
    (lambda m, x, y: loss_landscape(m, (x, y), dims=3), "dims"),
    (lambda m, x, y: loss_landscape(m, (x, y), dims=1, resolution=(5, 5)), "same number"),
    (lambda m, x, y: loss_landscape(m, (x, y), directions="hessain"), "directions in"),
    (lambda m, x, y: loss_landscape(m, (x, y), directions={"nope": torch.zeros(1)}),
     "unknown names"),
    (lambda m, x, y: loss_landscape(m, (x, y), directions={"0.weight": torch.zeros(3, 3)}),
     "shaped like the parameter"),
    (lambda m, x, y: loss_landscape(m, (x, y), directions={"0.weight": torch.zeros(12, 5)}),
     "nonzero"),
    (lambda m, x, y: loss_landscape(m, (x, y), directions="pca",
                                    trajectory=[m.state_dict()] * 2), "at least 3"),
    (lambda m, x, y: loss_landscape(m, (x, y), directions="pca"), "trajectory="),
    (lambda m, x, y: loss_landscape(m, (x, y), directions="pca",
                                    trajectory=[m.state_dict()] * 4), "vary"),
    (lambda m, x, y: loss_landscape(m, (x, y.double()), loss="cross_entropy"),
     "integer class labels"),
    (lambda m, x, y: loss_landscape(m, (x, y), loss="hinge"), "loss in"),
    (lambda m, x, y: loss_landscape(m, (x, y), norm_mode="running"), "norm_mode None or in"),
    # the deprecated bn= refuses what it refused before the rename
    (lambda m, x, y: loss_landscape(m, (x, y), bn="train"), r"bn in \('frozen', 'recompute'\)"),
    (lambda m, x, y: loss_landscape(m, (x, y), bn="recompute", norm_mode="eval"), "norm_mode"),
    (lambda m, x, y: loss_landscape(m, (x, y), labels=y), "not both"),
])
def test_bad_inputs_raise_clear_errors(call, match):
    model, (x, y) = _mlp(), _data(n=10)
    state = _state(model)
    with pytest.raises(NNGaugeError, match=match) as info:
        call(model, x, y)
    assert "expected" in str(info.value) and "Fix:" in str(info.value)
    assert _same_state(model, state)


def test_hessian_directions_follow_the_curvature():
    """Along unit eigenvectors the second difference of the loss is the eigenvalue, and the
    eigenvalues are those of the exact Hessian."""
    pytest.importorskip("nngauge.measures.curvature._hessian")
    torch.manual_seed(0)
    model = nn.Linear(4, 3).double()
    x = torch.randn(30, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (30,))
    h = 1e-3
    r = loss_landscape(model, (x, y), directions="hessian", resolution=3, span=h,
                       generator=torch.Generator().manual_seed(0))
    assert r.direction_norms == pytest.approx((1.0, 1.0), abs=1e-6)
    assert r.settings["directions"] == "hessian"
    along_a = (r.losses[0, 1] - 2 * r.losses[1, 1] + r.losses[2, 1]) / h**2
    along_b = (r.losses[1, 0] - 2 * r.losses[1, 1] + r.losses[1, 2]) / h**2
    assert (along_a, along_b) == pytest.approx(r.eigenvalues, rel=1e-4)
    weight, bias = model.weight.detach(), model.bias.detach()

    def loss_of(flat):
        w, b = flat[:12].reshape(3, 4), flat[12:]
        return F.cross_entropy(x @ w.T + b, y)

    exact = torch.linalg.eigvalsh(torch.func.hessian(loss_of)(torch.cat(
        [weight.flatten(), bias])))
    assert r.eigenvalues == pytest.approx(exact.flip(0)[:2].tolist(), rel=1e-4)


def test_zoo_resnet_gives_finite_losses():
    from nngauge.zoo import ZOO, sample_inputs, sample_labels

    entry = ZOO["resnet_small"]
    model = entry.build(generator=0)
    state = _state(model)
    x, y = sample_inputs(entry, 16), sample_labels(entry, 16)
    for norm_mode in ("eval", "train"):
        r = loss_landscape(model, (x, y), resolution=(3, 3), span=0.2, norm_mode=norm_mode,
                           generator=torch.Generator().manual_seed(0))
        assert np.isfinite(r.losses).all() and r.losses.shape == (3, 3)
        assert r.mode.norm_mode == norm_mode
    assert _same_state(model, state)
