"""Jiang et al.'s norm- and margin-based measures (Jiang, Neyshabur, Mobahi, Krishnan and
Bengio, "Fantastic Generalization Measures and Where to Find Them", ICLR 2020, appendix C.1-C.2).

Notation (their section C): the network's weight layers W_1..W_d (every Linear and Conv, after
batchnorm is folded into the layer before it, as they do), a convolution kernel
(C_out, C_in, *k) reshaped to the (C_out, C_in * prod k) matrix; ||W||_2 is that matrix's
largest singular value (the reshaped kernel's, not the convolution operator's norm), W_i^0 the
layer at initialization, gamma the margin at the 10th percentile of the training margins
f(x)[y] - max_{y' != y} f(x)[y'], m the number of training points. Every log is natural.

| Jiang et al. | eq. | field | definition |
| --- | --- | --- | --- |
| params | 20 | ``n_parameters`` | omega, the number of parameters |
| 1/gamma^2 (inverse margin) | 22 | ``inverse_margin`` | 1 / gamma^2 |
| spec.init | 29 | ``log_spectral_init`` | log(prod_i ||W_i||_2^2 / gamma^2 * sum_i ||W_i - W_i^0||_F^2 / ||W_i||_2^2) |
| spec.orig | 30 | ``log_spectral_orig`` | log(prod_i ||W_i||_2^2 / gamma^2 * sum_i ||W_i||_F^2 / ||W_i||_2^2) |
| log.prod.of.spec.over.margin | 31 | ``log_prod_spectral_over_margin`` | log(prod_i ||W_i||_2^2 / gamma^2) |
| log.prod.of.spec | 32 | ``log_prod_spectral`` | log prod_i ||W_i||_2^2 |
| fro.over.spec | 33 | ``frobenius_over_spectral`` | sum_i ||W_i||_F^2 / ||W_i||_2^2 |
| log.sum.of.spec.over.margin | 34 | ``log_sum_spectral_over_margin`` | log(d (prod_i ||W_i||_2^2 / gamma^2)^(1/d)) |
| log.sum.of.spec | 35 | ``log_sum_spectral`` | log(d (prod_i ||W_i||_2^2)^(1/d)) |
| log.prod.of.fro.over.margin | 36 | ``log_prod_frobenius_over_margin`` | log(prod_i ||W_i||_F^2 / gamma^2) |
| log.prod.of.fro | 37 | ``log_prod_frobenius`` | log prod_i ||W_i||_F^2 |
| log.sum.of.fro.over.margin | 38 | ``log_sum_frobenius_over_margin`` | log(d (prod_i ||W_i||_F^2 / gamma^2)^(1/d)) |
| log.sum.of.fro | 39 | ``log_sum_frobenius`` | log(d (prod_i ||W_i||_F^2)^(1/d)) |
| fro.dist | 40 | ``frobenius_distance`` | sum_i ||W_i - W_i^0||_F^2 |
| dist.spec.init | 41 | ``spectral_distance`` | sum_i ||W_i - W_i^0||_2^2 |
| param.norm | 42 | ``parameter_norm`` | sum_i ||W_i||_F^2 |
| path.norm.over.margin | 43 | ``path_norm_over_margin`` | path.norm / gamma^2 |
| path.norm | 44 | ``path_norm`` | sum over input-output paths (bias paths included) of prod_edges w^2 = f_{w^2}(1) summed over outputs |
| fisher-rao | 45 | ``fisher_rao`` | (d + 1)^2 / m sum_j <theta, grad_theta l(f(x_j), y_j)>^2 |

The sums over layers of log.sum.* are the sums of the norms after the rebalancing that makes
all layers' norms equal (their section C.2: d (prod)^(1/d) is the smallest sum of d numbers of
that product). The path norm is :mod:`nngauge.measures.generalization._paths`' forward pass
(``path_norm(model, 2) ** 2`` with bias paths); the Fisher-Rao norm's inner products are one
forward-mode pass (``torch.func.jvp`` along theta) per batch, with the mean cross-entropy's
per-sample terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn
from torch.func import functional_call, jvp

from nngauge._constraints import MODEL, Maybe, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.losses import per_sample_loss
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge.errors import invalid, warn_caller
from nngauge.measures.generalization._distance import (
    as_matrix,
    matched_parameters,
    spectral_norm,
)
from nngauge.measures.generalization._fold import folded_graph, folded_mode
from nngauge.measures.generalization._norms import (
    _nonpositive_margin,
    _safe_exp,
    _sum_log,
    margin_and_layers,
)
from nngauge.measures.generalization._paths import log_path_sum, path_obstacles
from nngauge.measures.generalization._weights import WeightLayer, weight_layers

_OVER_MARGIN = ("inverse_margin", "log_spectral_init", "log_spectral_orig",
                "log_prod_spectral_over_margin", "log_sum_spectral_over_margin",
                "log_prod_frobenius_over_margin", "log_sum_frobenius_over_margin",
                "path_norm_over_margin")
_FROM_INIT = ("log_spectral_init", "frobenius_distance", "spectral_distance")
_PATHS = ("path_norm", "path_norm_over_margin")


@dataclass(frozen=True)
class NormLayer(Result):
    """One weight layer's norms (after batchnorm folding).

    Attributes:
        name, kind: the layer's site in the graph (its module name) and "linear" / "conv".
        frobenius: ||W_i||_F.
        spectral: ||W_i||_2 of the kernel reshaped to (out, fan_in) (Jiang et al.'s choice:
            not the convolution operator's norm, which :func:`nngauge.capacity` reports).
        distance_frobenius, distance_spectral: ||W_i - W_i^0||_F and ||W_i - W_i^0||_2 (the
            same reshaping); NaN without ``initial_model``.
    """

    name: str
    kind: str
    frobenius: float
    spectral: float
    distance_frobenius: float
    distance_spectral: float


@dataclass(frozen=True)
class NormMeasures(Result):
    """Jiang et al.'s norm- and margin-based measures (ICLR 2020, appendix C.1-C.2).

    The fields and their definitions: the table of :func:`norm_measures` (Jiang et al.'s name
    and equation number beside each). Logs are natural.

    Attributes:
        margin: gamma, the margin at ``percentile`` (Jiang et al.: the 10th percentile).
        percentile: the percentile used.
        depth: d, the number of weight layers.
        n_parameters: omega, every parameter of the model (before folding).
        m: training points read.
        inverse_margin, log_spectral_init, log_spectral_orig, log_prod_spectral_over_margin,
        log_prod_spectral, frobenius_over_spectral, log_sum_spectral_over_margin,
        log_sum_spectral, log_prod_frobenius_over_margin, log_prod_frobenius,
        log_sum_frobenius_over_margin, log_sum_frobenius, frobenius_distance,
        spectral_distance, parameter_norm, path_norm_over_margin, path_norm, fisher_rao:
            Jiang et al.'s measures (see :func:`norm_measures`).
        layers: per-layer :class:`NormLayer` rows.
        undefined: the fields that are NaN, each with why (no ``initial_model``; a margin
            that is not positive; a network that is not a sum over paths).
        mode: how the model was run for the margins (batchnorm in eval mode, folded).
    """

    _rows = "layers"
    _headline = "spectral"

    margin: float
    percentile: float
    depth: int
    n_parameters: int
    m: int
    inverse_margin: float
    log_spectral_init: float
    log_spectral_orig: float
    log_prod_spectral_over_margin: float
    log_prod_spectral: float
    frobenius_over_spectral: float
    log_sum_spectral_over_margin: float
    log_sum_spectral: float
    log_prod_frobenius_over_margin: float
    log_prod_frobenius: float
    log_sum_frobenius_over_margin: float
    log_sum_frobenius: float
    frobenius_distance: float
    spectral_distance: float
    parameter_norm: float
    path_norm_over_margin: float
    path_norm: float
    fisher_rao: float
    layers: tuple[NormLayer, ...]
    undefined: dict[str, str]
    mode: MeasurementMode


@constrained(initial_model=Maybe(MODEL), percentile=Real(0, 100, high_open=True))
@model_options("output")
def norm_measures(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    initial_model: Optional[nn.Module] = None,
    percentile: float = 10,
    options: ModelOptions,
    batch_size: int = 1024,
) -> NormMeasures:
    """Jiang et al.'s norm- and margin-based generalization measures, with per-layer norms.

    Jiang, Neyshabur, Mobahi, Krishnan and Bengio, "Fantastic Generalization Measures and
    Where to Find Them", ICLR 2020, appendix C.1-C.2 (their names and equation numbers in the
    table; d weight layers W_i after batchnorm folding, kernels reshaped to (out, fan_in),
    ||.||_2 the reshaped matrix's largest singular value, gamma the margin at the 10th
    percentile of the training margins, m training points, natural logs):

    | Jiang et al. | eq. | field | definition |
    | --- | --- | --- | --- |
    | params | 20 | n_parameters | omega, every parameter of the model |
    | 1/gamma^2 | 22 | inverse_margin | 1 / gamma^2 |
    | spec.init | 29 | log_spectral_init | log(prod ||W_i||_2^2 / gamma^2 * sum ||W_i - W_i^0||_F^2 / ||W_i||_2^2) |
    | spec.orig | 30 | log_spectral_orig | log(prod ||W_i||_2^2 / gamma^2 * sum ||W_i||_F^2 / ||W_i||_2^2) |
    | log.prod.of.spec.over.margin | 31 | log_prod_spectral_over_margin | log(prod ||W_i||_2^2 / gamma^2) |
    | log.prod.of.spec | 32 | log_prod_spectral | log prod ||W_i||_2^2 |
    | fro.over.spec | 33 | frobenius_over_spectral | sum ||W_i||_F^2 / ||W_i||_2^2 |
    | log.sum.of.spec.over.margin | 34 | log_sum_spectral_over_margin | log(d (prod ||W_i||_2^2 / gamma^2)^(1/d)) |
    | log.sum.of.spec | 35 | log_sum_spectral | log(d (prod ||W_i||_2^2)^(1/d)) |
    | log.prod.of.fro.over.margin | 36 | log_prod_frobenius_over_margin | log(prod ||W_i||_F^2 / gamma^2) |
    | log.prod.of.fro | 37 | log_prod_frobenius | log prod ||W_i||_F^2 |
    | log.sum.of.fro.over.margin | 38 | log_sum_frobenius_over_margin | log(d (prod ||W_i||_F^2 / gamma^2)^(1/d)) |
    | log.sum.of.fro | 39 | log_sum_frobenius | log(d (prod ||W_i||_F^2)^(1/d)) |
    | fro.dist | 40 | frobenius_distance | sum ||W_i - W_i^0||_F^2 |
    | dist.spec.init | 41 | spectral_distance | sum ||W_i - W_i^0||_2^2 |
    | param.norm | 42 | parameter_norm | sum ||W_i||_F^2 |
    | path.norm.over.margin | 43 | path_norm_over_margin | path.norm / gamma^2 |
    | path.norm | 44 | path_norm | sum over paths (bias paths too) of prod w^2 |
    | fisher-rao | 45 | fisher_rao | (d + 1)^2 / m sum_j <theta, grad l(f(x_j), y_j)>^2 |

    The weight layers are those of :func:`nngauge.capacity` (every Linear / Conv of the
    traced graph, batchnorm folded into the layer before it, as Jiang et al. fold it, also
    in ``initial_model``). path.norm is ``nngauge.path_norm(model, 2) ** 2``, NaN with the
    reason in ``undefined`` where the network is not a sum over paths (max pooling,
    activations that are not positively homogeneous, normalization by sample statistics,
    attention); every other measure reads the weight layers alone and is defined for any
    network of them (Jiang et al.'s products bound networks of 1-Lipschitz activations). The
    Fisher-Rao norm reads the user's
    model (every parameter theta, batchnorm with running statistics), l the per-sample
    cross-entropy: one ``torch.func.jvp`` along theta per batch gives every <theta, grad l_j>.
    A margin gamma <= 0 (a network misclassifying at least ``percentile`` percent of the data)
    leaves every measure over the margin NaN and warns, as :func:`nngauge.capacity` does.

    Args:
        model: a trained classifier with Linear / Conv layers, traceable by ``torch.fx``,
            on real-valued inputs; never modified.
        data, labels: the training data, as for :func:`nngauge.margin` (integer labels).
        initial_model: the same architecture at initialization (the same parameter names and
            shapes); None: the measures from initialization (spec.init, fro.dist,
            dist.spec.init, per-layer distances) are NaN.
        percentile: the margin's percentile (Jiang et al.: 10).
        output: which output holds the scores for dict / tuple / ModelOutput outputs.
        batch_size: samples per forward pass.

    Returns:
        :class:`NormMeasures`.

    Raises:
        InvalidInputError: ``initial_model`` has other parameters than ``model``; no labels;
            no weight layer; integer inputs; a model ``torch.fx`` cannot trace.

    Example:
        >>> import copy, torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(4, 16, 2, 3, generator=torch.Generator().manual_seed(0))
        >>> start = copy.deepcopy(net)
        >>> x = torch.randn(50, 4, generator=torch.Generator().manual_seed(1))
        >>> r = norm_measures(net, x, net(x).argmax(dim=1), initial_model=start)
        >>> r.depth, r.frobenius_distance, r.margin > 0
        (2, 0.0, True)
    """
    where = "norm_measures()"
    if initial_model is not None:
        matched_parameters(model, initial_model, where)
    adapter, margins, gamma, input_shape, graph, layers = margin_and_layers(
        model, data, labels, options, percentile=percentile, batch_size=batch_size, where=where)
    obstacles = path_obstacles(graph, layers)
    initial = None if initial_model is None else _initial_layers(
        initial_model, input_shape, layers, where)
    rows = tuple(_row(layer, None if initial is None else initial[i])
                 for i, layer in enumerate(layers))
    d, m = len(rows), len(margins)
    log_spec = 2 * _sum_log(r.spectral for r in rows)
    log_fro = 2 * _sum_log(r.frobenius for r in rows)
    log_g2 = 2 * math.log(gamma) if gamma > 0 else math.nan
    ratio = sum(_over(r.frobenius ** 2, r.spectral ** 2) for r in rows)
    ratio_init = sum(_over(r.distance_frobenius ** 2, r.spectral ** 2) for r in rows)
    log_path = math.nan if obstacles else log_path_sum(graph, layers, 2.0, bias=True)
    undefined = {}
    if initial_model is None:
        undefined.update({name: "no initial_model: pass the network at initialization"
                          for name in _FROM_INIT})
    if obstacles:
        reason = "; ".join(why for _, why in obstacles)
        undefined.update({name: reason for name in _PATHS})
    if not gamma > 0:
        why = _nonpositive_margin(gamma, margins, percentile)
        warn_caller(f"{where}: {why}")
        undefined.update({name: "; ".join(filter(None, (undefined.get(name), why)))
                          for name in _OVER_MARGIN})
    with adapter.active():
        fisher_rao, why = _fisher_rao(adapter, data, labels, d, batch_size)
    if why:
        undefined["fisher_rao"] = why
    return NormMeasures(
        margin=gamma, percentile=float(percentile), depth=d,
        n_parameters=sum(p.numel() for p in model.parameters()), m=m,
        inverse_margin=math.exp(-log_g2),
        log_spectral_init=log_spec - log_g2 + _log(ratio_init),
        log_spectral_orig=log_spec - log_g2 + _log(ratio),
        log_prod_spectral_over_margin=log_spec - log_g2, log_prod_spectral=log_spec,
        frobenius_over_spectral=ratio,
        log_sum_spectral_over_margin=math.log(d) + (log_spec - log_g2) / d,
        log_sum_spectral=math.log(d) + log_spec / d,
        log_prod_frobenius_over_margin=log_fro - log_g2, log_prod_frobenius=log_fro,
        log_sum_frobenius_over_margin=math.log(d) + (log_fro - log_g2) / d,
        log_sum_frobenius=math.log(d) + log_fro / d,
        frobenius_distance=sum(r.distance_frobenius ** 2 for r in rows),
        spectral_distance=sum(r.distance_spectral ** 2 for r in rows),
        parameter_norm=sum(r.frobenius ** 2 for r in rows),
        path_norm_over_margin=_safe_exp(log_path - log_g2), path_norm=_safe_exp(log_path),
        fisher_rao=fisher_rao, layers=rows, undefined=undefined, mode=folded_mode(adapter))


def _initial_layers(initial_model: nn.Module, input_shape: tuple[int, ...],
                    layers: list[WeightLayer], where: str) -> list[WeightLayer]:
    """The weight layers of the folded initial network, matched to ``layers`` by position,
    name and shape."""
    initial = weight_layers(folded_graph(initial_model, input_shape, where))
    now = [(layer.name, tuple(layer.weight.shape)) for layer in layers]
    then = [(layer.name, tuple(layer.weight.shape)) for layer in initial]
    if now != then:
        raise invalid(where, "initial_model with the weight layers of model (after batchnorm "
                      f"folding): {now}", f"{then}", "pass the same architecture at "
                      "initialization as initial_model")
    return initial


def _row(layer: WeightLayer, initial: Optional[WeightLayer]) -> NormLayer:
    w = as_matrix(layer.weight)
    if initial is None:
        distance_f = distance_s = math.nan
    else:
        diff = w - as_matrix(initial.weight)
        distance_f, distance_s = float(diff.norm()), spectral_norm(diff)
    return NormLayer(name=layer.name, kind=layer.kind, frobenius=float(w.norm()),
                     spectral=spectral_norm(w), distance_frobenius=distance_f,
                     distance_spectral=distance_s)


def _fisher_rao(adapter: ModelAdapter, data: Any, labels: Any, depth: int,
                batch_size: int) -> tuple[float, str]:
    """(d + 1)^2 / m sum_j <theta, grad_theta l_j>^2, and why it is NaN ("" when defined):
    <theta, grad l_j> is the derivative of l_j(theta + t theta) at t = 0, for every j of a
    batch at once by ``jvp``."""
    params = adapter.weights("the Fisher-Rao norm reads the parameters")
    if labels is not None:
        data = (data, labels)
    total, m = 0.0, 0
    for batch in adapter.batches(data, batch_size=batch_size):
        x = adapter.measured(batch.inputs)
        y = batch.labels.to(x.device)

        def losses(theta: dict, x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            out = adapter.select(functional_call(adapter.model, theta, (x,)))
            return per_sample_loss(out, y, where=None)

        try:
            _, dots = jvp(losses, (params,), (params,))
        except NotImplementedError as exc:  # an op without a forward-mode derivative
            return math.nan, f"forward-mode differentiation fails: {exc}"
        total += float(dots.double().square().sum())
        m += len(dots)
    return (depth + 1) ** 2 * total / m, ""


def _log(value: float) -> float:
    """log, -inf at 0, NaN for NaN."""
    return math.log(value) if value > 0 else (-math.inf if value == 0 else math.nan)


def _over(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN for a zero denominator (an all-zero layer)."""
    return numerator / denominator if denominator > 0 else math.nan
