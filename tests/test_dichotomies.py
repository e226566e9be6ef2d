"""Dichotomies along a great-circle weight sweep (expressive-power paper, appendix B.3)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.measures.expressivity._dichotomies import dichotomies


def hard_tanh_net(seed: int, *, depth: int = 6, width: int = 32, d_in: int = 10,
                  sigma_w2: float = 8.0, d_out: int = 1) -> nn.Sequential:
    """The paper's setting (figures 14-15): hard tanh, W_ij ~ N(0, sigma_w^2 / k), no biases."""
    g = torch.Generator().manual_seed(seed)
    dims = [d_in] + [width] * depth + [d_out]
    modules = []
    for i in range(depth + 1):
        linear = nn.Linear(dims[i], dims[i + 1])
        with torch.no_grad():
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=g)
                                * math.sqrt(sigma_w2 / dims[i]))
            linear.bias.zero_()
        modules += [linear, nn.Hardtanh()] if i < depth else [linear]
    return nn.Sequential(*modules).double()


def inputs(seed: int, s: int = 15, d: int = 10) -> torch.Tensor:
    return torch.randn(s, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def brute_force_labellings(model, x, layer, direction, n_steps):
    """Loop over the settings, writing each W(t) into a copy of the model."""
    net = copy.deepcopy(model)
    weight = dict(net.named_modules())[layer].weight
    w0 = weight.detach().clone()
    rows = []
    for j in range(n_steps):
        t = 2 * math.pi * j / n_steps
        with torch.no_grad():
            weight.copy_(math.cos(t) * w0 + math.sin(t) * direction)
            y = net(x)
        rows.append((y[:, 0] > 0).long() if y.shape[1] == 1 else y.argmax(dim=1))
    return torch.stack(rows)


@pytest.mark.parametrize("layer, d_out", [("0", 1), ("4", 1), ("2", 3)])
def test_batched_sweep_equals_an_explicit_loop(layer, d_out):
    model, x = hard_tanh_net(0, depth=3, width=12, d_out=d_out), inputs(1, s=9)
    r = dichotomies(model, x, layer=layer, resolution=300, chunk_size=64,
                    generator=torch.Generator().manual_seed(2))
    loop = brute_force_labellings(model, x, layer, r.direction, 300)
    assert torch.equal(r.labellings, loop)
    assert r.n_dichotomies == len({tuple(row.tolist()) for row in loop})
    flips = sum(int((loop[j] != loop[j - 1]).sum()) for j in range(300))  # closed circle
    assert r.label_flips == flips
    assert r.labelling == ("sign" if d_out == 1 else "argmax")
    assert r.n_classes == (2 if d_out == 1 else 3)
    assert r.max_dichotomies == 300


def test_direction_spans_a_great_circle_through_the_weights():
    model = hard_tanh_net(0, depth=2, width=8)
    r = dichotomies(model, inputs(0), layer="2", resolution=10,
                    generator=torch.Generator().manual_seed(0))
    w0 = model[2].weight.detach()
    assert abs(float((r.direction * w0).sum())) < 1e-10 * float(w0.norm()) ** 2
    assert math.isclose(float(r.direction.norm()), float(w0.norm()), rel_tol=1e-12)
    assert math.isclose(r.weight_norm, float(w0.norm()), rel_tol=1e-12)


def test_sweeping_the_output_layer_flips_each_label_exactly_twice():
    # f(x; W(t)) = cos(t) w0.h(x) + sin(t) w1.h(x): one sign change each way around the
    # circle for every input, and the 2s antipodal flip points cut it into 2s arcs with
    # distinct labellings (equal labellings on two arcs would need an arc crossing both
    # flip points of every input, i.e. the complementary arc crossing none).
    model, s = hard_tanh_net(3, depth=3, width=16), 15
    r = dichotomies(model, inputs(4, s=s), layer="6", resolution=20_000,
                    generator=torch.Generator().manual_seed(5))
    assert r.label_flips == 2 * s
    assert r.n_dichotomies == 2 * s
    coarse = dichotomies(model, inputs(4, s=s), layer="6", resolution=3,
                         generator=torch.Generator().manual_seed(5))
    assert coarse.label_flips == 2 * s  # arcs of length pi always hold a grid point


def test_remaining_depth_earlier_layers_give_more_dichotomies():
    # Figure 15: the count grows with the remaining depth above the swept layer. Averaged
    # over 3 seeds at width 32, sigma_w^2 = 8, s = 15, the counts fall by 25% or more every
    # two layers (189, 113, 62, 28 for layers 0, 4, 8, 12), so the ordering is robust.
    layers = ["0", "4", "8", "12"]
    means = []
    for layer in layers:
        counts = [dichotomies(hard_tanh_net(seed), inputs(100 + seed), layer=layer,
                              resolution=400, generator=torch.Generator().manual_seed(seed)
                              ).n_dichotomies for seed in range(3)]
        means.append(sum(counts) / len(counts))
    assert all(a > b for a, b in zip(means, means[1:])), means
    assert means[0] > 3 * means[-1], means


def test_model_untouched_and_batchnorm_statistics_preserved():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))
    model.train()
    before = copy.deepcopy(model.state_dict())
    r = dichotomies(model, torch.randn(6, 4), layer="0", resolution=50)
    assert 1 <= r.n_dichotomies <= 50
    assert model.training and model[1].training
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.requires_grad for p in model.parameters())


def test_deterministic_and_chunking_invariant():
    model, x = hard_tanh_net(1, depth=2, width=8), inputs(2, s=7)
    a = dichotomies(model, x, layer="0", resolution=97, generator=torch.Generator().manual_seed(9))
    b = dichotomies(model, x, layer="0", resolution=97, chunk_size=10,
                    generator=torch.Generator().manual_seed(9))
    assert torch.equal(a.labellings, b.labellings) and a.n_dichotomies == b.n_dichotomies
    assert a.settings["chunk_size"] == 97 and b.settings["chunk_size"] == 10
    out = a.to_dict()
    assert out["n_dichotomies"] == a.n_dichotomies and "labellings" not in out


def test_one_step_is_the_models_own_labelling():
    model, x = hard_tanh_net(1, depth=2, width=8), inputs(2, s=7)
    r = dichotomies(model, x, layer="2", resolution=1)
    assert r.n_dichotomies == 1 and r.label_flips == 0
    assert torch.equal(r.labellings[0], (model(x)[:, 0] > 0).long())


def test_errors():
    model, x = hard_tanh_net(0, depth=2, width=8), inputs(0)
    with pytest.raises(InvalidInputError, match="expected .*got .*Fix"):
        dichotomies(model, x, layer="nope")
    with pytest.raises(InvalidInputError, match="weight"):
        dichotomies(model, x, layer="1")  # Hardtanh has no weight
    with pytest.raises(InvalidInputError, match="name"):
        dichotomies(model, x, layer=0)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InvalidInputError, match="resolution"):
            dichotomies(model, x, layer="0", resolution=bad)
    with pytest.raises(InvalidInputError, match="chunk_size"):
        dichotomies(model, x, layer="0", chunk_size=0)
    with pytest.raises(InvalidInputError, match="inputs the model|vmap"):
        dichotomies(model, torch.randn(5, 3, dtype=torch.float64), layer="0", resolution=4)
    zero = copy.deepcopy(model)
    with torch.no_grad():
        zero[0].weight.zero_()
    with pytest.raises(NNGaugeError, match="nonzero"):
        dichotomies(zero, x, layer="0")


def test_plot_and_frame():
    import matplotlib

    matplotlib.use("Agg")
    r = dichotomies(hard_tanh_net(0, depth=2, width=8), inputs(0, s=5), layer="0", resolution=40,
                    generator=torch.Generator().manual_seed(0))
    ax = r.plot()
    assert ax.images[0].get_array().shape == (5, 40)
    assert r.to_frame()["n_dichotomies"].iloc[0] == r.n_dichotomies
