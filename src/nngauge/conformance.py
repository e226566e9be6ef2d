"""Conformance: every public measure on every network of the zoo, in scikit-learn's
estimator-checks habit.

Each cell of the model x measure matrix runs one measure on one :mod:`nngauge.zoo` network
with small, fast settings, and ends in one of three ways:

- ``"ok"``: a result (the cell's summary is its headline number);
- ``"refused"``: an :class:`~nngauge.NNGaugeError` saying what was expected, what was got and
  the fix (a measure that does not apply to this network, e.g. exact transitions of a network
  with attention);
- ``"crash"``: anything else, which is a bug.

After every cell the model's state (train/eval mode of every module, parameters, buffers,
``requires_grad`` flags, hooks) must be as before (``state_kept``). Measures that need a
per-sample function run batchnorm networks with ``norm_mode="frozen"``; token models are
measured from their embedding. The test suite asserts on the matrix and checks the values
against brute force; ``python benchmarks/conformance_matrix.py`` prints it.

Example:
    >>> from nngauge.conformance import run_cell
    >>> cell, result = run_cell("nlc", "dropout_mlp")
    >>> cell.status, cell.state_kept
    ('ok', True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Sequence

import torch
from torch import nn

from nngauge._internal.adapter import batch_coupled, select_output
from nngauge.errors import NNGaugeError
from nngauge.measures import (
    activation_patterns,
    hessian,
    loss_landscape,
    weight_transitions,
    capacity,
    correlations,
    dichotomies,
    error_preserving_perturbation,
    expected_sharpness,
    fold_batchnorm,
    gradient_metrics,
    jacobian_norm,
    kernel_conditioning,
    linear_region_diameter,
    margin,
    nlc,
    nlc_profile,
    pac_bayes,
    path_norm,
    region_density,
    regions,
    sharpness,
    sharpness_conditions,
    skim,
    trajectory_length,
    transitions,
    weight_noise_robustness,
)
from nngauge.trajectories import line, plane
from nngauge.zoo import ZOO, ZooEntry, sample_inputs, sample_labels

Status = Literal["ok", "refused", "crash"]
N_SAMPLES = 8
"""Samples per cell."""


@dataclass(frozen=True)
class Cell:
    """One measure on one zoo network.

    Attributes:
        measure, model: the names of the measure (in :data:`MEASURES`) and of the zoo entry.
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
    per-point measures applicable, and two points to draw trajectories between."""

    entry: ZooEntry
    x: torch.Tensor
    y: torch.Tensor
    norm_mode: Optional[str]
    input_module: Optional[str]
    point0: torch.Tensor
    point1: torch.Tensor
    template: Optional[torch.Tensor]

    @property
    def per_point(self) -> dict:
        """Options of per-point measures (trajectories, patterns, transitions)."""
        options: dict[str, Any] = {"norm_mode": self.norm_mode, "norm_data": self.x}
        if self.input_module is not None:
            options.update(input_module=self.input_module, template=self.template)
        return options


def prepare(entry: ZooEntry, model: nn.Module, *, seed: int = 0) -> Inputs:
    """The inputs of a cell for ``model`` (built from ``entry``)."""
    x = sample_inputs(entry, N_SAMPLES, generator=seed)
    y = sample_labels(entry, N_SAMPLES, generator=seed)
    if entry.input_module is not None:
        with torch.no_grad():
            points = model.get_submodule(entry.input_module)(x[:2]).detach()
        template = x[0]
    else:
        points, template = x[:2], None
    return Inputs(entry, x, y, "frozen" if batch_coupled(model) else None, entry.input_module,
                  points[0], points[1], template)


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


TRANSITIONS_FRACTION = 0.25
"""Transitions are counted on the first quarter of the segment between the two inputs: the
zoo's ResNets cross thousands of patterns on the whole of it, which proves no more."""


def _cell_transitions(model, d: Inputs, method: str):
    extra = dict(n_initial=65, max_evaluations=1024) if method == "sampled" else {}
    end = torch.lerp(d.point0, d.point1, TRANSITIONS_FRACTION)
    return transitions(model, d.point0, end, method=method, **d.per_point, **extra)


def _cell_trajectory(model, d: Inputs):
    return trajectory_length(model, line(d.point0, d.point1, 9), max_points=65, **d.per_point)


def _cell_regions(model, d: Inputs):
    """Regions on a small box of the plane through three inputs (embedded for token models):
    exact where the network is piecewise linear on its own input, else on a grid."""
    points = d.x[:3]
    if d.input_module is not None:
        with torch.no_grad():
            points = model.get_submodule(d.input_module)(points).detach()
    exact = d.entry.piecewise_linear and d.input_module is None
    return regions(model, plane(*points), bounds=(0.0, 0.01, 0.0, 0.01),
                   method="exact" if exact else "grid", max_regions=4096, resolution=32,
                   **d.per_point)


def _cell_weight_transitions(model, d: Inputs):
    """Pattern changes of the inputs along a random line of the first weight layer."""
    name = _first_weight_layer(model)
    weight = model.get_submodule(name).weight
    direction = torch.randn(weight.shape, generator=_generator(), dtype=weight.dtype)
    return weight_transitions(model, d.x, layer=name, direction={"weight": direction},
                              span=(-1e-4, 1e-4), max_pieces=4096, norm_mode=d.norm_mode,
                              norm_data=d.x)


def _folded_function(model, d: Inputs):
    """fold_batchnorm's copy and the largest relative change of the eval-mode function."""
    import copy

    folded = fold_batchnorm(model)
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        a, _ = select_output(reference(d.x), None)
        b, _ = select_output(folded(d.x), None)
    return float(((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).double())


MEASURES: dict[str, Callable[[nn.Module, Inputs], Any]] = {
    "nlc": lambda m, d: nlc(m, d.x, batch_size=8, generator=_generator()),
    "nlc_profile": lambda m, d: nlc_profile(
        m, d.x, batch_size=8, generator=_generator()),
    "gradient_metrics": lambda m, d: gradient_metrics(
        m, (d.x, d.y), batch_size=8, n_iter=5, generator=_generator()),
    "jacobian_norm": lambda m, d: jacobian_norm(
        m, d.x, batch_size=8, n_iter=5, generator=_generator()),
    "correlations": lambda m, d: correlations(m, d.x, max_samples=8),
    "kernel_conjugate": lambda m, d: kernel_conditioning(
        m, d.x, max_samples=8),
    "kernel_ntk": lambda m, d: kernel_conditioning(
        m, d.x, kind="ntk", max_samples=6, layers=[], n_probes=2, generator=_generator()),
    "linear_region_diameter": lambda m, d: linear_region_diameter(
        m, d.x, batch_size=8, n_batches=1, n_input_directions=2, n_output_directions=2,
        k_max=10.0, generator=_generator()),
    "error_preserving_perturbation": lambda m, d: error_preserving_perturbation(
        m, (d.x, d.y), batch_size=8, n_batches=1, n_input_directions=2, k_max=10.0,
        generator=_generator()),
    "skim": lambda m, d: skim(m, d.x, layers=_first_block(m), norm_mode=d.norm_mode),
    "trajectory_length": _cell_trajectory,
    "transitions_exact": lambda m, d: _cell_transitions(m, d, "exact"),
    "transitions_sampled": lambda m, d: _cell_transitions(m, d, "sampled"),
    "activation_patterns": lambda m, d: activation_patterns(
        m, d.x, norm_mode=d.norm_mode),
    "region_density": lambda m, d: region_density(
        m, d.x[:4], radius=0.5, n_directions=2, neighbourhood_dims=4,
        method="exact" if d.entry.piecewise_linear else "sampled", max_evaluations=256,
        generator=_generator(), norm_mode=d.norm_mode, norm_data=d.x),
    "regions": _cell_regions,
    "dichotomies": lambda m, d: dichotomies(
        m, d.x[:6], layer=_first_weight_layer(m), resolution=16, generator=_generator()),
    "weight_noise_robustness": lambda m, d: weight_noise_robustness(
        m, d.x, d.y, noise_levels=(0.0, 0.1), n_repeats=1, layers=[_first_weight_layer(m)],
        generator=_generator()),
    "margin": lambda m, d: margin(m, d.x, d.y),
    "path_norm": lambda m, d: path_norm(
        m, 2, input_shape=d.entry.input_shape),
    "capacity": lambda m, d: capacity(m, d.x, d.y),
    "fold_batchnorm": _folded_function,
    "sharpness": lambda m, d: sharpness(
        m, (d.x, d.y), n_iter=3, batch_size=4, generator=_generator()),
    "expected_sharpness": lambda m, d: expected_sharpness(
        m, (d.x, d.y), alpha=1e-3, n_probes=4, batch_size=4, generator=_generator()),
    "pac_bayes": lambda m, d: pac_bayes(
        m, (d.x, d.y), alphas=[1e-3], n_probes=4, batch_size=4, generator=_generator()),
    "sharpness_conditions": lambda m, d: sharpness_conditions(
        m, d.x, max_samples=4),
    "hessian": lambda m, d: hessian(
        m, (d.x, d.y), loss="mse" if d.y.is_floating_point() else "cross_entropy",
        trace=False, batch_size=4, n_batches=1, n_iter=2, generator=_generator()),
    "loss_landscape": lambda m, d: loss_landscape(
        m, (d.x, d.y), resolution=(3, 3), span=0.1, generator=_generator()),
    "landscape_regions": lambda m, d: loss_landscape(
        m, (d.x, d.y), dims=1, resolution=5, span=0.1, count_regions=True,
        generator=_generator()),
    "weight_transitions": _cell_weight_transitions,
}
"""Every public measure as a cell function ``(model, inputs) -> result``."""

_HEADLINES = ("nlc", "norm", "rho_max", "median", "n_patterns", "n_dichotomies", "margin",
              "sharpness", "expected_sharpness", "best_bound", "condition_number", "l2",
              "clean_accuracy", "deviation", "lengths", "eigenvalues", "center_loss",
              "n_changes")


def headline(result: Any) -> str:
    """A short text of a result's main number."""
    if isinstance(result, float):
        return f"{result:.4g}"
    for name in _HEADLINES:
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


def run_cell(measure: str, model_name: str, *, seed: int = 0) -> tuple[Cell, Any]:
    """Run one cell on a fresh model; returns the :class:`Cell` and the result (or None)."""
    entry = ZOO[model_name]
    model = entry.build(generator=seed)
    inputs = prepare(entry, model, seed=seed)
    before = model_state(model)
    start = time.perf_counter()
    result, status = None, "ok"
    try:
        result = MEASURES[measure](model, inputs)
        summary = headline(result)
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


__all__ = ["Cell", "Inputs", "MEASURES", "N_SAMPLES", "format_matrix", "headline", "matrix",
           "model_state", "prepare", "run_cell", "same_state"]
