"""What every zero-cost proxy shares: one batch of the data through the model adapter, the
trainable parameters, and the default loss.

A proxy reads one batch: the first ``batch_size`` samples of ``data``, or, with a
``generator``, ``batch_size`` samples drawn at random from it (a DataLoader's first batch,
of its own size). The model runs through
:class:`~nngauge._internal.adapter.ModelAdapter` as the proxy's model options say (output
selection, ``input_module`` for token models, batchnorm as found unless ``norm_mode`` says
otherwise, dropout off unless asked), and is left as it was found: modes, ``requires_grad``
flags, buffers, parameter values and ``.grad`` (gradients are taken with
``torch.autograd.grad``, never accumulated into ``.grad``).

A proxy is written as

    @constrained()
    @model_options("output", "input_module", "norm_mode", "dropout")
    def snip(model, data, labels=None, *, batch_size=64, options: ModelOptions,
             generator=None) -> float:
        with proxy_batch(model, data, labels, options, where="snip()", batch_size=batch_size,
                         generator=generator, need_labels=True) as (adapter, batch, names):
            ...

and documents the options it offers with the one phrase "output, input_module, norm_mode,
dropout: how the model runs, as in :func:`nngauge.nlc`" (see :mod:`nngauge._internal.options`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator, Optional

import numpy as np
import torch
from torch import nn

from nngauge._internal.adapter import ModelAdapter, batch_coupled
from nngauge._internal.data import Batch
from nngauge._internal.losses import resolve_loss, with_labels
from nngauge._internal.options import ModelOptions
from nngauge.errors import invalid

LABELS_FIX = ("pass labels=<integer class labels (b,)> or data=(inputs, labels) (floating "
              "targets of the output's shape give a squared-error loss)")


@contextmanager
def proxy_batch(model: nn.Module, data: Any, labels: Any, options: ModelOptions, *, where: str,
                batch_size: int, generator: Optional[torch.Generator],
                need_labels: bool = False, min_samples: int = 1
                ) -> Iterator[tuple[ModelAdapter, Batch, frozenset[str]]]:
    """The adapter running the model as ``options`` say, active, the one batch a proxy
    measures (see the module docstring) and the names of the parameters trainable in the
    user's model (requires_grad True on entry)."""
    names = frozenset(n for n, p in model.named_parameters() if p.requires_grad)
    adapter = ModelAdapter(model, options, where=where)
    data = with_labels(data, labels, where)
    with adapter.active(generator=generator, data=data), torch.enable_grad():
        batch = next(iter(adapter.batches(data, batch_size=batch_size, n_batches=1,
                                          generator=generator)))
        if need_labels and batch.labels is None:
            raise invalid(where, "labelled data (the proxy differentiates a loss)",
                          "inputs without labels", LABELS_FIX)
        if len(batch) < min_samples:
            raise invalid(where, f"at least {min_samples} samples", f"{len(batch)}",
                          f"pass a batch of {min_samples} or more samples")
        yield adapter, batch, names


def per_point(model: nn.Module, options: ModelOptions) -> ModelOptions:
    """``options`` for a proxy whose points must not see each other: as given, or with
    ``norm_mode="frozen"`` (statistics of the data, then fixed) where None would leave
    batchnorm using batch statistics."""
    if options.norm_mode is None and batch_coupled(model):
        return replace(options, norm_mode="frozen")
    return options


def trainable(adapter: ModelAdapter, names: frozenset[str], purpose: str, *,
              weights_only: bool = False) -> list[tuple[str, torch.Tensor]]:
    """The measured model's parameters named in ``names`` (those trainable in the user's
    model), switched to require grad for the block (the adapter restores the flags); with
    ``weights_only``, those whose name contains "weight". None is refused, ``purpose`` saying
    why they are needed."""
    params = [(n, p) for n, p in adapter.model.named_parameters()
              if n in names and (not weights_only or "weight" in n)]
    if not params:
        what = "trainable weights (parameters named '*weight*')" if weights_only else (
            "trainable parameters")
        raise invalid(adapter.where, f"a model with {what} (requires_grad=True)",
                      f"none among {len(names)} trainable parameters" if names else
                      "no trainable parameter", f"{purpose}; unfreeze them with "
                      "p.requires_grad_(True)")
    for _, p in params:
        p.requires_grad_(True)
    return params


def batch_loss(adapter: ModelAdapter, batch: Batch) -> torch.Tensor:
    """The default loss (``loss="auto"`` of every measure: mean cross-entropy for integer
    labels, per position for sequence outputs, squared error for floating targets) on the
    batch, labels checked first."""
    x = adapter.measured(batch.inputs)
    out = adapter(x, batch.inputs)
    y = batch.labels.to(out.device)
    loss_fn, _ = resolve_loss("auto", out, y, adapter.where)
    return loss_fn(out, y)


def gradients(value: torch.Tensor, params: list[tuple[str, torch.Tensor]], *,
              create_graph: bool = False) -> list[torch.Tensor]:
    """d value / d p for each parameter (zeros for those ``value`` does not use)."""
    grads = torch.autograd.grad(value, [p for _, p in params], create_graph=create_graph,
                                allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for (_, p), g in zip(params, grads)]


def total(terms: list[torch.Tensor]) -> float:
    """The sum of every entry of ``terms``, accumulated in float64."""
    return float(sum(t.detach().to(torch.float64).sum() for t in terms))


def finite(value: float, where: str, what: str) -> float:
    """``value``, refused when NaN (no ranking can use it)."""
    if np.isnan(value):
        raise invalid(where, f"a defined {what}", "NaN",
                      "check the model's outputs and weights for NaN or inf")
    return value
