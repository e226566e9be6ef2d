"""The input contract shared by every measure (issue: reliability): weights must hold finite
values, iteration counts and grid bounds must be in range, each refused before any work with
expected / got / fix rather than a raw error or a plausible number."""

import pytest
import torch

import nngauge
from nngauge.errors import InvalidInputError
from nngauge.nn import mlp


def _net():
    return mlp(5, 8, 3, 3, generator=torch.Generator().manual_seed(0))


def _data():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(20, 5, generator=gen), torch.randint(0, 3, (20,), generator=gen)


@pytest.mark.parametrize("measure", [
    lambda m, x, y: nngauge.nlc(m, x),
    lambda m, x, y: nngauge.jacobian_norm(m, x),
    lambda m, x, y: nngauge.correlations(m, x),
    lambda m, x, y: nngauge.margin(m, (x, y)),
    lambda m, x, y: nngauge.hessian(m, (x, y), lanczos_steps=2, trace=False),
    lambda m, x, y: nngauge.loss_landscape(m, (x, y), steps=3),
])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_weight_stops_every_measure(measure, value):
    net = _net()
    with torch.no_grad():
        net.layers[1].linear.weight[0, 0] = value
    x, y = _data()
    with pytest.raises(InvalidInputError, match="finite.*layers.1.linear.weight.*Fix"):
        measure(net, x, y)


def test_a_meta_device_model_is_refused_with_the_fix():
    with torch.device("meta"):
        net = mlp(5, 8, 3, 3)
    with pytest.raises(InvalidInputError, match="meta-device.*to_empty"):
        nngauge.nlc(net, _data()[0])


@pytest.mark.parametrize("call", [
    lambda m, x, y: nngauge.jacobian_norm(m, x, n_iter=0),
    lambda m, x, y: nngauge.gradient_metrics(m, (x, y), n_iter=0),
])
def test_zero_iterations_are_refused_not_reported_as_zero(call):
    x, y = _data()
    with pytest.raises(InvalidInputError, match="n_iter an integer >= 1"):
        call(_net(), x, y)


@pytest.mark.parametrize("k_max", [-1, 0, 1e-12, float("inf"), "10"])
def test_region_size_grids_need_a_positive_bound(k_max):
    x, y = _data()
    with pytest.raises(InvalidInputError, match="k_max a finite number"):
        nngauge.linear_region_diameter(_net(), x, k_max=k_max)
    with pytest.raises(InvalidInputError, match="k_max a finite number"):
        nngauge.error_preserving_perturbation(_net(), (x, y), k_max=k_max)
