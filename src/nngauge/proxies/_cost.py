"""Cost baselines every zero-cost proxy is compared against (Abdelfattah, Mehrotra, Dudziak &
Lane, "Zero-Cost Proxies for Lightweight NAS", ICLR 2021, section 4: "params" and "flops"):
the number of trainable parameters and the multiply-accumulates of one forward pass.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from nngauge._constraints import constrained
from nngauge._internal.options import ModelOptions, model_options
from nngauge.errors import invalid
from nngauge.proxies._common import proxy_batch

_UNCOUNTED = (nn.RNNBase,)
"""Modules whose forward is one fused aten op that torch's FlopCounterMode does not count."""


@constrained()
def n_params(model: nn.Module, data: Any = None, labels: Any = None, *,
             generator: Optional[torch.Generator | int] = None) -> float:
    """Number of trainable parameters (``requires_grad=True``), each shared tensor counted
    once (Abdelfattah et al., ICLR 2021, section 4, the "params" baseline).

    ``data``, ``labels`` and ``generator`` are accepted so that every proxy has the same
    signature; none is read.

    Args:
        model: any module.
        data, labels, generator: not read.

    Returns:
        sum of p.numel() over the trainable parameters (a whole number, as a float).

    Example:
        >>> from torch import nn
        >>> n_params(nn.Linear(3, 2))
        8.0
    """
    return float(sum(p.numel() for p in model.parameters() if p.requires_grad))


@constrained()
@model_options(norm_mode="eval")
def flops(model: nn.Module, data: Any, labels: Any = None, *, options: ModelOptions,
          generator: Optional[torch.Generator | int] = None) -> float:
    """Multiply-accumulates (MACs) of one forward pass on one sample (Abdelfattah et al., ICLR
    2021, section 4, the "flops" baseline, reported as MACs as NAS benchmarks do).

    Counted by ``torch.utils.flop_counter.FlopCounterMode``, which counts 2 FLOPs per
    multiply-accumulate of matrix products, convolutions and attention (run through its
    math kernel, i.e. batched matrix products); the result is its total / 2. Elementwise
    operations, normalization, pooling and bias additions are not counted (for an MLP:
    sum of in_features x out_features over its Linear layers). Recurrent modules
    (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) run as one fused operation FlopCounterMode does not
    count, so a model containing one is refused rather than under-counted. Batchnorm uses its
    running statistics by default (one sample has no batch statistics); ``labels`` is
    accepted for a uniform signature and not read.

    Args:
        model: any module.
        data: inputs, (inputs, labels), a Dataset or a DataLoader; its first sample (or one
            drawn by ``generator``) is run.
        labels: not read.
        norm_mode: batchnorm's statistics, as in :func:`nngauge.nlc` (default "eval").
        generator: draws the sample when given.

    Returns:
        MACs of one sample's forward pass (a whole number, as a float; FLOPs = 2 x MACs).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> flops(nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)), torch.randn(4, 3))
        25.0
    """
    from torch.utils.flop_counter import FlopCounterMode

    recurrent = [n for n, m in model.named_modules() if isinstance(m, _UNCOUNTED)]
    if recurrent:
        raise invalid("flops()", "a model whose operations torch.utils.flop_counter counts",
                      f"recurrent modules {recurrent[:5]} (one fused operation it does not "
                      "count)", "count the recurrence by hand (4 gates x (input + hidden) x "
                      "hidden MACs per LSTM step), or use n_params")
    with proxy_batch(model, data, None, options, where="flops()", batch_size=1,
                     generator=generator) as (adapter, batch, _):
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            adapter.call_model(adapter.prepare_raw(batch.inputs))
    return counter.get_total_flops() / 2
