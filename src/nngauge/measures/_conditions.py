"""Conditions C1-C3 of Theorem 1 (generalization paper, section 4, Figures 5-8, appendix D).

For a ReLU chain f(x) = W_d D_{d-1} W_{d-1} ... D_1 W_1 x with D_i the 0/1 activation pattern of
layer i at x (D_d = I), W_0 = x and D_0 = I, h_i the width of layer i (h_0 the input size):

- C1 (no weak interactions): for all 0 <= a <= c < b <= d,
  ||prod_{i=a}^b D_i W_i||_F
      >= mu / sqrt(h_c) ||prod_{i=c+1}^b D_i W_i||_F ||prod_{i=a}^c D_i W_i||_F;
  the condition number is 1/mu with mu the smallest ratio over triples (and samples). Figure 6
  splits the triples into a < c < b - 1 ("interior") and c = a or c = b - 1 ("boundary").
- C2 (few units near flipping): for each hidden layer k, the fraction of units whose
  pre-activation is within delta of zero is at most C2 delta (Figure 7 plots it against delta).
- C3 (no spiky units): h_i ||W_i||_{2,inf}^2 <= C3^2 ||D_i W_i||_F^2; Figure 5 (right) plots
  each unit's squared incoming norm over the layer average.

Biases, when present, enter only through the activation patterns D_i and the pre-activations
of C2 (the paper's networks have none).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._internal.data import collect
from nngauge.errors import invalid
from nngauge.measures._norms import weight_chain
from nngauge.measures._result import MeasureResult

DEFAULT_DELTAS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


@dataclass(frozen=True)
class ConditionLayer:
    """C2 and C3 of one weight layer W_i.

    Attributes:
        name: module name; units: h_i.
        c2: max over samples and deltas of (fraction of units with |pre-activation| <= delta)
            / delta (NaN for the output layer, which has no activation).
        c2_fraction: that fraction averaged over samples, one value per delta (Figure 7).
        c3: max over samples of sqrt(h_i) ||W_i||_{2,inf} / ||D_i W_i||_F.
        c3_mean: its mean over samples.
        spiky_ratio: max over units of ||W_{i,j}||^2 / mean_j ||W_{i,j}||^2 (Figure 5 right).
        unit_ratios: that ratio for every unit, shape (h_i,) (not in to_dict).
    """

    name: str
    units: int
    c2: float
    c2_fraction: tuple
    c3: float
    c3_mean: float
    spiky_ratio: float
    unit_ratios: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class ConditionsResult(MeasureResult):
    """Conditions C1-C3 of Theorem 1 on data.

    Attributes:
        mu: the smallest C1 ratio over triples and samples; condition_number: 1 / mu.
        c1_interior, c1_boundary: the largest 1/mu over a < c < b - 1 and over c = a or
            c = b - 1 (Figure 6 middle and right; NaN when there is no such triple).
        c2: max over hidden layers of the layer C2 constants.
        c3: max over layers of the layer C3 constants.
        deltas: the deltas of C2.
        triples: the (a, c, b) triples, in the column order of ``c1``.
        c1: 1/mu per sample and triple, shape (n_samples, n_triples) (not in to_dict;
            inf where a product vanishes).
        layers: per-layer :class:`ConditionLayer` rows.
        n_samples: samples used.
    """

    mu: float
    condition_number: float
    c1_interior: float
    c1_boundary: float
    c2: float
    c3: float
    deltas: tuple
    triples: tuple
    layers: tuple[ConditionLayer, ...]
    n_samples: int
    c1: np.ndarray = field(repr=False)


def sharpness_conditions(
    model: nn.Module,
    data: Any,
    *,
    deltas: Sequence[float] = DEFAULT_DELTAS,
    max_samples: int = 100,
) -> ConditionsResult:
    """Conditions C1 (1/mu), C2 and C3 of Theorem 1 for a ReLU network on data (section 4).

    See the module docstring for the definitions. Products of the D_i W_i are formed for every
    sample at once (batched matrix products, float64): cost O(d^2) products of h x h matrices
    per sample, so keep ``max_samples`` modest for wide networks.

    Args:
        model: an ``nn.Sequential`` (or nngauge ``mlp``) of Linear layers and ReLUs
            (batchnorm folded first).
        data: inputs (n, d_in), (inputs, labels), a Dataset or a DataLoader.
        deltas: the C2 thresholds (> 0).
        max_samples: use at most this many samples (the first ones).

    Returns:
        :class:`ConditionsResult`.

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(5, 32, 3, 2, init="gaussian", generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(20, 5, generator=torch.Generator().manual_seed(1))
        >>> r = sharpness_conditions(net, x)
        >>> r.condition_number >= 1 / 2 ** 0.5 and len(r.layers) == 3
        True
    """
    where = "sharpness_conditions()"
    deltas = tuple(float(d) for d in deltas)
    if not deltas or not all(d > 0 for d in deltas):
        raise invalid(where, "deltas: a non-empty sequence of values > 0", repr(deltas),
                      "pass e.g. deltas=(0.01, 0.1, 1.0)")
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
        raise invalid(where, "max_samples an integer >= 1", repr(max_samples), "pass e.g. 100")
    chain, weights = weight_chain(model, where)
    for name, module in chain:
        if isinstance(module, nn.modules.conv._ConvNd) or (
                not isinstance(module, (nn.Linear, nn.ReLU, nn.Identity, nn.Dropout))
                and getattr(getattr(module, "activation", None), "name", None) != "relu"):
            raise invalid(where, "a chain of Linear layers and ReLU activations",
                          f"module {name!r} of type {type(module).__name__}",
                          "conditions C1-C3 are defined for fully-connected ReLU networks")
    x = collect(data, where=where, max_samples=max_samples).inputs.to(torch.float64).flatten(1)
    if x.shape[1] != weights[0].module.in_features:
        raise invalid(where, f"inputs with {weights[0].module.in_features} features",
                      f"inputs with {x.shape[1]}", "pass data matching the first layer")
    mats = [w.matrix() for w in weights]
    pres = _preactivations(weights, x)
    masks = [(z > 0).to(torch.float64) for z in pres[:-1]] + [torch.ones_like(pres[-1])]
    c1, triples = _c1(x, mats, masks)
    interior = [i for i, (a, c, b) in enumerate(triples) if a < c < b - 1]
    boundary = [i for i, (a, c, b) in enumerate(triples) if c == a or c == b - 1]
    rows = tuple(_layer_row(w, mat, mask, pre, deltas, is_output=i == len(weights) - 1)
                 for i, (w, mat, mask, pre) in enumerate(zip(weights, mats, masks, pres)))
    worst = float(np.max(c1)) if c1.size else math.nan
    return ConditionsResult(
        mu=1.0 / worst if worst > 0 else math.inf, condition_number=worst,
        c1_interior=float(np.max(c1[:, interior])) if interior else math.nan,
        c1_boundary=float(np.max(c1[:, boundary])) if boundary else math.nan,
        c2=max((r.c2 for r in rows if not math.isnan(r.c2)), default=math.nan),
        c3=max(r.c3 for r in rows), deltas=deltas, triples=tuple(triples), layers=rows,
        n_samples=int(x.shape[0]), c1=c1)


def _preactivations(weights, x) -> list[torch.Tensor]:
    """Pre-activations W_i h_{i-1} + b_i of every layer, shape (n, h_i)."""
    out, h = [], x
    with torch.no_grad():
        for layer in weights:
            m = layer.module
            z = h @ m.weight.detach().to(torch.float64).T
            if m.bias is not None:
                z = z + m.bias.detach().to(torch.float64)
            out.append(z)
            h = torch.relu(z)
    return out


def _c1(x, mats, masks) -> tuple[np.ndarray, list]:
    """1/mu for every sample and triple 0 <= a <= c < b <= d (index 0 is W_0 = x, D_0 = I)."""
    d = len(mats)
    widths = [x.shape[1]] + [m.shape[0] for m in mats]
    norms = {}  # (a, b) -> ||D_b W_b ... D_a W_a||_F per sample, shape (n,)
    for a in range(d + 1):
        prod = x[:, :, None] if a == 0 else masks[a - 1][:, :, None] * mats[a - 1][None]
        norms[(a, a)] = torch.linalg.matrix_norm(prod)
        for b in range(a + 1, d + 1):
            prod = masks[b - 1][:, :, None] * (mats[b - 1] @ prod)
            norms[(a, b)] = torch.linalg.matrix_norm(prod)
    triples = [(a, c, b) for a, c, b in itertools.product(range(d + 1), repeat=3) if a <= c < b]
    cols = []
    for a, c, b in triples:
        num = norms[(c + 1, b)] * norms[(a, c)]
        den = math.sqrt(widths[c]) * norms[(a, b)]
        cols.append(torch.where(den > 0, num / den, torch.where(num > 0, math.inf, 0.0)))
    c1 = torch.stack(cols, dim=1).numpy() if cols else np.zeros((x.shape[0], 0))
    return c1, triples


def _layer_row(layer, mat, mask, pre, deltas, *, is_output: bool) -> ConditionLayer:
    units = mat.shape[0]
    row_sq = (mat**2).sum(dim=1)
    c3 = math.sqrt(units) * float(row_sq.max().sqrt()) / (mask @ row_sq).sqrt()
    if is_output:
        fractions, c2 = tuple(math.nan for _ in deltas), math.nan
    else:
        near = torch.stack([(pre.abs() <= d).to(torch.float64).mean(dim=1) for d in deltas], 1)
        fractions = tuple(float(v) for v in near.mean(dim=0))
        c2 = float((near / torch.tensor(deltas, dtype=torch.float64)).max())
    ratios = (row_sq / row_sq.mean()).numpy()
    return ConditionLayer(name=layer.name, units=units, c2=c2, c2_fraction=fractions,
                          c3=float(c3.max()), c3_mean=float(c3.mean()),
                          spiky_ratio=float(ratios.max()), unit_ratios=ratios)
