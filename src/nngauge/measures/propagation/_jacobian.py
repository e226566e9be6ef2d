"""Jacobian norms of a network (and of input -> layer sub-networks) over data.

- ``ord="op"``: the operator (spectral) norm ||J(x)||_2 of each sample's Jacobian, by one of
  two methods (``op_method``):

  * ``"exact"``: every measured Jacobian maps from the same input, so one batched
    forward-mode pass over the m input basis directions gives all of them at once (the cost
    of about m forward passes, whatever the number of layers), and ||J||_2 is the square root
    of the largest eigenvalue of the smaller of J^T J and J J^T (error 0);
  * ``"lanczos"``: the Lanczos method on J^T J with Jacobian-vector products (a J v and a
    J^T w product through the network up to the layer per step, all samples of a batch at
    once) until every estimate's relative error bound (from the Lanczos residual: a singular
    value lies within it) is at most ``tol``; each layer's iteration starts from the previous
    layer's top right singular vectors (plus a fresh Gaussian direction). Its cost grows with
    the number of layers times their depth.

  ``"auto"`` (default) predicts both costs (:func:`choose_op_method`) and runs the cheaper;
  each row says whether the tolerance was reached and the bound (0 for exact), and the result
  which method ran. ``rms=True`` uses the operator norm induced by the
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

from nngauge._constraints import Choice, Flag, Integer, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.jacobian import (
    EXACT_MEMORY,
    JacobianProducts,
    exact_jacobian_bytes,
    exact_operator_norms,
    exact_squared_columns,
    operator_norm_estimate,
    probe_squared_columns,
)
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import OUTPUT, forward_batches, site_function
from nngauge._results import Result
from nngauge.errors import invalid

Ord = Literal["op", "fro"]
FroMethod = Literal["probe", "exact"]
OpMethod = Literal["auto", "exact", "lanczos"]

EXPECTED_STEPS = 12
"""Lanczos steps per layer the cost prediction assumes: tol 1e-6 on random ReLU MLPs of width
512 takes 11-16 at most layers (the first, from a random start, up to 40; warm starts make the
others cheaper)."""
STEP_COST = 2.0
"""Cost of one Lanczos step (a double-backward J v and a backward J^T w product) through the
whole network, in units of one vmapped forward-mode tangent over the same batch (measured on
CPU, one thread, on mlp(m, 512, 10, 10) for m = 16, 64, 256, output only: exact and Lanczos
times implied 1.5 to 2.4)."""


@dataclass(frozen=True)
class JacobianNormLayer(Result):
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
class JacobianNormResult(Result):
    """Jacobian norms over data; ``norm`` is the network output's Q_x ||J(x)||.

    Attributes:
        norm, mean, median, max: those of the output row.
        ord: "op" or "fro"; rms: whether the RMS-induced convention is used.
        layers: one :class:`JacobianNormLayer` per measured layer, the output last.
        skipped: ``{layer: reason}`` for layers that could not be measured.
        d_in: input dimension m; n_samples; batch_coupled; iterations: the largest number of
            J^T J products (Lanczos steps) used at one layer (op norm; 0 when exact).
        op_method: the method that computed the operator norms, "exact" or "lanczos"
            ("exact, lanczos" if a fallback switched between batches; None for ``ord="fro"``).
        tol: the relative error tolerance of the operator norms; converged: whether every layer
            reached it (both None for ``ord="fro"``).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _rows = "layers"
    _headline = "norm"

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
    op_method: Optional[str] = None


@constrained(ord=Choice.literal(Ord), rms=Flag(), method=Choice.literal(FroMethod),
             op_method=Choice.literal(OpMethod), n_probes=Integer(1), n_iter=Integer(1),
             tol=Real(0, 1, open=True))
@model_options("output", "input_module", "norm_mode", "dropout")
def jacobian_norm(
    model: nn.Module,
    data: Any,
    *,
    ord: Ord = "op",
    rms: bool = False,
    layers: Optional[Sequence[str]] = None,
    method: FroMethod = "probe",
    op_method: OpMethod = "auto",
    n_probes: int = 4,
    n_iter: int = 100,
    tol: float = 1e-6,
    batch_size: int = 250,
    n_batches: Optional[int] = None,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
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
        op_method: for ``ord="op"``: "auto" (default: the cheaper by
            :func:`choose_op_method`), "exact" (forward mode over the input basis) or
            "lanczos". Exact falls back to Lanczos, with a note in ``mode``, where an
            operation has no forward-mode derivative.
        n_probes: probes per batch for the Frobenius estimate.
        n_iter, tol: most Lanczos steps (J^T J products) per layer and batch, and the
            relative error bound at which they stop (op norm).
        batch_size, n_batches, output, input_module, norm_mode, dropout, generator: as in
            :func:`nngauge.nlc`.

    Returns:
        :class:`JacobianNormResult`. Lanczos's J v products use double backward, or
        forward-mode differentiation where an operation has no double backward (noted in
        ``mode``).

    Raises:
        InvalidInputError: ``op_method="exact"`` with ``dropout=True`` (every forward pass
            would draw other masks), or where one sample's Jacobians (the whole batch's when
            batch-coupled) would not fit ``EXACT_MEMORY``.

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
    adapter = ModelAdapter(model, options, where=where)
    dims: dict[str, int] = {}
    skipped: dict[str, str] = {}
    d_in, n_samples, iterations = 0, 0, 0
    chosen_method: Optional[str] = None  # the operator-norm method, set at the first batch
    ran: set[str] = set()
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
            exact = None
            if ord == "op" and chosen_method is None:
                chosen_method = choose_op_method(op_method, x, _measurable(outputs, skipped),
                                                 coupled=coupled, n_iter=n_iter,
                                                 dropout=options.dropout, where=where)
            if chosen_method == "exact":
                exact = _exact(adapter, step, chosen, _measurable(outputs, skipped), coupled)
                if exact is None:
                    chosen_method = "lanczos"
            if ord == "op":
                ran.add(chosen_method)
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
                if exact is not None:
                    sigma = exact[name]
                    errors[name].append(0.0)
                elif ord == "op":
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
                              converged=all(r.converged for r in rows) if op else None,
                              op_method=", ".join(sorted(ran)) if op else None)


def choose_op_method(op_method: str, x: torch.Tensor, outputs: dict, *, coupled: bool,
                     n_iter: int, dropout: bool, where: str) -> str:
    """The operator-norm method to run: ``op_method`` unless "auto", which picks exact when
    its predicted cost is at most Lanczos's and one sample's Jacobians (the batch's when
    coupled) fit :data:`~nngauge._internal.jacobian.EXACT_MEMORY`, Lanczos otherwise (also
    with dropout on).

    In units of one forward pass over the batch through the network: exact costs the number
    of basis tangents, m per sample (b m for a coupled batch), whatever the number L of
    measured layers; Lanczos costs ``STEP_COST`` x ``EXPECTED_STEPS`` (at most ``n_iter``)
    steps per layer, each through the network's prefix up to the layer, taken as (k + 1) / L
    of the network for the k-th measured layer: ``STEP_COST * steps * (L + 1) / 2``.
    """
    fits = exact_jacobian_bytes(x, sum(y[0].numel() for y in outputs.values()),
                                coupled=coupled) <= EXACT_MEMORY
    if op_method == "exact":
        if dropout:
            raise invalid(where, "dropout=False with op_method='exact' (the exact method "
                          "runs many forward passes, each would draw other dropout masks)",
                          "dropout=True", "pass op_method='lanczos' or dropout=False")
        if not fits:
            raise invalid(where, f"Jacobians that fit {EXACT_MEMORY // 2 ** 20} MiB for "
                          "op_method='exact'", f"{x[0].numel()} inputs x "
                          f"{sum(y[0].numel() for y in outputs.values())} measured outputs"
                          + (f" x {len(x)}^2 (a batch-coupled batch)" if coupled else ""),
                          "pass op_method='lanczos' (or 'auto'), fewer layers"
                          + (" or a smaller batch_size" if coupled else ""))
        return "exact"
    if op_method == "lanczos" or dropout or not fits:
        return "lanczos"
    tangents = x.numel() if coupled else x[0].numel()
    steps = min(n_iter, EXPECTED_STEPS)
    return "exact" if tangents <= STEP_COST * steps * (len(outputs) + 1) / 2 else "lanczos"


def _measurable(outputs: dict, skipped: dict) -> dict:
    return {name: y for name, y in outputs.items()
            if name not in skipped and _unmeasurable(y) is None}


def _exact(adapter: ModelAdapter, step, sites, outputs: dict, coupled: bool
           ) -> Optional[dict]:
    """Exact operator norms of every measurable output's Jacobian on ``step``'s batch (float64
    per sample, or (1,) when coupled), or None (noted) where forward mode is unavailable."""
    def run(t, rows):
        y, captured = adapter.run(t, sites, raw=step.raw[rows.to(step.raw.device)])
        values = {**captured, OUTPUT: y}
        return {name: values.get(name) for name in outputs}

    try:
        return exact_operator_norms(run, step.x, coupled=coupled, model=adapter.model,
                                    out_numel=sum(y[0].numel() for y in outputs.values()),
                                    memory=EXACT_MEMORY)
    except NotImplementedError as exc:
        adapter.note("the exact operator norms' forward-mode pass is not available for this "
                     f"model ({str(exc).splitlines()[0]}); operator norms used Lanczos "
                     "instead")
        return None


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

