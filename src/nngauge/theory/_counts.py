"""Exact region counts at scale: r(k, m) = sum_{i<=m} C(k, i) fast, and their size up front.

The bounds of :mod:`nngauge.theory._expressivity` and :mod:`nngauge.theory._regions` are
exact Python integers, which can have millions of digits. Two things keep them from
hanging:

- :func:`binomial_prefix_sum` sums the binomials by binary splitting (products of balanced
  halves, so Karatsuba multiplication does the work) and divides by 2-adic Newton inversion
  (CPython 3.11's long division is quadratic), instead of m + 1 separate ``math.comb`` calls:
  r(10^6, 10^5), 141,179 digits, takes a second or two instead of hours.
- :func:`log2_regions` and :func:`sum_bits` estimate, in floats, the bits of the result and
  of the integers the exact sum multiplies, so that :func:`require_bits` can refuse a
  computation before any work when it is out of reach (``max_bits``).
"""

from __future__ import annotations

import math

from nngauge.errors import BudgetExceededError, invalid

DEFAULT_MAX_BITS = 2**22
"""Default ``max_bits``: exact integers of up to about 4.2 million bits (1.26 million decimal
digits), a few seconds of work at most."""

HELD_FACTOR = 64
"""The integers a result holds together (per-layer bounds, tables) may take this many times
``max_bits`` bits."""

_LOG2_10 = math.log2(10.0)
_LEAF = 32  # terms summed directly at the leaves of the binary splitting


def log2_comb(n: int, j: int) -> float:
    """log2 C(n, j) in floating point (0 <= j <= n)."""
    return (math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)) / math.log(2.0)


def log2_regions(k: int, m: int) -> float:
    """An upper estimate of log2 r(k, m), r(k, m) = sum_{i=0}^{m} C(k, i), within a few bits.

    Going down from C(k, m) each binomial is at most m / (k - m + 1) times the previous one,
    so r(k, m) <= C(k, m) / (1 - m / (k - m + 1)) when 2 m < k; r(k, m) <= 2^k always.
    """
    if m >= k or 2 * m >= k:
        return float(k)
    ratio = m / (k - m + 1)
    return min(float(k), log2_comb(k, m) - math.log2(1.0 - ratio))


def sum_bits(k: int, m: int) -> float:
    """About the bits of the largest integers :func:`binomial_prefix_sum` multiplies: the
    terms' common denominator (t + 1)! times the sum, t = min(m, k - m - 1) terms."""
    if m >= k:
        return float(k)
    t = min(m, k - m - 1)
    return max(log2_regions(k, m), log2_regions(k, t) + math.lgamma(t + 2) / math.log(2.0))


def binomial_prefix_sum(k: int, m: int) -> int:
    """r(k, m) = sum_{i=0}^{min(k, m)} C(k, i) exactly, for integers k, m >= 0.

    Example:
        >>> binomial_prefix_sum(4, 2)  # 1 + 4 + 6
        11
    """
    if m >= k:
        return 1 << k
    if 2 * m >= k:  # the complement has fewer terms: 2^k - sum_{i <= k - m - 1} C(k, i)
        return (1 << k) - binomial_prefix_sum(k, k - m - 1)
    if m < _LEAF:
        term, total = 1, 1
        for i in range(m):
            term = term * (k - i) // (i + 1)
            total += term
        return total
    _, denominator, numerator = _split(k, 0, m + 1, need_product=False)
    return _exact_quotient(numerator, denominator)


def _split(k: int, a: int, c: int, *, need_product: bool) -> tuple[int | None, int, int]:
    """Binary splitting of F(a, c) = sum_{a <= i < c} prod_{a <= j < i} (k - j) / (j + 1).

    Returns (P, Q, T): P = prod_{a <= j < c} (k - j) (None when not needed), Q =
    prod_{a <= j < c} (j + 1) and T = Q F(a, c), an integer. Halves combine as
    T(a, c) = Q(b, c) T(a, b) + P(a, b) T(b, c); F(0, m + 1) = r(k, m).
    """
    if c - a <= _LEAF:
        p, q, t = k - a, a + 1, a + 1
        for j in range(a + 1, c):
            t = (j + 1) * (t + p)
            p *= k - j
            q *= j + 1
        return p, q, t
    b = (a + c) // 2
    p1, q1, t1 = _split(k, a, b, need_product=True)
    p2, q2, t2 = _split(k, b, c, need_product=need_product)
    return (p1 * p2 if need_product else None), q1 * q2, q2 * t1 + p1 * t2


def _exact_quotient(numerator: int, denominator: int) -> int:
    """numerator // denominator for an exact division (remainder 0), by 2-adic Newton
    inversion of the denominator's odd part: a few multiplications instead of CPython 3.11's
    quadratic long division."""
    twos = (denominator & -denominator).bit_length() - 1
    numerator, denominator = numerator >> twos, denominator >> twos
    bits = numerator.bit_length() - denominator.bit_length() + 2  # > bits of the quotient
    inverse, precision = 1, 1  # the inverse of an odd number modulo 2
    while precision < bits:
        precision = min(2 * precision, bits)
        mask = (1 << precision) - 1
        inverse = (inverse * (2 - (denominator & mask) * inverse)) & mask
    mask = (1 << bits) - 1
    return ((numerator & mask) * inverse) & mask


def require_bits(where: str, what: str, largest: float, held: float, max_bits: int | None,
                 log10_value: float, fix: str) -> None:
    """Refuse (BudgetExceededError) when the exact integers of a computation would take more
    than ``max_bits`` bits each (``largest``) or ``HELD_FACTOR * max_bits`` together
    (``held``); ``log10_value`` (an estimate of the result) and ``fix`` go in the message."""
    if max_bits is None or (largest <= max_bits and held <= HELD_FACTOR * max_bits):
        return
    size = (f"integers of about {largest:,.0f} bits" if largest > max_bits else
            f"about {held:,.0f} bits of integers together (more than {HELD_FACTOR} x max_bits)")
    raise invalid(where, f"exact integers of at most max_bits={max_bits:,} bits",
                  f"{what}, an integer of about {log10_value:,.0f} decimal digits (log10 "
                  f"about {log10_value:,.1f}): computing it exactly handles {size}",
                  f"{fix}, or pass max_bits=None (or a larger max_bits) to compute it anyway "
                  "(the time grows faster than the size: seconds at 4 million bits, minutes "
                  "at 40 million)", error=BudgetExceededError)


def log10_from_log2(bits: float) -> float:
    """log10 of a number given its log2."""
    return bits / _LOG2_10
