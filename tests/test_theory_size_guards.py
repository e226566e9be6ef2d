"""Size guards of the theory: calls that used to hang finish or refuse within seconds.

- ``hyperplane_regions(10**6, 10**5)`` summed 10^5 ``math.comb`` values of up to 141,000
  digits (minutes); it is now an exact binary-splitting sum (about a second), and sums out of
  reach are refused up front (``max_bits``, BudgetExceededError with the estimated size).
- ``nngp`` / ``ntk`` at depth 10,000 iterated for minutes with quadrature activations; they
  now time the first layers and refuse when the whole depth would exceed ``max_seconds``.

Each call is timed with ``time.perf_counter`` against a generous bound (no pytest timeout
plugin), so a regression fails instead of hanging for long.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from nngauge.errors import BudgetExceededError, InvalidInputError
from nngauge.theory import (
    hyperplane_regions,
    max_activation_patterns,
    max_regions_lower_bound,
    max_regions_upper_bound,
    nngp,
    ntk,
)
from nngauge.theory._counts import DEFAULT_MAX_BITS, log2_regions, sum_bits

BOUND_S = 20.0
"""Seconds any guarded call may take here (they take at most a few)."""


def _timed(call):
    """(result or raised NNGaugeError, seconds)."""
    start = time.perf_counter()
    try:
        out = call()
    except InvalidInputError as error:
        out = error
    return out, time.perf_counter() - start


def _mod_prefix_sum(k: int, m: int, p: int) -> int:
    """sum_{i <= m} C(k, i) mod a prime p > k, from factorials mod p (independent check)."""
    fact = [1] * (k + 1)
    for i in range(1, k + 1):
        fact[i] = fact[i - 1] * i % p
    inv_k = pow(fact[k], p - 2, p)
    total, inv = 0, [0] * (k + 1)
    inv[k] = inv_k
    for i in range(k, 0, -1):
        inv[i - 1] = inv[i] * i % p
    for i in range(min(k, m) + 1):
        total += fact[k] * inv[i] % p * inv[k - i]
    return total % p


# ------------------------------------------------------------------ hyperplane_regions


def test_the_reported_call_is_exact_and_fast():
    value, seconds = _timed(lambda: hyperplane_regions(10**6, 10**5))
    assert isinstance(value, int), value
    assert seconds < BOUND_S
    p = 2**61 - 1  # a prime above k: C(k, i) mod p from factorials
    assert value % p == _mod_prefix_sum(10**6, 10**5, p)
    assert math.floor(math.log10(value)) + 1 == 141_179  # its number of decimal digits
    # log10 from the terms, log-sum-exp over lgamma, agrees to float precision
    i = np.arange(10**5 + 1, dtype=np.float64)
    from scipy.special import gammaln, logsumexp

    log_terms = gammaln(10**6 + 1) - gammaln(i + 1) - gammaln(10**6 - i + 1)
    assert math.log10(value) == pytest.approx(logsumexp(log_terms) / math.log(10), rel=1e-12)


def test_exact_against_the_plain_sum_on_every_branch():
    rng = random.Random(0)
    cases = [(rng.randint(0, 600), rng.randint(0, 650)) for _ in range(400)]
    cases += [(5000, 2499), (5000, 2500), (5001, 2500), (4000, 3999), (4000, 4000),
              (20000, 3000), (0, 0), (1, 0), (64, 31), (64, 32), (65, 33)]
    for k, m in cases:
        term, total = 1, 1  # C(k, i + 1) = C(k, i) (k - i) / (i + 1)
        for i in range(min(k, m)):
            term = term * (k - i) // (i + 1)
            total += term
        assert hyperplane_regions(k, m) == total, (k, m)


def test_size_estimates_bound_the_exact_values():
    for k, m in [(10, 3), (1000, 20), (1000, 499), (1000, 500), (10**5, 10**4), (7, 9)]:
        exact = math.log2(hyperplane_regions(k, m))
        assert exact - 1e-9 <= log2_regions(k, m) <= exact + 16, (k, m)
        assert sum_bits(k, m) >= log2_regions(k, m)


@pytest.mark.parametrize("k, m", [(10**9, 10**8), (10**7, 4 * 10**6), (10**12, 10**6)])
def test_out_of_reach_sums_are_refused_up_front(k, m):
    error, seconds = _timed(lambda: hyperplane_regions(k, m))
    assert seconds < 1.0
    assert isinstance(error, BudgetExceededError), error
    message = str(error)
    assert "hyperplane_regions() expected exact integers of at most max_bits=" in message
    assert "decimal digits" in message and "bits" in message
    assert "Fix:" in message and "max_bits=None" in message


def test_max_bits_is_the_limit_and_none_lifts_it():
    with pytest.raises(BudgetExceededError, match="about 141,179 decimal digits"):
        hyperplane_regions(10**6, 10**5, max_bits=10**6)
    assert hyperplane_regions(300, 100, max_bits=None) == hyperplane_regions(300, 100)
    assert sum_bits(10**6, 10**5) < DEFAULT_MAX_BITS  # the reported call is within the default


def test_bounds_built_from_region_counts_finish_or_refuse():
    bound, seconds = _timed(lambda: max_activation_patterns(10**6, 2, 10**5))  # one sum
    assert seconds < BOUND_S and not isinstance(bound, Exception), bound
    assert bound.per_layer[0] ** 2 == bound.bound and bound.per_layer[0].bit_length() == 468_987
    for call in (lambda: max_regions_upper_bound(10**5, [10**6] * 3),  # serra: its tables
                 lambda: max_regions_upper_bound(10**5, [10**6] * 30, method="raghu"),
                 lambda: max_regions_lower_bound(10**6, [10**7, 10**7]),
                 lambda: max_activation_patterns(64, 10**6, 2)):  # a million per-layer bounds
        error, seconds = _timed(call)
        assert seconds < 1.0
        assert isinstance(error, BudgetExceededError), error
        assert "max_bits=None" in str(error)
    upper, seconds = _timed(lambda: max_regions_upper_bound(10**5, [10**6] * 2, method="montufar"))
    assert seconds < BOUND_S and upper.bound == hyperplane_regions(10**6, 10**5) ** 2


# ------------------------------------------------------------------ nngp / ntk


@pytest.mark.parametrize("fn", [nngp, ntk])
def test_deep_quadrature_kernels_are_refused_with_the_estimate(fn):
    # tanh has no closed form: each layer is a quadrature (milliseconds), a million is hours
    error, seconds = _timed(lambda: fn(np.eye(2), "tanh", 10**6))
    assert seconds < BOUND_S
    assert isinstance(error, BudgetExceededError), error
    message = str(error)
    assert f"{fn.__name__}() expected a computation within max_seconds=30" in message
    assert "depth=1000000" in message and "estimated" in message and "ms per layer" in message
    assert "Fix:" in message and "max_seconds=None" in message


@pytest.mark.parametrize("fn", [nngp, ntk])
def test_the_reported_depth_finishes_or_refuses_within_the_budget(fn):
    # depth 10,000 with quadrature: at most max_seconds (+ a layer), then an answer or a refusal
    out, seconds = _timed(lambda: fn(np.eye(2), "tanh", 10_000, max_seconds=2.0))
    assert seconds < BOUND_S
    assert isinstance(out, BudgetExceededError) or out.depth == 10_000


def test_deep_closed_form_kernels_still_run():
    trace, seconds = _timed(lambda: nngp(np.eye(2), "erf", 10_000))
    assert seconds < BOUND_S and trace.depth == 10_000
    assert np.all(np.isfinite(trace.kernels[-1]))


def test_max_seconds_none_lifts_the_budget_and_bad_values_are_refused():
    trace = nngp(np.eye(2), "tanh", 3, max_seconds=None)
    assert trace.depth == 3
    for bad in (0.0, -1.0, float("nan"), "30"):
        with pytest.raises(InvalidInputError, match="max_seconds"):
            ntk(np.eye(2), "relu", 1, max_seconds=bad)
