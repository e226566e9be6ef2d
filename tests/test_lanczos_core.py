"""The Lanczos core (nngauge._internal.lanczos) against dense eigendecompositions."""

import pytest
import torch

from nngauge._internal.lanczos import Lanczos, orthogonalized, tridiagonal_eigh


def symmetric(n, seed, eigenvalues=None):
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    values = (torch.randn(n, generator=gen, dtype=torch.float64) if eigenvalues is None
              else torch.tensor(eigenvalues, dtype=torch.float64))
    return q @ torch.diag(values) @ q.T


def unit_rows(rows, n, seed):
    start = torch.randn(rows, n, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64)
    return start / start.norm(dim=1, keepdim=True)


def run(matrices, start, steps, restart=None):
    """``steps`` steps with row r's operator ``matrices[r]`` (rows, n, n)."""
    lanczos = Lanczos(start, steps)
    for step in range(steps):
        lanczos.step(torch.einsum("rnm,rm->rn", matrices, lanczos.q))
        if step + 1 < steps:
            lanczos.advance(None if restart is None else restart(step))
    return lanczos


def test_rows_run_independently_and_n_steps_give_every_eigenvalue():
    """Three operators at once: after n steps each row's Ritz values are its operator's
    eigenvalues, its basis is orthonormal and T = Q^T A Q; the same row run alone gives the
    same numbers."""
    n = 12
    matrices = torch.stack([symmetric(n, seed) for seed in range(3)])
    start = unit_rows(3, n, 7)
    together = run(matrices, start, n)
    values, _ = together.ritz()
    torch.testing.assert_close(values, torch.linalg.eigvalsh(matrices), rtol=1e-10, atol=1e-10)
    basis = together.basis.permute(1, 0, 2)  # (rows, k, n)
    eye = torch.eye(n, dtype=torch.float64).expand(3, n, n)
    torch.testing.assert_close(basis @ basis.mT, eye, rtol=0, atol=1e-12)
    t = basis @ matrices @ basis.mT
    torch.testing.assert_close(torch.diagonal(t, dim1=1, dim2=2), together.alpha, atol=1e-12,
                               rtol=0)
    torch.testing.assert_close(torch.diagonal(t, 1, 1, 2), together.beta[:, :-1], atol=1e-12,
                               rtol=0)
    alone = run(matrices[1:2], start[1:2], n)
    torch.testing.assert_close(alone.alpha, together.alpha[1:2], rtol=1e-13, atol=1e-14)


def test_residuals_are_those_of_the_ritz_vectors():
    """beta_k |e_k^T y| equals ||A u - theta u|| computed with the Ritz vector u = Q_k y."""
    n, k = 30, 8
    matrix = symmetric(n, 3)
    lanczos = run(matrix[None], unit_rows(1, n, 1), k)
    values, vectors = lanczos.ritz()
    u = lanczos.vectors(vectors)[0]  # (k, n)
    explicit = (u @ matrix - values[0, :, None] * u).norm(dim=1)
    torch.testing.assert_close(lanczos.residuals(vectors)[0], explicit, rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(u.norm(dim=1), torch.ones(k, dtype=torch.float64))


def test_an_invariant_krylov_space_stops_the_row_or_restarts_it():
    """An operator with 3 distinct eigenvalues has a 3-dimensional Krylov space: the third
    step reports it invariant. Stopped, the row keeps 3 steps (exact Ritz values, then zeros
    in T); restarted from fresh vectors, it goes on (beta_3 = 0) to every eigenvalue."""
    n = 10
    matrix = symmetric(n, 4, [3.0] * 4 + [1.0] * 3 + [-2.0] * 3)
    start = unit_rows(1, n, 5)

    stopped = Lanczos(start, n)
    invariant = []
    for step in range(n):
        invariant.append(bool(stopped.step(stopped.q @ matrix)[0]))
        if step + 1 < n:
            stopped.advance()
    assert invariant[:3] == [False, False, True]
    assert stopped.lengths.tolist() == [3] and not stopped.live.any()
    assert (stopped.alpha[0, 3:] == 0).all() and (stopped.beta[0, 2:] == 0).all()
    values, _ = tridiagonal_eigh(stopped.alpha[:, :3], stopped.beta[:, :2])
    torch.testing.assert_close(values[0], torch.tensor([-2.0, 1.0, 3.0], dtype=torch.float64))

    fresh = iter(unit_rows(n, n, 6)[:, None])
    restarted = run(matrix[None], start, n, restart=lambda step: next(fresh))
    assert restarted.lengths.tolist() == [n] and restarted.beta[0, 2] == 0
    values, _ = restarted.ritz()
    torch.testing.assert_close(values[0], torch.linalg.eigvalsh(matrix), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_orthogonalized_removes_the_projection_in_the_basis_dtype(dtype):
    basis = unit_rows(1, 6, 2).to(dtype)[None]  # one vector for one row
    w = unit_rows(1, 6, 3).to(dtype)
    rest = orthogonalized(w, basis)
    assert rest.dtype == dtype
    assert float((rest * basis[0]).sum().abs()) <= 10 * torch.finfo(dtype).eps
