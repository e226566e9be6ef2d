"""The NLC paper's training protocol (appendix E.2) with its loss-input scaling (appendix C).

E.2: "We train with the starting learning rate until the validation classification error (VCE)
has not decreased for 10 epochs. Then we rewind the state of the network by 10 epochs (when the
lowest VCE was achieved), divide the learning rate by 3 and continue training until the VCE has
not improved for 5 epochs. [...] This process continues until the step size has been divided by
3 ten times. When the VCE has again not improved for 5 epochs, we rewind one last time and
terminate the training run." :class:`StallSchedule` is that rule as a pure state machine fed one
validation error per epoch; :func:`fit` runs it with SGD (or Adam) on minibatches of 250.

Appendix C: the loss divides the network's outputs by c = Q_{x,j} f(x, j), their quadratic mean
over the training set at initialization, before softmax + cross-entropy; c stays fixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Union

import torch
from torch import nn

from nngauge._constraints import (
    CALLABLE,
    Check,
    Choice,
    Either,
    Flag,
    Instance,
    Integer,
    Maybe,
    Real,
    constrained,
)
from nngauge._internal.adapter import ModelAdapter, batch_coupled, model_dtype_device
from nngauge._internal.data import as_batches
from nngauge._internal.layers import preserved_state
from nngauge._internal.losses import check_class_labels
from nngauge._internal.options import ModelOptions
from nngauge._numbers import is_finite
from nngauge._results import Result, plain
from nngauge.data._splits import LabelledData, as_labelled
from nngauge.errors import invalid

Action = Literal["improved", "continue", "decay", "stop"]
OptimizerName = Literal["sgd", "adam"]
OptimizerSpec = Union[OptimizerName, Callable[..., torch.optim.Optimizer]]


class StallSchedule:
    """E.2's learning-rate schedule as a state machine fed validation errors.

    Feed one validation error per epoch (the first call: the error before training) to
    :meth:`update`; it answers

    - "improved": a new strictly lower error; the caller saves the weights;
    - "continue": no improvement yet for fewer epochs than the current patience;
    - "decay": no improvement for ``patience`` epochs (``decay_patience`` after the first
      decay): rewind to the best weights and divide the learning rate by ``decay_factor``;
    - "stop": no improvement for ``decay_patience`` epochs after ``n_decays`` decays: rewind to
      the best weights and stop.

    Example:
        >>> s = StallSchedule(patience=2, decay_patience=1, n_decays=1)
        >>> [s.update(e) for e in [0.5, 0.4, 0.4, 0.4, 0.3, 0.3]]
        ['improved', 'improved', 'continue', 'decay', 'improved', 'stop']
        >>> s.lr_scale, s.best, s.best_epoch
        (0.3333333333333333, 0.3, 4)
    """

    def __init__(self, *, patience: int = 10, decay_patience: int = 5, decay_factor: float = 3.0,
                 n_decays: int = 10) -> None:
        where = "StallSchedule()"
        for name, value, least in (("patience", patience, 1), ("decay_patience", decay_patience, 1),
                                   ("n_decays", n_decays, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise invalid(where, f"{name} an integer >= {least}", f"{name}={value!r}",
                              f"pass e.g. {name}={max(least, 5)}")
        if not (is_finite(decay_factor) and decay_factor > 1):
            raise invalid(where, "decay_factor a finite number > 1", repr(decay_factor),
                          "pass decay_factor=3.0 (the paper's)")
        self.patience, self.decay_patience = patience, decay_patience
        self.decay_factor, self.n_decays = float(decay_factor), n_decays
        self.best, self.best_epoch = math.inf, -1
        self.epoch, self.stalled, self.decays_done, self.stopped = -1, 0, 0, False

    @property
    def lr_scale(self) -> float:
        """The factor on the starting learning rate now: decay_factor ** -decays_done."""
        return self.decay_factor ** -self.decays_done

    def update(self, val_error: float) -> Action:
        """Take the validation error of the next epoch and say what to do."""
        if self.stopped:
            raise invalid("StallSchedule.update()", "no update after 'stop'", "another update",
                          "create a new StallSchedule for a new run")
        self.epoch += 1
        if val_error < self.best:  # NaN never improves
            self.best, self.best_epoch, self.stalled = float(val_error), self.epoch, 0
            return "improved"
        self.stalled += 1
        if self.stalled < (self.patience if self.decays_done == 0 else self.decay_patience):
            return "continue"
        self.stalled = 0
        if self.decays_done < self.n_decays:
            self.decays_done += 1
            return "decay"
        self.stopped = True
        return "stop"


@dataclass(frozen=True)
class EpochRecord:
    """One row of a training history: epoch 0 is the untrained network.

    ``train_loss`` and ``train_error`` are averaged over the epoch's minibatches while training
    (NaN at epoch 0); ``lr`` is the rate the epoch ran with; ``action`` the schedule's answer;
    ``steps`` the optimizer steps taken since the start of training by the end of the epoch
    (0 at epoch 0; a rewind does not take them back).
    """

    epoch: int
    lr: float
    train_loss: float
    train_error: float
    val_error: float
    action: str
    steps: int = 0


@dataclass(frozen=True)
class FitResult(Result):
    """The outcome of :func:`fit`; the model holds the weights of ``best_epoch``.

    Attributes:
        best_val_error: lowest validation classification error (the rewound-to weights').
        test_error: test error of those weights (None without test data).
        train_error: training-set error of those weights.
        epochs: training epochs run; best_epoch: the epoch of the best weights (0: untrained).
        lr: starting learning rate; final_lr: the rate when training stopped.
        n_decays: learning-rate divisions made.
        loss_scale: c, the divisor of the outputs in the loss (1.0 without loss scaling).
        diverged: True when the training loss became non-finite (training stopped there).
        stopped_by: "schedule", "max_epochs" or "diverged".
        history: one :class:`EpochRecord` per epoch, epoch 0 first.
    """

    best_val_error: float
    test_error: Optional[float]
    train_error: float
    epochs: int
    best_epoch: int
    lr: float
    final_lr: float
    n_decays: int
    loss_scale: float
    diverged: bool
    stopped_by: str
    history: tuple[EpochRecord, ...]

    def to_frame(self):
        """The history as a pandas DataFrame, one row per epoch."""
        from nngauge.errors import require_extra

        pd = require_extra("pandas", "report", "FitResult.to_frame()")
        return pd.DataFrame([plain(row) for row in self.history])


def _is_history(value: Any) -> bool:
    return isinstance(value, FitResult) or (
        isinstance(value, (list, tuple)) and bool(value)
        and all(isinstance(row, EpochRecord) for row in value))


@constrained(history=Check(_is_history, "a FitResult or its history (EpochRecords, epoch 0 "
                           "first)", (None, (), [1.0], "history")),
             target=Real(0, low_open=True))
def steps_to_loss(history: Any, target: float) -> Optional[int]:
    """The optimizer steps :func:`fit` took until the training loss first reached ``target``.

    The steps taken by the end of the first epoch whose mean training loss (the loss
    :func:`fit` minimizes, averaged over the epoch's minibatches as they were trained: with
    loss scaling, the cross-entropy of f(x) / c) is at most ``target``; None when no epoch
    reached it. A history is read at the end of each epoch, so the count is that of whole
    epochs. Jiang, Neyshabur, Mobahi, Krishnan and Bengio ("Fantastic Generalization Measures
    and Where to Find Them", ICLR 2020, appendix C.4) use two such counts as measures:
    step.to.0.1 = ``steps_to_loss(result, 0.1)`` and step.0.1.to.0.01 =
    ``steps_to_loss(result, 0.01) - steps_to_loss(result, 0.1)``.

    Args:
        history: a :class:`FitResult`, or its ``history`` (:class:`EpochRecord` rows).
        target: the training loss to reach (> 0).

    Returns:
        The cumulative optimizer steps (``EpochRecord.steps``) at that epoch, or None.

    Example:
        >>> rows = [EpochRecord(0, 0.1, math.nan, math.nan, 0.9, "improved"),
        ...         EpochRecord(1, 0.1, 0.5, 0.2, 0.3, "improved", 10),
        ...         EpochRecord(2, 0.1, 0.08, 0.0, 0.2, "improved", 20)]
        >>> steps_to_loss(rows, 0.1), steps_to_loss(rows, 0.01)
        (20, None)
    """
    rows = history.history if isinstance(history, FitResult) else history
    return next((row.steps for row in rows if row.train_loss <= target), None)


@constrained()
def output_scale(model: nn.Module, inputs: torch.Tensor, *, batch_size: int = 250) -> float:
    """c = Q_{x,j} f(x, j): the quadratic mean of the outputs over inputs and output units.

    NLC paper appendix C: the loss divides the outputs by c, measured at initialization. The
    model runs in training mode (batchnorm uses batch statistics, as in training) on batches of
    ``batch_size`` in order; its modes and buffers are restored.

    Args:
        model: the network, mapping inputs (n, ...) to outputs (n, ...).
        inputs: at least one sample (n, ...), finite, floating point, of the shape the model
            reads; converted to the model's dtype and device.
        batch_size: samples per forward pass.

    Example:
        >>> import torch
        >>> output_scale(torch.nn.Linear(3, 2, bias=False).requires_grad_(False).eval(),
        ...              torch.zeros(4, 3))
        0.0
    """
    inputs, _ = _checked_inputs(inputs, model, "output_scale()")
    return _output_scale(model, inputs, batch_size)


def _output_scale(model: nn.Module, inputs: torch.Tensor, batch_size: int) -> float:
    """:func:`output_scale` on inputs already checked (:func:`_prepared`)."""
    total, count = 0.0, 0
    with preserved_state(model), torch.no_grad():
        model.train()
        for chunk in inputs.split(batch_size):
            out = model(chunk)
            total += float(out.detach().to(torch.float64).pow(2).sum())
            count += out.numel()
    return math.sqrt(total / count)


@constrained()
def classification_error(model: nn.Module, data: LabelledData, *, batch_size: int = 250) -> float:
    """Fraction of ``data`` misclassified by ``argmax`` of the outputs, in eval mode.

    Args:
        model: a classifier mapping inputs (n, d) to class scores (n, k).
        data: ``(inputs, labels)``: at least one sample, labels integers in [0, k) of shape
            (n,).
        batch_size: samples per forward pass.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(2, 2)
        >>> classification_error(net, (torch.zeros(3, 2), torch.tensor([0, 1, 1]))) in (1 / 3, 2 / 3)
        True
    """
    return _error_rate(model, _prepared(data, model, "classification_error()"), batch_size)


def _error_rate(model: nn.Module, data: LabelledData, batch_size: int = 250) -> float:
    """:func:`classification_error` on data already checked (:func:`_prepared`)."""
    wrong = 0
    with preserved_state(model), torch.no_grad():
        model.eval()
        for x, y in zip(data.inputs.split(batch_size), data.labels.split(batch_size)):
            wrong += int((model(x).argmax(1) != y).sum())
    return wrong / len(data.labels)


def make_optimizer(spec: OptimizerSpec, params, lr: float, momentum: float = 0.0):
    """``spec`` "sgd" (with ``momentum``), "adam", or a callable ``spec(params, lr=lr)``."""
    if callable(spec):
        return spec(params, lr=lr)
    if spec == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum)
    if spec == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise invalid("fit()", "optimizer 'sgd', 'adam' or a callable(params, lr=...)", repr(spec),
                  "pass optimizer='sgd'")


@constrained(lr=Real(0, low_open=True),
             optimizer=Either((Choice.literal(OptimizerName), CALLABLE)),
             momentum=Real(0, 1, high_open=True), loss_scaling=Flag(),
             dtype=Maybe(Instance((torch.dtype,), "a torch floating-point dtype", ("float64", 64))),
             max_epochs=Maybe(Integer(1)), patience=Integer(1), decay_patience=Integer(1),
             decay_factor=Real(1, low_open=True), n_decays=Integer(0))
def fit(
    model: nn.Module,
    train: Any,
    val: Any,
    *,
    lr: float,
    optimizer: OptimizerSpec = "sgd",
    momentum: float = 0.0,
    batch_size: int = 250,
    test: Any = None,
    loss_scaling: bool = True,
    dtype: Optional[torch.dtype] = None,
    max_epochs: Optional[int] = None,
    patience: int = 10,
    decay_patience: int = 5,
    decay_factor: float = 3.0,
    n_decays: int = 10,
    generator: Optional[torch.Generator | int] = None,
    tracker: Any = None,
) -> FitResult:
    """Train a classifier with the NLC paper's protocol (E.2) and loss scaling (appendix C).

    Softmax cross-entropy on f(x) / c, c = :func:`output_scale` at the start (appendix C); SGD
    on shuffled minibatches; after every epoch the validation classification error feeds a
    :class:`StallSchedule` (patience 10, then rewind to the best weights and divide the rate by
    3, patience 5, ten divisions, then a last rewind). The optimizer is created afresh (no
    momentum or Adam state) after each rewind. The model is trained in place and ends at the
    best weights, in the train/eval mode it came in.

    Args:
        model: a classifier mapping inputs (b, d) to logits (b, k).
        train, val, test: ``(inputs, labels)`` pairs (e.g. :class:`nngauge.data.LabelledData`);
            ``test`` optional, evaluated once at the end.
        lr: starting learning rate (> 0); see :func:`lr_search` for the paper's grid.
        optimizer: "sgd" (default, the paper's), "adam", or ``callable(params, lr=...)``.
        momentum: SGD momentum (default 0: plain SGD as in the paper).
        batch_size: minibatch size (default 250, the paper's).
        loss_scaling: divide the outputs by c in the loss (default True, appendix C).
        dtype: e.g. ``torch.float64`` (the paper trained in 64 bit): converts the model in place
            and the data; None keeps the model's dtype.
        max_epochs: a cap on training epochs (None: the schedule alone stops training).
        patience, decay_patience, decay_factor, n_decays: the schedule (paper: 10, 5, 3, 10).
        generator: drives the minibatch shuffling (None: torch's global generator).
        tracker: an object with ``step(model, batch)`` (e.g. :class:`nngauge.Tracker`) called
            after every optimizer step with the batch ``(inputs, labels)``, and
            ``epoch_end(model)`` (when it has one) after every epoch.

    Returns:
        :class:`FitResult`.

    Example:
        >>> import torch
        >>> from nngauge.data import split, waveform_noise
        >>> from nngauge.nn import mlp
        >>> train, val = split(waveform_noise(400), (0.5, 0.5))
        >>> net = mlp(40, 32, 2, 3, generator=torch.Generator().manual_seed(0))
        >>> result = fit(net, train, val, lr=0.3, batch_size=50, max_epochs=5,
        ...              generator=torch.Generator().manual_seed(0))
        >>> result.best_val_error < 0.5, len(result.history)
        (True, 6)
    """
    where = "fit()"
    schedule = StallSchedule(patience=patience, decay_patience=decay_patience,
                             decay_factor=decay_factor, n_decays=n_decays)
    train = _prepared(train, model, f"{where} (train data)")
    val = _prepared(val, model, f"{where} (val data)")
    test = None if test is None else _prepared(test, model, f"{where} (test data)")
    if dtype is not None:  # only once the data are known to be good: the model is changed
        model.to(dtype)
        train, val, test = (None if d is None else LabelledData(d.inputs.to(dtype), d.labels)
                            for d in (train, val, test))
    was_training = model.training
    scale = _output_scale(model, train.inputs, batch_size) if loss_scaling else 1.0
    if not math.isfinite(scale) or scale <= 0:
        raise invalid(where, "outputs with a positive, finite quadratic mean at initialization",
                      f"c = {scale}", "check the model's initialization or pass loss_scaling=False")

    history = [EpochRecord(0, float(lr), math.nan, math.nan,
                           _error_rate(model, val, batch_size), "improved")]
    schedule.update(history[0].val_error)
    best_state = _snapshot(model)
    opt = make_optimizer(optimizer, model.parameters(), lr, momentum)
    stopped_by, diverged, steps = "max_epochs", False, 0
    while max_epochs is None or len(history) <= max_epochs:
        rate = lr * schedule.lr_scale
        loss, error, taken = _train_epoch(model, train, opt, scale, batch_size, generator,
                                          tracker)
        steps += taken
        if tracker is not None and hasattr(tracker, "epoch_end"):
            tracker.epoch_end(model)
        if not math.isfinite(loss):
            history.append(EpochRecord(len(history), rate, loss, error, math.nan, "diverged",
                                       steps))
            stopped_by, diverged = "diverged", True
            break
        val_error = _error_rate(model, val, batch_size)
        action = schedule.update(val_error)
        history.append(EpochRecord(len(history), rate, loss, error, val_error, action, steps))
        if action == "improved":
            best_state = _snapshot(model)
        elif action in ("decay", "stop"):
            model.load_state_dict(best_state)
            opt = make_optimizer(optimizer, model.parameters(), lr * schedule.lr_scale, momentum)
            if action == "stop":
                stopped_by = "schedule"
                break
    model.load_state_dict(best_state)
    model.train(was_training)
    return FitResult(
        best_val_error=schedule.best,
        test_error=None if test is None else _error_rate(model, test, batch_size),
        train_error=_error_rate(model, train, batch_size),
        epochs=len(history) - 1, best_epoch=schedule.best_epoch, lr=float(lr),
        final_lr=lr * schedule.lr_scale, n_decays=schedule.decays_done, loss_scale=scale,
        diverged=diverged, stopped_by=stopped_by, history=tuple(history))


def _train_epoch(model, train: LabelledData, opt, scale: float, batch_size: int,
                 generator, tracker) -> tuple[float, float, int]:
    """One pass over shuffled minibatches; mean loss and error over the pass, and the
    optimizer steps taken."""
    model.train()
    order = torch.randperm(len(train.labels), generator=generator)
    chunks = list(order.split(batch_size))
    if len(chunks) > 1 and len(chunks[-1]) == 1 and batch_coupled(model):
        chunks.pop()  # batchnorm cannot normalize a batch of one
    total_loss, wrong, count = 0.0, 0, 0
    for taken, idx in enumerate(chunks):
        x, y = train.inputs[idx], train.labels[idx]
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = nn.functional.cross_entropy(out / scale, y)
        if not torch.isfinite(loss):
            return math.nan, math.nan, taken
        loss.backward()
        opt.step()
        if tracker is not None:
            tracker.step(model, (x, y))
        total_loss += float(loss.detach()) * len(idx)
        wrong += int((out.detach().argmax(1) != y).sum())
        count += len(idx)
    return total_loss / count, wrong / count, len(chunks)


def _prepared(data: Any, model: nn.Module, where: str) -> LabelledData:
    """``data`` as :class:`LabelledData` on the model's dtype and device, refused unless the
    model can be trained on it: the shared checks of every measure's data (at least one
    sample; finite floating-point inputs, on a real device) and labels (integer classes, one per
    sample, within the model's outputs), and one forward pass of two samples (inputs the
    model's forward() accepts, class scores (n, k) out)."""
    data = as_labelled(data, where)
    if data.labels.is_meta:
        raise invalid(where, "labels holding values", "meta-device labels (shapes only)",
                      "materialize the labels on a real device (e.g. the CPU) first")
    inputs, scores = _checked_inputs(data.inputs, model, where)
    labels = data.labels.to(inputs.device)
    if scores.dim() != 2:
        raise invalid(where, "a classifier returning class scores of shape (n, n_classes)",
                      f"outputs of shape {tuple(scores.shape)} for inputs of shape "
                      f"{tuple(inputs[:2].shape)}", "pass a model whose forward() returns one "
                      "row of class scores (logits) per sample")
    check_class_labels(scores[:1].expand(len(labels), -1), labels, where)
    return LabelledData(inputs, labels.to(torch.int64))


def _checked_inputs(inputs: Any, model: nn.Module, where: str
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``inputs`` on the model's dtype and device, checked as every measure checks its data
    (:func:`nngauge._internal.data.as_batches`), and the model's outputs on the first two
    samples (a forward pass that fails is the adapter's error on rejected inputs); the model's
    weights must hold finite values (the adapter's refusal)."""
    if not isinstance(inputs, torch.Tensor):
        inputs = torch.as_tensor(inputs)
    next(as_batches(inputs, batch_size=max(1, inputs.shape[0] if inputs.dim() else 1),
                    where=where))  # every check of as_batches, e.g. no samples
    dtype, device = model_dtype_device(model)
    inputs = inputs.to(dtype=dtype or inputs.dtype, device=device)
    # running statistics: a batchnorm net in training mode can still check one sample
    adapter = ModelAdapter(model, ModelOptions(norm_mode="eval", precision=dtype or torch.float32),
                           where=where)
    with adapter.active():
        scores = adapter.call_model(inputs[:2])
    if not isinstance(scores, torch.Tensor):
        raise invalid(where, "a model returning a tensor of outputs",
                      f"a {type(scores).__name__}", "wrap the model so that forward() returns "
                      "the class scores (logits) as one tensor")
    return inputs, scores


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
