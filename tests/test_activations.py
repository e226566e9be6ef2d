"""The activation zoo: closed forms vs quadrature, derivatives, torch forms, errors."""

import numpy as np
import pytest
import torch

from nngauge.activations import get, names
from nngauge.activations._gaussian import expectation
from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.theory import gaussian_covariance, gaussian_mean

RHOS = np.linspace(-1.0, 1.0, 11)
VARIANCE_PAIRS = [(1.0, 1.0), (0.3, 2.5), (4.0, 0.7)]
VARIANCES = [0.3, 1.0, 2.5]

ZOO = [
    ("identity", {}), ("relu", {}), ("leaky_relu", {}), ("leaky_relu", {"negative_slope": 0.2}),
    ("hard_tanh", {}), ("hard_tanh", {"min_val": -0.5, "max_val": 2.0}), ("tanh", {}),
    ("sigmoid", {}), ("erf", {}), ("selu", {}), ("elu", {}), ("elu", {"alpha": 0.5}),
    ("gelu", {}), ("silu", {}), ("softplus", {}), ("softplus", {"beta": 2.0}), ("sign", {}),
    ("step", {}), ("even_tanh", {}), ("gaussian", {}), ("square", {}), ("odd_square", {}),
    ("abs", {}), ("norm_relu", {}), ("norm_relu", {"b": -0.5}), ("norm_relu", {"b": 0.0}),
    ("hard_tanh", {"min_val": 0.0, "max_val": 6.0}), ("constant", {"value": 0.7}),
]
ZOO_IDS = [f"{n}{p or ''}" for n, p in ZOO]

# The closed forms the zoo must carry (covariance and mean): a regression guard.
MUST_HAVE_CLOSED_COVARIANCE = {"identity", "relu", "leaky_relu", "step", "sign", "erf",
                               "square", "gaussian", "abs", "odd_square", "hard_tanh",
                               "norm_relu", "gelu"}
MUST_HAVE_CLOSED_DERIVATIVE = {"identity", "relu", "leaky_relu", "erf", "gaussian", "square",
                               "odd_square", "abs", "hard_tanh", "norm_relu"}
PIECEWISE_LINEAR = {"identity", "relu", "leaky_relu", "hard_tanh", "abs", "sign", "step",
                    "norm_relu", "constant"}


def with_derivatives(keep=lambda act: True):
    """Every zoo activation and its derivative activation for which ``keep`` holds."""
    out = []
    for (name, params), ident in zip(ZOO, ZOO_IDS):
        act = get(name, **params)
        for a, i in ((act, ident), (act.derivative_activation(), f"d/dx {ident}")):
            if keep(a):
                out.append(pytest.param(a, id=i))
    return out


def test_names_cover_the_design_list():
    required = {"identity", "relu", "leaky_relu", "hard_tanh", "tanh", "sigmoid", "erf", "selu",
                "elu", "gelu", "silu", "softplus", "sign", "step", "even_tanh", "gaussian",
                "square", "odd_square", "abs", "norm_relu"}
    assert required <= set(names())


def test_required_closed_forms_exist():
    for name in MUST_HAVE_CLOSED_COVARIANCE:
        act = get(name)
        assert act.has_closed_forms, name
    for name in MUST_HAVE_CLOSED_DERIVATIVE:
        assert get(name).derivative_activation().has_closed_forms, name


@pytest.mark.parametrize("name", sorted(set(n for n, _ in ZOO)))
def test_piecewise_linear_flags_and_breakpoints(name):
    act = get(name)
    assert act.piecewise_linear == (name in PIECEWISE_LINEAR)
    if act.piecewise_linear and name not in ("identity", "constant"):
        assert act.breakpoints
    x = np.linspace(-4, 4, 2001)
    if act.piecewise_linear:  # second differences vanish away from breakpoints
        y = act(x)
        second = y[2:] - 2 * y[1:-1] + y[:-2]
        near = np.min(np.abs(x[1:-1, None] - np.array(act.breakpoints or (99.0,))), axis=1) < 0.01
        np.testing.assert_allclose(second[~near], 0.0, atol=1e-12)


@pytest.mark.parametrize("act", with_derivatives(lambda a: a.covariance_fn is not None))
def test_closed_covariance_matches_quadrature(act):
    for q1, q2 in VARIANCE_PAIRS:
        closed = gaussian_covariance(act, RHOS, q1=q1, q2=q2, method="closed")
        quad = gaussian_covariance(act, RHOS, q1=q1, q2=q2, method="quadrature")
        np.testing.assert_allclose(closed, quad, atol=1e-8, rtol=1e-8, err_msg=f"{q1}, {q2}")


@pytest.mark.parametrize("act", with_derivatives(lambda a: a.mean_fn is not None))
def test_closed_mean_matches_quadrature(act):
    for q in VARIANCES:
        quad = expectation(act.value, q, breakpoints=act.breakpoints)
        assert float(gaussian_mean(act, q)) == pytest.approx(float(quad), abs=1e-10)


@pytest.mark.parametrize("act", with_derivatives(lambda a: a.covariance_fn is not None))
def test_closed_covariance_at_zero_variance(act):
    """q1 = 0 makes u the constant 0: E[tau(0) tau(v)] (quadrature handles it directly)."""
    for q1, q2 in [(0.0, 1.7), (2.0, 0.0), (0.0, 0.0)]:
        closed = gaussian_covariance(act, RHOS[::5], q1=q1, q2=q2, method="closed")
        quad = gaussian_covariance(act, RHOS[::5], q1=q1, q2=q2, method="quadrature")
        np.testing.assert_allclose(closed, quad, atol=1e-8, rtol=1e-8)


def test_bivariate_normal_cdf_against_scipy():
    from scipy.stats import multivariate_normal

    from nngauge.activations._norm_relu import bivariate_normal_cdf

    for h, k in [(0.3, -1.2), (0.0, 0.5), (-0.7, 0.0), (0.0, 0.0), (1.5, 2.0), (-2.0, -0.1)]:
        for rho in (-0.95, -0.3, 0.0, 0.6, 0.99):
            want = multivariate_normal(cov=[[1, rho], [rho, 1]]).cdf([h, k])
            assert float(bivariate_normal_cdf(h, k, rho)) == pytest.approx(want, abs=1e-7)


def test_closed_forms_match_monte_carlo():
    """Brute force: 400k correlated Gaussian pairs, unequal variances, 6 standard errors."""
    rng = np.random.default_rng(0)
    q1, q2, rho = 0.6, 1.8, -0.4
    z1, z2 = rng.standard_normal((2, 400_000))
    u = np.sqrt(q1) * z1
    v = np.sqrt(q2) * (rho * z1 + np.sqrt(1 - rho * rho) * z2)
    for name in ("erf", "odd_square", "gaussian", "leaky_relu", "abs", "sign", "hard_tanh",
                 "norm_relu"):
        act = get(name)
        sample = act(u) * act(v)
        closed = float(act.covariance_fn(rho, q1, q2))
        assert abs(sample.mean() - closed) < 6 * sample.std() / np.sqrt(sample.size), name


def test_textbook_values():
    """Values derived by hand: E[sign u sign v] = (2/pi) arcsin(rho), E[relu(z)^2] = 1/2, ..."""
    assert float(gaussian_covariance("sign", 0.5, q1=3.0, q2=0.2)) == pytest.approx(1 / 3)
    assert float(gaussian_covariance("relu", 1.0, q1=2.0, q2=2.0)) == pytest.approx(1.0)
    assert float(gaussian_covariance("square", 1.0)) == pytest.approx(3.0)  # E z^4
    assert float(gaussian_covariance("odd_square", 1.0)) == pytest.approx(3.0)
    assert float(gaussian_covariance("abs", -1.0)) == pytest.approx(1.0)
    assert float(gaussian_covariance("erf", 1.0)) == pytest.approx(2 / np.pi * np.arcsin(2 / 3))
    # E[(exp(-z^2/2)/sqrt(2 pi))^2] = 1 / (2 pi sqrt(3))
    want = 1 / (2 * np.pi * np.sqrt(3))
    assert float(gaussian_covariance("gaussian", 1.0)) == pytest.approx(want)
    assert float(gaussian_mean("selu")) == pytest.approx(0.0, abs=1e-7)  # self-normalizing
    assert float(gaussian_covariance("selu", 1.0)) == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("act", with_derivatives())
def test_derivative_matches_finite_differences(act):
    x = np.linspace(-3.7, 3.9, 301)
    if act.breakpoints:
        x = x[np.min(np.abs(x[:, None] - np.array(act.breakpoints)), axis=1) > 1e-3]
    h = 1e-6
    numeric = (act(x + h) - act(x - h)) / (2 * h)
    np.testing.assert_allclose(act.derivative(x), numeric, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("act", with_derivatives())
def test_numpy_matches_torch(act):
    x = np.concatenate([np.linspace(-6, 6, 241), [-30.0, 30.0]])
    got = act.torch_fn(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(got, act(x), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name,params", ZOO, ids=ZOO_IDS)
def test_module_runs_on_tensors(name, params):
    act = get(name, **params)
    module = act.module()
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    out = module(x)
    assert out.shape == x.shape and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), act(x.numpy().astype(np.float64)), atol=1e-5)


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownNameError) as info:
        get("nope")
    message = str(info.value)
    assert "nope" in message and "relu" in message and "norm_relu" in message
    assert "Fix:" in message


@pytest.mark.parametrize("name,params", [
    ("leaky_relu", {"negative_slope": float("nan")}),
    ("leaky_relu", {"negative_slope": "steep"}),
    ("hard_tanh", {"min_val": 1.0, "max_val": -1.0}),
    ("softplus", {"beta": 0.0}),
    ("elu", {"alpha": float("inf")}),
    ("norm_relu", {"b": 40.0}),
    ("relu", {"negative_slope": 0.1}),
])
def test_bad_parameters_raise_with_expected_got_fix(name, params):
    with pytest.raises(InvalidInputError) as info:
        get(name, **params)
    assert isinstance(info.value, NNGaugeError)
    message = str(info.value)
    assert "expected" in message and "got" in message and "Fix:" in message


def test_labels_and_params():
    act = get("leaky_relu", negative_slope=0.2)
    assert act.label == "leaky_relu(negative_slope=0.2)"
    assert act.params == {"negative_slope": 0.2}
    assert get("hard_tanh").params == {"min_val": -1.0, "max_val": 1.0}
    assert get("hard_tanh").breakpoints == (-1.0, 1.0)


NLC_TABLE_1_ROW_A = {"relu": 1.211, "selu": 1.035, "tanh": 1.085, "sigmoid": 1.017,
                     "even_tanh": 2.335, "gaussian": 1.577, "square": 1.414, "odd_square": 1.155}


@pytest.mark.parametrize("name,printed", sorted(NLC_TABLE_1_ROW_A.items()))
def test_nlc_paper_table_1_row_a(name, printed):
    """NLC_tau(1) = Q[tau'(z)] / S[tau(z)] (NLC paper, section 5), printed to 3 decimals."""
    act = get(name)
    slope_power = float(gaussian_covariance(act.derivative_activation(), 1.0))
    variance = float(gaussian_covariance(act, 1.0)) - float(gaussian_mean(act)) ** 2
    assert np.sqrt(slope_power / variance) == pytest.approx(printed, abs=5.01e-4)
