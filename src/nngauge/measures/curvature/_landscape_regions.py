"""Region boundaries on a loss-landscape slice: where the activation patterns of the data
change as the weights move.

Raghu et al. ("On the Expressive Power of Deep Neural Networks", ICML 2017, Theorem 2) show
that a piecewise-linear network is affine on each region of input space. Read in weight space,
every sample's activation pattern AP(x; theta) is piecewise constant along a slice
theta + a d_1 (+ b d_2), and between the points where some sample's pattern changes the loss
is a smooth function of (a, b) (a polynomial of the coordinates, through the network's
products of weights). :func:`~nngauge.measures.curvature.loss_landscape` with
``count_regions=True`` measures those changes on the same slice:

- **exact** (a line moving the parameters of one module, batchnorm statistics fixed, a
  piecewise-linear network): each pre-activation is affine in the step, and
  :func:`~nngauge.measures.curvature.weight_transitions` finds every change;
- **sampled** (otherwise; smooth activations read as the sign of their pre-activations): the
  patterns at the grid points, compared between neighbouring points (a lower bound on the
  changes between them) and with the patterns at theta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import nn

from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.patterns import PatternHasher, PatternLayer, activation_sites, region_codes
from nngauge._internal.sites import Site
from nngauge.errors import InvalidInputError, invalid
from nngauge.measures.curvature._weight_transitions import weight_transitions


@dataclass(frozen=True)
class PatternProbe:
    """The activation sites read at every grid point and the data's codes at theta.

    Attributes:
        sites, layers: the activation sites and their pattern layers.
        centre: per layer, the (m, units) int8 codes of the data at theta.
        hasher: hashes a sample's codes; its weights exist before any vmapped call.
    """

    sites: tuple[Site, ...]
    layers: tuple[PatternLayer, ...]
    centre: tuple[torch.Tensor, ...]
    hasher: PatternHasher

    @property
    def units(self) -> int:
        """Units over every site (the length of one sample's pattern)."""
        return sum(c.shape[1] for c in self.centre)

    def read(self, values: dict, centre: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """From the inputs recorded at the sites in one forward pass of a batch (b samples):
        each sample's pattern hash (b, 2) and its units in another region than at theta (b,)
        (``centre``: this batch's rows of :attr:`centre`). Runs under vmap."""
        codes = [region_codes(values[layer.name], layer.breakpoints) for layer in self.layers]
        hashed = sum(self.hasher(c, i) for i, c in enumerate(codes))
        moved = sum((c != c0).sum(1) for c, c0 in zip(codes, centre))
        return hashed, moved


def pattern_probe(adapter: ModelAdapter, x: torch.Tensor, batch_size: int) -> PatternProbe:
    """The data's activation patterns at theta, at every activation site of the model."""
    sites, layers = activation_sites(adapter, x[:2], None)
    if not sites:
        raise invalid(adapter.where, "a model with activations for count_regions=True",
                      "no activation site", "count_regions needs nonlinear units (ReLU, tanh, "
                      "..., as modules or functions); drop count_regions")
    codes = [[] for _ in layers]
    for start in range(0, len(x), batch_size):
        raw = x[start:start + batch_size]  # token models run from their own input
        _, values = adapter.run(adapter.measured(raw), sites, raw=raw, inputs=True)
        for k, layer in enumerate(layers):
            codes[k].append(region_codes(values[layer.name], layer.breakpoints))
    centre = tuple(torch.cat(c) for c in codes)
    hasher = PatternHasher()
    for i, c in enumerate(centre):
        hasher(c[:1], i)  # draws the hash weights outside vmap
    return PatternProbe(tuple(sites), tuple(layers), centre, hasher)


@dataclass(frozen=True)
class SliceRegions:
    """What ``count_regions`` adds to a landscape (see :class:`LossLandscapeResult`)."""

    method: str
    pattern_distance: np.ndarray
    region_changes: Optional[np.ndarray]
    region_breakpoints: Optional[np.ndarray]
    smooth_interval: Optional[tuple[float, float]]


def sampled_regions(probe: PatternProbe, hashes: torch.Tensor, moved: torch.Tensor,
                    axes: tuple[np.ndarray, ...]) -> SliceRegions:
    """From every grid point's sample hashes (points, m, 2) and units moved (points, m):
    the pattern distance at each point; on a line, the samples whose pattern differs between
    neighbouring points and the grid interval around 0 where no sample's pattern changes."""
    shape = tuple(len(a) for a in axes)
    m = hashes.shape[1]
    distance = (moved.double().sum(1) / (m * probe.units)).cpu().numpy().reshape(shape)
    if len(axes) > 1:
        return SliceRegions("sampled", distance, None, None, None)
    changed = (hashes[1:] != hashes[:-1]).any(-1).sum(1).cpu().numpy()
    return SliceRegions("sampled", distance, changed, None,
                        _grid_interval(axes[0], distance == 0))


def _grid_interval(a: np.ndarray, same: np.ndarray) -> Optional[tuple[float, float]]:
    """The widest run of grid points around 0 where every sample keeps theta's pattern (an
    outer bound on theta's piece: changes between grid points are not seen)."""
    if not (a[0] <= 0 <= a[-1]):
        return None
    i = int(np.argmin(np.abs(a)))
    if not same[i]:
        return (0.0, 0.0)
    lo, hi = i, i
    while lo > 0 and same[lo - 1]:
        lo -= 1
    while hi < len(a) - 1 and same[hi + 1]:
        hi += 1
    return (float(a[max(lo - 1, 0)]), float(a[min(hi + 1, len(a) - 1)]))


def exact_line(adapter: ModelAdapter, x: torch.Tensor, direction: dict, axis: np.ndarray,
               distance: np.ndarray) -> tuple[Optional[SliceRegions], str]:
    """Every pattern change of the data along a line that moves one module, with
    :func:`~nngauge.measures.curvature.weight_transitions`; (None, the reason) when the line
    is not of that kind or the network not piecewise linear."""
    owner = _single_module(adapter.model, direction)
    if owner is None:
        return None, "the direction moves more than one module"
    if adapter.options.norm_mode == "train":
        return None, "batch statistics (norm_mode='train') make patterns depend on the batch"
    name, prefix = owner
    local = {k[len(prefix):]: v for k, v in direction.items() if bool(v.any())}
    try:
        found = weight_transitions(adapter.user_model, x, layer=name, direction=local,
                                   span=(float(axis[0]), float(axis[-1])),
                                   options=adapter.options,
                                   norm_data=x if adapter.options.norm_mode == "frozen" else None)
    except InvalidInputError as exc:
        return None, f"not exact ({str(exc).splitlines()[0]})"
    changes = np.histogram(found.change_points, bins=axis)[0]
    breaks = found.breakpoints
    below, above = breaks[breaks < 0], breaks[breaks > 0]
    interval = (float(below.max()) if len(below) else float(axis[0]),
                float(above.min()) if len(above) else float(axis[-1]))
    return SliceRegions("exact", distance, changes, breaks, interval), "exact"


def _single_module(model: nn.Module, direction: dict) -> Optional[tuple[str, str]]:
    """(module name, its parameter prefix) when every moved parameter is one module's own."""
    moved = [n for n, v in direction.items() if bool(v.any())]
    owners = {n.rpartition(".")[0] for n in moved}
    if len(owners) != 1:
        return None
    name = owners.pop()
    own = {f"{name}.{k}" if name else k for k, _ in
           model.get_submodule(name).named_parameters(recurse=False)}
    return (name, f"{name}." if name else "") if set(moved) <= own else None


__all__ = ["PatternProbe", "SliceRegions", "exact_line", "pattern_probe", "sampled_regions"]
