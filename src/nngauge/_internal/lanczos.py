"""The Lanczos recurrence with full reorthogonalization: one core for the Jacobian operator norms
(Lanczos on J^T J, :mod:`nngauge._internal.jacobian`) and the curvature engine (the top
eigenpairs of a Hessian or Gauss-Newton matrix and stochastic Lanczos quadrature,
:mod:`nngauge._internal.curvature`).

For a symmetric operator A and a unit start q_1, step j takes w = A q_j, alpha_j = q_j^T w,
removes from w its projection on q_1..q_j and sets beta_j = ||w||, q_{j+1} = w / beta_j, so
that Q_k^T A Q_k = T_k, the symmetric tridiagonal matrix with diagonal alpha and off-diagonal
beta. An eigenpair (theta, y) of T_k gives the Ritz pair (theta, Q_k y) of A, whose residual
is ||A Q_k y - theta Q_k y|| = beta_k |e_k^T y| (Golub and Van Loan, Matrix Computations,
4th ed., sections 10.1-10.3).

Every vector is kept and w is orthogonalized against all of them (classical Gram-Schmidt,
twice: "twice is enough", Giraud, Langou and Rozloznik, Computers & Mathematics with
Applications 2005). Without it Q_k loses orthogonality as soon as a Ritz value converges and
copies of it ("ghosts") appear; with it Q_k stays orthonormal, the residuals above are
bounds, and the quadrature weights (e_1^T y)^2 sum to one.

Several recurrences run at once, one per row of the start (each its own Krylov space and T_k):
the caller applies A to all rows in one batched product, and the basis is one preallocated
(steps, rows, n) tensor. When beta_j falls to the rounding level of the row's operator scale,
that row's Krylov space is invariant (its Ritz values are eigenvalues of A): the row is then
restarted from a fresh vector orthogonal to its basis (beta_j = 0, so T_k splits into blocks)
or stopped (its later vectors, alphas and betas are 0).

Example:
    >>> import torch
    >>> a = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    >>> run = Lanczos(torch.ones(1, 3, dtype=torch.float64) / 3 ** 0.5, steps=3)
    >>> for step in range(3):
    ...     invariant = run.step(run.q @ a)
    ...     if step < 2:
    ...         run.advance()
    >>> values, _ = run.ritz()
    >>> [round(float(v), 12) for v in values[0]]
    [1.0, 2.0, 3.0]
"""

from __future__ import annotations

from typing import Optional

import torch

BREAKDOWN = 100
"""A row's Krylov space is invariant when beta_j <= BREAKDOWN eps ||T|| (eps of the basis
dtype, ||T|| estimated by the largest |alpha_i| + beta_i so far): the remainder is then
rounding error of the products."""


def orthogonalized(w: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Each row of ``w`` (rows, n) minus its projection on that row's vectors in ``basis``
    (k, rows, n), by classical Gram-Schmidt twice."""
    for _ in range(2):
        w = w - torch.einsum("kr,krn->rn", torch.einsum("krn,rn->kr", basis, w), basis)
    return w


def tridiagonal_eigh(alpha: torch.Tensor, beta: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (rows, k), ascending, and unit eigenvectors (rows, k, k) (columns) of each
    row's symmetric tridiagonal matrix with diagonal ``alpha`` (rows, k) and off-diagonal
    ``beta`` (rows, k - 1), in float64 on the CPU."""
    t = torch.diag_embed(alpha.to(torch.float64).cpu())
    if beta.shape[1]:
        off = torch.diag_embed(beta.to(torch.float64).cpu(), offset=1)
        t = t + off + off.transpose(1, 2)
    return torch.linalg.eigh(t)


class Lanczos:
    """Lanczos recurrences from the unit rows of ``start`` (rows, n), room for ``steps``
    vectors each, in the dtype and on the device of ``start``.

    The caller alternates :meth:`step` (given w = A q for :attr:`q`) and :meth:`advance`
    (before the next product), and reads :meth:`ritz`, :meth:`residuals` and :meth:`vectors`
    after any step.

    Attributes:
        alpha, beta: (rows, steps) float64 on the CPU; the first :attr:`steps` columns are
            filled.
        steps: products absorbed (the size k of T_k).
        lengths: (rows,) steps each row took before it stopped.
        live: (rows,) bool, rows not stopped.
    """

    def __init__(self, start: torch.Tensor, steps: int) -> None:
        rows, size = start.shape
        self.basis = start.new_zeros(steps, rows, size)
        self.basis[0] = start
        self.alpha = torch.zeros(rows, steps, dtype=torch.float64)
        self.beta = torch.zeros(rows, steps, dtype=torch.float64)
        self.steps = 0
        self.lengths = torch.zeros(rows, dtype=torch.long)
        self.live = torch.ones(rows, dtype=torch.bool)
        self._scale = torch.zeros(rows, dtype=torch.float64)
        self._remainder: Optional[torch.Tensor] = None
        self._invariant = torch.zeros(rows, dtype=torch.bool)

    @property
    def q(self) -> torch.Tensor:
        """The vectors (rows, n) whose products the next :meth:`step` takes."""
        return self.basis[self.steps]

    def step(self, w: torch.Tensor) -> torch.Tensor:
        """Absorb w = A q (rows, n; 0 for stopped rows): alpha_j, the remainder orthogonal to
        the basis, beta_j its norm. Returns the live rows whose Krylov space is invariant
        (bool (rows,)); :meth:`advance` restarts or stops them."""
        j = self.steps
        q = self.basis[j]
        self.alpha[:, j] = (q.double() * w.double()).sum(1).cpu()
        remainder = orthogonalized(w, self.basis[:j + 1])
        norms = remainder.norm(dim=1)
        self.beta[:, j] = norms.double().cpu()
        self._scale = torch.maximum(self._scale, self.alpha[:, j].abs() + self.beta[:, j])
        self.lengths += self.live.long()
        self.steps = j + 1
        self._remainder = remainder / norms.clamp_min(torch.finfo(norms.dtype).tiny)[:, None]
        eps = torch.finfo(self.basis.dtype).eps
        self._invariant = self.live & (self.beta[:, j] <= BREAKDOWN * eps * self._scale)
        return self._invariant

    def advance(self, restart: Optional[torch.Tensor] = None) -> None:
        """Append q_{j+1} = w / beta_j. A row whose Krylov space is invariant gets beta_j = 0
        and restarts from its row of ``restart`` (rows, n), orthogonalized against its basis
        and normalized, or, without ``restart``, stops."""
        q, invariant, j = self._remainder, self._invariant, self.steps - 1
        if bool(invariant.any()):
            self.beta[invariant, j] = 0.0
            mask = invariant.to(q.device)[:, None]
            if restart is None:
                q = torch.where(mask, torch.zeros_like(q), q)
                self.live &= ~invariant
            else:
                fresh = orthogonalized(restart.to(q.dtype), self.basis[:self.steps])
                q = torch.where(mask, fresh / fresh.norm(dim=1, keepdim=True), q)
        self.basis[self.steps] = q

    def ritz(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Ritz values (rows, k), ascending, and the eigenvectors y (rows, k, k) of T_k, in
        float64 on the CPU."""
        k = self.steps
        return tridiagonal_eigh(self.alpha[:, :k], self.beta[:, :k - 1])

    def residuals(self, y: torch.Tensor) -> torch.Tensor:
        """||A Q_k y - theta Q_k y|| = beta_k |e_k^T y| for eigenvectors y (rows, k, p) of
        T_k; float64 (rows, p)."""
        return self.beta[:, self.steps - 1, None] * y[:, -1, :].abs()

    def vectors(self, y: torch.Tensor) -> torch.Tensor:
        """Ritz vectors Q_k y (rows, p, n) for coefficients y (rows, k, p)."""
        basis = self.basis[:self.steps]
        return torch.einsum("krn,rkp->rpn", basis, y.to(dtype=basis.dtype, device=basis.device))


__all__ = ["BREAKDOWN", "Lanczos", "orthogonalized", "tridiagonal_eigh"]
