"""jacobian_norm: power iteration and probes against full Jacobians, RMS convention, coupling."""

import math

import pytest
import torch
from torch import nn

from nngauge import InvalidInputError
from nngauge.measures import jacobian_norm

X = torch.randn(60, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def net():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 20), nn.Tanh(), nn.Linear(20, 3)).double()


def full_jacobians(model, x):
    return torch.func.vmap(torch.func.jacrev(model))(x).detach()  # (b, d_out, d_in)


def test_operator_norm_equals_svd_of_full_jacobians():
    model = net()
    sv = torch.linalg.matrix_norm(full_jacobians(net(), X), ord=2)
    result = jacobian_norm(model, X, tol=1e-10, n_iter=500)
    torch.testing.assert_close(torch.from_numpy(result.layers[-1].per_sample), sv,
                               rtol=1e-6, atol=0)
    assert result.norm == pytest.approx(float(sv.pow(2).mean().sqrt()), rel=1e-6)
    assert result.max == pytest.approx(float(sv.max()), rel=1e-6)


def test_rms_operator_norm_rescales_by_sqrt_m_over_n():
    plain = jacobian_norm(net(), X, tol=1e-10, n_iter=500).norm
    rms = jacobian_norm(net(), X, rms=True, tol=1e-10, n_iter=500).norm
    assert rms == pytest.approx(plain * math.sqrt(5 / 3), rel=1e-9)


def test_frobenius_exact_and_probe():
    fro = torch.linalg.matrix_norm(full_jacobians(net(), X))
    q = float(fro.pow(2).mean().sqrt())
    assert jacobian_norm(net(), X, ord="fro", method="exact").norm == pytest.approx(q, rel=1e-10)
    probe = jacobian_norm(net(), X, ord="fro", n_probes=256,
                          generator=torch.Generator().manual_seed(1)).norm
    assert probe == pytest.approx(q, rel=0.03)


def test_layer_breakdown_uses_the_sub_network():
    model = net()
    result = jacobian_norm(model, X, layers=["0"], tol=1e-10, n_iter=500)
    first = torch.linalg.matrix_norm(model[0].weight.detach(), ord=2)
    assert result.layers[0].name == "0"
    assert result.layers[0].max == pytest.approx(float(first), rel=1e-6)


def test_batch_coupled_operator_norm_is_of_the_whole_batch_jacobian():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).double()
    x = X[:10]
    full = torch.autograd.functional.jacobian(model, x).reshape(20, 50)
    result = jacobian_norm(model, x, batch_size=10, tol=1e-12, n_iter=2000)
    assert result.batch_coupled
    assert result.norm == pytest.approx(float(torch.linalg.matrix_norm(full, ord=2)), rel=1e-5)


def test_bad_options():
    with pytest.raises(InvalidInputError, match="ord"):
        jacobian_norm(net(), X, ord="nuc")
