"""The input contract shared by every measure (issue: reliability): weights must hold finite
values, iteration counts and grid bounds must be in range, each refused before any work with
expected / got / fix rather than a raw error or a plausible number."""

import pytest
import torch

import nngauge
from nngauge.errors import InvalidInputError
from nngauge.nn import mlp
from nngauge.trajectories import line


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
    lambda m, x, y: nngauge.hessian(m, (x, y), n_iter=2, trace=False),
    lambda m, x, y: nngauge.loss_landscape(m, (x, y), resolution=3),
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


def test_a_one_dimensional_input_is_refused_not_read_as_samples():
    """nlc(net, X[0]) read 5 features as 5 samples of a 0-d input; now the fix is named."""
    x, _ = _data()
    with pytest.raises(InvalidInputError, match=r"1-D tensor of shape.*x\[None\].*x\[:, None\]"):
        nngauge.nlc(_net(), x[0])


class _NaNOut(torch.nn.Module):
    """Finite weights, NaN outputs for every input (a log of a negative value)."""

    def __init__(self):
        super().__init__()
        self.net = _net()

    def forward(self, x):
        return torch.log(-(self.net(x).abs() + 1))


@pytest.mark.parametrize("measure", [
    lambda m, x, y: nngauge.nlc(m, x),
    lambda m, x, y: nngauge.nlc_profile(m, x),
    lambda m, x, y: nngauge.jacobian_norm(m, x),
    lambda m, x, y: nngauge.gradient_metrics(m, (x, y)),
    lambda m, x, y: nngauge.correlations(m, x),
    lambda m, x, y: nngauge.kernel_conditioning(m, x),
    lambda m, x, y: nngauge.linear_region_diameter(m, x, n_batches=1),
    lambda m, x, y: nngauge.error_preserving_perturbation(m, (x, y), n_batches=1),
    lambda m, x, y: nngauge.margin(m, (x, y)),
    lambda m, x, y: nngauge.weight_noise_robustness(m, x, y),
    lambda m, x, y: nngauge.sharpness(m, (x, y), n_iter=2),
    lambda m, x, y: nngauge.expected_sharpness(m, (x, y), alpha=0.01, n_probes=4),
    lambda m, x, y: nngauge.hessian(m, (x, y), n_iter=2, trace=False),
    lambda m, x, y: nngauge.loss_landscape(m, (x, y), resolution=3),
    lambda m, x, y: nngauge.trajectory_length(m, line(x[0], x[1], 9)),
])
def test_a_model_that_outputs_nan_stops_every_measure(measure):
    x, y = _data()
    with pytest.raises(InvalidInputError, match="finite model outputs.*NaN or inf.*Fix"):
        measure(_NaNOut(), x, y)


def test_outputs_far_from_the_data_may_overflow_without_stopping_the_walk():
    """The region-size walk goes 1e3 diameters out, where exp overflows: not an error."""

    class Exp(torch.nn.Module):
        def forward(self, x):
            return x.exp()

    data = torch.tensor([[0.0], [1.0]])
    r = nngauge.linear_region_diameter(Exp(), data, batch_size=2, n_batches=1,
                                       generator=torch.Generator().manual_seed(0))
    assert 0 < r.median < 10


def test_a_float32_model_is_walked_in_float64():
    """In float32 the walk's first steps (1e-9 of the diameter) are below the outputs'
    resolution and every walk read 0; the float32 model now gives the float64 result."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(100, 5, generator=gen)
    net = mlp(5, 32, 3, 3, activation="tanh", generator=torch.Generator().manual_seed(0))
    single = nngauge.linear_region_diameter(net, x, batch_size=50, n_batches=2,
                                            generator=torch.Generator().manual_seed(1))
    double = nngauge.linear_region_diameter(net.double(), x.double(), batch_size=50,
                                            n_batches=2,
                                            generator=torch.Generator().manual_seed(1))
    assert single.median == double.median > 0 and single.below_grid == 0
    assert "upcast copy of a float32 model" in single.mode.precision
    assert net.layers[0].linear.weight.dtype == torch.float64  # the user's model untouched


def test_path_norm_refuses_a_nan_weight_instead_of_reporting_zero():
    net = _net()
    with torch.no_grad():
        net.layers[0].linear.weight[0, 0] = float("nan")
    with pytest.raises(InvalidInputError, match="finite.*layers.0.linear.weight"):
        nngauge.path_norm(net)


def test_skim_needs_two_samples_for_its_relative_deviation():
    net = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.Tanh(), torch.nn.Linear(5, 5))
    with pytest.raises(InvalidInputError, match="at least 2 samples"):
        nngauge.skim(net, _data()[0][:1], layers=("0", "1"))


def test_a_scalar_as_data_or_labels_is_refused_naming_the_sample_dimension():
    x, y = _data()
    for data in (torch.tensor(1.0), (torch.tensor(1.0), torch.tensor(0)), (x, y[0])):
        with pytest.raises(InvalidInputError, match=r"sample dimension first.*0-d tensor.*Fix"):
            nngauge.margin(_net(), data)


class _Output(torch.nn.Module):
    def __init__(self, change):
        super().__init__()
        self.net, self.change = _net(), change

    def forward(self, x):
        return self.change(self.net(x))


@pytest.mark.parametrize("change, message", [
    (lambda out: out.sum(), "sample dimension first.*0-d tensor"),
    (lambda out: None, "forward\\(\\) returns its output.*got None"),
    (lambda out: out.argmax(1), "floating-point model outputs.*torch.int64"),
])
@pytest.mark.parametrize("measure", [
    lambda m, x, y: nngauge.kernel_conditioning(m, x),
    lambda m, x, y: nngauge.trajectory_length(m, line(x[0], x[1], 9)),
    lambda m, x, y: nngauge.activation_patterns(m, x),
    lambda m, x, y: nngauge.pac_bayes(m, (x, y), alphas=[0.01], n_probes=2),
    lambda m, x, y: nngauge.sharpness_conditions(m, x),
])
def test_an_output_no_measure_reads_is_refused(change, message, measure):
    """A scalar (a sum over the batch), None (a forward without return) or predicted classes:
    kernel_conditioning returned no layers and trajectory_length a last row of 0.0."""
    x, y = _data()
    with pytest.raises(InvalidInputError, match=message + ".*Fix"):
        measure(_Output(change), x, y)


def test_one_output_per_sample_without_a_feature_dimension_is_measured():
    """(n,) outputs (one score per sample) are a function of the inputs: measured as (n, 1)."""
    x, _ = _data()
    path = line(x[0], x[1], 9)
    flat = nngauge.trajectory_length(_Output(lambda out: out[:, 0]), path, layers=[])
    column = nngauge.trajectory_length(_Output(lambda out: out[:, :1]), path, layers=[])
    assert flat.lengths[-1] == pytest.approx(column.lengths[-1]) and flat.lengths[-1] > 0


@pytest.mark.parametrize("measure", [
    lambda m, x, y: nngauge.expected_sharpness(m, (x, y), alpha=0.01, n_probes=2),
    lambda m, x, y: nngauge.pac_bayes(m, (x, y), alphas=[0.01], n_probes=2),
    lambda m, x, y: nngauge.trajectory_length(m, line(x[0], x[1], 9)),
])
def test_data_whose_squares_overflow_is_refused_not_reported_as_nan(measure):
    x, y = _data()
    with pytest.raises(InvalidInputError, match="squared norms are finite in torch.float32.*"
                       "as large as .*e\\+30.*standardize"):
        measure(_net().float(), x.float() * 1e30, y)


def test_large_float64_data_is_measured_in_float64():
    x, _ = _data()
    r = nngauge.nlc(_net().double(), x.double() * 1e30)
    assert r.nlc > 0 and r.nlc < float("inf")


def test_a_degenerate_arc_and_an_ambiguous_polyline_are_refused():
    from nngauge.trajectories import arc, polyline_length

    with pytest.raises(InvalidInputError, match="nonzero endpoints.*x0 all zeros.*line"):
        arc(torch.zeros(3), torch.ones(3), 5)
    with pytest.raises(InvalidInputError, match="x1 all zeros"):
        arc(torch.ones(3), torch.zeros(3), 5)
    for points in (torch.arange(4.0), torch.tensor(1.0)):
        with pytest.raises(InvalidInputError, match=r"points\[:, None\]"):
            polyline_length(points)
    assert float(polyline_length(torch.arange(4.0)[:, None])) == 3.0
