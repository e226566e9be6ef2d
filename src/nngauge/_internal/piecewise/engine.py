"""The propagation of the piecewise-linear engine: :class:`PiecewiseEngine` walks the ops of
the model's ``torch.fx`` graph over the pieces of a slice, chunk by chunk (see
:mod:`nngauge._internal.piecewise`)."""

from __future__ import annotations

import copy
import math
from collections import ChainMap, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.graph import GraphOp, ModelGraph, trace_graph
from nngauge._internal.piecewise.geometry import Geometry, PieceLimit, check_limit
from nngauge._internal.piecewise.rules import ActivationRule, MaxPoolRule, Rule, graph_op
from nngauge.errors import invalid

MAX_ELEMENTS = 2**20
"""Chunk budget: pieces x (k + 1) x the largest per-sample tensor of an op (a max pooling's
window entries counted) stays below this many elements. Small chunks are faster as well as
lighter: tensors of a few MB reuse freed memory, larger ones are mapped afresh (page faults)."""


LIVE_FRACTION = 0.8
"""A Linear after an activation multiplies only the live input features (nonzero on some piece
of the chunk) when they are at most this fraction of all."""


def float64_copy(model: nn.Module) -> nn.Module:
    """A float64 deep copy of ``model`` (the user's model is never changed): crossings are
    solved in double precision."""
    return copy.deepcopy(model).to(torch.float64)


@dataclass(frozen=True)
class Chunk:
    """Final pieces of one chunk, in slice order.

    Attributes:
        pieces: their geometry.
        codes: per site of :attr:`PiecewiseEngine.sites`, the (pieces, units) codes: int8
            regions of an activation, int32 flat arg-max indices of a max pooling.
        output: the model's output (the graph's output value: a tensor, tuple or dict) at the
            pieces' reference points, tensors of shape (pieces * (k + 1), ...) piece-major: the
            output on piece p at weights w is sum_r w_r output[p * (k + 1) + r].
    """

    pieces: Geometry
    codes: tuple[torch.Tensor, ...]
    output: Any


@dataclass
class EngineReport:
    """What a run met.

    Attributes:
        pieces: final pieces (cuts where a max pooling's arg-max does not change included).
        near_coincident: activation crossings merged into another one or into a piece's
            boundary for lying within ``merge_tol`` of it (a sliver piece ignored each).
        smallest: the smallest final piece size (length in t for 1-D slices, area in plane
            coordinates for 2-D ones).
    """

    pieces: int = 0
    near_coincident: int = 0
    smallest: float = math.inf

    def add(self, pieces: Geometry) -> None:
        self.pieces += len(pieces)
        if len(pieces):
            self.smallest = min(self.smallest, float(pieces.sizes().min()))


@dataclass
class _Batch:
    """Pieces and, for each live node, its reference values (pieces * (k + 1), ...); the codes
    of the sites passed so far."""

    pieces: Geometry
    env: dict[fx.Node, Any]
    codes: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class WeightLine:
    """A line theta + t delta through the parameters of one module whose output is linear in
    them (Linear, Conv, batchnorm's affine parameters): along it the module's output is
    f(x; theta) + t f(x; delta), affine in t for a fixed input, so a 1-D slice whose two
    reference points are the same input and t = 0, 1 follows the line exactly.

    Attributes:
        module: the module (every call of it moves).
        delta: its parameters' directions by name (``named_parameters(recurse=False)``);
            parameters left out do not move.
    """

    module: nn.Module
    delta: dict[str, torch.Tensor]

    def shift(self, x: torch.Tensor) -> torch.Tensor:
        """f(x; delta): the module with every parameter replaced by its direction (0 where
        none is given), buffers kept."""
        params = {name: self.delta.get(name, torch.zeros_like(p))
                  for name, p in self.module.named_parameters(recurse=False)}
        return torch.func.functional_call(self.module, params, (x,))


class PiecewiseEngine:
    """The exact linear pieces of a piecewise-linear network on slices of its input space.

    Built once per model (traced with ``torch.fx``, see the module docstring), then
    :meth:`run` on any slices. The model (float64, eval mode, as :func:`float64_copy` and
    ``.eval()`` give) may contain affine ops (Linear, Conv, eval batchnorm, average pooling,
    reshapes, concatenations, residual additions, ...), piecewise-linear activations (ReLU,
    LeakyReLU, PReLU, ReLU6, HardTanh, clamp, nngauge's piecewise-linear activations) and max
    pooling (1-D, 2-D, 3-D, adaptive).

    Attributes:
        sites: the activation and max-pooling sites in graph (call) order.

    Args:
        model: the float64 network; example: one input batch (1, ...) to trace it on.
        where: the measure's name, for error messages.
        max_elements: the chunk budget (:data:`MAX_ELEMENTS`).
        fallback: the measure's option for networks the engine cannot follow, named in the
            refusal.
        weight_line: slices along a line of one module's parameters instead of the input
            (:class:`WeightLine`; 1-D slices whose two anchors are the same input).

    Raises:
        InvalidInputError: naming every op that is not affine, piecewise-linear or a max
            pooling (with the reason), and suggesting ``fallback``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from nngauge._internal.piecewise import polyline_slices
        >>> net = nn.Sequential(nn.Linear(1, 2), nn.ReLU()).double()
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([0.5, -0.5]))
        >>> engine = PiecewiseEngine(net, torch.zeros(1, 1, dtype=torch.float64), where="doc")
        >>> pieces, anchors = polyline_slices(torch.tensor([[-1.0], [1.0]], dtype=torch.float64))
        >>> chunk, = engine.run(pieces, anchors, merge_tol=1e-12, report=EngineReport())
        >>> chunk.pieces.lo.tolist(), chunk.codes[0].tolist()
        ([0.0, 0.25, 0.75], [[0, 0], [1, 0], [1, 1]])
    """

    def __init__(self, model: nn.Module, example: torch.Tensor, *, where: str,
                 max_elements: int = MAX_ELEMENTS, fallback: str = "method='sampled'",
                 weight_line: Optional[WeightLine] = None) -> None:
        ModelAdapter(model, where=where).call_model(example)  # the standard error on bad input
        graph = trace_graph(model, example, where=where)
        _refuse_unsupported(graph, where, fallback)
        self.graph, self.max_elements, self.weight_line = graph, max_elements, weight_line
        self.input = next(op.node for op in graph.ops if op.kind == "input")
        self.output = next(op.node for op in graph.ops if op.kind == "output")
        self._kinds = {op.node: op.kind for op in graph.ops}
        self._constants = _constants(graph)
        self._schedule = _release_schedule(graph)
        self._rules: dict[int, Rule] = {
            index: _RULES[op.kind](graph, op, self._source(op), self._constants, example)
            for index, op in enumerate(graph.ops) if op.kind in _RULES}
        self.sites = tuple(rule.site for rule in self._rules.values())
        self._per_sample = max([math.prod(op.shape) for op in graph.ops
                                if op.shape and op.kind != "constant"]
                               + [rule.workspace for rule in self._rules.values()])

    def _source(self, op: GraphOp) -> fx.Node:
        """The input-dependent tensor an activation or max pooling acts on."""
        return next(n for n in op.node.all_input_nodes if self._kinds[n] != "constant")

    def chunk_size(self, n_refs: int) -> int:
        """Pieces per chunk for slices with ``n_refs`` reference points."""
        return max(1, self.max_elements // (n_refs * self._per_sample))

    @torch.no_grad()
    def run(self, pieces: Geometry, anchors: torch.Tensor, *, merge_tol: float,
            report: EngineReport, max_pieces: Optional[int] = None) -> Iterator[Chunk]:
        """Final pieces of ``pieces`` chunk by chunk, in slice order.

        Args:
            pieces: initial pieces (e.g. :func:`polyline_slices`).
            anchors: (slices, k + 1, *input_shape) the input at each slice's reference points.
            merge_tol: crossings closer than this (in slice coordinates) are one.
            report: accumulates the run's :class:`EngineReport`.
            max_pieces: raise :class:`PieceLimit` as soon as the final pieces are known to
                be more (a cut is refused before it holds them: a plane through a
                convolution's thousands of units would otherwise be cut into millions).
        """
        settings = _Settings(merge_tol, self.chunk_size(pieces.n_refs), report, max_pieces)
        for chosen in _chunks(len(pieces), settings.step, anchors.device):
            part = pieces.take(chosen)
            batch = _Batch(part, {self.input: anchors[part.slice_index].flatten(0, 1)})
            yield from self._walk(batch, 0, settings)

    def _walk(self, batch: _Batch, start: int, settings: _Settings) -> Iterator[Chunk]:
        """Evaluate ops from ``start`` on; at a site, cut (and continue chunk by chunk)."""
        for index in range(start, len(self.graph.ops)):
            if index in self._rules:
                yield from self._split(batch, index, settings)
                return
            op = self.graph.ops[index]
            if op.kind not in ("input", "constant"):
                batch.env[op.node] = self._evaluate(op, batch.env)
            self._release(batch.env, index)
        settings.report.add(batch.pieces)
        check_limit(settings.report.pieces, settings.max_pieces)
        yield Chunk(batch.pieces, tuple(batch.codes), batch.env[self.output])

    def _split(self, batch: _Batch, index: int, settings: _Settings) -> Iterator[Chunk]:
        """Cut at site ``index``; continue each chunk of children (until settled)."""
        rule = self._rules[index]
        done = settings.report.pieces
        limit = None if settings.max_pieces is None else settings.max_pieces - done
        try:  # each piece ends as one final piece or more
            cut = batch.pieces.cut(*rule.levels(_site_input(batch, rule),
                                                batch.pieces.interior()), settings.tol, limit)
        except PieceLimit as exc:
            raise PieceLimit(done + exc.pieces) from None
        if isinstance(rule, ActivationRule):
            settings.report.near_coincident += cut.merged
        if len(cut.pieces) == len(batch.pieces):
            yield from self._settle(batch, index, settings)
            return
        for chosen in _chunks(len(cut.pieces), settings.step, cut.parent.device):
            child = self._take(batch, cut.parent[chosen], cut.pieces.take(chosen))
            yield from (self._settle(child, index, settings) if rule.settles
                        else self._split(child, index, settings))

    def _settle(self, batch: _Batch, index: int, settings: _Settings) -> Iterator[Chunk]:
        """Apply site ``index`` (its regions are constant on every piece) and walk on."""
        rule = self._rules[index]
        code, out = rule.apply(_site_input(batch, rule), batch.pieces.interior())
        batch.codes.append(code)
        batch.env[self.graph.ops[index].node] = out
        self._release(batch.env, index)
        yield from self._walk(batch, index + 1, settings)

    def _evaluate(self, op: GraphOp, env: dict) -> Any:
        if type(op.module) is nn.Linear and len(op.node.args) == 1 and not op.node.kwargs:
            value = _linear_of_live_features(op.module, env[op.node.args[0]])
        else:
            value = self.graph.evaluate(op, ChainMap(env, self._constants))
        if self.weight_line is not None and op.module is self.weight_line.module:
            x = env[op.node.args[0]]
            at_one = (torch.arange(len(x), device=x.device) % 2).to(x.dtype)  # refs t = 0, 1
            value = value + at_one.view(-1, *[1] * (value.dim() - 1)) * self.weight_line.shift(x)
        return value

    def _release(self, env: dict, index: int) -> None:
        """Drop the nodes no op after ``index`` needs."""
        for node in self._schedule[index]:
            env.pop(node, None)

    def _take(self, batch: _Batch, parent: torch.Tensor, pieces: Geometry) -> _Batch:
        """Children: each new piece gets its parent's reference values and codes; shape
        values (sizes of the batch) are computed again from the new batch."""
        refs, env = batch.pieces.n_refs, {}
        for node, value in batch.env.items():
            env[node] = (self._evaluate(graph_op(self.graph, node), env)
                         if self._kinds[node] == "shape"
                         else _take_rows(value, parent, refs))
        return _Batch(pieces, env, [code.index_select(0, parent) for code in batch.codes])


_RULES = {"activation": ActivationRule, "maxpool": MaxPoolRule}


@dataclass(frozen=True)
class _Settings:
    """One run's tolerance, chunk size, report and piece limit."""

    tol: float
    step: int
    report: EngineReport
    max_pieces: Optional[int]


def _site_input(batch: _Batch, rule: Rule) -> torch.Tensor:
    """The site's input as (pieces, k + 1, ...)."""
    return batch.env[rule.source].unflatten(0, (len(batch.pieces), batch.pieces.n_refs))


def _chunks(n: int, step: int, device: torch.device) -> Iterator[torch.Tensor]:
    """Indices of ceil(n / step) consecutive chunks of 0..n-1 of near-equal sizes (<= step:
    no small remainder chunk)."""
    edges = torch.linspace(0, n, -(-n // step) + 1).round().long().tolist()
    for start, end in zip(edges[:-1], edges[1:]):
        yield torch.arange(start, end, device=device)


def _linear_of_live_features(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``linear(x)``, multiplying only the input features that are nonzero in some row: units
    an activation turns off on every piece of a chunk (about half after a ReLU, the pieces of
    a chunk being consecutive) cost nothing."""
    live = x.reshape(-1, x.shape[-1]).any(0)
    if int(live.sum()) > LIVE_FRACTION * len(live):
        return linear(x)
    index = live.nonzero()[:, 0]
    weight = linear.weight.t().index_select(0, index).t()  # rows of W^T: contiguous copies
    return F.linear(x.index_select(-1, index), weight, linear.bias)


def _take_rows(value: Any, parent: torch.Tensor, refs: int) -> Any:
    """Rows of the pieces ``parent`` of a batched value (tensors nested in tuples/lists)."""
    if isinstance(value, torch.Tensor):
        return value.unflatten(0, (-1, refs)).index_select(0, parent).flatten(0, 1)
    return type(value)(_take_rows(v, parent, refs) for v in value)


def _refuse_unsupported(graph: ModelGraph, where: str, fallback: str) -> None:
    reasons = [f"{op.label}: {op.reason}" if op.kind == "other" else
               f"{op.label}: not piecewise linear" for op in graph.ops
               if op.kind == "other" or (op.kind == "activation" and not op.piecewise_linear)]
    if reasons:
        raise invalid(where, "a piecewise-linear network (affine maps, piecewise-linear "
                      "activations, max pooling) for the exact method",
                      f"operations it cannot follow exactly: {'; '.join(reasons)}",
                      f"use {fallback} (any network), or replace those operations")


def _constants(graph: ModelGraph) -> dict[fx.Node, Any]:
    """The value of every node that does not depend on the input."""
    values: dict[fx.Node, Any] = {}
    for op in graph.ops:
        if op.kind == "constant":
            values[op.node] = graph.evaluate(op, values)
    return values


def _release_schedule(graph: ModelGraph) -> dict[int, list[fx.Node]]:
    """Op index -> the nodes no later op needs. The inputs of a shape node (``x.size(0)``)
    live as long as it does: it is recomputed from them when pieces are split."""
    keep = {op.node: graph.last_use.get(op.node, index) for index, op in enumerate(graph.ops)}
    for op in reversed(graph.ops):
        if op.kind == "shape":
            for parent in op.node.all_input_nodes:
                keep[parent] = max(keep[parent], keep[op.node])
    schedule: dict[int, list[fx.Node]] = defaultdict(list)
    for op in graph.ops:
        if op.kind != "output":
            schedule[keep[op.node]].append(op.node)
    return schedule


__all__ = ["Chunk", "EngineReport", "LIVE_FRACTION", "MAX_ELEMENTS", "PiecewiseEngine",
           "WeightLine", "float64_copy"]
