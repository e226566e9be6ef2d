"""Gradient-saliency proxies: synflow, snip, grasp, grad_norm and fisher (compared as
zero-cost NAS proxies by Abdelfattah, Mehrotra, Dudziak & Lane, "Zero-Cost Proxies for
Lightweight NAS", ICLR 2021, section 3).

Each turns a per-parameter (or per-channel) pruning saliency into one number for the whole
network by summing it, as Abdelfattah et al. do. Where their code sums over the weights of
``nn.Conv2d`` and ``nn.Linear`` layers only, these sum over every trainable parameter
(biases, normalization scales, LSTM and attention weights included), so that they are defined
on any network; fisher reads the outputs of every linear and convolutional layer (GPT-2's
``Conv1D`` included). The loss is the mean cross-entropy for integer labels (per position for
sequence outputs), squared error for floating targets.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator, Optional

import torch
from torch import nn
from torch.func import functional_call

from nngauge._constraints import constrained
from nngauge._internal.ntk import _Call
from nngauge._internal.options import ModelOptions, model_options
from nngauge.errors import invalid
from nngauge.proxies._common import batch_loss, finite, gradients, proxy_batch, total, trainable

_BATCHNORM = nn.modules.batchnorm._BatchNorm


@contextmanager
def _batchnorm_as_identity(model: nn.Module) -> Iterator[None]:
    """Within: every batchnorm module (``_BatchNorm`` and its subclasses) returns its input
    (its ``forward`` replaced on the instance, as Abdelfattah et al.'s code does; restored on
    exit)."""
    norms = [m for m in model.modules() if isinstance(m, _BATCHNORM)]
    saved = [m.__dict__.get("forward") for m in norms]
    try:
        for m in norms:
            m.forward = _identity
        yield
    finally:
        for m, forward in zip(norms, saved):
            if forward is None:
                del m.forward
            else:
                m.forward = forward


def _identity(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return x


@constrained()
@model_options("output", "input_module")
def synflow(model: nn.Module, data: Any, labels: Any = None, *, options: ModelOptions,
            generator: Optional[torch.Generator | int] = None) -> float:
    """Synaptic flow of the network at the all-ones input (Tanaka, Kunin, Yamins & Ganguli,
    "Pruning Neural Networks without Any Data by Iteratively Conserving Synaptic Flow",
    NeurIPS 2020, section 6 and Algorithm 1; as a NAS proxy: Abdelfattah et al., ICLR 2021,
    section 3).

    Every parameter theta is replaced by |theta| and the network is run in float64 on one
    all-ones input x = 1 of a sample's shape: R = sum of the outputs f(1; |theta|) (for a
    linear network R = 1^T |W_L| ... |W_1| 1). The proxy is

        synflow = sum over trainable parameters of |theta * dR / dtheta|.

    It reads no data values: ``data`` gives the input's shape (token models: the all-ones
    input is the output of ``input_module``, the embedding, so a raw sample is run up to
    it), and ``labels`` is accepted for a uniform signature and not read. As in Abdelfattah et
    al.'s code (their "synflow", not "synflow_bn"), batchnorm layers are the identity
    (a batchnorm subclass that also applies an activation loses it); dropout is off. The
    computation runs on a float64 copy (the user's model is not modified): the product of
    absolute weights overflows float32 in deep networks. An R that overflows even float64 is
    refused.

    Args:
        model: any module.
        data: inputs (n, ...), (inputs, labels), a Dataset or a DataLoader; one sample's
            shape is read.
        labels: not read.
        output, input_module: which output is summed and where the input is (see
            :func:`nngauge.nlc`).
        generator: picks the sample whose shape (or tokens) is used; default the first.

    Returns:
        The synflow score (float, >= 0).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 3, bias=False), nn.Linear(3, 1, bias=False))
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(-1.0); _ = net[1].weight.fill_(0.5)
        >>> synflow(net, torch.randn(4, 2))  # 2 layers x R = 2 x (0.5 * 3 * 1 * 2)
        6.0
    """
    where = "synflow()"
    with proxy_batch(model, data, None, replace(options, precision=torch.float64), where=where,
                     batch_size=1, generator=generator) as (adapter, batch, names):
        params = {f"model.{n}": p.detach().abs().requires_grad_(n in names)
                  for n, p in adapter.model.named_parameters()}
        scored = [(n, params[f"model.{n}"]) for n, _ in adapter.model.named_parameters()
                  if n in names]
        if not scored:
            raise invalid(where, "a model with trainable parameters (requires_grad=True)",
                          "none", "synflow scores parameters; unfreeze them with "
                          "p.requires_grad_(True)")
        raw = batch.inputs[:1]
        ones = torch.ones_like(adapter.measured(raw)).to(torch.float64)
        with _batchnorm_as_identity(adapter.model), adapter.perturbed():
            flow = functional_call(_Call(adapter.model, adapter), params, (ones, raw)).sum()
        if not bool(torch.isfinite(flow)):
            raise invalid(where, "a synaptic flow R finite in float64",
                          f"R = {float(flow.detach())}", "the network is too deep, or its "
                          "weights too large, for R = 1^T prod |W| 1 to be represented; use "
                          "another proxy (naswot, jacob_cov, te_nas)")
        grads = gradients(flow, scored)
        return total([(p * g).abs() for (_, p), g in zip(scored, grads)])


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def snip(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
         options: ModelOptions,
         generator: Optional[torch.Generator | int] = None) -> float:
    """Connection sensitivity summed over the network (Lee, Ajanthan & Torr, "SNIP:
    Single-shot Network Pruning based on Connection Sensitivity", ICLR 2019, section 4.1; as a
    NAS proxy: Abdelfattah et al., ICLR 2021, section 3).

        snip = sum over trainable parameters of |theta * dL / dtheta|,

    L the mean loss on one labelled batch (cross-entropy for integer labels). This is
    |dL / dc| at the connection masks c = 1 of SNIP's eq. 6, before its normalization.

    Args:
        model: any module.
        data: inputs with ``labels``, or (inputs, labels), a Dataset or DataLoader of pairs.
        labels: integer class labels (b,) (per position for sequence outputs) or floating
            regression targets, when ``data`` holds inputs only.
        batch_size: samples in the batch (the first ones, or drawn by ``generator``).
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the batch (and dropout) when given.

    Returns:
        The SNIP score (float, >= 0).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> snip(net, torch.randn(16, 4), torch.randint(0, 3, (16,))) > 0
        True
    """
    with proxy_batch(model, data, labels, options, where="snip()", batch_size=batch_size,
                     generator=generator, need_labels=True) as (adapter, batch, names):
        params = trainable(adapter, names, "snip scores parameters")
        grads = gradients(batch_loss(adapter, batch), params)
        return total([(p.detach() * g).abs() for (_, p), g in zip(params, grads)])


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def grad_norm(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
              options: ModelOptions,
              generator: Optional[torch.Generator | int] = None) -> float:
    """Euclidean norm of the loss gradient (Abdelfattah, Mehrotra, Dudziak & Lane, "Zero-Cost
    Proxies for Lightweight NAS", ICLR 2021, section 3).

        grad_norm = ||dL / dtheta||_2 over all trainable parameters together,

    L the mean loss on one labelled batch. (Abdelfattah et al.'s code sums the norms of each
    Conv2d / Linear weight's gradient instead; the norm of the whole gradient is the quantity
    the paper names.)

    Args:
        model, data, labels, batch_size, output, input_module, norm_mode, dropout, generator:
            as in :func:`snip`.

    Returns:
        The gradient norm (float, >= 0).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> grad_norm(net, torch.randn(16, 4), torch.randint(0, 3, (16,))) > 0
        True
    """
    with proxy_batch(model, data, labels, options, where="grad_norm()", batch_size=batch_size,
                     generator=generator, need_labels=True) as (adapter, batch, names):
        params = trainable(adapter, names, "grad_norm differentiates the loss by the parameters")
        grads = gradients(batch_loss(adapter, batch), params)
        return total([g.to(torch.float64).pow(2) for g in grads]) ** 0.5


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def grasp(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
          options: ModelOptions,
          generator: Optional[torch.Generator | int] = None) -> float:
    """Gradient-signal-preservation score summed over the network (Wang, Zhang & Grosse,
    "Picking Winning Tickets Before Training by Preserving Gradient Flow", ICLR 2020,
    section 4, eq. 8; as a NAS proxy: Abdelfattah et al., ICLR 2021, section 3).

        grasp = - sum over trainable parameters of theta * (H g),

    g = dL / dtheta and H the Hessian of L on one labelled batch; H g = d (g_const . g) /
    dtheta by double back-propagation (g_const the gradient held fixed). Sign: GraSP's
    S(-theta) = -theta * H g, summed, as Abdelfattah et al. report it (their code keeps the
    minus sign because accuracy correlated negatively with +theta * H g). Needs second
    derivatives of every operation (torch has none for ``nn.Hardsigmoid`` / ``Hardswish``):
    a model without them is refused.

    Args:
        model, data, labels, batch_size, output, input_module, norm_mode, dropout, generator:
            as in :func:`snip`.

    Returns:
        The GraSP score (float, any sign).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        >>> isinstance(grasp(net, torch.randn(16, 4), torch.randint(0, 3, (16,))), float)
        True
    """
    where = "grasp()"
    with proxy_batch(model, data, labels, options, where=where, batch_size=batch_size,
                     generator=generator, need_labels=True) as (adapter, batch, names):
        params = trainable(adapter, names, "grasp differentiates the loss by the parameters")
        grads = gradients(batch_loss(adapter, batch), params, create_graph=True)
        alignment = sum((g.detach() * g).sum() for g in grads if g.requires_grad)
        if not isinstance(alignment, torch.Tensor):  # the gradient does not depend on theta
            return 0.0
        try:
            hg = gradients(alignment, params)
        except (RuntimeError, NotImplementedError) as exc:
            raise invalid(where, "a model whose operations have second derivatives (GraSP "
                          "differentiates the gradient)", f"{type(exc).__name__}: "
                          f"{str(exc).splitlines()[0]}", "use snip or grad_norm, or replace "
                          "the operation without a second derivative") from exc
        return -total([p.detach() * h for (_, p), h in zip(params, hg)])


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def fisher(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
           options: ModelOptions,
           generator: Optional[torch.Generator | int] = None) -> float:
    """Fisher pruning saliency summed over channels (Theis, Korshunova, Tejani & Huszar,
    "Faster gaze prediction with dense networks and Fisher pruning", arXiv:1801.05787,
    section 2.1; Turner, Crowley, O'Boyle, Storkey & Gray, "BlockSwap: Fisher-guided Block
    Substitution for Network Compression on a Budget", ICLR 2020, section 3; as a NAS proxy:
    Abdelfattah et al., ICLR 2021, section 3).

    For every call of a linear or convolutional layer, with a_{n,c,s} its output at sample n,
    channel c and position s, and g_{n,c,s} = dL / da_{n,c,s}:

        Delta_c = 0.5 * mean_n (sum_s a_{n,c,s} g_{n,c,s})^2,    fisher = sum_c Delta_c,

    summed over every channel of every call. The channel is dimension 1 of a convolution's
    output and the last dimension of a linear layer's (positions s: the spatial dimensions,
    or a sequence's positions); n runs over the output's first (batch) dimension. L is the
    mean loss on one labelled batch. Abdelfattah et al.'s code reads ``nn.Conv2d`` /
    ``nn.Linear`` outputs in train mode; here batchnorm runs as found unless ``norm_mode``
    is given.

    Args:
        model, data, labels, batch_size, output, input_module, norm_mode, dropout, generator:
            as in :func:`snip`.

    Returns:
        The Fisher score (float, >= 0).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> fisher(net, torch.randn(16, 4), torch.randint(0, 3, (16,))) > 0
        True
    """
    where = "fisher()"
    with proxy_batch(model, data, labels, options, where=where, batch_size=batch_size,
                     generator=generator, need_labels=True) as (adapter, batch, _):
        sites = adapter.sites(batch.inputs, None, default_kinds=("linear", "conv"))
        kinds = {s.module: s.kind for s in sites}
        if not kinds:
            raise invalid(where, "a model with linear or convolutional layers (fisher reads "
                          "their outputs)", "none", "use snip or grad_norm")
        seen: list[tuple[str, torch.Tensor, torch.Tensor]] = []

        def perturb(module, args, out):
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                return None
            zero = torch.zeros_like(out, requires_grad=True)
            seen.append((kinds[module], out.detach().clone(), zero))
            return out + zero

        handles = [m.register_forward_hook(perturb) for m in kinds]
        try:
            loss = batch_loss(adapter, batch)
        finally:
            for handle in handles:
                handle.remove()
        grads = torch.autograd.grad(loss, [z for _, _, z in seen], allow_unused=True)
        terms = [_channel_fisher(kind, a, g) for (kind, a, _), g in zip(seen, grads)
                 if g is not None]
        return finite(total(terms), where, "Fisher score")


def _channel_fisher(kind: str, act: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Delta_c = 0.5 mean_n (sum_s a g)^2 per channel c (dim 1 of convs, last of linears)."""
    prod = (act * grad).to(torch.float64)
    if prod.dim() > 1:
        prod = prod.movedim(1 if kind == "conv" else -1, 1)
    per_channel = prod.reshape(prod.shape[0], prod.shape[1] if prod.dim() > 1 else 1, -1).sum(2)
    return 0.5 * per_channel.pow(2).mean(0)
