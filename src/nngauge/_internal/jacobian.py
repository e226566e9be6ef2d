"""Jacobian machinery over a batch: probes, exact rows and operator norms (exact by forward mode
over the input basis, or Lanczos).

The reverse-mode functions take an input batch ``x`` (requires_grad) and an output
``y = f(x)`` whose graph is kept (``retain_graph=True``), so one forward pass serves any number
of backward passes; :func:`exact_operator_norms` reruns the network in forward mode instead.
For networks that do not couple the samples of a batch, J(X) is block diagonal and every
per-sample quantity below is that of J(x_i); for batch-coupled networks (batchnorm in train
mode) they are the rows/columns of the whole-batch Jacobian belonging to sample i.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from nngauge._internal.adapter import mappable_batch_statistics
from nngauge._internal.lanczos import Lanczos
from nngauge._internal.probing import gaussian_like

EXACT_CHUNK = 256
"""Output coordinates back-propagated together by :func:`exact_squared_columns`."""


def probe_squared_columns(x: torch.Tensor, y: torch.Tensor, n_probes: int,
                          generator: Optional[torch.Generator]) -> torch.Tensor:
    """Per-sample ||u J(X)||^2 restricted to sample i's inputs, for Gaussian probes u
    (NLC paper section G: E_u ||u J||^2 = ||J||_F^2), averaged over ``n_probes``; float64 (b,)."""
    if n_probes == 1:
        (g,) = torch.autograd.grad(y, x, grad_outputs=gaussian_like(y, generator),
                                   retain_graph=True)
        return g.detach().reshape(len(x), -1).pow(2).sum(1).to(torch.float64).cpu()
    u = gaussian_like(y, generator, n_probes)
    (g,) = torch.autograd.grad(y, x, grad_outputs=u, retain_graph=True, is_grads_batched=True)
    return g.detach().reshape(n_probes, len(x), -1).pow(2).sum(2).mean(0).to(torch.float64).cpu()


def exact_squared_columns(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample squared Frobenius norm of the columns of J(X) = dy/dx that belong to sample
    i, by batched backward passes over the standard basis of y (``EXACT_CHUNK`` at a time:
    y.numel() backward passes in all); float64 (b,)."""
    n_rows = y.numel()
    total = torch.zeros(len(x), dtype=torch.float64, device=x.device)
    for start in range(0, n_rows, EXACT_CHUNK):
        rows = torch.arange(start, min(start + EXACT_CHUNK, n_rows), device=y.device)
        basis = torch.zeros(len(rows), n_rows, dtype=y.dtype, device=y.device)
        basis[torch.arange(len(rows), device=y.device), rows] = 1.0
        (g,) = torch.autograd.grad(y, x, grad_outputs=basis.reshape(len(rows), *y.shape),
                                   retain_graph=True, is_grads_batched=True)
        total += g.detach().reshape(len(rows), len(x), -1).pow(2).sum((0, 2)).to(torch.float64)
    return total.cpu()


class JacobianProducts:
    """Products with the Jacobian J = dy/dx of one measured output over a batch.

    J^T w is one backward pass on the kept graph. J v comes from double backward (J^T u is
    linear in u, so d(J^T u . v)/du = J v), which reuses that graph; where an operation has
    no double backward (hardsigmoid, fused attention kernels) J v is computed in forward
    mode instead: ``forward(x_dual)`` reruns the model on a dual tensor (mkldnn kernels off,
    since LSTM's have no forward-mode derivative) and the output's tangent is J v. The
    fallback is announced once through ``note``.

    Args:
        x: the batch (requires grad), y: the output with its graph kept.
        forward: maps inputs shaped like x to the same output y (for forward mode).
        note: called with a sentence when the forward-mode fallback is taken.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor,
                 forward: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 note: Optional[Callable[[str], None]] = None) -> None:
        self.x, self.y, self.forward, self.note = x, y, forward, note
        self._u: Optional[torch.Tensor] = None
        self._jt_u: Optional[torch.Tensor] = None
        self._forward_mode = False

    def vjp(self, w: torch.Tensor) -> torch.Tensor:
        """J^T w, shaped like x."""
        (g,) = torch.autograd.grad(self.y, self.x, grad_outputs=w, retain_graph=True)
        return g.detach()

    def jvp(self, v: torch.Tensor) -> torch.Tensor:
        """J v, shaped like y."""
        if not self._forward_mode:
            try:
                return self._double_backward(v)
            except (RuntimeError, NotImplementedError) as exc:
                if self.forward is None or "not implemented" not in str(exc).lower():
                    raise
                self._forward_mode = True
                if self.note is not None:
                    self.note("double backward is not implemented for an operation of this "
                              f"model ({str(exc).splitlines()[0]}); Jacobian-vector products "
                              "used forward-mode automatic differentiation")
        return self._forward_tangent(v)

    def _double_backward(self, v: torch.Tensor) -> torch.Tensor:
        if self._jt_u is None:
            self._u = torch.zeros_like(self.y, requires_grad=True)
            (self._jt_u,) = torch.autograd.grad(self.y, self.x, grad_outputs=self._u,
                                                create_graph=True)
        (jv,) = torch.autograd.grad(self._jt_u, self._u, grad_outputs=v, retain_graph=True)
        return jv.detach()

    def _forward_tangent(self, v: torch.Tensor) -> torch.Tensor:
        tangent = forward_tangents(lambda x: {"y": self.forward(x)}, self.x, v)["y"][1]
        return torch.zeros_like(self.y) if tangent is None else tangent


def forward_tangents(run: Callable[[torch.Tensor], dict], x: torch.Tensor, v: torch.Tensor
                     ) -> dict[str, tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """Values and tangents J v of every tensor ``run(x)`` returns by name, from one
    forward-mode pass at x in direction v (a tangent is None for a value that does not
    depend on x). Kernels without forward-mode derivatives in oneDNN (LSTM) are avoided by
    retrying with oneDNN off; other missing derivatives raise NotImplementedError."""
    return _without_onednn(lambda: _dual_pass(run, x, v))


def _without_onednn(call: Callable[[], dict]) -> dict:
    """``call()``, retried with oneDNN off where one of its kernels (LSTM) has no forward-mode
    derivative."""
    try:
        return call()
    except (NotImplementedError, RuntimeError) as exc:
        if "mkldnn" not in str(exc):
            raise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # toggling oneDNN (on entry and exit) warns about TF32
        with torch.backends.mkldnn.flags(enabled=False):
            return call()


def _dual_pass(run, x, v):
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        outputs = run(fwAD.make_dual(x.detach(), v.to(x.dtype)))
        unpacked = {name: fwAD.unpack_dual(value) for name, value in outputs.items()
                    if value is not None}
        return {name: (u.primal.detach(), None if u.tangent is None else u.tangent.detach())
                for name, u in unpacked.items()}


EXACT_MEMORY = 256 * 2 ** 20
"""Bytes of Jacobian entries :func:`exact_operator_norms` holds at once (samples are taken in
chunks to stay within it)."""


def exact_jacobian_bytes(x: torch.Tensor, out_numel: int, *, coupled: bool) -> int:
    """Bytes of the smallest Jacobian block :func:`exact_operator_norms` must hold: every
    measured output's Jacobian for one sample (out_numel x m), or for the whole batch
    (b out_numel x b m) when ``coupled``."""
    per_sample = out_numel * x[0].numel() * x.element_size()
    return per_sample * len(x) ** 2 if coupled else per_sample


def exact_operator_norms(run: Callable[[torch.Tensor, torch.Tensor], dict], x: torch.Tensor,
                         *, coupled: bool, out_numel: int, model: Optional[nn.Module] = None,
                         memory: int = EXACT_MEMORY) -> dict[str, torch.Tensor]:
    """Exact largest singular values of the Jacobians J_l = d y_l / dx of every output y_l that
    ``run`` returns, all from one batched forward-mode pass over the input basis.

    All J_l map from the same input, so the m tangents e_1..e_m (m = x[0].numel()) give every
    J_l's columns at once: the cost is that of m forward passes whatever the depth (Lanczos
    needs a J v and a J^T w product through the network's prefix per step and layer).
    ||J_l||_2 = sqrt(lambda_max(G)) with G = J_l^T J_l or J_l J_l^T, whichever is smaller,
    by a symmetric eigensolver in float64 (exact up to rounding; error 0 is reported).

    The tangents are mapped with ``torch.func.vmap`` over ``torch.func.jvp`` (the primal pass
    runs once, not once per tangent). Per-sample networks: tangent j is e_j in every sample
    of a chunk (the Jacobian is block diagonal), chunks keeping m x chunk x out_numel
    entries within ``memory``; where the model cannot be mapped, each chunk is repeated m
    times along the batch instead, copy j carrying e_j (one dual forward pass). Batch-coupled
    networks (batchnorm in train mode): the whole batch's Jacobian J(X) (b n_l x b m) from
    its b m basis tangents (batch statistics recomputed per tangent, no running buffers
    touched).

    Args:
        run: (inputs shaped like x or a repetition of its rows, rows: the index (len(inputs),)
            of the batch sample each input row is) -> {name: output (len(inputs), ...)}; a
            None value (a layer the pass did not reach) is left out.
        x: the batch (b, ...); out_numel: sum over the outputs of their numel per sample.
        model: the network ``run`` calls (coupled: its batchnorm buffers are set aside).

    Returns:
        {name: float64 (b,)} per sample, or (1,) for the whole batch when ``coupled``.

    Raises:
        NotImplementedError: the transformed pass failed where the plain one ran: an
            operation without a forward-mode derivative or (coupled) a ``torch.func`` rule,
            or a model that refuses the repeated batch; callers fall back to Lanczos.
    """
    x = x.detach()
    try:
        if coupled:
            jacobians = _batch_jacobians(run, x, model, out_numel, memory)
            return {name: _top_singular(j[None]) for name, j in jacobians.items()}
        return _per_sample_norms(run, x, out_numel, memory)
    except (RuntimeError, ValueError) as exc:  # also nngauge's errors chained from one
        cause = exc if exc.__cause__ is None else exc.__cause__
        if not isinstance(cause, RuntimeError) or isinstance(cause, torch.OutOfMemoryError):
            raise
        raise NotImplementedError(str(cause)) from exc


def _per_sample_norms(run, x: torch.Tensor, out_numel: int, memory: int
                      ) -> dict[str, torch.Tensor]:
    """{name: ||J_l(x_i)||_2 (b,)} of a per-sample network, a chunk of samples at a time."""
    m = x[0].numel()
    chunk = max(1, memory // max(1, exact_jacobian_bytes(x, out_numel, coupled=False)))
    basis = torch.eye(m, dtype=x.dtype, device=x.device)
    norms: dict[str, list[torch.Tensor]] = {}
    mapped = True
    for start in range(0, len(x), chunk):
        rows = torch.arange(start, min(start + chunk, len(x)), device=x.device)
        tangents = basis[:, None, :].expand(m, len(rows), m).reshape(m, len(rows), *x.shape[1:])
        if mapped:
            try:
                outputs = _mapped_tangents(run, x[rows], rows, tangents)
            except (RuntimeError, ValueError, NotImplementedError):
                mapped = False  # e.g. an autograd.Function without vmap support
        if not mapped:
            outputs = _repeated_tangents(run, x[rows], rows, tangents)
        for name, tangent in outputs.items():  # (m, c, ...)
            jac = tangent.reshape(m, len(rows), -1).permute(1, 2, 0)  # (c, n_l, m)
            norms.setdefault(name, []).append(_top_singular(jac))
    return {name: torch.cat(parts) for name, parts in norms.items()}


def _mapped_tangents(run, x: torch.Tensor, rows: torch.Tensor, tangents: torch.Tensor,
                     model: Optional[nn.Module] = None) -> dict[str, torch.Tensor]:
    """{name: J v for each v of ``tangents`` (k, *x.shape)}, (k, ...), by vmap over jvp."""
    def tangent_outputs(v):
        return torch.func.jvp(lambda t: _present(run(t, rows)), (x,), (v,))[1]

    with torch.no_grad(), (nullcontext() if model is None else mappable_batch_statistics(model)):
        return _without_onednn(lambda: torch.func.vmap(tangent_outputs)(tangents))


def _repeated_tangents(run, x: torch.Tensor, rows: torch.Tensor, tangents: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
    """As :func:`_mapped_tangents` for a per-sample network, by one dual pass over x repeated
    k times (copy j carrying tangents[j])."""
    k = len(tangents)
    with torch.no_grad():
        outputs = forward_tangents(lambda t: run(t, rows.repeat(k)),
                                   x.repeat(k, *(1,) * (x.dim() - 1)),
                                   tangents.reshape(k * len(x), *x.shape[1:]))
    return {name: (torch.zeros_like(value) if tangent is None else tangent
                   ).reshape(k, len(x), *value.shape[1:])
            for name, (value, tangent) in outputs.items()}


def _batch_jacobians(run, x: torch.Tensor, model: Optional[nn.Module], out_numel: int,
                     memory: int) -> dict[str, torch.Tensor]:
    """The whole-batch Jacobians J(X) (b n_l, b m) of a batch-coupled network, by vmap over
    chunks of the basis tangents of the batch's input (b m of them)."""
    total = x.numel()
    chunk = max(1, memory // max(1, out_numel * len(x) * x.element_size()))
    rows = torch.arange(len(x), device=x.device)
    columns: dict[str, list[torch.Tensor]] = {}
    for start in range(0, total, chunk):
        index = torch.arange(start, min(start + chunk, total), device=x.device)
        basis = torch.zeros(len(index), total, dtype=x.dtype, device=x.device)
        basis[torch.arange(len(index), device=x.device), index] = 1.0
        outputs = _mapped_tangents(run, x, rows, basis.reshape(len(index), *x.shape), model)
        for name, tangent in outputs.items():
            columns.setdefault(name, []).append(tangent.reshape(len(tangent), -1))
    return {name: torch.cat(parts).T for name, parts in columns.items()}


def _present(outputs: dict) -> dict:
    return {name: value for name, value in outputs.items() if value is not None}


def _top_singular(jac: torch.Tensor) -> torch.Tensor:
    """Largest singular value of each (n, m) matrix of ``jac`` (c, n, m): sqrt of the top
    eigenvalue of the smaller Gram matrix, in float64 on the CPU; (c,)."""
    jac = jac.to(torch.float64)
    gram = jac.mT @ jac if jac.shape[2] <= jac.shape[1] else jac @ jac.mT
    return torch.linalg.eigvalsh(gram)[:, -1].clamp_min(0).sqrt().cpu()


START_NOISE = 0.1
"""Weight of the fresh Gaussian direction added to a warm start (relative to its unit norm):
it keeps a component along every singular vector, so the iteration still reaches the
largest singular value where the previous layer's vector is (nearly) orthogonal to it."""

LANCZOS_MEMORY = 512 * 2 ** 20
"""Bytes the Lanczos basis may take (rows x input size per vector); past it the iteration is
restarted from its Ritz vectors (see :func:`operator_norm_estimate`)."""
MIN_BASIS = 4
"""Fewest Lanczos vectors kept per cycle whatever the memory cap."""


@dataclass(frozen=True)
class NormEstimate:
    """Outcome of :func:`operator_norm_estimate`.

    Attributes:
        sigma: the estimates, float64 (b,) or (1,) when coupled; each is sqrt of a Ritz value
            of J^T J, hence a lower bound on the largest singular value.
        iterations: products J^T J q made (one J v and one J^T w each), over all cycles.
        error: the largest relative error bound r / theta over the estimates, where r is the
            Lanczos residual ||J^T J z - theta z|| of the Ritz pair (theta, z): a singular value
            of J lies within ``error`` (relative) of each estimate.
        converged: whether ``error <= tol`` was reached within the iteration budget.
        v: the Ritz vectors z (unit, shaped like x), a warm start for a related Jacobian.
    """

    sigma: torch.Tensor
    iterations: int
    error: float
    converged: bool
    v: torch.Tensor


def operator_norm_estimate(products: JacobianProducts, *, coupled: bool, n_iter: int,
                           tol: float, generator: Optional[torch.Generator],
                           start: Optional[torch.Tensor] = None,
                           memory: int = LANCZOS_MEMORY) -> NormEstimate:
    """Largest singular values of the per-sample Jacobians J(x_i) (or of the whole-batch J(X)
    when ``coupled``) by the Lanczos method on J^T J with full reorthogonalization, all
    samples at once (each its own Krylov space and tridiagonal matrix T_k), until every
    relative error bound is at most ``tol`` or after ``n_iter`` products.

    The largest eigenvalue theta of T_k is a Ritz value of J^T J; with y its unit eigenvector,
    z = Q_k y has residual ||J^T J z - theta z|| = beta_k |y_k| = r, so an eigenvalue lambda of
    J^T J lies within r of theta (Golub and Van Loan, Matrix Computations, section 10.1) and
    |sqrt(lambda) - sqrt(theta)| <= r / sqrt(theta). Ritz values never exceed the largest
    eigenvalue, and the Krylov space captures its direction far faster than power iteration
    (whose rate is (sigma_2 / sigma_1)^2 per product; deep networks have close top singular
    values), so that eigenvalue is the largest.

    The bound needs Q_k orthonormal (z a unit vector, T_k = Q_k^T J^T J Q_k): without
    reorthogonalization Q_k loses orthogonality as soon as a Ritz value converges, and copies
    of it ("ghosts") appear; so every vector of the basis is kept. Where the basis would pass
    ``memory`` bytes, the iteration is restarted from the Ritz vectors z (explicit restart:
    the new Krylov space contains z, so the estimate never decreases, and each cycle's bound
    holds as above) until ``n_iter`` products in all.

    ``start``: right vectors shaped like x to begin from (with :data:`START_NOISE` of a fresh
    Gaussian direction added), e.g. those of the input -> previous layer Jacobian, which
    shares the input space: J_l = (d y_l / d y_k) J_k. Default: a Gaussian direction.
    """
    x = products.x
    rows = 1 if coupled else len(x)
    q = gaussian_like(x, generator)
    if start is not None:
        q = start.to(x.dtype) + START_NOISE * _unit(q, coupled)
    q = _unit(q, coupled).reshape(rows, -1)
    kept = max(MIN_BASIS, memory // max(1, q.numel() * q.element_size()))
    used = 0
    while True:
        steps, theta, error, ritz = _lanczos_cycle(products, q, min(kept, n_iter - used), tol)
        used += steps
        q = _unit(ritz, False)  # one row per estimate: per sample, or the whole batch
        if error <= tol or used >= n_iter:
            break
    sigma = theta.clamp_min(0).sqrt()
    return NormEstimate(sigma, used, error, error <= tol, q.reshape(x.shape))


def _lanczos_cycle(products: JacobianProducts, q: torch.Tensor, steps: int, tol: float
                   ) -> tuple[int, torch.Tensor, float, torch.Tensor]:
    """At most ``steps`` Lanczos steps on J^T J from the unit rows of q (rows, m): (steps
    taken, top Ritz values (rows,) float64, largest relative bound, Ritz vectors (rows, m)).
    A row whose Krylov space is invariant stops there (its Ritz value is exact)."""
    run = Lanczos(q, steps)
    for step in range(1, steps + 1):
        run.step(products.vjp(products.jvp(run.q.reshape(products.x.shape))).reshape(len(q), -1))
        values, vectors = run.ritz()
        theta, y = values[:, -1], vectors[:, :, -1:]
        scale = theta.abs().clamp_min(torch.finfo(torch.float64).tiny)
        error = float((run.residuals(y)[:, 0] / scale).max())
        if error <= tol or step == steps:
            break
        run.advance()
    return step, theta, error, run.vectors(y)[:, 0]


def operator_norms(products: JacobianProducts, *, coupled: bool, n_iter: int, tol: float,
                   generator: Optional[torch.Generator]) -> tuple[torch.Tensor, int]:
    """:func:`operator_norm_estimate` from a Gaussian start, as (sigma, products used)."""
    result = operator_norm_estimate(products, coupled=coupled, n_iter=n_iter, tol=tol,
                                    generator=generator)
    return result.sigma, result.iterations


def _norms(t: torch.Tensor, coupled: bool) -> torch.Tensor:
    flat = t.reshape(1, -1) if coupled else t.reshape(len(t), -1)
    return flat.norm(dim=1)


def _unit(t: torch.Tensor, coupled: bool) -> torch.Tensor:
    norms = _norms(t, coupled).clamp_min(torch.finfo(t.dtype).tiny)
    shape = (1,) * t.dim() if coupled else (len(t),) + (1,) * (t.dim() - 1)
    return t / norms.reshape(shape)
