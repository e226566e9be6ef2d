"""The trace estimators of the curvature engine on explicit symmetric matrices: Hutchinson and
Hutch++ are unbiased with honest standard errors, Hutch++ is exact when the sketch spans the
space, and "auto" takes Hutch++ on a spectrum dominated by a few eigenvalues and Hutchinson on
a flat one (where it is the more accurate of the two at the same budget)."""

import math

import numpy as np
import pytest
import torch

from nngauge._internal.curvature import _captured_fraction, estimate_trace


class Explicit:
    """v -> C v for an explicit symmetric C (the interface the estimators read)."""

    def __init__(self, matrix: torch.Tensor):
        self.matrix, self.dim = matrix, matrix.shape[0]
        self.dtype, self.device = matrix.dtype, matrix.device

    def apply(self, vectors: torch.Tensor) -> torch.Tensor:
        return vectors @ self.matrix


def _symmetric(eigenvalues, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(len(eigenvalues), len(eigenvalues), generator=gen,
                                    dtype=torch.float64)).Q
    return Explicit(q @ torch.diag(torch.as_tensor(eigenvalues, dtype=torch.float64)) @ q.T)


def _flat(n=300):
    """A spectrum without dominant eigenvalues (as a network's Hessian at initialization)."""
    return _symmetric(np.linspace(-1.0, 2.0, n))


def _dominated(n=300):
    """Ten eigenvalues carry almost all of ||C||_F^2 (as a trained network's Hessian)."""
    return _symmetric(np.r_[np.linspace(50, 100, 10), np.full(n - 10, 0.01)])


def _errors(op, method, budget, seeds=40):
    exact = float(op.matrix.trace())
    runs = [estimate_trace(op, budget, torch.Generator().manual_seed(s), method)
            for s in range(seeds)]
    return np.array([r.trace - exact for r in runs]), runs


@pytest.mark.parametrize("method", ["hutchinson", "hutch++", "auto"])
@pytest.mark.parametrize("spectrum", [_flat, _dominated])
def test_every_method_is_unbiased_with_an_honest_standard_error(method, spectrum):
    errors, runs = _errors(spectrum(), method, 60)
    stderr = np.array([r.stderr for r in runs])
    assert all(r.products == 60 for r in runs)
    # The mean error over 40 runs is within 4 standard errors of the mean...
    assert abs(errors.mean()) < 4 * errors.std(ddof=1) / math.sqrt(len(errors))
    # ...and the reported standard errors match the spread of the estimates.
    assert 0.6 < np.sqrt((stderr**2).mean()) / errors.std(ddof=1) < 1.6


def test_auto_takes_hutchinson_on_a_flat_spectrum_and_hutchpp_on_a_dominated_one():
    flat = [r.method for r in _errors(_flat(), "auto", 60, seeds=10)[1]]
    dominated = [r.method for r in _errors(_dominated(), "auto", 60, seeds=10)[1]]
    assert set(flat) == {"hutchinson"} and set(dominated) == {"hutch++"}


@pytest.mark.parametrize("spectrum", [_flat, _dominated])
def test_auto_is_as_accurate_as_the_better_fixed_method(spectrum):
    spread = {m: _errors(spectrum(), m, 60)[0].std(ddof=1)
              for m in ("hutchinson", "hutch++", "auto")}
    assert spread["auto"] <= 1.2 * min(spread["hutchinson"], spread["hutch++"])
    assert spread["auto"] < 0.8 * max(spread["hutchinson"], spread["hutch++"])


def test_captured_fraction_is_one_for_a_low_rank_matrix_and_small_for_the_identity():
    gen = torch.Generator().manual_seed(0)
    low = _symmetric(np.r_[np.arange(1.0, 5.0), np.zeros(196)])
    sketch = torch.randint(0, 2, (20, 200), generator=gen).double() * 2 - 1
    assert _captured_fraction(low.apply(sketch)) == pytest.approx(1.0, abs=1e-10)
    identity = Explicit(torch.eye(200, dtype=torch.float64))
    assert _captured_fraction(identity.apply(sketch)) == pytest.approx(19 / 200, abs=0.03)


@pytest.mark.parametrize("method", ["hutch++", "auto"])
def test_a_budget_of_three_times_the_dimension_is_exact(method):
    op = _flat(40)
    r = estimate_trace(op, 120, torch.Generator().manual_seed(0), method)
    assert r.trace == pytest.approx(float(op.matrix.trace()), rel=1e-12, abs=1e-12)
    assert (r.stderr, r.products, r.method) == (0.0, 80, "hutch++")
