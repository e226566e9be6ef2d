"""The excess convexity of the shrinkage paper (appendix A.3) and remark 2's upper bound on
P_L o ... o P_1 (the blue curve of its figure 1)."""

import numpy as np
import pytest

from nngauge.errors import InvalidInputError
from nngauge.theory import (
    correlation_map,
    critical_init,
    excess_convexity,
    excess_convexity_bound,
)

ERF_TERM = (2 / np.pi * (np.arctan(2 / np.sqrt(5)) - 2 / 3)) / (4 / (np.pi * np.sqrt(5)))


def erf_maps(depth, sigma_b=None):
    """The paper's network: a linear embedding layer, then depth - 1 erf layers."""
    sw, sb = critical_init("erf") if sigma_b is None else (1.0, sigma_b)
    return [correlation_map("identity", sw, sb)] + [correlation_map("erf", sw, sb)] * (depth - 1)


def compose(maps, rho):
    out = np.asarray(rho, dtype=np.float64)
    for p in maps:
        out = p(out)
    return out


def test_definition_closed_forms():
    """e(g) = 1/t - 2 with g(1 - t) = t: 0 for the identity (property 2), (sqrt 5 - 1) / 2 for
    t^2 (t = (3 - sqrt 5) / 2), and the steepness estimate g'(1) >= 1 + e(g) (property 4)."""
    assert excess_convexity(lambda t: t) == pytest.approx(0.0, abs=1e-12)
    e = excess_convexity(lambda t: t ** 2)
    assert e == pytest.approx((np.sqrt(5) - 1) / 2, rel=1e-12)
    assert 2.0 >= 1.0 + e
    e3 = excess_convexity(lambda t: t ** 3)
    assert 3.0 >= 1 + e3 > 1 + e  # more convex, larger e


def test_superadditivity_on_powers():
    """Property 5: e(g2 o g1) >= e(g1) + e(g2), checked on t^2 o t^3 = t^6."""
    assert excess_convexity(lambda t: t ** 6) >= (excess_convexity(lambda t: t ** 2)
                                                  + excess_convexity(lambda t: t ** 3))


@pytest.mark.parametrize("depth", [2, 5, 20, 80])
@pytest.mark.parametrize("sigma_b", [None, 0.0, 0.5])
def test_bound_lies_above_the_composition(depth, sigma_b):
    """Remark 2: the piecewise-linear bound is above P_L o ... o P_1 on all of [0, 1] (critical,
    chaotic and ordered erf networks), and the exact excess convexity of the cropped
    composition is at least the proof's C (A.5 with A.6)."""
    maps = erf_maps(depth, sigma_b)
    bound = excess_convexity_bound(maps)
    rho = np.linspace(0.0, 1.0, 2001)
    assert np.all(bound(rho) >= compose(maps, rho) - 1e-12)
    end = bound.rho_tilde[-1]
    assert end == pytest.approx(float(compose(maps, 0.0)), abs=1e-15)
    exact = excess_convexity(lambda t: (compose(maps, t) - end) / (1 - end))
    assert exact >= bound.excess - 1e-12
    assert bound(1.0) == pytest.approx(1.0) and bound(0.0) == pytest.approx(end)


def test_excess_is_remark_2_sum():
    """C = (1 - rho~_max) / 2 * sum_l ||phi - bar phi||^2 / ||phi'||^2 (the embedding adds 0)."""
    maps = erf_maps(10)
    bound = excess_convexity_bound(maps)
    assert bound.terms[0] == 0.0
    assert bound.terms[1] == pytest.approx(ERF_TERM, rel=1e-9)
    expected = (1 - max(bound.rho_tilde[1:])) / 2 * 9 * ERF_TERM
    assert bound.excess == pytest.approx(expected, rel=1e-9)
    assert bound.depth == 10 and len(bound.rho_tilde) == 11
    assert bound.kink == pytest.approx(1 - 1 / (2 + bound.excess))


def test_single_map_and_resnet():
    """One map repeated ``depth`` times equals the sequence; the ResNet map (eq. A.10) works."""
    p = correlation_map("erf", *critical_init("erf"))
    assert excess_convexity_bound(p, 7).excess == excess_convexity_bound([p] * 7).excess
    r = correlation_map("erf", 0.5, arch="resnet")
    b = excess_convexity_bound(r, 30)
    rho = np.linspace(0, 1, 501)
    assert np.all(b(rho) >= r.iterate(rho, 30)[-1] - 1e-12)


def test_errors():
    """Clear errors: no depth with one map, a depth mismatch, the unnormalized MLP, rho < 0."""
    p = correlation_map("erf", 1.0, 0.3)
    with pytest.raises(InvalidInputError):
        excess_convexity_bound(p)
    with pytest.raises(InvalidInputError):
        excess_convexity_bound([p, p], depth=3)
    with pytest.raises(InvalidInputError):
        excess_convexity_bound(correlation_map("erf", 1.0, 0.3, arch="mlp"), 3)
    with pytest.raises(InvalidInputError):
        excess_convexity_bound(p, 3)(-0.5)
    with pytest.raises(InvalidInputError):
        excess_convexity(lambda t: t + 0.5)
