"""The Gaussian quadrature engine against closed forms it does not know about."""

from math import factorial

import numpy as np
import pytest

from nngauge.activations import (
    Quadrature,
    cross_expectation,
    expectation,
    get,
    hermite_coefficients,
)
from nngauge.errors import ConvergenceError, InvalidInputError, NNGaugeError
from nngauge.theory import gaussian_covariance, gaussian_mean

RHOS = np.linspace(-1.0, 1.0, 11)
VARIANCE_PAIRS = [(1.0, 1.0), (0.3, 2.5), (4.0, 0.7)]


def double_factorial(n: int) -> int:
    return 1 if n <= 0 else n * double_factorial(n - 2)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("q", [0.5, 1.0, 3.0])
def test_even_moments(k, q):
    got = expectation(lambda x: x ** (2 * k), q)
    assert got == pytest.approx(double_factorial(2 * k - 1) * q**k, rel=1e-12)


def cos_cos(rho, q1, q2):
    """E[cos u cos v] = (exp(-Var(u - v) / 2) + exp(-Var(u + v) / 2)) / 2."""
    c = rho * np.sqrt(q1 * q2)
    return 0.5 * (np.exp(-(q1 + q2 - 2 * c) / 2) + np.exp(-(q1 + q2 + 2 * c) / 2))


@pytest.mark.parametrize("q1,q2", VARIANCE_PAIRS)
@pytest.mark.parametrize("rule", [Quadrature(), Quadrature("hermite", 60)])
def test_smooth_cross_moment_matches_closed_form(q1, q2, rule):
    got = cross_expectation(np.cos, np.cos, RHOS, q1, q2, rule=rule)
    np.testing.assert_allclose(got, cos_cos(RHOS, q1, q2), atol=1e-11)


@pytest.mark.parametrize("q1,q2", VARIANCE_PAIRS)
def test_jump_functions_split_at_breakpoints(q1, q2):
    """E[sign(u) sign(v)] = (2 / pi) arcsin(rho), whatever the variances."""
    got = cross_expectation(np.sign, np.sign, RHOS, q1, q2, f_breakpoints=(0.0,),
                            g_breakpoints=(0.0,))
    np.testing.assert_allclose(got, 2 / np.pi * np.arcsin(RHOS), atol=1e-12)


def test_shifted_kinks_at_full_correlation():
    """rho = +-1 with kinks at different places: E[relu(u - 1) relu(-v + 0.5)] by 1-D quadrature."""
    f = lambda x: np.maximum(x - 1.0, 0.0)  # noqa: E731
    g = lambda x: np.maximum(0.5 - x, 0.0)  # noqa: E731
    for rho in (-1.0, 1.0):
        got = cross_expectation(f, g, rho, 2.0, 0.5, f_breakpoints=(1.0,), g_breakpoints=(0.5,))
        want = expectation(lambda x: f(x) * g(rho * x / 2.0), 2.0, breakpoints=(1.0, rho))
        assert float(got) == pytest.approx(float(want), abs=1e-12)


def test_broadcasting_shapes():
    rho = np.zeros((3, 1))
    q1 = np.ones((1, 4))
    assert cross_expectation(np.cos, np.cos, rho, q1, 2.0).shape == (3, 4)
    assert np.shape(gaussian_covariance("relu", 0.3)) == ()


def test_hermite_coefficients_of_a_hermite_polynomial():
    he3 = lambda z: (z**3 - 3 * z) / np.sqrt(factorial(3))  # noqa: E731
    coeffs = hermite_coefficients(he3, 8)
    np.testing.assert_allclose(coeffs, np.eye(8)[3], atol=1e-12)


def test_mehler_expansion_of_relu():
    """sum_k a_k^2 rho^k (Mehler) equals the arc-cosine closed form for |rho| < 1."""
    relu = get("relu")
    coeffs = hermite_coefficients(relu.value, 160, breakpoints=relu.breakpoints)
    for rho in (-0.6, 0.0, 0.5):
        series = np.sum(coeffs**2 * rho ** np.arange(160))
        assert series == pytest.approx(float(gaussian_covariance(relu, rho)), abs=1e-8)


def test_closed_and_quadrature_paths_agree_for_relu():
    rho, q1, q2 = np.meshgrid(RHOS, [0.2, 1.0, 3.0], [0.5, 2.0], indexing="ij")
    closed = gaussian_covariance("relu", rho, q1=q1, q2=q2, method="closed")
    quad = gaussian_covariance("relu", rho, q1=q1, q2=q2, method="quadrature")
    np.testing.assert_allclose(closed, quad, atol=1e-12)


def test_adaptive_refinement_reaches_tolerance_or_says_so():
    relu = get("relu")
    coarse = Quadrature("legendre", degree=4, segments=4)
    value = gaussian_covariance(relu, 0.4, method="quadrature", quadrature=coarse, rtol=1e-10)
    assert float(value) == pytest.approx(float(gaussian_covariance(relu, 0.4)), abs=1e-9)
    # Gauss-Hermite does not split at the kink: it converges only algebraically.
    with pytest.raises(ConvergenceError, match="rtol"):
        gaussian_covariance(relu, 0.4, method="quadrature", quadrature=Quadrature("hermite", 4),
                            rtol=1e-15)


def test_gaussian_mean_closed_and_quadrature():
    assert float(gaussian_mean("relu", 4.0)) == pytest.approx(2 / np.sqrt(2 * np.pi))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"rho": 1.5}, "expected rho real values in \\[-1, 1\\]"),
        ({"rho": np.nan}, "expected rho real values in \\[-1, 1\\].*got rho=nan"),
        ({"rho": 0.2, "q1": -1.0}, "expected q1 real values >= 0"),
        ({"rho": 0.2, "q2": np.inf}, "expected q2 real values >= 0.*got q2=inf"),
        ({"rho": 0.2, "method": "exact"}, "method in"),
    ],
)
def test_invalid_input_says_expected_got_fix(kwargs, match):
    with pytest.raises(InvalidInputError, match=match) as info:
        gaussian_covariance("relu", **kwargs)
    message = str(info.value)
    assert "expected" in message and "got" in message and "Fix:" in message
    assert isinstance(info.value, NNGaugeError)
