"""Theorems 1 and 2 of the shrinkage paper; eq. 4.1, 4.2 and 4.3 reproduced."""

import numpy as np
import pytest

from nngauge.activations import get
from nngauge.errors import InvalidInputError
from nngauge.theory._correlation import correlation_map
from nngauge.theory._critical import critical_init
from nngauge.theory._gaussian import hermite_coefficients
from nngauge.theory._shrinkage import shrinkage_bound

ATAN = np.arctan(2 / np.sqrt(5))


ERF_ERROR = 2 / np.pi * (ATAN - 2 / 3)  # appendix B: ||erf - bar erf||^2
ERF_SLOPE = 4 / (np.pi * np.sqrt(5))  # appendix B: ||erf'||^2


def test_appendix_b_erf_term():
    assert shrinkage_bound("erf", 1, rho_max=0.0).terms[0] == pytest.approx(ERF_ERROR / ERF_SLOPE,
                                                                           rel=1e-12)
    # independently: bar erf(x) = 2 / sqrt(3 pi) x, so the error is sum_{k>=2} a_k^2
    a = hermite_coefficients("erf", 60)
    assert a[0] == pytest.approx(0.0, abs=1e-14) and a[1] == pytest.approx(2 / np.sqrt(3 * np.pi))
    assert np.sum(a[2:] ** 2) == pytest.approx(ERF_ERROR, rel=1e-9)


@pytest.mark.parametrize("a", [0.0, 0.1, 0.5])
def test_appendix_b_leaky_relu_term(a):
    # ||LReLU_a - bar||^2 = (pi - 2) / (4 pi) (1 - a)^2, ||LReLU_a'||^2 = (1 + a^2) / 2
    term = shrinkage_bound(get("leaky_relu", negative_slope=a), 1, rho_max=0.0).terms[0]
    assert term == pytest.approx((np.pi - 2) / (4 * np.pi) * (1 - a) ** 2 / ((1 + a * a) / 2),
                                 rel=1e-12)


@pytest.mark.parametrize("depth", [1, 10, 100, 1000])
def test_eq_4_2_erf_at_criticality(depth):
    # critical init: ||J||_op^2 = prod_l P'(1) = 1,
    # so 1 - rho_max <= 4 / sqrt((atan - 2/3) sqrt 5) / sqrt L
    sw, sb = critical_init("erf")
    jacobian_sq = correlation_map("erf", sw, sb).slope_at_one ** depth
    bound = shrinkage_bound("erf", depth, jacobian_norm_sq=jacobian_sq)
    printed = 4 / np.sqrt((ATAN - 2 / 3) * np.sqrt(5)) / np.sqrt(depth)
    assert bound.one_minus_rho_max == pytest.approx(printed, rel=1e-9)
    assert bound.solved_for == "rho_max" and bound.depth == depth


@pytest.mark.parametrize("a", [0.0, 0.05, 0.3, 0.8])
@pytest.mark.parametrize("depth", [4, 50])
def test_eq_4_1_leaky_relu_at_criticality(a, depth):
    act = get("leaky_relu", negative_slope=a)
    bound = shrinkage_bound(act, depth, jacobian_norm_sq=1.0)
    printed = np.sqrt(16 * np.pi / (np.pi - 2)) / np.sqrt(depth) * np.sqrt(1 + a * a) / (1 - a)
    assert bound.one_minus_rho_max == pytest.approx(printed, rel=1e-12)


def test_eq_4_3_erf_chaotic_jacobian_growth():
    # ||J||_op >= sqrt((atan - 2/3) sqrt 5) / 4 * (1 - rho_fp) sqrt L with rho_max ~ rho_fp
    rho_fp = correlation_map("erf", 1.0, 0.15).fixed_point()
    for depth in (10, 200):
        bound = shrinkage_bound("erf", depth, rho_max=rho_fp)
        printed = np.sqrt((ATAN - 2 / 3) * np.sqrt(5)) / 4 * (1 - rho_fp) * np.sqrt(depth)
        assert np.sqrt(bound.jacobian_norm_sq) == pytest.approx(printed, rel=1e-12)


def test_the_two_questions_are_inverse():
    acts = ["erf", "tanh", "relu", get("leaky_relu", negative_slope=0.2)]
    forward = shrinkage_bound(acts, rho_max=0.3)
    back = shrinkage_bound(acts, jacobian_norm_sq=forward.jacobian_norm_sq)
    assert back.rho_max == pytest.approx(0.3, abs=1e-12)
    singles = [shrinkage_bound(a, 1, rho_max=0.3).total for a in acts]
    assert forward.total == pytest.approx(sum(singles))
    assert shrinkage_bound("step", 2, rho_max=0.3).total == 0.0  # jumps: ||step'|| = inf
    assert forward.to_dict()["one_minus_rho_max"] == pytest.approx(0.7)


def _rho_max_and_jacobian(maps):
    """Infinite-width rho_max = max_l min_rho P_l o ... o P_1(rho) (grid) and prod_l P_l'(1)."""
    rho = np.linspace(-1.0, 1.0, 201)  # a grid min >= the true min: a weaker, valid test
    best = -1.0
    for cmap in maps:
        rho = cmap(rho)
        best = max(best, float(rho.min()))
    return best, float(np.prod([m.slope_at_one for m in maps]))


@pytest.mark.parametrize("name, sb", [("erf", 0.15), ("erf", 0.6), ("tanh", 0.2), ("relu", 0.0),
                                      ("gelu", 0.3)])
def test_theorem_1_holds_for_the_infinite_width_map(name, sb):
    sw = 1.0
    for depth in (3, 15):
        rho_max, jacobian_sq = _rho_max_and_jacobian([correlation_map(name, sw, sb)] * depth)
        bound = shrinkage_bound(name, depth, rho_max=rho_max)
        assert jacobian_sq >= bound.jacobian_norm_sq > 0


def test_theorem_2_holds_for_the_resnet_map():
    stds = [0.3, 1.0, 2.0, 0.5, 1.5] * 4
    maps = [correlation_map("erf", s, arch="resnet") for s in stds]
    rho_max, jacobian_sq = _rho_max_and_jacobian(maps)
    bound = shrinkage_bound("erf", len(stds), rho_max=rho_max, arch="resnet", residual_std=stds)
    assert jacobian_sq >= bound.jacobian_norm_sq > 0
    assert bound.terms[0] == pytest.approx(0.09 * ERF_ERROR / (1 + 0.09 * ERF_SLOPE), rel=1e-12)


def test_linear_layers_and_identity_resnets_contribute_nothing():
    assert shrinkage_bound("identity", 5, rho_max=0.0).jacobian_norm_sq == 0.0
    assert shrinkage_bound("erf", 5, rho_max=0.0, arch="resnet", residual_std=0.0).total == 0.0
    with pytest.raises(InvalidInputError, match="linear"):
        shrinkage_bound("identity", 5, jacobian_norm_sq=1.0)


def test_bad_input_says_expected_got_fix():
    cases = [
        lambda: shrinkage_bound("erf", 3),
        lambda: shrinkage_bound("erf", 3, rho_max=0.5, jacobian_norm_sq=1.0),
        lambda: shrinkage_bound("erf", rho_max=0.5),
        lambda: shrinkage_bound(["erf", "relu"], 3, rho_max=0.5),
        lambda: shrinkage_bound([], rho_max=0.5),
        lambda: shrinkage_bound("erf", 3, rho_max=1.5),
        lambda: shrinkage_bound("erf", 3, jacobian_norm_sq=0.0),
        lambda: shrinkage_bound("erf", 0, rho_max=0.5),
        lambda: shrinkage_bound("erf", 3, rho_max=0.5, arch="resnet", residual_std=[1.0, 2.0]),
        lambda: shrinkage_bound("erf", 3, rho_max=0.5, arch="resnet", residual_std=-1.0),
        lambda: shrinkage_bound("erf", 3, rho_max=np.nan),
    ]
    for case in cases:
        with pytest.raises(InvalidInputError) as info:
            case()
        message = str(info.value)
        assert "expected" in message and "got" in message and "Fix:" in message
    with pytest.raises(InvalidInputError, match="arch in .*layernorm"):
        shrinkage_bound("erf", 3, rho_max=0.5, arch="mlp")
