"""One ``act -> Dense`` block of the infinite-width recursion, as passes over full matrices.

With (u, v) ~ N(0, [[q_i, K_ij], [K_ij, q_j]]), q = diag(K), a block maps (K, Theta) to

    K'_ij = sigma_w^2 E[act(u) act(v)] + sigma_b^2,
    Theta'_ij = own_ij + sigma_w^2 Theta_ij E[act'(u) act'(v)],

own = K' in the "ntk" parameterization and width E[act(u) act(v)] + 1 in the "standard" one
(Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural Networks", ALT 2021, sections
3.1-3.2; Jacot et al. 2018). The Gaussian expectations are computed by the first of three paths that applies:

1. erf and relu: their dual activations in covariance form, NNGP and NTK together, as in-place
   numpy passes over blocks of whole rows of the (n, n) matrices (a block of ~32k entries stays
   in cache for the dozen passes; for n >= 512 the blocks are shared among threads), with the
   diagonal q kept as a vector. Every entry gets the
   same operations on the same operands as its transpose, so each kernel is exactly symmetric
   without index bookkeeping:
   erf (Williams 1997, "Computing with infinite networks", NIPS): with s_i = 1 + 2 q_i,
       E[erf(u) erf(v)] = (2 / pi) arcsin(2 K_ij / sqrt(s_i s_j)),
       E[erf'(u) erf'(v)] = (4 / pi) / sqrt(s_i s_j - 4 K_ij^2)
   (E[exp(-u^2 - v^2)] = det(I + 2 Sigma)^(-1/2)), both from P_ij = (s_i / 2)(s_j / 2);
   relu (the arc-cosine kernels, Cho & Saul 2009, "Kernel methods for deep learning", NIPS),
   with rho_ij = K_ij / sqrt(q_i q_j) (a division by the rounded sqrt(q_i q_j), so rho is
   exactly 1 on the diagonal: arccos is not Lipschitz at 1, where an ulp of rho moves
   E[relu' relu'] by 2e-9) and pi - theta_ij = arccos(-rho_ij):
       E[relu(u) relu(v)] = ((pi - theta) K_ij + sqrt(q_i q_j) sqrt(1 - rho_ij^2)) / (2 pi),
       E[relu'(u) relu'(v)] = (pi - theta) / (2 pi).
   Each is checked against the activation's own closed forms (``covariance_fn``) at probe points
   before use, so an activation that only borrows the name never takes this path.
2. any other activation with a closed form: ``Activation.covariance_fn`` over the full matrix.
3. quadrature: the upper triangle only (each entry costs thousands of evaluations).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Optional

import numpy as np

from nngauge.activations import Activation, Quadrature
from nngauge.theory._gaussian import gaussian_covariance

Parameterization = Literal["ntk", "standard"]

_UNCLIPPED_ERF_VARIANCE = 1e6
"""Below this largest variance q, |2 K_ij / sqrt(s_i s_j)| <= 2 q / (1 + 2 q) < 1 - 5e-7 holds
with room for any round-off in K (Cauchy-Schwarz up to a few ulps), so erf's clip of the
arcsin argument to [-1, 1] is skipped."""

_PROBE_INPUTS = np.array([[0.9, -0.3], [1.4, 0.2], [-1.1, 0.8], [0.45, -0.16]])
"""Rows whose Gram matrix has unequal variances and correlations of both signs, one near 1."""


@dataclass(frozen=True)
class KernelState:
    """Kernels of the pre-activations at one depth.

    Attributes:
        nngp: K, shape (n, n), read-only.
        diag: its diagonal q, shape (n,), cached as a vector.
        ntk: Theta, shape (n, n), read-only; None when only the NNGP is computed.
    """

    nngp: np.ndarray
    diag: np.ndarray
    ntk: Optional[np.ndarray]


_BLOCK_ENTRIES = 32768
"""Entries per block of rows of the in-place passes: a few such float64 blocks fit in L2."""

MAX_THREADS = 8
"""Most threads sharing the blocks of rows (numpy releases the GIL in its passes); at most the
CPUs this process may use, and one below :data:`_THREADED_ENTRIES`. Set it to 1 for
single-threaded timings."""

_THREADED_ENTRIES = 1 << 18
"""Kernels with fewer entries (n < 512) run on the calling thread only."""


@dataclass(frozen=True)
class FastDual:
    """An in-place dual (path 1 of the module docstring).

    Attributes:
        prepare: q -> the per-layer vectors ``rows`` reads.
        rows: ``rows(K, pre, sl, cov_scale, out_K, T, carry_scale, out_T, work)`` writes, for
            the rows ``sl`` (K, out_K, T, out_T are those rows), out_K = cov_scale E[act act]
            and, when T is not None, out_T = carry_scale T E[act' act']; ``work`` is two
            arrays of K's block shape.
        applies: q -> whether the closed forms hold (relu needs every q_i > 0).
    """

    prepare: Callable[[np.ndarray], tuple]
    rows: Callable[..., None]
    applies: Callable[[np.ndarray], bool]


@dataclass(frozen=True)
class Block:
    """What one ``act -> Dense`` block needs: its activation, derivative and Dense settings,
    and the in-place dual when ``act`` has one (``fast``, else None)."""

    act: Activation
    derivative: Optional[Activation]
    sigma_w: float
    sigma_b: float
    parameterization: Parameterization
    width: Optional[int]
    quadrature: Quadrature
    fast: Optional[FastDual]


def block(act: Activation, *, with_ntk: bool, sigma_w: float, sigma_b: float,
          parameterization: Parameterization, width: Optional[int],
          quadrature: Quadrature) -> Block:
    """The :class:`Block` of ``act`` (its derivative only when the NTK is needed)."""
    derivative = act.derivative_activation() if with_ntk else None
    return Block(act=act, derivative=derivative, sigma_w=float(sigma_w), sigma_b=float(sigma_b),
                 parameterization=parameterization, width=width, quadrature=quadrature,
                 fast=_fast_dual(act, derivative))


def input_state(X: np.ndarray, blk: Block, *, with_ntk: bool) -> KernelState:
    """The first Dense layer on the raw inputs: K_0 = sigma_w^2 X X^T / d + sigma_b^2 and
    Theta_0 = K_0 ("ntk") or X X^T + 1 ("standard")."""
    d = X.shape[1]
    gram = X @ X.T
    gram += gram.T  # 2 X X^T, exactly symmetric
    nngp0 = _frozen(gram * (0.5 * blk.sigma_w**2 / d) + blk.sigma_b**2)
    ntk0 = None
    if with_ntk:
        ntk0 = nngp0 if blk.parameterization == "ntk" else _frozen(gram * 0.5 + 1.0)
    return KernelState(nngp=nngp0, diag=nngp0.diagonal().copy(), ntk=ntk0)


@dataclass(frozen=True)
class Workspace:
    """What :func:`step` reuses across layers: two work arrays of one block of rows per
    thread, and the threads (None: the calling thread only)."""

    work: tuple[tuple[np.ndarray, np.ndarray], ...]
    pool: Optional[ThreadPoolExecutor]


@contextmanager
def workspace(n: int) -> Iterator[Workspace]:
    """The :class:`Workspace` for n inputs; its threads end with the ``with`` block."""
    threads = _threads(n)
    rows = min(n, max(1, _BLOCK_ENTRIES // n))
    work = tuple((np.empty((rows, n)), np.empty((rows, n))) for _ in range(threads))
    pool = ThreadPoolExecutor(threads, thread_name_prefix="nngauge-kernels") if threads > 1 \
        else None
    try:
        yield Workspace(work=work, pool=pool)
    finally:
        if pool is not None:
            pool.shutdown()


def _threads(n: int) -> int:
    if n * n < _THREADED_ENTRIES:
        return 1
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_THREADS, available or 1))


def step(state: KernelState, blk: Block, ws: Workspace) -> KernelState:
    """One ``act -> Dense`` block: a pure map from the kernels below to the kernels above.

    ``ws`` is a :func:`workspace` (its arrays are overwritten); the returned kernels are new
    read-only arrays."""
    K, q, T = state.nngp, state.diag, state.ntk
    sw2, sb2 = blk.sigma_w**2, blk.sigma_b**2
    standard = T is not None and blk.parameterization == "standard"
    cov_scale = 1.0 if standard else sw2  # standard: keep E[act act] for the width term
    out_K = np.empty_like(K)
    out_T = None if T is None else np.empty_like(K)

    def finish(out_K, out_T, tmp):  # bias, and the layer's own NTK contribution
        if standard:
            own = np.multiply(out_K, float(blk.width), out=tmp)
            own += 1.0
            out_T += own
            out_K *= sw2
        if sb2:
            out_K += sb2
        if out_T is not None and not standard:
            out_T += out_K

    if blk.fast is not None and blk.fast.applies(q):
        pre, n, m = blk.fast.prepare(q), K.shape[0], ws.work[0][0].shape[0]
        starts = range(0, n, m)

        def rows(thread: int) -> None:  # blocks thread, thread + threads, ...
            for a in starts[thread::len(ws.work)]:
                sl = slice(a, min(a + m, n))
                w = tuple(arr[: sl.stop - a] for arr in ws.work[thread])
                T_sl, out_T_sl = (None, None) if T is None else (T[sl], out_T[sl])
                blk.fast.rows(K[sl], pre, sl, cov_scale, out_K[sl], T_sl, sw2, out_T_sl, w)
                finish(out_K[sl], out_T_sl, w[0])

        if ws.pool is None:
            rows(0)
        else:
            list(ws.pool.map(rows, range(len(ws.work))))
    else:
        _generic(K, q, blk, cov_scale, out_K, T, sw2, out_T)
        finish(out_K, out_T, np.empty_like(K) if standard else None)
    for out in (out_K, out_T):
        if out is not None:
            out.setflags(write=False)
    return KernelState(nngp=out_K, diag=out_K.diagonal().copy(), ntk=out_T)


# ---------------------------------------------------------------- path 1: erf and relu in place


def _erf_prepare(q: np.ndarray) -> tuple:
    return 0.5 + q, bool(q.max() > _UNCLIPPED_ERF_VARIANCE)  # s_i / 2, exactly


def _erf_rows(K, pre, sl, cov_scale, out_K, T, carry_scale, out_T, work):
    half_s, clip = pre
    P = _outer(half_s[sl], half_s, work[0])  # s_i s_j / 4
    if T is not None:
        D = np.multiply(K, K, out=out_T)
        np.subtract(P, D, out=D)
        np.sqrt(D, out=D)  # sqrt(s_i s_j - 4 K_ij^2) / 2 = (2 / pi) / E[erf' erf']
        np.divide(T, D, out=D)
        D *= carry_scale * (2.0 / np.pi)
    np.sqrt(P, out=P)
    A = np.divide(K, P, out=out_K)  # 2 K_ij / sqrt(s_i s_j)
    if clip:
        np.clip(A, -1.0, 1.0, out=A)
    np.arcsin(A, out=A)
    A *= cov_scale * (2.0 / np.pi)


def _relu_prepare(q: np.ndarray) -> tuple:
    return (q,)


def _relu_rows(K, pre, sl, cov_scale, out_K, T, carry_scale, out_T, work):
    (q,) = pre
    S = np.sqrt(_outer(q[sl], q, work[0]), out=work[0])  # sqrt(q_i q_j)
    R = np.divide(K, S, out=out_K)  # rho: exactly 1 on the diagonal and for equal inputs
    np.clip(R, -1.0, 1.0, out=R)
    np.negative(R, out=R)
    P = np.arccos(R, out=work[1])  # arccos(-rho) = pi - theta
    if T is not None:
        np.multiply(P, T, out=out_T)
        out_T *= carry_scale / (2.0 * np.pi)
    np.multiply(R, R, out=R)
    np.subtract(1.0, R, out=R)
    np.sqrt(R, out=R)
    R *= S  # sqrt(q_i q_j) sin(theta)
    P *= K
    R += P  # (pi - theta) K + sqrt(q_i q_j) sin(theta)
    R *= cov_scale / (2.0 * np.pi)


def _outer(col: np.ndarray, row: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out_ij = row_j col_i (exactly symmetric for col = row[sl]), faster than ufunc.outer:
    a broadcast copy, then rows times scalars."""
    out[...] = row
    return np.multiply(out, col[:, None], out=out)


def _finite(q: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(q)))


def _finite_positive(q: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(q)) and np.all(q > 0.0))


_FAST = {"erf": FastDual(_erf_prepare, _erf_rows, _finite),
         "relu": FastDual(_relu_prepare, _relu_rows, _finite_positive)}


def _fast_dual(act: Activation, derivative: Optional[Activation]) -> Optional[FastDual]:
    """The in-place dual of ``act`` when it has one and it agrees with ``act``, else None."""
    fast = _FAST.get(act.name) if not act.params else None
    if fast is None or not _agrees(fast, act, derivative):
        return None
    return fast


def _agrees(fast: FastDual, act: Activation, derivative: Optional[Activation]) -> bool:
    """True when ``fast`` equals the activation's own closed forms (to 1e-13 relative) on the
    probe kernel: the name alone does not make an activation erf or relu."""
    if act.covariance_fn is None or (derivative is not None and derivative.covariance_fn is None):
        return False
    K = _PROBE_INPUTS @ _PROBE_INPUTS.T
    q = K.diagonal().copy()
    rho = np.clip(K / np.sqrt(np.outer(q, q)), -1.0, 1.0)
    out_K, out_T = np.empty_like(K), np.empty_like(K)
    T = None if derivative is None else np.ones_like(K)
    work = (np.empty_like(K), np.empty_like(K))
    fast.rows(K, fast.prepare(q), slice(0, len(q)), 1.0, out_K, T, 1.0, out_T, work)
    pairs = [(out_K, act)] + ([] if derivative is None else [(out_T, derivative)])
    for got, of in pairs:
        want = np.asarray(of.covariance_fn(*np.broadcast_arrays(rho, q[:, None], q[None, :])))
        if not np.allclose(got, want, rtol=1e-13, atol=1e-15):
            return False
    return True


# ---------------------------------------------------------------- paths 2 and 3: any activation


def _generic(K, q, blk: Block, cov_scale, out_K, T, carry_scale, out_T) -> None:
    """out_K = cov_scale E[act act] and out_T = carry_scale T E[act' act'] by the activation's
    closed forms over the full matrix, or quadrature over the upper triangle."""
    rho = _correlations(K, q) if _has_closed_form(blk.act, blk.derivative, T) else None
    np.multiply(_dual(blk.act, K, q, rho, blk.quadrature), cov_scale, out=out_K)
    if T is not None:
        np.multiply(_dual(blk.derivative, K, q, rho, blk.quadrature), T, out=out_T)
        out_T *= carry_scale


def _has_closed_form(act: Activation, derivative: Optional[Activation], T) -> bool:
    return act.covariance_fn is not None or (T is not None and derivative.covariance_fn is not None)


def _correlations(K: np.ndarray, q: np.ndarray) -> np.ndarray:
    """rho = K_ij / sqrt(q_i q_j), 0 where q_i q_j = 0, clipped to [-1, 1] (round-off)."""
    scale = np.sqrt(np.multiply.outer(q, q))
    rho = np.divide(K, scale, out=np.zeros_like(K), where=scale > 0.0)
    return np.clip(rho, -1.0, 1.0, out=rho)


def _dual(act: Activation, K, q, rho, quadrature: Quadrature) -> np.ndarray:
    """E[act(u_i) act(u_j)] for u ~ N(0, K): the closed form over the full matrix (made exactly
    symmetric), or quadrature over the upper triangle."""
    if act.covariance_fn is None:
        return _upper_triangle_quadrature(act, K, quadrature)
    out = gaussian_covariance(act, rho, q1=q[:, None], q2=q[None, :], quadrature=quadrature)
    out += out.T
    out *= 0.5
    return out


def _upper_triangle_quadrature(act: Activation, K: np.ndarray,
                               quadrature: Quadrature) -> np.ndarray:
    """E[act(u_i) act(u_j)] for u ~ N(0, K), every (i, j); upper triangle computed once."""
    n = K.shape[0]
    i, j = np.triu_indices(n)
    diag = np.diagonal(K).copy()
    q1, q2 = diag[i], diag[j]
    scale = np.sqrt(q1 * q2)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(scale > 0.0, K[i, j] / np.where(scale > 0.0, scale, 1.0), 0.0)
    rho = np.clip(rho, -1.0, 1.0)  # Cauchy-Schwarz holds up to round-off
    upper = gaussian_covariance(act, rho, q1=q1, q2=q2, quadrature=quadrature)
    out = np.empty_like(K)
    out[i, j] = upper
    out[j, i] = upper
    return out


def _frozen(K: np.ndarray) -> np.ndarray:
    K.setflags(write=False)
    return K
