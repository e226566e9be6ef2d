"""One ``act -> Dense`` block of the infinite-width recursion, as passes over full matrices.

With (u, v) ~ N(0, [[q_i, K_ij], [K_ij, q_j]]), q = diag(K), a block maps (K, Theta) to

    K'_ij = sigma_w^2 E[act(u) act(v)] + sigma_b^2,
    Theta'_ij = own_ij + sigma_w^2 Theta_ij E[act'(u) act'(v)],

own = K' in the "ntk" parameterization and width E[act(u) act(v)] + 1 in the "standard" one
(Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural Networks", ALT 2021, sections
3.1-3.2; Jacot et al. 2018). The Gaussian expectations are computed by the first of three paths
that applies:

1. erf and relu: their dual activations in covariance form, NNGP and NTK together, as numpy
   passes over blocks of rows of the upper triangle of the (n, n) matrices (rows a..b-1,
   columns a..n-1: ~32k entries, which stay in cache for the dozen passes; for n >= 512 the
   blocks are shared among threads), with the diagonal q kept as a vector. The passes read an
   entry of K and Theta before writing it and no entry below the diagonal, so they may
   overwrite their inputs: ``step(..., in_place=True)`` keeps the upper triangles packed
   (block after block, each a contiguous array) and overwrites them layer after layer, with
   no (n, n) array per layer. The lower triangle is only filled, as the upper one's transpose
   (each kernel is exactly symmetric), for a kernel that is returned (in place: after the
   last layer):
   erf (Williams 1997, "Computing with infinite networks", NIPS): with s_i = 1 + 2 q_i,
   g_i = (s_i / 2)^(-1/2) and A_ij = g_i g_j K_ij = 2 K_ij / sqrt(s_i s_j),
       E[erf(u) erf(v)] = (2 / pi) arcsin(A_ij),
       E[erf'(u) erf'(v)] = (4 / pi) / sqrt(s_i s_j - 4 K_ij^2)
                          = (2 / pi) g_i g_j / sqrt(1 - A_ij^2)
   (E[exp(-u^2 - v^2)] = det(I + 2 Sigma)^(-1/2));
   relu (the arc-cosine kernels, Cho & Saul 2009, "Kernel methods for deep learning", NIPS),
   with S_ij = sqrt(q_i q_j), rho_ij = K_ij / S_ij (a division by the rounded sqrt(q_i q_j), so
   rho is exactly 1 on the diagonal: arccos is not Lipschitz at 1, where an ulp of rho moves
   E[relu' relu'] by 2e-9) and pi - theta_ij = arccos(-rho_ij):
       E[relu(u) relu(v)] = S_ij ((pi - theta) rho_ij + sqrt(1 - rho_ij^2)) / (2 pi),
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
        nngp: K, shape (n, n), read-only (writable between in-place steps); or, when
            ``packed``, its upper triangle as one flat array, block after block of a
            :class:`Workspace` (each block's rows a..b-1, columns a..n-1, row-major).
        diag: its diagonal q, shape (n,), cached as a vector.
        ntk: Theta, stored as K; None when only the NNGP is computed.
        packed: True after an in-place step on path 1 (which reads no other entries than the
            upper triangle's); :func:`completed` makes the (n, n) matrices.
    """

    nngp: np.ndarray
    diag: np.ndarray
    ntk: Optional[np.ndarray]
    packed: bool = False


_BLOCK_ENTRIES = 32768
"""Entries per block of rows of the in-place passes (at least one row): a few such float64
blocks fit in L2."""

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
        rows: ``rows(K, T, out_K, out_T, pre, sl, cols, cov_scale, carry_scale, work)`` writes,
            for the entries (rows ``sl``, columns ``cols``) that K, T, out_K and out_T hold,
            out_K = cov_scale E[act act] and, when T is not None, out_T = carry_scale T
            E[act' act']; it reads each entry of K and T before writing that entry of out_K or
            out_T and no other, so out_K may be K and out_T may be T. ``work`` is two arrays
            of K's shape.
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
    """What :func:`step` reuses across layers: the blocks of rows of the upper triangle, as
    (first row, end row) pairs, with their offsets in a packed kernel (``offsets[-1]`` entries
    in all) and the positions of the diagonal there; four flat work arrays of the largest block
    per thread (two for the passes, two for the block's K and Theta when they are not packed:
    numpy's passes over contiguous arrays are 1.5-3 times faster than over a strided block of
    an (n, n) matrix); the threads (None: the calling thread only)."""

    blocks: tuple[tuple[int, int], ...]
    offsets: tuple[int, ...]
    diagonal: np.ndarray
    work: tuple[tuple[np.ndarray, ...], ...]
    pool: Optional[ThreadPoolExecutor]

    def block(self, packed: np.ndarray, k: int) -> np.ndarray:
        """Block k of a packed kernel, shape (b - a, n - a), a view."""
        (a, b), n = self.blocks[k], len(self.diagonal)
        return packed[self.offsets[k]: self.offsets[k + 1]].reshape(b - a, n - a)

    def run(self, part: Callable[[int, int], None]) -> None:
        """``part(thread, block)`` for every block, block k on thread k mod threads."""
        threads = len(self.work)

        def chunk(thread: int) -> None:
            for k in range(thread, len(self.blocks), threads):
                part(thread, k)

        if self.pool is None:
            chunk(0)
        else:
            list(self.pool.map(chunk, range(threads)))


@contextmanager
def workspace(n: int) -> Iterator[Workspace]:
    """The :class:`Workspace` for n inputs; its threads end with the ``with`` block."""
    blocks, a = [], 0
    while a < n:  # rows a..b-1, columns a..n-1: ~_BLOCK_ENTRIES entries, at least one row
        b = min(n, a + max(1, _BLOCK_ENTRIES // (n - a)))
        blocks.append((a, b))
        a = b
    sizes = [(b - a) * (n - a) for a, b in blocks]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    starts = np.repeat([a for a, _ in blocks], [b - a for a, b in blocks])  # block of row i
    rows = np.arange(n)
    diagonal = offsets[:-1].repeat([b - a for a, b in blocks]) + (rows - starts) * (n - starts) \
        + rows - starts
    threads = _threads(n)
    work = tuple(tuple(np.empty(max(sizes)) for _ in range(4)) for _ in range(threads))
    pool = ThreadPoolExecutor(threads, thread_name_prefix="nngauge-kernels") if threads > 1 \
        else None
    try:
        yield Workspace(blocks=tuple(blocks), offsets=tuple(int(o) for o in offsets),
                        diagonal=diagonal, work=work, pool=pool)
    finally:
        if pool is not None:
            pool.shutdown()


def _threads(n: int) -> int:
    if n * n < _THREADED_ENTRIES:
        return 1
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_THREADS, available or 1))


def step(state: KernelState, blk: Block, ws: Workspace, *, in_place: bool = False) -> KernelState:
    """One ``act -> Dense`` block: the map from the kernels below to the kernels above.

    ``ws`` is a :func:`workspace` (its arrays are overwritten). By default the returned kernels
    are new read-only (n, n) arrays and ``state`` is left as it was. With ``in_place`` the
    block may overwrite ``state``'s arrays (those that are writable and distinct) and return
    them: on path 1 a packed state (the first such step packs a copy), which the next steps
    overwrite with no (n, n) array allocated; pass the last state to :func:`completed` for the
    matrices."""
    fast = blk.fast is not None and blk.fast.applies(state.diag)
    if fast and in_place:
        return _packed_step(state, blk, ws)
    state = completed(state, ws)  # the (n, n) matrices
    K, q, T = state.nngp, state.diag, state.ntk
    out_K = K if in_place and K.flags.writeable else np.empty_like(K)
    out_T = None if T is None else (
        T if in_place and T.flags.writeable and T is not K else np.empty_like(K))
    if fast:
        pre, n = blk.fast.prepare(q), K.shape[0]

        def upper(thread: int, k: int) -> None:  # copied to contiguous arrays and back
            a, b = ws.blocks[k]
            at = (slice(a, b), slice(a, n))
            w0, w1, Kc, Tc = (arr[: (b - a) * (n - a)].reshape(b - a, n - a)
                              for arr in ws.work[thread])
            np.copyto(Kc, K[at])
            if T is None:
                Tc = None
            else:
                np.copyto(Tc, T[at])
            _block_pass(blk, Kc, Tc, pre, at, (w0, w1))
            for out, c in ((out_K, Kc), (out_T, Tc)):
                if c is not None:
                    np.copyto(out[at], c)

        ws.run(upper)
        _mirror(ws, out_K, out_T)
    else:
        tmp = _generic(K, q, blk, 1.0 if _standard(blk, T) else blk.sigma_w**2, out_K, T,
                       blk.sigma_w**2, out_T)
        _finish(blk, out_K, out_T, tmp)
    if not in_place:
        for out in (out_K, out_T):
            if out is not None:
                out.setflags(write=False)
    return KernelState(nngp=out_K, diag=out_K.diagonal().copy(), ntk=out_T)


def completed(state: KernelState, ws: Workspace) -> KernelState:
    """``state`` with (n, n) matrices: a packed state unpacked into new writable arrays (the
    lower triangle the transpose of the upper one, so each kernel is exactly symmetric); any
    other state as it is."""
    if not state.packed:
        return state
    n = len(state.diag)
    full = [None if p is None else np.empty((n, n)) for p in (state.nngp, state.ntk)]

    def upper(thread: int, k: int) -> None:
        a, b = ws.blocks[k]
        for out, p in zip(full, (state.nngp, state.ntk)):
            if p is not None:
                out[a:b, a:] = ws.block(p, k)

    ws.run(upper)
    _mirror(ws, *full)
    return KernelState(nngp=full[0], diag=state.diag, ntk=full[1])


def _packed_step(state: KernelState, blk: Block, ws: Workspace) -> KernelState:
    """:func:`step` on path 1 in place: each block of the packed kernels is overwritten by
    the passes, as contiguous arrays."""
    if not state.packed:
        state = _packed(state, ws)
    K, T, pre, n = state.nngp, state.ntk, blk.fast.prepare(state.diag), len(state.diag)

    def upper(thread: int, k: int) -> None:
        a, b = ws.blocks[k]
        w = tuple(arr[: (b - a) * (n - a)].reshape(b - a, n - a) for arr in ws.work[thread][:2])
        _block_pass(blk, ws.block(K, k), None if T is None else ws.block(T, k), pre,
                    (slice(a, b), slice(a, n)), w)

    ws.run(upper)
    return KernelState(nngp=K, diag=K[ws.diagonal], ntk=T, packed=True)


def _packed(state: KernelState, ws: Workspace) -> KernelState:
    """The upper triangles of ``state``'s matrices, packed in new arrays."""
    K, T = state.nngp, state.ntk
    out = [None if M is None else np.empty(ws.offsets[-1]) for M in (K, T)]
    for k, (a, b) in enumerate(ws.blocks):
        for M, p in zip((K, T), out):
            if M is not None:
                ws.block(p, k)[...] = M[a:b, a:]
    return KernelState(nngp=out[0], diag=state.diag, ntk=out[1], packed=True)


def _block_pass(blk: Block, K, T, pre, at, work) -> None:
    """Path 1 on one contiguous block (the entries ``at`` of the matrices), in place:
    K <- the next NNGP, T <- the next NTK."""
    standard = _standard(blk, T)
    blk.fast.rows(K, T, K, T, pre, *at, 1.0 if standard else blk.sigma_w**2, blk.sigma_w**2,
                  work)
    _finish(blk, K, T, work[0])


def _standard(blk: Block, T) -> bool:
    """Whether the NTK is computed in the standard parameterization (the dual is then kept
    unscaled for the width term)."""
    return T is not None and blk.parameterization == "standard"


def _finish(blk: Block, out_K, out_T, tmp) -> None:
    """The bias, and the layer's own NTK contribution: out_K holds sigma_w^2 E[act act]
    (E[act act] in the standard parameterization) and out_T the carried term."""
    sw2, sb2 = blk.sigma_w**2, blk.sigma_b**2
    standard = _standard(blk, out_T)
    if standard:
        own = np.multiply(out_K, float(blk.width), out=tmp)
        own += 1.0
        out_T += own
        out_K *= sw2
    if sb2:
        out_K += sb2
    if out_T is not None and not standard:
        out_T += out_K


def _mirror(ws: Workspace, *kernels: Optional[np.ndarray]) -> None:
    """Each (n, n) kernel's lower triangle overwritten by the transpose of its upper one."""

    def lower(thread: int, k: int) -> None:  # rows a..b-1, columns 0..a-1
        a, b = ws.blocks[k]
        for out in kernels:
            if out is not None:
                out[a:b, :a] = out[:a, a:b].T

    ws.run(lower)


# ---------------------------------------------------------------- path 1: erf and relu in place


def _erf_prepare(q: np.ndarray) -> tuple:
    return 1.0 / np.sqrt(0.5 + q), bool(q.max() > _UNCLIPPED_ERF_VARIANCE)  # g_i, clip


def _erf_rows(K, T, out_K, out_T, pre, sl, cols, cov_scale, carry_scale, work):
    g, clip = pre
    G = _outer(g[sl], g[cols], work[0])  # g_i g_j = 2 / sqrt(s_i s_j)
    A = np.multiply(K, G, out=work[1])  # 2 K_ij / sqrt(s_i s_j)
    if clip:
        np.clip(A, -1.0, 1.0, out=A)
    if T is not None:
        C = np.multiply(T, G, out=G)
        R = np.multiply(A, A, out=out_T)  # T has been read
        np.subtract(1.0, R, out=R)
        np.sqrt(R, out=R)
        np.divide(C, R, out=R)  # T_ij g_i g_j / sqrt(1 - A_ij^2) = (pi / 2) T E[erf' erf']
        R *= carry_scale * (2.0 / np.pi)
    np.arcsin(A, out=out_K)
    out_K *= cov_scale * (2.0 / np.pi)


def _relu_prepare(q: np.ndarray) -> tuple:
    return (q,)


def _relu_rows(K, T, out_K, out_T, pre, sl, cols, cov_scale, carry_scale, work):
    (q,) = pre
    S = np.sqrt(_outer(q[sl], q[cols], work[0]), out=work[0])  # sqrt(q_i q_j)
    R = np.divide(K, S, out=work[1])  # rho: exactly 1 on the diagonal and for equal inputs
    np.clip(R, -1.0, 1.0, out=R)
    np.negative(R, out=R)
    P = np.arccos(R, out=out_K)  # arccos(-rho) = pi - theta; K has been read
    if T is not None:
        np.multiply(P, T, out=out_T)
        out_T *= carry_scale / (2.0 * np.pi)
    P *= R  # -(pi - theta) rho
    np.multiply(R, R, out=R)
    np.subtract(1.0, R, out=R)
    np.sqrt(R, out=R)  # sin(theta)
    np.subtract(R, P, out=P)
    P *= S  # sqrt(q_i q_j) ((pi - theta) rho + sin(theta))
    P *= cov_scale / (2.0 * np.pi)


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
    every = slice(0, len(q))
    fast.rows(K, T, out_K, out_T, fast.prepare(q), every, every, 1.0, 1.0, work)
    pairs = [(out_K, act)] + ([] if derivative is None else [(out_T, derivative)])
    for got, of in pairs:
        want = np.asarray(of.covariance_fn(*np.broadcast_arrays(rho, q[:, None], q[None, :])))
        if not np.allclose(got, want, rtol=1e-13, atol=1e-15):
            return False
    return True


# ---------------------------------------------------------------- paths 2 and 3: any activation


def _generic(K, q, blk: Block, cov_scale, out_K, T, carry_scale, out_T) -> np.ndarray:
    """out_K = cov_scale E[act act] and out_T = carry_scale T E[act' act'] by the activation's
    closed forms over the full matrix, or quadrature over the upper triangle; both expectations
    are computed before either output is written (out_K may be K, out_T may be T). Returns a
    scratch array of K's shape (its values no longer needed)."""
    rho = _correlations(K, q) if _has_closed_form(blk.act, blk.derivative, T) else None
    cov = _dual(blk.act, K, q, rho, blk.quadrature)
    if T is not None:
        carry = _dual(blk.derivative, K, q, rho, blk.quadrature)
        np.multiply(carry, T, out=out_T)
        out_T *= carry_scale
    np.multiply(cov, cov_scale, out=out_K)
    return cov


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
