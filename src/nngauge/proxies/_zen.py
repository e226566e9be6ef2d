"""Zen-score: how much a network at Gaussian initialization expands a small Gaussian
perturbation of its input, corrected for the rescaling done by batchnorm (Lin, Wang, Sun,
Chen, Sun, Qian, Li & Jin, "Zen-NAS: A Zero-Shot NAS for High-Performance Image
Recognition", ICCV 2021, section 4 and Algorithm 1).

The paper reads the score as the expressivity of the network: the log of the expected
Gaussian complexity of the pre-pooling feature map, which for a vanilla convolutional network
without batchnorm is the log of the product of its layers' gains; batchnorm divides each
layer's output by its standard deviation, and the Zen-score adds those standard deviations
back.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal, Optional

import torch
from torch import nn
from torch.func import functional_call

from nngauge._constraints import Check, Choice, Integer, Maybe, Real, constrained
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.layers import layer_kind
from nngauge._internal.ntk import _Call
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.sites import Site
from nngauge.errors import invalid
from nngauge.proxies._common import proxy_batch

Init = Literal["gaussian", "as_given"]
ZEN_ALPHA = 0.01
"""The input perturbation's scale alpha (the paper's 0.01)."""
_BATCHNORM = nn.modules.batchnorm._BatchNorm
_GLOBAL_POOL = nn.modules.pooling._AdaptiveAvgPoolNd


@constrained(batch_size=Integer(2), alpha=Real(0, low_open=True), n_probes=Integer(1),
             init=Choice.literal(Init),
             layer=Maybe(Check(lambda v: isinstance(v, str), "a module or site name",
                               (3, ["avgpool"]))))
@model_options("output", "input_module")
def zen_score(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
              alpha: float = ZEN_ALPHA, n_probes: int = 1, init: Init = "gaussian",
              layer: Optional[str] = None, options: ModelOptions,
              generator: Optional[torch.Generator | int] = None) -> float:
    """Zen-score: the log expected change of the pre-pooling feature map under a small
    Gaussian input perturbation, plus the log scales of the batchnorm layers (Lin, Wang, Sun,
    Chen, Sun, Qian, Li & Jin, "Zen-NAS: A Zero-Shot NAS for High-Performance Image
    Recognition", ICCV 2021, section 4, Algorithm 1): higher predicts higher accuracy.

    With x and epsilon batches of standard Gaussian inputs, f the feature map before global
    average pooling, and, for the i-th batchnorm layer with m_i channels, sigma_{i,j} the
    standard deviation of its input's channel j over the batch (and positions), the statistic
    it normalizes by,

        Delta = mean over samples of || f(x) - f(x + alpha epsilon) ||_F,
        sigma_bar_i = sqrt( sum_j sigma_{i,j}^2 / m_i ),
        Zen = log Delta + sum over batchnorm layers i of log sigma_bar_i,

    alpha = 0.01. The weights are drawn anew for the score (``init="gaussian"``, the paper's
    theta ~ N(0, 1)): every linear and convolutional weight (GPT-2's ``Conv1D`` included) from
    N(0, 1), their biases 0, normalization layers' scales 1 and shifts 0, as the authors'
    code initializes them; other parameters (embeddings, recurrent weights, a ViT's tokens)
    are kept. ``init="as_given"`` scores the weights as they are. The user's model is not
    changed: the computation runs on a float64 copy (Gaussian weights make activations grow
    with every layer) through ``torch.func.functional_call``.

    Batchnorm normalizes with batch statistics (train mode), and each of the two batches x
    and x + alpha epsilon has its own; sigma_{i,j} are those of x. A network
    without batchnorm has no sigma terms (Zen = log Delta); other normalizations (LayerNorm,
    GroupNorm) get none either, as in the paper, so their scores are not on the same scale
    as batchnorm networks'. Differences from the authors' code: Delta's norm is the
    Frobenius norm the paper states (their code sums absolute differences); sigma_{i,j} is
    the mini-batch statistic the paper states (their code reads ``running_var`` after the
    two forward passes, a momentum average that starts at 1); and the residual links
    Algorithm 1 removes first are kept (an ``nn.Module`` does not expose them: for residual
    networks the score is the paper's formula on the network as it is, without the
    theoretical reading above).

    f is the input of the last global average pooling module (an
    ``nn.AdaptiveAvgPool1d/2d/3d`` of output size 1; the paper's pre-GAP feature map), or of
    the module ``layer`` names; a network with neither is read at its output (an MLP's,
    ViT's or language model's logits). Data gives the shape of one input (token models: of
    ``input_module``'s output, where x lies; their first sample's tokens run the model), not
    its values. Each of the ``n_probes`` probes draws the weights (with ``init="gaussian"``,
    module after module), then x, then epsilon, from ``generator``, and runs two forward
    passes of ``batch_size`` samples; the score is the mean over probes of their Zen (as the
    authors' code averages repeats). ``labels`` is accepted for a uniform signature and not
    read.

    Args:
        model: any module.
        data: inputs (n, ...), (inputs, labels), a Dataset or a DataLoader; one sample's shape
            is read.
        labels: not read.
        batch_size: Gaussian samples per batch (at least 2: the batchnorm statistics are
            over them).
        alpha: the perturbation's scale (the paper's 0.01).
        n_probes: independent draws of the weights (or, as given, of the inputs) averaged.
        init: "gaussian" (the paper's N(0, 1) weights) or "as_given".
        layer: the module (or site) whose input is f; default the last global average
            pooling module, else the output.
        output, input_module: which output is read and where the input is (see
            :func:`nngauge.nlc`).
        generator: draws the weights and inputs (deterministic when given).

    Returns:
        The Zen-score (float).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        ...                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
        >>> isinstance(zen_score(net, torch.randn(2, 3, 8, 8), batch_size=8, generator=0), float)
        True
    """
    where = "zen_score()"
    options = replace(options, precision=torch.float64, norm_mode="train")
    with proxy_batch(model, data, None, options, where=where, batch_size=1,
                     generator=None) as (adapter, batch, _):
        raw = batch.inputs[:1].expand(2, *batch.inputs.shape[1:])  # 2: batch statistics
        shape = (batch_size, *adapter.measured(raw[:1]).shape[1:])
        sites = list(adapter.discover(raw))
        norms = [s for s in sites if isinstance(s.module, _BATCHNORM)]
        feature = _feature_site(adapter, sites, layer, raw)
        scores = []
        for _ in range(n_probes):
            params = _gaussian_weights(adapter, sites, generator) if init == "gaussian" else {}
            x = torch.randn(shape, generator=generator, dtype=torch.float64)
            eps = torch.randn(shape, generator=generator, dtype=torch.float64)
            with torch.no_grad(), adapter.perturbed():
                f0, inputs = _run(adapter, params, x, raw[:1], [*norms, feature])
                f1, _ = _run(adapter, params, x + alpha * eps, raw[:1], [feature])
            delta = (f0 - f1).reshape(batch_size, -1).norm(dim=1).mean()
            scores.append(_log(delta, where, "Delta = E ||f(x) - f(x + alpha eps)||_F")
                          + sum(0.5 * _log(_channel_variance(inputs[s.name]), where,
                                           f"the batch variance of {s.name}'s input")
                                for s in norms if s.name in inputs))
    return math.fsum(scores) / n_probes


def _feature_site(adapter: ModelAdapter, sites: list[Site], layer: Optional[str],
                  raw: torch.Tensor) -> Optional[Site]:
    """The site whose input is f: ``layer``'s (one call), else the last global average pooling
    module's, else None (f is the output)."""
    if layer is not None:
        named = adapter.sites(raw, [layer], default_kinds=())
        if len(named) != 1 or named[0].calls == 0:
            raise invalid(adapter.where, "layer= naming one module call the forward pass makes "
                          "(its input is the feature map)", f"layer={layer!r}: "
                          f"{[s.name for s in named] if named else 'not called'}",
                          "name a module called once, or one of its calls 'name#k'")
        return named[0]
    pools = [s for s in sites if isinstance(s.module, _GLOBAL_POOL) and all(
        size == 1 for size in (s.module.output_size if isinstance(s.module.output_size, (
            tuple, list)) else (s.module.output_size,)))]
    return pools[-1] if pools else None


def _gaussian_weights(adapter: ModelAdapter, sites: list[Site],
                      generator: Optional[torch.Generator]) -> dict[str, torch.Tensor]:
    """The paper's theta ~ N(0, 1), as parameters for ``functional_call``: linear and
    convolutional weights N(0, 1) (modules in ``named_modules()`` order), their biases 0,
    normalization scales 1 and shifts 0; other parameters as they are."""
    weighted = {s.module_name for s in sites if s.kind in ("linear", "conv")}
    new: dict[int, torch.Tensor] = {}
    for name, module in adapter.model.named_modules():
        norm = layer_kind(module) == "norm"
        if not (norm or name in weighted):
            continue
        weight, bias = module._parameters.get("weight"), module._parameters.get("bias")
        if isinstance(weight, torch.Tensor) and id(weight) not in new:
            new[id(weight)] = torch.ones_like(weight) if norm else torch.randn(
                weight.shape, generator=generator, dtype=weight.dtype).to(weight.device)
        if isinstance(bias, torch.Tensor):
            new[id(bias)] = torch.zeros_like(bias)
    return {f"model.{n}": new.get(id(p), p) for n, p in adapter.model.named_parameters()}


def _run(adapter: ModelAdapter, params: dict[str, torch.Tensor], x: torch.Tensor,
         raw: torch.Tensor, sites: list[Optional[Site]]) -> tuple[torch.Tensor, dict]:
    """f at measured inputs ``x`` (the input of ``sites[-1]``, or the output when it is None)
    and the inputs of the other sites, with the parameters ``params`` (none: the model's)."""
    recorded = [s for s in sites if s is not None]

    def value(xs: torch.Tensor, r: torch.Tensor) -> tuple[Optional[torch.Tensor], dict]:
        return adapter.run(xs, recorded, raw=r, inputs=True)

    out, inputs = (functional_call(_Call(adapter.model, value), params, (x, raw)) if params
                   else value(x, raw))
    feature = out if sites[-1] is None else inputs[sites[-1].name]
    return feature.to(torch.float64), inputs


def _channel_variance(value: torch.Tensor) -> torch.Tensor:
    """sum_j sigma_j^2 / m: the mean over channels (dimension 1) of the biased variance over
    the batch and positions, a batchnorm's normalizing statistic."""
    dims = [0, *range(2, value.dim())]
    return value.to(torch.float64).var(dim=dims, unbiased=False).mean()


def _log(value: torch.Tensor, where: str, what: str) -> float:
    """log(value), refused unless value is finite and positive."""
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise invalid(where, f"{what} finite and positive (the Zen-score takes its log)",
                      f"{number}", "a zero means a feature map that does not depend on the "
                      "input (or a constant batchnorm input); inf or NaN an overflow of "
                      "float64: score a shallower network, or init='as_given' with smaller "
                      "weights")
    return math.log(number)
