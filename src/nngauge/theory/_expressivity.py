"""Expressivity bounds of Raghu et al. (2017), "On the expressive power of deep neural networks".

- :func:`hyperplane_regions` (Theorem 5): k hyperplanes cut R^m into at most
  r(k, m) = sum_{i=0}^m C(k, i) regions, with equality in general position.
- :func:`max_activation_patterns` (Theorem 1 and its proof): a network with n hidden layers of
  width k on inputs in R^m has at most r(k, m)^n activation patterns with ReLU (one hyperplane
  per neuron) and r(2k, m)^n with hard tanh (two, at pre-activation +-1): O(k^{mn}) and
  O((2k)^{mn}).
- :func:`trajectory_growth_bound` (Theorem 3 and appendix B): the expected length of the image
  of a trajectory grows at least geometrically with depth in random ReLU and hard-tanh
  networks with weights N(0, sigma_w^2 / k) and biases N(0, sigma_b^2).

Counts are exact Python integers (they do not overflow); lengths are returned in log space.
Counts too large to compute in seconds are refused up front (``max_bits``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np
from scipy.special import erf, gammaln

from nngauge._constraints import Choice, Integer, Maybe, constrained
from nngauge._results import Result, layer_index
from nngauge._vocabulary import renamed
from nngauge.errors import invalid
from nngauge.theory._counts import (
    DEFAULT_MAX_BITS,
    binomial_prefix_sum,
    log2_regions,
    log10_from_log2,
    require_bits,
    sum_bits,
)
from nngauge.theory._validate import COUNT, POSITIVE_STD, STD, WIDTH_OR_WIDTHS

PiecewiseLinear = Literal["relu", "hard_tanh"]
PBound = Literal["exact", "paper"]

_HYPERPLANES_PER_NEURON = {"relu": 1, "hard_tanh": 2}

MAX_BITS = Maybe(Integer(1))
"""``max_bits``: the size limit of exact counts (None: no limit)."""


@constrained(k=Integer(0), m=Integer(0), max_bits=MAX_BITS)
def hyperplane_regions(k: int, m: int, *, max_bits: Optional[int] = DEFAULT_MAX_BITS) -> int:
    """Most regions k hyperplanes can cut R^m into: sum_{i=0}^{m} C(k, i) (Theorem 5).

    Raghu et al. (2017), Theorem 5 (appendix): any arrangement of k affine hyperplanes
    {x : alpha_i . x = beta_i} in R^m has r(k, m) <= sum_{i=0}^m C(k, i) regions (connected
    components of the complement), with equality when the hyperplanes are in general position
    (Zaslavsky). r(k, m) = 2^k when k <= m.

    The sum is exact and fast (binary splitting: r(10^6, 10^5), 141,179 decimal digits, in
    a second or two); its size is estimated first, and sums beyond ``max_bits`` are refused
    before any work.

    Args:
        k: number of hyperplanes, >= 0.
        m: dimension of the space, >= 0.
        max_bits: refuse (:class:`~nngauge.errors.BudgetExceededError`) when the exact sum
            would handle integers of more than this many bits: about log2 r(k, m) plus
            log2(t!), t = min(m, k - m) terms (default 2**22, seconds of work); None: no
            limit.

    Returns:
        The bound as an exact Python int (print it with ``sys.set_int_max_str_digits`` raised
        when it has more than 4300 digits; ``math.log10`` takes it as it is).

    Raises:
        InvalidInputError: k or m is not a non-negative integer.
        BudgetExceededError: (an InvalidInputError) the sum is beyond ``max_bits``; the
            message gives its estimated log10.

    Example:
        >>> from nngauge.theory import hyperplane_regions
        >>> hyperplane_regions(3, 2)  # three lines in general position cut the plane into 7
        7
    """
    k, m = int(k), int(m)
    bits = sum_bits(k, m)
    require_bits("hyperplane_regions()", f"r(k={k}, m={m}) = sum_(i <= m) C(k, i)", bits, bits,
                 max_bits, log10_from_log2(log2_regions(k, m)),
                 "use fewer hyperplanes or a lower dimension")
    return binomial_prefix_sum(k, m)


@dataclass(frozen=True)
class ActivationPatternBound(Result):
    """Theorem 1's upper bound on the number of activation patterns (= linear regions).

    Attributes:
        activation: ``"relu"`` or ``"hard_tanh"``.
        widths: hidden-layer widths k_1..k_n.
        input_dim: m.
        per_layer: the bound after the first l hidden layers, l = 1..n:
            prod_{j <= l} r(c k_j, m), c = 1 (relu) or 2 (hard_tanh). Exact ints.
        bound: the bound for the whole network (``per_layer[-1]``).
        asymptotic: the theorem's O-form without its constant, prod_j (c k_j)^m (k^{mn} or
            (2k)^{mn} at equal widths). Not itself a bound: r(k, m) <= k^m only for k >= 2
            hyperplanes (and k^m / m! dominates r(k, m) for large k).
        log_bound: natural log of ``bound`` (a float even when ``bound`` has thousands of
            digits).

    ``to_dict()`` keeps the ints exact; ``to_frame()`` gives the bound per layer (exact) and
    its natural log, which ``plot()`` draws.
    """

    _curve = (layer_index("per_layer"), "per_layer",
              ("log_per_layer", lambda bound: [math.log(b) for b in bound.per_layer]))
    _headline = "log_per_layer"

    activation: str
    widths: tuple[int, ...]
    input_dim: int
    per_layer: tuple[int, ...]
    bound: int
    asymptotic: int
    log_bound: float


@renamed(activation="act")
@constrained(width=WIDTH_OR_WIDTHS, depth=COUNT, input_dim=COUNT,
             act=Choice.literal(PiecewiseLinear), max_bits=MAX_BITS)
def max_activation_patterns(
    width: int | Sequence[int],
    depth: int,
    input_dim: int,
    *,
    act: PiecewiseLinear = "relu",
    max_bits: Optional[int] = DEFAULT_MAX_BITS,
) -> ActivationPatternBound:
    """Upper bound on the activation patterns of a ReLU or hard-tanh network (Theorem 1).

    Raghu et al. (2017), Theorem 1 and its proof (appendix): each neuron of the first hidden
    layer defines one hyperplane in input space R^m (ReLU: w.x + b = 0) or two (hard tanh:
    w.x + b = +-1), so the first layer cuts R^m into at most r(c k, m) regions
    (:func:`hyperplane_regions`, c = 1 or 2). Inside each region the next layer's
    pre-activations are affine in x, so its c k hyperplanes cut every region again into at most
    r(c k, m) pieces. Over n layers: #patterns <= prod_l r(c k_l, m) = O(k^{mn}) for ReLU and
    O((2k)^{mn}) for hard tanh. The bound holds for every choice of weights. For ReLU,
    :func:`~nngauge.theory.max_regions_upper_bound` gives tighter bounds (Serra et al. 2018)
    and :func:`~nngauge.theory.max_regions_lower_bound` lower bounds from explicit weights.

    Args:
        width: k, the width of every hidden layer, or a sequence of n widths.
        depth: n, the number of hidden layers (the length of ``width`` when it is a sequence).
        input_dim: m, the input dimension.
        act: the activation, ``"relu"`` (default) or ``"hard_tanh"``.
        max_bits: refuse (:class:`~nngauge.errors.BudgetExceededError`), before any work,
            when an exact integer of the computation (a bound, the asymptotic form, or the
            sum behind a factor r(c k, m), see :func:`hyperplane_regions`) would take more
            than this many bits, or all of them together more than 64 times as many
            (default 2**22); None: no limit.

    Returns:
        An :class:`ActivationPatternBound` (exact ints, and the log of the bound).

    Raises:
        InvalidInputError: non-positive integers, an unknown activation, or a width sequence
            whose length is not ``depth``.
        BudgetExceededError: (an InvalidInputError) the exact bound is beyond ``max_bits``.

    Example:
        >>> from nngauge.theory import max_activation_patterns
        >>> max_activation_patterns(4, 2, 2).bound  # r(4, 2)^2 = 11^2
        121
    """
    where = "max_activation_patterns()"
    depth, input_dim = int(depth), int(input_dim)
    per_neuron = _HYPERPLANES_PER_NEURON[act]
    _require_pattern_bits(where, width, depth, input_dim, per_neuron, max_bits)
    widths = _widths(width, depth, where)
    factors = {k: binomial_prefix_sum(per_neuron * k, input_dim) for k in set(widths)}
    per_layer, total = [], 1
    for k in widths:
        total *= factors[k]
        per_layer.append(total)
    return ActivationPatternBound(
        activation=act,
        widths=widths,
        input_dim=input_dim,
        per_layer=tuple(per_layer),
        bound=total,
        asymptotic=math.prod((per_neuron * k) ** input_dim for k in widths),
        log_bound=math.log(total),
    )


def _widths(width: int | Sequence[int], depth: int, where: str) -> tuple[int, ...]:
    """The declared ``width`` (one int or a sequence) as one width per hidden layer."""
    if COUNT.accepts(width):
        return (int(width),) * depth
    widths = tuple(int(k) for k in width)
    if len(widths) != depth:
        raise invalid(where, f"{depth} widths (one per hidden layer)", f"{len(widths)} widths",
                      "pass one width per hidden layer, or a single int")
    return widths


def _require_pattern_bits(where: str, width: int | Sequence[int], depth: int, input_dim: int,
                          per_neuron: int, max_bits: Optional[int]) -> None:
    """Refuse, before any work, a bound of Theorem 1 whose exact integers exceed max_bits
    (estimated from the widths: per-layer bounds, the asymptotic form, the factors' sums)."""
    if max_bits is None:
        return
    counts: dict[int, int] = {}
    if COUNT.accepts(width):
        counts[int(width)] = depth
    else:
        for k in width:
            counts[int(k)] = counts.get(int(k), 0) + 1
    n = sum(counts.values())
    bits = sum(c * log2_regions(per_neuron * k, input_dim) for k, c in counts.items())
    asymptotic = sum(c * input_dim * math.log2(per_neuron * k) for k, c in counts.items())
    # the per-layer bounds hold about (n + 1) / 2 times the bits of the last one, at most n
    largest = max([bits, asymptotic] + [sum_bits(per_neuron * k, input_dim) for k in counts])
    require_bits(where, f"the bound prod_l r({per_neuron} k_l, m={input_dim}) over {n} layers",
                 largest, bits * (n + 1) / 2 + asymptotic, max_bits, log10_from_log2(bits),
                 "use fewer or narrower layers, or a lower input_dim")


@dataclass(frozen=True)
class TrajectoryGrowthBound(Result):
    """Theorem 3's bounds on trajectory-length growth per layer (log space).

    With l(.) the arc length and c = ||dx_perp|| / ||dx|| (1 for circular arcs),

        c * rate^d <= E[l(z^(d))] / l(x) ,   E[l(z^(d))] / l(x) <= upper_rate^d.

    Attributes:
        activation, width, depth, sigma_w, sigma_b, p_bound: the settings.
        rate: the explicit per-layer lower factor (the proof's eq. (a) with the lower bound on
            p; see :func:`trajectory_growth_bound`). At most 0 means the bound is vacuous.
        asymptotic_rate: the base in Theorem 3's statement without its O constant:
            sigma_w sqrt(k) / sqrt(k + 1) (ReLU) or
            sigma_w sqrt(k) / sqrt(s^2 + k s), s = sqrt(sigma_w^2 + sigma_b^2) (hard tanh).
        upper_rate: the per-layer upper factor sqrt(2) Gamma((k+1)/2) / Gamma(k/2) sigma_w /
            sqrt(k) (appendix B, eq. (2): replace the activation by the identity).
        log_lower: d log(rate) for d = 0..depth (-inf when rate <= 0), shape (depth + 1,).
        log_asymptotic: d log(asymptotic_rate), shape (depth + 1,).
        log_upper: d log(upper_rate), shape (depth + 1,).

    ``to_frame()`` and ``plot()`` give the three logs against the depth d = 0..depth.
    """

    _curve = (("depth", lambda bound: list(range(bound.depth + 1))), "log_lower",
              "log_asymptotic", "log_upper")

    activation: str
    width: int
    depth: int
    sigma_w: float
    sigma_b: float
    p_bound: str
    rate: float
    asymptotic_rate: float
    upper_rate: float
    log_lower: np.ndarray
    log_asymptotic: np.ndarray
    log_upper: np.ndarray

    @property
    def lower(self) -> np.ndarray:
        """rate^d for d = 0..depth (inf where it overflows float64; use ``log_lower``)."""
        with np.errstate(over="ignore"):
            return np.exp(self.log_lower)


@renamed(activation="act")
@constrained(width=COUNT, depth=Integer(0), sigma_w=POSITIVE_STD, sigma_b=STD,
             act=Choice.literal(PiecewiseLinear), p_bound=Choice.literal(PBound))
def trajectory_growth_bound(
    width: int,
    depth: int,
    *,
    sigma_w: float = 1.0,
    sigma_b: float = 0.0,
    act: PiecewiseLinear = "hard_tanh",
    p_bound: PBound = "exact",
) -> TrajectoryGrowthBound:
    """Lower (and upper) bound on the growth of trajectory length with depth (Theorem 3).

    Raghu et al. (2017), Theorem 3: for a random network with n hidden layers of width k,
    weights N(0, sigma_w^2 / k) and biases N(0, sigma_b^2), and a one-dimensional trajectory
    x(t) whose direction has a component perpendicular to x(t), the image z^(d)(t) after d
    layers satisfies

        E[l(z^(d))] >= O( sigma_w sqrt(k) / sqrt(k + 1) )^d l(x)                    (ReLU)
        E[l(z^(d))] >= O( sigma_w sqrt(k) / sqrt(s^2 + k s) )^d l(x),  s^2 = sigma_w^2 +
                                                                     sigma_b^2  (hard tanh).

    The explicit constant comes from the proof (appendix B, eq. (a)): with p the probability
    that a unit is in its linear regime, each layer multiplies E||dz_perp|| by at least

        g(p) = sigma_w sqrt(k) / sqrt(2) * ( p / sqrt(1 + (k - 1) p) - p (1 - p)^(k - 1) ).

    ``rate`` is min over p in [p_lo, 1] of g, bounded by g's increasing first term at p_lo minus
    max_{p >= p_lo} p (1 - p)^(k - 1) (attained at max(p_lo, 1/k)):

    - ReLU: pre-activations are symmetric, so p = 1/2 exactly for any bias, which gives the
      paper's eq. (d): sigma_w sqrt(k) / sqrt(2) (1 / sqrt(2 (k + 1)) - 2^-k).
    - hard tanh: Var h <= s^2 when ||z||^2 <= k (always after a hard-tanh layer; for the input
      when ||x||^2 <= k), so p = P(|h| < 1) >= p_lo with ``p_bound="exact"`` (default):
      p_lo = erf(1 / (s sqrt 2)) = P(|N(0, s^2)| < 1), valid for every s; or
      ``p_bound="paper"``: p_lo = 1 / (s sqrt(2 pi)), the paper's eq. (b), valid for s >= 1,
      which reproduces eq. (c). (Eq. (c) writes the subtracted term as sqrt(k) (1 - 1/s)^(k-1),
      using the upper bound p <= 1/s; that step is not a valid upper bound on p (1 - p)^(k-1),
      and the max above replaces it.)

    Args:
        width: k, the hidden width (and the input dimension the theorem assumes).
        depth: number of hidden layers d >= 0; values are returned for 0..depth.
        sigma_w: weight scale > 0 (weights have variance sigma_w^2 / k).
        sigma_b: bias standard deviation >= 0.
        act: the activation, ``"hard_tanh"`` (default, the setting of the paper's figures)
            or ``"relu"``.
        p_bound: ``"exact"`` (default) or ``"paper"`` lower bound on p (hard tanh only).

    Returns:
        A :class:`TrajectoryGrowthBound` with per-layer values in log space.

    Raises:
        InvalidInputError: bad sizes or scales, an unknown option, or ``p_bound="paper"`` with
            s < 1.

    Example:
        >>> from nngauge.theory import trajectory_growth_bound
        >>> b = trajectory_growth_bound(32, 5, sigma_w=4.0, sigma_b=1.0)
        >>> round(b.rate, 3), b.lower.shape
        (1.16, (6,))
    """
    where = "trajectory_growth_bound()"
    k, depth, sigma_w, sigma_b = int(width), int(depth), float(sigma_w), float(sigma_b)
    s = math.hypot(sigma_w, sigma_b)
    if act == "relu":
        p_lo = 0.5
        asymptotic = sigma_w * math.sqrt(k / (k + 1.0))
    else:
        if p_bound == "paper" and s < 1.0:
            raise invalid(where, "sqrt(sigma_w^2 + sigma_b^2) >= 1 for p_bound='paper'",
                          f"{s:.4g}", "use p_bound='exact', which holds at every scale")
        p_lo = 1.0 / (s * math.sqrt(2 * math.pi)) if p_bound == "paper" else float(
            erf(1.0 / (s * math.sqrt(2.0))))
        asymptotic = sigma_w * math.sqrt(k) / math.sqrt(s * s + k * s)
    p_star = p_lo if act == "relu" else max(p_lo, 1.0 / k)  # relu: p = 1/2 exactly
    rate = sigma_w * math.sqrt(k / 2.0) * (
        p_lo / math.sqrt(1.0 + (k - 1) * p_lo) - p_star * (1.0 - p_star) ** (k - 1)
    )
    upper = math.sqrt(2.0) * math.exp(gammaln((k + 1) / 2.0) - gammaln(k / 2.0)) * sigma_w / (
        math.sqrt(k))
    layers = np.arange(depth + 1, dtype=np.float64)
    log_rate = math.log(rate) if rate > 0 else -math.inf
    with np.errstate(invalid="ignore"):
        log_lower = np.where(layers == 0, 0.0, layers * log_rate)
    return TrajectoryGrowthBound(
        activation=act, width=k, depth=depth, sigma_w=sigma_w, sigma_b=sigma_b,
        p_bound=p_bound, rate=rate, asymptotic_rate=asymptotic, upper_rate=upper,
        log_lower=log_lower, log_asymptotic=layers * math.log(asymptotic),
        log_upper=layers * math.log(upper),
    )
