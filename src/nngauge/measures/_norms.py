"""Norm-based capacity over margin, path norms and Lipschitz bounds (generalization paper 2.2-2.3).

For a chain of d weight layers W_1..W_d (W_i of shape h_i x h_{i-1}) with piecewise-linear
activations, section 2.2 bounds the capacity by (gamma the epsilon-margin, eq. 2):

    l2:       (1 / gamma^2) prod_i 4 ||W_i||_F^2
    l1-path:  (1 / gamma^2) (sum_paths |prod_i 2 W_i[j_i, j_{i-1}]|)^2 = 4^d l1path^2 / gamma^2
    l2-path:  (1 / gamma^2) sum_paths prod_i 4 h_i W_i[j_i, j_{i-1}]^2
              = prod_i 4 h_i l2path^2 / gamma^2
    spectral: (1 / gamma^2) prod_i h_i ||W_i||_2^2

and Figure 1 plots them without the constants and width factors (``*_plain`` here). Section
2.3: the l_inf and l_2 Lipschitz constants are bounded by prod_i ||W_i||_{1,inf} and
prod_i ||W_i||_2, giving capacities (C / gamma)^n, n the input dimension.

The l_p path norm (sum over input-output paths of prod_i |W_i[j_i, j_{i-1}]|^p)^(1/p) is
computed by one forward pass of the network with weights |W|^p, identity activations and an
all-ones input, never by enumerating paths. Biases: a bias b_j of unit j is a weight from a
constant-1 unit, so paths may also start at a bias (``bias=True``, the default: the path norm
of the function the network computes); ``bias=False`` counts input-output paths only.
Convolutions are path-counted exactly (their weights shared over positions, zero padding); their
matrix norms (Frobenius, spectral, l_{p,inf}) are of the kernel reshaped to
(out_channels, in_channels * kernel), with h_i = out_channels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nngauge._internal.layers import layer_kind
from nngauge.errors import invalid
from nngauge.measures._fold import fold_batchnorm
from nngauge.measures._margin import class_scores, epsilon_margin, margins_of
from nngauge.measures._result import MeasureResult, row_named

_PASS_THROUGH = (nn.Identity, nn.Flatten, nn.modules.dropout._DropoutNd)
_PIECEWISE_LINEAR = (nn.ReLU, nn.LeakyReLU, nn.ReLU6, nn.Hardtanh, nn.PReLU)


@dataclass(frozen=True)
class WeightLayer:
    """One weight layer of a chain: its name, module and kind ("linear" or "conv")."""

    name: str
    module: nn.Module
    kind: str

    def matrix(self) -> torch.Tensor:
        """The weight as an (h_i, fan_in) float64 matrix (conv kernels reshaped)."""
        w = self.module.weight.detach().to(torch.float64)
        return w.reshape(w.shape[0], -1)


def weight_chain(model: nn.Module,
                 where: str) -> tuple[list[tuple[str, nn.Module]], list[WeightLayer]]:
    """The model as an ordered chain of leaf modules, and its weight layers.

    Batchnorm models are folded first (:func:`fold_batchnorm`); an nngauge ``MLP`` is read
    through ``to_sequential()``; ``nn.Sequential`` containers are flattened. Supported leaves:
    Linear, Conv (not transposed), piecewise-linear activations, Identity, Flatten, Dropout.
    """
    if not isinstance(model, nn.Module):
        raise invalid(where, "a torch.nn.Module", type(model).__name__, "pass the network")
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        model = fold_batchnorm(model)
    if hasattr(model, "to_sequential") and hasattr(model, "config"):
        if model.config.skip is not None or model.config.norm == "layer":
            raise invalid(where, "an MLP without skip connections or layer normalization",
                          f"skip={model.config.skip}, norm={model.config.norm!r}",
                          "norm and path measures need a plain chain of weight layers")
        model = model.to_sequential()
    chain: list[tuple[str, nn.Module]] = []
    _flatten(model, "", chain, where)
    weights = [WeightLayer(name, m, layer_kind(m)) for name, m in chain
               if layer_kind(m) in ("linear", "conv")]
    if not weights:
        raise invalid(where, "a network with at least one Linear or Conv layer",
                      "no weight layers", "pass a network of Linear/Conv layers")
    return chain, weights


def _flatten(module: nn.Module, name: str, chain: list, where: str) -> None:
    if isinstance(module, nn.Sequential):
        for child_name, child in module.named_children():
            _flatten(child, f"{name}.{child_name}" if name else child_name, chain, where)
        return
    kind = layer_kind(module)
    if isinstance(module, nn.modules.conv._ConvTransposeNd):
        kind = "other"
    if isinstance(module, nn.modules.conv._ConvNd) and module.padding_mode != "zeros":
        kind = "other"
    activation = getattr(module, "activation", None)
    piecewise = (isinstance(module, _PIECEWISE_LINEAR)
                 or getattr(activation, "piecewise_linear", False))
    if kind in ("linear", "conv") or isinstance(module, _PASS_THROUGH) or (
            kind == "activation" and piecewise):
        chain.append((name or type(module).__name__, module))
        return
    raise invalid(where, "a chain (nn.Sequential or nngauge MLP) of Linear/Conv layers, "
                  "piecewise-linear activations, Flatten, Dropout and Identity",
                  f"module {name or '<model>'!r} of type {type(module).__name__}",
                  "express the network as such an nn.Sequential (pooling, residual blocks "
                  "and smooth activations are not supported)")


def log_path_sum(chain: Sequence[tuple[str, nn.Module]], p: float, *, bias: bool,
                 input_shape: Optional[Sequence[int]], where: str) -> float:
    """log of sum over paths of prod |w|^p, by one forward pass (rescaled: no overflow)."""
    first = next(m for _, m in chain if layer_kind(m) in ("linear", "conv"))
    if input_shape is None:
        if isinstance(first, nn.Linear):
            input_shape = (first.in_features,)
        else:
            raise invalid(where, "input_shape (channels, *spatial) for a convolutional network",
                          "input_shape=None", "pass input_shape=(C, H, W) of one sample")
    x = torch.ones((1, *input_shape), dtype=torch.float64)
    log_scale = 0.0
    with torch.no_grad():
        for _, module in chain:
            if isinstance(module, nn.Flatten):
                x = module(x)
            elif layer_kind(module) in ("linear", "conv"):
                weight = module.weight.detach().to(torch.float64).abs() ** p
                b = module.bias
                b = (b.detach().to(torch.float64).abs() ** p) * math.exp(-log_scale) if (
                    bias and b is not None) else None
                x = (F.linear(x, weight, b) if isinstance(module, nn.Linear)
                     else module._conv_forward(x, weight, b))
                top = float(x.max())
                if top > 0:
                    x = x / top
                    log_scale += math.log(top)
    total = float(x.sum())
    return log_scale + math.log(total) if total > 0 else -math.inf


def path_norm(model: nn.Module, p: float = 2, *, bias: bool = True,
              input_shape: Optional[Sequence[int]] = None) -> float:
    """The l_p path norm: the l_p norm of the vector of weight products along all paths.

    ||w||_{path,p} = (sum over paths j = (j_0, ..., j_d) of prod_i |W_i[j_i, j_{i-1}]|^p)^(1/p)
    (generalization paper, section 2.2; Neyshabur et al. 2015). It equals the minimum over
    node rescalings of prod_i ||W_i||_{p,inf} for p >= 1 and is invariant to node rescaling.
    Computed by one forward pass of |W|^p on an all-ones input with identity activations
    (rescaled per layer, so no overflow), never by enumeration.

    Args:
        model: an ``nn.Sequential`` (or nngauge ``mlp`` without skips / layer norm) of Linear /
            Conv layers and piecewise-linear activations; batchnorm is folded first.
        p: the exponent, any p > 0 (1 and 2 are the paper's).
        bias: count paths that start at a bias (a weight from a constant-1 unit); False
            counts input-to-output paths only.
        input_shape: shape of one input sample; needed for convolutional networks only.

    Returns:
        The path norm (float; ``inf`` if it exceeds float64).

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.ReLU(),
        ...                           torch.nn.Linear(2, 1, bias=False))
        >>> with torch.no_grad():
        ...     _ = net[0].weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        ...     _ = net[2].weight.copy_(torch.tensor([[1.0, -1.0]]))
        >>> round(path_norm(net, 1), 9)  # |1|+|2|+|3|+|4|, paths through the two hidden units
        10.0
    """
    where = "path_norm()"
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not p > 0 or not math.isfinite(p):
        raise invalid(where, "p > 0 (finite)", f"p={p!r}", "pass p=1 or p=2 (or another p > 0)")
    chain, _ = weight_chain(model, where)
    log_sum = log_path_sum(chain, p, bias=bias, input_shape=input_shape, where=where)
    return _safe_exp(log_sum / p)


@dataclass(frozen=True)
class LayerNorms:
    """Norms of one weight layer W_i (shape h_i x fan_in).

    Attributes:
        name, kind: module name and "linear" / "conv".
        units: h_i (output features or channels).
        fan_in: h_{i-1} (times the kernel size for convolutions).
        frobenius: ||W_i||_F.
        spectral: ||W_i||_2 (largest singular value).
        l1_inf: ||W_i||_{1,inf}: the largest l1 norm of a unit's incoming weights.
        l2_inf: ||W_i||_{2,inf}: the largest l2 norm of a unit's incoming weights.
    """

    name: str
    kind: str
    units: int
    fan_in: int
    frobenius: float
    spectral: float
    l1_inf: float
    l2_inf: float


def layer_norms(weights: Sequence[WeightLayer]) -> tuple[LayerNorms, ...]:
    """The per-layer norm table of a weight chain."""
    rows = []
    for layer in weights:
        w = layer.matrix()
        rows.append(LayerNorms(
            name=layer.name, kind=layer.kind, units=int(w.shape[0]), fan_in=int(w.shape[1]),
            frobenius=float(torch.linalg.matrix_norm(w)),
            spectral=float(torch.linalg.matrix_norm(w, ord=2)),
            l1_inf=float(w.abs().sum(dim=1).max()),
            l2_inf=float(w.norm(dim=1).max())))
    return tuple(rows)


@dataclass(frozen=True)
class CapacityMeasure:
    """One norm-based capacity bound over margin (section 2.2).

    Attributes:
        name: "l2", "l1_path", "l2_path" or "spectral".
        capacity: the bound with its constants and width factors, over gamma^2.
        plain: without constants and width factors (what Figure 1 plots), over gamma^2.
        log10_capacity, log10_plain: their base-10 logarithms (finite when the values
            overflow float64).
    """

    name: str
    capacity: float
    plain: float
    log10_capacity: float
    log10_plain: float


@dataclass(frozen=True)
class CapacityResult(MeasureResult):
    """Norm-based capacity measures of a trained classifier (generalization paper 2.2-2.3).

    Attributes:
        margin: gamma, the epsilon-margin (5th percentile by default); the capacities are
            NaN when gamma <= 0 (the network does not fit that share of the data).
        margin_percentile: the percentile used.
        l2, l1_path, l2_path, spectral: the four capacities with constants and widths.
        measures: the four as :class:`CapacityMeasure` rows (with and without constants).
        l1_path_norm, l2_path_norm: the path norms (with biases as set by ``bias``).
        lipschitz_linf: prod_i ||W_i||_{1,inf}, bound on the l_inf Lipschitz constant.
        lipschitz_l2: prod_i ||W_i||_2, bound on the l_2 Lipschitz constant.
        log10_lipschitz_capacity_linf, log10_lipschitz_capacity_l2: log10 of (C / gamma)^n.
        input_dim: n, the number of input entries of one sample.
        depth: d, the number of weight layers.
        layers: per-layer :class:`LayerNorms` rows (the norm table).
        bias: whether paths starting at biases were counted.
    """

    margin: float
    margin_percentile: float
    l2: float
    l1_path: float
    l2_path: float
    spectral: float
    measures: tuple[CapacityMeasure, ...]
    l1_path_norm: float
    l2_path_norm: float
    lipschitz_linf: float
    lipschitz_l2: float
    log10_lipschitz_capacity_linf: float
    log10_lipschitz_capacity_l2: float
    input_dim: int
    depth: int
    layers: tuple[LayerNorms, ...]
    bias: bool

    def __getitem__(self, name: str) -> CapacityMeasure:
        return row_named(self.measures, name, "a capacity measure")


def capacity(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    margin_percentile: float = 5,
    bias: bool = True,
    output: Any = None,
    batch_size: int = 1024,
) -> CapacityResult:
    """The norm- and path-based capacities over margin of section 2.2, and section 2.3's
    Lipschitz bounds, with the per-layer norm table.

    See the module docstring for the formulas. gamma is the epsilon-margin of
    :func:`nngauge.margin` at ``margin_percentile``. Batchnorm networks are folded first
    (appendix A); the user's model is not changed.

    Args:
        model: an ``nn.Sequential`` (or nngauge ``mlp``) chain of Linear/Conv layers and
            piecewise-linear activations, mapping (m, ...) to class scores (m, n_classes).
        data, labels: labelled data, as for :func:`nngauge.margin`.
        margin_percentile: eps in percent (the paper: 5).
        bias: count bias paths in the path norms (see :func:`path_norm`).
        output: selector when the model returns a tuple/dict.
        batch_size: samples per forward pass.

    Returns:
        :class:`CapacityResult`.

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(4, 16, 2, 3, generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(50, 4, generator=torch.Generator().manual_seed(1))
        >>> y = net(x).argmax(dim=1)
        >>> result = capacity(net, x, y)
        >>> result.margin > 0 and result["l2"].plain <= result.l2
        True
    """
    where = "capacity()"
    if not 0 <= margin_percentile < 100:
        raise invalid(where, "margin_percentile in [0, 100)", f"{margin_percentile!r}",
                      "pass e.g. margin_percentile=5 (the paper)")
    chain, weights = weight_chain(model, where)
    scores, targets = class_scores(model, data, labels, output=output, batch_size=batch_size,
                                   where=where)
    gamma = epsilon_margin(margins_of(scores, targets), margin_percentile)
    input_shape = _input_shape(data)
    rows = layer_norms(weights)
    d = len(rows)
    log_l1 = log_path_sum(chain, 1.0, bias=bias, input_shape=input_shape, where=where)
    log_l2 = log_path_sum(chain, 2.0, bias=bias, input_shape=input_shape, where=where)
    log_widths = sum(math.log(r.units) for r in rows)
    logs = {  # (log plain, log of constants and width factors), before dividing by gamma^2
        "l2": (2 * _sum_log(r.frobenius for r in rows), d * math.log(4)),
        "l1_path": (2 * log_l1, d * math.log(4)),
        "l2_path": (log_l2, d * math.log(4) + log_widths),
        "spectral": (2 * _sum_log(r.spectral for r in rows), log_widths),
    }
    log_gamma2 = 2 * math.log(gamma) if gamma > 0 else math.nan
    measures = tuple(_capacity_measure(name, plain, factor, log_gamma2)
                     for name, (plain, factor) in logs.items())
    n = int(np.prod(input_shape))
    lip_linf = _sum_log(r.l1_inf for r in rows)
    lip_l2 = _sum_log(r.spectral for r in rows)
    log_gamma = math.log(gamma) if gamma > 0 else math.nan
    return CapacityResult(
        margin=gamma, margin_percentile=float(margin_percentile),
        l2=measures[0].capacity, l1_path=measures[1].capacity, l2_path=measures[2].capacity,
        spectral=measures[3].capacity, measures=measures,
        l1_path_norm=_safe_exp(log_l1), l2_path_norm=_safe_exp(log_l2 / 2),
        lipschitz_linf=_safe_exp(lip_linf), lipschitz_l2=_safe_exp(lip_l2),
        log10_lipschitz_capacity_linf=n * (lip_linf - log_gamma) / math.log(10),
        log10_lipschitz_capacity_l2=n * (lip_l2 - log_gamma) / math.log(10),
        input_dim=n, depth=d, layers=rows, bias=bias,
    )


def _input_shape(data: Any) -> tuple[int, ...]:
    from nngauge._internal.data import as_batches

    first = next(iter(as_batches(data[0] if isinstance(data, (tuple, list)) else data,
                                 batch_size=1, where="capacity()")))
    return tuple(first.inputs.shape[1:])


def _capacity_measure(name: str, log_plain: float, log_factor: float,
                      log_gamma2: float) -> CapacityMeasure:
    plain = log_plain - log_gamma2
    full = plain + log_factor
    ln10 = math.log(10)
    return CapacityMeasure(name=name, capacity=_safe_exp(full), plain=_safe_exp(plain),
                           log10_capacity=full / ln10, log10_plain=plain / ln10)


def _sum_log(values) -> float:
    return sum(math.log(v) if v > 0 else -math.inf for v in values)


def _safe_exp(log_value: float) -> float:
    if math.isnan(log_value):
        return math.nan
    return math.exp(log_value) if log_value < 709.0 else math.inf
