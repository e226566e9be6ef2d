"""Jacobian machinery over a batch: probes, exact rows and operator norms by power iteration.

All functions take an input batch ``x`` (requires_grad) and an output ``y = f(x)`` whose graph
is kept (``retain_graph=True``), so one forward pass serves any number of backward passes.
For networks that do not couple the samples of a batch, J(X) is block diagonal and every
per-sample quantity below is that of J(x_i); for batch-coupled networks (batchnorm in train
mode) they are the rows/columns of the whole-batch Jacobian belonging to sample i.
"""

from __future__ import annotations

from typing import Optional

import torch

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


def operator_norms(x: torch.Tensor, y: torch.Tensor, *, coupled: bool, n_iter: int, tol: float,
                   generator: Optional[torch.Generator]) -> tuple[torch.Tensor, int]:
    """Largest singular values of the per-sample Jacobians J(x_i) (or of the whole-batch
    J(X) when ``coupled``) by power iteration on J^T J.

    J v comes from double backward (J^T u is linear in u, so d(J^T u . v)/du = J v) and J^T w
    from a plain backward pass: two backward passes per iteration, all samples at once.
    Iterates until every estimate changes by less than ``tol`` (relative) or ``n_iter``.

    Returns:
        (sigma, iterations): float64 tensor (b,) (or (1,) when coupled), iterations used.
    """
    u = torch.zeros_like(y, requires_grad=True)
    (jt_u,) = torch.autograd.grad(y, x, grad_outputs=u, create_graph=True)
    v = gaussian_like(x, generator)
    v = _unit(v, coupled)
    sigma = torch.zeros(1 if coupled else len(x), dtype=torch.float64)
    for iteration in range(1, n_iter + 1):
        (jv,) = torch.autograd.grad(jt_u, u, grad_outputs=v, retain_graph=True)
        (jtjv,) = torch.autograd.grad(y, x, grad_outputs=jv.detach(), retain_graph=True)
        new = _norms(jv.detach(), coupled).to(torch.float64).cpu()  # ||J v|| with ||v|| = 1
        converged = bool(((new - sigma).abs() <= tol * new.clamp_min(1e-300)).all())
        sigma = new
        if converged:
            return sigma, iteration
        v = _unit(jtjv.detach(), coupled)
    return sigma, n_iter


def _norms(t: torch.Tensor, coupled: bool) -> torch.Tensor:
    flat = t.reshape(1, -1) if coupled else t.reshape(len(t), -1)
    return flat.norm(dim=1)


def _unit(t: torch.Tensor, coupled: bool) -> torch.Tensor:
    norms = _norms(t, coupled).clamp_min(torch.finfo(t.dtype).tiny)
    shape = (1,) * t.dim() if coupled else (len(t),) + (1,) * (t.dim() - 1)
    return t / norms.reshape(shape)
