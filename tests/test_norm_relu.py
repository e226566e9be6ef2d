"""NormReLU_b (deep-conditioning section 7, eq. (4), appendix I): constants, activation, module."""

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from nngauge.activations import get
from nngauge.activations._gaussian import expectation
from nngauge.activations._modify import modify, normalize
from nngauge.activations._norm_relu import SELU_MATCHED_B, norm_relu_constants
from nngauge.errors import InvalidInputError
from nngauge.nn import NormReLU
from nngauge.theory import gaussian_covariance, gaussian_mean

SELU_SCALE = 1.0507009873554805  # Klambauer et al. 2017
KINKS = [-3.0, -1.5, SELU_MATCHED_B, -0.5, 0.0, 0.7]


@pytest.mark.parametrize("b", KINKS)
def test_constants_match_quadrature(b):
    mu, lam = norm_relu_constants(b)
    first = float(expectation(lambda x: np.maximum(x, b), 1.0, breakpoints=(b,)))
    second = float(expectation(lambda x: np.maximum(x, b) ** 2, 1.0, breakpoints=(b,)))
    assert mu == pytest.approx(first, abs=1e-12)
    assert lam == pytest.approx(1.0 / np.sqrt(second - first**2), rel=1e-11)


def test_b_zero_is_the_normalized_relu():
    mu, lam = norm_relu_constants(0.0)
    assert mu == pytest.approx(1 / np.sqrt(2 * np.pi), rel=1e-15)
    assert lam == pytest.approx(1 / np.sqrt(0.5 - 1 / (2 * np.pi)), rel=1e-14)


def test_paper_choice_matches_selu_scale():
    """Section 7: b is chosen so that lambda_b is SELU's scale 1.0507; solve for it."""
    b = brentq(lambda x: norm_relu_constants(x)[1] - SELU_SCALE, -4.0, 0.0, xtol=1e-14)
    assert b == pytest.approx(SELU_MATCHED_B, abs=1e-10)
    mu, lam = norm_relu_constants(SELU_MATCHED_B)
    assert lam == pytest.approx(SELU_SCALE, rel=1e-12)
    assert mu == pytest.approx(0.0237527449, abs=1e-9)
    assert get("norm_relu").params == {"b": SELU_MATCHED_B}


@pytest.mark.parametrize("b", KINKS)
def test_normalization_holds(b):
    """Eq. (2): E[NormReLU_b(z)] = 0, E[NormReLU_b(z)^2] = 1, by quadrature."""
    act = get("norm_relu", b=b)
    assert float(expectation(act.value, 1.0, breakpoints=act.breakpoints)) == pytest.approx(
        0.0, abs=1e-10)
    assert float(gaussian_mean(act)) == pytest.approx(0.0, abs=1e-10)
    assert float(gaussian_covariance(act, 1.0, method="quadrature")) == pytest.approx(
        1.0, abs=1e-10)


def test_normalization_monte_carlo():
    z = np.random.default_rng(1).standard_normal(1_000_000)
    y = get("norm_relu")(z)
    assert abs(y.mean()) < 6 * y.std() / np.sqrt(z.size)
    assert abs((y**2).mean() - 1.0) < 6 * (y**2).std() / np.sqrt(z.size)


@pytest.mark.parametrize("b", [-1.0, SELU_MATCHED_B, 0.3])
def test_equals_normalize_of_shifted_relu(b):
    """max(s, b) = b + relu(s - b); normalizing removes b: NormReLU_b = normalize(relu(s - b))."""
    x = np.linspace(-5, 5, 401)
    np.testing.assert_allclose(get("norm_relu", b=b)(x), normalize(modify("relu", shift=-b))(x),
                               atol=1e-11)


def test_activation_shape():
    act = get("norm_relu", b=-1.0)
    mu, lam = norm_relu_constants(-1.0)
    x = np.array([-3.0, -1.0, 0.0, 2.0])
    np.testing.assert_allclose(act(x), lam * (np.array([-1.0, -1.0, 0.0, 2.0]) - mu))
    np.testing.assert_allclose(act.derivative(x), lam * np.array([0.0, 0.0, 1.0, 1.0]))
    assert act.piecewise_linear and act.breakpoints == (-1.0,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("b", [SELU_MATCHED_B, -0.5])
def test_module_matches_numpy(dtype, b):
    module = NormReLU(b)
    x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0), dtype=dtype) * 2
    out = module(x)
    assert out.shape == x.shape and out.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    np.testing.assert_allclose(out.numpy(), get("norm_relu", b=b)(x.double().numpy()), atol=tol)


def test_module_attributes_and_repr():
    module = NormReLU()
    assert module.b == SELU_MATCHED_B
    assert module.lam == pytest.approx(SELU_SCALE, rel=1e-12)
    assert (module.mu, module.lam) == norm_relu_constants(SELU_MATCHED_B)
    text = repr(NormReLU(-1.0))
    assert "b=-1" in text and "lam=" in text and "mu=" in text


def test_module_gradcheck():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x = x[(x - SELU_MATCHED_B).abs() > 1e-3].requires_grad_(True)  # away from the kink
    assert torch.autograd.gradcheck(NormReLU(), (x,))


@pytest.mark.parametrize("b", [float("nan"), float("inf"), 40.0, "low"])
def test_bad_kink(b):
    with pytest.raises(InvalidInputError, match="Fix:"):
        NormReLU(b)
    with pytest.raises(InvalidInputError, match="expected"):
        get("norm_relu", b=b)


def test_norm_relu_constants_declares_b():
    from nngauge.activations import norm_relu_constants

    for bad in (float("nan"), "0.5", None):
        with pytest.raises(InvalidInputError, match="expected b a finite number"):
            norm_relu_constants(bad)
