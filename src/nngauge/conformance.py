"""Conformance: every public measure and proxy on every network of the zoo, in scikit-learn's
estimator-checks habit.

The cells come from the measure catalogue (:func:`nngauge.catalogue`): one per entry, named
as the entry (``"nlc"``; a proxy ``"proxies.<name>"``), and one per variant of an entry
(``"kernel_conditioning[ntk]"``, ``"transitions[sampled]"``, ``"loss_landscape[regions]"``).
A cell runs the entry's function on one :mod:`nngauge.zoo` network with the entry's cheap
options (and its variant's), and ends in one of three ways:

- ``"ok"``: a result (the cell's summary is the entry's headline number);
- ``"refused"``: an :class:`~nngauge.NNGaugeError` saying what was expected, what was got and
  the fix (a measure that does not apply to this network, e.g. exact transitions of a network
  with attention);
- ``"crash"``: anything else, which is a bug.

After every cell the model's state (train/eval mode of every module, parameters, buffers,
``requires_grad`` flags, hooks) must be as before (``state_kept``). What a cell feeds the
function follows from what the entry reads (:data:`FEEDS`) and from the network:

- a batch: the :data:`N_SAMPLES` inputs, with their labels where the entry reads labels;
  points: the inputs; a segment: the first quarter of the one between the first two inputs
  (:data:`TRANSITIONS_FRACTION`); a trajectory: the line between them (9 points); a plane:
  the plane through the first three; the weights: nothing;
- per-point measures (``entry.per_point``) run batchnorm networks with ``norm_mode="frozen"``
  on the inputs, and token models from their embedding (the points above are then embedded;
  ``input_module`` and a raw ``template``), each where the function takes the option;
- an option the function has no default for: ``layer`` is the network's first weight layer;
- a measure reading the network at initialization (``entry.initial``) gets the same zoo
  network built with the seed :data:`INITIAL_SEED` as ``initial_model``;
- every function that takes a ``generator`` gets one seeded 0;
- the rules of single entries, keyed by their cell name (:data:`RULES`): path_norm's graph
  from the zoo's ``input_shape``, skim's first block,
  weight_transitions' random direction, weight_noise_robustness on the first weight layer,
  exact regions and region density where the network is piecewise linear (on a grid, or
  sampled, elsewhere), and fold_batchnorm's check of the folded function.

The test suite asserts on the matrix and checks the values against brute force;
``python benchmarks/conformance_matrix.py`` prints it.

Example:
    >>> from nngauge.conformance import run_cell
    >>> cell, result = run_cell("nlc", "dropout_mlp")
    >>> cell.status, cell.state_kept
    ('ok', True)
"""

from __future__ import annotations

import copy
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Sequence

import torch
from torch import nn

from nngauge._catalogue import Entry, catalogue
from nngauge._internal.adapter import batch_coupled, select_output
from nngauge._vocabulary import renamed
from nngauge.errors import NNGaugeError
from nngauge.trajectories import line, plane
from nngauge.zoo import ZOO, ZooEntry, sample_inputs, sample_labels

Status = Literal["ok", "refused", "crash"]
N_SAMPLES = 8
"""Samples per cell."""
TRAJECTORY_POINTS = 9
"""Points of the line a cell reading a trajectory is fed (refined by the measure)."""
INITIAL_SEED = 1
"""The seed of the zoo network a cell gives as ``initial_model`` (the measured one: 0)."""
TRANSITIONS_FRACTION = 0.25
"""A segment is the first quarter of the one between the two inputs: the zoo's ResNets cross
thousands of patterns on the whole of it, which proves no more."""


@dataclass(frozen=True)
class Cell:
    """One measure on one zoo network.

    Attributes:
        measure, model: the names of the cell (in :data:`MEASURES`) and of the zoo entry.
        status: "ok", "refused" (an NNGaugeError) or "crash" (any other exception).
        summary: the headline value, or the error's message.
        seconds: wall time of the cell.
        state_kept: whether the model's modes, parameters, buffers, requires_grad flags and
            hooks were left unchanged.
    """

    measure: str
    model: str
    status: Status
    summary: str
    seconds: float
    state_kept: bool


@dataclass(frozen=True)
class Inputs:
    """What a cell feeds a zoo network: raw inputs and labels, the settings that make
    per-point measures applicable, and three points (embedded for token models) for segments,
    trajectories and planes."""

    entry: ZooEntry
    x: torch.Tensor
    y: torch.Tensor
    norm_mode: Optional[str]
    input_module: Optional[str]
    point0: torch.Tensor
    point1: torch.Tensor
    template: Optional[torch.Tensor]
    point2: Optional[torch.Tensor] = None

    @property
    def per_point(self) -> dict:
        """Options of per-point measures (trajectories, patterns, transitions)."""
        options: dict[str, Any] = {"norm_mode": self.norm_mode, "norm_data": self.x}
        if self.input_module is not None:
            options.update(input_module=self.input_module, template=self.template)
        return options


@renamed(seed="generator")
def prepare(entry: ZooEntry, model: nn.Module, *, generator: int = 0) -> Inputs:
    """The inputs of a cell for ``model`` (built from ``entry``), drawn with the int seed
    ``generator``."""
    x = sample_inputs(entry, N_SAMPLES, generator=generator)
    y = sample_labels(entry, N_SAMPLES, generator=generator)
    if entry.input_module is not None:
        with torch.no_grad():
            points = model.get_submodule(entry.input_module)(x[:3]).detach()
        template = x[0]
    else:
        points, template = x[:3], None
    return Inputs(entry, x, y, "frozen" if batch_coupled(model) else None, entry.input_module,
                  points[0], points[1], template, points[2])


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _first_weight_layer(model: nn.Module) -> str:
    return next(name for name, m in model.named_modules()
                if isinstance(m._parameters.get("weight"), torch.Tensor) and m.weight.dim() > 1)


def _first_block(model: nn.Module) -> tuple[str, str]:
    """The first two children of the first nn.Sequential with two or more children."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Sequential) and len(module) >= 2:
            prefix = f"{name}." if name else ""
            keys = list(module._modules)
            return prefix + keys[0], prefix + keys[1]
    return "", ""


Feed = Callable[[Entry, Inputs], dict]

FEEDS: dict[str, Feed] = {
    "batch": lambda e, d: {"data": (d.x, d.y) if e.labels else d.x},
    "points": lambda e, d: {"data": d.x},
    "segment": lambda e, d: {"x0": d.point0,
                             "x1": torch.lerp(d.point0, d.point1, TRANSITIONS_FRACTION)},
    "trajectory": lambda e, d: {"trajectory": line(d.point0, d.point1, TRAJECTORY_POINTS)},
    "plane": lambda e, d: {"plane": plane(d.point0, d.point1, d.point2)},
    "weights": lambda e, d: {},
}
"""What a catalogue entry reads (``entry.reads``) -> the cell's arguments after the model
(those the function does not take are dropped)."""


def _weight_direction(model: nn.Module, d: Inputs) -> dict:
    """A random line of the first weight layer's weights."""
    name = _first_weight_layer(model)
    weight = model.get_submodule(name).weight
    direction = torch.randn(weight.shape, generator=_generator(), dtype=weight.dtype)
    return {"layer": name, "direction": {"weight": direction}}


def _exact_where_piecewise_linear(other: str) -> Callable[[nn.Module, Inputs], dict]:
    """``method="exact"`` on networks piecewise linear from their own input, else ``other``."""
    def rule(model: nn.Module, d: Inputs) -> dict:
        exact = d.entry.piecewise_linear and d.input_module is None
        return {"method": "exact" if exact else other}

    return rule


RULES: dict[str, Callable[[nn.Module, Inputs], dict]] = {
    "path_norm": lambda m, d: {"input_shape": d.entry.input_shape},
    "skim": lambda m, d: {"layers": _first_block(m)},
    "weight_transitions": _weight_direction,
    "weight_noise_robustness": lambda m, d: {"layers": [_first_weight_layer(m)]},
    "regions": _exact_where_piecewise_linear("grid"),
    "region_density": _exact_where_piecewise_linear("sampled"),
}
"""Cell name of an entry (:func:`cell_name`: a proxy's is ``proxies.<name>``) -> the options
its cells add for a network."""


def _folded_change(model: nn.Module, d: Inputs, folded: nn.Module) -> float:
    """The largest relative change of the eval-mode function by fold_batchnorm's copy."""
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        a, _ = select_output(reference(d.x), None)
        b, _ = select_output(folded(d.x), None)
    return float(((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).double())


CHECKS: dict[str, Callable[[nn.Module, Inputs, Any], Any]] = {"fold_batchnorm": _folded_change}
"""Cell name of an entry -> what its cells make of the function's output (default: the
output)."""


def _cell(entry: Entry, variant: Optional[str]) -> Callable[[nn.Module, Inputs], Any]:
    """The cell function ``(model, inputs) -> result`` of one entry (and variant)."""
    options = entry.options(variant)

    def run(model: nn.Module, d: Inputs) -> Any:
        function = entry.function
        taken = inspect.signature(function).parameters
        arguments = FEEDS[entry.reads](entry, d)
        if entry.per_point:
            arguments.update(d.per_point)
        if "layer" in entry.requires:
            arguments["layer"] = _first_weight_layer(model)
        if entry.initial:
            arguments["initial_model"] = d.entry.build(generator=INITIAL_SEED)
        if "generator" in taken:
            arguments["generator"] = _generator()
        rule, check = RULES.get(cell_name(entry)), CHECKS.get(cell_name(entry))
        arguments.update(rule(model, d) if rule is not None else {}, **options)
        output = function(model, **{k: v for k, v in arguments.items() if k in taken})
        return output if check is None else check(model, d, output)

    return run


def cell_name(entry: Entry, variant: Optional[str] = None) -> str:
    """``"nlc"``, ``"transitions[sampled]"``, ``"proxies.synflow"``."""
    name = entry.name if entry.kind == "measure" else f"proxies.{entry.name}"
    return name if variant is None else f"{name}[{variant}]"


CELLS: dict[str, tuple[Entry, Optional[str]]] = {
    cell_name(entry, variant): (entry, variant)
    for entry in catalogue() for variant in (None, *entry.variants)}
"""Cell name -> its catalogue entry and variant (None: the cheap options alone)."""

MEASURES: dict[str, Callable[[nn.Module, Inputs], Any]] = {
    name: _cell(entry, variant) for name, (entry, variant) in CELLS.items()}
"""Every public measure and proxy as a cell function ``(model, inputs) -> result``."""


def headline(result: Any, fields: Sequence[str] = ()) -> str:
    """A short text of a result's main number: a float itself, else the first of ``fields``
    (a catalogue entry's headline) holding a number or a tuple ending in one, else the number
    of its per-layer rows, else its class."""
    if isinstance(result, float):
        return f"{result:.4g}"
    for name in fields:
        value = getattr(result, name, None)
        if isinstance(value, (int, float)):
            return f"{name}={value:.4g}"
        if isinstance(value, tuple) and value and isinstance(value[-1], float):
            return f"{name}[-1]={value[-1]:.4g}"
    layers = getattr(result, "layers", None)
    if layers:
        return f"{type(result).__name__} ({len(layers)} rows)"
    return type(result).__name__


def model_state(model: nn.Module) -> dict:
    """Everything a measure must leave as it found it."""
    return {
        "modes": [m.training for m in model.modules()],
        "tensors": [t.detach().clone() for t in list(model.parameters()) + list(model.buffers())],
        "grads": [p.requires_grad for p in model.parameters()],
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks)
                     + len(m._backward_hooks) for m in model.modules()),
    }


def same_state(a: dict, b: dict) -> bool:
    return (a["modes"] == b["modes"] and a["grads"] == b["grads"] and a["hooks"] == b["hooks"]
            and len(a["tensors"]) == len(b["tensors"])
            and all(torch.equal(s, t) for s, t in zip(a["tensors"], b["tensors"])))


@renamed(seed="generator")
def run_cell(measure: str, model_name: str, *, generator: int = 0) -> tuple[Cell, Any]:
    """Run one cell on a fresh model built and fed with the int seed ``generator``; returns
    the :class:`Cell` and the result (or None)."""
    entry = ZOO[model_name]
    model = entry.build(generator=generator)
    inputs = prepare(entry, model, generator=generator)
    before = model_state(model)
    start = time.perf_counter()
    result, status = None, "ok"
    try:
        result = MEASURES[measure](model, inputs)
        summary = headline(result, CELLS[measure][0].headline)
    except NNGaugeError as exc:
        status, summary = "refused", str(exc)
    except Exception as exc:  # a crash is what conformance exists to find
        status, summary = "crash", f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    return Cell(measure, model_name, status, summary, seconds,
                same_state(before, model_state(model))), result


def matrix(measures: Optional[Sequence[str]] = None,
           models: Optional[Sequence[str]] = None) -> list[Cell]:
    """Every cell of ``measures`` x ``models`` (default: all of both)."""
    return [run_cell(measure, name)[0] for name in (models or list(ZOO))
            for measure in (measures or list(MEASURES))]


def format_matrix(cells: Sequence[Cell]) -> str:
    """The matrix as a text table: a row per model, a column per measure; "ok", "-" for a
    refusal, "CRASH", and "!" after a cell that changed the model's state."""
    measures = list(dict.fromkeys(c.measure for c in cells))
    models = list(dict.fromkeys(c.model for c in cells))
    mark = {"ok": "ok", "refused": "-", "crash": "CRASH"}
    by_key = {(c.model, c.measure): c for c in cells}
    width = max(len(m) for m in models)
    lines = [" " * width + " | " + " | ".join(f"{i:>2}" for i in range(len(measures)))]
    for model in models:
        row = [mark[by_key[model, m].status] + ("" if by_key[model, m].state_kept else "!")
               for m in measures]
        lines.append(f"{model:<{width}} | " + " | ".join(f"{r:>2}" for r in row))
    lines.append("")
    lines += [f"{i:>2}: {m}" for i, m in enumerate(measures)]
    return "\n".join(lines)


__all__ = ["CELLS", "Cell", "Inputs", "MEASURES", "N_SAMPLES", "cell_name", "format_matrix",
           "headline", "matrix", "model_state", "prepare", "run_cell", "same_state"]
