"""NLC (NLC paper Definition 1, section G estimator): exact vs probe, closed forms, invariances,
infinite-width theory, per-layer profile, state restoration and errors."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import InvalidInputError, NNGaugeError
from nngauge.measures import nlc, nlc_profile
from nngauge.nn import mlp


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tanh_net(dtype=torch.float64):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 24), nn.Tanh(), nn.Linear(24, 24), nn.Tanh(),
                         nn.Linear(24, 4)).to(dtype)


def bn_net():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 24), nn.BatchNorm1d(24), nn.ReLU(), nn.Linear(24, 24),
                         nn.BatchNorm1d(24), nn.ReLU(), nn.Linear(24, 4)).double()


X = torch.randn(400, 6, generator=gen(2), dtype=torch.float64) * 1.5 + 0.3


def brute_force_nlc(model, x, batch_size):
    """Definition 1 / section G from full Jacobians built one output coordinate at a time."""
    jac_sq, outs = 0.0, []
    for batch in x.split(batch_size):
        jac = torch.autograd.functional.jacobian(model, batch)  # (b, d_out, b, d_in)
        jac_sq += float(jac.pow(2).sum())
        outs.append(model(batch).detach())
    f = torch.cat(outs)
    q_j = math.sqrt(jac_sq / len(x))
    q_in = math.sqrt(float(x.var(0, unbiased=False).mean()))
    q_out = math.sqrt(float(f.var(0, unbiased=False).mean()))
    return q_j * q_in / (math.sqrt(f.shape[1]) * q_out)


@pytest.mark.parametrize("make, batch_size", [(tanh_net, 100), (bn_net, 50)])
def test_exact_equals_brute_force_jacobian(make, batch_size):
    model = make()
    expected = brute_force_nlc(make(), X, batch_size)
    got = nlc(model, X, batch_size=batch_size, method="exact")
    assert got.nlc == pytest.approx(expected, rel=1e-10)
    assert got.batch_coupled == (make is bn_net)


@pytest.mark.parametrize("make, batch_size", [(tanh_net, 100), (bn_net, 50)])
def test_probe_within_three_standard_errors_of_exact(make, batch_size):
    exact = nlc(make(), X, batch_size=batch_size, method="exact").nlc
    probe = nlc(make(), X, batch_size=batch_size, n_batches=40, n_probes=4, generator=gen(3))
    assert probe.stderr > 0
    assert abs(probe.nlc - exact) < 3 * probe.stderr
    assert probe.stderr < 0.05 * exact


def test_orthogonal_linear_network_has_nlc_one():
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen(4), dtype=torch.float64))
    layer = nn.Linear(6, 6).double()
    with torch.no_grad():
        layer.weight.copy_(q)
    assert nlc(layer, X, method="exact").nlc == pytest.approx(1.0, abs=1e-12)


def test_linear_network_matches_the_papers_closed_form():
    a = torch.randn(3, 6, generator=gen(5), dtype=torch.float64)
    layer = nn.Linear(6, 3).double()
    with torch.no_grad():
        layer.weight.copy_(a)
    cov = torch.cov(X.T, correction=0)
    expected = math.sqrt(float(torch.trace(a @ a.T) * torch.trace(cov)
                               / (6 * torch.trace(a @ cov @ a.T))))
    assert nlc(layer, X, method="exact").nlc == pytest.approx(expected, rel=1e-12)


def test_batchnorm_network_is_invariant_to_input_scale():
    base = nlc(bn_net(), X, batch_size=50, method="exact").nlc
    scaled = nlc(bn_net(), 100.0 * X, batch_size=50, method="exact").nlc
    assert scaled == pytest.approx(base, rel=1e-6)


def test_output_bias_and_the_high_bias_flag():
    model = tanh_net()
    with torch.no_grad():
        model[-1].bias.fill_(1e6)
    result = nlc(model, X, method="exact")
    out = model(X).detach()
    q_all = float(out.pow(2).mean().sqrt())
    q_std = math.sqrt(float(out.var(0, unbiased=False).mean()))
    assert result.output_bias == pytest.approx(q_all / q_std, rel=1e-6)
    assert result.high_bias
    assert not nlc(tanh_net(), X, method="exact").high_bias


@pytest.mark.slow
def test_batchnorm_relu_nlc_grows_geometrically_with_depth():
    """NLC paper section 5 and Table 2: the NLC of batchnorm-ReLU MLPs (width 200) at depths 3,
    6, 9, 12 grows by a factor above 1.15 per 3 layers, and a steady one (the largest ratio
    within 1.5x of the smallest): geometric growth with depth."""
    data = torch.randn(1000, 20, generator=gen(6))
    values = []
    for depth in (3, 6, 9, 12):
        model = mlp(20, 200, depth, 10, activation="relu", norm="batch", generator=gen(depth))
        values.append(nlc(model, data, batch_size=250, n_probes=2, generator=gen(7)).nlc)
    ratios = np.array(values[1:]) / np.array(values[:-1])
    assert np.all(ratios > 1.15)
    assert ratios.max() / ratios.min() < 1.5  # a steady growth factor per 3 layers


def test_profile_output_row_equals_nlc_and_layers_compound():
    model = tanh_net()
    profile = nlc_profile(model, X, method="exact")
    assert [row.name for row in profile.layers] == ["0", "1", "2", "3", "4", "output"]
    assert profile["output"].nlc == pytest.approx(nlc(model, X, method="exact").nlc, rel=1e-12)
    assert profile["0"].nlc == pytest.approx(1.0, abs=0.3)  # an affine map of the input
    assert profile["1"].nlc > profile["0"].nlc  # the activation adds nonlinearity


def test_profile_reports_layers_it_cannot_measure():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(6, 3).double()
            self.unused = nn.Linear(3, 3).double()
            self.const = nn.Linear(6, 3).double()

        def forward(self, x):
            self.const(torch.ones_like(x))
            return self.body(x)

    profile = nlc_profile(Model(), X, layers=["body", "unused", "const"], method="exact")
    assert [row.name for row in profile.layers] == ["body", "output"]
    assert set(profile.skipped) == {"unused", "const"}
    assert "not called" in profile.skipped["unused"]


def test_float32_agrees_with_float64():
    value64 = nlc(tanh_net(torch.float64), X, method="exact").nlc
    value32 = nlc(tanh_net(torch.float32), X.float(), method="exact").nlc
    assert value32 == pytest.approx(value64, rel=1e-4)


def test_deterministic_under_a_generator_and_state_restored():
    model = bn_net()
    model.train()
    before = [t.clone() for t in model.state_dict().values()]
    flags = [p.requires_grad for p in model.parameters()]
    first = nlc(model, X, batch_size=50, n_batches=5, generator=gen(8))
    second = nlc(model, X, batch_size=50, n_batches=5, generator=gen(8))
    assert first == second
    assert model.training and [p.requires_grad for p in model.parameters()] == flags
    for old, new in zip(before, model.state_dict().values()):
        assert torch.equal(old, new)
    assert all(not m._forward_hooks for m in model.modules())


def test_tuple_output_selector():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tanh_net()

        def forward(self, x):
            return {"logits": self.net(x), "aux": x.sum(1)}

    got = nlc(TwoHeads(), X, method="exact", output="logits")
    assert got.nlc == pytest.approx(nlc(tanh_net(), X, method="exact").nlc, rel=1e-12)
    assert got.mode.output == "key 'logits'"
    auto = nlc(TwoHeads(), X, method="exact")  # a "logits" entry is taken, and said so
    assert auto.nlc == got.nlc and "chosen automatically" in auto.mode.output
    with pytest.raises(InvalidInputError, match=r"keys \['aux'\].*--output"):
        nlc(nn.Sequential(TwoHeads(), _Drop("logits")), X)
    with pytest.raises(InvalidInputError, match="would index the batch"):
        nlc(tanh_net(), X, output=5)


class _Drop(nn.Module):
    def __init__(self, key):
        super().__init__()
        self.key = key

    def forward(self, out):
        return {k: v for k, v in out.items() if k != self.key}


@pytest.mark.parametrize("data, match", [
    (torch.empty(0, 6), "non-empty"),
    (torch.randn(1, 6), "at least 2"),
    (torch.full((10, 6), float("nan")), "finite"),
    (torch.ones(10, 6, dtype=torch.long), "floating"),
    (torch.randn(10, 5), "shape|size|mat"),
])
def test_bad_data_is_a_clear_error(data, match):
    with pytest.raises(NNGaugeError, match=match):
        nlc(tanh_net(torch.float32), data)


def test_model_without_a_differentiable_path():
    class Detached(nn.Module):
        def forward(self, x):
            return x.detach() * 2

    with pytest.raises(InvalidInputError, match="differentiabl"):
        nlc(Detached(), X)


def test_hooks_are_removed_when_the_model_raises():
    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(6, 3).double()

        def forward(self, x):
            self.inner(x)
            raise RuntimeError("boom")

    model = Fails()
    with pytest.raises(NNGaugeError, match="boom"):
        nlc_profile(model, X, layers=["inner"])
    assert not model.inner._forward_hooks
    assert all(p.requires_grad for p in model.parameters())


def test_input_isotropy_is_one_for_isotropic_data_and_k_over_d_for_rank_k():
    from nngauge.measures.propagation._nlc import input_isotropy

    gen = torch.Generator().manual_seed(0)
    # fewer samples than dimensions: the bias-corrected estimate still reads isotropic
    assert input_isotropy(torch.randn(400, 1000, generator=gen, dtype=torch.float64)) == \
        pytest.approx(1.0, abs=0.03)
    basis = torch.linalg.qr(torch.randn(60, 6, generator=gen, dtype=torch.float64))[0]
    low = torch.randn(5000, 6, generator=gen, dtype=torch.float64) @ basis.T
    assert input_isotropy(low) == pytest.approx(6 / 60, rel=0.05)
    assert math.isnan(input_isotropy(torch.ones(10, 4, dtype=torch.float64)))
    assert nlc(tanh_net(), X).input_isotropy == pytest.approx(
        input_isotropy(X.double()), rel=1e-9)
