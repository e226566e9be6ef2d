"""Skimming: replace a block of layers by its linearization (shrinkage paper section 4.2).

When every input reaching a block of middle layers lies in a small region (their pairwise
correlations close to 1), the block acts almost linearly on them and can be replaced by one
affine map, its first-order Taylor expansion around the mean input m to the block:

    g(h) ~ g(m) + J_g(m) (h - m).

:func:`skim` builds that network (a copy: the given model is never changed) and reports how
far its outputs move on the data, with the smallest correlation of the block's inputs, the
quantity the paper uses to argue the block is redundant.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Sequence, Union

import torch
from torch import nn

from nngauge._constraints import Check, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter, batch_coupled
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import check_min_samples
from nngauge._results import Result
from nngauge._vocabulary import legacy_layout
from nngauge.errors import invalid
from nngauge.measures.propagation._correlations import cosine_matrix


class LinearizedBlock(nn.Module):
    """The affine map h -> g(m) + J_g(m) (h - m) on flattened samples, reshaped back.

    Further arguments (a model that calls its blocks as timm's do, ``block(x, attn_mask,
    is_causal)``) are accepted and ignored: :func:`skim` linearizes a block only where the
    model calls it with their defaults."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, out_shape: tuple[int, ...],
                 names: tuple[str, ...]) -> None:
        super().__init__()
        self.linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype,
                                device=weight.device)
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            self.linear.bias.copy_(bias)
        self.out_shape = out_shape
        self.names = names

    def forward(self, h: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.linear(h.reshape(len(h), -1)).reshape(len(h), *self.out_shape)

    def extra_repr(self) -> str:
        return f"linearizes={list(self.names)}"


@dataclass(frozen=True)
class SkimResult(Result):
    """A skimmed network and how much it differs from the original on the data.

    Attributes:
        model: the new network (the original is untouched), trainable as the original is
            (its parameters require grad where the original's do; the linearization's do);
            not in ``to_dict()``.
        block: the replaced children's names.
        deviation: relative output deviation sqrt(E||f_s(x) - f(x)||^2) / sqrt(E||f(x) - E f||^2).
        absolute_deviation: sqrt(E ||f_s(x) - f(x)||^2).
        min_input_correlation: the smallest pairwise correlation of the block's inputs.
        parameters_removed: parameters of the block minus those of its linearization.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _summary = ("deviation", "min_input_correlation")

    model: nn.Module = field(repr=False, compare=False)
    block: tuple[str, ...]
    deviation: float
    absolute_deviation: float
    min_input_correlation: float
    parameters_removed: int
    mode: MeasurementMode


BLOCK = Check(lambda v: isinstance(v, str) or (
    isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(n, str) for n in v)),
    "the block's first and last module names (start, end), or one module name",
    (None, 3, ("0",), ("0", "1", "2")))
"""The ``layers`` of :func:`skim`: the block it linearizes."""


def _start_end_first(args: tuple, kwargs: dict) -> bool:
    """The old layout ``skim(model, start, end, data)``: a module name where the data goes
    (data is never a string), or ``start=`` / ``end=``."""
    return (len(args) >= 2 and isinstance(args[1], str)) or "start" in kwargs or "end" in kwargs


def _start_end_as_layers(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``skim(model, start, end, data, ...)`` as ``skim(model, data, layers=(start, end), ...)``."""
    names = ("model", "start", "end", "data")
    old = dict(zip(names, args))
    rest = {k: v for k, v in kwargs.items() if k not in names}
    old.update({k: v for k, v in kwargs.items() if k in names})
    missing = [n for n in names if n not in old]
    if missing:
        raise TypeError(f"skim() missing {', '.join(missing)} of the old call "
                        "skim(model, start, end, data)")
    if "layers" in rest:
        raise invalid("skim()", "the block once", "start and end with layers=",
                      "call skim(model, data, layers=(start, end))")
    return (old["model"], old["data"]), {**rest, "layers": (old["start"], old["end"])}


@legacy_layout("skim(model, start, end, data)", "skim(model, data, *, layers=(start, end))",
               matches=_start_end_first, translate=_start_end_as_layers)
@constrained(layers=BLOCK)
@model_options("output", "norm_mode")
def skim(model: nn.Module, data: Any, *, layers: Union[str, Sequence[str]],
         options: ModelOptions) -> SkimResult:
    """Replace a block of children of an ``nn.Sequential`` by their linearization around the
    mean input to the block (shrinkage paper section 4.2).

    Args:
        model: a module containing an ``nn.Sequential`` (the model itself or nested) whose
            children ``start`` to ``end`` (inclusive) form the block.
        data: inputs (any supported form); all of them give the mean input and the deviation.
        layers: the block: ``(start, end)``, its first and last layers, module names as in
            ``model.named_modules()`` (e.g. ``("3", "7")``, ``("body.3", "body.7")``),
            children of the same ``nn.Sequential``; one name for a block of one layer.
        output: which output to compare for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics ("eval": running, "frozen": computed on the data,
            then fixed; "train" inside the block is refused). The skimmed copy keeps the
            statistics and modes it was measured with.

    Returns:
        :class:`SkimResult`.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(3)])
        >>> skim(net, torch.randn(20, 4), layers=("0", "1")).deviation < 1e-5  # affine: exact
        True
    """
    where = "skim()"
    start, end = (layers, layers) if isinstance(layers, str) else layers
    adapter = ModelAdapter(model, options, where=where)
    work = adapter.model
    parent, keys = _block(work, start, end, where)
    block = nn.Sequential(*[parent[i] for i in keys])
    with adapter.active(data=data), torch.no_grad():
        if batch_coupled(block):
            raise invalid(where, "a block that treats samples independently",
                          "batchnorm using batch statistics (train mode) inside the block",
                          "pass norm_mode='eval' (running statistics) or 'frozen' (statistics "
                          "of the data)")
        x = adapter.measured(adapter.collect(data).inputs)
        check_min_samples(len(x), 2, where, "the spread of the outputs the deviation is "
                          "relative to")
        captured: dict = {}
        handles = [parent[i].register_forward_pre_hook(partial(_capture, captured, i),
                                                       with_kwargs=True) for i in keys]
        try:
            original = adapter(x)
        finally:
            for handle in handles:
                handle.remove()
        h = captured[keys[0]]
        _require_defaults(work, parent, keys, captured, where)
        mean = h.mean(0, keepdim=True)
        with torch.enable_grad():
            jac = torch.autograd.functional.jacobian(block, mean)  # (1, *out, 1, *in)
        out_at_mean = block(mean)
        weight = jac.reshape(out_at_mean[0].numel(), mean[0].numel())
        bias = out_at_mean.reshape(-1) - weight @ mean.reshape(-1)
        names = tuple(f"{_prefix(work, parent)}{list(parent._modules)[i]}" for i in keys)
        replacement = LinearizedBlock(weight, bias, tuple(out_at_mean.shape[1:]), names)
        copies: dict = {}
        skimmed = copy.deepcopy(work, copies)
        _replace(skimmed, parent, work, keys, replacement)
        new = adapter.select(skimmed(x))
    for param in work.parameters():  # the flags the measurement cleared are back on work
        copies[id(param)].requires_grad_(param.requires_grad)
    diff = (new - original).reshape(len(x), -1).to(torch.float64)
    spread = (original - original.mean(0)).reshape(len(x), -1).to(torch.float64)
    absolute = math.sqrt(float(diff.pow(2).sum(1).mean()))
    scale = math.sqrt(float(spread.pow(2).sum(1).mean()))
    cos = cosine_matrix(h)
    off = cos[~torch.eye(len(cos), dtype=torch.bool)]
    removed = sum(p.numel() for p in block.parameters()) - sum(
        p.numel() for p in replacement.parameters())
    return SkimResult(model=skimmed, block=names,
                      deviation=absolute / scale if scale > 0 else math.inf,
                      absolute_deviation=absolute,
                      min_input_correlation=float(off.min()) if off.numel() else 1.0,
                      parameters_removed=removed, mode=adapter.mode)


def _capture(captured: dict, index: int, module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook: the first input of block child ``index`` (cloned), and under
    ``("other", index)`` the names of its further arguments that differ from their defaults."""
    if index in captured:
        return
    captured[index] = args[0].clone()
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        captured["other", index] = ["(arguments its forward() does not declare)"]
        return
    parameters = list(bound.signature.parameters.values())[1:]
    captured["other", index] = [
        p.name for p in parameters if p.name in bound.arguments and not _is_default(
            bound.arguments[p.name], p.default)]


def _is_default(value: Any, default: Any) -> bool:
    """Whether an argument is its parameter's default (None, a bool, a number, a string)."""
    return value is default or (type(value) is type(default) and isinstance(
        value, (bool, int, float, str)) and value == default)


def _require_defaults(model: nn.Module, parent: nn.Module, keys: list, captured: dict,
                      where: str) -> None:
    """Refuse a block the model calls with more than its input at non-default values: its
    linearization is of the block called on its input alone."""
    prefix = _prefix(model, parent)
    names = list(parent._modules)
    other = {f"{prefix}{names[i]}": captured.get(("other", i), []) for i in keys}
    other = {name: args for name, args in other.items() if args}
    if other:
        raise invalid(where, "a block the model calls with its input alone (further arguments "
                      "at their defaults)", "; ".join(f"{name} called with {args}" for name, args
                                                      in other.items()),
                      "skim a block the model calls as block(x)")


def _block(model: nn.Module, start: str, end: str, where: str):
    modules = dict(model.named_modules())
    for name in (start, end):
        if not isinstance(name, str) or not name or name not in modules:
            raise invalid(where, "layers=(start, end), names from model.named_modules()",
                          repr(name), f"use names such as {[n for n in modules if n][:12]}")
    parent_name, _, first = start.rpartition(".")
    end_parent, _, last = end.rpartition(".")
    parent = modules[parent_name] if parent_name else model
    if parent_name != end_parent or not isinstance(parent, nn.Sequential):
        fix = ("skim model.to_sequential(), the same network as an nn.Sequential"
               if hasattr(model, "to_sequential") else "pick two children of one nn.Sequential")
        raise invalid(where, "start and end children of the same nn.Sequential",
                      f"{start!r} in {type(parent).__name__} {parent_name!r} and {end!r} in "
                      f"{end_parent!r}", fix)
    order = list(parent._modules)
    i, j = order.index(first), order.index(last)
    if j < i:
        raise invalid(where, "start before end", f"start={start!r} after end={end!r}",
                      "swap them")
    return parent, list(range(i, j + 1))


def _prefix(model: nn.Module, parent: nn.Module) -> str:
    for name, module in model.named_modules():
        if module is parent:
            return f"{name}." if name else ""
    return ""


def _replace(skimmed: nn.Module, parent: nn.Module, model: nn.Module, keys, replacement) -> None:
    """Swap the block for ``replacement`` inside the copy's matching Sequential."""
    path = _prefix(model, parent).rstrip(".")
    target = skimmed.get_submodule(path) if path else skimmed
    kept = [m for i, m in enumerate(target) if i not in keys]
    kept.insert(keys[0], replacement)
    new = nn.Sequential(*kept)
    if path:
        holder, _, attr = path.rpartition(".")
        setattr(skimmed.get_submodule(holder) if holder else skimmed, attr, new)
    else:
        target._modules.clear()
        for index, module in enumerate(new):
            target.add_module(str(index), module)
