"""The NLC paper's learning-rate search (appendix E.2).

"For each architecture we completed 40 total training runs with 40 different starting learning
rates that form a geometric series with spacing factor 3." The smallest rate is
10^-8 sum_l Q_b ||dW_lb||_F / ||W_l||_F, where dW_lb is the update the optimizer computes with
learning rate 1 for the weight matrix of layer l on minibatch b during one epoch, without
applying it (for Adam, 4 such epochs first warm up its running averages). The trained network
is the run with the lowest validation error; the paper checked that it was never among the
five smallest or five largest rates (:attr:`LRSearchResult.at_edge`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch
from torch import nn

from nngauge._constraints import (
    CALLABLE,
    MODEL,
    Choice,
    Either,
    Flag,
    Integer,
    Maybe,
    Real,
    constrained,
)
from nngauge._internal.layers import layer_kind
from nngauge._numbers import is_finite
from nngauge._results import Result
from nngauge.errors import invalid
from nngauge.training._fit import (
    FitResult,
    OptimizerName,
    OptimizerSpec,
    _output_scale,
    _prepared,
    fit,
    make_optimizer,
)

ModelSource = Union[nn.Module, Callable[[], nn.Module]]
_SHARED_OPTIONS = ("optimizer", "momentum", "batch_size", "loss_scaling")


@constrained(optimizer=Either((Choice.literal(OptimizerName), CALLABLE)),
             momentum=Real(0, 1, high_open=True), scale=Real(0, low_open=True),
             warmup_epochs=Maybe(Integer(0)), loss_scaling=Flag())
def smallest_lr(model: nn.Module, train: Any, *, optimizer: OptimizerSpec = "sgd",
                momentum: float = 0.0, batch_size: int = 250, scale: float = 1e-8,
                warmup_epochs: Optional[int] = None, loss_scaling: bool = True,
                generator: Optional[torch.Generator | int] = None) -> float:
    """E.2's smallest starting learning rate: scale / sum_l Q_b ||dW_lb||_F / ||W_l||_F.

    Each minibatch's update dW_lb (learning rate 1) is taken on a copy of the model and undone,
    so every update is computed at the initial weights W_l. Weight matrices are those of the
    linear and convolutional layers. Q_b is the quadratic mean over the minibatches.

    The paper's text (appendix E.2, as extracted) prints ``10^-8 sum_l ...``, a product; its
    rationale, that at this rate "no individual weight matrix update would perturb any weight
    matrix by more than approximately 10^-8", and its high-NLC networks trained at rates as
    small as 5e-18 (section 4, B.1) hold only for the quotient: the rate times any layer's
    relative update is then at most ``scale``. The quotient is used.

    Args:
        model: the initialized network (not modified: a copy is used).
        train: ``(inputs, labels)``; one epoch of shuffled minibatches of ``batch_size``.
        optimizer, momentum, loss_scaling: as in :func:`fit`.
        scale: a finite number > 0: 1e-8 in the paper (1e-16 for its 60-rate study).
        warmup_epochs: epochs of unapplied updates before measuring; default 4 for Adam (the
            paper's) and 0 otherwise.
        generator: the shuffling.

    Example:
        >>> from nngauge.data import waveform_noise
        >>> from nngauge.nn import mlp
        >>> smallest_lr(mlp(40, 16, 2, 3), waveform_noise(100)) > 0
        True
    """
    where = "smallest_lr()"
    model = copy.deepcopy(model)
    data = _prepared(train, model, where)
    params = list(model.parameters())
    weights = [m.weight for m in model.modules() if layer_kind(m) in ("linear", "conv")]
    if not weights:
        raise invalid(where, "a model with linear or convolutional layers", "none",
                      "pass lr_search(start=...) explicitly")
    position = {id(p): i for i, p in enumerate(params)}
    c = _output_scale(model, data.inputs, batch_size=batch_size) if loss_scaling else 1.0
    opt = make_optimizer(optimizer, params, 1.0, momentum)
    if warmup_epochs is None:
        warmup_epochs = 4 if optimizer == "adam" else 0
    initial = [p.detach().clone() for p in params]
    squares = torch.zeros(len(weights), dtype=torch.float64)
    n_batches = 0
    model.train()
    for epoch in range(warmup_epochs + 1):
        for idx in torch.randperm(len(data.labels), generator=generator).split(batch_size):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(data.inputs[idx]) / c, data.labels[idx])
            loss.backward()
            opt.step()
            with torch.no_grad():
                if epoch == warmup_epochs:
                    squares += torch.stack([(w - initial[position[id(w)]]).double().pow(2).sum()
                                            for w in weights])
                    n_batches += 1
                for p, p0 in zip(params, initial):
                    p.copy_(p0)
    norms = torch.stack([w.detach().double().norm() for w in weights])
    return float(scale / ((squares / n_batches).sqrt() / norms).sum())


@dataclass(frozen=True)
class LRSearchResult(Result):
    """All runs of :func:`lr_search` and the chosen one.

    Attributes:
        rates: the starting learning rates tried, increasing.
        runs: one :class:`FitResult` per rate tried.
        best_index: index of the run with the lowest validation error (first on ties).
        best: that run; best_lr: its starting rate.
        start: the smallest rate; at_edge: the best run is among the ``edge`` smallest or
            largest rates of the full grid (the paper required this never to happen: widen
            the grid).
        model: the network trained by the best run (at its best weights).
    """

    rates: tuple[float, ...]
    runs: tuple[FitResult, ...]
    best_index: int
    best: FitResult
    best_lr: float
    start: float
    at_edge: bool
    model: Optional[nn.Module] = field(default=None, repr=False, compare=False)

    def to_frame(self):
        """One row per run: lr, best_val_error, test_error, epochs, diverged."""
        from nngauge.errors import require_extra

        pd = require_extra("pandas", "report", "LRSearchResult.to_frame()")
        return pd.DataFrame([{"lr": r, "best_val_error": run.best_val_error,
                              "test_error": run.test_error, "epochs": run.epochs,
                              "diverged": run.diverged} for r, run in zip(self.rates, self.runs)])


@constrained(model=Either((MODEL, CALLABLE)), start=Maybe(Real(0, low_open=True)),
             factor=Real(1, low_open=True), n_rates=Integer(1), scale=Real(0, low_open=True),
             edge=Integer(0), stop_after=Maybe(Integer(1)))
def lr_search(model: ModelSource, train: Any, val: Any, *, test: Any = None,
              start: Optional[float] = None, factor: float = 3.0, n_rates: int = 40,
              scale: float = 1e-8, edge: int = 5, stop_after: Optional[int] = None,
              **fit_options: Any) -> LRSearchResult:
    """Train one run per starting rate of a geometric grid; keep the lowest validation error.

    Rates: start * factor**i, i = 0..n_rates-1 (paper: factor 3, 40 rates, start from
    :func:`smallest_lr` with scale 1e-8). Every run starts from the same initialization.

    Args:
        model: a network (deep-copied for every run, so all runs share its initialization) or
            a callable returning a fresh network.
        train, val, test: ``(inputs, labels)`` pairs, passed to :func:`fit`.
        start: the smallest rate; None computes it by :func:`smallest_lr`.
        factor, n_rates: the grid.
        scale: the heuristic's constant (1e-8).
        edge: the :attr:`LRSearchResult.at_edge` check's width (the paper's 5).
        stop_after: None (default, the paper: try every rate) or stop once this many
            consecutive runs did not improve the best validation error (saves the largest
            rates, which usually diverge; at_edge still refers to the full grid).
        **fit_options: passed to every :func:`fit` (batch_size, dtype, optimizer, ...);
            optimizer, momentum, batch_size and loss_scaling also to :func:`smallest_lr`.

    Returns:
        :class:`LRSearchResult`.

    Example:
        >>> import torch
        >>> from nngauge.data import split, waveform_noise
        >>> from nngauge.nn import mlp
        >>> train, val = split(waveform_noise(200), (0.5, 0.5))
        >>> net = mlp(40, 16, 2, 3, generator=torch.Generator().manual_seed(0))
        >>> result = lr_search(net, train, val, start=0.01, n_rates=3, max_epochs=2,
        ...                    batch_size=50)
        >>> [round(r, 2) for r in result.rates], len(result.runs)
        ([0.01, 0.03, 0.09], 3)
    """
    where = "lr_search()"
    fresh = (lambda: copy.deepcopy(model)) if isinstance(model, nn.Module) else model
    if start is None:
        shared = {k: v for k, v in fit_options.items() if k in _SHARED_OPTIONS}
        start = smallest_lr(fresh(), train, scale=scale, **shared)
    if not (is_finite(start) and start > 0):
        raise invalid(where, "start a finite number > 0", repr(start),
                      "pass start=None for the paper's heuristic")
    rates, runs, best_model, stale = [], [], None, 0
    for i in range(n_rates):
        net = fresh()
        run = fit(net, train, val, lr=float(start * factor ** i), test=test, **fit_options)
        if not runs or run.best_val_error < min(r.best_val_error for r in runs):
            best_model, stale = net, 0
        else:
            stale += 1
        rates.append(float(start * factor ** i))
        runs.append(run)
        if stop_after is not None and stale >= stop_after:
            break
    best_index = min(range(len(runs)), key=lambda i: runs[i].best_val_error)
    return LRSearchResult(rates=tuple(rates), runs=tuple(runs), best_index=best_index,
                          best=runs[best_index], best_lr=rates[best_index], start=float(start),
                          at_edge=best_index < edge or best_index >= n_rates - edge,
                          model=best_model)
