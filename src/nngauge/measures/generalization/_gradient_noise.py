"""Gradient noise at the end of training (Jiang, Neyshabur, Mobahi, Krishnan and Bengio,
"Fantastic Generalization Measures and Where to Find Them", ICLR 2020, appendix C.4,
grad.noise.final).

The training set, shuffled, is cut into K mini-batches B_1..B_K of b points (the m - K b
points left over are not read). With g_k = grad_theta L_{B_k}(theta), the gradient of the
mini-batch's mean loss, and g = (1/K) sum_k g_k their mean (the full-batch gradient of the
points read), the gradient noise is the variance of the mini-batch gradient across batches,

    noise = (1/K) sum_k ||g_k - g||^2 = trace of the covariance of g_k,

and its share of each parameter tensor (the same sum over that tensor's entries). All K
gradients come from ``torch.func.vmap`` over ``torch.func.grad`` of the batch loss (chunks of
``chunk_size`` batches at a time), accumulated in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn
from torch.func import functional_call, grad

from nngauge._constraints import Integer, Maybe, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.batching import Vectorizer
from nngauge._internal.losses import LOSS, Loss, labelled_tensors, scalar_loss, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge.errors import invalid


@dataclass(frozen=True)
class NoiseParameter(Result):
    """One parameter tensor's share of the gradient noise.

    Attributes:
        name: the parameter's name (``model.named_parameters()``).
        noise: (1/K) sum_k ||g_k - g||^2 over this tensor's entries.
        mean_gradient_norm: ||g|| over this tensor's entries.
    """

    name: str
    noise: float
    mean_gradient_norm: float


@dataclass(frozen=True)
class GradientNoiseResult(Result):
    """The variance of the mini-batch gradient across the batches of the training set.

    Attributes:
        noise: (1/K) sum_k ||g_k - g||^2 (Jiang et al.'s grad.noise.final, measured on the
            trained network).
        mean_gradient_norm: ||g||, the norm of the mean (full-batch) gradient.
        n_batches, batch_size: K and b; n_samples: the K b points read.
        loss: the loss's name.
        parameters: per parameter tensor :class:`NoiseParameter` rows (their ``noise`` sums
            to ``noise``).
        mode: how the model was run.
    """

    _rows = "parameters"
    _headline = "noise"

    noise: float
    mean_gradient_norm: float
    n_batches: int
    batch_size: int
    n_samples: int
    loss: str
    parameters: tuple[NoiseParameter, ...]
    mode: MeasurementMode


@constrained(loss=LOSS, max_samples=Maybe(Integer(1)))
@model_options("output", norm_mode="eval")
def gradient_noise(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    batch_size: int = 32,
    loss: Loss = "auto",
    max_samples: Optional[int] = None,
    chunk_size: Optional[int] = None,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> GradientNoiseResult:
    """The gradient noise: the variance of the mini-batch gradient across the training set's
    mini-batches (Jiang et al.'s grad.noise.final).

    noise = (1/K) sum_k ||g_k - g||^2, g_k the gradient of the mean loss of mini-batch k
    (b = ``batch_size`` points of the shuffled training set, K = floor(m / b) batches, the
    m - K b points left over unread) with respect to every parameter, g = (1/K) sum_k g_k
    (Jiang, Neyshabur, Mobahi, Krishnan and Bengio, "Fantastic Generalization Measures and
    Where to Find Them", ICLR 2020, appendix C.4: the variance of the gradients at the end of
    training, over the training set). Jiang et al. measure it on the trained network, with the
    training mini-batch size. The K gradients come from ``torch.func.vmap`` over
    ``torch.func.grad`` (a loop where vmap cannot batch the model), ``chunk_size`` batches at a
    time, summed in float64.

    Args:
        model: the trained network; never modified.
        data, labels: the training data: ``(inputs, labels)``, inputs with ``labels=``, or a
            Dataset / DataLoader of pairs.
        batch_size: b, the mini-batch size (the training batch size); at least two batches
            must fit in the data.
        loss: "auto" (default: the mean cross-entropy for integer labels), "cross_entropy",
            "mse" or a callable ``loss(outputs, labels)`` returning the batch's mean loss, run
            under ``torch.func`` transforms (docs/api.md, "The loss").
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        max_samples: the first this many points of ``data`` (None: all), before shuffling.
        chunk_size: mini-batches per vmapped pass (None: as many as keep the stacked gradients
            under 2**24 numbers).
        output: which output the loss reads for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics (default "eval": running); dropout is off.
        generator: shuffles the points into mini-batches.

    Returns:
        :class:`GradientNoiseResult`.

    Raises:
        InvalidInputError: no labels; fewer than 2 * ``batch_size`` points.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(3, 2)
        >>> x, y = torch.randn(40, 3), torch.randint(0, 2, (40,))
        >>> r = gradient_noise(net, x, y, batch_size=10, generator=0)
        >>> r.n_batches, round(sum(p.noise for p in r.parameters) / r.noise, 6)
        (4, 1.0)
    """
    where = "gradient_noise()"
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    with adapter.active(data=data):
        x, y, loss_fn, loss_name = labelled_tensors(adapter, data, loss)
        if max_samples is not None:
            x, y = x[:max_samples], y[:max_samples]
        k = len(y) // batch_size
        if k < 2:
            raise invalid(where, f"at least two mini-batches of batch_size={batch_size} "
                          "points", f"{len(y)} points", "pass more data or a smaller "
                          "batch_size")
        order = torch.randperm(len(y), generator=generator)[:k * batch_size].to(x.device)
        xs = x[order].reshape(k, batch_size, *x.shape[1:])
        ys = y[order].reshape(k, batch_size, *y.shape[1:])
        params = adapter.weights("the gradient noise differentiates the parameters")
        per_batch = sum(w.numel() for w in params.values())
        chunk = chunk_size or max(1, 2**24 // per_batch)

        def batch_gradient(theta: dict, xb: torch.Tensor, yb: torch.Tensor) -> dict:
            return grad(lambda t: scalar_loss(
                loss_fn, adapter.select(functional_call(adapter.model, t, (xb,))), yb,
                where))(theta)

        gradients = Vectorizer(adapter.note)(batch_gradient, in_dims=(None, 0, 0))
        total = {n: torch.zeros_like(w, dtype=torch.float64) for n, w in params.items()}
        squares = dict.fromkeys(params, 0.0)
        for start in range(0, k, chunk):
            g = gradients(params, xs[start:start + chunk], ys[start:start + chunk])
            for n in params:
                values = g[n].to(torch.float64)
                total[n] += values.sum(0)
                squares[n] += float(values.square().sum())
    rows = []
    for n in params:
        mean = total[n] / k
        square = float(mean.square().sum())
        rows.append(NoiseParameter(n, max(squares[n] / k - square, 0.0), math.sqrt(square)))
    return GradientNoiseResult(
        noise=sum(r.noise for r in rows),
        mean_gradient_norm=math.sqrt(sum(r.mean_gradient_norm ** 2 for r in rows)),
        n_batches=k, batch_size=batch_size, n_samples=k * batch_size, loss=loss_name,
        parameters=tuple(rows), mode=adapter.mode)
