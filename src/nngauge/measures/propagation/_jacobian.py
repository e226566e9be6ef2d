"""Jacobian norms of a network (and of input -> layer sub-networks) over data.

- ``ord="op"``: the operator (spectral) norm ||J(x)||_2 of each sample's Jacobian, by the
  Lanczos method on J^T J with Jacobian-vector products (a J v and a J^T w product per step,
  all samples of a batch at once) until every estimate's relative error bound (from the
  Lanczos residual: a singular value lies within it) is at most ``tol``; each row says whether
  that was reached and the bound. All measured Jacobians map from the same input, so each
  layer's iteration starts from the previous layer's top right singular vectors (plus a fresh
  Gaussian direction). ``rms=True`` uses the operator norm induced by the
  root-mean-squared vector norm of the shrinkage paper (section 2.1):
  ||M||_op = max_v (n^{-1/2} ||M v||) / (m^{-1/2} ||v||) = ||M||_2 sqrt(m / n) for M n x m.
- ``ord="fro"``: the Frobenius norm ||J(x)||_F, estimated with Gaussian probes
  (E_u ||u J||^2 = ||J||_F^2, NLC paper section G) or exactly; ``rms=True`` divides by
  sqrt(n), the RMS gain of a random direction: E ||J v||^2 / n for v ~ N(0, I_m) equals
  (||J||_F / sqrt(n))^2 times the RMS of v squared.

For batch-coupled networks (batchnorm in train mode) the Jacobian is that of the whole batch,
J(X) (b n x b m); the operator norm is then one value per batch, and the Frobenius norm is
reported per sample as ||J(X)||_F / sqrt(b) (section G's convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._internal.adapter import MeasurementMode, ModelAdapter, NormMode
from nngauge._internal.constraints import Choice, Flag, Integer, Real, constrained
from nngauge._internal.jacobian import (
    JacobianProducts,
    exact_squared_columns,
    operator_norm_estimate,
    probe_squared_columns,
)
from nngauge._internal.probing import OUTPUT, forward_batches, site_function
from nngauge.errors import invalid
from nngauge.measures._result import MeasureResult

Ord = Literal["op", "fro"]
FroMethod = Literal["probe", "exact"]


@dataclass(frozen=True)
class JacobianNormLayer:
    """Jacobian norm statistics of the sub-network from the input to one layer.

    Attributes:
        name: the layer (``"output"`` for the whole network).
        norm: quadratic mean over samples Q_x ||J(x)|| (the NLC's convention).
        mean, median, max: over samples (over batches for a coupled operator norm).
        d_out: output dimension n (numel per sample).
        per_sample: the individual values (numpy, float64); for ``ord="fro"`` with probes,
            unbiased but noisy per-sample estimates of ||J(x)||_F^2 underlie them.
        converged: (op norm) whether the error bound reached the tolerance on every batch.
        error: (op norm) the largest relative error bound of an estimate: a singular value of
            J(x) lies within it (at most the tolerance when converged). Both None for
            ``ord="fro"``.
    """

    name: str
    norm: float
    mean: float
    median: float
    max: float
    d_out: int
    per_sample: np.ndarray = field(repr=False, compare=False)
    converged: Optional[bool] = None
    error: Optional[float] = None


@dataclass(frozen=True)
class JacobianNormResult(MeasureResult):
    """Jacobian norms over data; ``norm`` is the network output's Q_x ||J(x)||.

    Attributes:
        norm, mean, median, max: those of the output row.
        ord: "op" or "fro"; rms: whether the RMS-induced convention is used.
        layers: one :class:`JacobianNormLayer` per measured layer, the output last.
        skipped: ``{layer: reason}`` for layers that could not be measured.
        d_in: input dimension m; n_samples; batch_coupled; iterations: the largest number of
            J^T J products (Lanczos steps) used at one layer (op norm).
        tol: the relative error tolerance of the operator norms; converged: whether every layer
            reached it (both None for ``ord="fro"``).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    norm: float
    mean: float
    median: float
    max: float
    ord: str
    rms: bool
    layers: tuple[JacobianNormLayer, ...]
    skipped: dict
    d_in: int
    n_samples: int
    batch_coupled: bool
    iterations: int
    mode: MeasurementMode
    tol: Optional[float] = None
    converged: Optional[bool] = None


@constrained(ord=Choice.literal(Ord), rms=Flag(), method=Choice.literal(FroMethod),
             n_probes=Integer(1), n_iter=Integer(1), tol=Real(0, 1, open=True))
def jacobian_norm(
    model: nn.Module,
    data: Any,
    *,
    ord: Ord = "op",
    rms: bool = False,
    layers: Optional[Sequence[str]] = None,
    method: FroMethod = "probe",
    n_probes: int = 4,
    n_iter: int = 100,
    tol: float = 1e-6,
    batch_size: int = 250,
    n_batches: Optional[int] = None,
    output: Any = None,
    input_module: Optional[str] = None,
    norm_mode: Optional[NormMode] = None,
    dropout: bool = False,
    generator: Optional[torch.Generator] = None,
) -> JacobianNormResult:
    """Operator or Frobenius norms of the input-output Jacobian over data.

    Args:
        model: any module; data: any supported data form (see :func:`nngauge.nlc`).
        ord: "op" (default: the spectral norm, what bounds gradient explosion in the shrinkage
            paper's Theorem 1) or "fro".
        rms: use the RMS-normalized conventions (module docstring); default False.
        layers: also measure the sub-networks from the input to these layers (module or site
            names); default: the output only.
        method: for ``ord="fro"``: "probe" (Gaussian probes) or "exact".
        n_probes: probes per batch for the Frobenius estimate.
        n_iter, tol: most Lanczos steps (J^T J products) per layer and batch, and the
            relative error bound at which they stop (op norm).
        batch_size, n_batches, output, input_module, norm_mode, dropout, generator: as in
            :func:`nngauge.nlc`.

    Returns:
        :class:`JacobianNormResult`. J v products use double backward, or forward-mode
        differentiation where an operation has no double backward (noted in ``mode``).

    Example:
        >>> import torch
        >>> from nngauge import jacobian_norm
        >>> layer = torch.nn.Linear(4, 4, bias=False)
        >>> torch.nn.init.eye_(layer.weight)  # doctest: +ELLIPSIS
        Parameter...
        >>> round(jacobian_norm(layer, torch.randn(10, 4)).norm, 6)
        1.0
    """
    where = "jacobian_norm()"
    adapter = ModelAdapter(model, output=output, input_module=input_module,
                           norm_mode=norm_mode, dropout=dropout, where=where)
    dims: dict[str, int] = {}
    skipped: dict[str, str] = {}
    d_in, n_samples, iterations = 0, 0, 0
    with adapter.active(generator=generator, data=data):
        coupled = adapter.coupled
        chosen = [] if layers is None else adapter.sites(adapter.collect(data, 2).inputs, layers,
                                                         default_kinds=())
        values: dict[str, list[np.ndarray]] = {site.name: [] for site in chosen}
        values[OUTPUT] = []
        errors: dict[str, list[float]] = {name: [] for name in values}
        for step in forward_batches(adapter, data, chosen, batch_size=batch_size,
                                    n_batches=n_batches, generator=generator,
                                    min_batch=2 if coupled else 1):
            x, outputs = step.x, step.outputs
            start = None  # right vectors of the previous layer's Jacobian (same input space)
            d_in, n_samples = x[0].numel(), n_samples + len(x)
            for name, y in outputs.items():
                reason = _unmeasurable(y)
                if reason is not None or name in skipped:
                    if name == OUTPUT:
                        raise invalid(where, "a model output that depends differentiably on its "
                                      "input", reason,
                                      "check for detach() or no_grad() in forward()")
                    skipped.setdefault(name, reason)
                    continue
                dims[name] = y[0].numel()
                scale = math.sqrt(d_in / dims[name]) if rms and ord == "op" else (
                    1.0 / math.sqrt(dims[name]) if rms else 1.0)
                if ord == "op":
                    products = JacobianProducts(x, y, site_function(adapter, step, name, chosen),
                                                adapter.note)
                    estimate = operator_norm_estimate(products, coupled=coupled, n_iter=n_iter,
                                                      tol=tol, generator=generator, start=start)
                    sigma, start = estimate.sigma, estimate.v
                    iterations = max(iterations, estimate.iterations)
                    errors[name].append(estimate.error)
                else:
                    squared = (exact_squared_columns(x, y) if method == "exact"
                               else probe_squared_columns(x, y, n_probes, generator))
                    sigma = (squared.sum().reshape(1) / len(x) if coupled else squared).sqrt()
                values[name].append(sigma.numpy() * scale)
    rows = tuple(_row(name, np.concatenate(v), dims[name], errors[name], tol)
                 for name, v in values.items() if name not in skipped and v)
    out = rows[-1]
    op = ord == "op"
    return JacobianNormResult(norm=out.norm, mean=out.mean, median=out.median, max=out.max,
                              ord=ord, rms=rms, layers=rows, skipped=skipped, d_in=d_in,
                              n_samples=n_samples, batch_coupled=coupled, iterations=iterations,
                              mode=adapter.mode, tol=tol if op else None,
                              converged=all(r.converged for r in rows) if op else None)


def _unmeasurable(y: Optional[torch.Tensor]) -> Optional[str]:
    if y is None:
        return "not called by the forward pass"
    if not y.requires_grad:
        return "no differentiable path from the input"
    return None


def _row(name: str, values: np.ndarray, d_out: int, errors: list[float],
         tol: float) -> JacobianNormLayer:
    error = max(errors) if errors else None
    return JacobianNormLayer(name=name, norm=float(np.sqrt(np.mean(values ** 2))),
                             mean=float(values.mean()), median=float(np.median(values)),
                             max=float(values.max()), d_out=d_out, per_sample=values,
                             converged=None if error is None else error <= tol, error=error)

