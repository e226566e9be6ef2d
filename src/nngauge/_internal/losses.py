"""Losses and class scores for classifier and sequence outputs, with label checks.

Every loss-based measure takes ``loss``, with one meaning (``docs/api.md``, "The loss"),
turned into a scalar loss function by one resolver, :func:`resolve_loss`:

- ``"auto"`` (the default everywhere): :func:`mean_loss`, the batch mean of
  :func:`per_sample_loss`, which covers the outputs people train: class scores (b, C) with
  integer labels (b,), per-position scores (b, ..., C) with labels (b, ...) (a language
  model's next-token logits: cross-entropy at every position, averaged over the positions of
  each sample), and regression targets of the output's shape (squared error summed over each
  sample's entries);
- ``"cross_entropy"``: the same for integer labels only;
- ``"mse"``: :func:`one_hot_mse`, the mean squared error over every entry (integer labels
  one-hot);
- a callable ``loss(outputs, labels)`` returning the batch mean as one number. The rule, the
  same in every measure (:data:`CALLABLE_RECEIVES`): ``outputs`` is the measured output, the
  tensor ``output=`` selects, never the model's whole dict, tuple or ``ModelOutput``.

Labels are checked once, here: shape against the output, range against the number of
classes; a callable is tried once on the first samples and refused when it does not return
one number.
"""

from __future__ import annotations

import functools
import typing
from itertools import islice
from typing import Any, Callable, Literal, Optional, Union

import torch
import torch.nn.functional as F

from nngauge._constraints import CALLABLE, Choice, Either
from nngauge.errors import NNGaugeError, invalid

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LossName = Literal["auto", "cross_entropy", "mse"]
LOSSES = typing.get_args(LossName)
Loss = Union[LossName, LossFn]
"""The ``loss`` argument of every loss-based measure."""
LOSS = Either((Choice.literal(LossName), CALLABLE))
"""Its declared constraint (:func:`nngauge._constraints.constrained`)."""
CALLABLE_RECEIVES = ('A callable receives the tensor ``output=`` selects (the ``"logits"`` '
                     'entry of a dict or ModelOutput by default, never the whole output): '
                     'docs/api.md, "What a loss callable receives".')
"""The contract of a loss callable, word for word in the docstring of every measure taking
``loss`` (``tests/test_loss_contract.py`` checks it)."""


def check_class_labels(scores: torch.Tensor, labels: torch.Tensor, where: str) -> None:
    """Integer labels of shape scores.shape[:-1] in [0, C), C = scores.shape[-1] >= 2."""
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise invalid(where, "integer class labels", f"labels of dtype {labels.dtype}",
                      "pass class indices as an integer tensor (e.g. labels.long())")
    if scores.dim() < 2 or tuple(labels.shape) != tuple(scores.shape[:-1]):
        raise invalid(where, "labels shaped like the outputs without their last (class) "
                      f"dimension, {tuple(scores.shape[:-1])}",
                      f"labels of shape {tuple(labels.shape)} for outputs of shape "
                      f"{tuple(scores.shape)}",
                      "give one label per sample (per position for sequence outputs), or "
                      "select the classifier output with output=")
    k = scores.shape[-1]
    if k < 2:
        raise invalid(where, "class scores (..., n_classes) with n_classes >= 2",
                      f"outputs of shape {tuple(scores.shape)}",
                      "use a classifier output with one score per class (not a regressor)")
    if labels.numel() and (bool((labels < 0).any()) or bool((labels >= k).any())):
        raise invalid(where, f"labels in [0, {k - 1}] (the output has {k} classes)",
                      f"labels in [{int(labels.min())}, {int(labels.max())}]",
                      "map labels to 0..n_classes-1 or give the model one output per class")


def check_labels(outputs: torch.Tensor, labels: torch.Tensor, where: str) -> None:
    """Labels the default loss accepts for these outputs: integer class labels (checked by
    :func:`check_class_labels`) or floating targets of the outputs' shape."""
    if not labels.is_floating_point():
        check_class_labels(outputs, labels, where)
    elif labels.shape != outputs.shape:
        raise invalid(where, f"regression targets shaped like the outputs, "
                      f"{tuple(outputs.shape)}", f"targets of shape {tuple(labels.shape)}",
                      "pass targets of the output's shape, or integer class labels")


def per_sample_loss(outputs: torch.Tensor, labels: torch.Tensor, *,
                    where: Optional[str] = "measure()") -> torch.Tensor:
    """Per-sample loss (b,): cross-entropy for integer labels (averaged over positions for
    sequence outputs), squared error summed over entries for floating targets. Labels are
    checked first unless ``where`` is None (inside ``vmap``, where data-dependent checks
    cannot run: check once beforehand)."""
    labels = labels.to(outputs.device)
    if where is not None:
        check_labels(outputs, labels, where)
    if labels.is_floating_point():
        return (outputs - labels).pow(2).reshape(len(outputs), -1).sum(1)
    flat = F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), labels.reshape(-1).long(),
                           reduction="none")
    return flat.reshape(len(outputs), -1).mean(1)


def mean_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean of :func:`per_sample_loss` over the batch (the default scalar loss), without
    label checks (it runs under ``vmap``; check with :func:`check_labels` once)."""
    return per_sample_loss(outputs, labels, where=None).mean()


def flat_scores(scores: torch.Tensor, labels: torch.Tensor, where: str
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Class scores (m, C) and labels (m,) with every position of a sequence output one
    labelled point (token-level margins); checked as in :func:`check_class_labels`."""
    check_class_labels(scores, labels, where)
    return scores.reshape(-1, scores.shape[-1]), labels.reshape(-1).long()


def one_hot_mse(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean squared error over every entry; integer labels are one-hot targets."""
    if not labels.is_floating_point():
        labels = F.one_hot(labels.long(), outputs.shape[-1]).to(outputs.dtype)
    return (outputs - labels).pow(2).mean()  # F.mse_loss has no forward-mode HVP under vmap


def resolve_loss(loss: Loss, outputs: torch.Tensor, labels: torch.Tensor, where: str, *,
                 selected: str = "the tensor output") -> tuple[LossFn, str]:
    """The scalar loss function ``loss`` stands for, and its name, checked once.

    Args:
        loss: "auto", "cross_entropy", "mse" or a callable (see the module docstring).
        outputs: the measured outputs (k, ..., C) of the first k >= 1 samples.
        labels: every label the loss will be given (n, ...): a named loss checks them all
            against the outputs' shape and number of classes; a callable is tried once on
            the first k.
        where: the measure, for error messages.
        selected: how ``output=`` chose ``outputs`` (``adapter.mode.output``), said when a
            callable fails on them.

    Returns:
        ``(loss_fn, name)``: ``loss_fn(outputs, labels)`` -> a 0-d tensor, the batch's mean
        loss (traceable by ``torch.func``: no check runs inside it); ``name`` is
        "cross_entropy" or "squared_error" for "auto" (by the labels' dtype), the name given,
        or the callable's ``__name__``.

    Example:
        >>> out, y = torch.zeros(4, 3), torch.tensor([0, 1, 2, 0])
        >>> fn, name = resolve_loss("auto", out, y, "m()")
        >>> name, round(float(fn(out, y)), 4)
        ('cross_entropy', 1.0986)
    """
    labels = labels.to(outputs.device)
    if callable(loss):
        _try(loss, outputs, labels[:len(outputs)], where, selected)
        return _reshaped(loss), getattr(loss, "__name__", type(loss).__name__)
    if loss == "cross_entropy" and labels.is_floating_point():
        raise invalid(where, "integer class labels for loss='cross_entropy'",
                      f"floating labels of dtype {labels.dtype}",
                      "pass class indices, or loss='auto' or 'mse' for regression targets")
    check_labels(outputs[:1].expand(len(labels), *outputs.shape[1:]), labels, where)
    if loss == "mse":
        return one_hot_mse, "mse"
    return mean_loss, "squared_error" if labels.is_floating_point() else "cross_entropy"


def _try(loss: LossFn, outputs: torch.Tensor, labels: torch.Tensor, where: str,
         selected: str) -> None:
    """Call a user's loss once: it must run on the measured output tensor and return one
    number (a loss written for a whole dict, tuple or ModelOutput fails here, not later)."""
    try:
        scalar_loss(loss, outputs, labels, where)
    except NNGaugeError:
        raise
    except (TypeError, ValueError, RuntimeError, IndexError, KeyError, AttributeError) as exc:
        raise invalid(where, "loss(outputs, labels) running on the measured output, the tensor "
                      f"output= selects ({selected}), of shape {tuple(outputs.shape)}, and the "
                      f"labels {tuple(labels.shape)} ({labels.dtype})",
                      f"{type(exc).__name__}: {exc}",
                      "write the loss for that tensor (it never receives the whole dict, tuple "
                      "or ModelOutput), select another entry with output=, or pass "
                      "loss='auto'") from exc


def _reshaped(loss: LossFn) -> LossFn:
    """A user's loss returning a 0-d tensor (it may return shape (1,))."""

    @functools.wraps(loss)
    def scalar(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return loss(outputs, labels).reshape(())

    return scalar


def model_loss(adapter: Any, loss: Loss, x: torch.Tensor, labels: torch.Tensor
               ) -> tuple[LossFn, str]:
    """:func:`resolve_loss` on the model's outputs for the first inputs of ``x`` (prepared
    for the model) and ``labels``, all the labels of the measure."""
    with torch.no_grad():
        out = adapter(x[:2])
    return resolve_loss(loss, out, labels, adapter.where, selected=adapter.mode.output)


def with_labels(data: Any, labels: Any, where: str) -> Any:
    """``data`` as an (inputs, labels) pair when ``labels`` is given separately."""
    if labels is None:
        return data
    if isinstance(data, (tuple, list)):
        raise invalid(where, "labels either in data=(inputs, labels) or as labels=, not both",
                      "a pair as data and labels=", "drop labels= or pass the inputs alone")
    return (data, labels)


def labelled_batches(adapter: Any, data: Any, batch_size: int, n_batches: Optional[int],
                     fix: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``n_batches`` (None: all) batches of ``data`` as (inputs, labels) on the
    model's device; inputs without labels are refused with ``fix``."""
    out = []
    for batch in islice(adapter.batches(data, batch_size=batch_size), n_batches):
        if batch.labels is None:
            raise invalid(adapter.where, "labelled data: (inputs, labels), inputs with labels=, "
                          "or a Dataset of pairs", "inputs without labels", fix)
        x = adapter.prepare_raw(batch.inputs)
        out.append((x, batch.labels.to(x.device)))
    return out


def labelled_tensors(adapter: Any, data: Any, loss: Loss
                     ) -> tuple[torch.Tensor, torch.Tensor, LossFn, str]:
    """All inputs (prepared for the model) and labels of ``data``, with the loss resolved and
    checked against them once (:func:`model_loss`; the loss then runs unchecked, under
    vmap)."""
    batch = adapter.collect(data)
    if batch.labels is None:
        raise invalid(adapter.where, "labelled data: (inputs, labels), inputs with labels=, "
                      "or a Dataset of pairs", "inputs without labels",
                      "pass data=(inputs, labels) or labels=")
    x = adapter.prepare_raw(batch.inputs)
    y = batch.labels.to(x.device)
    return (x, y, *model_loss(adapter, loss, x, y))


def scalar_loss(loss_fn: LossFn, outputs: torch.Tensor, labels: torch.Tensor,
                where: str) -> torch.Tensor:
    """``loss_fn(outputs, labels)`` as a 0-d tensor; a user loss returning anything but one
    number is refused."""
    value = loss_fn(outputs, labels)
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = (f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else "")
        raise invalid(where, "loss(outputs, labels) returning a scalar: the batch's mean loss "
                      "as one number (a tensor of one element)", f"{type(value).__name__}{shape}",
                      "reduce to the mean over the batch (e.g. "
                      "torch.nn.functional.cross_entropy with its default reduction='mean')")
    return value.reshape(())


__all__ = ["CALLABLE_RECEIVES", "LOSS", "LOSSES", "Loss", "LossFn", "LossName",
           "check_class_labels", "check_labels", "flat_scores", "labelled_batches", "labelled_tensors", "mean_loss", "model_loss",
           "one_hot_mse", "per_sample_loss", "resolve_loss", "scalar_loss", "with_labels"]
