"""Integrations with training frameworks; each imports its framework only when used.

- :mod:`nngauge.integrations.lightning`: ``GaugeCallback``, a Lightning callback running a
  :class:`nngauge.training.Tracker` (needs ``pip install 'nngauge[lightning]'``).
- :mod:`nngauge.integrations.optuna`: ``record_predictors`` (nngauge's predictors as a
  trial's user attributes, before training) and ``PredictorPruner`` (stops a trial before it
  trains when they are bad; needs ``pip install 'nngauge[optuna]'``).
"""
