"""Integrations with training frameworks; each imports its framework only when used.

- :mod:`nngauge.integrations.lightning`: ``GaugeCallback``, a Lightning callback running a
  :class:`nngauge.training.Tracker` (needs ``pip install 'nngauge[lightning]'``).
"""
