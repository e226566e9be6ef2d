"""Critical initialization: P'(1) = 1, against appendix B of the shrinkage paper."""

import numpy as np
import pytest

from nngauge.activations import get
from nngauge.errors import InvalidInputError
from nngauge.theory import profile
from nngauge.theory._correlation import correlation_map
from nngauge.theory._critical import critical_init
from nngauge.theory._gaussian import gaussian_covariance

# Appendix B, erf: ||erf||^2 = C[erf | 1] = (2/pi) arctan(2/sqrt 5), ||erf'||^2 = 4 / (pi sqrt 5);
# P'(1) = sw^2 ||phi'||^2 / (sb^2 + sw^2 ||phi||^2) = 1  <=>  sb^2 / sw^2 = ||phi'||^2 - ||phi||^2.
ERF_RATIO = 4 / (np.pi * np.sqrt(5)) - 2 / np.pi * np.arctan(2 / np.sqrt(5))


def test_appendix_b_erf_covariance_and_norms():
    rho = np.linspace(-1, 1, 21)
    printed = 2 / np.pi * np.arctan(2 * rho / np.sqrt(9 - 4 * rho**2))
    np.testing.assert_allclose(gaussian_covariance("erf", rho, method="quadrature"), printed,
                               atol=1e-12)
    d_erf = get("erf").derivative_activation()
    assert float(gaussian_covariance(d_erf, 1.0, method="quadrature")) == pytest.approx(
        4 / (np.pi * np.sqrt(5)), rel=1e-12)


@pytest.mark.parametrize("a", [0.0, 0.01, 0.3, 0.7])
def test_appendix_b_leaky_relu_covariance(a):
    # C[LReLU_a | rho] = a rho + (1 - a)^2 (sqrt(1 - rho^2) + rho (pi - arccos rho)) / (2 pi)
    rho = np.linspace(-1, 1, 21)
    relu_part = (np.sqrt(1 - rho**2) + rho * (np.pi - np.arccos(rho))) / (2 * np.pi)
    derived = a * rho + (1 - a) ** 2 * relu_part
    act = get("leaky_relu", negative_slope=a)
    quadrature = gaussian_covariance(act, rho, method="quadrature")
    np.testing.assert_allclose(quadrature, derived, atol=1e-12)
    d_act = act.derivative_activation()
    slope_sq = float(gaussian_covariance(d_act, 1.0, method="quadrature"))
    assert slope_sq == pytest.approx((1 + a * a) / 2)


@pytest.mark.parametrize("sigma_w", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("method", ["closed", "quadrature"])
def test_erf_critical_sigma_b_is_appendix_b_closed_form(sigma_w, method):
    sw, sb = critical_init("erf", sigma_w=sigma_w, method=method)
    assert sw == sigma_w
    assert sb**2 / sw**2 == pytest.approx(ERF_RATIO, rel=1e-10)
    assert ERF_RATIO == pytest.approx(0.1048510, abs=5e-8)  # (2/pi)(2/sqrt5 - atan(2/sqrt5))


def test_erf_critical_sigma_w_given_sigma_b():
    sw, sb = critical_init("erf", sigma_b=0.5)
    assert sb == 0.5 and sw == pytest.approx(0.5 / np.sqrt(ERF_RATIO), rel=1e-10)
    assert correlation_map("erf", sw, sb).phase == "critical"


def test_default_is_unit_sigma_w():
    sw, sb = critical_init("erf")
    assert sw == 1.0 and sb == pytest.approx(np.sqrt(ERF_RATIO), rel=1e-10)


@pytest.mark.parametrize("a", [0.0, 0.2, 0.5])
def test_leaky_relu_critical_needs_zero_bias(a):
    # appendix B: "the critical initialization requires sigma_b = 0" (||phi'||^2 = ||phi||^2)
    act = get("leaky_relu", negative_slope=a)
    assert critical_init(act, sigma_w=1.7) == (1.7, 0.0)
    assert critical_init(act, sigma_b=0.0) == (1.0, 0.0)  # sigma_w is free: the default
    with pytest.raises(InvalidInputError, match="ordered"):
        critical_init(act, sigma_b=0.1)


@pytest.mark.parametrize("name", ["tanh", "gelu", "softplus", "sigmoid"])
@pytest.mark.parametrize("arch", ["layernorm", "resnet"])
def test_normalized_archs_share_the_ratio(name, arch):
    # layernorm and resnet (eq. A.10) both give sb^2 / sw^2 = ||phi'||^2 - ||phi||^2
    act = get(name)
    d_act = act.derivative_activation()
    ratio = float(gaussian_covariance(d_act, 1.0) - gaussian_covariance(act, 1.0))
    if ratio <= 0:
        with pytest.raises(InvalidInputError):
            critical_init(act, sigma_w=0.8, arch=arch)
        return
    sw, sb = critical_init(act, sigma_w=0.8, arch=arch)
    assert sb**2 / sw**2 == pytest.approx(ratio, rel=1e-9)
    assert correlation_map(act, sw, sb, arch=arch).phase == "critical"


def test_mlp_relu_is_he_initialization():
    assert critical_init("relu", sigma_b=0.0, arch="mlp") == pytest.approx((np.sqrt(2.0), 0.0))


def test_mlp_tanh_chi_one_by_brute_force():
    sw, sb = critical_init("tanh", sigma_b=0.3, arch="mlp")
    # independent check: q* by plain iteration, chi_1 = sw^2 E[tanh'(sqrt(q*) z)^2] (Gauss-Hermite)
    z, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / w.sum()
    q = 1.0
    for _ in range(2000):
        q = sw**2 * np.sum(w * np.tanh(np.sqrt(q) * z) ** 2) + sb**2
    chi_1 = sw**2 * np.sum(w * (1 - np.tanh(np.sqrt(q) * z) ** 2) ** 2)
    assert chi_1 == pytest.approx(1.0, abs=1e-9)
    # and solving for sigma_b at that sigma_w goes back
    assert critical_init("tanh", sigma_w=sw, arch="mlp")[1] == pytest.approx(0.3, abs=1e-8)


def test_no_solution_and_bad_input_say_expected_got_fix():
    cases = [
        lambda: critical_init("erf", sigma_w=1.0, sigma_b=0.3),
        lambda: critical_init("erf", sigma_b=0.0),  # odd, no bias: chaotic for every sigma_w
        lambda: critical_init("relu", sigma_w=1.0, arch="mlp"),  # sigma_w^2 / 2 < 1
        lambda: critical_init("relu", sigma_b=0.5),  # layernorm relu: ordered for sigma_b > 0
        lambda: critical_init("erf", sigma_w=-1.0),
        lambda: critical_init("erf", sigma_b=np.inf),
    ]
    for case in cases:
        with pytest.raises(InvalidInputError) as info:
            case()
        message = str(info.value)
        assert "expected" in message and "got" in message and "Fix:" in message


@pytest.mark.parametrize("act, sigma_w, sigma_b, arch", [
    ("tanh", 1.0, 0.2, "layernorm"),
    ("erf", 1.3, 0.0, "layernorm"),
    ("tanh", 1.2, 0.3, "mlp"),
    ("relu", 1.41, 0.0, "mlp"),  # just below He: ordered, no fixed point q*, P still defined
    ("relu", 1.0, 0.4, "mlp"),
    ("erf", 0.7, 0.0, "resnet"),
])
def test_the_profiles_critical_rows_are_critical_when_fed_back(act, sigma_w, sigma_b, arch):
    # what `nngauge theory` prints as "critical sigma_w at sigma_b" / "critical sigma_b at
    # sigma_w" is checked: the printed pair has phase "critical", else the row says why none
    summary = profile(act, sigma_w, sigma_b, arch=arch)
    pairs = [(summary.critical_sigma_w, lambda v: (v, sigma_b)),
             (summary.critical_sigma_b, lambda v: (sigma_w, v))]
    for critical, setting in pairs:
        if critical.value is None:
            assert critical.reason and "Fix:" not in critical.reason
            assert critical.display().startswith("none: ")
            continue
        assert profile(act, *setting(critical.value), arch=arch).phase == "critical"
    assert any(c.value is not None for c, _ in pairs)
