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

Any network graph is measured (:func:`nngauge._internal.graph.trace_graph`): the weight layers
W_i are its Linear and Conv layers (modules, or functions with parameter weights) after
batchnorm folding (appendix A), in the order of the forward pass, and the products run over all
of them, also through residual connections and pooling (the paper derives its bounds for
chains). A convolution's ||W_i||_2 is its norm as an operator on its actual input (power
iteration, or exact by FFT for circular padding; :mod:`nngauge._internal.spectral`); its
Frobenius and l_{p,inf} norms are of the kernel, the l_{p,inf} rows being the channels'
incoming weights, and h_i is its number of channels. The path norms come from
:mod:`nngauge.measures.generalization._paths`: one forward interpretation of the graph, never an enumeration.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Flag, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.graph import GraphOp, ModelGraph, UntraceableError
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.spectral import (
    POWER_MAX_ITER,
    POWER_TOL,
    circular_conv_singular_values,
    power_iteration,
)
from nngauge._results import Result, row_named
from nngauge._vocabulary import deprecated_attribute, renamed
from nngauge.errors import invalid, warn_caller
from nngauge.measures.generalization._fold import PROBE_SAMPLES, folded_graph, folded_mode
from nngauge.measures.generalization._margin import adapter_scores, epsilon_margin, margins_of
from nngauge.measures.generalization._paths import log_path_sum, path_obstacles
from nngauge.measures.generalization._weights import (
    WeightLayer,
    module_weight_layers,
    weight_layers,
)

_PATH_MEASURES = ("l1_path", "l2_path", "l1_path_norm", "l2_path_norm")
_LIPSCHITZ_MEASURES = ("lipschitz_linf", "lipschitz_l2", "log10_lipschitz_capacity_linf",
                       "log10_lipschitz_capacity_l2")
_MARGIN_MEASURES = ("l2", "l1_path", "l2_path", "spectral", "log10_lipschitz_capacity_linf",
                    "log10_lipschitz_capacity_l2")
"""The fields divided by the margin: undefined when it is not positive."""
_NOT_LIPSCHITZ = ("prod_i ||W_i|| bounds the network's Lipschitz constant (section 2.3) only when "
                  "every other operation is a 1-Lipschitz piecewise-linear activation, pooling, "
                  "eval batchnorm or a residual addition; not through ")


@constrained(p=Real(0, low_open=True), bias=Flag())
def path_norm(model: nn.Module, p: float = 2, *, bias: bool = True,
              input_shape: Optional[Sequence[int]] = None) -> float:
    """The l_p path norm: the l_p norm of the vector of weight products along all paths.

    ||w||_{path,p} = (sum over input-output paths of prod over the path's edges |w_e|^p)^(1/p)
    (Neyshabur, Bhojanapalli, McAllester and Srebro, "Exploring Generalization in Deep
    Learning", NIPS 2017, section 2.2; Neyshabur, Tomioka and Srebro, "Norm-Based Capacity
    Control in Neural Networks", COLT 2015). It is invariant to node rescaling; for a chain
    with one output it equals the minimum over node rescalings of prod_i ||W_i||_{p,inf}
    (p >= 1), the paper's statement, while with several outputs that minimum is the largest
    one-output path norm, not this norm (``nngauge reproduce neyshabur-capacities``). Any
    graph of Linear / Conv layers, positively homogeneous activations, average pooling, eval
    batchnorm, residual additions and reshapes is measured, by one forward pass of the graph
    with every linear map replaced by its entrywise |.|^p version, identity activations and an
    all-ones input (rescaled at every node, so no overflow), never by enumeration; see
    :mod:`nngauge.measures.generalization._paths`. Batchnorm is folded first (the path norm of the function
    the network computes, appendix A).

    Args:
        model: the network (one float tensor in, one tensor out).
        p: the exponent, any p > 0 (1 and 2 are the paper's).
        bias: count paths that start at a bias (a weight from a constant-1 unit; batchnorm
            shifts included); False counts input-to-output paths only.
        input_shape: shape of one input sample; needed unless the first layer is Linear
            (a convolutional network's path norm depends on the input size).

    Returns:
        The path norm (float; ``inf`` if it exceeds float64).

    Raises:
        InvalidInputError: naming each node that makes the network not a sum over paths: max
            pooling, activations that are not positively homogeneous (ReLU6, HardTanh, GELU,
            ...), normalization by sample statistics (GroupNorm, LayerNorm), products of two
            input-dependent tensors (attention, squeeze-excitation); or a model torch.fx
            cannot trace; or a convolutional network without ``input_shape``.

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
    graph = folded_graph(model, input_shape, where)
    layers = weight_layers(graph)
    obstacles = path_obstacles(graph, layers)
    if obstacles:
        raise invalid(where, "a network whose function is a sum over paths (Linear/Conv layers, "
                      "positively homogeneous activations, average pooling, eval batchnorm, "
                      "residual additions, reshapes)", "; ".join(why for _, why in obstacles),
                      "replace the named nodes, or measure norms that need no paths "
                      "(capacity()'s l2 and spectral)")
    return _safe_exp(log_path_sum(graph, layers, p, bias=bias) / p)


@dataclass(frozen=True)
class LayerNorms(Result):
    """Norms of one weight layer W_i (h_i units, fan_in incoming weights per unit).

    Attributes:
        name, kind: the layer's site in the graph (its module name) and "linear" / "conv".
        units: h_i (output features or channels).
        fan_in: h_{i-1} (times the kernel size for convolutions).
        input_shape: shape of one sample of the layer's input.
        frobenius: ||W_i||_F of the weight tensor.
        spectral: ||W_i||_2 as an operator on the layer's input: the largest singular value of
            the matrix for linear layers; for convolutions, of the convolution (its stride,
            padding, dilation, groups) on ``input_shape``. The spectral capacity and the l_2
            Lipschitz bound use this one.
        spectral_method: "matrix" (exact, linear layers), "fft" (exact, stride-1 circular
            convolutions: Sedghi, Gupta and Long 2019) or "power" (power iteration on the
            convolution and its transpose to relative residual ``POWER_TOL``).
        spectral_iterations: power iterations used (0 for the exact methods; ``POWER_MAX_ITER``
            means the tolerance was not reached).
        spectral_kernel: the largest singular value of the kernel reshaped to an
            (h_i, fan_in) matrix (not the operator's norm for convolutions).
        l1_inf: ||W_i||_{1,inf}: the largest l1 norm of a unit's incoming weights.
        l2_inf: ||W_i||_{2,inf}: the largest l2 norm of a unit's incoming weights.
    """

    name: str
    kind: str
    units: int
    fan_in: int
    input_shape: tuple[int, ...]
    frobenius: float
    spectral: float
    spectral_method: str
    spectral_iterations: int
    spectral_kernel: float
    l1_inf: float
    l2_inf: float


def layer_norms(layers: Sequence[WeightLayer]) -> tuple[LayerNorms, ...]:
    """The per-layer norm table of a graph's weight layers."""
    return tuple(_layer_row(layer) for layer in layers)


def _layer_row(layer: WeightLayer) -> LayerNorms:
    w = layer.matrix().to(torch.float64)
    kernel = float(torch.linalg.matrix_norm(w, ord=2))
    spectral, method, iterations = kernel, "matrix", 0
    if layer.kind == "conv" and layer.circular:
        spectral, method = float(circular_conv_singular_values(
            layer.weight.to(torch.float64), layer.in_shape[1:], dilation=layer.dilation,
            groups=layer.groups).max()), "fft"
    elif layer.kind == "conv":
        method = "power"
        spectral, iterations = power_iteration(layer.linear_map(), layer.in_shape)
    return LayerNorms(
        name=layer.name, kind=layer.kind, units=int(w.shape[0]), fan_in=int(w.shape[1]),
        input_shape=tuple(layer.in_shape), frobenius=float(torch.linalg.matrix_norm(w)),
        spectral=spectral, spectral_method=method, spectral_iterations=iterations,
        spectral_kernel=kernel, l1_inf=float(w.abs().sum(dim=1).max()),
        l2_inf=float(w.norm(dim=1).max()))


@dataclass(frozen=True)
class CapacityMeasure(Result):
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
class CapacityResult(Result):
    """Norm-based capacity measures of a trained classifier (generalization paper 2.2-2.3).

    Attributes:
        margin: gamma, the epsilon-margin (5th percentile by default). When gamma <= 0 (the
            network misclassifies at least that share of the data, as a network at
            initialization does) a capacity over margin is undefined: the capacities and the
            Lipschitz capacities are NaN, ``undefined`` says why for each, and
            :func:`capacity` warns. The norms (path norms, Lipschitz bounds, the per-layer
            table) do not depend on the margin and stay defined.
        percentile: the percentile used (``margin_percentile``: its deprecated name).
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
        undefined: the measures that are NaN, each with why, naming the nodes: the path-based
            ones when the network is not a sum over paths (max pooling, activations that are
            not positively homogeneous, normalization, attention, an embedding); the Lipschitz
            bounds and capacities through operations other than 1-Lipschitz piecewise-linear
            activations, pooling, eval batchnorm and residual additions; every capacity over
            margin when the margin is not positive.
        notes: what the numbers mean for this network beyond the paper's chains, and the
            weight tensors left out of the products (embeddings, class tokens, an LSTM's or
            MultiheadAttention's own weights: parameters of no Linear / Conv layer).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`): eval-mode batchnorm
            folded away, a float64 copy.
    """

    _rows = "layers"
    _headline = "spectral"

    margin: float
    percentile: float
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
    undefined: dict[str, str]
    notes: tuple[str, ...]
    mode: MeasurementMode

    def __getitem__(self, name: str) -> CapacityMeasure | LayerNorms:
        """The capacity measure called ``name`` ("l2", "l1_path", "l2_path", "spectral"), or
        else the norms of the layer called ``name``.

        Raises:
            UnknownNameError: (a KeyError) neither; the message lists the names there are.
        """
        return row_named((*self.measures, *self.layers), name,
                         "a capacity measure or a layer of this CapacityResult")

    margin_percentile = deprecated_attribute("percentile")



def margin_and_layers(model: nn.Module, data: Any, labels: Any, options: ModelOptions, *,
                      percentile: float, batch_size: int, where: str, tokens: bool = False,
                      untraced: bool = False):
    """What every norm-over-margin measure reads first: (the eval-mode adapter, the margins of
    the data, the epsilon-margin gamma at ``percentile``, one sample's input shape, the
    batchnorm-folded graph, its weight layers: at least one). Integer inputs (token ids) are
    refused unless ``tokens``; the graph is then traced on the data's first inputs.

    ``untraced``: a model ``torch.fx`` cannot trace and that has no batchnorm to fold gets the
    weight layers of its modules (:func:`module_weight_layers`, on an eval-mode CPU copy) and,
    in place of the graph, the reason it could not be traced (a string)."""
    adapter = ModelAdapter(model, replace(options, norm_mode="eval"), where=where)
    scores, targets = adapter_scores(adapter, data, labels, batch_size=batch_size)
    margins = margins_of(scores, targets)
    first = first_inputs(data, where, PROBE_SAMPLES)
    if not tokens:
        _require_float(first, where)
    input_shape = tuple(first.shape[1:])
    probe = None if first.is_floating_point() else first
    try:
        graph = folded_graph(model, input_shape, where, probe=probe)
        layers = weight_layers(graph)
    except UntraceableError as exc:
        if not untraced or any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                               for m in model.modules()):
            raise
        work = copy.deepcopy(model).to("cpu").eval().requires_grad_(False)
        sample = first.detach().cpu()
        if sample.is_floating_point():
            sample = sample.to(next((p.dtype for p in work.parameters()
                                     if p.is_floating_point()), sample.dtype))
        graph, layers = exc.reason, module_weight_layers(work, sample)
    if not layers:
        raise invalid(where, "a network with at least one Linear or Conv layer",
                      "no weight layers", "pass a network of Linear/Conv layers")
    return adapter, margins, epsilon_margin(margins, percentile), input_shape, graph, layers


@renamed(margin_percentile="percentile")
@constrained(percentile=Real(0, 100, high_open=True), bias=Flag())
@model_options("output")
def capacity(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    percentile: float = 5,
    bias: bool = True,
    options: ModelOptions,
    batch_size: int = 1024,
) -> CapacityResult:
    """The norm- and path-based capacities over margin of section 2.2, and section 2.3's
    Lipschitz bounds, with the per-layer norm table.

    See the module docstring for the formulas. gamma is the epsilon-margin of
    :func:`nngauge.margin` at ``percentile``. The weight layers are every Linear / Conv
    of the network's graph after batchnorm folding (appendix A; the user's model is not
    changed); the products run over all of them, also in residual networks (the paper derives
    its bounds for chains; ``notes`` says so). ``spectral`` and ``lipschitz_l2`` use each
    layer's operator norm (``LayerNorms.spectral``), not the kernel matrix's
    (``LayerNorms.spectral_kernel``). Max pooling and activations that are piecewise linear
    but not positively homogeneous (ReLU6, HardTanh) leave the l2 and spectral capacities
    defined and make the path-based ones NaN, with the reason in ``undefined``.

    Any network with Linear / Conv layers is measured, token models included (their graph is
    traced on the data's first inputs): the l2 and spectral capacities read the weights alone.
    A network ``torch.fx`` cannot trace (Python branches on tensor values or shapes in its
    forward, as a GPT checking its sequence length) and without batchnorm to fold is measured
    from the weight modules its forward calls (Linear, Conv, and modules applying a 2-D weight
    as one, Hugging Face's Conv1D), the path norms and Lipschitz bounds NaN saying why.
    Normalization by sample statistics, attention, smooth activations and embeddings of token
    ids make the path-based measures NaN (no sum over paths) and the Lipschitz bounds NaN (the
    product of norms bounds nothing through them), each with the nodes named in ``undefined``.

    The paper measures trained networks. A network that misclassifies at least
    ``percentile`` percent of the data (any network at initialization, typically) has a
    margin gamma <= 0, over which no capacity is defined: the capacities are then NaN, each
    with the reason in ``undefined``, and a ``UserWarning`` says so and how to fix it (measure
    the trained network, or pass a ``percentile`` above its error rate). The norms,
    which do not depend on the margin, are returned all the same.

    Args:
        model: a classifier mapping (m, ...) to class scores (m, n_classes), or a sequence
            model with scores (m, ..., n_classes), with at least one Linear / Conv layer; the
            path norms and Lipschitz bounds are defined for networks of Linear / Conv layers,
            piecewise-linear activations, pooling, eval batchnorm, residual additions and
            reshapes.
        data, labels: labelled data, as for :func:`nngauge.margin`.
        percentile: eps in percent, as :func:`nngauge.margin`'s (the paper: 5).
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
        >>> result = capacity(net, x, y)  # labels the network fits: a positive margin
        >>> result.margin > 0 and result["l2"].plain <= result.l2
        True
        >>> import warnings
        >>> with warnings.catch_warnings():  # random labels: about 2/3 misclassified
        ...     warnings.simplefilter("ignore")
        ...     at_init = capacity(net, x, torch.randint(0, 3, (50,)))
        >>> at_init.margin < 0, math.isnan(at_init.l2), "margin" in at_init.undefined["l2"]
        (True, True, True)
    """
    where = "capacity()"
    if not 0 <= percentile < 100:
        raise invalid(where, "percentile in [0, 100)", f"{percentile!r}",
                      "pass e.g. percentile=5 (the paper)")
    adapter, margins, gamma, input_shape, graph, layers = margin_and_layers(
        model, data, labels, options, percentile=percentile, batch_size=batch_size, where=where,
        tokens=True, untraced=True)
    rows = layer_norms(layers)
    d = len(rows)
    if isinstance(graph, str):  # no graph: the layers come from the modules
        obstacles = [(None, f"the model could not be traced ({graph}): the path norms and "
                            "Lipschitz bounds need the graph that composes the layers")]
        not_lipschitz = obstacles[0][1]
    else:
        obstacles = path_obstacles(graph, layers)
        not_lipschitz = "; ".join(why for op, why in obstacles if not _lipschitz(op))
    reason = "; ".join(why for _, why in obstacles)
    log_l1, log_l2 = (math.nan, math.nan) if obstacles else (
        log_path_sum(graph, layers, 1.0, bias=bias),
        log_path_sum(graph, layers, 2.0, bias=bias))
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
    lip_linf = math.nan if not_lipschitz else _sum_log(r.l1_inf for r in rows)
    lip_l2 = math.nan if not_lipschitz else _sum_log(r.spectral for r in rows)
    log_gamma = math.log(gamma) if gamma > 0 else math.nan
    undefined = {name: reason for name in _PATH_MEASURES} if obstacles else {}
    if not_lipschitz:
        undefined.update({name: _NOT_LIPSCHITZ + not_lipschitz for name in _LIPSCHITZ_MEASURES})
    if not gamma > 0:
        why = _nonpositive_margin(gamma, margins, percentile)
        warn_caller(f"{where}: {why}")
        undefined.update({name: "; ".join(filter(None, (undefined.get(name), why)))
                          for name in _MARGIN_MEASURES})
    return CapacityResult(
        margin=gamma, percentile=float(percentile),
        l2=measures[0].capacity, l1_path=measures[1].capacity, l2_path=measures[2].capacity,
        spectral=measures[3].capacity, measures=measures,
        l1_path_norm=_safe_exp(log_l1), l2_path_norm=_safe_exp(log_l2 / 2),
        lipschitz_linf=_safe_exp(lip_linf), lipschitz_l2=_safe_exp(lip_l2),
        log10_lipschitz_capacity_linf=n * (lip_linf - log_gamma) / math.log(10),
        log10_lipschitz_capacity_l2=n * (lip_l2 - log_gamma) / math.log(10),
        input_dim=n, depth=d, layers=rows, bias=bias,
        undefined=undefined, notes=_notes(graph, layers, rows, model), mode=folded_mode(adapter),
    )


def _nonpositive_margin(gamma: float, margins: np.ndarray, percentile: float) -> str:
    """Why the capacities over a margin gamma <= 0 are undefined, and the fix."""
    wrong = float(np.mean(margins <= 0))
    fix = "measure the trained network (the paper's setting)"
    if wrong < 0.99:
        fix += f", or pass percentile above {100 * wrong:.3g}"
    return (f"the margin at percentile={percentile:g} is {gamma:.3g} <= 0: the network "
            f"misclassifies {wrong:.0%} of the data (as an untrained network does), and a capacity over "
            f"a margin that is not positive is undefined (NaN); {fix}")


def _lipschitz(op: GraphOp) -> bool:
    """Whether a path obstacle still lets prod_i ||W_i|| bound the Lipschitz constant: max
    pooling, a piecewise-linear activation (1-Lipschitz), or a tuple / dict output (the
    measured tensor is selected from it)."""
    return op.kind in ("maxpool", "output") or (op.kind == "activation" and op.piecewise_linear)


def _notes(graph: ModelGraph | str, layers: Sequence[WeightLayer],
           rows: Sequence[LayerNorms], model: nn.Module) -> tuple[str, ...]:
    notes = []
    if isinstance(graph, str):
        notes.append(f"not traced ({graph}): the weight layers are the Linear / Conv modules "
                     "(and modules that apply a 2-D weight as one) the forward pass called, "
                     "in the order of their first call; no batchnorm to fold")
        merges, called = [], {layer.module_name for layer in layers}
        outside = [name for name, p in model.named_parameters()
                   if p.dim() >= 2 and name.rpartition(".")[0] not in called]
    else:
        kinds = {op.node: op.kind for op in graph.ops}
        merges = [op.label for op in graph.ops if op.kind == "affine" and sum(
            kinds[n] not in ("constant", "shape") for n in op.node.all_input_nodes) > 1]
        covered = {layer.weight.data_ptr() for layer in layers}
        outside = [name for name, p in graph.module.named_parameters()
                   if p.dim() >= 2 and p.data_ptr() not in covered]
    if merges:
        notes.append(f"branches merge at {', '.join(merges)}: the products run over all "
                     f"{len(rows)} weight layers, as for a chain; the paper derives its bounds "
                     "for chains")
    if outside:
        notes.append(f"weights outside the Linear / Conv layers are left out of the products: "
                     f"{', '.join(outside[:8])}{', ...' if len(outside) > 8 else ''} "
                     "(embeddings, class tokens, an LSTM's or MultiheadAttention's own weights)")
    notes += [f"{r.name}: power iteration stopped at {POWER_MAX_ITER} iterations, above the "
              f"relative residual {POWER_TOL:g}" for r in rows
              if r.spectral_iterations >= POWER_MAX_ITER]
    return tuple(notes)


def first_inputs(data: Any, where: str, n: int = 1) -> torch.Tensor:
    """The first ``n`` raw inputs of ``data`` (fewer when it has fewer)."""
    from nngauge._internal.data import as_batches

    return next(iter(as_batches(data[0] if isinstance(data, (tuple, list)) else data,
                                batch_size=n, where=where, require_float=False))).inputs


def float_input_shape(data: Any, where: str) -> tuple[int, ...]:
    """One sample's shape; the inputs must be real-valued (a token model's embedding lookup
    is not a weight layer of a sum over paths)."""
    first = first_inputs(data, where)
    _require_float(first, where)
    return tuple(first.shape[1:])


def _require_float(inputs: torch.Tensor, where: str) -> None:
    if not inputs.is_floating_point():
        raise invalid(where, "real-valued inputs (norms and paths of Linear/Conv layers acting "
                      "on them)", f"integer inputs (token ids, dtype {inputs.dtype})",
                      "measure the layers after the embedding as their own nn.Module, on "
                      "embedded inputs")


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
