"""The measures a :class:`~nngauge.training.Tracker` knows by name, and how it calls them:
derived from the measure catalogue (:func:`nngauge.catalogue`), plus the Tracker's own two.

The Tracker calls the library's own functions (one implementation, so tracked and functional
values cannot disagree); their modules are imported when a Tracker first names them. It takes
every measure of the catalogue whose ``track`` is not None (every measure but
``fold_batchnorm``, which returns a module; proxies are not tracked). At a measured step a
measure reads one of two inputs:

- **D**, the data: the Tracker's ``data=`` if given (e.g. a held-out batch), else the step's
  batch (tensor or ``(inputs, labels)``; labels where the measure needs them);
- **P**, the probe points: fixed for the whole run, so that curves are comparable (same
  trajectory endpoints, same points): the inputs of ``probe_data=``, else the first 256
  inputs of ``data=``, else of the first batch measured (copied);
- **I**, the network at initialization, for the measures that compare with it
  (``entry.initial``: ``initial_model=I``): the Tracker's ``initial_model=``, else a copy of
  the model as the Tracker first sees it (at its first ``step`` or ``epoch_end`` call).

Rules, from the catalogue entry of the measure:

- what it reads (``entry.reads``) fills the arguments after the model: "batch" gives
  ``data=D``; "points" ``data=P``; "segment" ``x0=P[0], x1=P[1]``; "trajectory"
  ``trajectory=line(P[0], P[1], 65)``; "plane" ``plane=plane(P[0], P[1], P[2])``;
  "weights" nothing (e.g. ``path_norm``);
- its defaults are ``entry.tracker_options``: ``norm_mode="eval"`` for a per-point measure
  (batchnorm with its running statistics: these measures refuse batch statistics), then the
  entry's ``track`` options, lighter than the function's own defaults where a measurement
  every few steps needs it; :class:`~nngauge._catalogue.FirstProbes` ``(n)`` for the first n
  probe points (``region_density`` reads P[:8] unless given ``data=``);
  :data:`~nngauge._catalogue.DATA_SIZE` stands for the number of
  samples of the measure's data at that step (``nlc``'s ``batch_size``: the whole batch as
  one batch); the table of ``docs/api.md`` ("The catalogue") lists them per measure;
- a measure whose function has keyword options without default (``entry.requires``, e.g.
  ``weight_transitions``' ``layer`` and ``direction``) is refused when the Tracker is built
  without them, naming them;
- every measure that takes a ``generator`` gets a new one seeded ``seed`` at every step: the
  same random probes, directions and mini-batches at every step;
- its columns: every numeric field of the result, by the rules of
  :mod:`nngauge.training._flatten` (``nlc``, ``nlc/stderr``, ``trajectory_length/<layer>/length``,
  ``pac_bayes/points/<i>/bound``, ...).

Options replace the defaults and may give the inputs themselves (fixed for every step), e.g.
``("transitions", {"x0": a, "x1": b, "method": "sampled"})``. A deprecated option name
(:data:`nngauge._vocabulary.RENAMES`) still works, with a DeprecationWarning when the Tracker
is built.

The Tracker's own measures (:data:`OWN`), not in the catalogue:

- "weight_norm": sqrt(sum_p ||p||^2) over the parameters; column weight_norm.
- "grad_norm": the same over the gradients the training step left in ``.grad`` (NaN if
  none); column grad_norm.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn

from nngauge._catalogue import DATA_SIZE, Entry, FirstProbes, catalogue
from nngauge._vocabulary import with_new_names
from nngauge.errors import MissingDependencyError, UnknownNameError, invalid
from nngauge.trajectories import line, plane

PROBE_SAMPLES = 256
"""P: the first this many inputs of ``data=`` or of the first batch measured."""
TRAJECTORY_POINTS = 65
"""Points of the line a measure reading a trajectory is fed (refined by the measure)."""


class StepInputs:
    """What a measure may read at a measured step: the data D and the probe points P.

    Args:
        data: D, or None when the step has none (an error only if a measure reads it).
        probes: returns P, an (n, ...) tensor, collected on first use.
        initial: returns I, the network at initialization (None: no measure reads it).
    """

    def __init__(self, data: Any, probes: Callable[[], torch.Tensor],
                 initial: Optional[Callable[[], nn.Module]] = None) -> None:
        self._data, self._probes, self._initial = data, probes, initial

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

    @property
    def initial(self) -> nn.Module:
        if self._initial is None:
            raise invalid("Tracker", "the network at initialization", "none",
                          "build the Tracker with initial_model=")
        return self._initial()

    def first_probes(self, n: int, measure: str) -> torch.Tensor:
        """P[:n], refusing fewer than ``n`` probe points."""
        points = self.probes
        if len(points) < n:
            raise invalid(f"Tracker measure {measure!r}", f"at least {n} probe points",
                          f"{len(points)}", f"pass probe_data= with {n} or more inputs, or "
                          "the measure's input as an option")
        return points[:n]


Source = Callable[[StepInputs, str], Any]
"""``source(step_inputs, measure name) -> argument value``."""


def _data(at: StepInputs, measure: str) -> Any:
    return at.data


def _probes(at: StepInputs, measure: str) -> torch.Tensor:
    return at.probes


def _endpoint(i: int) -> Source:
    def source(at: StepInputs, measure: str) -> torch.Tensor:
        return at.first_probes(2, measure)[i]

    return source


def _line(at: StepInputs, measure: str):
    x0, x1 = at.first_probes(2, measure)
    return line(x0, x1, TRAJECTORY_POINTS)


def _plane(at: StepInputs, measure: str):
    return plane(*at.first_probes(3, measure))


def _initial(at: StepInputs, measure: str) -> nn.Module:
    return at.initial


INITIAL: Mapping[str, Source] = {"initial_model": _initial}
"""What feeds a measure that reads the network at initialization (``entry.initial``)."""


FEEDS: dict[str, Mapping[str, Source]] = {
    "batch": {"data": _data},
    "points": {"data": _probes},
    "segment": {"x0": _endpoint(0), "x1": _endpoint(1)},
    "trajectory": {"trajectory": _line},
    "plane": {"plane": _plane},
    "weights": {},
}
"""What a catalogue entry reads (``entry.reads``) -> the arguments that feed it at a step."""


@dataclass(frozen=True)
class TrackedMeasure:
    """How the Tracker calls one named measure.

    Attributes:
        module: the module holding the function of the measure's name (imported on use).
        inputs: arguments filled at each step unless given as options: name ->
            ``source(step_inputs, measure name)``.
        defaults: options that differ from the function's own defaults
            (:data:`~nngauge._catalogue.DATA_SIZE`: the number of samples of the data).
        requires: options without a default the Tracker must be given.
    """

    module: str
    inputs: Mapping[str, Source] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()


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


OWN = ("weight_norm", "grad_norm")
"""The Tracker's own measures (functions of this module), the only names it knows that the
catalogue does not."""


def _tracked(entry: Entry) -> TrackedMeasure:
    inputs = {**FEEDS[entry.reads], **(INITIAL if entry.initial else {})}
    return TrackedMeasure(entry.module, inputs, entry.tracker_options, entry.requires)


REGISTRY: dict[str, TrackedMeasure] = {
    **{entry.name: _tracked(entry) for entry in catalogue().measures()
       if entry.track is not None},
    **{name: TrackedMeasure(__name__) for name in OWN},
}
"""Name -> how the Tracker calls it: the catalogue's tracked measures, then :data:`OWN`."""


def _size(data: Any) -> int:
    """The number of samples of a measure's data (250 for data without a length)."""
    inputs = data[0] if isinstance(data, (tuple, list)) else data
    return len(inputs) if hasattr(inputs, "__len__") else 250


Bound = Callable[[nn.Module, StepInputs, torch.Generator], Any]


def bind(name: str, spec: Any, options: Mapping[str, Any]) -> Bound:
    """A measure ready to run at a step: ``run(model, inputs, generator) -> output``.

    ``spec`` is a registry name (the function is called ``f(model, **arguments)``) or a
    callable (called ``f(model, D, **options)``); either gets ``generator=`` if it takes one.

    Raises:
        UnknownNameError: a name not in :data:`REGISTRY`.
        MissingDependencyError: the name's module cannot be imported in this installation.
        InvalidInputError: an option the function does not take, or an option it has no
            default for missing (``requires``).
    """
    if "generator" in options:
        raise invalid(f"Tracker measure {name!r}", "options without generator=",
                      "generator=", "pass the Tracker's generator= instead (every step reseeds "
                      "each measure's generator with its seed)")
    if isinstance(spec, str):
        entry = _entry(spec)
        function = _load(spec, entry)
        options = with_new_names(function, options, f"Tracker measure {name!r}")
        inputs, options = entry.inputs, {**entry.defaults, **options}
        _check_required(name, spec, entry.requires, {*options, *inputs})
    elif callable(spec):
        function, inputs = spec, None
    else:
        raise invalid("Tracker()", "measure names, callables or (measure, options) pairs",
                      repr(spec), f"use names from {sorted(REGISTRY)}")
    seeded = _check_arguments(name, function, {*options, *(inputs or ())})

    def run(model: nn.Module, at: StepInputs, generator: torch.Generator) -> Any:
        """The measure at a step (``run.reads_initial``: whether it reads I)."""
        arguments = dict(options, **({"generator": generator} if seeded else {}))
        if inputs is None:
            return function(model, at.data, **arguments)
        for argument, source in inputs.items():
            if argument not in arguments:
                arguments[argument] = source(at, name)
        arguments = {key: at.first_probes(value.n, name) if isinstance(value, FirstProbes)
                     else value for key, value in arguments.items()}
        return function(model, **{key: _size(arguments["data"]) if value is DATA_SIZE else value
                                  for key, value in arguments.items()})

    run.reads_initial = bool(inputs) and "initial_model" in inputs and (
        "initial_model" not in options)
    return run


def _check_required(name: str, spec: str, requires: tuple[str, ...], given: set[str]) -> None:
    """Refuse a measure built without the options its function has no default for."""
    missing = [option for option in requires if option not in given]
    if missing:
        wanted = ", ".join(f"{option}=" for option in missing)
        example = ", ".join(f"{option!r}: ..." for option in missing)
        raise invalid(f"Tracker measure {name!r}", f"the option(s) {wanted} (nngauge.{spec} "
                      "has no default for them)", "none", f"pass them: ({spec!r}, "
                      f"{{{example}}})")


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

