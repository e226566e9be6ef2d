"""Measures on wide random networks against the infinite-width theory engine."""

import numpy as np
import pytest
import torch

from nngauge.measures import correlations, kernel_conditioning, nlc
from nngauge.measures.propagation._correlations import cosine_matrix
from nngauge.nn import mlp
from nngauge.theory import correlation_map, nlc_activation, nngp

def _outputs(net, names, x):
    """The outputs of the named modules on x (plain forward hooks)."""
    out = {}
    handles = [net.get_submodule(name).register_forward_hook(
        lambda m, a, o, name=name: out.__setitem__(name, o)) for name in names]
    try:
        with torch.no_grad():
            net(x)
    finally:
        for handle in handles:
            handle.remove()
    return out


NLC_PAPER_ACTIVATIONS = ["relu", "selu", "tanh", "sigmoid", "even_tanh", "gaussian", "square",
                         "odd_square"]


@pytest.mark.slow
@pytest.mark.parametrize("activation", NLC_PAPER_ACTIVATIONS)
def test_two_layer_batchnorm_network_has_the_activations_nlc(activation):
    """NLC paper section 5: a batchnorm layer feeds the activation unit Gaussians, so the
    network's NLC is NLC_tau(1) (Table 1 row A) up to finite-width effects."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 100, generator=gen, dtype=torch.float64)
    net = mlp(100, 1000, 2, 10, activation=activation, norm="batch", generator=gen,
              dtype=torch.float64)
    measured = nlc(net, x, batch_size=500, n_probes=2, generator=gen).nlc
    assert measured == pytest.approx(float(nlc_activation(activation, 1.0)), rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("activation, sigma_w, sigma_b", [("tanh", 1.5, 0.3), ("relu", 1.0, 0.5),
                                                           ("erf", 2.0, 0.1)])
def test_layernorm_mlp_correlations_follow_the_correlation_map(activation, sigma_w, sigma_b):
    """Shrinkage paper eq. 2.3: after the first layer, the correlation of a pair follows P
    iterated over the LayerNorm layers. One network of width N drifts from the map by a
    random walk of O(N^-1/2) steps, so the measured correlations of K networks are averaged (as
    tests/test_correlation_map.py does for the theory alone): the error is O((N K)^-1/2), and
    N = 512, K = 64 matches N = 2048, K = 16 at a quarter of the cost (measured worst
    deviations 0.010-0.024 over three seeds per setting, 0.025 for the latter)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 64, generator=gen, dtype=torch.float64)
    names = [f"layers.{i}.norm" for i in range(6)]
    pairs = np.triu_indices(len(x), 1)
    cmap = correlation_map(activation, sigma_w, sigma_b, arch="layernorm")
    measured, predicted = [], []
    for seed in range(64):
        net = mlp(64, 512, 7, 8, activation=activation, norm="layer", init="gaussian",
                  sigma_w=sigma_w, bias_std=sigma_b, generator=torch.Generator().manual_seed(seed))
        out = _outputs(net, names, x.float())
        rhos = np.array([cosine_matrix(out[name]).numpy()[pairs] for name in names])
        measured.append(rhos)
        predicted.append(cmap.iterate(rhos[0], len(names) - 1))
    deviation = np.abs(np.mean(measured, 0) - np.mean(predicted, 0))
    assert deviation.max() < 0.03, deviation.max(0)
    # the measure reports the same cosines
    result = correlations(net, x.float(), layers=names)
    assert [row.mean for row in result.layers[1:-1]] == pytest.approx(
        list(measured[-1].mean(1)), abs=1e-6)


@pytest.mark.slow
def test_conjugate_kernel_of_a_wide_mlp_matches_the_nngp():
    """kernel_conditioning on erf MLPs of width 4096: at every layer the conjugate kernel,
    averaged over two networks, is within 5% relative Frobenius error of the reported
    infinite-width kernel, and the last layer's theory kernel is nngp()'s K_3 itself."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(12, 8, generator=gen, dtype=torch.float64) * 1.3
    results = [kernel_conditioning(mlp(8, 4096, 4, 4096, activation="erf", init="gaussian",
                                       sigma_w=1.5, bias_std=0.2, generator=gen,
                                       dtype=torch.float64), x) for _ in range(2)]
    result = results[0]
    for i, row in enumerate(result.layers):
        assert row.theory_kernel is not None
        mean = (row.kernel + results[1].layers[i].kernel) / 2  # average of two networks
        rel = np.linalg.norm(mean - row.theory_kernel) / np.linalg.norm(row.theory_kernel)
        assert rel < 0.05, row.name
    direct = nngp(x.numpy(), "erf", 3, sigma_w=1.5, sigma_b=0.2)
    np.testing.assert_allclose(result.layers[-1].theory_kernel, direct.kernels[3])


def test_empirical_ntk_equals_parameter_jacobian_gram():
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    x = torch.randn(6, 3, dtype=torch.float64)
    result = kernel_conditioning(net, x, kind="ntk", layers=["0"])
    params = dict(net.named_parameters())
    jac = torch.func.jacrev(lambda p: torch.func.functional_call(net, p, (x,)))(params)
    flat = torch.cat([j.reshape(6, 2, -1) for j in jac.values()], dim=2)
    expected = torch.einsum("icp,jcp->ij", flat, flat) / 2
    np.testing.assert_allclose(result.layers[-1].kernel, expected.detach().numpy(), rtol=1e-10)
    first = torch.cat([jac["0.weight"].reshape(6, 2, -1), jac["0.bias"].reshape(6, 2, -1)], 2)
    assert result.layers[0].name == "0"
    hidden = net[0](x).detach()
    np.testing.assert_allclose(result.layers[0].kernel,
                               (x @ x.T + 1).numpy(), rtol=1e-10)  # d h / d (W, b) of layer 0
    assert first.shape[-1] == 20 and hidden.shape == (6, 5)


def test_conditioning_worsens_with_depth_for_relu():
    """Deep-conditioning fig. 1: without normalization the top-layer kernel of deep relu nets
    degenerates (condition number grows with depth)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(8, 10, generator=gen, dtype=torch.float64)
    net = mlp(10, 1024, 12, 1024, activation="relu", init="gaussian", sigma_w=2 ** 0.5,
              generator=gen, dtype=torch.float64)
    rows = kernel_conditioning(net, x).layers[1:-1]  # from the first hidden layer on
    kappas = [row.condition_number for row in rows]
    theory = [row.theory_condition_number for row in rows]
    assert kappas[-1] > 5 * kappas[0]
    assert np.all(np.diff(theory) > 0)
    for row in rows:
        assert row.mean_normalized_dot_product == pytest.approx(
            row.theory_mean_normalized_dot_product, abs=0.03)
        assert row.condition_number == pytest.approx(row.theory_condition_number, rel=0.35)


def test_theory_past_its_time_budget_is_skipped_with_the_reason(monkeypatch):
    """When the infinite-width kernels would run past nngp()'s time budget (quadrature
    activations on many samples), the empirical rows are still measured and the result says
    why the theory columns are empty."""
    import nngauge.theory
    from nngauge.errors import BudgetExceededError

    def over_budget(*args, **kwargs):
        raise BudgetExceededError("nngp() expected a computation within max_seconds=30; ...")

    monkeypatch.setattr(nngauge.theory, "nngp", over_budget)
    net = mlp(5, 32, 3, 1, activation="tanh", init="gaussian")
    result = kernel_conditioning(net, torch.randn(10, 5))
    assert "max_seconds=30" in result.theory_skipped
    assert all(row.theory_condition_number is None for row in result.layers)
    assert [row.kernel.shape for row in result.layers] == [(10, 10)] * len(result.layers) != []
    monkeypatch.undo()
    assert kernel_conditioning(mlp(5, 32, 2, 1, activation="relu"), torch.randn(10, 5)
                               ).theory_skipped is None
