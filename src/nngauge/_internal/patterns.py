"""Activation patterns of any network, read at its activation sites (Raghu et al. 2017,
section 2.1).

A unit's *region* is the index of the linear piece of its activation it is in: with the
activation's breakpoints c_1 < ... < c_r, region(h) = #{i : h > c_i} for the pre-activation h
(ReLU: {0: off, 1: on}; hard tanh: {0: -1, 1: linear, 2: +1}). For activations that are not
piecewise linear (tanh, sigmoid, ...) the region is the sign of the pre-activation (breakpoint 0).
A layer's *code* is the (batch, units) int8 matrix of regions; the network's activation pattern
is the concatenation of every layer's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from nngauge._internal.graph import module_breakpoints
from nngauge._internal.sites import Site
from nngauge.errors import invalid

CHUNK_POINTS = 8192
"""Most points per forward pass when a computation streams over many points."""
RECORDED_ELEMENTS = 2**24
"""Most values (activation codes, or a layer's outputs) one chunk of points may record: a
chunk holds as many points as fit (:func:`points_per_chunk`), so the memory of a stream stays
near a fixed amount whatever the network (a ResNet-50 at 224 x 224 records about 10^7 values
a point)."""


def points_per_chunk(values_per_point: int, *, least: int = 1) -> int:
    """Points per forward pass when each point records ``values_per_point`` values: as many
    as :data:`RECORDED_ELEMENTS` holds, within [``least``, :data:`CHUNK_POINTS`]."""
    return max(least, min(CHUNK_POINTS, RECORDED_ELEMENTS // max(1, values_per_point)))


@dataclass(frozen=True)
class PatternLayer:
    """An activation module, the breakpoints delimiting its regions, and whether it is
    piecewise linear (else its regions are the signs of its pre-activations)."""

    name: str
    module: nn.Module
    breakpoints: tuple[float, ...]
    piecewise_linear: bool


def site_pattern_layer(site: Site) -> PatternLayer:
    """The :class:`PatternLayer` of an activation site (its name is the site's name)."""
    breakpoints = module_breakpoints(site.module)
    piecewise = breakpoints is not None
    return PatternLayer(site.name, site.module, breakpoints if piecewise else (0.0,), piecewise)


def activation_sites(adapter, raw_sample: torch.Tensor, names: Optional[Sequence[str]]
                     ) -> tuple[list[Site], list[PatternLayer]]:
    """The activation sites named in ``names`` (default: all, in call order) and their
    pattern layers: activation modules and the activation functions called outside modules
    (``F.relu``, ``torch.relu``, ``x.clamp(min=0)``, ...; found in the traced graph, see
    :meth:`~nngauge._internal.adapter.ModelAdapter.expose_functions`), so that every measure
    reading activation sites finds the same ones. A named site that is not an activation is
    refused, as is a model with no activation module that ``torch.fx`` cannot trace (its
    functional activations could not be found)."""
    sites = adapter.sites(raw_sample, names, default_kinds=("activation",))
    if not sites and adapter.untraced is not None:
        raise invalid(adapter.where, "activation sites: activation modules, or activation "
                      "functions (F.relu, ...) in a forward() torch.fx can trace",
                      f"no activation module, and the graph could not be traced to find "
                      f"functional ones: {adapter.untraced}",
                      "use activation modules (nn.ReLU, nn.GELU, ...) in the model, or make "
                      "its forward() traceable")
    wrong = [s.label for s in sites if s.kind != "activation"]
    if wrong:
        known = [s.name for s in adapter.discover(raw_sample) if s.kind == "activation"]
        raise invalid(adapter.where, "names of activation modules or sites", f"{wrong}",
                      f"pick from {known[:20]}")
    return sites, [site_pattern_layer(s) for s in sites]


def site_codes(adapter, sites: Sequence[Site], layers: Sequence[PatternLayer],
               x: torch.Tensor, raw: Optional[torch.Tensor]) -> list[torch.Tensor]:
    """The region codes of every pattern layer at measured inputs ``x`` (one forward pass)."""
    _, inputs = adapter.run(x, sites, raw=raw, inputs=True)
    missing = [layer.name for layer in layers if layer.name not in inputs]
    if missing:
        raise invalid(adapter.where, "activation sites the forward pass reaches",
                      f"sites never reached: {missing}", "select layers the model uses")
    return [region_codes(inputs[layer.name], layer.breakpoints) for layer in layers]


def select_pattern_layers(all_layers: Sequence[PatternLayer], names: Optional[Sequence[str]],
                          where: str) -> list[PatternLayer]:
    """The activation layers named in ``names`` (None: all)."""
    if names is None:
        return list(all_layers)
    names = [names] if isinstance(names, str) else list(names)
    known = {layer.name: layer for layer in all_layers}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise invalid(where, "names of activation modules", f"{unknown}",
                      f"pick from {list(known)[:20]}")
    return [known[name] for name in names]


def region_codes(h: torch.Tensor, breakpoints: Sequence[float]) -> torch.Tensor:
    """(batch, units) int8 regions #{i : h > c_i} of pre-activations ``h`` (batch, ...)."""
    flat = h.detach().reshape(h.shape[0], -1)
    if not breakpoints:
        return torch.zeros(flat.shape, dtype=torch.int8, device=flat.device)
    # out of place, so that it also runs under vmap
    return sum(((flat > c).to(torch.int8) for c in breakpoints[1:]),
               (flat > breakpoints[0]).to(torch.int8))


class PatternHasher:
    """Two independent 64-bit linear hashes of code rows (collisions ~ 2^-128 per pair), so
    that distinct patterns are counted without storing them: hash(row) = sum_j code_j r_j mod
    2^64 with random odd r_j, fixed per (layer, unit)."""

    def __init__(self, seed: int = 0) -> None:
        self._generator = torch.Generator().manual_seed(seed)
        self._weights: dict[tuple[int, int], torch.Tensor] = {}

    def _weight(self, layer: int, units: int) -> torch.Tensor:
        key = (layer, units)
        if key not in self._weights:
            bits = torch.randint(-2**62, 2**62, (2, units), generator=self._generator,
                                 dtype=torch.int64)
            self._weights[key] = bits * 2 + 1
        return self._weights[key]

    def __call__(self, codes: torch.Tensor, layer: int) -> torch.Tensor:
        """(batch, 2) int64 hashes of a layer's (batch, units) codes."""
        weight = self._weight(layer, codes.shape[1]).to(codes.device)
        codes = codes.to(torch.int64)  # int64 products and sums wrap around (mod 2^64)
        return torch.stack([(codes * w).sum(1) for w in weight], dim=1)
