"""The empirical neural tangent kernel of a layer, at a cost that scales to real networks.

For a layer with outputs h(x) in R^U and parameters theta, the empirical NTK summed over the
layer's units is

    Theta_ij = (1 / U) sum_c <d h_c(x_i) / d theta, d h_c(x_j) / d theta>.

With a probe u in R^U, g_i(u) = d <u, h(x_i)> / d theta = sum_c u_c d h_c(x_i) / d theta, so
Theta = (1 / U) sum_c G(e_c) G(e_c)^T over the unit basis (exact), and for Gaussian probes
u ~ N(0, I_U), E[G(u) G(u)^T] = sum_c G(e_c) G(e_c)^T: the average over k probes is an unbiased
estimate whose cost does not grow with U. Layers with at most ``exact_units`` units are exact;
wider ones (convolutional feature maps, vocabularies) use ``n_probes`` probes, and the result
says which.

G(u) (n x P) holds per-sample parameter gradients. For networks whose samples do not interact
one forward pass and one backward pass per chunk of probes give them all: ``torch.func.vmap``
over samples of ``vjp``, vmapped over the probes; the weights of Linear and convolution layers
(called once, their weight used by nothing else) are not differentiated there: their per-sample
gradients, sum over positions t of delta_t cols_t^T, come from the layer's output gradient delta
(a zero added to the output is a primal of the ``vjp``) and its input patches cols (recorded in
one forward pass of the batch), which costs batched matrix products instead of the grouped
convolutions a vmapped weight gradient costs. When samples interact (batchnorm with batch
statistics), G(u) comes from batched backward passes through the whole batch
(``is_grads_batched``), one probe at a time; where ``vmap`` fails (a RuntimeError: no batching
rule for an operation, data-dependent control flow), from a loop over samples, said in a note;
any other error propagates, and so does one the loop meets again. n x P gradient entries are
held at once (the probes are chunked to keep them there); when that exceeds ``max_elements`` the
kernel is computed on fewer samples, and said so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vjp, vmap
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

from nngauge.errors import InvalidInputError

MAX_GRADIENT_ELEMENTS = 2**27
"""Per-sample gradient entries (samples x parameters) held at once (512 MiB in float32)."""
EXACT_UNITS = 16
"""Layers with at most this many units get the exact sum over units."""
MAX_PAIR_ENTRIES = 2**24
"""Entries of the (n T) x (n T) position-pair matrices a layer's weight Gram may form (64 MiB
in float32)."""


@dataclass(frozen=True)
class NTKPlan:
    """How an empirical NTK is computed: samples used, exact or probed, and why."""

    n_samples: int
    units: int
    n_parameters: int
    probes: Optional[int]
    description: str


def plan_ntk(n_samples: int, units: int, n_parameters: int, *, n_probes: int,
             per_sample: bool = True, exact_units: int = EXACT_UNITS,
             max_elements: int = MAX_GRADIENT_ELEMENTS) -> NTKPlan:
    """The samples and probes an NTK of ``units`` outputs over ``n_parameters`` can afford,
    and how its gradients are computed (``per_sample``: samples independent)."""
    fit = max(2, max_elements // max(n_parameters, 1))
    n = min(n_samples, fit)
    probes = None if units <= exact_units else n_probes
    how = (f"exact sum over the {units} units" if probes is None
           else f"{probes} Gaussian output probes over {units} units (unbiased)")
    how += ("; per-sample gradients by vmap over samples (Linear/convolution weights from "
            "their input patches)" if per_sample else
            "; per-sample gradients by batched backward passes (samples interact)")
    if n < n_samples:
        how += (f"; {n} of {n_samples} samples (n x parameters = {n} x {n_parameters} gradient "
                f"entries fit the budget of {max_elements})")
    return NTKPlan(n, units, n_parameters, probes, how)


def empirical_ntk(value: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], model: nn.Module,
                  x: torch.Tensor, raw: torch.Tensor, plan: NTKPlan, *, per_sample: bool,
                  generator: Optional[torch.Generator],
                  note: Callable[[str], None]) -> np.ndarray:
    """Theta (n x n, float64) of the layer ``value(x, raw)`` -> (b, ...) of ``model``.

    Args:
        value: runs the model on measured inputs x (and raw inputs) and returns the layer.
        model: its parameters that require grad are theta.
        x, raw: the first ``plan.n_samples`` are used.
        per_sample: whether samples are independent (per-sample gradients allowed).
        generator: for the Gaussian probes.
        note: receives a sentence when a fallback is taken.
    """
    x, raw = x[:plan.n_samples], raw[:plan.n_samples]
    call = _Call(model, value)
    params = {f"model.{n}": p.detach() for n, p in model.named_parameters() if p.requires_grad}
    units = plan.units
    probes = (torch.eye(units, dtype=torch.float64) if plan.probes is None else
              torch.randn(plan.probes, units, generator=generator, dtype=torch.float64))
    probes = probes.to(dtype=x.dtype, device=x.device)
    theta = None
    if per_sample:
        try:
            theta = _vmapped_gram(call, params, x, raw, probes)
        except (RuntimeError, InvalidInputError) as exc:
            limit = _batching_limit(exc)
            if limit is None:
                raise
            note(f"NTK gradients fell back to a loop over samples ({_first_line(limit)})")
    if theta is None:
        theta = _probe_gram(call, params, x, raw, probes, batched=not per_sample, note=note)
    return (theta / (units * len(probes) if plan.probes is not None else units)).numpy()


def _batching_limit(exc: Exception) -> Optional[RuntimeError]:
    """The RuntimeError that ``exc`` is or is raised from (the adapter reports a failing
    forward pass as an InvalidInputError), else None: what ``vmap`` or a batched backward
    raises on an operation without a batching rule (no batching rule, data-dependent control
    flow, an in-place write into an unbatched tensor). The loop over samples then runs the same
    computation unbatched, and raises that error again if it was not the batching's."""
    while exc is not None and not isinstance(exc, RuntimeError):
        exc = exc.__cause__
    return exc


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _probe_gram(call: _Call, params: dict, x, raw, probes: torch.Tensor, *, batched: bool,
                note: Callable[[str], None]) -> torch.Tensor:
    """sum over probes u of G(u) G(u)^T, G(u) from batched backward passes through the whole
    batch (``batched``: samples interact), or, where those have no batching rule, a loop."""
    compute = _batch_gradients if batched else _loop_gradients
    theta = torch.zeros(len(x), len(x), dtype=torch.float64)
    for u in probes:
        try:
            g = compute(call, params, x, raw, u)
        except (RuntimeError, InvalidInputError) as exc:
            limit = None if compute is _loop_gradients else _batching_limit(exc)
            if limit is None:
                raise
            note(f"NTK gradients fell back to a loop over samples ({_first_line(limit)})")
            compute = _loop_gradients
            g = compute(call, params, x, raw, u)
        theta += (g @ g.T).to(torch.float64).cpu()
    return theta


_UNFOLDABLE = {nn.Linear.forward: 0, nn.Conv1d.forward: 1, nn.Conv2d.forward: 2}
"""Modules whose weight gradient is read from their input and output gradient, by forward
method (subclasses that keep it), with their spatial dimensions."""


@dataclass(frozen=True)
class _Unfolded:
    """A Linear or convolution layer called once, whose weight is used by nothing else:
    the per-sample gradient of its weight W (out x in / groups x kernel) is
    sum_t delta_t cols_t^T, delta the gradient of its output at position t and cols_t the
    input patch that position reads."""

    module: nn.Module
    cols: torch.Tensor  # (n, groups, in / groups * kernel, T)
    out_shape: tuple  # one sample's output
    groups: int

    def gram(self, delta: torch.Tensor) -> torch.Tensor:
        """sum over probes of the Gram matrix of per-sample weight gradients; delta is the
        output gradient (n, probes, *out_shape).

        Two ways to the same numbers, the cheaper taken: the gradients themselves (n x probes x
        out x in) and their Gram matrix, or, when the layer has few positions T (deep
        convolutions, the last Linear), sum over positions t, s of
        (sum over probes and outputs of delta_it delta_js) (cols_it . cols_js): products of
        (n T) x (n T) matrices, the gradients never formed."""
        n, k = delta.shape[:2]
        if self.module.forward.__func__ is nn.Linear.forward:
            delta = delta.reshape(n, k, -1, delta.shape[-1]).transpose(2, 3)
        groups, per_group, t = self.groups, self.cols.shape[2], self.cols.shape[-1]
        delta = delta.reshape(n, k, groups, -1, t)
        outs, pairs = delta.shape[3], (n * t) ** 2
        if (pairs * (k * outs + per_group) < n * k * outs * per_group * (t + n)
                and groups * pairs <= MAX_PAIR_ENTRIES):
            d = delta.permute(2, 0, 4, 1, 3).reshape(groups, n * t, k * outs)
            a = self.cols.permute(1, 0, 3, 2).reshape(groups, n * t, per_group)
            both = (d @ d.transpose(1, 2)) * (a @ a.transpose(1, 2))
            return both.reshape(groups, n, t, n, t).sum((0, 2, 4))
        g = torch.einsum("nkgot,ngqt->nkgoq", delta, self.cols).reshape(n, -1)
        return g @ g.T


def _unfolded_weights(call: _Call, params: dict, x, raw) -> dict[str, _Unfolded]:
    """The weights of ``params`` that :class:`_Unfolded` can handle, by key, from one forward
    pass of the batch that records the inputs of candidate layers and counts every use of
    their weights (a weight also used elsewhere, e.g. tied to an embedding, is left out)."""
    candidates = {}
    for name, module in call.named_modules():
        dims = _UNFOLDABLE.get(getattr(type(module), "forward", None))
        if (dims is None or f"{name}.weight" not in params
                or (dims and (module.padding_mode != "zeros" or isinstance(module.padding, str)))):
            continue
        candidates[f"{name}.weight"] = module
    if not candidates:
        return {}
    inputs: dict[str, list] = {key: [] for key in candidates}
    handles = [module.register_forward_hook(
        lambda mod, args, out, key=key: inputs[key].append((args[0], out.shape)))
        for key, module in candidates.items()]
    uses = _WeightUses({id(module.weight): key for key, module in candidates.items()})
    try:
        with torch.no_grad(), uses:
            call(x, raw)
    finally:
        for handle in handles:
            handle.remove()
    found = {}
    for key, module in candidates.items():
        if len(inputs[key]) != 1 or uses.count.get(key, 0) != 1:
            continue
        a, out_shape = inputs[key][0]
        found[key] = _Unfolded(module, _columns(module, a), tuple(out_shape[1:]),
                               getattr(module, "groups", 1))
    return found


def _columns(module: nn.Module, a: torch.Tensor) -> torch.Tensor:
    """The input patches (n, groups, in / groups * kernel, T) a layer's weight multiplies."""
    n = len(a)
    if isinstance(module, nn.Linear):
        return a.reshape(n, -1, a.shape[-1]).transpose(1, 2).unsqueeze(1)
    if isinstance(module, nn.Conv1d):
        a = a.unsqueeze(2)
        cols = F.unfold(a, (1, *module.kernel_size), dilation=(1, *module.dilation),
                        padding=(0, *module.padding), stride=(1, *module.stride))
    else:
        cols = F.unfold(a, module.kernel_size, dilation=module.dilation,
                        padding=module.padding, stride=module.stride)
    return cols.reshape(n, module.groups, -1, cols.shape[-1])


class _WeightUses(TorchFunctionMode):
    """Counts the torch operations (not attribute reads) that take each watched tensor."""

    def __init__(self, watched: dict[int, str]) -> None:
        super().__init__()
        self.watched = watched
        self.count: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") != "__get__":
            for arg in tree_leaves((args, kwargs)):
                key = self.watched.get(id(arg))
                if key is not None:
                    self.count[key] = self.count.get(key, 0) + 1
        return func(*args, **kwargs)


def _vmapped_gram(call: _Call, params: dict, x, raw, probes: torch.Tensor,
                  max_elements: int = MAX_GRADIENT_ELEMENTS) -> torch.Tensor:
    """sum over probes u of G(u) G(u)^T for independent samples, in one forward and one
    vmapped backward pass per chunk of probes.

    ``torch.func.vmap`` over samples of ``vjp``, itself vmapped over the probes, gives the
    per-sample gradients of every parameter except the weights of :func:`_unfolded_weights`:
    for those it gives the gradient of the layer's output (a zero added to it is a primal of
    the ``vjp``), and :meth:`_Unfolded.gram` forms their weights' Gram matrix from it and the
    layer's input patches; the same numbers as per-sample weight gradients, without the grouped
    convolutions a vmapped weight gradient costs."""
    unfolded = _unfolded_weights(call, params, x, raw)
    direct = {key: p for key, p in params.items() if key not in unfolded}
    zeros = {key: torch.zeros(len(x), *u.out_shape, dtype=x.dtype, device=x.device)
             for key, u in unfolded.items()}
    current: dict[str, torch.Tensor] = {}
    handles = [u.module.register_forward_hook(
        lambda mod, args, out, key=key: out + current[key], prepend=True)
        for key, u in unfolded.items()]
    entries = sum(p.numel() for p in direct.values()) + sum(
        math.prod(u.out_shape) for u in unfolded.values())
    chunk = max(1, min(len(probes), max_elements // max(len(x) * entries, 1)))

    def sample(xi, ri, ei, us):
        def layer(p, e):
            current.update(e)
            return functional_call(call, p, (xi.unsqueeze(0), ri.unsqueeze(0))).reshape(-1)

        _, pullback = vjp(layer, direct, ei)
        return vmap(pullback)(us)

    theta = torch.zeros(len(x), len(x), dtype=torch.float64, device=x.device)
    try:
        for us in probes.split(chunk):
            grads, deltas = vmap(sample, in_dims=(0, 0, 0, None))(x, raw, zeros, us)
            grads, deltas = tree_map(torch.Tensor.detach, (grads, deltas))
            for g in grads.values():
                flat = g.reshape(len(x), -1)
                theta += (flat @ flat.T).to(torch.float64)
            for key, u in unfolded.items():
                theta += u.gram(deltas[key]).to(torch.float64)
    finally:
        for handle in handles:
            handle.remove()
    return theta.cpu()


class _Call(nn.Module):
    """``value`` as a module whose child is the model, so that ``functional_call`` can run it
    with other parameters (keys ``"model.<name>"``)."""

    def __init__(self, model: nn.Module, value: Callable) -> None:
        super().__init__()
        self.model = model
        self.value = value

    def forward(self, x: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        return self.value(x, raw)


def _flat(grads: dict) -> torch.Tensor:
    return torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1)


def _live(call: _Call, params: dict) -> list[torch.Tensor]:
    return [p for n, p in call.named_parameters() if n in params]


def _batch_gradients(call: _Call, params: dict, x, raw, u) -> torch.Tensor:
    """G(u) by batched backward passes through the whole batch: row i back-propagates u at
    sample i (correct also when samples interact)."""
    live = _live(call, params)
    with torch.enable_grad():
        h = call(x, raw).reshape(len(x), -1)
        rows = torch.zeros(len(x), *h.shape, dtype=h.dtype, device=h.device)
        rows[torch.arange(len(x)), torch.arange(len(x))] = u
        grads = torch.autograd.grad(h, live, grad_outputs=rows, is_grads_batched=True,
                                    allow_unused=True)
    return torch.cat([_or_zeros(g, p, (len(x),)) for g, p in zip(grads, live)], dim=1)


def _loop_gradients(call: _Call, params: dict, x, raw, u) -> torch.Tensor:
    """G(u) one sample at a time (modules without vmap batching rules)."""
    live = _live(call, params)
    rows = []
    with torch.enable_grad():
        for i in range(len(x)):
            h = call(x[i:i + 1], raw[i:i + 1]).reshape(-1)
            grads = torch.autograd.grad(h, live, grad_outputs=u, allow_unused=True)
            rows.append(torch.cat([_or_zeros(g, p, ()) for g, p in zip(grads, live)], dim=-1))
    return torch.stack(rows)


def _or_zeros(g: Optional[torch.Tensor], p: torch.Tensor, lead: tuple) -> torch.Tensor:
    """A gradient flattened after its leading dims, or zeros for a parameter it does not use."""
    if g is None:
        return torch.zeros(*lead, p.numel(), dtype=p.dtype, device=p.device)
    return g.reshape(*lead, -1)
