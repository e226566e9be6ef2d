"""Distinct activation patterns over a set of inputs (Raghu et al. 2017, section 2.1).

The activation pattern of an input is the linear region of every neuron (see
:mod:`nngauge._internal.piecewise`); Theorem 1 bounds how many a network can realize, and
:func:`nngauge.theory.max_activation_patterns` computes the bound. Patterns are counted by
hashing the rows of each layer's region matrix batch by batch (two 64-bit hashes per row), so
that no pattern matrix is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import PatternHasher, activation_sites, site_codes
from nngauge._results import Result
from nngauge._vocabulary import renamed


@dataclass(frozen=True)
class PatternCountLayer(Result):
    """Distinct patterns of one activation layer.

    Attributes:
        name: the activation module's name.
        units: neurons in the layer.
        n_patterns: distinct region vectors of the layer over the inputs.
        piecewise_linear: False when regions are signs of a smooth activation's input.
    """

    name: str
    units: int
    n_patterns: int
    piecewise_linear: bool


@dataclass(frozen=True)
class ActivationPatternsResult(Result):
    """Distinct activation patterns over a set of inputs.

    Attributes:
        n_patterns: distinct whole-network patterns (over the chosen layers).
        n_inputs: inputs seen.
        layers: per-layer rows (:class:`PatternCountLayer`).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _rows = "layers"
    _headline = "n_patterns"

    n_patterns: int
    n_inputs: int
    layers: tuple[PatternCountLayer, ...]
    mode: MeasurementMode


@renamed(inputs="data")
@constrained()
@model_options("norm_mode", "dropout")
@torch.no_grad()
def activation_patterns(
    model: nn.Module,
    data: Any,
    *,
    layers: Optional[Sequence[str]] = None,
    batch_size: int = 4096,
    options: ModelOptions,
) -> ActivationPatternsResult:
    """Distinct activation patterns of ``model`` over ``data`` (Raghu et al. 2017, sec. 2.1).

    A = #{distinct (region_u(x))_u : x in data}, with region_u(x) the linear region of
    neuron u's activation at x (ReLU: off / on; hard tanh: -1 / linear / +1; the sign of the
    pre-activation for activations that are not piecewise linear), per layer and over all
    chosen layers together.

    Args:
        model: the network (batchnorm with running or frozen statistics: ``norm_mode``).
        data: the inputs: a tensor (n, ...), numpy array, (inputs, labels) pair, Dataset or
            DataLoader.
        layers: activation module or site names (default: every activation site, in call
            order; a module called k times per forward pass gives k sites).
        batch_size: inputs per forward pass.
        norm_mode: batchnorm's statistics: "eval" (running), "frozen" (computed on
            ``data``, then fixed), None (as found; "train" is refused: a point's pattern
            would depend on its batch).
        dropout: keep dropout on (default off).

    Returns:
        :class:`ActivationPatternsResult`.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 2), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([0.0, -1.0]))
        >>> activation_patterns(net, torch.tensor([[-1.0], [0.5], [0.7], [2.0]])).n_patterns
        3
    """
    adapter = ModelAdapter(model, options, where="activation_patterns()")
    hasher = PatternHasher()
    n_inputs = 0
    with adapter.active(data=data):
        adapter.require_independent_samples()
        sites, chosen = activation_sites(adapter, adapter.collect(data, 2).inputs, layers)
        hashes: list[list[torch.Tensor]] = [[] for _ in chosen]
        units = [0] * len(chosen)
        for batch in adapter.batches(data, batch_size=batch_size):
            x = adapter.measured(batch.inputs)
            for i, code in enumerate(site_codes(adapter, sites, chosen, x, batch.inputs)):
                units[i] = code.shape[1]
                hashes[i].append(hasher(code, i).cpu())
            n_inputs += len(x)
    per_layer = [torch.cat(h) for h in hashes]
    rows = tuple(PatternCountLayer(layer.name, u, int(torch.unique(h, dim=0).shape[0]),
                              layer.piecewise_linear)
                 for layer, u, h in zip(chosen, units, per_layer))
    total = int(torch.unique(sum(per_layer), dim=0).shape[0]) if per_layer else 1
    return ActivationPatternsResult(n_patterns=total, n_inputs=n_inputs, layers=rows,
                                    mode=adapter.mode)
