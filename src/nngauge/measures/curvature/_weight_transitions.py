"""Where the activation patterns of the data change along a line of weight space: the link
between linear regions and the loss surface.

Raghu et al. ("On the Expressive Power of Deep Neural Networks", ICML 2017, Theorem 2) show
that for fixed weights a piecewise-linear network is affine on each region of its input
space. Seen from weight space, the same holds along a line theta + t delta that moves one
layer: that layer's output (W + t D) z + (b + t d) is affine in t for each input's fixed z, and
every layer after it is piecewise linear in its input, so each sample's activation pattern is
piecewise constant in t and the loss is smooth between the values of t where some pattern
changes. :func:`weight_transitions` finds those values exactly with the piecewise-linear
engine (every sample's segment of t in one run), so that a loss-landscape slice can be drawn
with its region boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import NAME, Integer, Maybe, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.data import collect
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import select_pattern_layers
from nngauge._internal.piecewise import (
    EngineReport,
    Intervals,
    PieceLimit,
    PiecewiseEngine,
    WeightLine,
    float64_copy,
)
from nngauge._results import Result
from nngauge._vocabulary import deprecated_attribute, renamed
from nngauge.errors import BudgetExceededError, invalid
from nngauge.measures.expressivity._lines import AFFINE_RTOL

MAX_PIECES = 2**18
"""Default budget of pieces (all samples together): about a second of engine time per 10^4
pieces on an MLP, and memory for the pieces of one chunk."""
CHECKED_STEPS = (0.125, 0.5, 0.875)
"""The guard compares the model with the engine at these fractions of the span."""


@dataclass(frozen=True)
class WeightTransitionLayer(Result):
    """Transitions at one activation site along the weight line, summed over the samples.

    Attributes:
        name: the site.
        units: its units.
        transitions: (sample, t) pairs where one of its units changes region, counted per
            unit.
    """

    name: str
    units: int
    transitions: int


@dataclass(frozen=True)
class WeightTransitionsResult(Result):
    """The values of t in [t_min, t_max] where the activation pattern of some sample changes
    along theta + t delta (delta moves one module's parameters).

    Attributes:
        n_changes: distinct values of t (within ``merge_tol``) where the pattern of the data
            changes: the loss over these samples is smooth between them.
        breakpoints: (n_changes,) those values, sorted.
        change_points: every sample's changes, sorted: one value of t per (sample, change)
            (``breakpoints`` without merging; a histogram of it is the density of changes).
        per_sample: (samples,) pattern changes along the line for each sample.
        mean_per_sample: their mean.
        layers: one :class:`WeightTransitionLayer` per chosen site.
        layer: the name of the moved layer (``module``: its deprecated name).
        span: (t_min, t_max).
        near_coincident: crossings merged for lying within ``merge_tol`` of another.
        settings, mode: the options and how the model was run.
    """

    _rows = "layers"
    _headline = "transitions"

    n_changes: int
    breakpoints: np.ndarray = field(repr=False, compare=False)
    change_points: np.ndarray = field(repr=False, compare=False)
    per_sample: np.ndarray = field(repr=False, compare=False)
    mean_per_sample: float = 0.0
    layers: tuple[WeightTransitionLayer, ...] = ()
    layer: str = ""
    span: tuple[float, float] = (-1.0, 1.0)
    near_coincident: int = 0
    settings: dict = field(default_factory=dict)
    mode: Optional[MeasurementMode] = None

    module = deprecated_attribute("layer")


@renamed(module="layer")
@constrained(layer=NAME, max_pieces=Maybe(Integer(1)))
@model_options("output", "norm_mode")
def weight_transitions(
    model: nn.Module,
    data: Any,
    *,
    layer: str,
    direction: dict[str, torch.Tensor],
    span: Sequence[float] = (-1.0, 1.0),
    layers: Optional[Sequence[str]] = None,
    merge_tol: float = 1e-12,
    max_pieces: Optional[int] = MAX_PIECES,
    options: ModelOptions,
    norm_data: Any = None,
) -> WeightTransitionsResult:
    """Exact pattern changes of the data along a line of one module's weights.

    With theta(t) = theta + t delta, delta nonzero only in ``layer``'s own parameters (a
    Linear, a Conv or a batchnorm's affine parameters: the module's output is linear in them),
    every sample's activation pattern AP(x; theta(t)) is piecewise constant in t (Raghu et
    al., ICML 2017, Theorem 2, read in weight space); this returns every t in ``span`` where
    some sample's pattern changes, per sample and per site. Computed on a float64 copy with
    the piecewise-linear engine, whose slice for each sample has the same input at both ends
    and the module's output moving from theta(t_min) to theta(t_max).

    Args:
        model: a piecewise-linear network (as for exact ``transitions``).
        data: inputs (n, ...) (a tensor, array, (inputs, labels) pair, Dataset or DataLoader).
        layer: the name of the moved module, the one layer whose weights move
            (``model.get_submodule(layer)``).
        direction: delta by parameter name of that module (``"weight"``, ``"bias"``); shapes
            of the parameters; names left out do not move.
        span: (t_min, t_max), t_min < t_max.
        layers: the sites whose patterns are read and reported (default: all).
        merge_tol: breakpoints closer than this (as a fraction of the span) are one.
        max_pieces: refuse (:class:`~nngauge.BudgetExceededError`) as soon as the samples'
            segments are known to break into more pieces than this (a random line through a
            convolution's weights can change the pattern of every pixel's units many times);
            None: no limit.
        output, norm_mode, norm_data: as for :func:`nngauge.transitions` ("train" batchnorm is
            refused: a sample's pattern would depend on the batch).

    Returns:
        :class:`WeightTransitionsResult`.

    Raises:
        InvalidInputError: an unknown module or one with no parameters, a direction with
            other names or shapes, span not increasing, a network that is not piecewise
            linear, or a model that differs from the engine's affine maps along the line.
        BudgetExceededError: more than ``max_pieces`` pieces.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 1), nn.ReLU()).double()
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.fill_(0.0)
        >>> x = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
        >>> res = weight_transitions(net, x, layer="0",
        ...                          direction={"bias": torch.tensor([1.0])}, span=(-3, 3))
        >>> res.breakpoints.tolist()  # x + t = 0 at t = -1 and t = -2
        [-2.0, -1.0]
    """
    where = "weight_transitions()"
    adapter = ModelAdapter(model, options, where=where)
    t0, t1 = _span(span, where)
    inputs = collect(data, where=where, require_float=False).inputs
    if not inputs.is_floating_point():
        raise invalid(where, "floating-point inputs of a piecewise-linear network (the engine "
                      "follows every unit from the network's own input)",
                      f"inputs of dtype {inputs.dtype} (token ids?)",
                      "a token model's embedding lookup is not piecewise linear in its input: "
                      "measure its pattern changes with loss_landscape(..., dims=1, "
                      "count_regions=True) instead (sampled)")
    with adapter.active(data=norm_data), torch.no_grad():
        adapter.require_independent_samples()
        copy = float64_copy(adapter.model)
        moved = _module(copy, layer, where)
        delta = _direction(moved, direction, where)
        for name, d in delta.items():
            getattr(moved, name).add_(t0 * d)
        line = WeightLine(moved, {name: (t1 - t0) * d for name, d in delta.items()})
        x = adapter.prepare_raw(inputs).to(torch.float64)
        engine = PiecewiseEngine(copy, x[:1], where=where, weight_line=line,
                                 fallback="a network of affine maps and piecewise-linear "
                                          "activations")
        chosen = select_pattern_layers(engine.sites, layers, where)
        try:
            found = _run(engine, x, merge_tol, max_pieces)
        except PieceLimit as limit:
            raise invalid(where, f"at most max_pieces={max_pieces} pieces along the line",
                          f"{limit} (counted before they were made)",
                          "shorten the span, move a smaller part of the weights, use fewer "
                          "samples, or raise max_pieces", error=BudgetExceededError) from None
        _check(adapter, copy, line, x, found, where)
    breaks, per_sample, transitions, units, near, every = found
    index = [engine.sites.index(site) for site in chosen]
    return WeightTransitionsResult(
        n_changes=len(breaks), breakpoints=t0 + (t1 - t0) * breaks,
        change_points=t0 + (t1 - t0) * every, per_sample=per_sample,
        mean_per_sample=float(per_sample.mean()) if len(per_sample) else 0.0,
        layers=tuple(WeightTransitionLayer(engine.sites[i].name, units[i], transitions[i])
                     for i in index),
        layer=layer, span=(t0, t1), near_coincident=near,
        settings={"layer": layer, "span": (t0, t1), "merge_tol": merge_tol,
                  "max_pieces": max_pieces},
        mode=adapter.mode)


def _span(span: Any, where: str) -> tuple[float, float]:
    try:
        t0, t1 = (float(v) for v in span)
    except (TypeError, ValueError):
        raise invalid(where, "span=(t_min, t_max)", f"span={span!r}", "pass two numbers") \
            from None
    if not (np.isfinite(t0) and np.isfinite(t1) and t0 < t1):
        raise invalid(where, "finite t_min < t_max", f"span=({t0}, {t1})",
                      "pass an increasing pair, e.g. span=(-1, 1)")
    return t0, t1


def _module(model: nn.Module, name: str, where: str) -> nn.Module:
    try:
        module = model.get_submodule(name)
    except AttributeError:
        names = [n for n, m in model.named_modules() if list(m.parameters(recurse=False))]
        raise invalid(where, "layer= the name of a module with parameters",
                      f"layer={name!r}", f"pick from {names[:20]}") from None
    if not list(module.parameters(recurse=False)):
        raise invalid(where, "a module with its own parameters (a Linear, Conv or batchnorm)",
                      f"layer={name!r} ({type(module).__name__}) without any",
                      "name the layer itself, e.g. 'layers.1.linear'")
    return module


def _direction(module: nn.Module, direction: Any, where: str) -> dict[str, torch.Tensor]:
    own = dict(module.named_parameters(recurse=False))
    if not isinstance(direction, dict) or not direction:
        raise invalid(where, "direction= a dict of the module's parameter names to tensors",
                      f"{type(direction).__name__}", f"pass e.g. {{{next(iter(own))!r}: "
                      "torch.randn_like(...)}")
    wrong = [(k, tuple(torch.as_tensor(v).shape)) for k, v in direction.items()
             if k not in own or tuple(torch.as_tensor(v).shape) != tuple(own[k].shape)]
    if wrong:
        shapes = [(k, tuple(p.shape)) for k, p in own.items()]
        raise invalid(where, f"directions named and shaped as {shapes}", f"{wrong}",
                      "pass tensors shaped like the module's parameters")
    return {k: torch.as_tensor(v).to(own[k]) for k, v in direction.items()}


def _run(engine: PiecewiseEngine, x: torch.Tensor, merge_tol: float,
         max_pieces: Optional[int]):
    """Every sample's pieces of s in [0, 1]; the distinct breakpoints (within ``merge_tol``),
    changes per sample, transitions and units per site, merged crossings, and every
    sample's changes (sorted, unmerged)."""
    pieces = Intervals.whole(len(x), x.device)
    anchors = torch.stack([x, x], 1)
    report = EngineReport()
    transitions, units = [0] * len(engine.sites), [0] * len(engine.sites)
    starts, samples = [], []
    previous = None
    for chunk in engine.run(pieces, anchors, merge_tol=merge_tol, report=report,
                            max_pieces=max_pieces):
        index = chunk.pieces.slice_index
        codes = list(chunk.codes)
        if previous is not None:  # the chunk continues the last one's sample
            index = torch.cat([previous[0], index])
            codes = [torch.cat([p, c]) for p, c in zip(previous[1], codes)]
            lo = torch.cat([previous[2], chunk.pieces.lo])
        else:
            lo = chunk.pieces.lo
        same = index[1:] == index[:-1]
        for i, code in enumerate(codes):
            units[i] = code.shape[1]
            transitions[i] += int(((code[1:] != code[:-1]) & same.unsqueeze(1)).sum())
        changed = same & torch.stack([(c[1:] != c[:-1]).any(1) for c in codes]).any(0) \
            if codes else torch.zeros_like(same)
        starts.append(lo[1:][changed].cpu())
        samples.append(index[1:][changed].cpu())
        previous = (index[-1:], [c[-1:] for c in codes], lo[-1:])
    starts, samples = torch.cat(starts), torch.cat(samples)
    per_sample = torch.bincount(samples, minlength=len(x)).numpy()
    ordered = torch.sort(starts).values
    keep = torch.ones(len(ordered), dtype=torch.bool)
    keep[1:] = ordered[1:] - ordered[:-1] > merge_tol
    return (ordered[keep].numpy(), per_sample, transitions, units, report.near_coincident,
            ordered.numpy())


def _check(adapter: ModelAdapter, model: nn.Module, line: WeightLine, x: torch.Tensor,
           found, where: str) -> None:
    """The guard: between consecutive breakpoints every sample's output must be affine in s
    (the model run with the moved weights at s equals the interpolation of its values near
    the ends of the piece holding s), at the fractions :data:`CHECKED_STEPS` of the span."""
    breaks = torch.as_tensor(found[0])
    bounds = torch.cat([torch.zeros(1, dtype=torch.float64), breaks,
                        torch.ones(1, dtype=torch.float64)])
    params = dict(model.named_parameters())
    name = next(n for n, m in model.named_modules() if m is line.module)
    prefix = f"{name}." if name else ""

    def at(s: float) -> torch.Tensor:
        moved = {**params, **{prefix + k: params[prefix + k] + s * d
                               for k, d in line.delta.items()}}
        return adapter.select(torch.func.functional_call(model, moved, (x,)))

    for s in CHECKED_STEPS:
        j = int(torch.searchsorted(bounds, torch.tensor(s, dtype=torch.float64)))
        lo, hi = float(bounds[j - 1]), float(bounds[j])
        a, b, y = at(lo + 1e-9 * (hi - lo)), at(hi - 1e-9 * (hi - lo)), at(s)
        w = (s - lo) / (hi - lo)
        scale = y.abs() + a.abs() + b.abs() + 1e-300
        worst = float(((y - (1 - w) * a - w * b).abs() / scale).max())
        if worst > AFFINE_RTOL:
            raise invalid(where, "a network whose output is affine in t between the pattern "
                          "changes of the data", f"a deviation of {worst:.2e}",
                          "check that the network is piecewise linear and its output does "
                          "not mix samples")
