"""modify / debias / unit_scale / normalize (NLC appendix C, deep-conditioning eq. (2))."""

import numpy as np
import pytest
import torch

from nngauge.activations import get
from nngauge.activations._gaussian import cross_expectation, expectation
from nngauge.activations._modify import debias, modify, normalize, unit_scale
from nngauge.activations._spec import from_spec
from nngauge.errors import InvalidInputError
from nngauge.theory import gaussian_covariance, gaussian_mean

RHOS = np.linspace(-1.0, 1.0, 11)
VARIANCE_PAIRS = [(1.0, 1.0), (0.3, 2.5), (4.0, 0.7)]
X = np.linspace(-4.0, 4.0, 161)

MODIFICATIONS = [
    {"scale": 2.0},
    {"dilation": 1.2, "offset": -0.3},
    {"scale": -0.7, "dilation": -0.8, "offset": 0.5},
]
CLOSED = ["relu", "leaky_relu", "erf", "gaussian", "odd_square", "abs", "sign", "square"]


@pytest.mark.parametrize("kwargs", MODIFICATIONS + [{"shift": 0.2, "dilation": 0.8}])
@pytest.mark.parametrize("name", ["tanh", "relu", "selu", "gaussian"])
def test_value_derivative_and_torch(name, kwargs):
    base = get(name)
    act = modify(base, **kwargs)
    c, d = kwargs.get("scale", 1.0), kwargs.get("dilation", 1.0)
    t, b = kwargs.get("shift", 0.0), kwargs.get("offset", 0.0)
    np.testing.assert_allclose(act(X), c * base(d * X + t) + b, rtol=1e-15)
    np.testing.assert_allclose(act.derivative(X), c * d * base.derivative(d * X + t), rtol=1e-15)
    np.testing.assert_allclose(act.torch_fn(torch.tensor(X)).numpy(), act(X), atol=1e-12)
    deriv = act.derivative_activation()
    kept = X[np.min(np.abs(X[:, None] - np.array(act.breakpoints or (99.0,))), axis=1) > 1e-3]
    np.testing.assert_allclose(deriv(kept), (act(kept + 1e-6) - act(kept - 1e-6)) / 2e-6,
                               atol=1e-6)
    assert act.module()(torch.zeros(2, 3)).shape == (2, 3)


def test_input_is_not_changed_and_params_recorded():
    base = get("tanh")
    before = (base.label, dict(base.params), base.breakpoints, base.mean_fn)
    act = modify(base, dilation=1.2, shift=0.2)
    assert (base.label, dict(base.params), base.breakpoints, base.mean_fn) == before
    assert act.params == {"scale": 1.0, "dilation": 1.2, "shift": 0.2, "offset": 0.0}
    assert act.base is base


def test_labels_are_specs_that_rebuild_the_activation():
    act = normalize(modify(get("tanh"), dilation=1.2))
    assert act.label == "normalize(modify(tanh, dilation=1.2))"
    assert debias(get("relu")).label == "debias(relu)"
    assert unit_scale(modify("leaky_relu", shift=-0.2)).label == (
        "unit_scale(modify(leaky_relu(negative_slope=0.01), shift=-0.2))")
    rebuilt = from_spec(act.label)
    np.testing.assert_allclose(rebuilt(X), act(X), rtol=1e-14)


def test_breakpoints_map_and_piecewise_linearity_is_kept():
    act = modify(get("hard_tanh"), dilation=-2.0, shift=0.5)
    assert act.breakpoints == pytest.approx((-0.25, 0.75))  # (b - t) / d, sorted
    assert act.piecewise_linear
    assert not modify(get("tanh"), scale=3.0).piecewise_linear
    assert modify(get("relu"), shift=1.0).breakpoints == (-1.0,)


@pytest.mark.parametrize("kwargs", MODIFICATIONS)
@pytest.mark.parametrize("name", CLOSED)
def test_closed_forms_carry_through_without_shift(name, kwargs):
    act = modify(get(name), **kwargs)
    assert act.has_closed_forms
    for q1, q2 in VARIANCE_PAIRS:
        closed = gaussian_covariance(act, RHOS, q1=q1, q2=q2, method="closed")
        quad = gaussian_covariance(act, RHOS, q1=q1, q2=q2, method="quadrature")
        np.testing.assert_allclose(closed, quad, atol=1e-8, rtol=1e-8)
        mean = expectation(act.value, q1, breakpoints=act.breakpoints)
        assert float(gaussian_mean(act, q1)) == pytest.approx(float(mean), abs=1e-10)


@pytest.mark.parametrize("name", ["relu", "erf", "gaussian", "odd_square", "leaky_relu"])
def test_derivative_closed_forms_carry_through(name):
    deriv = modify(get(name), scale=1.5, dilation=-0.8).derivative_activation()
    assert deriv.covariance_fn is not None
    for q1, q2 in VARIANCE_PAIRS[1:]:
        closed = gaussian_covariance(deriv, RHOS, q1=q1, q2=q2, method="closed")
        quad = gaussian_covariance(deriv, RHOS, q1=q1, q2=q2, method="quadrature")
        np.testing.assert_allclose(closed, quad, atol=1e-8, rtol=1e-8)


def test_shift_drops_closed_forms_and_quadrature_takes_over():
    act = modify(get("relu"), scale=2.0, shift=0.3, offset=-1.0)
    assert act.mean_fn is None and act.covariance_fn is None
    got = gaussian_covariance(act, RHOS, q1=0.5, q2=2.0)
    f = lambda x: 2.0 * np.maximum(x + 0.3, 0.0) - 1.0  # noqa: E731
    want = cross_expectation(f, f, RHOS, 0.5, 2.0, f_breakpoints=(-0.3,), g_breakpoints=(-0.3,))
    np.testing.assert_allclose(got, want, atol=1e-12)
    # E[relu(z + t)] = t Phi(t) + phi(t) (truncated-normal mean), t = 0.3
    from scipy.stats import norm

    assert float(gaussian_mean(act)) == pytest.approx(
        2.0 * (0.3 * norm.cdf(0.3) + norm.pdf(0.3)) - 1.0, abs=1e-12)


NORMALIZABLE = [get("tanh"), get("relu"), get("sigmoid"), get("selu"), get("even_tanh"),
                get("square"), modify(get("gaussian"), shift=0.2),
                modify(get("tanh"), dilation=1.2), modify(get("erf"), dilation=0.8, offset=0.4),
                get("hard_tanh"), get("norm_relu", b=-1.0)]


@pytest.mark.parametrize("act", NORMALIZABLE, ids=lambda a: a.label)
def test_debias_unit_scale_normalize(act):
    d, u, n = debias(act), unit_scale(act), normalize(act)
    assert float(gaussian_mean(d)) == pytest.approx(0.0, abs=1e-10)
    assert float(gaussian_covariance(u, 1.0, method="quadrature")) == pytest.approx(1.0, abs=1e-10)
    assert float(gaussian_mean(n)) == pytest.approx(0.0, abs=1e-10)
    direct = float(expectation(n.value, 1.0, breakpoints=n.breakpoints))
    assert direct == pytest.approx(0.0, abs=1e-10)
    for method in ("auto", "quadrature"):
        assert float(gaussian_covariance(n, 1.0, method=method)) == pytest.approx(1.0, abs=1e-10)
    # NLC appendix C: debias first, then scale to quadratic mean 1 -- the same function
    np.testing.assert_allclose(unit_scale(debias(act))(X), n(X), atol=1e-12)


def test_paper_composition_is_exact():
    act = normalize(modify(get("tanh"), dilation=1.2))
    assert float(gaussian_mean(act)) == pytest.approx(0.0, abs=1e-10)
    assert float(gaussian_covariance(act, 1.0)) == pytest.approx(1.0, abs=1e-10)


def test_normalized_relu_by_hand():
    """(relu - 1/sqrt(2 pi)) / sqrt(1/2 - 1/(2 pi)) with closed forms all the way."""
    act = normalize(get("relu"))
    assert act.has_closed_forms
    std = np.sqrt(0.5 - 1 / (2 * np.pi))
    assert act.params["scale"] == pytest.approx(1 / std, rel=1e-14)
    assert act.params["offset"] == pytest.approx(-1 / np.sqrt(2 * np.pi) / std, rel=1e-14)
    # dual of the normalized relu at rho = 0: (E relu)^2 - m^2 = 0, so C(0) = 0
    assert float(gaussian_covariance(act, 0.0)) == pytest.approx(0.0, abs=1e-14)


@pytest.mark.parametrize("kwargs", [{"scale": 0.0}, {"dilation": 0.0}, {"shift": float("nan")},
                                    {"offset": float("inf")}, {"scale": "big"}])
def test_bad_parameters(kwargs):
    with pytest.raises(InvalidInputError) as info:
        modify(get("relu"), **kwargs)
    message = str(info.value)
    assert "modify() expected" in message and "got" in message and "Fix:" in message


def test_bad_inputs_to_wrappers():
    with pytest.raises(InvalidInputError, match="Fix:"):
        normalize(get("constant", value=2.0))
    with pytest.raises(InvalidInputError, match="Fix:"):
        unit_scale(get("constant", value=0.0))
    with pytest.raises(InvalidInputError, match="Fix:"):
        debias(3.0)


@pytest.mark.parametrize("call, match", [
    (lambda: modify("tanh", scale=0), "scale a finite nonzero number"),
    (lambda: modify("tanh", dilation=float("inf")), "dilation a finite nonzero number"),
    (lambda: modify("tanh", shift="1"), "shift a finite number"),
    (lambda: modify(3), "act an Activation or a registry name"),
    (lambda: debias(None), "act an Activation or a registry name"),
    (lambda: from_spec(""), "spec an activation spec string"),
    (lambda: expectation(np.tanh, -1.0), "q real values >= 0"),
    (lambda: expectation(np.tanh, 1.0, breakpoints=(float("nan"),)), "breakpoints a sequence"),
    (lambda: cross_expectation(np.tanh, np.tanh, 1.5), "rho real values in \\[-1, 1\\]"),
    (lambda: cross_expectation(np.tanh, "tanh", 0.5), "g a callable"),
    (lambda: expectation(np.tanh, rule="hermite"), "rule a Quadrature rule"),
])
def test_declared_options_are_refused_with_their_range(call, match):
    with pytest.raises(InvalidInputError, match=f"expected {match}.*got .*Fix"):
        call()


def test_numpy_scalars_are_accepted_as_parameters():
    act = modify("tanh", scale=np.float64(2.0), dilation=np.int64(3))
    assert act.params == {"scale": 2.0, "dilation": 3.0, "shift": 0.0, "offset": 0.0}
    assert all(type(v) is float for v in act.params.values())
