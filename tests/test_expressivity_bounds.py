"""Raghu et al. (2017) bounds: hyperplane regions (Theorem 5), activation patterns (Theorem 1)
and trajectory-length growth (Theorem 3), against brute force and Monte Carlo."""

import itertools
import math

import numpy as np
import pytest

from nngauge.errors import InvalidInputError
from nngauge.theory._expressivity import (
    hyperplane_regions,
    max_activation_patterns,
    trajectory_growth_bound,
)

# ---------------------------------------------------------------- Theorem 5: hyperplane regions


def test_hyperplane_regions_small_values_and_recursion():
    # lines in the plane: 1 + k + C(k, 2); planes in space: the cake numbers
    assert [hyperplane_regions(k, 2) for k in range(6)] == [1, 2, 4, 7, 11, 16]
    assert [hyperplane_regions(k, 3) for k in range(7)] == [1, 2, 4, 8, 15, 26, 42]
    assert hyperplane_regions(7, 10) == 2**7  # k <= m: every sign vector
    assert hyperplane_regions(5, 0) == 1
    # the proof's recursion r(k, m) = r(k - 1, m) + r(k - 1, m - 1)
    for k, m in itertools.product(range(1, 12), range(1, 6)):
        assert hyperplane_regions(k, m) == hyperplane_regions(k - 1, m) + hyperplane_regions(
            k - 1, m - 1)


def test_hyperplane_regions_is_exact_for_huge_arguments():
    value = hyperplane_regions(10_000, 50)
    assert isinstance(value, int)
    assert value == sum(math.comb(10_000, i) for i in range(51))
    assert value > 2**53 and int(float(value)) != value  # float64 would not keep it exactly


def _probe_points(normals, offsets, rng, n_uniform=20_000):
    """Uniform points over a box holding every vertex, plus one point in each cell around each
    vertex.

    At a vertex v where the hyperplanes of the rows A meet, v + eps A^{-1} s lies on side s of
    those hyperplanes for every s in {-1, 1}^m, and on v's side of all the others when eps is
    small. Every region of an arrangement whose normals span R^m has a vertex on its boundary,
    so these points meet every region."""
    m = normals.shape[1]
    points = [rng.uniform(-3.0, 3.0, size=(n_uniform, m))]
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=m)))
    for rows in itertools.combinations(range(len(normals)), m):
        a = normals[list(rows)]
        if abs(np.linalg.det(a)) < 1e-9:
            continue
        vertex = np.linalg.solve(a, offsets[list(rows)])
        steps = np.linalg.solve(a, signs.T).T  # (2^m, m)
        others = [i for i in range(len(normals)) if i not in rows]
        gap = np.abs(normals[others] @ vertex - offsets[others])
        reach = np.abs(steps @ normals[others].T).max(axis=0) if others else np.ones(0)
        eps = 0.5 * np.min(gap / reach) if others else 1.0
        points.append(vertex + eps * steps)
        points.append(rng.uniform(vertex - 2.0, vertex + 2.0, size=(200, m)))
    return np.concatenate(points)


def _count_sign_vectors(normals, offsets, points):
    signs = (points @ normals.T - offsets) > 0
    return len({row.tobytes() for row in signs})


@pytest.mark.parametrize("m,max_k", [(2, 7), (3, 6)])
def test_hyperplane_regions_brute_force(m, max_k):
    """Random hyperplanes are in general position a.s.: the count equals the formula."""
    rng = np.random.default_rng(m)
    for k in range(1, max_k + 1):
        normals, offsets = rng.standard_normal((k, m)), rng.standard_normal(k)
        points = _probe_points(normals, offsets, rng)
        assert _count_sign_vectors(normals, offsets, points) == hyperplane_regions(k, m), k


def test_hyperplane_regions_bounds_degenerate_arrangements():
    """Parallel or concurrent hyperplanes give fewer regions (Theorem 5 is an upper bound)."""
    rng = np.random.default_rng(5)
    # four concurrent lines through the origin: 8 regions < r(4, 2) = 11
    angles = np.array([0.1, 0.9, 1.7, 2.6])
    normals, offsets = np.stack([np.cos(angles), np.sin(angles)], axis=1), np.zeros(4)
    points = rng.standard_normal((20_000, 2))
    assert _count_sign_vectors(normals, offsets, points) == 8 < hyperplane_regions(4, 2)


# ---------------------------------------------------------------- Theorem 1: activation patterns


def _patterns(x, layers, activation):
    """Distinct activation patterns of a random net over the rows of x."""
    codes, z = [], x
    for w, b in layers:
        h = z @ w.T + b
        if activation == "relu":
            codes.append(h > 0)
            z = np.maximum(h, 0)
        else:
            codes.append(np.sign(np.where(np.abs(h) < 1, 0.0, h)).astype(np.int8))
            z = np.clip(h, -1, 1)
    code = np.concatenate([c.astype(np.int8) for c in codes], axis=1)
    return len({row.tobytes() for row in code})


def _random_net(widths, m, rng, scale=2.0):
    dims = [m, *widths]
    return [(scale * rng.standard_normal((dims[i + 1], dims[i])) / np.sqrt(dims[i]),
             rng.standard_normal(dims[i + 1])) for i in range(len(widths))]


@pytest.mark.parametrize("activation", ["relu", "hard_tanh"])
def test_one_hidden_layer_attains_or_respects_the_bound(activation):
    rng = np.random.default_rng(1)
    k, m = 5, 2
    (w, b), = _random_net([k], m, rng)
    if activation == "relu":
        normals, offsets = w, -b
    else:  # w x + b = +-1
        normals, offsets = np.concatenate([w, w]), np.concatenate([1 - b, -1 - b])
    points = _probe_points(normals, offsets, rng)
    count = _patterns(points, [(w, b)], activation)
    bound = max_activation_patterns(k, 1, m, act=activation).bound
    if activation == "relu":  # k lines in general position: exactly r(k, 2)
        assert count == bound == hyperplane_regions(k, m)
    else:  # k parallel pairs, no three concurrent: 1 + 2k + (C(2k, 2) - k) regions
        assert count == 1 + 2 * k + math.comb(2 * k, 2) - k
        assert count <= bound == hyperplane_regions(2 * k, m)


@pytest.mark.parametrize("activation", ["relu", "hard_tanh"])
@pytest.mark.parametrize("widths,m", [((3, 3), 2), ((4, 3, 2), 2), ((3, 3), 3)])
def test_brute_force_patterns_never_exceed_the_bound(activation, widths, m):
    rng = np.random.default_rng(len(widths) + m)
    x = rng.uniform(-6, 6, size=(60_000, m))
    result = max_activation_patterns(list(widths), len(widths), m, act=activation)
    for trial in range(3):
        layers = _random_net(widths, m, rng)
        for depth in range(1, len(widths) + 1):
            count = _patterns(x, layers[:depth], activation)
            assert count <= result.per_layer[depth - 1]
    assert result.bound == result.per_layer[-1]


def test_pattern_bound_values_and_asymptotic_form():
    relu = max_activation_patterns(4, 3, 2)
    assert relu.per_layer == (11, 121, 1331)  # r(4, 2)^l
    assert relu.asymptotic == 4 ** (2 * 3)  # k^(mn)
    tanh = max_activation_patterns(4, 3, 2, act="hard_tanh")
    assert tanh.per_layer[-1] == hyperplane_regions(8, 2) ** 3 == 37**3
    assert tanh.asymptotic == 8 ** (2 * 3)  # (2k)^(mn)
    big = max_activation_patterns(1000, 100, 20)
    assert isinstance(big.bound, int)
    assert big.log_bound == pytest.approx(100 * math.log(hyperplane_regions(1000, 20)), rel=1e-12)
    assert big.to_dict()["bound"] == big.bound


# ---------------------------------------------------------------- Theorem 3: trajectory growth


def test_relu_rate_is_the_papers_equation_d():
    for k, sw in [(2, 1.0), (10, 2.0), (100, 3.0)]:
        b = trajectory_growth_bound(k, 4, sigma_w=sw, act="relu")
        eq_d = (-sw * np.sqrt(k) / 2**k + sw * np.sqrt(k) / np.sqrt(2 * (k + 1))) / np.sqrt(2)
        assert b.rate == pytest.approx(eq_d, rel=1e-13)
        assert b.asymptotic_rate == pytest.approx(sw * np.sqrt(k) / np.sqrt(k + 1), rel=1e-13)
        # pre-activations are symmetric: the bias does not change p = 1/2
        assert trajectory_growth_bound(k, 4, sigma_w=sw, sigma_b=0.7, act="relu").rate \
            == pytest.approx(eq_d, rel=1e-13)


def test_hard_tanh_paper_mode_reproduces_equation_c():
    """Eq. (c) at sigma_b = 0; its subtracted term is below 1e-8 at k = 400, sigma = 4."""
    sigma, k = 4.0, 400
    b = trajectory_growth_bound(k, 3, sigma_w=sigma, p_bound="paper")
    first = (2 * np.pi) ** -0.25 * np.sqrt(sigma * k) / np.sqrt(sigma * np.sqrt(2 * np.pi) + k - 1)
    assert b.rate == pytest.approx(first / np.sqrt(2), rel=1e-8)
    # statement (b): sigma_w sqrt(k) / sqrt(sigma_w^2 + sigma_b^2 + k sqrt(sigma_w^2 + sigma_b^2))
    sw, sb = 3.0, 2.0
    b = trajectory_growth_bound(k, 3, sigma_w=sw, sigma_b=sb)
    s2 = sw**2 + sb**2
    assert b.asymptotic_rate == pytest.approx(sw * np.sqrt(k) / np.sqrt(s2 + k * np.sqrt(s2)))


def test_hard_tanh_rate_has_the_theorems_asymptotic_form():
    """For k >> sigma_w >> 1 the explicit rate is a constant times the statement's base:
    (2 pi)^(-1/4) / sqrt 2 with eq. (b)'s p, and 1 / sqrt(2 sqrt(pi / 2)) with the exact p."""
    for p_bound, limit in [("paper", (2 * np.pi) ** -0.25 / np.sqrt(2)),
                           ("exact", 1 / np.sqrt(2 * np.sqrt(np.pi / 2)))]:
        b = trajectory_growth_bound(10**7, 1, sigma_w=300.0, p_bound=p_bound)
        assert b.rate / b.asymptotic_rate == pytest.approx(limit, rel=1e-3)


def test_bound_is_ordered_and_in_log_space():
    b = trajectory_growth_bound(64, 400, sigma_w=8.0, sigma_b=0.5)
    assert b.log_lower.shape == b.log_upper.shape == (401,)
    assert b.log_lower[0] == b.log_upper[0] == 0.0
    assert 0 < b.rate < b.upper_rate
    np.testing.assert_allclose(np.diff(b.log_lower), np.log(b.rate))
    assert np.all(b.log_lower <= b.log_upper)
    # exact p bound is never weaker than the paper's eq. (b) p bound
    assert b.rate >= trajectory_growth_bound(64, 3, sigma_w=8.0, sigma_b=0.5,
                                             p_bound="paper").rate
    # upper rate: chi mean with k degrees of freedom, <= sigma_w sqrt((k + 1) / k) (eq. (3))
    assert b.upper_rate <= 8.0 * np.sqrt(65 / 64)
    # width 1: no direction to project out (the proof needs >= 2 active units): vacuous
    vacuous = trajectory_growth_bound(1, 3, sigma_w=4.0)
    assert vacuous.rate <= 0 and np.all(np.isneginf(vacuous.log_lower[1:]))
    assert vacuous.lower.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert trajectory_growth_bound(8, 0).log_lower.tolist() == [0.0]


def _measured_growth(activation, k, depth, sigma_w, sigma_b, n_nets, rng, n_points=3000):
    """Mean over random nets of l(z^(d)) / l(x) for a quarter circle of radius sqrt(k)."""
    u, v = np.linalg.qr(rng.standard_normal((k, 2)))[0].T
    t = np.linspace(0.0, np.pi / 2, n_points)[:, None]
    x = np.sqrt(k) * (np.cos(t) * u + np.sin(t) * v)  # ||x||^2 = k, dx perpendicular to x
    ratios = np.zeros(depth + 1)
    for _ in range(n_nets):
        z, base = x, np.sum(np.linalg.norm(np.diff(x, axis=0), axis=1))
        ratios[0] += 1.0
        for d in range(1, depth + 1):
            h = z @ (sigma_w / np.sqrt(k) * rng.standard_normal((k, k))).T
            h = h + sigma_b * rng.standard_normal(k)
            z = np.maximum(h, 0.0) if activation == "relu" else np.clip(h, -1.0, 1.0)
            ratios[d] += np.sum(np.linalg.norm(np.diff(z, axis=0), axis=1)) / base
    return ratios / n_nets


@pytest.mark.parametrize(
    "activation,sigma_w,sigma_b", [("hard_tanh", 4.0, 1.0), ("hard_tanh", 8.0, 0.0),
                                   ("relu", 2.0, 0.5)])
def test_monte_carlo_growth_lies_between_the_bounds(activation, sigma_w, sigma_b):
    k, depth = 32, 6
    measured = _measured_growth(activation, k, depth, sigma_w, sigma_b, 4,
                                np.random.default_rng(7))
    b = trajectory_growth_bound(k, depth, sigma_w=sigma_w, sigma_b=sigma_b,
                                act=activation)
    assert np.all(np.log(measured[1:]) >= b.log_lower[1:])
    assert np.all(np.log(measured[1:]) <= b.log_upper[1:])
    if activation == "hard_tanh":
        assert b.rate > 1  # a non-vacuous, exponentially growing lower bound is being tested


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call",
    [
        lambda: hyperplane_regions(-1, 2),
        lambda: hyperplane_regions(3, 2.5),
        lambda: hyperplane_regions(True, 2),
        lambda: max_activation_patterns(0, 2, 2),
        lambda: max_activation_patterns(3, 0, 2),
        lambda: max_activation_patterns(3, 2, 0),
        lambda: max_activation_patterns([3, 4], 3, 2),
        lambda: max_activation_patterns("wide", 3, 2),
        lambda: max_activation_patterns(3, 2, 2, act="tanh"),
        lambda: trajectory_growth_bound(0, 3),
        lambda: trajectory_growth_bound(8, -1),
        lambda: trajectory_growth_bound(8, 3, sigma_w=0.0),
        lambda: trajectory_growth_bound(8, 3, sigma_w=[1.0, 2.0]),
        lambda: trajectory_growth_bound(8, 3, sigma_b=-1.0),
        lambda: trajectory_growth_bound(8, 3, sigma_w=np.nan),
        lambda: trajectory_growth_bound(8, 3, act="sigmoid"),
        lambda: trajectory_growth_bound(8, 3, p_bound="loose"),
        lambda: trajectory_growth_bound(8, 3, sigma_w=0.5, p_bound="paper"),
    ],
)
def test_bad_input_says_expected_got_fix(call):
    with pytest.raises(InvalidInputError) as info:
        call()
    message = str(info.value)
    assert "expected" in message and "got" in message and "Fix:" in message
