"""The measures a :class:`~nngauge.training.Tracker` knows by name, and how it calls them.

The Tracker calls the library's own functions (one implementation, so tracked and functional
values cannot disagree); their modules are imported when a Tracker first names them. At a
measured step a measure reads one of two inputs:

- **D**, the data: the Tracker's ``data=`` if given (e.g. a held-out batch), else the step's
  batch (tensor or ``(inputs, labels)``; labels where the measure needs them);
- **P**, the probe points: fixed for the whole run, so that curves are comparable (same
  trajectory endpoints, same points): the inputs of ``probe_data=``, else the first 256
  inputs of ``data=``, else of the first batch measured (copied).

Every measure that takes a ``generator`` gets a new one seeded ``seed`` at every step: the
same random probes, directions and mini-batches at every step. By name (function, what it
reads, defaults that differ from the function's, main columns; every other numeric field is a
column too, by the rules of :mod:`nngauge.training._flatten`):

Propagation
    - "nlc": :func:`nngauge.nlc` on D, batch_size = len(D); nlc, nlc/stderr,
      nlc/jacobian_rms, nlc/input_std, nlc/output_std, nlc/output_bias.
    - "nlc_profile": :func:`nngauge.nlc_profile` on D, batch_size = len(D);
      nlc_profile/<layer>/nlc (and /stderr, /jacobian_rms, /output_std, /output_bias).
    - "jacobian_norm": :func:`nngauge.jacobian_norm` on D, batch_size = len(D);
      jacobian_norm/norm, /mean, /median, /max, jacobian_norm/<layer>/norm.
    - "correlations": :func:`nngauge.correlations` on P; correlations/rho_max,
      correlations/<layer>/mean (and /min, /max).
    - "gradient_metrics": :func:`nngauge.gradient_metrics` on D (labels),
      batch_size = len(D); gradient_metrics/gvcs, /gradient_length, /lipschitz, /mean_loss.
    - "kernel_conditioning": :func:`nngauge.kernel_conditioning` on P;
      kernel_conditioning/<layer>/condition_number, /mean_normalized_dot_product (and their
      theory_ values).

Expressivity (norm_mode="eval": batchnorm with running statistics, as these per-point
measures refuse batch statistics)
    - "trajectory_length": :func:`nngauge.trajectory_length` along
      ``trajectories.line(P[0], P[1], 65)`` (option ``trajectory=``);
      trajectory_length/<layer>/length, /growth; trajectory_length/lengths/<i>.
    - "transitions": :func:`nngauge.transitions` on the segment x0 = P[0], x1 = P[1]
      (options ``x0=``, ``x1=``); transitions/n_patterns, /n_transitions, /n_pieces,
      transitions/<layer>/transitions, transitions/per_layer/<i>.
    - "region_density": :func:`nngauge.region_density` around the first 8 points of P
      (option ``data=``: a tensor of points), radius = 0.05 x the root-mean-square distance
      of those points to their mean (option ``radius=``); region_density/density, /local_complexity,
      region_density/<layer>/transitions_per_length.
    - "activation_patterns": :func:`nngauge.activation_patterns` over P (option
      ``data=``); activation_patterns/n_patterns, activation_patterns/<layer>/n_patterns.

Generalization (labels in D)
    - "capacity": :func:`nngauge.capacity` on D; capacity/margin, /l2, /l1_path, /l2_path,
      /spectral, capacity/measures/<measure>/log10_capacity, capacity/<layer>/spectral.
    - "margin": :func:`nngauge.margin` on D; margin, margin/hard_margin, /mean_margin,
      /train_error.
    - "path_norm": :func:`nngauge.path_norm` (p=2; option ``p=1``); path_norm.
    - "sharpness": :func:`nngauge.sharpness` on D, n_iter=100 (the paper: 2000);
      sharpness, sharpness/loss, /max_loss.
    - "expected_sharpness": :func:`nngauge.expected_sharpness` on D, alpha=1e-3,
      n_probes=100 (the paper: 1000); expected_sharpness, /stderr, /expected_loss, /kl.
    - "pac_bayes": :func:`nngauge.pac_bayes` on D, alphas=(1e-3, 3e-3, 1e-2),
      n_probes=100; pac_bayes/best_bound, /best_alpha, pac_bayes/points/<i>/bound (/kl,
      /expected_sharpness), one point per alpha.
    - "sharpness_conditions": :func:`nngauge.sharpness_conditions` on D;
      sharpness_conditions/mu, /condition_number, /c2, /c3, sharpness_conditions/<layer>/c2.

Curvature (labels in D)
    - "hessian": :func:`nngauge.hessian` on D; hessian/eigenvalues/0, /trace, /trace_stderr,
      /residuals/0.
    - "loss_landscape": :func:`nngauge.loss_landscape` on D along one line, dims=1,
      resolution=21
      (the filter-normalized direction is drawn from the same seed at every step and rescaled
      to the current weights); loss_landscape/center_loss, /min_loss, /losses/<i>.
    - "weight_transitions": :func:`nngauge.weight_transitions` of the inputs of D, with the
      options ``layer=`` and ``direction=`` (required: the same line at every step);
      weight_transitions/n_changes, /mean_per_sample, weight_transitions/<layer>/transitions.

The Tracker's own
    - "weight_norm": sqrt(sum_p ||p||^2) over the parameters; weight_norm.
    - "grad_norm": the same over the gradients the training step left in ``.grad`` (NaN if
      none); grad_norm.

Options replace the defaults and may give the inputs themselves (fixed for every step), e.g.
``("transitions", {"x0": a, "x1": b, "method": "sampled"})``. A deprecated option name
(:data:`nngauge._vocabulary.RENAMES`) still works, with a DeprecationWarning when the Tracker
is built.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable, Mapping

import torch
from torch import nn

from nngauge._vocabulary import with_new_names
from nngauge.errors import MissingDependencyError, UnknownNameError, invalid
from nngauge.trajectories import Trajectory, line

PROBE_SAMPLES = 256
DENSITY_POINTS = 8
DENSITY_RADIUS = 0.05
TRAJECTORY_POINTS = 65


class StepInputs:
    """What a measure may read at a measured step: the data D and the probe points P.

    Args:
        data: D, or None when the step has none (an error only if a measure reads it).
        probes: returns P, an (n, ...) tensor, collected on first use.
    """

    def __init__(self, data: Any, probes: Callable[[], torch.Tensor]) -> None:
        self._data, self._probes = data, probes

    @property
    def data(self) -> Any:
        if self._data is None:
            raise invalid("Tracker", "a batch (or a Tracker built with data=)", "None",
                          "pass the batch: tracker.step(model, batch) or "
                          "tracker.epoch_end(model, batch)")
        return self._data

    @property
    def probes(self) -> torch.Tensor:
        return self._probes()

    def probe_pair(self, measure: str) -> torch.Tensor:
        """P[0] and P[1], refusing fewer than two probe points."""
        points = self.probes
        if len(points) < 2:
            raise invalid(f"Tracker measure {measure!r}", "at least 2 probe points",
                          f"{len(points)}", "pass probe_data= with two or more inputs, or "
                          "the measure's endpoints as options")
        return points[:2]


Source = Callable[[StepInputs, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class TrackedMeasure:
    """How the Tracker calls one named measure.

    Attributes:
        module: the module holding the function of the measure's name (imported on use).
        inputs: arguments filled at each step unless given as options: name ->
            ``source(step_inputs, arguments so far)``, in order.
        defaults: options that differ from the function's own defaults.
    """

    module: str
    inputs: Mapping[str, Source] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


def weight_norm(model: nn.Module) -> float:
    """sqrt(sum_p ||p||^2) over the parameters, in float64."""
    with torch.no_grad():
        return math.sqrt(sum(float(p.double().pow(2).sum()) for p in model.parameters()))


def grad_norm(model: nn.Module) -> float:
    """sqrt(sum_p ||grad p||^2) over the gradients in ``.grad``; NaN when there are none."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return math.nan
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))


def _data(at: StepInputs, arguments: Mapping[str, Any]) -> Any:
    return at.data


def _size(at: StepInputs, arguments: Mapping[str, Any]) -> int:
    """The number of samples of the measure's data (250 for data without a length)."""
    data = arguments["data"]
    inputs = data[0] if isinstance(data, (tuple, list)) else data
    return len(inputs) if hasattr(inputs, "__len__") else 250


def _probes(at: StepInputs, arguments: Mapping[str, Any]) -> torch.Tensor:
    return at.probes


def _line(at: StepInputs, arguments: Mapping[str, Any]) -> Trajectory:
    x0, x1 = at.probe_pair("trajectory_length")
    return line(x0, x1, TRAJECTORY_POINTS)


def _endpoint(i: int) -> Source:
    def source(at: StepInputs, arguments: Mapping[str, Any]) -> torch.Tensor:
        return at.probe_pair("transitions")[i]

    return source


def _density_points(at: StepInputs, arguments: Mapping[str, Any]) -> torch.Tensor:
    return at.probes[:DENSITY_POINTS]


def _density_radius(at: StepInputs, arguments: Mapping[str, Any]) -> float:
    """0.05 x the root-mean-square distance of the measured points to their mean."""
    points = torch.as_tensor(arguments["data"]).flatten(1).double()
    spread = float((points - points.mean(0)).pow(2).sum(1).mean().sqrt())
    if not spread > 0:
        raise invalid("Tracker measure 'region_density'", "points that differ (the default "
                      "radius is 0.05 x their spread)", f"{len(points)} point(s) with spread 0",
                      "pass the option radius=")
    return DENSITY_RADIUS * spread


_MEASURES = "nngauge.measures"
_BATCH = {"data": _data, "batch_size": _size}
_EVAL = {"norm_mode": "eval"}

REGISTRY: dict[str, TrackedMeasure] = {
    "nlc": TrackedMeasure(_MEASURES, _BATCH),
    "nlc_profile": TrackedMeasure(_MEASURES, _BATCH),
    "jacobian_norm": TrackedMeasure(_MEASURES, _BATCH),
    "correlations": TrackedMeasure(_MEASURES, {"data": _probes}),
    "gradient_metrics": TrackedMeasure(_MEASURES, _BATCH),
    "kernel_conditioning": TrackedMeasure(_MEASURES, {"data": _probes}),
    "trajectory_length": TrackedMeasure(_MEASURES, {"trajectory": _line}, _EVAL),
    "transitions": TrackedMeasure(_MEASURES, {"x0": _endpoint(0), "x1": _endpoint(1)}, _EVAL),
    "region_density": TrackedMeasure(_MEASURES, {"data": _density_points,
                                                 "radius": _density_radius}, _EVAL),
    "activation_patterns": TrackedMeasure(_MEASURES, {"data": _probes}, _EVAL),
    "capacity": TrackedMeasure(_MEASURES, {"data": _data}),
    "margin": TrackedMeasure(_MEASURES, {"data": _data}),
    "path_norm": TrackedMeasure(_MEASURES),
    "sharpness": TrackedMeasure(_MEASURES, {"data": _data}, {"n_iter": 100}),
    "expected_sharpness": TrackedMeasure(_MEASURES, {"data": _data}, {
        "alpha": 1e-3, "n_probes": 100}),
    "pac_bayes": TrackedMeasure(_MEASURES, {"data": _data}, {
        "alphas": (1e-3, 3e-3, 1e-2), "n_probes": 100}),
    "sharpness_conditions": TrackedMeasure(_MEASURES, {"data": _data}),
    "hessian": TrackedMeasure(_MEASURES, {"data": _data}),
    "loss_landscape": TrackedMeasure(_MEASURES, {"data": _data}, {"dims": 1,
                                                                  "resolution": 21}),
    "weight_transitions": TrackedMeasure(_MEASURES, {"data": _data}, _EVAL),
    "weight_norm": TrackedMeasure(__name__),
    "grad_norm": TrackedMeasure(__name__),
}

Bound = Callable[[nn.Module, StepInputs, torch.Generator], Any]


def bind(name: str, spec: Any, options: Mapping[str, Any]) -> Bound:
    """A measure ready to run at a step: ``run(model, inputs, generator) -> output``.

    ``spec`` is a registry name (the function is called ``f(model, **arguments)``) or a
    callable (called ``f(model, D, **options)``); either gets ``generator=`` if it takes one.

    Raises:
        UnknownNameError: a name not in :data:`REGISTRY`.
        MissingDependencyError: the name's module cannot be imported in this installation.
        InvalidInputError: an option the function does not take.
    """
    if "generator" in options:
        raise invalid(f"Tracker measure {name!r}", "options without generator=",
                      "generator=", "pass the Tracker's seed= instead (every step reseeds it)")
    if isinstance(spec, str):
        entry = _entry(spec)
        function = _load(spec, entry)
        options = with_new_names(function, options, f"Tracker measure {name!r}")
        inputs, options = entry.inputs, {**entry.defaults, **options}
    elif callable(spec):
        function, inputs = spec, None
    else:
        raise invalid("Tracker()", "measure names, callables or (measure, options) pairs",
                      repr(spec), f"use names from {sorted(REGISTRY)}")
    seeded = _check_arguments(name, function, {*options, *(inputs or ())})

    def run(model: nn.Module, at: StepInputs, generator: torch.Generator) -> Any:
        arguments = dict(options, **({"generator": generator} if seeded else {}))
        if inputs is None:
            return function(model, at.data, **arguments)
        for argument, source in inputs.items():
            if argument not in arguments:
                arguments[argument] = source(at, arguments)
        return function(model, **arguments)

    return run


def _entry(name: str) -> TrackedMeasure:
    if name not in REGISTRY:
        raise UnknownNameError(
            f"Tracker() expected a measure name in {sorted(REGISTRY)} or a callable; got "
            f"{name!r}. Fix: use one of those names or pass a function f(model, data) -> float.")
    return REGISTRY[name]


def _load(name: str, entry: TrackedMeasure) -> Callable[..., Any]:
    try:
        return getattr(import_module(entry.module), name)
    except (ImportError, AttributeError) as exc:
        raise MissingDependencyError(
            f"Tracker() expected measure {name!r} from {entry.module}; got {type(exc).__name__}"
            f": {exc}. Fix: install a version of nngauge that has {entry.module}.{name}, or "
            "drop the measure.") from exc


def _check_arguments(name: str, function: Callable[..., Any], arguments: set[str]) -> bool:
    """Refuse arguments the function does not take; whether it takes ``generator``."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    unknown = arguments - set(list(parameters)[1:])
    if unknown and not open_ended:
        raise invalid(f"Tracker measure {name!r}", f"options among {list(parameters)[1:]}",
                      f"{sorted(unknown)}", "drop or rename those options")
    return "generator" in parameters

