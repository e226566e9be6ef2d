"""Bounds on the number of linear regions of ReLU networks (nngauge.theory._regions): hand
counts, brute-force enumeration of Serra et al.'s index set, the one-layer identities, the
order of the bounds, Monte Carlo checks of Hanin and Rolnick's constants and bounds, and
activation patterns measured on random networks."""

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

import nngauge
from nngauge.errors import InvalidInputError
from nngauge.theory import (
    expected_regions_per_length,
    expected_regions_per_volume,
    gaussian_region_constants,
    hyperplane_regions,
    max_activation_patterns,
    max_regions_lower_bound,
    max_regions_upper_bound,
)

UPPER = ("serra", "montufar", "raghu")


def _serra_by_enumeration(d_in, widths):
    """Serra et al.'s Theorem 1 summed term by term over J."""
    total = 0
    for js in itertools.product(*(range(n + 1) for n in widths)):
        budget, allowed = d_in, True
        for j, n in zip(js, widths):
            if j > min(budget, n):
                allowed = False
                break
            budget = min(budget, n - j)
        if allowed:
            total += math.prod(math.comb(n, j) for n, j in zip(widths, js))
    return total


def _small_architectures(max_depth=3, max_width=5, max_d_in=4):
    for d_in in range(1, max_d_in + 1):
        for depth in range(1, max_depth + 1):
            for widths in itertools.product(range(1, max_width + 1), repeat=depth):
                yield d_in, widths


# ------------------------------------------------------------------ hand counts, one layer


@pytest.mark.parametrize("k", range(1, 9))
def test_one_layer_of_k_units_in_the_plane(k):
    """k lines in general position cut the plane into 1 + k + k(k - 1) / 2 regions."""
    count = 1 + k + k * (k - 1) // 2
    assert max_regions_lower_bound(2, [k]).bound == count
    for method in UPPER:
        assert max_regions_upper_bound(2, [k], method=method).bound == count


def test_one_layer_bounds_all_equal_zaslavskys_count():
    """L = 1: Serra's upper bound, Montufar's lower bound and r(k, n_0) coincide (tight)."""
    for d_in, k in itertools.product(range(1, 8), range(1, 13)):
        count = sum(math.comb(k, j) for j in range(d_in + 1))
        assert hyperplane_regions(k, d_in) == count
        assert max_regions_lower_bound(d_in, [k]).bound == count
        for method in UPPER:
            assert max_regions_upper_bound(d_in, [k], method=method).bound == count


def _count_on_line(layers, x):
    """Distinct activation patterns of a numpy ReLU net over the rows of x."""
    codes, h = [], x
    for w, b in layers:
        z = h @ w.T + b
        codes.append(z > 0)
        h = np.maximum(z, 0.0)
    return len(np.unique(np.concatenate(codes, axis=1), axis=0))


def test_two_layers_of_two_units_on_the_line():
    """n_0 = 1, widths (2, 2). Lower bound floor(2/1) * (1 + 2) = 6, upper bound
    (2 + 1)^2 = 9. By hand the maximum is 7: the first layer has 3 pieces, and a second-layer
    unit can cross zero in all three only if its slopes alternate in sign, which no placement
    of the two first-layer units allows; two crossings each give 2 + 2 * 2 = 6 breakpoints.
    The network below reaches 7."""
    assert max_regions_lower_bound(1, [2, 2]).per_layer == (3, 6)
    for method in UPPER:
        assert max_regions_upper_bound(1, [2, 2], method=method).per_layer == (3, 9)
    first = (np.array([[1.0], [1.0]]), np.array([0.0, -1.0]))  # relu(x), relu(x - 1)
    # 0.5 - x + 2 relu(x - 1) and 0.5 - 2x + 3 relu(x - 1): zeros at 0.5, 1.5 and 0.25, 2.5
    second = (np.array([[-1.0, 2.0], [-2.0, 3.0]]), np.array([0.5, 0.5]))
    x = np.linspace(-2.0, 5.0, 70_001)[:, None]
    assert _count_on_line([first, second], x) == 7


# ------------------------------------------------------------------ Serra et al., Theorem 1


def test_dynamic_program_matches_enumeration_of_j():
    for d_in, widths in _small_architectures():
        result = max_regions_upper_bound(d_in, widths)
        assert result.bound == _serra_by_enumeration(d_in, widths), (d_in, widths)
        assert result.per_layer == tuple(_serra_by_enumeration(d_in, widths[:depth])
                                         for depth in range(1, len(widths) + 1))


def test_serra_values():
    assert max_regions_upper_bound(2, [2, 2]).bound == 11  # 1*4 + 2*3 + 1*1
    # n_0 = 1: prod (n_l + 1), the exact maximum when every n_l >= 3
    assert max_regions_upper_bound(1, [3, 4, 5]).bound == 4 * 5 * 6
    # a bottleneck: after one unit the regions have dimension <= 1
    assert max_regions_upper_bound(3, [1, 5, 5]).bound == 1 + 1 * 6 * 6
    # n_0 >= every width: one layer reaches all 2^n patterns, two layers fewer than 2^N
    assert max_regions_upper_bound(10, [3]).bound == 2**3
    assert max_regions_upper_bound(10, [3, 3]).bound == 1 * 8 + 3 * 7 + 3 * 4 + 1 * 1 < 2**6


def test_upper_bounds_are_ordered_and_above_lower_bounds():
    strict = 0
    for d_in, widths in _small_architectures(max_width=6):
        serra, montufar, raghu = (max_regions_upper_bound(d_in, widths, method=m).bound
                                  for m in UPPER)
        assert serra <= montufar <= raghu
        strict += serra < montufar
        assert raghu == max_activation_patterns(list(widths), len(widths), d_in).bound
        assert max_regions_lower_bound(d_in, widths).bound <= serra
        if min(widths) >= 2:
            assert max_regions_lower_bound(d_in, widths, construction="arora").bound <= serra
    assert strict > 100  # Serra et al.'s bound is tighter, not only equal


def test_upper_bounds_are_monotone_in_widths_and_input_dimension():
    for d_in, widths in _small_architectures(max_width=4):
        for method in UPPER:
            base = max_regions_upper_bound(d_in, widths, method=method)
            wider_input = max_regions_upper_bound(d_in + 1, widths, method=method)
            assert wider_input.bound >= base.bound
            for i in range(len(widths)):
                wider = list(widths)
                wider[i] += 1
                assert max_regions_upper_bound(d_in, wider, method=method).bound >= base.bound
            assert list(base.per_layer) == sorted(base.per_layer)  # a layer never removes


def test_exact_integers_and_log10_at_scale():
    result = max_regions_upper_bound(784, [1000] * 20)
    assert isinstance(result.bound, int) and result.bound > 10**3000
    assert result.log10_bound == pytest.approx(math.log10(result.bound), rel=1e-15)
    with pytest.raises(OverflowError):
        float(result.bound)
    assert result.to_dict()["bound"] == result.bound
    assert result.kind == "upper" and result.method == "serra" and result.widths == (1000,) * 20


# ------------------------------------------------------------------ lower bounds


def test_montufar_lower_bound_values():
    # the paper's formula: prod floor(n_i / n_0)^{n_0} * sum_{j <= n_0} C(n_L, j)
    assert max_regions_lower_bound(2, [4, 4, 4]).bound == 2**2 * 2**2 * (1 + 4 + 6)
    assert max_regions_lower_bound(3, [7, 9, 5]).bound == 2**3 * 3**3 * (1 + 5 + 10 + 10)
    assert max_regions_lower_bound(2, [4, 4, 4]).per_layer == (11, 4 * 11, 16 * 11)
    # Corollary 5's order at equal widths: (n / n_0)^{(L - 1) n_0} n^{n_0} / n_0! for large n
    n, n0, depth = 600, 2, 4
    ratio = max_regions_lower_bound(n0, [n] * depth).bound / (
        (n / n0) ** ((depth - 1) * n0) * n**n0 / math.factorial(n0))
    assert ratio == pytest.approx(1.0, rel=1e-2)


def test_montufar_lower_bound_with_layers_narrower_than_the_input():
    """The construction is applied to d = min(n_0, n_1..n_L) of the inputs."""
    assert max_regions_lower_bound(5, [3, 3]).bound == 1 * 8  # d = 3: 1^3 * r(3, 3)
    assert max_regions_lower_bound(5, [4, 1]).bound == 4 * 2  # d = 1: 4 * r(1, 1)
    assert max_regions_lower_bound(5, [3, 3]).bound == max_regions_lower_bound(3, [3, 3]).bound
    assert (max_regions_lower_bound(1, [3, 3, 3]).bound,
            max_regions_lower_bound(2, [3, 3, 3]).bound) == (36, 7)  # not monotone in n_0


def test_montufar_lower_bound_is_monotone_in_widths_at_least_the_input_dimension():
    for d_in in range(1, 4):
        for widths in itertools.product(range(d_in, d_in + 5), repeat=3):
            base = max_regions_lower_bound(d_in, widths).bound
            for i in range(3):
                wider = list(widths)
                wider[i] += 1
                assert max_regions_lower_bound(d_in, wider).bound >= base


def test_arora_lower_bound_values():
    # 2 sum_{j < n_0} C(m - 1, j) * w^{L - 1}, m = floor(n_1 / 2), w = min(n_2..n_L)
    result = max_regions_lower_bound(2, [4, 3, 5], construction="arora")
    assert result.per_layer == (4, 12, 36)  # m = 2: 2 (C(1,0) + C(1,1)) = 4; w = 3
    assert max_regions_lower_bound(3, [9, 4], construction="arora").bound == 2 * 7 * 4
    # beats Montufar's when the widths are close to the input dimension
    assert max_regions_lower_bound(10, [8, 8, 8], construction="arora").bound == 1024
    assert max_regions_lower_bound(10, [8, 8, 8]).bound == 256


# ------------------------------------------------------------------ measured patterns


def _torch_mlp(widths, d_in, rng, weight_scale=2.0):
    dims, modules = [d_in, *widths], []
    for fan_in, fan_out in zip(dims[:-1], dims[1:]):
        linear = nn.Linear(fan_in, fan_out).double()
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(
                weight_scale * rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)))
            linear.bias.copy_(torch.from_numpy(rng.standard_normal(fan_out)))
        modules += [linear, nn.ReLU()]
    return nn.Sequential(*modules, nn.Linear(widths[-1], 1).double())


@pytest.mark.parametrize("widths", [(6,), (3, 3, 3), (5, 4), (2, 8, 2)])
def test_measured_activation_patterns_never_exceed_the_upper_bound(widths):
    """Distinct patterns on a dense grid are a lower bound on the true count."""
    net = _torch_mlp(widths, 2, np.random.default_rng(sum(widths)))
    side = torch.linspace(-5.0, 5.0, 150, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(side, side, indexing="ij"), dim=-1).reshape(-1, 2)
    bound = max_regions_upper_bound(2, widths)
    sites = [str(2 * i + 1) for i in range(len(widths))]  # the ReLU modules of the Sequential
    counts = [nngauge.activation_patterns(net, grid, layers=sites[:depth]).n_patterns
              for depth in range(1, len(widths) + 1)]
    assert all(count <= limit for count, limit in zip(counts, bound.per_layer))
    assert counts[0] >= bound.per_layer[0] / 2  # the grid is dense enough to see most


# ------------------------------------------------------------------ Hanin and Rolnick


def _gaussian_net(widths, d_in, sigma_w, sigma_b, rng):
    dims = [d_in, *widths]
    return [(sigma_w * rng.standard_normal((dims[i + 1], dims[i])) / np.sqrt(dims[i]),
             sigma_b * rng.standard_normal(dims[i + 1])) for i in range(len(widths))]


@pytest.mark.parametrize("sigma_w", [1.0, math.sqrt(2.0), 1.6])
def test_gaussian_c_grad_is_the_second_moment_of_the_gradient(sigma_w):
    """E||grad z(x)||^2 = sigma_w^2 (sigma_w^2 / 2)^{l - 1} at a fixed input, with biases."""
    rng = np.random.default_rng(3)
    widths, d_in, trials = (5, 3, 7), 4, 20_000
    x = 2.0 * rng.standard_normal(d_in)
    moments = np.zeros(len(widths))
    for _ in range(trials):
        h, jac = x, np.eye(d_in)
        for l, (w, b) in enumerate(_gaussian_net(widths, d_in, sigma_w, 0.8, rng)):
            z, grad = w @ h + b, w @ jac
            moments[l] += np.mean(np.sum(grad**2, axis=1)) / trials
            h, jac = np.maximum(z, 0.0), grad * (z > 0)[:, None]
    constants = gaussian_region_constants(len(widths), sigma_w=sigma_w, sigma_b=0.8)
    np.testing.assert_allclose(moments, np.square(constants.c_grad_per_layer), rtol=0.04)


def test_gaussian_constants_values():
    he = gaussian_region_constants(50, sigma_b=0.5)
    assert he.c_grad_per_layer == (math.sqrt(2.0),) * 50  # depth-independent at He init
    assert he.c_bias == pytest.approx(1.0 / (0.5 * math.sqrt(2.0 * math.pi)))
    small = gaussian_region_constants(3, sigma_w=1.0, sigma_b=1.0)
    assert small.c_grad_per_layer == pytest.approx((1.0, 2**-0.5, 0.5))
    assert small.c_grad == 1.0 and small.to_dict()["sigma_b"] == 1.0


def _crossings_on_segment(layers, x0, u, length, n_points=8_001):
    t = np.linspace(0.0, length, n_points)[:, None]
    codes, h = [], x0 + t * u
    for w, b in layers:
        z = h @ w.T + b
        codes.append(z > 0)
        h = np.maximum(z, 0.0)
    code = np.concatenate(codes, axis=1)
    return np.count_nonzero(np.any(code[1:] != code[:-1], axis=1))


@pytest.mark.parametrize("widths,sigma_w,sigma_b", [((8, 8, 8), math.sqrt(2.0), 1.0),
                                                    ((16, 16), math.sqrt(2.0), 0.5),
                                                    ((6, 6, 6, 6), 1.0, 1.0),
                                                    ((10, 10, 10), 2.0, 0.3)])
def test_segment_bound_holds_for_random_networks(widths, sigma_w, sigma_b):
    rng = np.random.default_rng(len(widths))
    d_in, length, trials = 3, 4.0, 100
    x0, u = rng.standard_normal(d_in), rng.standard_normal(d_in)
    u /= np.linalg.norm(u)
    regions = np.mean([1 + _crossings_on_segment(
        _gaussian_net(widths, d_in, sigma_w, sigma_b, rng), x0, u, length)
        for _ in range(trials)])
    constants = gaussian_region_constants(len(widths), sigma_w=sigma_w, sigma_b=sigma_b)
    bound = expected_regions_per_length(widths, c_grad=constants.c_grad_per_layer,
                                        c_bias=constants.c_bias, length=length)
    assert 1.0 < regions <= bound.regions
    # not exponential in depth: the count stays within a small multiple of #neurons x length
    assert regions < sum(widths) * length


def test_segment_bound_is_nearly_attained_at_the_origin():
    """One layer on R^1 near x = 0: each unit crosses with density E|w| rho_b(0) =
    sqrt(2 / pi) sigma_w C_bias, the bound's sigma_w C_bias times sqrt(2 / pi) (E|w| against
    E[w^2]^{1/2}): the bound is of the right order, not loose by depth or width."""
    rng = np.random.default_rng(4)
    sigma_w, sigma_b, eps, samples = 1.3, 0.7, 0.02, 2_000_000
    w, b = sigma_w * rng.standard_normal(samples), sigma_b * rng.standard_normal(samples)
    density = np.mean(np.abs(b / w) <= eps) / (2 * eps)  # crossings of w x + b per length
    constants = gaussian_region_constants(1, sigma_w=sigma_w, sigma_b=sigma_b)
    bound = expected_regions_per_length([1], c_grad=constants.c_grad, c_bias=constants.c_bias)
    assert density <= bound.crossings_per_length
    assert density / bound.crossings_per_length == pytest.approx(math.sqrt(2 / math.pi),
                                                                 rel=0.02)


def test_segment_bound_formula():
    scalar = expected_regions_per_length([4, 6], c_grad=2.0, c_bias=0.5, length=3.0)
    assert scalar.crossings_per_length == 10 * 2.0 * 0.5 and scalar.regions == 1 + 30.0
    per_layer = expected_regions_per_length([4, 6], c_grad=[1.0, 2.0], c_bias=0.5, length=3.0)
    assert per_layer.crossings_per_length == (4 * 1.0 + 6 * 2.0) * 0.5
    assert per_layer.c_grad == (1.0, 2.0) and per_layer.n_neurons == 10
    assert expected_regions_per_length([4, 6], c_grad=1.0, c_bias=1.0, length=0.0).regions == 1
    assert expected_regions_per_length([5, 6], c_grad=1.0, c_bias=1.0).regions > \
        expected_regions_per_length([4, 6], c_grad=1.0, c_bias=1.0).regions
    assert per_layer.to_dict()["widths"] == [4, 6]  # plain Python: tuples as lists


def test_volume_growth_law_values_and_scaling():
    law = expected_regions_per_volume(2, [4, 4], c_grad=1.0, c_bias=1.0, volume=3.0)
    assert (law.per_volume, law.regions, law.n_neurons) == (32.0, 96.0, 8)
    for d_in in (1, 2, 3, 5):  # (N C_grad C_bias)^{n_0} / n_0!: doubling N gives 2^{n_0}
        small = expected_regions_per_volume(d_in, [6, 6], c_grad=1.5, c_bias=0.4)
        double = expected_regions_per_volume(d_in, [12, 12], c_grad=1.5, c_bias=0.4)
        assert double.per_volume / small.per_volume == pytest.approx(2.0**d_in)
        assert small.log10_per_volume == pytest.approx(math.log10(small.per_volume))
    # the same N in more layers gives the same law: depth enters only through N
    assert expected_regions_per_volume(2, [4] * 6, c_grad=1.0, c_bias=1.0).per_volume == \
        expected_regions_per_volume(2, [12, 12], c_grad=1.0, c_bias=1.0).per_volume
    # one C_grad per layer: the sup is used
    assert expected_regions_per_volume(2, [4, 4], c_grad=[0.5, 1.0], c_bias=1.0).c_grad == 1.0
    huge = expected_regions_per_volume(400, [10_000] * 10, c_grad=1.0, c_bias=1.0)
    assert huge.per_volume == math.inf and 500 < huge.log10_per_volume < 1e4
    empty = expected_regions_per_volume(2, [4], c_grad=1.0, c_bias=1.0, volume=0.0)
    assert empty.regions == 0.0 and empty.log10_regions == -math.inf
    assert law.to_dict()["regions"] == 96.0


def _patterns_in_square(layers, half_side=1.0, n=220):
    side = np.linspace(-half_side, half_side, n)
    grid = np.stack(np.meshgrid(side, side), axis=-1).reshape(-1, 2)
    codes, h = [], grid
    for w, b in layers:
        z = h @ w.T + b
        codes.append(z > 0)
        h = np.maximum(z, 0.0)
    return len(np.unique(np.packbits(np.concatenate(codes, axis=1), axis=1), axis=0))


def test_volume_law_is_the_order_of_measured_counts_not_the_worst_case():
    """He-initialized networks on [-1, 1]^2: the measured count is within the growth law and a
    twentieth of it, far below Serra et al.'s maximum, and does not grow with depth at a fixed
    number of neurons."""
    rng = np.random.default_rng(5)
    counts = {}
    for widths in [(8, 8, 8), (16, 16, 16), (8,) * 6]:
        counts[widths] = np.mean([_patterns_in_square(
            _gaussian_net(widths, 2, math.sqrt(2.0), 1.0, rng)) for _ in range(3)])
        constants = gaussian_region_constants(len(widths), sigma_b=1.0)
        law = expected_regions_per_volume(2, widths, c_grad=constants.c_grad,
                                          c_bias=constants.c_bias, volume=4.0)
        assert law.regions / 20 <= counts[widths] <= law.regions
        assert counts[widths] < max_regions_upper_bound(2, widths).bound / 100
    assert counts[(8,) * 6] <= counts[(16, 16, 16)]  # same N = 48, twice the depth


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "call",
    [
        lambda: max_regions_lower_bound(0, [3]),
        lambda: max_regions_lower_bound(1.5, [3]),
        lambda: max_regions_lower_bound(True, [3]),
        lambda: max_regions_lower_bound(2, [3, -1]),
        lambda: max_regions_lower_bound(2, [3, 2.5]),
        lambda: max_regions_lower_bound(2, [3, 2.0]),
        lambda: max_regions_lower_bound(2, [0]),
        lambda: max_regions_lower_bound(2, []),
        lambda: max_regions_lower_bound(2, 3),
        lambda: max_regions_lower_bound(2, "33"),
        lambda: max_regions_lower_bound(2, None),
        lambda: max_regions_lower_bound(2, [3], construction="serra"),
        lambda: max_regions_lower_bound(2, [1, 4], construction="arora"),
        lambda: max_regions_lower_bound(2, [4, 1], construction="arora"),
        lambda: max_regions_upper_bound(-1, [3]),
        lambda: max_regions_upper_bound(2, [-3]),
        lambda: max_regions_upper_bound(2, ["3"]),
        lambda: max_regions_upper_bound(2, [3], method="zaslavsky"),
        lambda: gaussian_region_constants(0, sigma_b=1.0),
        lambda: gaussian_region_constants(3, sigma_b=0.0),
        lambda: gaussian_region_constants(3, sigma_b=-1.0),
        lambda: gaussian_region_constants(3, sigma_w=0.0, sigma_b=1.0),
        lambda: expected_regions_per_length([3], c_grad=0.0, c_bias=1.0),
        lambda: expected_regions_per_length([3], c_grad=1.0, c_bias=np.nan),
        lambda: expected_regions_per_length([3, 3], c_grad=[1.0], c_bias=1.0),
        lambda: expected_regions_per_length([3], c_grad=1.0, c_bias=1.0, length=-1.0),
        lambda: expected_regions_per_length([-3], c_grad=1.0, c_bias=1.0),
        lambda: expected_regions_per_volume(0, [3], c_grad=1.0, c_bias=1.0),
        lambda: expected_regions_per_volume(5, [2, 2], c_grad=1.0, c_bias=1.0),
        lambda: expected_regions_per_volume(2, [3], c_grad=1.0, c_bias=0.0),
        lambda: expected_regions_per_volume(2, [3], c_grad=1.0, c_bias=1.0, volume=-2.0),
    ],
)
def test_bad_input_says_expected_got_fix(call):
    with pytest.raises(InvalidInputError) as info:
        call()
    message = str(info.value)
    assert "expected" in message and "got" in message and "Fix:" in message
