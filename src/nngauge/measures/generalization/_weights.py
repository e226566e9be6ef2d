"""The weight layers of a traced network graph: every Linear and Conv, module or function.

A weight layer is a node of a :class:`~nngauge._internal.graph.ModelGraph` that applies a
parameter matrix (or convolution kernel) to one input-dependent tensor: a torch ``nn.Linear`` or
``nn.Conv{1,2,3}d`` module, or a call of ``F.linear``, ``F.conv{1,2,3}d`` or ``torch.addmm``
(Hugging Face's ``Conv1D``: ``addmm(bias, x, weight)``, weight stored (in, out)) whose weight is
a parameter. Subclasses of these modules that the tracer kept as leaves are not weight layers:
their forward may do more than their base class (weight standardization, LoRA, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Literal, Optional

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.fx.operator_schemas import normalize_function

from nngauge._internal.graph import GraphOp, ModelGraph, target_name

_CONV_FUNCTIONS = ("conv1d", "conv2d", "conv3d")
_OPERANDS = {  # function -> (input, weight, bias) keyword names after normalization
    "linear": ("input", "weight", "bias"), "addmm": ("mat1", "mat2", "input"),
    **{name: ("input", "weight", "bias") for name in _CONV_FUNCTIONS},
}


@dataclass(frozen=True)
class WeightLayer:
    """One weight layer of a graph.

    Attributes:
        op: its graph node (None for a layer read from a module of a network the tracer
            could not trace: :func:`module_weight_layers`).
        kind: "linear" or "conv".
        weight: (out, in) for linear layers, (C_out, C_in / groups, *kernel) for convolutions
            (an ``addmm`` weight is transposed to this layout), detached.
        bias: (out,) or None, detached.
        in_shape: shape of one sample of the layer's input.
        call: ``call(x, weight, bias)`` applies the layer (its stride, padding, padding mode,
            dilation and groups) with the given weight and bias to a batch x.
        padding_mode: "zeros" unless a Conv module pads otherwise.
        circular: a stride-1 circular convolution whose output has its input's spatial size
            (the operator the exact FFT method applies to).
        dilation, groups: of a Conv module (what the FFT method needs; defaults otherwise).
    """

    op: Optional[GraphOp]
    kind: Literal["linear", "conv"]
    weight: torch.Tensor = field(repr=False)
    bias: Optional[torch.Tensor] = field(repr=False)
    in_shape: tuple[int, ...]
    call: Callable[..., torch.Tensor] = field(repr=False)
    padding_mode: str = "zeros"
    circular: bool = False
    dilation: tuple[int, ...] = ()
    groups: int = 1
    module_name: Optional[str] = None

    @property
    def name(self) -> str:
        """The site of the layer in the graph (its module name for a module called once), or
        the module's name for a layer read from a module."""
        return self.module_name if self.op is None else self.op.site

    def matrix(self) -> torch.Tensor:
        """The weight as an (out, fan_in) matrix (kernels reshaped)."""
        return self.weight.reshape(self.weight.shape[0], -1)

    def linear_map(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The layer without its bias, as a function of a batch."""
        return partial(self.call, weight=self.weight, bias=None)


def is_torch_module(module: Optional[nn.Module]) -> bool:
    """A module of one of torch.nn's own classes (not a user's subclass)."""
    return module is not None and type(module).__module__.startswith("torch.nn")


def arguments(node: fx.Node) -> Optional[dict[str, Any]]:
    """The arguments of a ``call_function`` node by keyword (torch's schema), or None when the
    function has no schema torch can match."""
    types = tuple(torch.Tensor if isinstance(a, fx.Node) else type(a) for a in node.args)
    kwarg_types = {k: torch.Tensor if isinstance(v, fx.Node) else type(v)
                   for k, v in node.kwargs.items()}
    try:
        normalized = normalize_function(node.target, node.args, node.kwargs, arg_types=types,
                                        kwarg_types=kwarg_types,
                                        normalize_to_only_use_kwargs=True)
    except Exception:  # torch raises several kinds when no schema matches
        return None
    return None if normalized is None else dict(normalized.kwargs)


def weight_layers(graph: ModelGraph) -> list[WeightLayer]:
    """The weight layers of ``graph`` in the order of the forward pass."""
    ops = {op.node: op for op in graph.ops}
    found = (_weight_layer(graph, op, ops) for op in graph.ops if op.kind == "affine")
    return [layer for layer in found if layer is not None]


def module_weight_layers(model: nn.Module, probe: torch.Tensor) -> list[WeightLayer]:
    """The weight layers of a network ``torch.fx`` cannot trace, read from its modules in the
    order a forward pass on ``probe`` first calls them: every ``nn.Linear`` and
    ``nn.Conv{1,2,3}d``, and every other module with a 2-D ``weight`` parameter whose output
    on the input it received is ``F.linear`` of it with that weight or its transpose (and its
    ``bias``): Hugging Face's ``Conv1D``, weight stored (in, out). Nothing says how they are
    composed (no graph): what needs the composition (path norms) cannot use them. The model
    runs as it is (its dtype, its mode); the layers hold float64 copies of the weights."""
    inputs: dict[str, torch.Tensor] = {}

    def record(name: str, args: tuple) -> None:
        if args and isinstance(args[0], torch.Tensor):
            inputs.setdefault(name, args[0])

    handles = [module.register_forward_pre_hook(lambda m, args, name=name: record(name, args))
               for name, module in model.named_modules()
               if isinstance(getattr(module, "weight", None), nn.Parameter)]
    try:
        with torch.no_grad():
            model(probe)
    finally:
        for handle in handles:
            handle.remove()
    modules = dict(model.named_modules())
    found = (_called_layer(name, modules[name], x) for name, x in inputs.items())
    return [layer for layer in found if layer is not None]


def _called_layer(name: str, module: nn.Module, x: torch.Tensor) -> Optional[WeightLayer]:
    """The weight layer (float64 weights) of one called module, None when it is not one."""
    weight = module.weight.detach()
    bias = getattr(module, "bias", None)
    bias = bias.detach() if isinstance(bias, torch.Tensor) else None
    shape = tuple(x.shape[1:])  # one sample's
    if type(module) in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
        return WeightLayer(None, "conv", weight.double(), _double(bias), shape,
                           module._conv_forward, padding_mode=module.padding_mode,
                           dilation=tuple(module.dilation), groups=module.groups,
                           module_name=name)
    if weight.dim() != 2 or not x.is_floating_point() or x.shape[-1] not in weight.shape:
        return None
    with torch.no_grad():
        y = module(x)
        for matrix in (weight, weight.T):
            if matrix.shape[1] != x.shape[-1] or not isinstance(y, torch.Tensor):
                continue
            expected = F.linear(x, matrix, bias)
            if y.shape == expected.shape and torch.allclose(
                    y, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max())):
                return WeightLayer(None, "linear", matrix.double(), _double(bias), shape,
                                   F.linear, module_name=name)
    return None


def _double(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if tensor is None else tensor.double()


def _weight_layer(graph: ModelGraph, op: GraphOp, ops: dict) -> Optional[WeightLayer]:
    node = op.node
    if node.op == "call_module":
        return _module_layer(op, ops[node.args[0]]) if node.args else None
    if node.op != "call_function" or target_name(node) not in _OPERANDS:
        return None
    return _function_layer(graph, op, ops)


def _module_layer(op: GraphOp, source: GraphOp) -> Optional[WeightLayer]:
    module = op.module
    if (not is_torch_module(module) or not isinstance(module, (nn.Linear, nn.modules.conv._ConvNd))
            or isinstance(module, nn.modules.conv._ConvTransposeNd)):
        return None
    weight = module.weight.detach()
    bias = None if module.bias is None else module.bias.detach()
    if isinstance(module, nn.Linear):
        return WeightLayer(op, "linear", weight, bias, source.shape, F.linear)
    same_size = tuple(op.shape[1:]) == tuple(source.shape[1:])
    circular = (module.padding_mode == "circular" and same_size
                and all(s == 1 for s in module.stride))
    return WeightLayer(op, "conv", weight, bias, source.shape, module._conv_forward,
                       padding_mode=module.padding_mode, circular=circular,
                       dilation=tuple(module.dilation), groups=module.groups)


def _function_layer(graph: ModelGraph, op: GraphOp, ops: dict) -> Optional[WeightLayer]:
    name = target_name(op.node)
    kwargs = arguments(op.node)
    if kwargs is None or kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1:
        return None
    x, w, b = (kwargs.get(key) for key in _OPERANDS[name])
    weight, bias = _attribute(graph, ops, w), _attribute(graph, ops, b)
    varying = isinstance(x, fx.Node) and ops[x].kind not in ("constant", "shape")
    if not varying or not isinstance(weight, nn.Parameter) or (b is not None and bias is None):
        return None
    weight = weight.detach()
    bias = None if bias is None else bias.detach()
    if name in ("linear", "addmm"):
        weight = weight.T if name == "addmm" else weight
        return WeightLayer(op, "linear", weight, bias, ops[x].shape, F.linear)
    rest = {k: kwargs[k] for k in ("stride", "padding", "dilation", "groups")}
    return WeightLayer(op, "conv", weight, bias, ops[x].shape,
                       partial(_function_conv, op.node.target, rest))


def _attribute(graph: ModelGraph, ops: dict, node: Any) -> Optional[torch.Tensor]:
    """The tensor of a ``get_attr`` node (None for anything else)."""
    if isinstance(node, fx.Node) and node.op == "get_attr":
        value = graph.evaluate(ops[node], {})
        return value if isinstance(value, torch.Tensor) else None
    return None


def _function_conv(target: Callable, rest: dict, x: torch.Tensor, weight: torch.Tensor,
                   bias: Optional[torch.Tensor]) -> torch.Tensor:
    return target(x, weight, bias, **rest)


__all__ = ["WeightLayer", "arguments", "is_torch_module", "module_weight_layers", "weight_layers"]
