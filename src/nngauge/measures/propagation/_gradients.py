"""The NLC paper's section 6 comparators: gradient size and a Lipschitz estimate.

These are the metrics the NLC paper shows to be confounded by input/output rescaling and by
width changes (section 6), offered so a user can see those confounders beside the NLC:

- gradient vector component size, GVCS = Q_{i,x} dl/dx(i): the quadratic mean over input
  components and samples of the loss gradient with respect to the input;
- gradient vector length, Q_x ||dl/dx||_2;
- a Lipschitz estimate of the network: max over the data of ||J(x)||_2 (a lower bound on the
  Lipschitz constant of f on the data's neighbourhood).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from nngauge._constraints import Integer, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.jacobian import JacobianProducts, operator_norms
from nngauge._internal.losses import LOSS, Loss, LossFn, resolve_loss, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import OUTPUT, forward_batches, site_function
from nngauge._results import Result
from nngauge._vocabulary import renamed
from nngauge.errors import invalid


@dataclass(frozen=True)
class GradientMetrics(Result):
    """Section 6 comparators of the NLC paper.

    Attributes:
        gvcs: gradient vector component size Q_{i,x} dl/dx(i).
        gradient_length: Q_x ||dl/dx||_2 (= gvcs * sqrt(d_in)).
        lipschitz: max over samples of the Jacobian operator norm ||J(x)||_2.
        mean_loss: mean per-sample loss.
        d_in, n_samples: input dimension and samples seen.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _summary = ("gvcs", "gradient_length", "lipschitz")

    gvcs: float
    gradient_length: float
    lipschitz: float
    mean_loss: float
    d_in: int
    n_samples: int
    mode: MeasurementMode


def _mean_of_per_sample(loss_fn: Optional[LossFn]) -> Any:
    """A loss_fn returning per-sample losses (b,) becomes the loss of their batch mean (None
    becomes loss="auto")."""
    if loss_fn is None:
        return "auto"

    def mean_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        losses = loss_fn(outputs, labels)
        if losses.shape != (len(outputs),):
            raise invalid("gradient_metrics()", f"loss_fn returning per-sample losses of shape "
                          f"({len(outputs)},)", f"shape {tuple(losses.shape)}",
                          "use reduction='none' (and sum extra dimensions per sample), or "
                          "pass loss= a loss returning the batch mean")
        return losses.mean()

    return mean_loss


@renamed(loss_fn=("loss", _mean_of_per_sample))
@constrained(loss=LOSS, n_iter=Integer(1))
@model_options("output", "input_module", "norm_mode", "dropout")
def gradient_metrics(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    loss: Loss = "auto",
    batch_size: int = 250,
    n_batches: Optional[int] = None,
    n_iter: int = 100,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> GradientMetrics:
    """Gradient size and Lipschitz estimate (NLC paper section 6), for comparison with the NLC.

    The gradient of sample i's loss l_i with respect to its input is that of b L_B, L_B the
    batch's mean loss (the samples of a batch do not interact, except through batch
    statistics with ``norm_mode="train"``, whose coupling the gradient then includes).

    Args:
        model: any classifier or regressor.
        data: ``(inputs, labels)``, inputs with ``labels=``, or a Dataset/DataLoader yielding
            both.
        labels: the labels when ``data`` holds the inputs only.
        loss: "auto" (default: the cross-entropy for integer labels, averaged over positions
            for sequence outputs (b, ..., C) with labels (b, ...); for floating targets the
            squared error summed over each sample's entries), "cross_entropy" (integer labels
            only), "mse" (the mean over every entry; integer labels one-hot), or a callable
            ``loss(outputs, labels)`` returning the batch's mean loss as one number, with
            ``outputs`` the measured output tensor (``output=``). The same rule in every
            measure: docs/api.md, "The loss". (The deprecated ``loss_fn=`` returned
            per-sample losses; it is turned into their mean.)
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        batch_size, n_batches, output, input_module, norm_mode, dropout, generator: as in
            :func:`nngauge.nlc` (the gradient is taken with respect to the measured input).
        n_iter: Lanczos steps for the Jacobian operator norm.

    Returns:
        :class:`GradientMetrics`.
    """
    where = "gradient_metrics()"
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    sq_total, loss_total, lipschitz, n, d_in = 0.0, 0.0, 0.0, 0, 0
    with adapter.active(generator=generator, data=data):
        coupled = adapter.coupled
        for step in forward_batches(adapter, data, [], batch_size=batch_size,
                                    n_batches=n_batches, generator=generator,
                                    min_batch=2 if coupled else 1):
            x, y = step.x, step.outputs[OUTPUT]
            if step.labels is None:
                raise invalid(where, "labels with the inputs (a loss needs them)", "inputs only",
                              "pass (inputs, labels), labels=, or a Dataset of pairs")
            targets = step.labels.to(y.device)
            loss_fn, _ = resolve_loss(loss, y, targets, where, selected=adapter.mode.output)
            total = loss_fn(y, targets) * len(x)  # the sum of the samples' losses
            (grad,) = torch.autograd.grad(total, x, retain_graph=True)
            sq_total += float(grad.detach().to(torch.float64).pow(2).sum())
            loss_total += float(total.detach().to(torch.float64))
            products = JacobianProducts(x, y, site_function(adapter, step, OUTPUT, []),
                                        adapter.note)
            sigma, _ = operator_norms(products, coupled=coupled, n_iter=n_iter, tol=1e-6,
                                      generator=generator)
            lipschitz = max(lipschitz, float(sigma.max()))
            n, d_in = n + len(x), x[0].numel()
    return GradientMetrics(gvcs=math.sqrt(sq_total / (n * d_in)),
                           gradient_length=math.sqrt(sq_total / n), lipschitz=lipschitz,
                           mean_loss=loss_total / n, d_in=d_in, n_samples=n, mode=adapter.mode)
