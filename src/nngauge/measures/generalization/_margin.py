"""Classification margins and the epsilon-margin of a training set (generalization paper, 2.2).

The margin of a labelled point (eq. 2) is f(x)[y] - max_{y' != y} f(x)[y']. Over a set of m
points the paper uses the epsilon-margin: the lowest gamma such that ceil(eps m) points have a
margin below it, in practice the 5th percentile (appendix A); eps = 0 is the hard margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.losses import flat_scores
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge.errors import invalid


@dataclass(frozen=True)
class MarginResult(Result):
    """Margins of a network on labelled data.

    Attributes:
        margin: the epsilon-margin gamma: the k-th smallest margin, k = max(1, ceil(eps m)),
            eps = percentile / 100 (percentile 0 gives the hard margin, the minimum).
        percentile: the percentile asked for.
        hard_margin: the minimum margin.
        mean_margin: the mean margin.
        train_error: fraction of points with margin <= 0 (misclassified or tied).
        n_samples, n_classes: m and the number of outputs (for sequence outputs every position
            is a point).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        margins: every point's margin, shape (m,), in data order (float64).
    """

    _distribution = "margins"
    _summary = ("margin", "hard_margin", "mean_margin")

    margin: float
    percentile: float
    hard_margin: float
    mean_margin: float
    train_error: float
    n_samples: int
    n_classes: int
    mode: MeasurementMode
    margins: np.ndarray = field(repr=False)


@constrained(percentile=Real(0, 100, high_open=True))
@model_options("output", norm_mode="eval", after={"norm_mode": "batch_size"})
def margin(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    percentile: float = 5,
    options: ModelOptions,
    batch_size: int = 1024,
) -> MarginResult:
    """The margins f(x)[y] - max_{y' != y} f(x)[y'] (eq. 2) and their epsilon-margin.

    gamma_margin is the lowest value such that ceil(eps m) points have a smaller margin
    (section 2.2), taken as the k-th smallest margin with k = max(1, ceil(eps m)) and
    eps = percentile / 100; the paper reports the 5th percentile (appendix A). The model is
    evaluated with running batchnorm statistics and no dropout by default; its mode is
    restored.

    Args:
        model: a classifier mapping inputs (b, ...) to scores (b, n_classes), n_classes >= 2,
            or a sequence model with scores (b, ..., n_classes) (every position a point).
        data: inputs (m, ...), or ``(inputs, labels)`` when ``labels`` is None, or a Dataset /
            DataLoader yielding (inputs, labels).
        labels: integer class labels (m,) in [0, n_classes); None to take them from ``data``.
        percentile: eps in percent, in [0, 100); 0 is the hard margin.
        output: which output holds the scores for dict / tuple / ModelOutput outputs
            (default: "logits" when there is one).
        batch_size: samples per forward pass.
        norm_mode: batchnorm's statistics (default "eval": the trained network's function).

    Returns:
        :class:`MarginResult`.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(2, 3, bias=False)
        >>> with torch.no_grad():
        ...     _ = net.weight.copy_(torch.eye(3, 2))
        >>> x = torch.tensor([[2.0, 0.5], [0.0, 1.0]])
        >>> margin(net, x, torch.tensor([0, 1]), percentile=0).margins.tolist()
        [1.5, 1.0]
    """
    where = "margin()"
    adapter = ModelAdapter(model, options, where=where)
    scores, targets = adapter_scores(adapter, data, labels, batch_size=batch_size)
    values = margins_of(scores, targets)
    return MarginResult(
        margin=epsilon_margin(values, percentile), percentile=float(percentile),
        hard_margin=float(values.min()), mean_margin=float(values.mean()),
        train_error=float((values <= 0).mean()), n_samples=len(values),
        n_classes=int(scores.shape[1]), mode=adapter.mode, margins=values,
    )


def margins_of(scores: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Margins of scores (m, k) against integer labels (m,), as float64 numpy (m,)."""
    scores = scores.to(torch.float64)
    true = scores.gather(1, labels[:, None]).squeeze(1)
    others = scores.scatter(1, labels[:, None], -math.inf)
    return (true - others.max(dim=1).values).numpy()


def epsilon_margin(margins: np.ndarray, percentile: float) -> float:
    """The k-th smallest margin, k = max(1, ceil(percentile / 100 * m))."""
    k = max(1, math.ceil(percentile / 100.0 * len(margins) - 1e-9))
    return float(np.partition(margins, k - 1)[k - 1])


def adapter_scores(adapter: ModelAdapter, data: Any, labels: Any, *, batch_size: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (m, k) and checked integer labels (m,) of labelled data, run by ``adapter``."""
    where = adapter.where
    if labels is not None:
        data = (data, labels)
    scores, targets = [], []
    with adapter.active(data=data), torch.no_grad():
        for batch in adapter.batches(data, batch_size=batch_size):
            if batch.labels is None:
                raise invalid(where, "labels (pass labels=..., or data=(inputs, labels))",
                              "inputs without labels", "pass the class labels of the inputs")
            y = adapter(adapter.measured(batch.inputs), batch.inputs)
            flat, flat_labels = flat_scores(y, batch.labels.to(y.device), where)
            scores.append(flat.detach().cpu())
            targets.append(flat_labels.cpu())
    return torch.cat(scores), torch.cat(targets)
