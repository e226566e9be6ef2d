"""Where the piecewise-linear engine cuts pieces (:class:`EngineSite`) and how each site acts
on them: a piecewise-linear activation's linear branches (:class:`ActivationRule`) and a max
pooling's arg-max (:class:`MaxPoolRule`)."""

from __future__ import annotations

import math
import re
from collections import ChainMap
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
import torch.fx as fx
from torch import nn

from nngauge._internal.graph import GraphOp, ModelGraph, target_name
from nngauge._internal.patterns import region_codes


@dataclass(frozen=True)
class EngineSite:
    """An op where pieces are cut: a piecewise-linear activation or a max pooling.

    Attributes:
        name: the op's site name (:attr:`nngauge._internal.graph.GraphOp.site`: the module's
            name, ``"name#k"`` for the k-th call of a module called several times, the node's
            name for a function).
        label: readable op label (``"layer1.0.relu (ReLU)"``).
        kind: ``"activation"`` or ``"maxpool"``.
        units: entries of a piece's code: the activation's input numel per sample; the max
            pooling's output numel per sample.
        breakpoints: an activation's breakpoints (None for max pooling).
    """

    name: str
    label: str
    kind: str
    units: int
    breakpoints: Optional[tuple[float, ...]] = None

    @property
    def piecewise_linear(self) -> bool:
        """Always True: the engine accepts piecewise-linear sites only."""
        return True


class ActivationRule:
    """A piecewise-linear activation: cut at the breakpoints, then the linear branch of each
    unit's region. Codes: int8 regions #{j : h > c_j}."""

    settles = True  # one cut finds every crossing

    def __init__(self, graph: ModelGraph, op: GraphOp, source: fx.Node,
                 constants: dict, example: torch.Tensor) -> None:
        self.source, self.in_shape = source, _shape(graph, source)
        self.breakpoints = op.breakpoints
        self.slope, intercept = _linear_branches(graph, op, source, constants, example)
        self.intercept = intercept if bool(intercept.any()) else None
        self.site = EngineSite(op.site, op.label, "activation", math.prod(self.in_shape),
                               op.breakpoints)
        self.workspace = self.site.units

    def levels(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor,
                                                                      Sequence[float]]:
        return x.flatten(2), self.breakpoints

    def apply(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, Any]:
        flat = x.flatten(2)
        code = region_codes(combine(weights, flat), self.breakpoints)
        out = flat * _branch(self.slope, code).unsqueeze(1)
        if self.intercept is not None:
            out += _branch(self.intercept, code).unsqueeze(1)
        return code, out.reshape(-1, *self.in_shape)


def _branch(table: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """(pieces, units) table[code[p, u], u] of a (regions, units) table."""
    step = torch.diff(table, dim=0)
    value = torch.addcmul(table[0], code >= 1, step[0])
    for region in range(2, len(table)):
        value.addcmul_(code >= region, step[region - 1])
    return value


def combine(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """sum_r weights[p, r] x[p, r, ...]: values at a point of each piece from the reference
    values x (pieces, k + 1, ...) and the point's weights (pieces, k + 1)."""
    return torch.bmm(weights.unsqueeze(1), x.flatten(2)).reshape(x.shape[:1] + x.shape[2:])


def _linear_branches(graph: ModelGraph, op: GraphOp, source: fx.Node, constants: dict,
                     example: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(regions, units) slopes a_r and intercepts b_r with phi(h) = a_r h + b_r in region r,
    from phi evaluated at two points inside each region on tensors shaped like one sample."""
    cuts = op.breakpoints
    inner = [(cuts[0] - 2.0, cuts[0] - 1.0)]
    inner += [(a + (b - a) / 3, a + 2 * (b - a) / 3) for a, b in zip(cuts[:-1], cuts[1:])]
    inner += [(cuts[-1] + 1.0, cuts[-1] + 2.0)]
    points = torch.tensor(inner, dtype=example.dtype, device=example.device)  # (regions, 2)
    shape = _shape(graph, source)
    probe = points.reshape(-1, *[1] * len(shape)).expand(-1, *shape).clone()
    y = graph.evaluate(op, ChainMap({source: probe}, constants)).reshape(len(inner), 2, -1)
    slope = (y[:, 1] - y[:, 0]) / (points[:, 1] - points[:, 0]).unsqueeze(1)
    return slope, y[:, 0] - slope * points[:, 0].unsqueeze(1)


class MaxPoolRule:
    """Max pooling over windows (O, K) of flat spatial input indices, per channel: cut where
    an entry meets the interior's arg-max, until the arg-max is constant. Codes: int32 flat
    spatial index of each output's arg-max (as ``return_indices=True`` gives)."""

    settles = False  # the arg-max read after a cut may still change inside a child

    def __init__(self, graph: ModelGraph, op: GraphOp, source: fx.Node,
                 constants: dict, example: torch.Tensor) -> None:
        self.source, in_shape = source, _shape(graph, source)
        probe = torch.zeros((1, *in_shape), dtype=example.dtype, device=example.device)
        value = graph.evaluate(op, ChainMap({source: probe}, constants))
        self.with_indices = isinstance(value, (tuple, list))
        self.out_shape = tuple((value[0] if self.with_indices else value).shape[1:])
        dims = int(re.search(r"(\d)d", _pool_name(op)).group(1))
        self.channels = math.prod(in_shape[:-dims])
        self.grid = (self.channels, math.prod(in_shape[-dims:]))
        self.windows = _pool_windows(op, in_shape[-dims:], self.out_shape[-dims:],
                                     graph.module).to(example.device)
        self.site = EngineSite(op.site, op.label, "maxpool", math.prod(self.out_shape))
        self.workspace = self.channels * self.windows.numel()

    def _argmax(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(pieces, C, O) window position of the maximum at each piece's interior."""
        return combine(weights, x)[..., self.windows].argmax(-1)

    def levels(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor,
                                                                      Sequence[float]]:
        x = x.reshape(*x.shape[:2], *self.grid)
        entries = x[..., self.windows]  # (pieces, refs, C, O, K)
        best = self._argmax(x, weights)[:, None, :, :, None]
        top = entries.gather(-1, best.expand(*entries.shape[:-1], 1))
        return (entries - top).flatten(2), (0.0,)

    def apply(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, Any]:
        x = x.reshape(*x.shape[:2], *self.grid)
        best = self._argmax(x, weights)
        code = self.windows[torch.arange(self.windows.shape[0], device=x.device), best]
        index = code.unsqueeze(1).expand(-1, x.shape[1], -1, -1)
        out = x.gather(3, index).reshape(-1, *self.out_shape)
        if self.with_indices:
            out = (out, index.reshape(-1, *self.out_shape))
        return code.flatten(1).to(torch.int32), out


def _pool_name(op: GraphOp) -> str:
    return type(op.module).__name__ if op.module is not None else target_name(op.node)


def _pool_windows(op: GraphOp, size_in: Sequence[int], size_out: Sequence[int],
                  root: nn.Module) -> torch.Tensor:
    """(O, K) flat spatial input index of every window position (O = prod(size_out)), in the
    order pooling scans them; positions in the padding repeat the window's first valid one."""
    if "adaptive" in _pool_name(op).lower():
        axes = [_adaptive_axis(i, o) for i, o in zip(size_in, size_out)]
    else:
        params = _pool_params(op, root, len(size_in))
        axes = [_strided_axis(i, o, *p) for i, o, p in zip(size_in, size_out, zip(*params))]
    dims = len(axes)
    flat, valid = torch.zeros((), dtype=torch.long), torch.ones((), dtype=torch.bool)
    stride = 1
    for i in reversed(range(dims)):
        position, inside = axes[i]
        shape = [1] * (2 * dims)
        shape[i], shape[dims + i] = position.shape
        flat = flat + (position * stride).reshape(shape)
        valid = valid & inside.reshape(shape)
        stride *= size_in[i]
    windows = math.prod(size_out)
    flat, valid = flat.reshape(windows, -1), valid.expand(flat.shape).reshape(windows, -1)
    first = valid.to(torch.int8).argmax(1, keepdim=True)
    return torch.where(valid, flat, flat.gather(1, first))


def _pool_params(op: GraphOp, root: nn.Module, dims: int) -> list[tuple[int, ...]]:
    """(kernel, stride, padding, dilation), each a tuple of ``dims`` ints."""
    names = ("kernel_size", "stride", "padding", "dilation")
    if op.module is not None:
        raw = [getattr(op.module, name) for name in names]
    else:
        kwargs = op.node.normalized_arguments(root, normalize_to_only_use_kwargs=True).kwargs
        raw = [kwargs.get(name) for name in names]
    kernel, stride, padding, dilation = [_per_axis(value, dims) for value in raw]
    return [kernel, stride or kernel, padding or (0,) * dims, dilation or (1,) * dims]


def _per_axis(value: Any, dims: int) -> tuple[int, ...]:
    if value is None or (isinstance(value, (tuple, list)) and not value):
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * dims


def _strided_axis(size_in: int, size_out: int, kernel: int, stride: int, padding: int,
                  dilation: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(size_out, kernel) input positions of each window along one axis, and validity."""
    position = (torch.arange(size_out) * stride - padding).unsqueeze(1) \
        + torch.arange(kernel) * dilation
    return position, (position >= 0) & (position < size_in)


def _adaptive_axis(size_in: int, size_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Adaptive pooling windows [floor(o n / m), ceil((o + 1) n / m)) along one axis."""
    o = torch.arange(size_out)
    start, end = (o * size_in) // size_out, -((-(o + 1) * size_in) // size_out)
    position = start.unsqueeze(1) + torch.arange(int((end - start).max()))
    return position, position < end.unsqueeze(1)


Rule = Union[ActivationRule, MaxPoolRule]


def graph_op(graph: ModelGraph, node: fx.Node) -> GraphOp:
    return next(op for op in graph.ops if op.node is node)


def _shape(graph: ModelGraph, node: fx.Node) -> tuple[int, ...]:
    """The per-sample shape of a tensor node of ``graph``."""
    return graph_op(graph, node).shape


__all__ = ["ActivationRule", "EngineSite", "MaxPoolRule", "Rule", "combine", "graph_op"]
