"""Accuracy under relative Gaussian weight noise, one layer at a time (expressive-power fig. 6)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge.errors import InvalidInputError
from nngauge.measures.expressivity._robustness import weight_noise_robustness


def random_mlp(seed: int, d_in: int = 6, width: int = 12, d_out: int = 3) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, d_out)).double()


def data(seed: int, n: int = 300, d: int = 6, classes: int = 3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (n,), generator=g))


def test_zero_noise_gives_the_clean_accuracy_exactly():
    model, (x, y) = random_mlp(0), data(1)
    r = weight_noise_robustness(model, x, y, noise_levels=[0.0, 0.3], n_repeats=4,
                                batch_size=128, generator=torch.Generator().manual_seed(0))
    clean = float((model(x).argmax(1) == y).double().mean())
    assert r.clean_accuracy == clean and r.n_samples == 300
    assert [layer.name for layer in r.layers] == ["0", "2", "4"]
    for layer in r.layers:
        assert layer.accuracy[0] == clean and layer.accuracy_std[0] == 0.0
        assert layer.accuracy_drop[0] == 0.0


def test_batched_noise_equals_an_explicit_loop():
    model, (x, y) = random_mlp(2), data(3)
    levels, repeats = [0.3, 1.0], 3
    r = weight_noise_robustness(model, (x, y), noise_levels=levels, layers=["2"],
                                n_repeats=repeats, chunk_size=4,
                                generator=torch.Generator().manual_seed(7))
    # the documented definition: one direction per repeat, W + a ||W||_F G / ||G||_F
    w = model[2].weight.detach()
    g = torch.randn((repeats, *w.shape), generator=torch.Generator().manual_seed(7),
                    dtype=torch.float64)
    net = copy.deepcopy(model)
    for i, a in enumerate(levels):
        accs = []
        for k in range(repeats):
            with torch.no_grad():
                net[2].weight.copy_(w + a * w.norm() * g[k] / g[k].norm())
                accs.append(float((net(x).argmax(1) == y).double().mean()))
        assert math.isclose(r["2"].accuracy[i], float(np.mean(accs)), abs_tol=1e-12)
        assert math.isclose(r["2"].accuracy_std[i], float(np.std(accs, ddof=1)), abs_tol=1e-12)


class UnusedBranch(nn.Module):
    """Computes ``side`` but returns only ``head``: noise on ``side`` cannot matter."""

    def __init__(self):
        super().__init__()
        self.side = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        self.side(x)
        return self.head(x)


def test_noise_on_a_layer_whose_output_is_ignored_changes_nothing():
    torch.manual_seed(0)
    model = UnusedBranch()
    x = torch.randn(500, 4)
    y = model(x).argmax(1)
    r = weight_noise_robustness(model, x, y, noise_levels=[0.0, 1.0, 10.0], n_repeats=3,
                                generator=torch.Generator().manual_seed(1))
    assert r.clean_accuracy == 1.0
    assert r["side"].accuracy == (1.0, 1.0, 1.0)
    assert r["head"].accuracy[0] == 1.0 and r["head"].accuracy[2] < 0.9


def test_linear_classifier_matches_the_angle_formula():
    # f(x) = w.x with w = (1, 0), labels [x_1 > 0], x isotropic: noise a ||w|| u (u uniform on
    # the circle at angle phi) turns w by theta = atan2(a sin phi, 1 + a cos phi), and the
    # accuracy is 1 - |theta| / pi; averaged over phi for the expected value.
    model = nn.Sequential(nn.Linear(2, 1, bias=False)).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0.0]]))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20_000, 2, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    levels = [0.25, 0.5, 0.9]
    r = weight_noise_robustness(model, x, y, noise_levels=levels, n_repeats=400,
                                batch_size=20_000, generator=g)
    assert r.labelling == "sign" and r.clean_accuracy == 1.0
    phi = np.linspace(0, 2 * np.pi, 100_001)[:-1]
    for a, measured in zip(levels, r.layers[0].accuracy):
        expected = 1 - np.mean(np.abs(np.arctan2(a * np.sin(phi), 1 + a * np.cos(phi)))) / np.pi
        assert abs(measured - expected) < 0.02, (a, measured, expected)


def trained_relu_net(seed: int):
    """A 4-hidden-layer ReLU net trained (full batch, Adam) on a linearly separable problem."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1000, 10, generator=g)
    y = (x @ torch.randn(10, generator=g) > 0).long()
    torch.manual_seed(seed)
    dims = [10, 32, 32, 32, 32]
    layers = []
    for i in range(4):
        layers += [nn.Linear(dims[i], dims[i + 1]), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(32, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(200):
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net, x, y


@pytest.fixture(scope="module")
def trained_results():
    results = []
    for seed in range(2):
        net, x, y = trained_relu_net(seed)
        results.append(weight_noise_robustness(
            net, x, y, noise_levels=[0.0, 0.1, 0.25, 0.5, 1.0], n_repeats=10,
            generator=torch.Generator().manual_seed(seed)))
    return results


@pytest.mark.slow
def test_accuracy_falls_with_noise_on_a_trained_net(trained_results):
    """On two trained 4-hidden-layer ReLU nets (clean accuracy > 0.95), accuracy falls with
    relative weight noise in every layer (monotone up to 0.5%), and by more than 3 points at the
    first layer from no noise to noise of the weights' own norm."""
    for r in trained_results:
        assert r.clean_accuracy > 0.95
        for layer in r.layers:
            acc = layer.accuracy
            # monotone up to 0.5% (shared random directions, 1000 samples)
            assert all(b <= a + 0.005 for a, b in zip(acc, acc[1:])), (layer.name, acc)
        first = r.layers[0].accuracy
        assert first[-1] < first[0] - 0.03


@pytest.mark.slow
def test_earlier_layers_are_more_sensitive(trained_results):
    """Raghu et al. (ICML 2017), figure 6 (remaining depth): the mean accuracy drop over the
    noise levels, averaged over two trained nets, is largest at the first layer (over 3x any of
    layers 3-5) and decreases from the first layer to the last (measured: 0.029, 0.0028, then
    below 0.0005 for the last three layers)."""
    names = [layer.name for layer in trained_results[0].layers]
    drops = [np.mean([np.mean(r[name].accuracy_drop) for r in trained_results]) for name in names]
    assert drops[0] == max(drops) and drops[0] > 3 * max(drops[2:]), drops
    assert drops[0] > drops[1] > drops[-1], drops


def test_model_is_left_as_it_was_and_results_are_deterministic():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    model.train()
    before = copy.deepcopy(model.state_dict())
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    runs = [weight_noise_robustness(model, x, y, noise_levels=[0.5], n_repeats=3,
                                    batch_size=32, generator=torch.Generator().manual_seed(4))
            for _ in range(2)]
    assert runs[0] == runs[1]
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert model.training and all(p.requires_grad for p in model.parameters())
    out = runs[0].to_dict()
    assert out["layers"][0]["name"] == "0" and len(out["layers"][0]["accuracy"]) == 1


def test_layers_without_a_weight_parameter_are_reported_as_skipped():
    from torch.nn.utils.parametrizations import weight_norm

    model = nn.Sequential(weight_norm(nn.Linear(3, 4)), nn.ReLU(), nn.Linear(4, 2))
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    r = weight_noise_robustness(model, x, y, noise_levels=[0.1], n_repeats=2)
    assert [layer.name for layer in r.layers] == ["2"]
    assert "0" in r.skipped


def test_errors():
    model, (x, y) = random_mlp(0), data(1)
    for levels in ([], [-0.1], [float("nan")], "abc", None):
        with pytest.raises(InvalidInputError, match="noise_levels"):
            weight_noise_robustness(model, x, y, noise_levels=levels)
    with pytest.raises(InvalidInputError, match="n_repeats"):
        weight_noise_robustness(model, x, y, n_repeats=0)
    with pytest.raises(InvalidInputError, match="expected .*got .*Fix"):
        weight_noise_robustness(model, x, y, layers=["nope"])
    with pytest.raises(InvalidInputError, match="weight"):
        weight_noise_robustness(model, x, y, layers=["1"])
    with pytest.raises(InvalidInputError, match="labels"):
        weight_noise_robustness(model, x)
    with pytest.raises(InvalidInputError, match="integer"):
        weight_noise_robustness(model, x, y.double())
    with pytest.raises(InvalidInputError, match=r"labels in \[0, 3\)"):
        weight_noise_robustness(model, x, y + 1)
    single = nn.Sequential(nn.Linear(6, 1)).double()
    with pytest.raises(InvalidInputError, match=r"labels in \[0, 2\)"):
        weight_noise_robustness(single, x, torch.full((300,), 2))


def test_plot_and_frame():
    import matplotlib

    matplotlib.use("Agg")
    model, (x, y) = random_mlp(0), data(1)
    r = weight_noise_robustness(model, x, y, noise_levels=[0.0, 0.5], n_repeats=2,
                                generator=torch.Generator().manual_seed(0))
    ax = r.plot()
    assert len(ax.lines) == 3 and list(ax.lines[0].get_xdata()) == [0.0, 0.5]
    frame = r.to_frame()
    assert list(frame["name"]) == ["0", "2", "4"]
