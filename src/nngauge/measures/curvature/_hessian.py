"""The Hessian of the loss in parameter space: top eigenvalues, trace, spectral density, per layer.

With theta the model's trainable parameters (those with ``requires_grad``; n of them) and
L(theta) = (1 / N) sum_i l(f(theta, x_i), y_i) the mean loss over the N samples used, the
measured matrix is the Hessian H = d^2 L / d theta^2 (``kind="hessian"``) or the generalized
Gauss-Newton matrix G = (1 / N) sum_i J_i^T (d^2 l / d f^2) J_i, J_i = d f(theta, x_i) / d theta
(``kind="ggn"``: positive semi-definite for convex losses, the Hessian without the term in the
outputs' second derivatives). It is never formed: every estimate is built from products with
vectors (:mod:`nngauge._internal.curvature`). Reported:

- the top-k eigenvalues lambda_1 >= ... >= lambda_k (largest first, signed: not by magnitude) by
  Lanczos with full reorthogonalization, with each Ritz pair's residual ||H u - theta u||;
- the same on each data batch alone, with the mean and a 95% interval over batches: the top
  eigenvalue of a single mini-batch's Hessian varies by an order of magnitude between batches
  and is biased upward (lambda_max is convex, so E_b[lambda_max(H_b)] >= lambda_max(E_b H_b));
- tr(H) by Hutch++ (Meyer, Musco, Musco & Woodruff, "Hutch++: Optimal Stochastic Trace
  Estimation", SOSA 2021) or Hutchinson's estimator, whichever the sketch's own products say
  is more accurate for the budget (``trace_method="auto"``), with Rademacher probes and the
  standard error over probes;
- the spectral density phi(t) = (1 / n) sum_j delta(t - lambda_j) by stochastic Lanczos
  quadrature (Lin, Saad & Yang, "Approximating Spectral Densities of Large Matrices", SIAM
  Review 2016; Ghorbani, Krishnan & Xiao, "An Investigation into Neural Net Optimization via
  Hessian Eigenvalue Density", ICML 2019), smoothed by a Gaussian of width sigma;
- per module (``per_layer=True``): the top eigenvalue and trace of the diagonal block of H in
  that module's own parameters.

Batchnorm uses its running statistics unless ``norm_mode`` says otherwise ("train": each
batch's statistics, the loss of a batch then couples its samples); dropout is off. The model
is never modified (parameters are passed with ``torch.func.functional_call``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np
import torch
from scipy import stats
from torch import nn

from nngauge._constraints import Choice, Flag, Integer, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.curvature import (
    CurvatureOperator,
    Kind,
    TraceMethod,
    estimate_trace,
    functional_model,
    lanczos,
    slq,
)
from nngauge._internal.losses import LOSS, Loss, labelled_batches, model_loss, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._plots import new_axes
from nngauge._results import Result
from nngauge._vocabulary import deprecated_attribute, renamed
from nngauge.errors import invalid

CONFIDENCE = 0.95
"""Coverage of the intervals over data batches."""


@dataclass(frozen=True)
class HessianDensity(Result):
    """Spectral density by stochastic Lanczos quadrature (Lin et al. 2016, Ghorbani et al. 2019).

    For probe l (a unit vector uniform on the sphere) and m Lanczos steps from it, the nodes
    theta_{l,i} and weights tau_{l,i} (summing to 1 over i) give sum_i tau_{l,i} theta_{l,i}^p
    = v_l^T H^p v_l for p < 2m, so averaging over probes estimates the moments (1 / n) tr H^p
    of phi(t) = (1 / n) sum_j delta(t - lambda_j); probes are orthonormal in groups of n, so n
    probes give those moments exactly. The smoothed density is

        phi_sigma(t) = (1 / n_probes) sum_l sum_i tau_{l,i} exp(-(t - theta_{l,i})^2 / (2
        sigma^2)) / (sigma sqrt(2 pi)).

    Attributes:
        nodes: (n_probes, m) Ritz values of each probe's tridiagonal matrix (0 past the steps
            a probe ran, with weight 0).
        weights: (n_probes, m) squared first entries of its eigenvectors.
        n_params: n, the dimension.

    ``to_frame()`` gives phi_sigma on the default grid of :meth:`evaluate` (the curve
    :meth:`plot` draws).
    """

    _curve = (("eigenvalue", lambda density: density.evaluate()[0]),
              ("density", lambda density: density.evaluate()[1]))

    nodes: np.ndarray
    weights: np.ndarray
    n_params: int

    def moment(self, p: int) -> float:
        """E_phi[t^p], estimated: the mean over probes of sum_i tau_i theta_i^p (p = 1: tr(H) /
        n; p = 2: ||H||_F^2 / n)."""
        return float((self.weights * self.nodes ** p).sum(1).mean())

    def evaluate(self, grid: Optional[Any] = None, *, sigma: Optional[float] = None,
                 points: int = 1000) -> tuple[np.ndarray, np.ndarray]:
        """(grid, phi_sigma(grid)).

        Args:
            grid: points t (default: ``points`` points from 5 sigma below the smallest node to
                5 sigma above the largest).
            sigma: width of the Gaussian (default: 1% of the range of the nodes, 1e-3 when
                they coincide).
            points: size of the default grid.
        """
        live = self.weights > 0
        lo, hi = float(self.nodes[live].min()), float(self.nodes[live].max())
        sigma = float(sigma) if sigma is not None else (0.01 * (hi - lo) or 1e-3)
        t = (np.linspace(lo - 5 * sigma, hi + 5 * sigma, points) if grid is None
             else np.asarray(grid, dtype=np.float64))
        gauss = np.exp(-(t[:, None] - self.nodes[live][None]) ** 2 / (2 * sigma**2))
        values = gauss @ self.weights[live] / (len(self.nodes) * sigma * math.sqrt(2 * math.pi))
        return t, values

    def plot(self, ax=None, *, sigma: Optional[float] = None):
        """phi_sigma on a log scale, as Ghorbani et al. draw it (``sigma`` as in
        :meth:`evaluate`); returns the Axes. Needs matplotlib."""
        ax = new_axes(ax)
        t, values = self.evaluate(sigma=sigma)
        ax.plot(t, np.maximum(values, values.max() * 1e-8))
        ax.set_yscale("log")
        ax.set_xlabel("eigenvalue")
        ax.set_ylabel("density")
        return ax


@dataclass(frozen=True)
class HessianLayer(Result):
    """The diagonal block of the Hessian in one module's own parameters.

    Attributes:
        name: the module's name in ``model.named_modules()`` ("(root)" for the model itself).
        n_params: parameters of the block.
        eigenvalue: its largest eigenvalue (Lanczos).
        residual: ||H_B u - eigenvalue u|| of the Ritz pair.
        converged: residual <= tol * max |Ritz value| (as :attr:`HessianResult.converged`).
        trace: tr(H_B) (None with ``trace=False``).
        trace_stderr: its standard error over probes.
        trace_method: the estimator used, "hutch++" or "hutchinson" (None without a trace).
    """

    name: str
    n_params: int
    eigenvalue: float
    residual: float
    converged: bool
    trace: Optional[float]
    trace_stderr: Optional[float]
    trace_method: Optional[str]


@dataclass(frozen=True)
class HessianResult(Result):
    """Curvature of the mean loss in parameter space (see :func:`hessian`).

    Attributes:
        eigenvalues: the top-k eigenvalues, largest first.
        residuals: ||H u_i - lambda_i u_i|| of each Ritz pair (computed, not estimated).
        converged: every residual <= tol * max |Ritz value|.
        n_iter: Lanczos steps taken for the top-k (one product each; ``lanczos_steps``: its
            deprecated name).
        batch_eigenvalues_mean: the mean over data batches of each batch's own top-k
            eigenvalues (None with one batch or ``per_batch=False``).
        eigenvalues_ci: the 95% t-interval (low, high) of that mean, per eigenvalue.
        trace: tr(H) (None with ``trace=False``).
        trace_stderr: its standard error over probes (0 when exact: n_probes >= 3 n).
        trace_method: the estimator used, "hutch++" or "hutchinson" (None without a trace).
        n_probes: products spent on the trace.
        n_samples, n_batches, batch_size: the data used (H is of the mean loss over them).
        n_params: n, trainable parameters.
        n_products: Hessian-vector products taken in all.
        kind: "hessian" or "ggn"; loss: the loss's name.
        density: the :class:`HessianDensity` (None unless ``density=True``).
        layers: one :class:`HessianLayer` per module with trainable parameters of its own
            (empty unless ``per_layer=True``).
        settings: the options used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        batch_eigenvalues: (n_batches, k) each batch's top-k (not in to_dict; no rows with
            one batch or ``per_batch=False``).
        eigenvectors: with ``return_eigenvectors=True``, one dict parameter name -> tensor
            (the parameter's shape) per eigenvalue, unit norm over all parameters together
            (not in to_dict).
    """

    _rows = "layers"
    _headline = "eigenvalue"
    _summary = ("eigenvalues", "trace")

    eigenvalues: tuple[float, ...]
    residuals: tuple[float, ...]
    converged: bool
    n_iter: int
    batch_eigenvalues_mean: Optional[tuple[float, ...]]
    eigenvalues_ci: Optional[tuple[tuple[float, float], ...]]
    trace: Optional[float]
    trace_stderr: Optional[float]
    trace_method: Optional[str]
    n_probes: int
    n_samples: int
    n_batches: int
    batch_size: int
    n_params: int
    n_products: int
    kind: str
    loss: str
    density: Optional[HessianDensity]
    layers: tuple[HessianLayer, ...]
    settings: dict
    mode: MeasurementMode
    batch_eigenvalues: np.ndarray = field(repr=False)
    eigenvectors: Optional[tuple[dict, ...]] = field(default=None, repr=False)

    def plot(self, ax=None, *, sigma: Optional[float] = None):
        """With ``density=True``: the smoothed spectral density (:meth:`HessianDensity.plot`,
        ``sigma`` its width), the top eigenvalues marked. Without: the default plot, the
        largest eigenvalue per layer (``per_layer=True``) or the top eigenvalues and the trace
        as labelled bars. Returns the Axes. Needs matplotlib."""
        if self.density is None:
            return super().plot(ax)
        ax = self.density.plot(ax, sigma=sigma)
        for value in self.eigenvalues:
            ax.axvline(value, linestyle=":", color="gray")
        return ax

    lanczos_steps = deprecated_attribute("n_iter")


@renamed(lanczos_steps="n_iter")
@constrained(loss=LOSS, top_k=Integer(1), trace=Flag(),
             density=Flag(), per_layer=Flag(), per_batch=Flag(), kind=Choice.literal(Kind),
             n_probes=Integer(3),
             trace_method=Choice.literal(TraceMethod), n_iter=Integer(1),
             tol=Real(0, 1, open=True), density_probes=Integer(1), return_eigenvectors=Flag())
@model_options("output", "norm_mode")
def hessian(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    loss: Loss = "auto",
    top_k: int = 1,
    trace: bool = True,
    density: bool = False,
    per_layer: bool = False,
    per_batch: bool = True,
    kind: Kind = "hessian",
    batch_size: int = 256,
    n_batches: Optional[int] = None,
    n_probes: int = 90,
    trace_method: TraceMethod = "auto",
    n_iter: int = 90,
    tol: float = 1e-4,
    density_probes: int = 10,
    chunk_size: Optional[int] = None,
    return_eigenvectors: bool = False,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> HessianResult:
    """Top eigenvalues, trace and spectral density of the Hessian of the mean loss.

    H = d^2 L / d theta^2 with L(theta) = (1 / N) sum_i l(f(theta, x_i), y_i) over the N samples
    used and theta the trainable parameters, or the Gauss-Newton matrix (``kind="ggn"``); see
    the module docstring for the estimators. Products with H go batch by batch (``batch_size``
    samples each), many vectors at once through ``vmap`` in chunks, each batch's gradient
    graph kept while the kept graphs fit in memory (reverse-over-reverse), else differentiated
    afresh forward-over-reverse (:mod:`nngauge._internal.curvature`). Given ``generator`` the
    result is deterministic (the start vectors and probes draw from it, in the order: top-k,
    trace, batches, density, layers).

    Args:
        model: the network; never modified.
        data: ``(inputs, labels)``, a Dataset / DataLoader of pairs, or the inputs with
            ``labels=``.
        labels: the labels when ``data`` holds the inputs only.
        loss: "auto" (default: the mean cross-entropy for integer labels, per position for
            sequence outputs; for floating targets the squared error summed over each
            sample's entries and averaged over samples), "cross_entropy" (integer labels
            only), "mse" (the mean over every entry; integer labels one-hot), or a callable
            ``loss(outputs, labels)`` returning the batch's mean loss as one number, with
            ``outputs`` the measured output tensor (``output=``); it is differentiated twice
            by ``torch.func`` (no ``.item()``, no branching on values). The same rule in every
            measure: docs/api.md, "The loss". Changed in 0.2: the default was
            "cross_entropy" (the same values for integer labels; floating targets, refused
            then, now get "auto").
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        top_k: eigenvalues wanted (1 <= top_k <= n).
        trace: estimate tr(H).
        density: estimate the spectral density.
        per_layer: also the top eigenvalue and trace of each module's diagonal block.
        per_batch: also each batch's own top-k and their 95% interval over batches (with two
            batches or more; a Lanczos run per batch, which costs as much as the top-k of
            all the data).
        kind: "hessian" (default: the loss's own curvature, negative directions included) or
            "ggn" (generalized Gauss-Newton: positive semi-definite for convex losses).
        batch_size: samples per batch (the unit of the per-batch intervals and of memory).
        n_batches: use the first ``n_batches`` batches (None: all the data).
        n_probes: products spent on each trace (>= 3; exact when >= 3 n). Default 90: a
            relative error of a few percent on typical networks.
        trace_method: "auto" (default: Hutch++ when the sketch shows a spectrum dominated by
            a few eigenvalues, else Hutchinson with every product as a probe; see
            :func:`nngauge._internal.curvature.estimate_trace`), "hutch++" or "hutchinson".
        n_iter: most Lanczos steps for the top-k (it stops when the residuals reach
            ``tol``), and the steps of each density probe; the Lanczos basis holds
            n_iter x n numbers.
        tol: relative residual ||H u - lambda u|| <= tol * max |lambda| at which Lanczos stops.
        density_probes: probes of the density.
        chunk_size: vectors per vmapped product (default: as many as about 2**26 elements
            of saved activations allow).
        return_eigenvectors: keep the top-k eigenvectors in ``eigenvectors``.
        output: which output the loss reads for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics: None or "eval" (running, the default), "frozen"
            (of the data, then fixed) or "train" (each batch's own).
        generator: for the start vectors and probes.

    Returns:
        :class:`HessianResult`.

    Raises:
        InvalidInputError: no labels, labels the loss cannot take (out of range for the
            number of classes), a model without trainable parameters, top_k outside [1, n],
            an unknown kind or loss, or other bad options.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(3, 2)
        >>> x, y = torch.randn(16, 3), torch.randint(0, 2, (16,))
        >>> r = hessian(net, (x, y), top_k=2, generator=torch.Generator().manual_seed(0))
        >>> len(r.eigenvalues), r.eigenvalues[0] >= r.eigenvalues[1], r.converged, r.n_params
        (2, True, True, 8)
    """
    where = "hessian()"
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, replace(options, norm_mode=options.norm_mode or "eval"),
                           where=where)
    names = [n for n, p in adapter.model.named_parameters() if p.requires_grad]
    if not names:
        raise invalid(where, "a model with trainable parameters (requires_grad=True)",
                      "no parameter requiring grad" if any(True for _ in model.parameters())
                      else "a model without parameters",
                      "pass a network with parameters, or set requires_grad_(True) on those "
                      "to measure")
    with adapter.active(data=data):
        params = {n: p.detach() for n, p in adapter.model.named_parameters() if n in names}
        n = sum(p.numel() for p in params.values())
        if top_k > n:
            raise invalid(where, f"top_k <= the number of trainable parameters ({n})",
                          f"top_k={top_k}", f"pass top_k between 1 and {n}")
        if top_k > n_iter:
            raise invalid(where, "n_iter >= top_k (Lanczos steps)", f"n_iter={n_iter} "
                          f"and top_k={top_k}", "raise n_iter (or lower top_k)")
        batches = labelled_batches(adapter, data, batch_size, n_batches,
                                   "pass data=(inputs, labels) or labels=")
        loss_fn, loss_name = model_loss(adapter, loss, batches[0][0],
                                        torch.cat([y for _, y in batches]))
        op = CurvatureOperator(functional_model(adapter.model, adapter.select), loss_fn, params,
                               batches, kind=kind, chunk_size=chunk_size, note=adapter.note)
        try:
            top = lanczos(op, top_k, n_iter, tol, generator, vectors=True)
        except RuntimeError as exc:
            missing = re.search(r"derivative for (\S+) is not implemented", str(exc))
            if missing is None:
                raise
            raise invalid(where, "a model whose operations torch can differentiate twice "
                          "(curvature products differentiate the gradient)",
                          f"{missing.group(1)} without a derivative in torch",
                          "replace that module by an equivalent built from differentiable "
                          "operations (e.g. nn.Hardsigmoid by relu6(x + 3) / 6; its second "
                          "derivative is zero almost everywhere)") from exc
        estimate = estimate_trace(op, n_probes, generator, trace_method) if trace else None
        batch_values = (_per_batch(op, top_k, n_iter, tol, generator) if per_batch
                        else np.empty((0, top_k)))
        spectrum = (HessianDensity(*slq(op, density_probes, n_iter, generator),
                                   n_params=n) if density else None)
        layers = (_layer_rows(op, n_probes, trace_method, n_iter, tol, generator, trace)
                  if per_layer else ())
        vectors = (tuple(_as_parameters(op, u) for u in top.vectors)
                   if return_eigenvectors else None)
    mean, ci = _over_batches(batch_values)
    settings = {"loss": loss_name, "kind": kind, "top_k": top_k, "trace": trace,
                "density": density, "per_layer": per_layer, "per_batch": per_batch,
                "batch_size": batch_size,
                "n_batches": n_batches, "n_probes": n_probes, "trace_method": trace_method,
                "n_iter": n_iter,
                "tol": tol, "density_probes": density_probes if density else None,
                "chunk_size": op.chunk_size}
    return HessianResult(
        eigenvalues=tuple(float(v) for v in top.values),
        residuals=tuple(float(r) for r in top.residuals), converged=top.converged,
        n_iter=top.steps, batch_eigenvalues_mean=mean, eigenvalues_ci=ci,
        trace=estimate.trace if estimate else None,
        trace_stderr=estimate.stderr if estimate else None,
        trace_method=estimate.method if estimate else None,
        n_probes=estimate.products if estimate else 0,
        n_samples=sum(len(y) for _, y in batches), n_batches=len(batches),
        batch_size=batch_size, n_params=n, n_products=op.products, kind=kind, loss=loss_name,
        density=spectrum, layers=layers, settings=settings, mode=adapter.mode,
        batch_eigenvalues=batch_values, eigenvectors=vectors)


# ----------------------------------------------------------------------------------- pieces


def _per_batch(op: CurvatureOperator, k: int, steps: int, tol: float,
               generator: Optional[torch.Generator]) -> np.ndarray:
    """(n_batches, k): each batch's own top-k (none with one batch)."""
    if len(op.batches) < 2:
        return np.empty((0, k))
    return np.array([lanczos(op.restricted(batches=[b]), k, steps, tol, generator).values
                     for b in op.batches])


def _layer_rows(op: CurvatureOperator, n_probes: int, method: TraceMethod, steps: int,
                tol: float, generator: Optional[torch.Generator], trace: bool
                ) -> tuple[HessianLayer, ...]:
    """One row per module owning trainable parameters: its diagonal block's top eigenvalue
    and trace."""
    groups: dict[str, list[str]] = {}
    for name in op.params:
        groups.setdefault(name.rpartition(".")[0], []).append(name)
    rows = []
    for module, members in groups.items():
        block = op.restricted(names=members)
        top = lanczos(block, 1, steps, tol, generator, vectors=True)
        estimate = estimate_trace(block, n_probes, generator, method) if trace else None
        rows.append(HessianLayer(
            name=module or "(root)", n_params=block.dim, eigenvalue=float(top.values[0]),
            residual=float(top.residuals[0]), converged=top.converged,
            trace=estimate.trace if estimate else None,
            trace_stderr=estimate.stderr if estimate else None,
            trace_method=estimate.method if estimate else None))
    return tuple(rows)


def _as_parameters(op: CurvatureOperator, vector: torch.Tensor) -> dict[str, torch.Tensor]:
    return {n: t[0].clone() for n, t in op.split(vector[None]).items()}


def _over_batches(values: np.ndarray) -> tuple[Optional[tuple], Optional[tuple]]:
    """Mean over batches (rows) and its t-interval, or (None, None) with one batch."""
    if len(values) < 2:
        return None, None
    mean = values.mean(0)
    half = (stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1) * values.std(0, ddof=1)
            / math.sqrt(len(values)))
    return (tuple(float(v) for v in mean),
            tuple((float(m - h), float(m + h)) for m, h in zip(mean, half)))
