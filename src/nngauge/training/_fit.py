"""The NLC paper's training protocol (appendix E.2) with its loss-input scaling (appendix C),
and Jiang et al.'s stopping rule (a target training loss or a step cap).

E.2: "We train with the starting learning rate until the validation classification error (VCE)
has not decreased for 10 epochs. Then we rewind the state of the network by 10 epochs (when the
lowest VCE was achieved), divide the learning rate by 3 and continue training until the VCE has
not improved for 5 epochs. [...] This process continues until the step size has been divided by
3 ten times. When the VCE has again not improved for 5 epochs, we rewind one last time and
terminate the training run." :class:`StallSchedule` is that rule as a pure state machine fed one
validation error per epoch; :func:`fit` runs it with SGD (or Adam) on minibatches of 250.

Appendix C: the loss divides the network's outputs by c = Q_{x,j} f(x, j), their quadratic mean
over the training set at initialization, before softmax + cross-entropy; c stays fixed.

The second protocol, :func:`fit` with ``target_loss``: Jiang, Neyshabur, Mobahi, Krishnan &
Bengio, "Fantastic Generalization Measures and Where to Find Them", ICLR 2020, section 4 train
every network of their zoo to the same cross-entropy on the training set, 0.01, so that the
networks are compared at the same fit of their data; a network that does not get there stops
at a step cap and says so. Training runs at the constant starting rate; the training set's
cross-entropy is measured (eval mode, the whole set) at the end of every epoch, and
:func:`steps_to_loss` reads the steps at which it first fell to a loss (their step.to.0.1 and
step.0.1.to.0.01 measures).
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
    (NaN at epoch 0); ``lr`` is the rate the epoch ran with; ``action`` the schedule's answer
    (with ``target_loss``: "continue", or why training stopped); ``steps`` the optimizer steps
    taken since the start of training by the end of the epoch (0 at epoch 0; a rewind does not
    take them back); ``train_set_loss``: with ``target_loss``, the cross-entropy of the whole
    training set at the end of the epoch (eval mode), else NaN.
    """

    epoch: int
    lr: float
    train_loss: float
    train_error: float
    val_error: float
    action: str
    steps: int = 0
    train_set_loss: float = math.nan


@dataclass(frozen=True)
class FitResult(Result):
    """The outcome of :func:`fit`; the model holds the weights of ``best_epoch``.

    With ``target_loss`` the model holds its final weights: ``best_epoch`` is the last epoch
    and ``best_val_error`` the validation error of those weights (NaN without validation data).

    Attributes:
        best_val_error: lowest validation classification error (the rewound-to weights').
        test_error: test error of those weights (None without test data).
        train_error: training-set error of those weights.
        epochs: training epochs run; best_epoch: the epoch of the best weights (0: untrained).
        lr: starting learning rate; final_lr: the rate when training stopped.
        n_decays: learning-rate divisions made.
        loss_scale: c, the divisor of the outputs in the loss (1.0 without loss scaling).
        diverged: True when the training loss became non-finite (training stopped there).
        stopped_by: "schedule", "max_epochs", "max_steps", "target_loss" or "diverged".
        history: one :class:`EpochRecord` per epoch, epoch 0 first.
        steps: optimizer steps taken.
        train_set_loss: with ``target_loss``, the training set's cross-entropy at the end
            (eval mode, outputs divided by ``loss_scale``); else NaN.
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
    steps: int = 0
    train_set_loss: float = math.nan

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

    The steps taken by the end of the first epoch whose training loss (the loss :func:`fit`
    minimizes, with loss scaling the cross-entropy of f(x) / c: the whole training set's in
    eval mode where fit measured it, ``train_set_loss`` with ``target_loss``, else the mean
    over the epoch's minibatches as they were trained) is at most ``target``; None when no
    epoch reached it. A history is read at the end of each epoch, so the count is that of whole
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
    return next((row.steps for row in rows
                 if (row.train_set_loss if math.isfinite(row.train_set_loss)
                     else row.train_loss) <= target), None)


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
    return evaluate(model, data, batch_size=batch_size)[1]


def evaluate(model: nn.Module, data: LabelledData, *, scale: float = 1.0,
             batch_size: int = 250) -> tuple[float, float]:
    """(mean cross-entropy of the outputs divided by ``scale``, classification error) of
    ``model`` on ``data`` (already checked, :func:`_prepared`), in eval mode, in one pass."""
    total, wrong = 0.0, 0
    with preserved_state(model), torch.no_grad():
        model.eval()
        for x, y in zip(data.inputs.split(batch_size), data.labels.split(batch_size)):
            out = model(x)
            total += float(nn.functional.cross_entropy(out / scale, y, reduction="sum"))
            wrong += int((out.argmax(1) != y).sum())
    return total / len(data.labels), wrong / len(data.labels)


def make_optimizer(spec: OptimizerSpec, params, lr: float, momentum: float = 0.0,
                   weight_decay: float = 0.0):
    """``spec`` "sgd" (with ``momentum``), "adam", or a callable ``spec(params, lr=lr)``;
    ``weight_decay``: the L2 penalty's coefficient, added to the gradient by the optimizer (a
    callable receives it as a keyword when it is not 0)."""
    if callable(spec):
        return spec(params, lr=lr, **({"weight_decay": weight_decay} if weight_decay else {}))
    if spec == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if spec == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise invalid("fit()", "optimizer 'sgd', 'adam' or a callable(params, lr=...)", repr(spec),
                  "pass optimizer='sgd'")


@constrained(lr=Real(0, low_open=True),
             optimizer=Either((Choice.literal(OptimizerName), CALLABLE)),
             momentum=Real(0, 1, high_open=True), weight_decay=Real(0), loss_scaling=Flag(),
             dtype=Maybe(Instance((torch.dtype,), "a torch floating-point dtype", ("float64", 64))),
             max_epochs=Maybe(Integer(1)), max_steps=Maybe(Integer(1)),
             target_loss=Maybe(Real(0, low_open=True)), patience=Integer(1),
             decay_patience=Integer(1), decay_factor=Real(1, low_open=True), n_decays=Integer(0))
def fit(
    model: nn.Module,
    train: Any,
    val: Any = None,
    *,
    lr: float,
    optimizer: OptimizerSpec = "sgd",
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    batch_size: int = 250,
    test: Any = None,
    loss_scaling: bool = True,
    dtype: Optional[torch.dtype] = None,
    max_epochs: Optional[int] = None,
    max_steps: Optional[int] = None,
    target_loss: Optional[float] = None,
    patience: int = 10,
    decay_patience: int = 5,
    decay_factor: float = 3.0,
    n_decays: int = 10,
    generator: Optional[torch.Generator | int] = None,
    tracker: Any = None,
) -> FitResult:
    """Train a classifier with the NLC paper's protocol (E.2) and loss scaling (appendix C), or
    to a target training loss (Jiang et al. 2020, section 4).

    Softmax cross-entropy on f(x) / c, c = :func:`output_scale` at the start (appendix C); SGD
    on shuffled minibatches; after every epoch the validation classification error feeds a
    :class:`StallSchedule` (patience 10, then rewind to the best weights and divide the rate by
    3, patience 5, ten divisions, then a last rewind). The optimizer is created afresh (no
    momentum or Adam state) after each rewind. The model is trained in place and ends at the
    best weights, in the train/eval mode it came in.

    With ``target_loss`` (Jiang et al.'s stopping criterion, their 0.01): no schedule and no
    validation data needed; training runs at the rate ``lr`` until the cross-entropy of the
    whole training set (eval mode, measured after every epoch) is at most ``target_loss``, or
    ``max_steps`` optimizer steps (or ``max_epochs``) are done, or the loss diverges; the model
    keeps its final weights. ``stopped_by`` says which; :func:`steps_to_loss` reads when the
    training loss first reached a value.

    Args:
        model: a classifier mapping inputs (b, d) to logits (b, k).
        train, val, test: ``(inputs, labels)`` pairs (e.g. :class:`nngauge.data.LabelledData`);
            ``val`` needed by the schedule (optional with ``target_loss``: then only its error
            at the end is reported); ``test`` optional, evaluated once at the end.
        lr: starting learning rate (> 0); see :func:`lr_search` for the paper's grid.
        optimizer: "sgd" (default, the paper's), "adam", or ``callable(params, lr=...)``.
        momentum: SGD momentum (default 0: plain SGD as in the paper).
        weight_decay: L2 penalty coefficient >= 0 added to the gradients by the optimizer
            (default 0; it is not part of the reported losses).
        batch_size: minibatch size (default 250, the paper's).
        loss_scaling: divide the outputs by c in the loss (default True, appendix C).
        dtype: e.g. ``torch.float64`` (the paper trained in 64 bit): converts the model in place
            and the data; None keeps the model's dtype.
        max_epochs: a cap on training epochs (None: the schedule alone stops training).
        max_steps: a cap on optimizer steps (training stops within an epoch when it is hit).
        target_loss: stop once the training set's cross-entropy is at most this (> 0); None
            (default): the schedule's protocol.
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
        >>> net = mlp(40, 64, 2, 3, generator=0)
        >>> run = fit(net, train, lr=0.1, momentum=0.9, batch_size=50, target_loss=0.01,
        ...           max_steps=2000, loss_scaling=False, generator=0)
        >>> run.stopped_by, run.train_set_loss <= 0.01, run.train_error
        ('target_loss', True, 0.0)
    """
    where = "fit()"
    if val is None and target_loss is None:
        raise invalid(where, "validation data (val) for the schedule's protocol",
                      "val=None without target_loss", "pass val=(inputs, labels), or "
                      "target_loss=0.01 to train to a training loss instead")
    schedule = StallSchedule(patience=patience, decay_patience=decay_patience,
                             decay_factor=decay_factor, n_decays=n_decays)
    train = _prepared(train, model, f"{where} (train data)")
    val = None if val is None else _prepared(val, model, f"{where} (val data)")
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
    run = _Run(model, train, scale, batch_size, generator, tracker, max_steps,
               lambda rate: make_optimizer(optimizer, model.parameters(), rate, momentum,
                                           weight_decay))
    if target_loss is None:
        outcome = _fit_schedule(run, val, lr, schedule, max_epochs)
    else:
        outcome = _fit_to_loss(run, val, lr, target_loss, max_epochs)
    model.train(was_training)
    return FitResult(
        **outcome,
        test_error=None if test is None else _error_rate(model, test, batch_size),
        train_error=_error_rate(model, train, batch_size), lr=float(lr), loss_scale=scale,
        steps=run.steps)


class _Run:
    """What both protocols share: the model, its training data and loss scale, the shuffling,
    the tracker, the step count and its cap, and how to make an optimizer for a rate."""

    def __init__(self, model, train: LabelledData, scale: float, batch_size: int, generator,
                 tracker, max_steps: Optional[int], new_optimizer) -> None:
        self.model, self.train, self.scale, self.batch_size = model, train, scale, batch_size
        self.generator, self.tracker, self.max_steps = generator, tracker, max_steps
        self.new_optimizer = new_optimizer
        self.steps = 0

    @property
    def capped(self) -> bool:
        """Whether the step cap is reached."""
        return self.max_steps is not None and self.steps >= self.max_steps

    def epoch(self, opt) -> tuple[float, float]:
        """One epoch (cut short at the step cap), then the tracker's ``epoch_end``; the mean
        loss and error over its minibatches."""
        budget = None if self.max_steps is None else self.max_steps - self.steps
        loss, error, steps = _train_epoch(self.model, self.train, opt, self.scale,
                                          self.batch_size, self.generator, self.tracker, budget)
        self.steps += steps
        if self.tracker is not None and hasattr(self.tracker, "epoch_end"):
            self.tracker.epoch_end(self.model)
        return loss, error


def _fit_schedule(run: _Run, val: LabelledData, lr: float, schedule: StallSchedule,
                  max_epochs: Optional[int]) -> dict:
    """E.2's protocol: the validation error after every epoch drives the schedule; the model
    ends at the best weights. Returns the :class:`FitResult` fields it decides."""
    model, batch_size = run.model, run.batch_size
    history = [EpochRecord(0, float(lr), math.nan, math.nan,
                           _error_rate(model, val, batch_size), "improved")]
    schedule.update(history[0].val_error)
    best_state = _snapshot(model)
    opt = run.new_optimizer(lr)
    stopped_by, diverged = "max_epochs", False
    while max_epochs is None or len(history) <= max_epochs:
        rate = lr * schedule.lr_scale
        loss, error = run.epoch(opt)
        if not math.isfinite(loss):
            history.append(EpochRecord(len(history), rate, loss, error, math.nan, "diverged",
                                       run.steps))
            stopped_by, diverged = "diverged", True
            break
        val_error = _error_rate(model, val, batch_size)
        action = schedule.update(val_error)
        history.append(EpochRecord(len(history), rate, loss, error, val_error, action,
                                   run.steps))
        if action == "improved":
            best_state = _snapshot(model)
        elif action in ("decay", "stop"):
            model.load_state_dict(best_state)
            opt = run.new_optimizer(lr * schedule.lr_scale)
            if action == "stop":
                stopped_by = "schedule"
                break
        if run.capped:
            stopped_by = "max_steps"
            break
    model.load_state_dict(best_state)
    return {"best_val_error": schedule.best, "epochs": len(history) - 1,
            "best_epoch": schedule.best_epoch, "final_lr": lr * schedule.lr_scale,
            "n_decays": schedule.decays_done, "diverged": diverged, "stopped_by": stopped_by,
            "history": tuple(history)}


def _fit_to_loss(run: _Run, val: Optional[LabelledData], lr: float, target_loss: float,
                 max_epochs: Optional[int]) -> dict:
    """Jiang et al.'s protocol: constant rate until the training set's cross-entropy is at most
    ``target_loss`` (checked after every epoch) or a cap; the model keeps its final weights.
    Returns the :class:`FitResult` fields it decides."""
    model, batch_size = run.model, run.batch_size
    set_loss = evaluate(model, run.train, scale=run.scale, batch_size=batch_size)[0]
    history = [EpochRecord(0, float(lr), math.nan, math.nan, math.nan, "start", 0, set_loss)]
    opt = run.new_optimizer(lr)
    stopped_by = "target_loss" if set_loss <= target_loss else None
    while stopped_by is None:
        loss, error = run.epoch(opt)
        if not math.isfinite(loss):
            set_loss, stopped_by = math.nan, "diverged"
        else:
            set_loss = evaluate(model, run.train, scale=run.scale, batch_size=batch_size)[0]
            stopped_by = ("target_loss" if set_loss <= target_loss else "max_steps" if run.capped
                          else "max_epochs" if max_epochs is not None
                          and len(history) >= max_epochs else None)
        history.append(EpochRecord(len(history), float(lr), loss, error, math.nan,
                                   stopped_by or "continue", run.steps, set_loss))
    return {"best_val_error": math.nan if val is None else _error_rate(model, val, batch_size),
            "epochs": len(history) - 1, "best_epoch": len(history) - 1, "final_lr": float(lr),
            "n_decays": 0, "diverged": stopped_by == "diverged", "stopped_by": stopped_by,
            "history": tuple(history), "train_set_loss": set_loss}


def _train_epoch(model, train: LabelledData, opt, scale: float, batch_size: int,
                 generator, tracker, max_batches: Optional[int] = None
                 ) -> tuple[float, float, int]:
    """One pass over shuffled minibatches (at most ``max_batches`` of them); mean loss and
    error over the pass, and the optimizer steps taken."""
    model.train()
    order = torch.randperm(len(train.labels), generator=generator)
    chunks = list(order.split(batch_size))
    if len(chunks) > 1 and len(chunks[-1]) == 1 and batch_coupled(model):
        chunks.pop()  # batchnorm cannot normalize a batch of one
    if max_batches is not None:
        chunks = chunks[:max_batches]
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
