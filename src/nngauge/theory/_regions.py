"""Bounds from the literature on the number of linear regions of ReLU networks.

A region is an activation region: the inputs that share one on/off pattern of every hidden
ReLU, a convex polytope on which the network is affine (Raghu et al. 2017, Theorem 2). The
papers count these; the maximal pieces on which the output is affine can only be fewer.

Over all weights (exact Python ints, may be huge, with log10 for plots):

- :func:`max_regions_lower_bound`: weights that reach many regions, Montufar, Pascanu, Cho and
  Bengio (NIPS 2014) or Arora, Basu, Mianjy and Mukherjee (ICLR 2018).
- :func:`max_regions_upper_bound`: Serra, Tjandraatmadja and Ramalingam (ICML 2018),
  Theorem 1, by dynamic programming; Montufar's (2017) and Raghu et al.'s (2017) products for
  comparison.

At random initialization (floats):

- :func:`expected_regions_per_length`: Hanin and Rolnick (ICML 2019): along a segment the
  expected count grows like #neurons x length x C_grad x C_bias, not exponentially in depth.
- :func:`expected_regions_per_volume`: Hanin and Rolnick (NeurIPS 2019): in a cube it grows like
  (#neurons C_grad C_bias)^d_in / d_in! x volume, up to a constant the theorem does not give.
- :func:`gaussian_region_constants`: C_bias and C_grad for weights N(0, sigma_w^2 / fan_in) and
  biases N(0, sigma_b^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal, Optional, Sequence

from nngauge._constraints import Check, Choice, Either, Numbers, constrained
from nngauge._results import Result, layer_index
from nngauge.errors import invalid
from nngauge.theory._counts import (
    DEFAULT_MAX_BITS,
    binomial_prefix_sum,
    log2_comb,
    log2_regions,
    log10_from_log2,
    require_bits,
    sum_bits,
)
from nngauge.theory._expressivity import MAX_BITS
from nngauge.theory._validate import COUNT, POSITIVE_STD, STD, WIDTHS

LowerConstruction = Literal["montufar", "arora"]
UpperMethod = Literal["serra", "montufar", "raghu"]

C_GRAD = Either((POSITIVE_STD, Numbers(0, low_open=True)))
"""C_grad: one value for every layer, or one per layer."""

BIAS_STD = Check(POSITIVE_STD.accepts, "a bias standard deviation > 0 (the bounds need biases "
                 "with a density; for zero biases use max_regions_upper_bound())",
                 (0, 0.0, -1.0, float("nan"), float("inf"), "1", True))
"""sigma_b of Hanin and Rolnick's constants."""


@dataclass(frozen=True)
class RegionCountBound(Result):
    """A bound on the maximal number of linear regions of a ReLU network over all its weights.

    Attributes:
        kind: ``"lower"`` (some weights reach this many regions) or ``"upper"`` (no weights
            exceed it).
        method: the construction (``"montufar"``, ``"arora"``) or the bound (``"serra"``,
            ``"montufar"``, ``"raghu"``).
        d_in: the input dimension n_0.
        widths: the hidden widths n_1..n_L.
        per_layer: the bound for the network made of the first l hidden layers, l = 1..L.
        bound: the bound for the whole network (``per_layer[-1]``), an exact int.
        log10_bound: log10 of ``bound``, a float even when ``bound`` has thousands of digits.

    ``to_dict()`` keeps the ints exact; ``to_frame()`` gives the bound per layer (exact) and
    its log10, which ``plot()`` draws.
    """

    _curve = (layer_index("per_layer"), "per_layer",
              ("log10_per_layer", lambda bound: [math.log10(b) for b in bound.per_layer]))
    _headline = "log10_per_layer"

    kind: str
    method: str
    d_in: int
    widths: tuple[int, ...]
    per_layer: tuple[int, ...]
    bound: int
    log10_bound: float


@constrained(d_in=COUNT, widths=WIDTHS, construction=Choice.literal(LowerConstruction),
             max_bits=MAX_BITS)
def max_regions_lower_bound(
    d_in: int,
    widths: Sequence[int],
    *,
    construction: LowerConstruction = "montufar",
    max_bits: Optional[int] = DEFAULT_MAX_BITS,
) -> RegionCountBound:
    """Lower bound on the maximal number of linear regions of a deep ReLU network.

    Some choice of weights reaches at least this many regions, so the maximum over weights is
    at least this. With input dimension n_0 and hidden widths n_1..n_L:

    ``construction="montufar"`` (default): Montufar, Pascanu, Cho and Bengio, "On the Number of
    Linear Regions of Deep Neural Networks", NIPS 2014, Theorem 4: when every n_i >= n_0,

        N_max >= ( prod_{i=1}^{L-1} floor(n_i / n_0)^{n_0} ) * sum_{j=0}^{n_0} C(n_L, j),

    which is Omega((n / n_0)^{(L-1) n_0} n^{n_0}) at equal widths n (Corollary 5). Each of the
    first L - 1 layers folds its input onto itself floor(n_i / n_0)^{n_0} times and the last
    layer cuts the folded space with n_L hyperplanes in general position. The theorem needs
    n_i >= n_0; for narrower layers this function applies it with n_0 replaced by
    d = min(n_0, n_1, ..., n_L): a network may ignore all but d input coordinates, its regions
    are then cylinders over those of a network on R^d, so the bound stays valid (and is the
    paper's value when every n_i >= n_0). The value is not monotone in n_0: a network on more
    inputs can fold fewer times (widths (3, 3, 3): 36 at n_0 = 1, 7 at n_0 = 2).

    ``construction="arora"``: Arora, Basu, Mianjy and Mukherjee, "Understanding Deep Neural
    Networks with Rectified Linear Units", ICLR 2018 (arXiv 1611.01491, the zonotope
    construction, Theorem 2.11(i) in the numbering Serra et al. 2018 cite): a first layer of
    2m units computes a function with one piece per vertex of a zonotope with m generators in
    R^{n_0}, and each further layer of w >= 2 units multiplies the pieces by w (a
    one-dimensional construction):

        N_max >= 2 sum_{j=0}^{n_0 - 1} C(m - 1, j) * w^{L-1},
        m = floor(n_1 / 2),  w = min(n_2, ..., n_L).

    The paper takes n_1 = 2m and equal widths w; spare units can be switched off (zero weights
    and bias), so the floor and the min keep the bound valid. It grows with the size of the
    network rather than with each width, and can beat Montufar's when the widths are close to
    n_0 (n_0 = 10, widths (8, 8, 8): 1024 against 256). It needs n_1 >= 2 and, beyond one
    layer, every n_l >= 2.

    Args:
        d_in: the input dimension n_0 >= 1.
        widths: the hidden widths n_1..n_L, each an integer >= 1.
        construction: ``"montufar"`` (default: the classic bound, in terms of each width) or
            ``"arora"``.
        max_bits: refuse (:class:`~nngauge.errors.BudgetExceededError`), before any work,
            when an exact integer of the computation would take more than this many bits, or
            all of them together more than 64 times as many (default 2**22, seconds of work);
            None: no limit.

    Returns:
        A :class:`RegionCountBound` with ``kind="lower"``; ``per_layer[l - 1]`` is the same
        bound for the network made of the first l layers.

    Raises:
        InvalidInputError: d_in or a width is not a positive integer, widths is empty, the
            construction is unknown, or ``"arora"`` gets a layer narrower than 2.
        BudgetExceededError: (an InvalidInputError) the exact bound is beyond ``max_bits``.

    Example:
        >>> from nngauge.theory import max_regions_lower_bound
        >>> max_regions_lower_bound(2, [4, 4, 4]).bound  # 2^2 * 2^2 * (1 + 4 + 6)
        176
        >>> max_regions_lower_bound(1, [2, 2]).per_layer  # (1 + 2), then 2 * (1 + 2)
        (3, 6)
    """
    where = "max_regions_lower_bound()"
    d_in, widths = int(d_in), tuple(int(n) for n in widths)
    if construction == "montufar":
        dims = _running_min(d_in, widths)
        bits, folds, d_prev = [], 0.0, None
        for l, (n, d) in enumerate(zip(widths, dims)):
            if d != d_prev:  # the folds of every earlier layer change with d
                folds, d_prev = sum(d * math.log2(m // d) for m in widths[:l]), d
            elif l:
                folds += d * math.log2(widths[l - 1] // d)
            bits.append(folds + log2_regions(n, d))
        _require_bound_bits(where, "lower", construction, d_in, widths, bits, max_bits,
                            [sum_bits(n, d) for n, d in set(zip(widths, dims))])
        per_layer = _montufar_lower(d_in, widths)
    else:
        narrow = [(i, n) for i, n in enumerate(widths) if n < 2]
        if narrow:
            i, n = narrow[0]
            raise invalid(where, "widths >= 2 for construction='arora' (2m units in the first "
                          "layer, w >= 2 in the others)", f"widths[{i}]={n}",
                          "use construction='montufar', which works with every width >= 1")
        m, mins = widths[0] // 2, _running_min(widths[1] if len(widths) > 1 else 2, widths[1:])
        zonotope = 1.0 + log2_regions(m - 1, d_in - 1)
        bits = [zonotope] + [zonotope + (l + 1) * math.log2(w) for l, w in enumerate(mins)]
        _require_bound_bits(where, "lower", construction, d_in, widths, bits, max_bits,
                            [sum_bits(m - 1, d_in - 1)])
        per_layer = _arora_lower(d_in, widths)
    return _count_bound("lower", construction, d_in, widths, per_layer)


def _running_min(start: int, widths: Sequence[int]) -> list[int]:
    """min(start, n_1, ..., n_l) for l = 1..L."""
    out, low = [], start
    for n in widths:
        low = min(low, n)
        out.append(low)
    return out


def _montufar_lower(d_in: int, widths: tuple[int, ...]) -> tuple[int, ...]:
    """Montufar et al.'s bound for each prefix of the layers: the product of the folds of the
    first l - 1 layers, (n_i // d)^d, times r(n_l, d), d = min(n_0, n_1, ..., n_l)."""
    per_layer, regions = [], {}
    folds, folded, d_prev = 1, 0, None
    for l, (n, d) in enumerate(zip(widths, _running_min(d_in, widths))):
        if d != d_prev:  # the folds of every earlier layer change with d
            folds, folded, d_prev = 1, 0, d
        for m in widths[folded:l]:
            folds *= (m // d) ** d
        folded = l
        if (n, d) not in regions:
            regions[n, d] = binomial_prefix_sum(n, d)
        per_layer.append(folds * regions[n, d])
    return tuple(per_layer)


def _arora_lower(d_in: int, widths: tuple[int, ...]) -> tuple[int, ...]:
    m = widths[0] // 2
    zonotope = 2 * binomial_prefix_sum(m - 1, d_in - 1)
    per_layer, w = [zonotope], None
    for n in widths[1:]:
        w = n if w is None else min(w, n)
        per_layer.append(zonotope * w ** (len(per_layer)))
    return tuple(per_layer)


@constrained(d_in=COUNT, widths=WIDTHS, method=Choice.literal(UpperMethod), max_bits=MAX_BITS)
def max_regions_upper_bound(
    d_in: int,
    widths: Sequence[int],
    *,
    method: UpperMethod = "serra",
    max_bits: Optional[int] = DEFAULT_MAX_BITS,
) -> RegionCountBound:
    """Upper bound on the number of linear regions of a ReLU network, over all its weights.

    With input dimension n_0 and hidden widths n_1..n_L:

    ``method="serra"`` (default, the tightest): Serra, Tjandraatmadja and Ramalingam,
    "Bounding and Counting Linear Regions of Deep Neural Networks", ICML 2018, Theorem 1:

        N <= sum_{(j_1..j_L) in J} prod_{l=1}^{L} C(n_l, j_l),
        J = {(j_1..j_L) in Z^L : 0 <= j_l <= min(n_0, n_1 - j_1, ..., n_{l-1} - j_{l-1}, n_l)}.

    Within a region the hyperplanes of layer l cut a space whose dimension is at most the
    rank the earlier layers left, and a region where j_l units of layer l are off leaves at
    most n_l - j_l dimensions to the layers after it. The sum is computed exactly by dynamic
    programming over that dimension budget, d_l = min(n_0, n_1 - j_1, ..., n_l - j_l), with
    prefix sums of binomials: O(L n_0) operations on exact integers instead of the up to
    prod_l (n_l + 1) terms of J. It is Zaslavsky's count sum_{j <= n_0} C(n_1, j) (tight) for
    one layer, and prod_l (n_l + 1) for n_0 = 1, which Serra et al. show is the exact maximum
    when every n_l >= 3.

    ``method="montufar"``: Montufar, "Notes on the Number of Linear Regions of Deep Neural
    Networks", SampTA 2017: N <= prod_l sum_{j=0}^{d_l} C(n_l, j), d_l = min(n_0, n_1, ..., n_l):
    Serra's bound with n_l - j_l relaxed to n_l.

    ``method="raghu"``: Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML
    2017, Theorem 1 (its proof): prod_l sum_{j=0}^{n_0} C(n_l, j), as in
    :func:`~nngauge.theory.max_activation_patterns`.

    For every architecture serra <= montufar <= raghu, and all three are
    ``hyperplane_regions(n_1, n_0)`` for one layer.

    Args:
        d_in: the input dimension n_0 >= 1.
        widths: the hidden widths n_1..n_L, each an integer >= 1.
        method: ``"serra"`` (default), ``"montufar"`` or ``"raghu"``.
        max_bits: refuse (:class:`~nngauge.errors.BudgetExceededError`), before any work,
            when an exact integer of the computation would take more than this many bits, or
            all of them together (serra: with its tables) more than 64 times as many
            (default 2**22, seconds of work); None: no limit.

    Returns:
        A :class:`RegionCountBound` with ``kind="upper"``; ``per_layer[l - 1]`` is the same
        bound for the network made of the first l layers.

    Raises:
        InvalidInputError: d_in or a width is not a positive integer, widths is empty, or the
            method is unknown.
        BudgetExceededError: (an InvalidInputError) the exact bound is beyond ``max_bits``.

    Example:
        >>> from nngauge.theory import max_regions_upper_bound
        >>> max_regions_upper_bound(2, [2, 2]).bound  # 11 < 4 * 4 (montufar, raghu)
        11
        >>> max_regions_upper_bound(1, [3, 3, 3]).bound  # (3 + 1)^3
        64
    """
    where = "max_regions_upper_bound()"
    d_in, widths = int(d_in), tuple(int(n) for n in widths)
    dims = _running_min(d_in, widths) if method != "raghu" else [d_in] * len(widths)
    bits = list(accumulate(log2_regions(n, d) for n, d in zip(widths, dims)))  # >= serra's
    factors = set(zip(widths, dims))
    tables = 0.0
    if method == "serra":  # binomial tables and the dynamic programme's counts
        tables = sum((d + 1) * log2_comb(n, min(d, n // 2)) for n, d in factors)
        tables += max((d + 1) * b for d, b in zip(dims, bits))
    _require_bound_bits(where, "upper", method, d_in, widths, bits, max_bits,
                        [sum_bits(n, d) for n, d in factors] if method != "serra" else [],
                        tables)
    if method == "serra":
        per_layer = _serra_upper(d_in, widths)
    else:
        regions = {(n, d): binomial_prefix_sum(n, d) for n, d in factors}
        per_layer = tuple(accumulate((regions[f] for f in zip(widths, dims)),
                                     lambda a, b: a * b))
    return _count_bound("upper", method, d_in, widths, per_layer)


def _require_bound_bits(where: str, kind: str, method: str, d_in: int, widths: tuple[int, ...],
                        bits: list[float], max_bits: Optional[int], sums: list[float],
                        tables: float = 0.0) -> None:
    """Refuse a region-count bound whose exact integers exceed ``max_bits``: ``bits`` are
    (upper estimates of) log2 of the per-layer bounds, ``sums`` the bits the exact binomial
    sums behind them multiply, ``tables`` the bits of any tables held besides."""
    require_bits(where, f"the {kind} bound ({method}) for d_in={d_in} and {len(widths)} layers "
                 f"up to width {max(widths)}", max([bits[-1]] + sums),
                 sum(bits) + tables, max_bits, log10_from_log2(bits[-1]),
                 "use fewer or narrower layers, or a lower d_in")


def _serra_upper(d_in: int, widths: tuple[int, ...]) -> tuple[int, ...]:
    """Partial sums of Serra et al.'s Theorem 1 after each layer, by dynamic programming.

    ``count[d]`` is the sum of prod C(n_l, j_l) over the prefixes (j_1..j_l) allowed so far
    whose budget min(n_0, n_1 - j_1, ..., n_l - j_l) is d. Layer n takes budget d (clipped to
    n: a budget above n acts as n) to min(d, n - j) for j = 0..d: it stays d for j <= n - d
    (weight sum_{j <= n-d} C(n, j), a prefix sum) and drops to b = n - j otherwise, which
    every d > b with d >= n - b reaches with weight C(n, b) (a suffix sum over d).
    """
    top = min(d_in, widths[0])
    count = [0] * top + [1]
    per_layer, tables = [], {}
    for n in widths:
        if top > n:
            count, top = count[:n] + [sum(count[n:])], n
        if (n, top) not in tables:
            tables[n, top] = _binomials(n, top)
        binom, prefix = tables[n, top]
        suffix = list(accumulate(reversed(count)))[::-1] + [0]
        new = [count[d] * prefix[min(d, n - d)] for d in range(top + 1)]
        for b in range(top):
            new[b] += binom[b] * suffix[min(max(b + 1, n - b), top + 1)]
        count = new
        per_layer.append(sum(count))
    return tuple(per_layer)


def _binomials(n: int, top: int) -> tuple[list[int], list[int]]:
    """C(n, j) for j = 0..top and their prefix sums (one multiply and divide per term)."""
    binom = [1]
    for j in range(top):
        binom.append(binom[-1] * (n - j) // (j + 1))
    return binom, list(accumulate(binom))


def _count_bound(kind: str, method: str, d_in: int, widths: tuple[int, ...],
                 per_layer: tuple[int, ...]) -> RegionCountBound:
    return RegionCountBound(kind=kind, method=method, d_in=d_in, widths=widths,
                            per_layer=per_layer, bound=per_layer[-1],
                            log10_bound=math.log10(per_layer[-1]))


@dataclass(frozen=True)
class GaussianRegionConstants(Result):
    """Hanin and Rolnick's constants for a ReLU MLP with Gaussian weights and biases.

    Attributes:
        sigma_w: weights are N(0, sigma_w^2 / fan_in).
        sigma_b: biases are N(0, sigma_b^2).
        c_bias: 1 / (sigma_b sqrt(2 pi)), the largest value of each bias's density.
        c_grad_per_layer: sup_x E[||grad z(x)||^2]^{1/2} for a neuron z of hidden layer l,
            l = 1..depth: sigma_w (sigma_w^2 / 2)^{(l - 1) / 2}.
        c_grad: the largest of ``c_grad_per_layer`` (the paper's C_grad, a sup over neurons).

    ``to_frame()`` and ``plot()`` give C_grad per layer.
    """

    _curve = (layer_index("c_grad_per_layer"), "c_grad_per_layer")

    sigma_w: float
    sigma_b: float
    c_bias: float
    c_grad_per_layer: tuple[float, ...]
    c_grad: float


@constrained(depth=COUNT, sigma_w=POSITIVE_STD, sigma_b=BIAS_STD)
def gaussian_region_constants(
    depth: int,
    *,
    sigma_w: float = math.sqrt(2.0),
    sigma_b: float,
) -> GaussianRegionConstants:
    """C_bias and C_grad of a ReLU MLP with Gaussian weights and biases at initialization.

    The constants of Hanin and Rolnick's bounds (:func:`expected_regions_per_length`,
    :func:`expected_regions_per_volume`) for the standard initialization, weights
    N(0, sigma_w^2 / fan_in) and biases N(0, sigma_b^2):

    - C_bias = sup_b rho(b) = 1 / (sigma_b sqrt(2 pi)). Biases are independent of each other and
      of the weights, so the density of any k of them given all other parameters is the
      product of their Gaussian densities, at most C_bias^k, as both papers require.
    - C_grad,l = sup_x E[||grad z(x)||^2]^{1/2} = sigma_w (sigma_w^2 / 2)^{(l - 1) / 2} for the
      pre-activation z of any neuron of hidden layer l, at every input x and for every width
      and input dimension: 2^{1/2} at every depth with He initialization (sigma_w^2 = 2). It is
      what the one-dimensional bound needs (:func:`expected_regions_per_length`).

    Derivation of C_grad (exact, not a bound): flipping the signs of a unit's incoming weights
    and bias, which are symmetric and independent, flips the unit on or off and leaves the
    square of its directional derivative d_u z = grad z . u unchanged, so each unit is on with
    probability 1/2 independently of those squares. Along a unit vector u, E(d_u z)^2 =
    sigma_w^2 / n_0 in layer 1, and each ReLU layer of width n followed by weights of variance
    sigma_w^2 / n multiplies it by (n / 2) sigma_w^2 / n = sigma_w^2 / 2. Summing the n_0
    coordinate directions gives E||grad z||^2 = sigma_w^2 (sigma_w^2 / 2)^{l - 1}.

    The volume bound of Hanin and Rolnick (NeurIPS 2019) asks C_grad to bound higher moments of
    ||grad z|| as well, which are larger (the more so for narrow, deep networks); with this
    second-moment value :func:`expected_regions_per_volume` is an order of magnitude.

    Args:
        depth: the number of hidden layers L >= 1.
        sigma_w: weight scale > 0 (default sqrt(2): He initialization, critical for ReLU).
        sigma_b: bias standard deviation > 0 (the bounds need biases with a density).

    Returns:
        A :class:`GaussianRegionConstants`.

    Raises:
        InvalidInputError: depth is not a positive integer, sigma_w <= 0, or sigma_b <= 0.

    Example:
        >>> from nngauge.theory import gaussian_region_constants
        >>> c = gaussian_region_constants(3, sigma_b=1.0)  # He initialization
        >>> [round(g, 4) for g in c.c_grad_per_layer], round(c.c_bias, 4)
        ([1.4142, 1.4142, 1.4142], 0.3989)
    """
    depth, sigma_w, sigma_b = int(depth), float(sigma_w), float(sigma_b)
    ratio = sigma_w / math.sqrt(2.0)  # sqrt(sigma_w^2 / 2), exactly 1 at sigma_w = sqrt(2)
    per_layer = tuple(sigma_w * ratio ** (l - 1) for l in range(1, depth + 1))
    return GaussianRegionConstants(sigma_w=sigma_w, sigma_b=sigma_b,
                                   c_bias=1.0 / (sigma_b * math.sqrt(2.0 * math.pi)),
                                   c_grad_per_layer=per_layer, c_grad=max(per_layer))


@dataclass(frozen=True)
class ExpectedRegionsOnSegment(Result):
    """Hanin and Rolnick's bound on the expected number of regions along a segment.

    Attributes:
        widths: the hidden widths n_1..n_L.
        n_neurons: n_1 + ... + n_L.
        c_grad: the C_grad bound for the neurons of each layer (one per layer).
        c_bias: the bound on each bias's density.
        length: the length of the segment.
        crossings_per_length: C_bias sum_l n_l C_grad,l, the bound on the expected number of
            region boundaries crossed per unit length.
        regions: 1 + length * ``crossings_per_length``, the bound on the expected number of
            regions the segment meets.
    """

    _summary = ("crossings_per_length", "regions")

    widths: tuple[int, ...]
    n_neurons: int
    c_grad: tuple[float, ...]
    c_bias: float
    length: float
    crossings_per_length: float
    regions: float


@constrained(widths=WIDTHS, c_grad=C_GRAD, c_bias=POSITIVE_STD, length=STD)
def expected_regions_per_length(
    widths: Sequence[int],
    *,
    c_grad: float | Sequence[float],
    c_bias: float,
    length: float = 1.0,
) -> ExpectedRegionsOnSegment:
    """Bound on the expected number of regions a random ReLU network has along a segment.

    Hanin and Rolnick, "Complexity of Linear Regions in Deep Networks", ICML 2019 (arXiv
    1901.09021), Theorem 1: when the weights have a density, every bias b_z has, given all
    other weights and biases, a density at most C_bias, and C_grad bounds the moments of the
    gradient norm ||grad z(x)|| of every hidden pre-activation z (bias included), region
    boundaries cross a line about #neurons x C_grad x C_bias times per unit length on
    average: linearly in the number of neurons, not exponentially in depth. It describes
    random networks (initialization), and the paper shows typical initializations reach this
    order. On a line the second moment suffices: sup_x E[||grad z(x)||^2]^{1/2} <= C_grad.
    :func:`gaussian_region_constants` gives the constants for Gaussian weights and biases.

    Returned, for a segment x(t) = x_0 + t u (||u|| = 1, 0 <= t <= length) anywhere in input
    space:

        E[#regions met] <= 1 + length * C_bias * sum_l n_l C_grad,l,

    with C_grad,l bounding the neurons of layer l (one C_grad for all layers, as in the paper,
    or one per layer, which is tighter). Proof (the paper's co-area argument at k = 1): write
    z(x(t)) = a(t) + b_z, with a set by the other parameters and rho the density of b_z given
    them. The pattern changes only where some z changes sign, and by the Banach indicatrix
    formula E[#{t : a(t) + b_z = 0} | a] = int #{t : a(t) = -b} rho(b) db
    <= C_bias int |a'(t)| dt, where |a'(t)| = |grad z(x(t)) . u| has mean at most
    E[||grad z||^2]^{1/2} <= C_grad; sum over the neurons. The
    paper's general statement, C(#neurons, k) (2 C_grad C_bias)^k for the (n_0 - k)-dimensional
    volume of the boundary per unit volume, carries a factor 2 at k = 1 that this direct
    argument does not need.

    Args:
        widths: the hidden widths n_1..n_L, each an integer >= 1.
        c_grad: C_grad > 0, one value for every layer or a sequence of one per layer.
        c_bias: C_bias > 0, the largest value of the density of any bias.
        length: the length of the segment, >= 0 (default 1: the crossing density).

    Returns:
        An :class:`ExpectedRegionsOnSegment`.

    Raises:
        InvalidInputError: bad widths, non-positive or non-finite constants, a c_grad
            sequence whose length is not the number of layers, or a negative length.

    Example:
        >>> from nngauge.theory import expected_regions_per_length, gaussian_region_constants
        >>> c = gaussian_region_constants(3, sigma_b=1.0)
        >>> b = expected_regions_per_length([32, 32, 32], c_grad=c.c_grad_per_layer,
        ...                                 c_bias=c.c_bias, length=2.0)
        >>> round(b.crossings_per_length, 2), round(b.regions, 1)  # 96 sqrt(2) / sqrt(2 pi)
        (54.16, 109.3)
    """
    widths = tuple(int(n) for n in widths)
    grads = _per_layer_c_grad(c_grad, len(widths), "expected_regions_per_length()")
    c_bias, length = float(c_bias), float(length)
    density = c_bias * sum(n * g for n, g in zip(widths, grads))
    return ExpectedRegionsOnSegment(widths=widths, n_neurons=sum(widths), c_grad=grads,
                                    c_bias=c_bias, length=length,
                                    crossings_per_length=density, regions=1.0 + density * length)


def _per_layer_c_grad(c_grad: Any, depth: int, where: str) -> tuple[float, ...]:
    """The declared ``c_grad`` (:data:`C_GRAD`) as one value per layer."""
    if POSITIVE_STD.accepts(c_grad):
        return (float(c_grad),) * depth
    grads = tuple(float(g) for g in c_grad)
    if len(grads) != depth:
        raise invalid(where, f"c_grad as one value or {depth} values (one per hidden layer)",
                      f"{len(grads)} values", "pass one C_grad, or one per hidden layer")
    return grads


@dataclass(frozen=True)
class ExpectedRegionsInVolume(Result):
    """Hanin and Rolnick's growth law for the expected number of regions in a cube.

    Attributes:
        d_in: the input dimension n_0.
        widths: the hidden widths n_1..n_L.
        n_neurons: N = n_1 + ... + n_L.
        c_grad: the C_grad used (the largest if one per layer was given).
        c_bias: the bound on each bias's density.
        volume: the volume of the cube.
        per_volume: (N C_grad C_bias)^{n_0} / n_0! (inf where it overflows float64).
        regions: ``per_volume`` times ``volume``.
        log10_per_volume: log10 of ``per_volume``, finite also where it overflows.
        log10_regions: log10 of ``regions`` (-inf for an empty volume).
    """

    _summary = ("log10_per_volume", "log10_regions")

    d_in: int
    widths: tuple[int, ...]
    n_neurons: int
    c_grad: float
    c_bias: float
    volume: float
    per_volume: float
    regions: float
    log10_per_volume: float
    log10_regions: float


@constrained(d_in=COUNT, widths=WIDTHS, c_grad=C_GRAD, c_bias=POSITIVE_STD, volume=STD)
def expected_regions_per_volume(
    d_in: int,
    widths: Sequence[int],
    *,
    c_grad: float | Sequence[float],
    c_bias: float,
    volume: float = 1.0,
) -> ExpectedRegionsInVolume:
    """Growth law of the expected number of regions of a random ReLU network in a cube.

    Hanin and Rolnick, "Deep ReLU Networks Have Surprisingly Few Activation Patterns", NeurIPS
    2019 (arXiv 1906.00904), Theorem 1: for a ReLU network with input dimension n_0 and
    N = n_1 + ... + n_L >= n_0 neurons whose weights have a density, whose biases have
    conditional densities at most C_bias (any k of them jointly at most C_bias^k) and whose
    pre-activations have gradients with moments bounded through C_grad, there are constants
    delta_0, T > 0 depending only on C_grad and C_bias such that every cube C of side larger
    than delta_0 has

        E[#regions meeting C] / vol(C) <= (T N)^{n_0} / n_0!.

    Depth enters only through N, as for N hyperplanes in general position (N^{n_0} / n_0!
    regions to leading order), far below the maximum over weights
    (:func:`max_regions_upper_bound`, which grows like (N / L)^{L n_0} at L equal widths). It
    describes random networks; the paper finds trained networks stay near it.

    The theorem does not give T. What is returned replaces T by C_grad C_bias, the scale they
    enter the one-dimensional bound with (:func:`expected_regions_per_length`):

        regions = (N C_grad C_bias)^{n_0} / n_0! * volume,

    so the theorem reads E[#regions] <= (T / (C_grad C_bias))^{n_0} * regions with that factor
    unspecified. Use it as the law by which the count grows with N, n_0 and the volume, not as
    a certified bound; for a certified one use :func:`max_regions_upper_bound` (every weight
    setting) or :func:`expected_regions_per_length` (along a segment).

    Args:
        d_in: the input dimension n_0 >= 1.
        widths: the hidden widths n_1..n_L, each an integer >= 1, with N >= n_0.
        c_grad: C_grad > 0, one value or one per layer (the largest is used: the theorem takes
            the sup over neurons).
        c_bias: C_bias > 0, the largest value of the density of any bias.
        volume: the volume of the cube, >= 0.

    Returns:
        An :class:`ExpectedRegionsInVolume` (floats, and their log10 for large n_0).

    Raises:
        InvalidInputError: bad sizes or constants, a negative volume, or fewer neurons than
            input dimensions (where the theorem's count form does not apply).

    Example:
        >>> from nngauge.theory import expected_regions_per_volume
        >>> b = expected_regions_per_volume(2, [4, 4], c_grad=1.0, c_bias=1.0, volume=3.0)
        >>> b.per_volume, b.regions  # 8^2 / 2!, times 3
        (32.0, 96.0)
    """
    where = "expected_regions_per_volume()"
    d_in, widths = int(d_in), tuple(int(n) for n in widths)
    grad = max(_per_layer_c_grad(c_grad, len(widths), where))
    c_bias, volume = float(c_bias), float(volume)
    n_neurons = sum(widths)
    if n_neurons < d_in:
        raise invalid(where, f"at least d_in={d_in} neurons (the theorem's count form)",
                      f"{n_neurons} neurons", "use max_regions_upper_bound() (at most "
                      f"2^{n_neurons} here), or widen the network")
    scale = n_neurons * grad * c_bias
    per_volume = math.prod(scale / k for k in range(1, d_in + 1))  # inf on overflow
    log10_density = d_in * math.log10(scale) - math.lgamma(d_in + 1) / math.log(10.0)
    return ExpectedRegionsInVolume(
        d_in=d_in, widths=widths, n_neurons=n_neurons, c_grad=grad, c_bias=c_bias,
        volume=volume, per_volume=per_volume, regions=per_volume * volume if volume > 0 else 0.0,
        log10_per_volume=log10_density,
        log10_regions=log10_density + math.log10(volume) if volume > 0 else -math.inf,
    )
