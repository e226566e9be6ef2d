"""Empirical measures on (model, data): one function per measure, in three families.

- :mod:`~nngauge.measures.propagation`: signal propagation (NLC, Jacobians, correlations,
  kernels, region size, skimming);
- :mod:`~nngauge.measures.expressivity`: trajectories, transitions, patterns, linear regions on a
  plane, region density, dichotomies, weight-noise robustness;
- :mod:`~nngauge.measures.generalization`: margins, norms and paths, folding, sharpness,
  PAC-Bayes, conditions C1-C3;
- :mod:`~nngauge.measures.curvature`: the loss Hessian (top eigenvalues, trace, density),
  loss landscapes with their region boundaries, weight-space transitions.

Every name is re-exported here (and at ``nngauge``); every result records how the model was
run in its ``mode`` (:class:`MeasurementMode`). Results, and the rows of their per-layer
breakdowns, are frozen dataclasses with one protocol (:class:`nngauge._results.Result`):
``to_dict()`` (plain Python), ``to_frame()`` (pandas: one row per layer), ``plot(ax=None)``
(matplotlib: returns the Axes) and, for a result with per-layer rows, ``result["layer name"]``.
"""

from nngauge._internal.adapter import MeasurementMode
from nngauge.measures.curvature import *  # noqa: F401,F403
from nngauge.measures.curvature import __all__ as _CURVATURE
from nngauge.measures.expressivity import *  # noqa: F401,F403
from nngauge.measures.expressivity import __all__ as _EXPRESSIVITY
from nngauge.measures.generalization import *  # noqa: F401,F403
from nngauge.measures.generalization import __all__ as _GENERALIZATION
from nngauge.measures.propagation import *  # noqa: F401,F403
from nngauge.measures.propagation import __all__ as _PROPAGATION

__all__ = ["MeasurementMode", *_PROPAGATION, *_EXPRESSIVITY, *_GENERALIZATION, *_CURVATURE]
