"""Infinite-width kernels of fully-connected networks: NNGP (top-layer) and NTK, layer by layer.

The network (neural-tangents' ``stax.serial(Dense, *[act, Dense] * depth)``, every ``Dense``
with ``W_std = sigma_w`` and ``b_std = sigma_b``) maps x in R^d to pre-activations

    h_0(x) = (sigma_w / sqrt(d)) W_0 x + sigma_b b_0,
    h_{l+1}(x) = (sigma_w / sqrt(n_l)) W_{l+1} act(h_l(x)) + sigma_b b_{l+1},

with W, b standard normal ("ntk" parameterization, Jacot et al. 2018; Agarwal et al. 2021,
section 2, footnote 2). As the widths n_l grow, the pre-activations become a Gaussian process
with covariance K_l (the NNGP or "top-layer" kernel, Agarwal et al. 2021, section 3.1) and the
tangent kernel <grad_theta h_l(x), grad_theta h_l(x')> tends to Theta_l (the NTK, section 3.2):

    K_0 = sigma_w^2 X X^T / d + sigma_b^2,                         Theta_0 = K_0,
    K_{l+1} = sigma_w^2 E[act(u) act(v)] + sigma_b^2,
    Theta_{l+1} = K_{l+1} + sigma_w^2 Theta_l * E[act'(u) act'(v)]   (entrywise product),

where, for entry (i, j), (u, v) ~ N(0, [[K_l_ii, K_l_ij], [K_l_ij, K_l_jj]]). The Gaussian
expectations use the activation's closed form with unequal variances when it has one
(:func:`~nngauge.theory.gaussian_covariance`) and quadrature otherwise; one layer is one pure
map of :mod:`nngauge.theory._kernel_maps` (erf and relu as in-place passes computing the NNGP and
the NTK together). ``ntk(..., with_nngp=True)`` returns both kernels from one recursion, and
``layers="last"`` keeps only the deepest layer's kernels, which the recursion then computes in
place in one set of (n, n) arrays (as neural-tangents' kernel_fn, which returns the last layer).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Literal, Optional

import numpy as np

from nngauge._constraints import Choice, Flag, Integer, Maybe, Real, constrained
from nngauge._results import Result
from nngauge.activations import DEFAULT_QUADRATURE, Activation, Quadrature
from nngauge.errors import BudgetExceededError, invalid
from nngauge.theory._gaussian import resolve
from nngauge.theory._kernel_maps import (
    Block,
    KernelState,
    Parameterization,
    block,
    completed,
    input_state,
    step,
    workspace,
)
from nngauge.theory._validate import (
    ACTIVATION,
    COUNT,
    POSITIVE_STD,
    QUADRATURE,
    STD,
    as_float_array,
)

KernelKind = Literal["nngp", "ntk"]
KernelLayers = Literal["all", "last"]

DEFAULT_MAX_SECONDS = 30.0
"""Default ``max_seconds`` of :func:`nngp` and :func:`ntk`."""

_TIMED_LAYERS = 3  # layers timed before an estimate up to 4 x max_seconds is trusted

_KERNEL_OPTIONS = dict(act=ACTIVATION, depth=Integer(0), sigma_w=POSITIVE_STD, sigma_b=STD,
                       parameterization=Choice.literal(Parameterization), width=Maybe(COUNT),
                       quadrature=QUADRATURE, max_seconds=Maybe(Real(0, low_open=True)),
                       layers=Choice.literal(KernelLayers))


@dataclass(frozen=True)
class KernelTrace(Result):
    """Infinite-width kernels of the pre-activations after first_depth..depth hidden layers.

    Attributes:
        kind: ``"nngp"`` (covariance of the pre-activations: the top-layer kernel) or
            ``"ntk"`` (the neural tangent kernel of the pre-activations).
        kernels: arrays of shape (n, n), one per depth of :attr:`depths`: ``kernels[k]``
            follows ``first_depth + k`` hidden layers. With every layer kept (the default,
            ``layers="all"``) these are the ``depth + 1`` kernels 0..depth (``kernels[0]`` is
            the first Dense layer applied to the inputs); with ``layers="last"`` only the
            deepest, ``kernels[-1]`` in both cases.
        activation: label of the activation.
        sigma_w, sigma_b: weight and bias standard deviations of every Dense layer.
        parameterization: ``"ntk"`` or ``"standard"``.
        width: hidden width (used by the standard-parameterization NTK only, else None).
        nngp: for ``ntk(..., with_nngp=True)``, the NNGP trace of the same network (computed
            by the same recursion, with the same layers kept); else None.
        first_depth: hidden layers below ``kernels[0]``: 0 with every layer kept, the depth
            with ``layers="last"``.

    ``to_dict()`` adds the depth and the per-depth summaries (``condition_numbers``,
    ``mean_normalized_dot_product``), the NNGP trace under ``"nngp"`` when it is carried;
    ``to_frame()`` gives one row per kernel held (its depth, condition number and mean
    normalized dot product); ``plot()`` draws the condition number against the depth.
    """

    _curve = (("depth", lambda trace: trace.depths),
              ("condition_number", lambda trace: trace.condition_numbers()),
              ("mean_normalized_dot_product",
               lambda trace: trace.mean_normalized_dot_product()))
    _headline = "condition_number"
    _derived = ("depth", "condition_numbers", "mean_normalized_dot_product")

    kind: KernelKind
    kernels: tuple[np.ndarray, ...]
    activation: str
    sigma_w: float
    sigma_b: float
    parameterization: Parameterization
    width: Optional[int] = None
    nngp: Optional["KernelTrace"] = None
    first_depth: int = 0

    @property
    def depth(self) -> int:
        """Number of hidden layers of the deepest kernel."""
        return self.first_depth + len(self.kernels) - 1

    @property
    def depths(self) -> np.ndarray:
        """Number of hidden layers of each kernel held: first_depth..depth."""
        return np.arange(self.first_depth, self.depth + 1)

    def condition_numbers(self) -> np.ndarray:
        """lambda_max / lambda_min of each kernel (Agarwal et al. 2021, section 2 notation).

        ``inf`` for a numerically singular kernel, ``nan`` for a zero kernel: see
        :func:`condition_number`.

        Returns:
            Array of one value per kernel held (shape (depth + 1,) with every layer kept), at
            the depths :attr:`depths`.
        """
        return np.array([condition_number(k) for k in self.kernels])

    def mean_normalized_dot_product(self) -> np.ndarray:
        """Mean over pairs i != j of K_ij / sqrt(K_ii K_jj) by depth (Agarwal et al., sec. 3).

        The mean cosine similarity of the infinite-width representations; it tends to 0 with
        depth for normalized activations, which is the paper's "improving conditioning".
        ``nan`` when n < 2 or when some K_ii = 0: see :func:`mean_normalized_dot_product`.

        Returns:
            Array of one value per kernel held, at the depths :attr:`depths`.
        """
        return np.array([mean_normalized_dot_product(k) for k in self.kernels])


@constrained(**_KERNEL_OPTIONS)
def nngp(
    X: Any,
    act: Activation | str,
    depth: int,
    *,
    sigma_w: float = 1.0,
    sigma_b: float = 0.0,
    parameterization: Parameterization = "ntk",
    width: Optional[int] = None,
    quadrature: Quadrature = DEFAULT_QUADRATURE,
    max_seconds: Optional[float] = DEFAULT_MAX_SECONDS,
    layers: KernelLayers = "all",
) -> KernelTrace:
    """Infinite-width NNGP kernels K_0..K_depth of a fully-connected network on inputs X.

    K_0 = sigma_w^2 X X^T / d + sigma_b^2 and
    K_{l+1} = sigma_w^2 E[act(u) act(v)] + sigma_b^2, (u, v) ~ N(0, K_l restricted to (i, j))
    (Neal 1996; Lee et al. 2018; the top-layer kernel of Agarwal et al. 2021, section 3.1).
    ``kernels[l]`` is neural-tangents' ``nngp`` of
    ``stax.serial(Dense(W_std=sigma_w, b_std=sigma_b), *[act, Dense(...)] * l)``.

    Both parameterizations give the same NNGP: "ntk" draws W ~ N(0, 1) and multiplies by
    sigma_w / sqrt(fan_in), "standard" draws W ~ N(0, sigma_w^2 / fan_in); the bias is
    sigma_b b, b ~ N(0, 1), in both.

    Args:
        X: inputs, shape (n, d), finite.
        act: an activation or a registry name.
        depth: number of hidden layers (>= 0).
        sigma_w: weight standard deviation (> 0).
        sigma_b: bias standard deviation (>= 0).
        parameterization: ``"ntk"`` (default, as neural-tangents and Agarwal et al. 2021) or
            ``"standard"``.
        width: accepted for symmetry with :func:`ntk`; the NNGP does not depend on it.
        quadrature: rule for activations without a closed-form covariance (unused with closed
            forms). The default is accurate to ~1e-13 but costs ~65k evaluations per kernel
            entry. Cheaper rules trade accuracy, and the loss grows with the variances K_ii
            (measured on ``ntk`` of tanh, depth 3, max error relative to the kernel's largest
            entry): ``FAST_QUADRATURE`` is ~15x faster, 2e-6 at unit variances, 3e-3 at
            variance 9; ``Quadrature("hermite", 25)`` is ~300x faster, 3e-4 at unit variances
            but 0.3 at variance 9 (Gauss-Hermite is poor for steep or kinked functions, and
            for piecewise-linear ones use the default or a closed form).
        max_seconds: time budget: once the first layers have been timed, refuse
            (:class:`~nngauge.errors.BudgetExceededError`) when the whole depth would take
            longer, at the speed of the fastest layer so far (the cost per layer: erf and relu
            are a dozen passes over the upper triangle of the n x n matrices, 5-15 ms for
            n = 1000 with the NTK; other closed forms a few dozen passes; quadrature
            n (n + 1) / 2 Gaussian expectations, twice as many for :func:`ntk`, seconds for a
            few dozen inputs).
            Default 30 s; None: no limit.
        layers: which kernels to return: ``"all"`` (default), K_0..K_depth, or ``"last"``,
            K_depth only (the trace's ``kernels == (K_depth,)``, ``first_depth == depth``;
            what neural-tangents' kernel_fn returns). ``"last"`` holds one (n, n) array per
            kernel instead of depth + 1, and every layer overwrites it: erf and relu then
            allocate no (n, n) array per layer (the every-layer call writes 8 MB of fresh
            memory per layer and kernel for n = 1000: erf then takes about twice as long);
            other activations still allocate their temporaries. The values are those of the
            last layer of ``"all"``.

    Returns:
        A :class:`KernelTrace` with ``kind="nngp"``; each kernel has shape (n, n).

    Raises:
        InvalidInputError: X not 2-D / empty / non-finite, depth < 0, sigma_w <= 0,
            sigma_b < 0, an unknown parameterization or a bad quadrature.
        BudgetExceededError: (an InvalidInputError) the estimated time exceeds
            ``max_seconds``; the message gives the estimate and the per-layer cost.

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import nngp
        >>> trace = nngp(np.eye(2), "relu", 1)
        >>> np.round(trace.kernels[1], 4)  # relu of N(0, 1/2): E relu(u)^2 = 1/4
        array([[0.25  , 0.0796],
               [0.0796, 0.25  ]])
    """
    return _trace("nngp", X, act, depth, sigma_w, sigma_b, parameterization, width, quadrature,
                  max_seconds, layers=layers)


@constrained(**_KERNEL_OPTIONS, with_nngp=Flag())
def ntk(
    X: Any,
    act: Activation | str,
    depth: int,
    *,
    sigma_w: float = 1.0,
    sigma_b: float = 0.0,
    parameterization: Parameterization = "ntk",
    width: Optional[int] = None,
    quadrature: Quadrature = DEFAULT_QUADRATURE,
    max_seconds: Optional[float] = DEFAULT_MAX_SECONDS,
    with_nngp: bool = False,
    layers: KernelLayers = "all",
) -> KernelTrace:
    """Infinite-width neural tangent kernels Theta_0..Theta_depth of a fully-connected network.

    "ntk" parameterization (default; Jacot et al. 2018, Agarwal et al. 2021, section 3.2), with
    the NNGP K_l of :func:`nngp`:

        Theta_0 = K_0,
        Theta_{l+1} = K_{l+1} + sigma_w^2 Theta_l * E[act'(u) act'(v)],

    where K_{l+1} (= sigma_w^2 E[act(u) act(v)] + sigma_b^2) is the weight and bias gradient
    contribution of layer l+1 and the second term carries the gradients of the layers below.

    "standard" parameterization (W ~ N(0, sigma_w^2 / fan_in), b ~ N(0, sigma_b^2), both
    trained as drawn): the weight gradient contributes fan_in times the input kernel and the
    bias gradient 1, so with hidden width n_h = ``width``:

        Theta_0 = X X^T + 1,
        Theta_{l+1} = n_h E[act(u) act(v)] + 1 + sigma_w^2 Theta_l * E[act'(u) act'(v)].

    This NTK grows with the width (it has no infinite-width limit), hence ``width`` is
    required. ``kernels[l]`` is neural-tangents' ``ntk`` of
    ``stax.serial(Dense(width, W_std=sigma_w, b_std=sigma_b), *[act, Dense(width, ...)] * l)``
    in either parameterization.

    Args:
        X: inputs, shape (n, d), finite.
        act: an activation or a registry name; its derivative is ``act.derivative_activation()``
            (closed form when it carries one, quadrature otherwise).
        depth: number of hidden layers (>= 0).
        sigma_w: weight standard deviation (> 0).
        sigma_b: bias standard deviation (>= 0).
        parameterization: ``"ntk"`` (default) or ``"standard"``.
        width: hidden width, required for ``"standard"``, ignored for ``"ntk"``.
        quadrature: rule for activations without closed forms (see :func:`nngp`).
        max_seconds: time budget (see :func:`nngp`). Default 30 s; None: no limit.
        with_nngp: also return the NNGP kernels K_0..K_depth, which the recursion computes
            anyway, as the result's ``nngp`` trace (equal to :func:`nngp` with the same
            arguments): one call for both kernels instead of :func:`nngp` then :func:`ntk`,
            which computes the NNGP twice. Default False (the NNGP kernels are then dropped
            layer by layer, halving the memory held).
        layers: ``"all"`` (default): Theta_0..Theta_depth (and K_0..K_depth); ``"last"``:
            Theta_depth (and K_depth) only, computed in place (see :func:`nngp`).

    Returns:
        A :class:`KernelTrace` with ``kind="ntk"``; each kernel has shape (n, n). With
        ``with_nngp=True`` its ``nngp`` field is the NNGP :class:`KernelTrace`.

    Raises:
        InvalidInputError: as :func:`nngp`, and ``parameterization="standard"`` without a
            positive integer ``width``.
        BudgetExceededError: (an InvalidInputError) the estimated time exceeds
            ``max_seconds``.

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import ntk
        >>> trace = ntk(np.eye(2), "relu", 1)
        >>> np.round(trace.kernels[1], 4)  # 1/4 + 1/2 * 1/2 on the diagonal
        array([[0.5   , 0.0796],
               [0.0796, 0.5   ]])
        >>> both = ntk(np.eye(2), "relu", 1, with_nngp=True)
        >>> np.round(both.nngp.kernels[1], 4)
        array([[0.25  , 0.0796],
               [0.0796, 0.25  ]])
        >>> last = ntk(np.eye(2), "relu", 1, with_nngp=True, layers="last")
        >>> last.depth, len(last.kernels), round(float(last.nngp.kernels[0][0, 1]), 4)
        (1, 1, 0.0796)
    """
    return _trace("ntk", X, act, depth, sigma_w, sigma_b, parameterization, width, quadrature,
                  max_seconds, with_nngp, layers)


def _trace(kind, X, act, depth, sigma_w, sigma_b, parameterization, width, quadrature,
           max_seconds, with_nngp=False, layers="all"):
    where = f"{kind}()"
    X = _check_inputs(X, where)
    act = resolve(act)
    with_ntk = kind == "ntk"
    needs_width = with_ntk and parameterization == "standard"
    if needs_width and width is None:
        raise invalid(where, "width (the hidden width) with parameterization='standard'",
                      "width=None", "pass width=n_h: the standard-parameterization NTK grows "
                      "with the width")
    blk = block(act, with_ntk=with_ntk, sigma_w=sigma_w, sigma_b=sigma_b,
                parameterization=parameterization, width=int(width) if needs_width else None,
                quadrature=quadrature)
    budget = _Budget(where, int(depth), max_seconds, X.shape[0], act.label)
    keep_all = layers == "all"
    nngps, ntks = _iterate(input_state(X, blk, with_ntk=with_ntk), blk, int(depth), budget,
                           keep_nngp=not with_ntk or with_nngp, keep_all=keep_all)

    def trace(of, kernels, nngp=None):
        return KernelTrace(kind=of, kernels=tuple(kernels), activation=act.label,
                           sigma_w=blk.sigma_w, sigma_b=blk.sigma_b,
                           parameterization=parameterization,
                           width=blk.width if of == "ntk" else None, nngp=nngp,
                           first_depth=0 if keep_all else int(depth))

    if not with_ntk:
        return trace("nngp", nngps)
    return trace("ntk", ntks, nngp=trace("nngp", nngps) if with_nngp else None)


@dataclass
class _Budget:
    """``max_seconds`` for a depth iteration: after each layer, the time so far plus the
    remaining layers at the fastest layer's speed must stay within it. The first layers can
    be a few times slower than the next ones (warm caches, kernels still far from their
    limit), so before the third one only estimates over 4 x max_seconds are refused."""

    where: str
    depth: int
    max_seconds: Optional[float]
    n: int
    activation: str
    start: float = dataclasses.field(default_factory=time.perf_counter)
    fastest: float = float("inf")

    def check(self, done: int, seconds: float) -> None:
        """Refuse after ``done`` layers, the last of which took ``seconds``, if the estimate
        for all ``depth`` exceeds the budget."""
        self.fastest = min(self.fastest, seconds)
        if self.max_seconds is None or done >= self.depth:
            return
        elapsed = time.perf_counter() - self.start
        estimate = elapsed + self.fastest * (self.depth - done)
        if estimate <= self.max_seconds * (1.0 if done >= _TIMED_LAYERS else 4.0):
            return
        raise invalid(
            self.where, f"a computation within max_seconds={self.max_seconds:g}",
            f"depth={self.depth} layers for {self.n} inputs and {self.activation}, an "
            f"estimated {estimate:,.0f} s ({self.fastest * 1e3:.3g} ms per layer of "
            f"{self.n * (self.n + 1) // 2} kernel entries, the fastest of {done} timed)",
            "lower depth, pass fewer inputs, use a cheaper quadrature (e.g. "
            "nngauge.activations.FAST_QUADRATURE) or an activation with a closed-form "
            "covariance, or pass max_seconds=None (or a larger budget) to run it anyway",
            error=BudgetExceededError)


def _iterate(state: KernelState, blk: Block, depth: int, budget: _Budget, *,
             keep_nngp: bool, keep_all: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The NNGP kernels (when ``keep_nngp``) and the NTK kernels (when computed) after
    0..depth blocks (``keep_all``) or after depth blocks only, within the time ``budget``.
    Without ``keep_all`` the blocks overwrite one set of arrays (unpacked and frozen at the
    end)."""
    nngps, ntks = [], []

    def keep(s: KernelState) -> None:
        if keep_nngp:
            nngps.append(s.nngp)
        if s.ntk is not None:
            ntks.append(s.ntk)

    if keep_all:
        keep(state)
    with workspace(state.diag.shape[0]) as ws:
        for done in range(1, depth + 1):
            start = time.perf_counter()
            state = step(state, blk, ws, in_place=not keep_all)
            if keep_all:
                keep(state)
            budget.check(done, time.perf_counter() - start)
        state = completed(state, ws)
    if not keep_all:
        for kernel in (state.nngp, state.ntk):
            if kernel is not None:
                kernel.setflags(write=False)
        keep(state)
    return nngps, ntks


def _check_inputs(X: Any, where: str) -> np.ndarray:
    X = as_float_array(X, "X", where)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise invalid(where, "X of shape (n, d) with n >= 1 and d >= 1", f"shape {X.shape}",
                      "pass a 2-D array with one input per row (reshape(1, -1) for one input)")
    return X


def condition_number(K: Any) -> float:
    """lambda_max / lambda_min of a symmetric PSD kernel matrix (Agarwal et al. 2021, section 2).

    Conventions: ``inf`` when the kernel is numerically singular, lambda_min <= n eps
    lambda_max (eps the float64 machine epsilon; below that the computed lambda_min is
    round-off, not a property of the kernel); ``nan`` when lambda_max <= 0 (a zero kernel).

    Args:
        K: symmetric matrix, shape (n, n) (only its lower triangle is read, by ``eigvalsh``).

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import condition_number
        >>> condition_number(np.diag([1.0, 4.0]))
        4.0
    """
    K = _check_square(K, "condition_number()")
    eig = np.linalg.eigvalsh(K)
    lo, hi = eig[0], eig[-1]
    if hi <= 0.0:
        return float("nan")
    if lo <= K.shape[0] * np.finfo(np.float64).eps * hi:
        return float("inf")
    return float(hi / lo)


def mean_normalized_dot_product(K: Any) -> float:
    """Mean over pairs i != j of K_ij / sqrt(K_ii K_jj) (Agarwal et al. 2021, section 3, fig. 1).

    The mean cosine similarity of the representations whose Gram matrix is K. ``nan`` when
    n < 2 or some K_ii <= 0 (a direction is undefined).

    Args:
        K: symmetric matrix, shape (n, n).

    Example:
        >>> import numpy as np
        >>> from nngauge.theory import mean_normalized_dot_product
        >>> mean_normalized_dot_product(np.array([[1.0, 0.5], [0.5, 4.0]]))
        0.25
    """
    K = _check_square(K, "mean_normalized_dot_product()")
    n = K.shape[0]
    diag = np.diagonal(K)
    if n < 2 or np.any(diag <= 0.0):
        return float("nan")
    norms = np.sqrt(diag)
    cosine = K / np.outer(norms, norms)
    return float((cosine.sum() - np.trace(cosine)) / (n * (n - 1)))


def _check_square(K: Any, where: str) -> np.ndarray:
    K = as_float_array(K, "K", where)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] < 1:
        raise invalid(where, "a square kernel matrix of shape (n, n), n >= 1",
                      f"shape {K.shape}", "pass the n x n Gram / kernel matrix")
    return K
