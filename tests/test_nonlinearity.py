"""Nonlinearity of activations: NLC_tau, linear approximation error, Hermite linearization
error, coefficients of non-linearity and non-affinity.

Three kinds of evidence: the papers' printed numbers (NLC paper Table 1 rows A and E,
shrinkage paper appendix B, deep-conditioning appendix C.4 via the duals of Daniely et al.),
closed forms against quadrature, and independent computations (Gauss-Hermite least squares,
Hermite coefficient sums, Monte Carlo).
"""

from dataclasses import replace
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import erf
from scipy.stats import norm

from nngauge.activations import Activation, get, hermite_coefficients
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.theory._nonlinearity import (
    coefficient_of_nonaffinity,
    coefficient_of_nonlinearity,
    linear_approximation_error,
    linearization_error,
    nlc_activation,
)

SELU_LAMBDA, SELU_ALPHA = 1.0507009873554805, 1.6732632423543772


def local(name, value, derivative, breakpoints=()):
    """An activation built here from its formula (independent of the zoo's closed forms)."""
    return Activation(name=name, value=value, derivative_fn=derivative, torch_fn=None,
                      breakpoints=breakpoints)


def _selu(x):
    return SELU_LAMBDA * np.where(x > 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0.0)))


def _dselu(x):
    return SELU_LAMBDA * np.where(x > 0, 1.0, SELU_ALPHA * np.exp(np.minimum(x, 0.0)))


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# The "Formula" row of the NLC paper's Table 1.
TABLE1 = {
    "relu": local("relu", lambda x: np.maximum(x, 0.0), lambda x: (x > 0) * 1.0, (0.0,)),
    "selu": local("selu", _selu, _dselu, (0.0,)),
    "tanh": local("tanh", np.tanh, lambda x: 1.0 / np.cosh(x) ** 2),
    "sigmoid": local("sigmoid", _sigmoid, lambda x: _sigmoid(x) * (1 - _sigmoid(x))),
    "even_tanh": local("even_tanh", lambda x: np.tanh(np.abs(x)),
                       lambda x: np.sign(x) / np.cosh(x) ** 2, (0.0,)),
    "gaussian": local("gaussian", lambda x: norm.pdf(x), lambda x: -x * norm.pdf(x)),
    "square": local("square", lambda x: x * x, lambda x: 2 * x),
    "odd_square": local("odd_square", lambda x: x * np.abs(x), lambda x: 2 * np.abs(x), (0.0,)),
}
ROW_A = {"relu": 1.211, "selu": 1.035, "tanh": 1.085, "sigmoid": 1.017, "even_tanh": 2.335,
         "gaussian": 1.577, "square": 1.414, "odd_square": 1.155}
ROW_E = {"relu": 0.222, "selu": 0.030, "tanh": 0.075, "sigmoid": 0.0024, "even_tanh": 0.276,
         "gaussian": 0.155, "square": 2.000, "odd_square": 0.178}


@pytest.mark.parametrize("name", sorted(TABLE1))
def test_table1_row_a(name):
    assert round(float(nlc_activation(TABLE1[name], 1.0)), 3) == ROW_A[name]


@pytest.mark.parametrize("name", sorted(TABLE1))
def test_table1_row_e(name):
    value = float(linear_approximation_error(TABLE1[name]))
    if name == "sigmoid":
        # 0.002347 rounds to 0.0023; the printed 0.0024 is within one unit of the last digit
        # (0.002347 -> 0.00235 -> 0.0024 by double rounding).
        assert value == pytest.approx(0.0023465, abs=5e-7)
        assert abs(value - ROW_E[name]) < 1e-4
    else:
        assert round(value, 3) == ROW_E[name]


@pytest.mark.parametrize("name", sorted(TABLE1))
def test_table1_with_the_zoo(name):
    """The registered activations (closed forms where they carry them) give the same rows."""
    act = get(name)
    assert nlc_activation(act) == pytest.approx(float(nlc_activation(TABLE1[name])), rel=1e-9)
    assert linear_approximation_error(act) == pytest.approx(
        float(linear_approximation_error(TABLE1[name])), rel=1e-9)


def test_table1_exact_values():
    """Rows A and E where they have closed forms (derived by hand, not copied)."""
    relu, sq, gauss = TABLE1["relu"], TABLE1["square"], TABLE1["gaussian"]
    assert nlc_activation(relu) == pytest.approx(np.sqrt(0.5 / (0.5 - 0.5 / np.pi)), rel=1e-12)
    assert nlc_activation(sq) == pytest.approx(np.sqrt(2.0), rel=1e-12)  # sqrt(4 / Var z^2)
    # Gaussian bump: E tau = 1/sqrt(4 pi), E tau^2 = 1/(2 pi sqrt 3): error = 2/sqrt(3) - 1.
    assert linear_approximation_error(gauss) == pytest.approx(2 / np.sqrt(3) - 1, rel=1e-12)
    assert linear_approximation_error(sq) == pytest.approx(2.0, rel=1e-12)
    fit = 1 / (2 * np.pi) + 0.25
    assert linear_approximation_error(relu) == pytest.approx((0.5 - fit) / fit, rel=1e-12)


@pytest.mark.parametrize("name", ["tanh", "selu", "odd_square", "even_tanh"])
def test_nlc_is_the_nlc_of_the_elementwise_map_monte_carlo(name):
    """NLC_tau(sigma) = NLC(tau, N(0, sigma^2)): sigma is the input's standard deviation."""
    act, sigma = TABLE1[name], 1.7
    s = sigma * np.random.default_rng(0).standard_normal(400_000)
    empirical = sigma * np.sqrt(np.mean(act.derivative(s) ** 2)) / np.std(act(s))
    assert nlc_activation(act, sigma) == pytest.approx(empirical, rel=1e-2)


def test_nlc_vectorized_and_scale_invariance():
    sigmas = np.array([[0.3, 1.0], [2.0, 5.0]])
    out = nlc_activation(TABLE1["tanh"], sigmas)
    assert out.shape == (2, 2)
    for idx in np.ndindex(sigmas.shape):
        assert out[idx] == pytest.approx(float(nlc_activation(TABLE1["tanh"], sigmas[idx])))
    # Positively homogeneous activations have the same NLC at every scale.
    np.testing.assert_allclose(nlc_activation("relu", sigmas), ROW_A_RELU_EXACT, rtol=1e-12)
    np.testing.assert_allclose(nlc_activation(TABLE1["odd_square"], sigmas),
                               float(nlc_activation(TABLE1["odd_square"])), rtol=1e-10)
    # tanh becomes linear as sigma -> 0.
    assert nlc_activation(TABLE1["tanh"], 1e-3) == pytest.approx(1.0, abs=1e-5)


ROW_A_RELU_EXACT = np.sqrt(np.pi / (np.pi - 1))


def _without_closed_forms(act):
    return replace(act, mean_fn=None, covariance_fn=None, derivative_factory=None)


@pytest.mark.parametrize("name", ["relu", "identity", "step"])
def test_closed_forms_agree_with_quadrature(name):
    act = get(name)
    bare = _without_closed_forms(act)
    sigmas = np.array([0.4, 1.0, 2.5])
    for fn in (linear_approximation_error, lambda a, s: linearization_error(a, q=s**2)):
        np.testing.assert_allclose(fn(act, sigmas), fn(bare, sigmas), rtol=1e-10, atol=1e-13)
    if name != "step":  # step' = 0 a.e.
        np.testing.assert_allclose(nlc_activation(act, sigmas), nlc_activation(bare, sigmas),
                                   rtol=1e-10)
    assert coefficient_of_nonlinearity(act) == pytest.approx(
        coefficient_of_nonlinearity(bare), abs=1e-12)
    assert coefficient_of_nonaffinity(act) == pytest.approx(
        coefficient_of_nonaffinity(bare), abs=1e-12)


def _quad(fn, act, sigma=1.0):
    """E[fn(z)], z ~ N(0, 1), by scipy's adaptive quad split at the kinks (independent path)."""
    points = sorted(b / sigma for b in act.breakpoints)
    edges = [-14.0, *points, 14.0]
    pieces = (quad(lambda z: fn(z) * norm.pdf(z), lo, hi, epsabs=1e-13, epsrel=1e-12, limit=200)
              for lo, hi in zip(edges[:-1], edges[1:]))
    return sum(value for value, _ in pieces)


def _least_squares_affine_fit(act, sigma):
    """Residual and fit powers of the L2(N(0, sigma^2)) projection onto {alpha + beta s},
    from the normal equations of the 2 x 2 Gram matrix."""
    def y(z):
        return float(act(np.array(sigma * z)))

    gram = np.array([[1.0, 0.0], [0.0, sigma**2]])
    rhs = np.array([_quad(y, act, sigma), _quad(lambda z: sigma * z * y(z), act, sigma)])
    coef = np.linalg.solve(gram, rhs)
    fit_power = coef @ gram @ coef
    return _quad(lambda z: y(z) ** 2, act, sigma) - fit_power, fit_power


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "selu", "even_tanh", "odd_square"])
@pytest.mark.parametrize("sigma", [0.5, 2.0])
def test_linear_approximation_error_is_a_least_squares_fit(name, sigma):
    act = TABLE1[name]
    residual, fit_power = _least_squares_affine_fit(act, sigma)
    assert linear_approximation_error(act, sigma) == pytest.approx(residual / fit_power, rel=1e-8)
    assert linearization_error(act, q=sigma**2) == pytest.approx(residual, rel=1e-8, abs=1e-14)


def test_linearization_error_is_the_hermite_tail():
    """||tau - tau_bar||^2 = sum_{k>=2} a_k^2 (shrinkage section 2); erf in closed form."""
    tanh = TABLE1["tanh"]
    a = hermite_coefficients(tanh.value, 150)
    assert linearization_error(tanh) == pytest.approx(np.sum(a[2:] ** 2), rel=1e-10)
    # Kinked relu: a_k^2 ~ k^(-5/2); the partial sum approaches from below.
    relu = TABLE1["relu"]
    a = hermite_coefficients(relu.value, 200, breakpoints=(0.0,))
    err = float(linearization_error(relu))
    assert np.sum(a[2:] ** 2) <= err
    assert np.sum(a[2:] ** 2) == pytest.approx(err, rel=2e-3)
    # at a variance q: the expansion of tau(sqrt(q) z)
    a = hermite_coefficients(tanh.value, 150, q=3.0)
    assert linearization_error(tanh, q=3.0) == pytest.approx(np.sum(a[2:] ** 2), rel=1e-8)


def test_linearization_error_appendix_b():
    """Shrinkage paper appendix B: leaky ReLU and erf."""
    for slope in (0.0, 0.1, 0.3):
        leaky = local("leaky", lambda x, a=slope: np.where(x > 0, x, a * x),
                      lambda x, a=slope: np.where(x > 0, 1.0, a), (0.0,))
        assert linearization_error(leaky) == pytest.approx(
            (np.pi - 2) / (4 * np.pi) * (1 - slope) ** 2, rel=1e-11)
        assert linearization_error(leaky, relative_to="derivative") == pytest.approx(
            (np.pi - 2) / (4 * np.pi) * (1 - slope) ** 2 / ((1 + slope**2) / 2), rel=1e-11)
    erf_act = local("erf", erf, lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x))
    expected = 2 / np.pi * (np.arctan(2 / np.sqrt(5)) - 2 / 3)
    assert linearization_error(erf_act) == pytest.approx(expected, rel=1e-11)
    assert linearization_error(erf_act, relative_to="derivative") == pytest.approx(
        expected / (4 / (np.pi * np.sqrt(5))), rel=1e-11)
    norm2 = 2 / np.pi * np.arctan(2 / np.sqrt(5))
    assert linearization_error(erf_act, relative_to="norm") == pytest.approx(
        expected / norm2, rel=1e-11)


def test_linearization_relations():
    """E = R / (a0^2 + a1^2) and nu = R / E tau^2 share the same residual R."""
    for act in TABLE1.values():
        lin = float(linearization_error(act))
        nu = coefficient_of_nonaffinity(act)
        assert linearization_error(act, relative_to="norm") == pytest.approx(nu, rel=1e-12)
        a = hermite_coefficients(act.value, 2, breakpoints=act.breakpoints)
        assert linear_approximation_error(act) == pytest.approx(
            lin / (a[0] ** 2 + a[1] ** 2), rel=1e-10)


# Deep-conditioning appendix C.4: mu = 1 - dual'(0) / (dual(1) - dual(0)) with the duals of
# Daniely et al. (2016), table 1 (derived by hand below).
def test_mu_from_daniely_duals():
    relu, step = get("relu"), get("step")
    assert coefficient_of_nonlinearity(relu) == pytest.approx(
        1 - 0.25 / (0.5 - 1 / (2 * np.pi)), abs=1e-12)  # = (pi - 2) / (2 (pi - 1))
    assert coefficient_of_nonlinearity(step) == pytest.approx(
        1 - (1 / (2 * np.pi)) / (0.5 - 0.25), abs=1e-12)  # = 1 - 2 / pi
    assert coefficient_of_nonlinearity("identity") == pytest.approx(0.0, abs=1e-13)
    hermite2 = local("he2", lambda x: (x * x - 1) / np.sqrt(2), lambda x: np.sqrt(2) * x)
    assert coefficient_of_nonlinearity(hermite2) == pytest.approx(1.0, abs=1e-13)
    exponential = local("exp", np.exp, np.exp)  # dual e^(1 + rho): mu = 1 - 1 / (e - 1)
    assert coefficient_of_nonlinearity(exponential) == pytest.approx(
        1 - 1 / (np.e - 1), rel=1e-11)
    erf_act = local("erf", erf, lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x))
    # a_1^2 = 4 / (3 pi), Var erf(z) = (2 / pi) arctan(2 / sqrt 5) (shrinkage appendix B)
    assert coefficient_of_nonlinearity(erf_act) == pytest.approx(
        1 - 2 / (3 * np.arctan(2 / np.sqrt(5))), rel=1e-11)


@pytest.mark.parametrize("name", ["tanh", "relu", "sigmoid", "even_tanh", "odd_square"])
def test_mu_of_the_explicitly_normalized_activation(name):
    """mu = 1 - (E[z sigma(z)])^2 for sigma = (tau - E tau) / S tau, by adaptive quadrature of
    the explicitly normalized activation, and = sum_{k>=2} a_k^2 / sum_{k>=1} a_k^2 by Hermite
    coefficients."""
    act = TABLE1[name]
    mean = _quad(lambda z: float(act(np.array(z))), act)
    std = np.sqrt(_quad(lambda z: (float(act(np.array(z))) - mean) ** 2, act))
    direct = 1 - _quad(lambda z: z * (float(act(np.array(z))) - mean) / std, act) ** 2
    assert coefficient_of_nonlinearity(act) == pytest.approx(direct, abs=1e-10)
    smooth = not act.breakpoints
    a = hermite_coefficients(act.value, 120, breakpoints=act.breakpoints)
    by_sum = np.sum(a[2:] ** 2) / np.sum(a[1:] ** 2)
    assert coefficient_of_nonlinearity(act) == pytest.approx(by_sum, abs=1e-10 if smooth else 2e-3)


def _norm_relu_constants(b):
    """Appendix I: sigma_b(x) = lambda_b (max(x, b) - mu_b), truncated-normal moments."""
    mean = b * norm.cdf(b) + norm.pdf(b)
    second = b * b * norm.cdf(b) + norm.sf(b) + b * norm.pdf(b)
    return 1 / np.sqrt(second - mean**2), mean


@pytest.mark.parametrize("b", [-1.5907658564413327, -1.0, 0.0, 0.7])
def test_mu_norm_relu_closed_form(b):
    """Appendix C.4: by Stein's lemma E[z sigma_b(z)] = lambda_b (1 - Phi(b)), so
    mu = 1 - lambda_b^2 (1 - Phi(b))^2 (b = -1.5908 gives lambda_b = 1.0507, SELU's scale)."""
    lam, mu_b = _norm_relu_constants(b)
    act = local("norm_relu", lambda x: lam * (np.maximum(x, b) - mu_b),
                lambda x: lam * (x > b), (b,))
    expected = 1 - lam**2 * norm.sf(b) ** 2
    assert coefficient_of_nonlinearity(act) == pytest.approx(expected, abs=1e-12)
    # already normalized: nu coincides with mu (Definition C.20 remark)
    assert coefficient_of_nonaffinity(act) == pytest.approx(expected, abs=1e-12)
    zoo = get("norm_relu", b=b)
    assert coefficient_of_nonlinearity(zoo) == pytest.approx(expected, abs=1e-12)
    if b == 0.0:  # normalized relu
        assert expected == pytest.approx(coefficient_of_nonlinearity("relu"), abs=1e-12)


@pytest.mark.parametrize("name", ["tanh", "relu", "selu", "sigmoid", "gelu", "erf"])
def test_mu_of_the_zoos_normalized_activations(name):
    """normalize(tau) satisfies eq. (2); Definition 3.1 read literally on it, 1 - (E z sigma)^2,
    equals mu(tau); and the non-affinity of a normalized activation is mu (Def. C.20)."""
    from nngauge.activations._modify import normalize

    sigma = normalize(get(name))
    assert _quad(lambda z: float(sigma(np.array(z))), sigma) == pytest.approx(0.0, abs=1e-10)
    assert _quad(lambda z: float(sigma(np.array(z))) ** 2, sigma) == pytest.approx(1.0, rel=1e-10)
    literal = 1 - _quad(lambda z: z * float(sigma(np.array(z))), sigma) ** 2
    assert coefficient_of_nonlinearity(name) == pytest.approx(literal, abs=1e-10)
    assert coefficient_of_nonlinearity(sigma) == pytest.approx(literal, abs=1e-10)
    assert coefficient_of_nonaffinity(sigma) == pytest.approx(literal, abs=1e-10)


def test_mu_is_invariant_to_affine_changes_of_the_output():
    tanh = TABLE1["tanh"]
    shifted = local("t", lambda x: 3.0 * np.tanh(x) - 2.0, lambda x: 3.0 / np.cosh(x) ** 2)
    assert coefficient_of_nonlinearity(shifted) == pytest.approx(
        coefficient_of_nonlinearity(tanh), abs=1e-12)


def test_nonaffinity():
    affine = local("affine", lambda x: 2 * x + 1, lambda x: np.full_like(x, 2.0))
    assert coefficient_of_nonaffinity(affine) == pytest.approx(0.0, abs=1e-13)
    assert coefficient_of_nonlinearity(affine) == pytest.approx(0.0, abs=1e-13)
    # relu: (1/2 - 1/(2 pi) - 1/4) / (1/2)
    assert coefficient_of_nonaffinity("relu") == pytest.approx(0.5 - 1 / np.pi, abs=1e-12)
    # Uncentered activations: nu < mu when the mean carries power (a_0^2 in the denominator).
    relu = get("relu")
    assert coefficient_of_nonaffinity(relu) < coefficient_of_nonlinearity(relu)
    # Odd tanh is centered: the coefficients coincide.
    assert coefficient_of_nonaffinity(TABLE1["tanh"]) == pytest.approx(
        coefficient_of_nonlinearity(TABLE1["tanh"]), abs=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        lambda: nlc_activation("relu", 0.0),
        lambda: nlc_activation("relu", -1.0),
        lambda: nlc_activation("relu", [1.0, np.nan]),
        lambda: nlc_activation("relu", "wide"),
        lambda: linear_approximation_error("relu", -2.0),
        lambda: linearization_error("relu", q=0.0),
        lambda: linearization_error("relu", relative_to="bogus"),
        lambda: linearization_error("step", relative_to="derivative"),
        lambda: nlc_activation("constant"),
        lambda: coefficient_of_nonlinearity("constant"),
        lambda: coefficient_of_nonlinearity(_without_closed_forms(get("constant", value=2.0))),
        lambda: nlc_activation(_without_closed_forms(get("constant", value=2.0)), [1.0, 3.0]),
        lambda: coefficient_of_nonaffinity(get("constant", value=0.0)),
    ],
)
def test_bad_input_says_expected_got_fix(call):
    with pytest.raises(InvalidInputError) as info:
        call()
    message = str(info.value)
    assert "expected" in message and "got" in message and "Fix:" in message


def test_unknown_activation_name():
    with pytest.raises(NNGaugeError):
        nlc_activation("no_such_activation")
