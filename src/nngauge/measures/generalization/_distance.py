"""Distance from initialization (Jiang, Neyshabur, Mobahi, Krishnan and Bengio, "Fantastic
Generalization Measures and Where to Find Them", ICLR 2020, appendix C.2, eq. 40-41).

The trained network's parameters theta and those of the same network at initialization
theta_0 are compared name by name. The total distance is ||theta - theta_0||_2 over every
parameter (weights, biases, normalization scales and shifts); the per-layer rows are the
matrix-shaped parameters W_i (every parameter of two or more dimensions: Linear and Conv
weights, embeddings), each reshaped to (out, rest) as Jiang et al. do for convolution kernels,
with ||W_i - W_i^0||_F and the largest singular value ||W_i - W_i^0||_2 of that matrix (the
reshaped kernel's, not the convolution operator's norm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import MODEL, constrained
from nngauge._internal.adapter import require_real_finite_weights
from nngauge._results import Result
from nngauge.errors import UnknownNameError, invalid

FIX_INITIAL = ("pass the same architecture at initialization as initial_model (e.g. "
               "copy.deepcopy(model) before training)")


def matched_parameters(model: nn.Module, initial_model: nn.Module, where: str
                       ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Parameter name -> (theta, theta_0), detached, refusing two models whose parameters
    differ in names or shapes (the error names the first differences)."""
    if not isinstance(initial_model, nn.Module):
        raise invalid(where, "initial_model a torch.nn.Module (the network at initialization)",
                      type(initial_model).__name__, FIX_INITIAL)
    for net in (model, initial_model):
        require_real_finite_weights(net, where)
    now = {n: p.detach() for n, p in model.named_parameters()}
    then = {n: p.detach() for n, p in initial_model.named_parameters()}
    missing, extra = sorted(set(now) - set(then)), sorted(set(then) - set(now))
    shapes = [f"{n}: {tuple(now[n].shape)} vs {tuple(then[n].shape)}" for n in now
              if n in then and now[n].shape != then[n].shape]
    if missing or extra or shapes:
        got = "; ".join(filter(None, (
            f"parameters only in model: {missing[:5]}" if missing else "",
            f"parameters only in initial_model: {extra[:5]}" if extra else "",
            f"shapes differ: {shapes[:5]}" if shapes else "")))
        raise invalid(where, "initial_model with the parameters of model (the same names and "
                      "shapes: the same architecture)", got, FIX_INITIAL)
    if not now:
        raise invalid(where, "a model with parameters", "a model without parameters",
                      "pass a network that has some")
    return {n: (now[n], then[n]) for n in now}


def matrix_name(parameter: str) -> str:
    """A matrix parameter's row name: its module's name for a ``weight`` (``"0"`` for
    ``"0.weight"``), else the parameter's own name."""
    module, _, leaf = parameter.rpartition(".")
    return module if leaf == "weight" and module else parameter


def as_matrix(weight: torch.Tensor) -> torch.Tensor:
    """A parameter of two or more dimensions as the (out, rest) float64 matrix Jiang et al.
    take the norms of (a convolution kernel (C_out, C_in, *k) as (C_out, C_in * prod k))."""
    return weight.to(torch.float64).reshape(weight.shape[0], -1)


def spectral_norm(matrix: torch.Tensor) -> float:
    """The largest singular value of a matrix."""
    return float(torch.linalg.matrix_norm(matrix, ord=2))


@dataclass(frozen=True)
class DistanceLayer(Result):
    """One matrix-shaped parameter's distance from initialization.

    Attributes:
        name: the module's name for a ``weight`` (``"0"``), else the parameter's name.
        shape: the parameter's shape.
        frobenius: ||W - W_0||_F.
        spectral: ||W - W_0||_2, the largest singular value of the difference reshaped to
            (out, rest) (a convolution kernel (C_out, C_in, *k) as (C_out, C_in * prod k), as
            Jiang et al. do: not the convolution operator's norm).
        initial_frobenius: ||W_0||_F, the scale the distance compares with.
    """

    name: str
    shape: tuple[int, ...]
    frobenius: float
    spectral: float
    initial_frobenius: float


@dataclass(frozen=True)
class DistanceResult(Result):
    """Distance of a network from its initialization (Jiang et al., ICLR 2020, C.2).

    Attributes:
        total: ||theta - theta_0||_2 over every parameter of the network (weights, biases,
            normalization scales and shifts), whatever ``layers`` selects.
        relative: total / ||theta_0||_2 (inf when the initialization is all zeros).
        frobenius_squared: sum_i ||W_i - W_i^0||_F^2 over the rows (Jiang's fro.dist, eq. 40).
        spectral_squared: sum_i ||W_i - W_i^0||_2^2 over the rows (Jiang's dist.spec.init,
            eq. 41).
        spectral_sum: sum_i ||W_i - W_i^0||_2 over the rows.
        n_parameters: the number of parameters in ``total``.
        layers: one :class:`DistanceLayer` per matrix-shaped parameter (``layers`` selects
            them by name), in the order of ``model.named_parameters()``.
    """

    _rows = "layers"
    _headline = "frobenius"

    total: float
    relative: float
    frobenius_squared: float
    spectral_squared: float
    spectral_sum: float
    n_parameters: int
    layers: tuple[DistanceLayer, ...]


@constrained(initial_model=MODEL)
def distance_from_init(model: nn.Module, initial_model: nn.Module, *,
                       layers: Optional[str | Sequence[str]] = None) -> DistanceResult:
    """The distance of a network from its initialization, in total and per layer.

    total = ||theta - theta_0||_2 over every parameter (weights, biases, normalization scales
    and shifts: the flattened parameter vectors subtracted); per matrix-shaped parameter W
    (Linear and Conv weights, embeddings), ||W - W_0||_F and ||W - W_0||_2, the spectral norm
    of the difference reshaped to (out, rest) (for a convolution the reshaped kernel, as Jiang
    et al. do, not the operator norm); and Jiang et al.'s aggregates fro.dist =
    sum_i ||W_i - W_i^0||_F^2 (eq. 40) and dist.spec.init = sum_i ||W_i - W_i^0||_2^2 (eq. 41)
    (Jiang, Neyshabur, Mobahi, Krishnan and Bengio, "Fantastic Generalization Measures and
    Where to Find Them", ICLR 2020, appendix C.2; the distance-from-initialization baseline of
    the NeurIPS 2020 PGDL competition is ``total``). The parameters are compared as they are:
    batchnorm is not folded (:func:`nngauge.norm_measures` folds it, as Jiang et al. do for
    their norms). Computed in float64; neither model is changed.

    Args:
        model: the trained network.
        initial_model: the same architecture at initialization (the same parameter names and
            shapes).
        layers: the rows to report, by name (a module name for its ``weight``, else a
            parameter name); None: every matrix-shaped parameter. ``total`` always covers
            every parameter; the aggregates cover the rows reported.

    Returns:
        :class:`DistanceResult`.

    Raises:
        InvalidInputError: the two models' parameters differ in names or shapes, or a model
            has no parameters or non-finite ones.
        UnknownNameError: a name of ``layers`` is not a matrix-shaped parameter.

    Example:
        >>> import copy, torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
        >>> start = copy.deepcopy(net)
        >>> with torch.no_grad():
        ...     _ = net[0].weight.add_(torch.tensor([[3.0, 0.0], [0.0, 0.0]]))
        ...     _ = net[2].bias.add_(4.0)
        >>> result = distance_from_init(net, start)
        >>> round(result.total, 5), round(result["0"].spectral, 5), result["2"].frobenius
        (5.0, 3.0, 0.0)
    """
    where = "distance_from_init()"
    pairs = matched_parameters(model, initial_model, where)
    diffs = {n: (w.to(torch.float64) - w0.to(torch.float64).to(w.device))
             for n, (w, w0) in pairs.items()}
    total = math.sqrt(sum(float(d.square().sum()) for d in diffs.values()))
    start = math.sqrt(sum(float(w0.to(torch.float64).square().sum())
                          for _, w0 in pairs.values()))
    rows = [DistanceLayer(matrix_name(n), tuple(d.shape), float(d.norm()),
                          spectral_norm(as_matrix(d)),
                          float(pairs[n][1].to(torch.float64).norm()))
            for n, d in diffs.items() if d.dim() >= 2]
    rows = _selected(rows, layers, where)
    return DistanceResult(
        total=total, relative=total / start if start > 0 else math.inf,
        frobenius_squared=sum(r.frobenius ** 2 for r in rows),
        spectral_squared=sum(r.spectral ** 2 for r in rows),
        spectral_sum=sum(r.spectral for r in rows),
        n_parameters=sum(d.numel() for d in diffs.values()), layers=tuple(rows))


def _selected(rows: list, layers: Optional[str | Sequence[str]], where: str) -> list:
    if layers is None:
        return rows
    wanted = [layers] if isinstance(layers, str) else list(layers)
    known = [r.name for r in rows]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UnknownNameError(
            f"{where} expected layers among the matrix-shaped parameters {known}; got "
            f"{unknown}. Fix: use those names (a module name for its weight).")
    return [r for r in rows if r.name in wanted]
