"""Batchnorm folding on the network's graph: the same function without batchnorm (generalization
paper, appendix A).

In eval mode a batchnorm node is the affine map y = s x + t per unit (channel), with
s = gamma / sqrt(var + eps) and t = beta - s mu from its running statistics (gamma = 1,
beta = 0 without affine parameters). Following a linear (or convolution) layer W x + b whose
output nothing else reads, the pair is the single layer

    W' = diag(s) W,    b' = s b + t = s (b - mu) + beta,

which is how the generalization paper computes norms of batchnorm networks ("we reparametrize
the network to one that represents the exact same function without Batch Normalization", after
Neyshabur et al. 2016). The graph comes from :func:`nngauge._internal.graph.trace_graph`, so
batchnorm modules, ``F.batch_norm`` calls, residual blocks and any container are found; the
folded network is a ``torch.fx.GraphModule`` with the original submodule names, checked on a
probe batch against the original eval-mode function.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx as fx
from torch import nn

from nngauge._constraints import constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter, require_real_finite_weights
from nngauge._internal.graph import GraphOp, ModelGraph, target_name, trace_graph
from nngauge.errors import NNGaugeError, invalid
from nngauge.measures.generalization._weights import (
    WeightLayer,
    arguments,
    is_torch_module,
    weight_layers,
)

_WHERE = "fold_batchnorm()"
_BATCHNORM = nn.modules.batchnorm._BatchNorm
PROBE_SAMPLES = 4
"""Samples of the Gaussian probe batch that traces the network and checks the folding."""
PROBE_RTOL = 1e-5
"""Largest difference allowed between folded and original outputs, relative to their scale."""
SPATIAL_SIZES = (32, 224, 64, 28, 16, 8)
"""Spatial sizes tried for a probe of a convolutional network given without ``input_shape``."""


@constrained()
def fold_batchnorm(model: nn.Module, *,
                   input_shape: Optional[Sequence[int]] = None) -> nn.Module:
    """A copy of ``model`` computing its eval-mode function with every batchnorm folded away.

    Each batchnorm node (a torch ``BatchNorm`` module or an ``F.batch_norm`` call in eval
    mode) whose input is the output of a Linear or Conv layer (module, or ``F.linear`` /
    ``F.conv*d`` / ``addmm`` with a parameter weight) read by nothing else is folded into it:
    W' = diag(s) W, b' = s (b - mu) + beta, s = gamma / sqrt(var + eps), with the running
    statistics, computed in float64. The copy is a ``torch.fx.GraphModule`` keeping the
    submodule names, in eval mode, with new parameter tensors; the user's model is never
    changed. The folded function is checked against the original one on a Gaussian probe batch
    (float64 copies of both): they must agree to ``PROBE_RTOL`` relative to the output scale
    (8 units of the last place for models in a coarser dtype than float32, whose folded
    weights are rounded to it).

    Args:
        model: a network taking one float tensor.
        input_shape: shape of one input sample, for the probe batch. Default: (in_features,)
            when the first weight layer (in registration order) is Linear; for a convolutional
            network, (C, s, ..., s) for the first s of ``SPATIAL_SIZES`` the model accepts.

    Returns:
        The folded copy (no batchnorm left).

    Raises:
        InvalidInputError: naming the batchnorm that cannot be folded: one that does not
            directly follow a Linear/Conv layer, one whose layer's output is also read
            elsewhere (a skip connection taken before the normalization), one without running
            statistics, or a BatchNorm subclass torch.fx could not trace (timm's
            ``BatchNormAct2d`` also applies an activation, which folding would drop).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
        >>> _ = net(torch.randn(16, 3)); _ = net.eval()
        >>> folded = fold_batchnorm(net)
        >>> x = torch.randn(5, 3)
        >>> torch.allclose(folded(x), net(x), atol=1e-6)
        True
    """
    if not isinstance(model, nn.Module):
        raise invalid(_WHERE, "a torch.nn.Module", type(model).__name__, "pass the network")
    work = copy.deepcopy(model).eval()
    probe = probe_batch(probe_shape(work, input_shape, _WHERE, search=True), *_kind(work))
    graph = _traced(work, probe, _WHERE)
    refused = fold_graph(graph)
    if refused:
        raise invalid(_WHERE, "batchnorm layers that can be folded (each directly after its own "
                      "Linear/Conv layer, whose output nothing else reads, with running "
                      "statistics)", refused[0][1],
                      "normalize right after each Linear/Conv layer and take skip connections "
                      "after the normalization (nngauge mlp: skip_start='norm'), keep running "
                      "statistics, and use nn.BatchNorm followed by the activation module "
                      "instead of fused BatchNorm-activation classes")
    folded = graph.module.eval()
    # folded parameters are rounded to the model's dtype: bfloat16 weights carry ~3e-3 each
    dtype = next((p.dtype for p in folded.parameters() if p.is_floating_point()), torch.float32)
    verify_fold(copy.deepcopy(work).double(), copy.deepcopy(folded).double(), probe.double(),
                _WHERE, rtol=max(PROBE_RTOL, 8 * torch.finfo(dtype).eps))
    return folded


def folded_mode(adapter: ModelAdapter) -> MeasurementMode:
    """The :class:`~nngauge.MeasurementMode` of a measure on :func:`folded_graph`: the
    adapter's output choice, batchnorm in eval mode folded away, float64."""
    from dataclasses import replace

    return replace(adapter.mode, norm_mode="eval, folded into the preceding layers "
                   "(generalization paper, appendix A)", precision="float64 copy")


def folded_graph(model: nn.Module, input_shape: Optional[Sequence[int]],
                 where: str, *, probe: Optional[torch.Tensor] = None) -> ModelGraph:
    """The traced graph of a float64 eval-mode CPU copy of ``model`` with every foldable
    batchnorm folded (the others stay as diagonal affine nodes), checked on a probe batch:
    ``probe`` (inputs of the model, e.g. token ids), or a Gaussian one of ``input_shape``.

    ``input_shape`` None is inferred only from a first Linear layer (a convolutional network's
    measures depend on the input size)."""
    if not isinstance(model, nn.Module):
        raise invalid(where, "a torch.nn.Module", type(model).__name__, "pass the network")
    require_real_finite_weights(model, where)
    work = copy.deepcopy(model).to("cpu", torch.float64).eval().requires_grad_(False)
    if probe is None:
        probe = probe_batch(probe_shape(work, input_shape, where, search=False),
                            torch.float64, torch.device("cpu"))
    else:
        probe = probe.detach().cpu()
    graph = _traced(work, probe, where)
    fold_graph(graph)
    folded = graph.module.requires_grad_(False)
    verify_fold(work, folded, probe, where)
    return trace_graph(folded, probe, where=where)


def is_batchnorm(op: GraphOp) -> bool:
    """A batchnorm node: a BatchNorm module (of any class) or an ``F.batch_norm`` call."""
    return (isinstance(op.module, _BATCHNORM)
            or (op.node.op == "call_function" and target_name(op.node) == "batch_norm"))


def untraceable_batchnorm(op: GraphOp) -> str:
    """Why a BatchNorm subclass kept as a leaf is not a batchnorm (what measures say)."""
    base = next(c for c in type(op.module).__mro__ if c.__module__.startswith("torch.nn"))
    return (f"{op.label}: a {base.__name__} subclass whose forward could not be traced; "
            "folding it would drop whatever it adds (timm's BatchNormAct2d applies an "
            "activation)")


def batchnorm_affine(op: GraphOp, resolve: Callable[[Any], Any]
                     ) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(s, t), float64, of an eval-mode batchnorm node y = s x + t (per channel); None when it
    has no running statistics. ``resolve`` maps the nodes among ``F.batch_norm``'s arguments
    to their (constant) values."""
    if op.module is not None:
        module = op.module
        stats = (module.running_mean, module.running_var, module.weight, module.bias,
                 module.eps)
    else:
        kwargs = arguments(op.node) or {}
        if kwargs.get("training", True):
            return None
        stats = tuple(resolve(kwargs.get(key)) for key in
                      ("running_mean", "running_var", "weight", "bias")) + (kwargs["eps"],)
    mean, var, gamma, beta, eps = stats
    if not isinstance(mean, torch.Tensor) or not isinstance(var, torch.Tensor):
        return None
    scale = torch.rsqrt(var.detach().to(torch.float64) + eps)
    if gamma is not None:
        scale = scale * gamma.detach().to(torch.float64)
    shift = -mean.detach().to(torch.float64) * scale
    if beta is not None:
        shift = shift + beta.detach().to(torch.float64)
    return scale, shift


def fold_graph(graph: ModelGraph) -> list[tuple[GraphOp, str]]:
    """Fold every foldable batchnorm node of ``graph.module`` into its layer (the graph module
    is changed: new layer modules or parameters, batchnorm nodes removed); returns the others,
    each with why it cannot be folded."""
    gm = graph.module
    layers = {layer.op.node: layer for layer in weight_layers(graph)}
    ops = {op.node: op for op in graph.ops}
    constants: dict[fx.Node, Any] = {}
    for op in graph.ops:
        if op.kind == "constant":
            constants[op.node] = graph.evaluate(op, constants)
    calls = Counter(op.node.target for op in graph.ops if op.node.op == "call_module")
    refused = []
    for op in filter(is_batchnorm, graph.ops):
        source = ops.get(op.node.args[0]) if op.node.args else None
        layer = layers.get(source.node) if source is not None else None
        affine = (batchnorm_affine(op, lambda n: constants.get(n, n))
                  if op.module is None or is_torch_module(op.module) else None)
        why = _unfoldable(op, source, layer, affine, calls)
        if why:
            refused.append((op, why))
            continue
        _fold_into(gm, layer, *affine)
        op.node.replace_all_uses_with(layer.op.node)
        gm.graph.erase_node(op.node)
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    gm.delete_all_unused_submodules()
    gm.recompile()
    return refused


def _unfoldable(op: GraphOp, source: Optional[GraphOp], layer: Optional[WeightLayer],
                affine: Optional[tuple], calls: Counter) -> str:
    if op.module is not None and not is_torch_module(op.module):
        return untraceable_batchnorm(op)
    if affine is None:
        return (f"{op.label}: no running statistics (track_running_stats=False, or "
                "F.batch_norm in training mode): it normalizes by statistics of the batch")
    if layer is None:
        return (f"{op.label}: does not follow a Linear or Conv layer (its input comes from "
                f"{source.label if source is not None else 'a constant'})")
    readers = [user.name for user in layer.op.node.users if user is not op.node]
    if readers:
        return (f"{op.label}: follows {layer.op.label}, whose output is also read by "
                f"{', '.join(readers)} (a skip connection or another branch taken before the "
                "normalization)")
    if layer.op.node.op == "call_module" and calls[layer.op.node.target] > 1:
        return (f"{op.label}: follows {layer.op.label}, a module called "
                f"{calls[layer.op.node.target]} times (folding would change its other calls)")
    return ""


def _fold_into(gm: fx.GraphModule, layer: WeightLayer, scale: torch.Tensor,
               shift: torch.Tensor) -> None:
    """Write W' = diag(s) W and b' = s b + t into the layer of ``gm`` (new tensors)."""
    dtype = layer.weight.dtype
    bias = (torch.zeros_like(shift) if layer.bias is None
            else layer.bias.to(torch.float64))
    weight = layer.weight.to(torch.float64) * scale.reshape(-1, *[1] * (layer.weight.dim() - 1))
    weight = nn.Parameter(weight.to(dtype))
    bias = nn.Parameter((scale * bias + shift).to(dtype))
    node = layer.op.node
    if node.op == "call_module":
        module = copy.deepcopy(layer.op.module)
        module.weight, module.bias = weight, bias
        gm.add_submodule(node.target, module)
        return
    transposed = target_name(node) == "addmm"  # addmm(bias, x, weight (in, out))
    slots = ((0, "input"), (2, "mat2")) if transposed else ((2, "bias"), (1, "weight"))
    for (position, key), value in zip(slots, (bias, weight.T if transposed else weight)):
        name = f"{node.name}_folded_{key}"
        gm.register_parameter(name, nn.Parameter(value.detach()))
        with gm.graph.inserting_before(node):
            attribute = gm.graph.get_attr(name)
        if key in node.kwargs or len(node.args) <= position:
            node.update_kwarg(key, attribute)
        else:
            node.update_arg(position, attribute)


def verify_fold(original: nn.Module, folded: nn.Module, probe: torch.Tensor, where: str, *,
                rtol: float = PROBE_RTOL) -> None:
    """Raise unless ``folded`` and ``original`` agree on ``probe`` to ``rtol``."""
    with torch.no_grad():
        expected, got = _tensors(original(probe)), _tensors(folded(probe))
    shapes_match = [a.shape for a in expected] == [b.shape for b in got]
    scale = max((float(a.abs().max()) for a in expected if a.numel()), default=0.0) or 1.0
    error = max((float((a - b).abs().max()) for a, b in zip(expected, got) if a.numel()),
                default=0.0) if shapes_match else math.inf
    if not error <= rtol * scale:
        raise invalid(where, f"a folded network equal to the original to {rtol:g} relative",
                      f"a relative difference of {error / scale:.3g} on a probe batch",
                      "report this network to nngauge; measure it without folding meanwhile")


def probe_shape(model: nn.Module, input_shape: Optional[Sequence[int]], where: str, *,
                search: bool) -> tuple[int, ...]:
    """``input_shape`` checked, or inferred: (in_features,) when the first weight module is
    Linear; with ``search``, (C, s, ..., s) for the first s of ``SPATIAL_SIZES`` ``model``
    (in eval mode) accepts when it is a Conv."""
    if input_shape is not None:
        shape = tuple(input_shape)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
            raise invalid(where, "input_shape: positive integers, the shape of one sample",
                          f"input_shape={input_shape!r}", "pass e.g. input_shape=(3, 32, 32)")
        return shape
    first = next((m for m in model.modules()
                  if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))), None)
    if isinstance(first, nn.Linear):
        return (first.in_features,)
    if search and first is not None:
        for size in SPATIAL_SIZES:
            shape = (first.in_channels,) + (size,) * len(first.kernel_size)
            if _accepts(model, shape):
                return shape
    raise invalid(where, "input_shape (one sample's shape, e.g. (C, H, W)) for a network whose "
                  "first layer does not fix it", "input_shape=None",
                  "pass input_shape= the shape of one input sample")


def probe_batch(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The Gaussian probe batch (``PROBE_SAMPLES`` samples of ``shape``, seeded)."""
    generator = torch.Generator().manual_seed(0)
    batch = torch.randn((PROBE_SAMPLES, *shape), generator=generator, dtype=dtype)
    return batch.to(device)


def _accepts(model: nn.Module, shape: tuple[int, ...]) -> bool:
    try:
        with torch.no_grad():
            dtype, device = _kind(model)
            model(torch.zeros((2, *shape), dtype=dtype, device=device))
    except Exception:  # any failure means: not this shape
        return False
    return True


def _traced(model: nn.Module, probe: torch.Tensor, where: str) -> ModelGraph:
    try:
        return trace_graph(model, probe, where=where)
    except NNGaugeError:
        raise
    except Exception as exc:  # the model failed on the probe: wrong input shape or dtype
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise invalid(where, "a model taking float inputs of one sample's shape "
                      f"{tuple(probe.shape[1:])} (the input features / channels its first layer "
                      "expects)", f"{type(exc).__name__} running it: {first}",
                      "pass input_shape= (or data) of the shape one sample has") from None


def _kind(model: nn.Module) -> tuple[torch.dtype, torch.device]:
    """dtype and device of the model's first floating-point parameter (float32, CPU without)."""
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    return (torch.float32, torch.device("cpu")) if first is None else (first.dtype, first.device)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a (nested) output: tensor, tuple, list or dict."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else (
        value if isinstance(value, (tuple, list)) else ())
    return [t for item in items for t in _tensors(item)]
