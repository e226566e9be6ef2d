"""jacobian_norm's per-layer operator norms (warm-started Lanczos) against full Jacobians."""

import pytest
import torch

from nngauge._internal.jacobian import JacobianProducts, operator_norm_estimate
from nngauge.measures import jacobian_norm
from nngauge.nn import mlp
from nngauge.zoo import groupnorm_cnn, resnet_small

from jacobian_oracle import full_norms

TOL = 1e-8


def batchnorm_mlp():
    torch.manual_seed(0)
    return mlp(6, 12, 4, 3, norm="batch").double(), torch.randn(8, 6, dtype=torch.float64), None



def residual_net():
    model = resnet_small(3, in_channels=1, width=4).double()
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return model, x, "eval"


def conv_net():
    model = groupnorm_cnn(2, 3, channels=(4, 8)).double()
    x = torch.randn(3, 2, 6, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    return model, x, None


NETS = [pytest.param((batchnorm_mlp, True), id="batchnorm-mlp"),
        pytest.param((residual_net, False), id="resnet"),
        pytest.param((conv_net, False), id="conv")]


@pytest.fixture(scope="module", params=NETS)
def measured(request):
    build, coupled = request.param
    model, x, norm_mode = build()
    layers = [name for name, m in model.named_modules()
              if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))][:-1]
    result = jacobian_norm(model, x, layers=layers, tol=TOL, n_iter=400, batch_size=len(x),
                           norm_mode=norm_mode, generator=torch.Generator().manual_seed(0))
    if result.batch_coupled:
        model.train()
    else:
        model.eval()
    assert result.batch_coupled == coupled  # batchnorm in train mode: one batch Jacobian
    return model, x, result


def test_every_layer_equals_the_full_jacobian_norm_within_its_stated_error(measured):
    """Each layer's estimate is the exact operator norm of its input -> layer Jacobian (batch
    Jacobian for batchnorm in train mode) to within the error bound the row states, which is
    below the tolerance; an estimate never exceeds the true norm (a Ritz value)."""
    model, x, result = measured
    assert result.converged and result.tol == TOL
    assert len(result.layers) >= 3
    for row in result.layers:
        exact = full_norms(model, x, row.name, result.batch_coupled).sort().values
        estimate = torch.from_numpy(row.per_sample).sort().values  # batches are drawn shuffled
        assert row.converged and row.error <= TOL, row.name
        assert (estimate <= exact * (1 + 1e-10)).all(), row.name
        assert (estimate >= exact * (1 - row.error) - 1e-12).all(), row.name


def test_budget_too_small_reports_non_convergence():
    """With one Lanczos step on a 6-dimensional Jacobian the bound is above the tolerance and
    the result says so instead of claiming convergence; the estimate is still a lower bound."""
    model, x, _ = batchnorm_mlp()
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh(),
                                torch.nn.Linear(6, 6)).double()
    result = jacobian_norm(model, x, n_iter=1, tol=1e-12)
    exact = full_norms(model, x, "output", False)
    assert not result.converged and not result.layers[-1].converged
    assert result.layers[-1].error > 1e-12
    assert (torch.from_numpy(result.layers[-1].per_sample).max() <= exact.max() * (1 + 1e-10))


def test_warm_start_from_the_top_vector_takes_fewer_steps():
    """Started from the top right singular vector (plus the fresh Gaussian part), Lanczos
    reaches the tolerance in fewer steps than from a random start, at the same value: the
    warm start is used and does not bias the result."""
    weight = torch.randn(60, 200, generator=torch.Generator().manual_seed(5),
                         dtype=torch.float64)
    x = torch.randn(1, 200, dtype=torch.float64, requires_grad=True)
    y = x @ weight.T
    top = torch.linalg.svd(weight).Vh[0].reshape(1, 200)
    runs = [operator_norm_estimate(JacobianProducts(x, y), coupled=False, n_iter=100, tol=1e-10,
                                   generator=torch.Generator().manual_seed(0), start=start)
            for start in (None, top)]
    assert all(run.converged for run in runs)
    assert runs[1].iterations < runs[0].iterations
    exact = float(torch.linalg.matrix_norm(weight, 2))
    for run in runs:
        assert float(run.sigma) == pytest.approx(exact, rel=1e-9)


def test_restarts_under_a_memory_cap_keep_the_bound():
    """With room for only MIN_BASIS Lanczos vectors the iteration restarts from its Ritz
    vector: it still converges, in more products than unrestarted, to the exact norm within
    its stated bound (never above it)."""
    weight = torch.randn(60, 200, generator=torch.Generator().manual_seed(5),
                         dtype=torch.float64)
    x = torch.randn(1, 200, dtype=torch.float64, requires_grad=True)
    y = x @ weight.T
    exact = float(torch.linalg.matrix_norm(weight, 2))
    runs = [operator_norm_estimate(JacobianProducts(x, y), coupled=False, n_iter=2000,
                                   tol=1e-9, generator=torch.Generator().manual_seed(0),
                                   memory=memory)
            for memory in (2 ** 30, 1)]
    assert all(run.converged and run.error <= 1e-9 for run in runs)
    assert runs[1].iterations > runs[0].iterations > 4
    for run in runs:
        assert exact * (1 - run.error) - 1e-12 <= float(run.sigma) <= exact * (1 + 1e-12)
