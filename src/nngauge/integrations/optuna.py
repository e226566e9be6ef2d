"""Optuna integration: nngauge's predictors as each trial's user attributes, measured before
training, and a pruner that stops a trial before it trains when they are bad.

In an objective, build the trial's network, record its predictors, ask whether to prune, then
train::

    from nngauge.integrations.optuna import PredictorPruner, record_predictors

    def objective(trial):
        model = build(depth=trial.suggest_int("depth", 2, 12))
        record_predictors(trial, model, (x, y))          # user attributes "nngauge.<column>"
        if trial.should_prune():
            raise optuna.TrialPruned()                    # before any GPU time is spent
        return train_and_evaluate(model)

    study = optuna.create_study(pruner=PredictorPruner("nlc", good=(1.0, 3.0)))

The predictors are the study measures :func:`nngauge.studies.rank` uses (default: the NLC
rule, TE-NAS's NTK condition number, the parameter count, FLOPs; see
:mod:`nngauge.studies._rank` for why). :class:`PredictorPruner` prunes a trial whose predictor
lies outside a range (``good``: e.g. the NLC paper's ideal NLC range (1, 3): Philipp &
Carbonell, arXiv 2018, section 4) or, once ``n_startup_trials`` earlier trials have it, below
the ``percentile`` of theirs in the predictor's known direction. It reads the attributes from
the study's storage, so it works with Optuna's RDB storage and with workers sharing it.

This module imports without Optuna; ``PredictorPruner`` is built on first access and raises
:class:`nngauge.MissingDependencyError` naming ``pip install 'nngauge[optuna]'`` when Optuna is
not installed. ``record_predictors`` needs only a trial with ``set_user_attr``.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

from nngauge.integrations._lazy import built_on_access

PREFIX = "nngauge."
"""The user attributes' prefix: ``nngauge.nlc``, ``nngauge.n_params``, ..."""

__all__ = ["PREFIX", "PredictorPruner", "record_predictors"]


def record_predictors(trial: Any, model: Any, data: Any, *,
                      measures: Optional[Sequence[str]] = None, batch_size: int = 256,
                      generator: Any = 0) -> dict[str, float]:
    """Measure ``model`` at initialization on ``data`` = (inputs, labels) with the study
    measures ``measures`` (default :data:`nngauge.studies._rank.DEFAULT_MEASURES`) and store
    each column as the trial's user attribute ``"nngauge.<column>"`` (NaN as None: Optuna's
    storages keep JSON). Returns the columns."""
    from nngauge.studies._rank import DEFAULT_MEASURES, measure_candidate

    values = measure_candidate(model, data, DEFAULT_MEASURES if measures is None else measures,
                               batch_size=batch_size, generator=generator)
    for column, value in values.items():
        trial.set_user_attr(PREFIX + column, value if math.isfinite(value) else None)
    return values


def _build():
    from nngauge.errors import invalid, require_extra

    require_extra("optuna", "optuna", "nngauge.integrations.optuna.PredictorPruner")
    import numpy as np
    import optuna

    from nngauge.studies._predictors import known_directions

    class PredictorPruner(optuna.pruners.BasePruner):
        """Prune a trial, before it trains, whose recorded predictor ``key`` is bad.

        A trial without the attribute ``"nngauge.<key>"`` is left alone. One with it is pruned
        when the value lies outside ``good`` = (low, high) (``good="benchmark"``: the range
        the report calls ok, where nngauge's committed benchmark shows networks inside it did
        better: :func:`nngauge.report._evidence.benchmark_range`), or, once
        ``n_startup_trials`` other
        trials recorded it, when it is worse than their ``percentile``-th percentile (linear
        interpolation) in the predictor's direction (+1: higher predicts higher accuracy;
        default the known direction of ``key``, as ``nngauge rank`` ranks). An undefined value
        (None: a network whose NLC is undefined) is pruned when ``good`` is set.

        Args:
            key: the measure column (``nlc``, ``nlc_rule``, ``te_nas``, ...).
            good: the range a trial's value must lie in, ``"benchmark"`` (for the columns
                the evidence table counts: nlc, output_bias, rho_max_before_pooling,
                jacobian_growth), or None.
            percentile: in [0, 100): prune below this percentile of earlier trials' values
                (direction applied), or None.
            n_startup_trials: trials with the attribute needed before the percentile applies.
            direction: +1 or -1; default the key's known direction.
        """

        def __init__(self, key: str = "nlc_rule", *,
                     good: Union[tuple[float, float], str, None] = None,
                     percentile: Optional[float] = None, n_startup_trials: int = 4,
                     direction: Optional[int] = None) -> None:
            where = "PredictorPruner()"
            if good is None and percentile is None:
                raise invalid(where, "good=(low, high) or percentile=...", "neither",
                              "pass e.g. good=(1.0, 3.0) for key='nlc', or percentile=25")
            if good == "benchmark":
                from nngauge.report._evidence import benchmark_range

                good = benchmark_range(key)
            if good is not None and not (len(good) == 2 and good[0] <= good[1]):
                raise invalid(where, "good=(low, high) with low <= high", repr(good),
                              "pass e.g. good=(1.0, 3.0)")
            if percentile is not None and not 0 <= percentile < 100:
                raise invalid(where, "percentile in [0, 100)", repr(percentile),
                              "pass e.g. percentile=25")
            known = known_directions()
            if direction is None and key not in known and percentile is not None:
                raise invalid(where, f"a key of known direction {sorted(known)}, or direction=",
                              repr(key), "pass direction=+1 (higher is better) or -1")
            self.key, self.good, self.percentile = key, good, percentile
            self.n_startup_trials = n_startup_trials
            self.direction = known.get(key, 1) if direction is None else direction

        def prune(self, study: "optuna.study.Study",
                  trial: "optuna.trial.FrozenTrial") -> bool:
            name = PREFIX + self.key
            if name not in trial.user_attrs:
                return False
            value = trial.user_attrs[name]
            if self.good is not None:
                if value is None or not self.good[0] <= value <= self.good[1]:
                    return True
            if self.percentile is None or value is None:
                return False
            earlier = [t.user_attrs[name] for t in study.get_trials(deepcopy=False)
                       if t.number != trial.number and t.user_attrs.get(name) is not None]
            if len(earlier) < self.n_startup_trials:
                return False
            threshold = np.percentile([self.direction * v for v in earlier], self.percentile)
            return self.direction * value < threshold

    PredictorPruner.__module__ = __name__
    return PredictorPruner


__getattr__ = built_on_access(__name__, {"PredictorPruner": _build})
