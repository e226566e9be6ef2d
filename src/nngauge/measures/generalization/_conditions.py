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

On a network graph (residual blocks, convolutions, average pooling) the products are read as
Jacobians between cut points: the outputs of nodes through which every input-output path
passes, keeping of each run of such nodes without a weight layer between them the last one (for
a chain: the input, the output of each activation, the output). With cut points c_0 (the input)
.. c_K (the output), prod_{i=a}^b D_i W_i is the Jacobian J_{a-1,b} of c_b with respect to
c_{a-1} at the sample (a >= 1), and J_{0,b} x for a = 0; h_c is the number of entries of c_c. For
a chain this is the definition above. C2 counts the pre-activations of every ReLU node. C3
concerns each weight layer directly followed by a ReLU (D_i its pattern; for a convolution the
units are channels x positions, each with its exact incoming weights, fewer at zero-padded
borders) and the layer computing the output (D = I).

Biases, when present, enter only through the activation patterns D_i and the pre-activations
of C2 (the paper's networks have none).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.fx as fx
from torch import nn

from nngauge._constraints import Integer, Numbers, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.data import collect
from nngauge._internal.graph import GraphOp, ModelGraph, target_name
from nngauge._internal.options import ModelOptions
from nngauge._results import Result
from nngauge.activations._torch import ActivationModule
from nngauge.errors import invalid
from nngauge.measures.generalization._fold import folded_graph, folded_mode, untraceable_batchnorm
from nngauge.measures.generalization._norms import float_input_shape
from nngauge.measures.generalization._weights import WeightLayer, is_torch_module, weight_layers

DEFAULT_DELTAS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
DIRECTION_BUDGET = 2**22
"""Most entries of one node's value in a batched Jacobian-vector product (directions x samples
x entries); more directions are taken in several passes."""
_RELU_FUNCTIONS = {"relu", "relu_", "clamp", "clamp_", "clamp_min", "clip"}


@dataclass(frozen=True)
class ConditionLayer(Result):
    """C2 and C3 of one weight layer W_i.

    Attributes:
        name: the layer's site in the graph (its module name); units: h_i (output features,
            or channels x positions of a convolution).
        activation: the ReLU node directly after the layer ("" when there is none).
        c2: max over samples and deltas of (fraction of units with |pre-activation| <= delta)
            / delta for that ReLU (NaN without one).
        c2_fraction: that fraction averaged over samples, one value per delta (Figure 7).
        c3: max over samples of sqrt(h_i) ||W_i||_{2,inf} / ||D_i W_i||_F (D = I for the layer
            computing the output; NaN for a layer followed by neither).
        c3_mean: its mean over samples.
        spiky_ratio: max over units of ||W_{i,j}||^2 / mean_j ||W_{i,j}||^2 (Figure 5 right).
        unit_ratios: that ratio for every unit, shape (h_i,) (not in to_dict).
    """

    name: str
    units: int
    activation: str
    c2: float
    c2_fraction: tuple
    c3: float
    c3_mean: float
    spiky_ratio: float
    unit_ratios: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class ActivationC2(Result):
    """C2 of one ReLU node: its name (site), units, ``c2`` and ``c2_fraction`` as in
    :class:`ConditionLayer`."""

    name: str
    units: int
    c2: float
    c2_fraction: tuple


@dataclass(frozen=True)
class ConditionsResult(Result):
    """Conditions C1-C3 of Theorem 1 on data.

    Attributes:
        mu: the smallest C1 ratio over triples and samples; condition_number: 1 / mu.
        c1_interior, c1_boundary: the largest 1/mu over a < c < b - 1 and over c = a or
            c = b - 1 (Figure 6 middle and right; NaN when there is no such triple).
        c2: max over ReLU nodes of their C2 constants.
        c3: max over layers of the layer C3 constants.
        deltas: the deltas of C2.
        triples: the (a, c, b) triples, in the column order of ``c1``.
        layers: per-weight-layer :class:`ConditionLayer` rows.
        activations: per-ReLU :class:`ActivationC2` rows.
        cuts: the cut points c_0 .. c_K (node sites; c_0 the input, c_K the output).
        cut_widths: h_0 .. h_K, the entries of one sample at each cut.
        exact_width: Jacobians from a cut of at most this width have exact Frobenius norms;
            from wider cuts ||J||_F^2 is the mean of ||J u||^2 over ``n_probes`` Gaussian u.
        n_probes: probes per sample for those (unused when every cut is narrow).
        n_samples: samples used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`): eval-mode batchnorm
            folded away, a float64 copy.
        c1: 1/mu per sample and triple, shape (n_samples, n_triples) (not in to_dict;
            inf where a product vanishes).
    """

    _rows = "layers"
    _headline = "c3"

    mu: float
    condition_number: float
    c1_interior: float
    c1_boundary: float
    c2: float
    c3: float
    deltas: tuple
    triples: tuple
    layers: tuple[ConditionLayer, ...]
    activations: tuple[ActivationC2, ...]
    cuts: tuple[str, ...]
    cut_widths: tuple[int, ...]
    exact_width: int
    n_probes: int
    n_samples: int
    mode: MeasurementMode
    c1: np.ndarray = field(repr=False)


@constrained(deltas=Numbers(0, low_open=True), max_samples=Integer(1),
             exact_width=Integer(0), n_probes=Integer(1))
def sharpness_conditions(
    model: nn.Module,
    data: Any,
    *,
    deltas: Sequence[float] = DEFAULT_DELTAS,
    max_samples: int = 100,
    exact_width: int = 256,
    n_probes: int = 64,
    generator: Optional[torch.Generator | int] = None,
) -> ConditionsResult:
    """Conditions C1 (1/mu), C2 and C3 of Theorem 1 for a ReLU network on data (section 4).

    See the module docstring for the definitions on graphs. Jacobians between cut points come
    from forward-mode products J v (``torch.func.jvp``, batched over directions and samples,
    float64): with the standard basis when the starting cut has at most ``exact_width``
    entries (exact Frobenius norms), else with ``n_probes`` Gaussian probes per sample
    (E ||J u||^2 = ||J||_F^2). The cost is about sum over cuts of their width (or
    ``n_probes``) forward passes of the rest of the network per sample.

    Args:
        model: a network of Linear / Conv layers, ReLU activations, average pooling, eval
            batchnorm (folded first), residual additions and reshapes, taking one float tensor.
        data: inputs (n, ...), (inputs, labels), a Dataset or a DataLoader.
        deltas: the C2 thresholds (> 0).
        max_samples: use at most this many samples (the first ones).
        exact_width: largest cut width whose Jacobians are computed exactly.
        n_probes: Gaussian probes per sample above ``exact_width``.
        generator: generator of the probes.

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
    adapter = ModelAdapter(model, ModelOptions(norm_mode="eval"), where=where)
    float_input_shape(data, where)
    x = collect(data, where=where, max_samples=max_samples).inputs.to("cpu", torch.float64)
    graph = folded_graph(model, tuple(x.shape[1:]), where)
    _check_graph(graph, where)
    layers = weight_layers(graph)
    relus = [op for op in graph.ops if op.kind == "activation"]
    net = _Network(graph, layers)
    base = net.run(x, keep={op.node.args[0] for op in relus} | set(net.cuts))
    c1, triples = _c1(net, base, x, exact_width=exact_width, n_probes=n_probes,
                      generator=generator)
    interior = [i for i, (a, c, b) in enumerate(triples) if a < c < b - 1]
    boundary = [i for i, (a, c, b) in enumerate(triples) if c == a or c == b - 1]
    activations = {op.node.args[0]: _activation_row(op, base[op.node.args[0]], deltas)
                   for op in relus}
    rows = tuple(_layer_row(layer, graph, base, activations, len(deltas)) for layer in layers)
    worst = float(np.max(c1)) if c1.size else math.nan
    return ConditionsResult(
        mu=1.0 / worst if worst > 0 else math.inf, condition_number=worst,
        c1_interior=float(np.max(c1[:, interior])) if interior else math.nan,
        c1_boundary=float(np.max(c1[:, boundary])) if boundary else math.nan,
        c2=max((r.c2 for r in activations.values()), default=math.nan),
        c3=max((r.c3 for r in rows if not math.isnan(r.c3)), default=math.nan),
        deltas=deltas, triples=tuple(triples), layers=rows,
        activations=tuple(activations.values()),
        cuts=tuple(net.ops[c].site for c in net.cuts),
        cut_widths=tuple(net.width(base[c]) for c in net.cuts), exact_width=exact_width,
        n_probes=n_probes, n_samples=int(x.shape[0]), mode=folded_mode(adapter), c1=c1)


def is_relu(op: GraphOp) -> bool:
    """A ReLU node: nn.ReLU, nngauge's relu activation, F.relu or clamp(min=0)."""
    if op.kind != "activation" or not op.homogeneous:
        return False
    if op.module is not None:
        return isinstance(op.module, nn.ReLU) or (
            isinstance(op.module, ActivationModule) and op.module.activation.name == "relu")
    return target_name(op.node) in _RELU_FUNCTIONS


def _check_graph(graph: ModelGraph, where: str) -> None:
    bad = [op for op in graph.ops if op.kind not in ("input", "constant", "shape", "affine")
           and not is_relu(op) and not (op.kind == "output" and isinstance(op.node.args[0],
                                                                            fx.Node))]
    if bad:
        op = bad[0]
        subclass = isinstance(op.module, nn.modules.batchnorm._BatchNorm) and not \
            is_torch_module(op.module)
        why = untraceable_batchnorm(op) if subclass else (
            f"{op.label} ({op.kind}{': ' + op.reason if op.reason else ''})")
        raise invalid(where, "a network of Linear/Conv layers, ReLU activations (Theorem 1 is "
                      "stated for ReLU networks: D_i are 0/1 patterns), average pooling, eval "
                      "batchnorm, residual additions and reshapes, returning one tensor",
                      why, "measure a ReLU network (replace max pooling by average pooling)")


class _Network:
    """The graph as a function of any cut point's value, and its cut points."""

    def __init__(self, graph: ModelGraph, layers: Sequence[WeightLayer]) -> None:
        self.graph = graph
        self.ops = {op.node: op for op in graph.ops}
        self.position = {op.node: i for i, op in enumerate(graph.ops)}
        self.signal = _signal_nodes(graph)
        self.cuts = _cut_points(graph, self.signal, {layer.op.node for layer in layers})
        self.widest = max(math.prod(op.shape) for op in graph.ops if op.shape is not None)

    def width(self, value: torch.Tensor) -> int:
        return int(value[0].numel())

    def run(self, x: torch.Tensor, keep: set) -> dict[fx.Node, Any]:
        """Every node on ``x``: the values of ``keep`` and of every node that is not a signal
        (constants, shapes: what :meth:`segment` reuses)."""
        env: dict[fx.Node, Any] = {}
        for index, op in enumerate(self.graph.ops):
            env[op.node] = x if op.kind == "input" else self._evaluate(op, env)
            for parent in op.node.all_input_nodes:
                if (self.graph.last_use.get(parent) == index and parent in self.signal
                        and parent not in keep):
                    del env[parent]
        return env

    def segment(self, start: fx.Node, targets: Sequence[fx.Node],
                base: dict) -> Callable[[torch.Tensor], tuple]:
        """The values at ``targets`` as a function of the value at cut ``start``."""
        descendants = {start}
        for op in self.graph.ops[self.position[start] + 1:]:
            if any(n in descendants for n in op.node.all_input_nodes):
                descendants.add(op.node)

        def function(value: torch.Tensor) -> tuple:
            env = dict(base)
            env[start] = value
            for op in self.graph.ops[self.position[start] + 1:]:
                if op.node in descendants:
                    env[op.node] = self._evaluate(op, env)
            return tuple(env[t] for t in targets)

        return function

    def _evaluate(self, op: GraphOp, env: dict) -> Any:
        fresh = {n: env[n].clone() if isinstance(env[n], torch.Tensor) else env[n]
                 for n in op.node.all_input_nodes}  # in-place modules must not alter env
        return self.graph.evaluate(op, fresh)


def _signal_nodes(graph: ModelGraph) -> set[fx.Node]:
    """The input and every input-dependent tensor computed from it (not shapes)."""
    signal: set[fx.Node] = set()
    for op in graph.ops:
        if op.kind == "input" or (op.kind not in ("constant", "shape") and any(
                n in signal for n in op.node.all_input_nodes)):
            signal.add(op.node)
    return signal


def _cut_points(graph: ModelGraph, signal: set, weights: set) -> list[fx.Node]:
    """The input, the dominators of the output that are followed by a weight layer before the
    next dominator, and the output node."""
    order = [op.node for op in graph.ops]
    useful = {order[-1]}
    for node in reversed(order):
        if node in useful:
            useful.update(n for n in node.all_input_nodes if n in signal)
    dominators: dict[fx.Node, set] = {}
    for node in order:
        if node in useful:
            parents = [dominators[n] for n in node.all_input_nodes if n in useful]
            dominators[node] = {node} | (set.intersection(*parents) if parents else set())
    chain = [n for n in order if n in dominators[order[-1]]]
    position = {n: i for i, n in enumerate(order)}
    cuts = [chain[0]]
    for node, following in zip(chain[1:-1], chain[2:]):
        between = order[position[node] + 1:position[following] + 1]
        if any(n in weights and n in useful for n in between):
            cuts.append(node)
    return cuts + [chain[-1]]


def _c1(net: _Network, base: dict, x: torch.Tensor, *, exact_width: int, n_probes: int,
        generator: Optional[torch.Generator]) -> tuple[np.ndarray, list]:
    """1/mu for every sample and triple 0 <= a <= c < b <= K."""
    cuts, n = net.cuts, x.shape[0]
    k = len(cuts) - 1
    norms = {(0, 0): x.flatten(1).norm(dim=1)}  # (a, b) -> ||prod_{i=a}^b D_i W_i||_F
    _, along_x = torch.func.jvp(net.segment(cuts[0], cuts[1:], base), (x,), (x,))
    norms.update({(0, b): t.flatten(1).norm(dim=1) for b, t in enumerate(along_x, 1)})
    for start in range(k):
        value = base[cuts[start]]
        function = net.segment(cuts[start], cuts[start + 1:], base)
        squares = [torch.zeros(n, dtype=torch.float64) for _ in cuts[start + 1:]]
        for directions, weight in _directions(value, exact_width, n_probes, net.widest,
                                              generator):
            images = torch.func.vmap(
                lambda v: torch.func.jvp(function, (value,), (v,))[1])(directions)
            for total, image in zip(squares, images):
                total += image.pow(2).flatten(2).sum(dim=(0, 2)) * weight
        norms.update({(start + 1, b): s.sqrt() for b, s in enumerate(squares, start + 1)})
    widths = [net.width(base[c]) for c in cuts]
    triples = [(a, c, b) for a, c, b in itertools.product(range(k + 1), repeat=3) if a <= c < b]
    cols = []
    for a, c, b in triples:
        num = norms[(c + 1, b)] * norms[(a, c)]
        den = math.sqrt(widths[c]) * norms[(a, b)]
        cols.append(torch.where(den > 0, num / den, torch.where(num > 0, math.inf, 0.0)))
    c1 = torch.stack(cols, dim=1).numpy() if cols else np.zeros((n, 0))
    return c1, triples


def _directions(value: torch.Tensor, exact_width: int, n_probes: int, widest: int,
                generator: Optional[torch.Generator]) -> Iterator[tuple[torch.Tensor, float]]:
    """Batches of tangent directions (k, n, *shape) at a cut, with the weight that turns
    sum ||J v||^2 into ||J||_F^2: the standard basis (weight 1) when the cut is narrow,
    Gaussian probes (weight 1 / n_probes) otherwise."""
    n, shape = value.shape[0], value.shape[1:]
    exact = math.prod(shape) <= exact_width
    chunk = max(1, DIRECTION_BUDGET // (n * widest))
    if exact:
        for basis in _basis(shape, chunk, value.dtype):
            yield basis[:, None].expand(-1, n, *shape), 1.0
        return
    for first in range(0, n_probes, chunk):
        count = min(chunk, n_probes - first)
        yield torch.randn((count, n, *shape), generator=generator,
                          dtype=value.dtype), 1.0 / n_probes


def _basis(shape: Sequence[int], chunk: int, dtype: torch.dtype) -> Iterator[torch.Tensor]:
    """The standard basis of tensors of ``shape``, ``chunk`` at a time: (count, *shape)."""
    width = math.prod(shape)
    for first in range(0, width, chunk):
        count = min(chunk, width - first)
        basis = torch.zeros(count, width, dtype=dtype)
        basis[torch.arange(count), torch.arange(first, first + count)] = 1.0
        yield basis.reshape(count, *shape)


def _activation_row(op: GraphOp, pre: torch.Tensor, deltas: tuple) -> ActivationC2:
    z = pre.flatten(1)
    near = torch.stack([(z.abs() <= d).to(torch.float64).mean(dim=1) for d in deltas], 1)
    c2 = float((near / torch.tensor(deltas, dtype=torch.float64)).max())
    return ActivationC2(name=op.site, units=int(z.shape[1]), c2=c2,
                        c2_fraction=tuple(float(v) for v in near.mean(dim=0)))


def _layer_row(layer: WeightLayer, graph: ModelGraph, base: dict,
               activations: dict[fx.Node, ActivationC2], n_deltas: int) -> ConditionLayer:
    node = layer.op.node
    squares = _incoming_squares(layer)
    units = squares.numel()
    activation = activations.get(node)
    if activation is not None:
        mask = (base[node] > 0).to(torch.float64).flatten(1)
    elif graph.ops[-1].node.args[0] is node:
        mask = torch.ones(1, units, dtype=torch.float64)  # D = I for the output layer
    else:
        mask = torch.full((1, units), math.nan, dtype=torch.float64)
    c3 = math.sqrt(units) * float(squares.max().sqrt()) / (mask @ squares).sqrt()
    ratios = (squares / squares.mean()).numpy()
    return ConditionLayer(
        name=layer.name, units=units, activation=activation.name if activation else "",
        c2=activation.c2 if activation else math.nan,
        c2_fraction=activation.c2_fraction if activation else (math.nan,) * n_deltas,
        c3=float(c3.max()), c3_mean=float(c3.mean()), spiky_ratio=float(ratios.max()),
        unit_ratios=ratios)


def _incoming_squares(layer: WeightLayer) -> torch.Tensor:
    """||W_{i,j}||^2 of every unit j of the layer's output (flattened), float64: its exact
    incoming weights (a zero-padded border unit has fewer; a circular or reflected one may
    receive two kernel taps from one input entry, whose weights add)."""
    weight = layer.weight.to(torch.float64)
    with torch.no_grad():
        if layer.padding_mode == "zeros":
            ones = torch.ones((1, *layer.in_shape), dtype=torch.float64)
            return layer.call(ones, weight**2, None).flatten()
        return sum(layer.call(basis, weight, None).pow(2).sum(dim=0)
                   for basis in _basis(layer.in_shape, 256, torch.float64)).flatten()
