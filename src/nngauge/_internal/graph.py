"""The data-flow graph of a model (``torch.fx``) and what each node does to the measured input.

Measures that reason about a network's structure (path norms over every input-output path,
exact linear pieces through residual additions and max pooling, batchnorm folding) need the
graph, not the module tree: a residual addition or a ``F.relu`` call is invisible to hooks.
:func:`trace_graph` traces the model with ``torch.fx`` (through user modules; torch.nn modules
stay leaves), runs it once on an example input and classifies every node by what it does to
the input of the measure:

- ``"input"``: the placeholder (the measured input);
- ``"constant"``: a value that does not depend on the input (parameters, buffers, literals);
- ``"shape"``: a non-tensor value computed from the input's shape (``x.size(0)``);
- ``"affine"``: an affine map of the varying operand(s) applied sample by sample: Linear,
  Conv, eval-mode batchnorm, average pooling, padding, reshapes, slices, concatenation,
  additions of input-dependent tensors, multiplication or matmul by a constant;
- ``"activation"``: an elementwise nonlinearity, module or function; piecewise-linear ones
  carry their ``breakpoints`` (ReLU (0,), ReLU6 (0, 6), HardTanh (min, max), clamp), and
  positively homogeneous ones (ReLU, LeakyReLU, PReLU, abs) are flagged ``homogeneous``;
- ``"maxpool"``: max pooling, piecewise linear (a change of arg-max is a boundary);
- ``"output"``; and ``"other"``, with the ``reason`` it is none of these (normalization by
  batch or sample statistics, attention, a product of two input-dependent tensors, ...).

Modules outside the known lists, and subclasses of torch's classes (a subclass may do more than
its base: timm's ``BatchNormAct2d`` also applies an activation), are classified by their
behaviour on the example (:mod:`nngauge._internal.behaviour`). A user module whose forward
cannot be traced (Python control flow on a tensor's value or shape) is kept as a leaf and
tracing starts again.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from nngauge._internal.behaviour import classify_behaviour
from nngauge._internal.data import require_model_output
from nngauge._internal.layers import ACTIVATIONS, RESHAPES
from nngauge.activations._torch import ActivationModule
from nngauge.errors import InvalidInputError, invalid

OpKind = Literal["input", "constant", "shape", "affine", "activation", "maxpool", "output",
                 "other"]


@dataclass(frozen=True)
class GraphOp:
    """One node of the traced graph and what it does to the measured input.

    Attributes:
        node: the ``torch.fx`` node.
        kind: see the module docstring.
        label: a readable name: ``"layer1.0.conv1 (Conv2d)"``, ``"add (operator.add)"``.
        module: the submodule of a ``call_module`` node, else None.
        breakpoints: for piecewise-linear activations, the pre-activation values where the
            linear piece changes (sorted); None otherwise.
        homogeneous: a positively homogeneous activation (f(a x) = a f(x) for a > 0).
        reason: for ``"other"``, why the node is not one of the supported kinds.
        shape: the node's per-sample output shape on the example (None for non-tensors).
        site: the name measures give this computation: the module's name for a module called
            once, ``"name#k"`` (k = 1, 2, ...) for the k-th call of a module called several
            times per forward pass (as hooks number them), the node's name for a function.
    """

    node: fx.Node
    kind: OpKind
    label: str
    module: Optional[nn.Module] = None
    breakpoints: Optional[tuple[float, ...]] = None
    homogeneous: bool = False
    reason: str = ""
    shape: Optional[tuple[int, ...]] = None
    site: str = ""

    @property
    def piecewise_linear(self) -> bool:
        return self.breakpoints is not None


@dataclass
class ModelGraph:
    """A traced model: the ``GraphModule`` (sharing the model's parameters), its ops in
    topological order, and for every node the position of its last use."""

    module: fx.GraphModule
    ops: list[GraphOp]
    last_use: dict[fx.Node, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for index, op in enumerate(self.ops):
            for parent in op.node.all_input_nodes:
                self.last_use[parent] = index

    def unsupported(self, allowed: Sequence[OpKind]) -> list[GraphOp]:
        """The ops whose kind is not in ``allowed`` (input, constant, shape and output are
        always allowed)."""
        always = ("input", "constant", "shape", "output")
        return [op for op in self.ops if op.kind not in allowed and op.kind not in always]

    def evaluate(self, op: GraphOp, env: dict[fx.Node, Any]) -> Any:
        """The value of ``op``'s node given the values of its inputs in ``env``."""
        node = op.node
        args = fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
        if node.op == "call_module":
            return self.module.get_submodule(node.target)(*args, **kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            owner, *rest = args
            return getattr(owner, node.target)(*rest, **kwargs)
        if node.op == "get_attr":
            return _fetch_attr(self.module, node.target)
        if node.op == "output":
            return args[0]
        raise ValueError(f"cannot evaluate a {node.op} node")


def trace_graph(model: nn.Module, example: torch.Tensor, *, where: str) -> ModelGraph:
    """Trace ``model`` with ``torch.fx`` and classify every node on ``example`` (a batch).

    The model must take one tensor argument, and any further parameters of its forward must
    have defaults: they are traced with them (the model's own error propagates when it cannot
    run on ``example``: callers check their inputs first). The returned graph module shares
    the model's parameters: callers that change parameters work on a copy of the model.

    Raises:
        InvalidInputError: when ``torch.fx`` cannot trace the model even with its custom
            modules kept as leaves.
    """
    gm = _trace(model, where)
    values = _run(gm, example)
    _check_output(gm, values, where)
    varying = _varying(gm, values)
    ops = [_classify(gm, node, values, varying) for node in gm.graph.nodes]
    return ModelGraph(gm, _name_sites(ops, model))


def site_name(name: str, call: int, calls: int) -> str:
    """The site of the ``call``-th (1-based) of ``calls`` calls of module ``name``."""
    return name if calls == 1 else f"{name}#{call}"


def _name_sites(ops: list[GraphOp], model: nn.Module) -> list[GraphOp]:
    """Give each op the site name hooks would give it: a called module's name (numbered when
    called several times); for the computation traced inside a user module without children
    (a custom activation such as ``x.clamp(min=0)``), that module's name on its activation
    node (or its last node), so graph-based and hook-based measures name it alike."""
    modules = dict(model.named_modules())
    owners = [_leaf_owner(op, modules) for op in ops]
    runs: list[tuple[str, list[int]]] = []  # (module name, op indices of one call)
    for index, owner in enumerate(owners):
        if owner is None:
            continue
        if runs and runs[-1][0] == owner and runs[-1][1][-1] == index - 1:
            runs[-1][1].append(index)
        else:
            runs.append((owner, [index]))
    names = {i: op.node.name for i, op in enumerate(ops)}
    calls = Counter(op.node.target for op in ops if op.node.op == "call_module")
    calls.update(owner for owner, _ in runs)
    seen: Counter = Counter()
    for index, op in enumerate(ops):
        if op.node.op == "call_module":
            seen[op.node.target] += 1
            names[index] = site_name(op.node.target, seen[op.node.target], calls[op.node.target])
    for owner, indices in runs:
        seen[owner] += 1
        active = [i for i in indices if ops[i].kind in ("activation", "maxpool")]
        names[active[0] if len(active) == 1 else indices[-1]] = site_name(
            owner, seen[owner], calls[owner])
    return [replace(op, site=names[i]) for i, op in enumerate(ops)]


def _leaf_owner(op: GraphOp, modules: dict[str, nn.Module]) -> Optional[str]:
    """The user module without children whose forward produced this function node, if any."""
    stack = op.node.meta.get("nn_module_stack") if op.node.op in (
        "call_function", "call_method") else None
    if not stack or op.kind in ("constant", "shape"):
        return None
    name = list(stack.values())[-1][0]
    module = modules.get(name)
    return name if module is not None and not any(True for _ in module.children()) else None


class FunctionSite(nn.Module):
    """A call of an activation function in a forward pass (``F.relu(x)``, ``torch.relu``,
    ``x.clamp(min=0)``, ``F.gelu``) made a module of the traced graph, so that hooks see it as
    they see ``nn.ReLU``: it calls the same function with the same arguments
    (:func:`expose_functions`). A gated one, ``x * f(x)`` (``x * torch.sigmoid(x)``, SiLU
    written out), is one site: its input is x, its output the product.

    Attributes:
        function: the function's name (``"relu"``, ``"clamp"``, ``"sigmoid"``).
        breakpoints: those of the traced op (None: not piecewise linear).
        homogeneous: whether the function is positively homogeneous.
        gated: whether the output is the input times the function.
    """

    is_activation = True

    def __init__(self, op: GraphOp, gated: bool) -> None:
        super().__init__()
        self.target, self.method = op.node.target, op.node.op == "call_method"
        self.function, self.gated = target_name(op.node), gated
        self.breakpoints = None if gated else op.breakpoints
        self.homogeneous = op.homogeneous and not gated

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.method:
            owner, *rest = args
            out = getattr(owner, self.target)(*rest, **kwargs)
        else:
            out = self.target(*args, **kwargs)
        return args[0] * out if self.gated else out

    def extra_repr(self) -> str:
        return f"x * {self.function}(x)" if self.gated else self.function


def hidden_activations(graph: ModelGraph, model: nn.Module) -> list[GraphOp]:
    """The activation ops no module hook sees: function calls (``F.relu``, ``torch.relu``,
    ``x.clamp(min=0)``, ...) in a forward pass outside any module without children."""
    modules = dict(model.named_modules())
    return [op for op in graph.ops if op.kind == "activation" and op.node.op != "call_module"
            and _leaf_owner(op, modules) is None]


def expose_functions(graph: ModelGraph, model: nn.Module) -> Optional[fx.GraphModule]:
    """The traced ``model`` with each of its :func:`hidden_activations` made a
    :class:`FunctionSite` named as the op's site (with a trailing "_" if an attribute already
    holds that name), so that hooks find every activation site the exact engine finds, under
    the same names; None when there is none. The graph's module is changed in place (its
    ops' nodes are not valid after); it shares the model's parameters, and its modules keep
    their names (modules traced through, blocks, are no longer called)."""
    hidden = hidden_activations(graph, model)
    if not hidden:
        return None
    gm = graph.module
    for op in hidden:
        name = op.site
        while hasattr(gm, name):  # a module of that name: a variant, "relu_"
            name += "_"
        gate = _gate(op.node)
        gm.add_submodule(name, FunctionSite(op, gated=gate is not None))
        last = gate or op.node
        with gm.graph.inserting_after(last):
            call = gm.graph.call_module(name, op.node.args, op.node.kwargs)
        last.replace_all_uses_with(call)
        for node in (gate, op.node):
            if node is not None:
                gm.graph.erase_node(node)
    gm.recompile()
    return gm


def _gate(node: fx.Node) -> Optional[fx.Node]:
    """The product ``x * f(x)`` when it is the only use of ``f(x)`` (``node``), else None."""
    users = list(node.users)
    source = node.args[0] if node.args else None
    if len(users) != 1 or target_name(users[0]) != "mul" or users[0].kwargs:
        return None
    gate = users[0]
    return gate if set(gate.args) == {node, source} and len(gate.args) == 2 else None


class _Tracer(fx.Tracer):
    """torch.nn's own modules stay leaves, as do the modules in ``leaves``; ``failed`` is the
    innermost module whose tracing raised (None when the error was in the root's forward)."""

    def __init__(self, leaves: set[str]) -> None:
        super().__init__()
        self.leaves = leaves
        self.failed: Optional[str] = None

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return qualname in self.leaves or (
            type(m).__module__.startswith("torch.nn") and not isinstance(m, nn.Sequential))

    def call_module(self, m, forward, args, kwargs):
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed is None:
                self.failed = self.path_of_module(m)
            raise


class UntraceableError(InvalidInputError):
    """:func:`trace_graph`'s refusal of a model ``torch.fx`` cannot trace; ``reason`` (the
    message's "got") says where tracing failed, for measures that can do without the graph."""

    reason: str = ""


def _untraceable(where: str, expected: str, got: str, fix: str) -> UntraceableError:
    error = invalid(where, expected, got, fix, error=UntraceableError)
    error.reason = got
    return error


MAX_TRACE_RETRIES = 50


def _trace(model: nn.Module, where: str) -> fx.GraphModule:
    """Trace through user modules; a module whose own code cannot be traced (control flow on
    a tensor's value or shape) is kept as a leaf, and tracing starts again. The forward's
    parameters after the input that have defaults (timm's ``attn_mask=None``,
    ``is_causal=False``) are traced with their defaults."""
    defaults = _defaults(model, where)
    leaves: set[str] = set()
    for _ in range(MAX_TRACE_RETRIES):
        tracer = _Tracer(leaves)
        try:
            graph = tracer.trace(model, concrete_args=defaults or None)
        except Exception as exc:  # fx raises many kinds of errors on untraceable code
            culprit = tracer.failed
            if culprit and culprit not in leaves:
                leaves.add(culprit)
                continue
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise _untraceable(where, "a model torch.fx can trace (no Python control flow on "
                               "tensor values in its forward())",
                               f"tracing failed in {culprit or 'the model'}'s forward(): "
                               f"{type(exc).__name__}: {first}",
                               "use the sampled method, or move data-dependent branches into "
                               "submodules") from None
        _drop_specialized(graph, where)
        return fx.GraphModule(model, graph)
    raise _untraceable(where, "a model torch.fx can trace", f"more than {MAX_TRACE_RETRIES} "
                       "modules that cannot be traced", "use the sampled method")


_ONE_TENSOR = ("a model whose forward() takes one tensor argument (further parameters with "
               "defaults are traced with their defaults)")
_WRAP = "wrap the model in a module whose forward(x) calls it with the other arguments"


def _defaults(model: nn.Module, where: str) -> dict[str, Any]:
    """The forward's parameters after the first that have defaults, with their defaults;
    refused when some parameter after the first has none (``*args`` and ``**kwargs`` are
    traced empty)."""
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): fx decides alone
        return {}
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    named = [p for p in parameters if p.kind not in variadic]
    required = [p.name for p in named[1:] if p.default is inspect.Parameter.empty]
    if not named or required:
        got = (f"forward() with the required arguments {required} after the input"
               if named else "forward() without a named input argument")
        raise invalid(where, _ONE_TENSOR, got, _WRAP)
    return {p.name: p.default for p in named[1:]}


def _drop_specialized(graph: fx.Graph, where: str) -> None:
    """Remove from ``graph`` every placeholder after the input (the parameters traced with
    their defaults, ``*args``, ``**kwargs``) and the checks fx adds on them; refused when the
    output depends on one."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    extra = set(placeholders[1:])
    for node in graph.nodes:
        if node not in extra and any(n in extra for n in node.all_input_nodes):
            extra.add(node)
    output = next(n for n in graph.nodes if n.op == "output")
    if output in extra:
        names = [n.target for n in placeholders[1:]]
        raise invalid(where, _ONE_TENSOR, f"a forward() whose output depends on the arguments "
                      f"{names} as traced", _WRAP)
    for node in reversed(list(graph.nodes)):
        if node in extra:
            graph.erase_node(node)


def _fetch_attr(module: nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _run(gm: fx.GraphModule, example: torch.Tensor) -> dict[fx.Node, Any]:
    """Every node's value on ``example`` (inputs of in-place modules are cloned first, so a
    recorded value is the one the node produced)."""
    graph = ModelGraph(gm, [GraphOp(node, "other", node.name) for node in gm.graph.nodes])
    env: dict[fx.Node, Any] = {}
    with torch.no_grad():
        for op in graph.ops:
            node = op.node
            if node.op == "placeholder":
                env[node] = example
                continue
            clone = {n: (v.clone() if isinstance(v, torch.Tensor) else v)
                     for n, v in env.items() if n in node.all_input_nodes}
            env[node] = graph.evaluate(op, {**env, **clone})
    return env


def _check_output(gm: fx.GraphModule, values: dict[fx.Node, Any], where: str) -> None:
    """Refuse a traced model returning None or a tensor without one real floating-point output
    per sample (:func:`~nngauge._internal.data.require_model_output`)."""
    output = next(node for node in gm.graph.nodes if node.op == "output")
    require_model_output(fx.node.map_arg(output.args[0], lambda node: values[node]), where)


def _varying(gm: fx.GraphModule, values: dict[fx.Node, Any]) -> set[fx.Node]:
    """Nodes whose value depends on the input."""
    varying: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or any(n in varying for n in node.all_input_nodes):
            varying.add(node)
    return varying


def _is_tensors(value: Any) -> bool:
    """A tensor or a (nested) tuple/list of tensors."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(_is_tensors(v) for v in value)


def _sample_shape(value: Any) -> Optional[tuple[int, ...]]:
    return tuple(value.shape[1:]) if isinstance(value, torch.Tensor) and value.dim() else None


def _classify(gm: fx.GraphModule, node: fx.Node, values: dict, varying: set) -> GraphOp:
    value = values.get(node)
    shape = _sample_shape(value)
    if node.op == "placeholder":
        return GraphOp(node, "input", "input", shape=shape)
    if node.op == "output":
        return GraphOp(node, "output", "output", shape=_sample_shape(_first(value)))
    if node not in varying:
        return GraphOp(node, "constant", node.name, shape=shape)
    if not _is_tensors(value):
        return GraphOp(node, "shape", node.name)
    inputs = [n for n in _operands(node) if n in varying and _is_tensors(values.get(n))]
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        op = _module_op(node, module, values.get(node.args[0]) if node.args else None)
    else:
        op = _function_op(node, inputs, values)
    return replace(op, shape=shape)


def _operands(node: fx.Node) -> list[fx.Node]:
    """The node's input nodes with repetitions (``x * x`` has two input-dependent operands,
    where ``all_input_nodes`` lists x once)."""
    found: list[fx.Node] = []
    fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(n))
    return found


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) and value else value


# --------------------------------------------------------------------------- modules by type

_AFFINE_MODULES = (
    nn.Linear, nn.modules.conv._ConvNd, *RESHAPES,
    nn.modules.pooling._AvgPoolNd, nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.padding._ConstantPadNd, nn.modules.padding._ReflectionPadNd,
    nn.modules.padding._ReplicationPadNd, nn.ZeroPad2d,
)
_MAXPOOL_MODULES = (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)
_HOMOGENEOUS_MODULES = (nn.ReLU, nn.LeakyReLU, nn.PReLU)


def module_breakpoints(module: nn.Module) -> Optional[tuple[float, ...]]:
    """Breakpoints of a piecewise-linear activation module (None when it is not one)."""
    if isinstance(module, (nn.ReLU, nn.LeakyReLU, nn.PReLU)):
        return (0.0,)
    if isinstance(module, nn.ReLU6):
        return (0.0, 6.0)
    if isinstance(module, nn.Hardtanh):
        return (float(module.min_val), float(module.max_val))
    if isinstance(module, nn.Hardsigmoid):
        return (-3.0, 3.0)
    if isinstance(module, ActivationModule) and module.activation.piecewise_linear:
        return tuple(float(c) for c in module.activation.breakpoints)
    if isinstance(module, FunctionSite):
        return module.breakpoints
    return None


def module_homogeneous(module: nn.Module) -> bool:
    """Whether an activation module is positively homogeneous: f(a x) = a f(x), a > 0."""
    return isinstance(module, _HOMOGENEOUS_MODULES) or (
        isinstance(module, FunctionSite) and module.homogeneous) or (
        isinstance(module, ActivationModule)
        and module.activation.name in ("relu", "leaky_relu", "identity", "abs"))


def _module_op(node: fx.Node, module: nn.Module, sample: Any) -> GraphOp:
    label = f"{node.target} ({type(module).__name__})"
    if not _torch_class(module):  # a subclass may do more than its base (BatchNormAct2d)
        return _behaviour_op(node, module, sample, label)
    if isinstance(module, _AFFINE_MODULES):
        return GraphOp(node, "affine", label, module)
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return (GraphOp(node, "other", label, module, reason="dropout in train mode")
                if module.training else GraphOp(node, "affine", label, module))
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        if module.training or module.running_mean is None:
            return GraphOp(node, "other", label, module,
                           reason="batchnorm using batch statistics (train mode)")
        return GraphOp(node, "affine", label, module)
    if isinstance(module, _MAXPOOL_MODULES):
        return GraphOp(node, "maxpool", label, module)
    breakpoints = module_breakpoints(module)
    if breakpoints is not None or isinstance(module, ACTIVATIONS):
        return GraphOp(node, "activation", label, module, breakpoints=breakpoints,
                       homogeneous=module_homogeneous(module))
    return _behaviour_op(node, module, sample, label)


def _torch_class(module: nn.Module) -> bool:
    """A class of torch itself (or nngauge's activation wrapper), not a user's subclass."""
    return (type(module).__module__.startswith("torch.") or type(module) is ActivationModule)


def _behaviour_op(node: fx.Node, module: nn.Module, sample: Any, label: str) -> GraphOp:
    behaviour = classify_behaviour(module, sample)
    if behaviour == "activation":
        return GraphOp(node, "activation", label, module)
    if behaviour in ("affine", "elementwise_affine"):
        return GraphOp(node, "affine", label, module)
    return GraphOp(node, "other", label, module,
                   reason=f"{type(module).__name__} is neither affine nor elementwise")


# ------------------------------------------------------------------------- functions by name

_AFFINE_ANY = {  # affine in any number of input-dependent tensor operands
    "add", "sub", "neg", "pos", "cat", "concat", "stack", "flatten", "view", "reshape",
    "permute", "transpose", "contiguous", "squeeze", "unsqueeze", "expand", "expand_as",
    "repeat", "getitem", "chunk", "split", "unbind", "t", "mean", "sum", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "pad", "narrow", "select", "roll", "flip", "movedim", "clone",
    "to", "float", "double", "type_as", "pixel_shuffle", "pixel_unshuffle", "__getitem__",
    "iadd", "isub", "add_", "sub_",
}
_AFFINE_ONE = {  # affine when exactly one operand depends on the input
    "mul", "matmul", "mm", "bmm", "einsum", "linear", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "addmm", "imul", "mul_",
    "baddbmm",
}
_AFFINE_NUMERATOR = {"truediv", "div", "itruediv", "div_"}
_PIECEWISE_FUNCTIONS = {"relu": (0.0,), "relu_": (0.0,), "leaky_relu": (0.0,),
                        "leaky_relu_": (0.0,), "abs": (0.0,), "relu6": (0.0, 6.0),
                        "hardsigmoid": (-3.0, 3.0)}
_HOMOGENEOUS_FUNCTIONS = {"relu", "relu_", "leaky_relu", "leaky_relu_", "abs", "prelu"}
_SMOOTH_FUNCTIONS = {
    "tanh", "tanh_", "sigmoid", "sigmoid_", "gelu", "silu", "silu_", "mish", "elu", "elu_",
    "selu", "selu_", "celu", "softplus", "softsign", "hardswish", "logsigmoid",
    "tanhshrink", "erf", "exp", "sin", "cos", "square", "sign",
}
_MAXPOOL_FUNCTIONS = {"max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d",
                      "adaptive_max_pool2d", "adaptive_max_pool3d", "max_pool1d_with_indices",
                      "max_pool2d_with_indices", "max_pool3d_with_indices"}


def target_name(node: fx.Node) -> str:
    """The bare name of a call's target: ``"add"`` for ``operator.add``, ``torch.add`` and
    ``Tensor.add``; ``"relu"`` for ``F.relu``."""
    target = node.target
    if isinstance(target, str):
        return target
    dispatched = {F.max_pool1d: "max_pool1d", F.max_pool2d: "max_pool2d",
                  F.max_pool3d: "max_pool3d", F.adaptive_max_pool1d: "adaptive_max_pool1d",
                  F.adaptive_max_pool2d: "adaptive_max_pool2d",
                  F.adaptive_max_pool3d: "adaptive_max_pool3d"}  # boolean_dispatch wrappers
    return dispatched.get(target) or getattr(target, "__name__", repr(target))


def _function_op(node: fx.Node, inputs: list[fx.Node], values: dict) -> GraphOp:
    name = target_name(node)
    label = f"{node.name} ({name})"
    n_varying = len(inputs)
    if name in _AFFINE_ANY:
        return GraphOp(node, "affine", label)
    if name in _AFFINE_ONE:
        if n_varying == 1:
            return GraphOp(node, "affine", label)
        return GraphOp(node, "other", label,
                       reason=f"{name} of {n_varying} input-dependent tensors (not affine)")
    if name in _AFFINE_NUMERATOR:
        if n_varying == 1 and node.args and node.args[0] in inputs:
            return GraphOp(node, "affine", label)
        return GraphOp(node, "other", label, reason=f"{name} by an input-dependent tensor")
    if name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"):
        training = _argument(node, "training", 2, True)
        return (GraphOp(node, "other", label, reason="dropout in train mode") if training
                else GraphOp(node, "affine", label))
    if name == "batch_norm":
        training = _argument(node, "training", 5, False)
        return (GraphOp(node, "other", label,
                        reason="batchnorm using batch statistics (train mode)") if training
                else GraphOp(node, "affine", label))
    if name in _MAXPOOL_FUNCTIONS:
        return GraphOp(node, "maxpool", label)
    if name in _PIECEWISE_FUNCTIONS:
        return GraphOp(node, "activation", label, breakpoints=_PIECEWISE_FUNCTIONS[name],
                       homogeneous=name in _HOMOGENEOUS_FUNCTIONS)
    if name in ("hardtanh", "hardtanh_"):
        low, high = _argument(node, "min_val", 1, -1.0), _argument(node, "max_val", 2, 1.0)
        return GraphOp(node, "activation", label, breakpoints=(float(low), float(high)))
    if name in ("clamp", "clip", "clamp_", "clamp_min", "clamp_max"):
        return _clamp_op(node, label, name)
    if name == "prelu":
        return GraphOp(node, "activation", label, breakpoints=(0.0,), homogeneous=True)
    if name in _SMOOTH_FUNCTIONS:
        return GraphOp(node, "activation", label)
    return GraphOp(node, "other", label, reason=f"{name} is not among the affine, activation "
                   "and max-pooling operations")


def _argument(node: fx.Node, key: str, position: int, default: Any) -> Any:
    if key in node.kwargs:
        return node.kwargs[key]
    return node.args[position] if len(node.args) > position else default


def _clamp_op(node: fx.Node, label: str, name: str) -> GraphOp:
    if name == "clamp_min":
        low, high = _argument(node, "min", 1, None), None
    elif name == "clamp_max":
        low, high = None, _argument(node, "max", 1, None)
    else:
        low, high = _argument(node, "min", 1, None), _argument(node, "max", 2, None)
    bounds = [b for b in (low, high) if b is not None]
    if any(isinstance(b, fx.Node) for b in bounds) or not bounds:
        return GraphOp(node, "other", label, reason="clamp with tensor or missing bounds")
    return GraphOp(node, "activation", label, breakpoints=tuple(float(b) for b in bounds),
                   homogeneous=low == 0 and high is None)


__all__ = ["FunctionSite", "GraphOp", "ModelGraph", "OpKind", "UntraceableError",
           "expose_functions", "hidden_activations", "module_breakpoints", "module_homogeneous",
           "site_name", "target_name", "trace_graph"]
