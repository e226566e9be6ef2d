"""Trajectory length per layer (Raghu et al. 2017, section 2.2, Theorem 3, figures 4 and 13).

The length of the image z^(d)(t) of a trajectory x(t) at layer d is the arc length
l(z^(d)) = int ||dz^(d)/dt|| dt, estimated by the inscribed polygon sum_i ||z(t_{i+1}) - z(t_i)||.
The polygon length never exceeds the arc length and increases under refinement, so the
trajectory is refined (every interval halved) until the lengths of all layers change by at
most ``tol`` (relative) between two refinements; the last change is the reported
discretization error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Integer, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import points_per_chunk
from nngauge._internal.sites import Site
from nngauge._results import Result
from nngauge.errors import invalid, warn_caller
from nngauge.trajectories import Trajectory, as_trajectory, polyline_length

DEFAULT_KINDS = ("activation", "pool")
INPUT, OUTPUT = "input", "output"


@dataclass(frozen=True)
class TrajectoryLayer(Result):
    """The length of the trajectory's image at one layer.

    Attributes:
        name: "input", a module name, or "output".
        length: polygon length at the finest refinement.
        growth: length / length of the previous row (nan for the input).
        discretization_error: |length - length at the previous refinement| (the polygon
            length increases towards the arc length, so the true length is above ``length``).
        dim: numel of the layer's output per point.
    """

    name: str
    length: float
    growth: float
    discretization_error: float
    dim: int


@dataclass(frozen=True)
class TrajectoryLengthResult(Result):
    """Arc length of a trajectory's image at every layer (Raghu et al. 2017, section 2.2).

    Attributes:
        lengths: one length per row of ``layers`` (input, the chosen layers, output).
        growth: length ratio of each row to the previous one (nan for the input).
        layers: per-layer rows (:class:`TrajectoryLayer`).
        n_points: points of the finest refinement.
        converged: whether every length changed by at most ``tol`` (relative) in the last
            refinement.
        kind: the trajectory's kind.
        settings: tol, max_points.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        theory: per-layer lower bound factor and rates of Theorem 3 when the model is an
            nngauge MLP (hard_tanh / relu, gaussian init, no norm or skip), else None.
    """

    _rows = "layers"
    _headline = "length"

    lengths: tuple[float, ...]
    growth: tuple[float, ...]
    layers: tuple[TrajectoryLayer, ...]
    n_points: int
    converged: bool
    kind: str
    settings: dict
    mode: MeasurementMode
    theory: Optional[dict] = None

    def plot(self, ax=None):
        """Length vs layer (log scale), with Theorem 3's lower bound l(x) rate^d and its
        upper bound l(x) upper_rate^d at the activation layers when ``theory`` is known.
        Returns the Axes."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        names = [row.name for row in self.layers]
        ax.plot(range(len(names)), self.lengths, marker="o", label="measured")
        if self.theory is not None:
            positions = self.theory["positions"]
            base = self.lengths[0]
            depth = np.arange(1, len(positions) + 1)
            for key, style, label in (("rate", "--", "Theorem 3 lower bound"),
                                      ("upper_rate", ":", "upper bound (appendix B)")):
                if self.theory[key] > 0:
                    ax.plot(positions, base * self.theory[key] ** depth, linestyle=style,
                            label=label)
        ax.set_xticks(list(range(len(names))))
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("trajectory length")
        ax.legend()
        ax.figure.tight_layout()
        return ax


@constrained(tol=Real(0, low_open=True), max_points=Integer(2))
@model_options("output", "input_module", "norm_mode", "dropout",
               after={"norm_mode": "template", "dropout": "norm_data"})
def trajectory_length(
    model: nn.Module,
    trajectory: Any,
    *,
    layers: Optional[Sequence[str]] = None,
    tol: float = 1e-3,
    max_points: int = 2**14 + 1,
    options: ModelOptions,
    template: Optional[torch.Tensor] = None,
    norm_data: Any = None,
) -> TrajectoryLengthResult:
    """Arc length of the image of a trajectory at every layer (Raghu et al. 2017, sec. 2.2).

    l(z^(d)) = int_0^1 ||dz^(d)(t)/dt|| dt for the output z^(d) of each layer, estimated by
    the inscribed polygon sum_i ||z(t_{i+1}) - z(t_i)||_2 (outputs flattened per point). The
    trajectory is refined (intervals halved, by its own formula: a line, an arc, or the
    polyline through data points) until every layer's length changes by at most ``tol``
    (relative) or the next refinement would exceed ``max_points`` (then ``converged`` is False
    and a warning says so). Theorem 3: for random hard-tanh / ReLU networks the length grows
    exponentially with depth.

    Args:
        model: any module whose outputs for a point do not depend on the rest of its batch
            (batchnorm with running or frozen statistics: ``norm_mode``).
        trajectory: a :class:`~nngauge.trajectories.Trajectory` or a tensor of points (n, ...)
            read as the polyline through them (in the space of the measured input).
        layers: module or site names whose outputs are measured; default every activation and
            pooling site. The input and the model's output are always reported.
        tol: relative convergence tolerance of every length.
        max_points: largest number of points tried.
        output: which output to measure for dict / tuple / ModelOutput outputs.
        input_module, template: measure from this submodule's output (the trajectory's
            points are then in that space), running the model on the raw input ``template``
            (one sample, e.g. token ids) with the module's output replaced.
        norm_mode, norm_data: batchnorm's statistics ("eval": running; "frozen": computed on
            ``norm_data``, then fixed; "train" is refused: points would depend on each other).
        dropout: keep dropout on (default off).

    Returns:
        :class:`TrajectoryLengthResult` (``lengths``: one per row, input first, output last).

    Example:
        >>> import torch
        >>> from nngauge.trajectories import line
        >>> from nngauge.nn import mlp
        >>> net = mlp(2, 8, 3, 2, activation="relu", generator=torch.Generator().manual_seed(0))
        >>> res = trajectory_length(net, line(torch.zeros(2), torch.ones(2), 9))
        >>> round(res.lengths[0], 4), res.converged
        (1.4142, True)
    """
    where = "trajectory_length()"
    traj = as_trajectory(trajectory, where)
    adapter = ModelAdapter(model, options, where=where)
    raw = adapter.check_template(template)
    with adapter.active(data=norm_data), torch.no_grad():
        adapter.require_independent_samples()
        chosen = adapter.sites(traj.points[:2] if raw is None else raw, layers,
                               default_kinds=DEFAULT_KINDS)
        current = _lengths(adapter, traj, chosen, raw)
        previous = None
        while True:
            converged = previous is not None and bool(
                np.all(np.abs(current - previous) <= tol * np.abs(current)))
            if converged or 2 * len(traj) - 1 > max_points:
                break
            traj, previous = traj.refine(), current
            current = _lengths(adapter, traj, chosen, raw)
        dims = [int(z[0].numel()) for z in _images(adapter, traj.points[:1], chosen, raw)]
    if not converged:
        warn_caller(f"{where}: lengths did not converge to tol={tol} with {len(traj)} "
                    "points; raise max_points for a finer estimate")
    error = np.abs(current - previous) if previous is not None else np.full_like(current, np.nan)
    names = [INPUT] + [site.name for site in chosen] + [OUTPUT]
    with np.errstate(divide="ignore", invalid="ignore"):
        growth = np.concatenate([[math.nan], current[1:] / current[:-1]])
    rows = tuple(TrajectoryLayer(name, float(v), float(g), float(e), d)
                 for name, v, g, e, d in zip(names, current, growth, error, dims))
    return TrajectoryLengthResult(
        lengths=tuple(float(v) for v in current), growth=tuple(float(g) for g in growth),
        layers=rows, n_points=len(traj), converged=converged, kind=traj.kind,
        settings={"tol": tol, "max_points": max_points}, mode=adapter.mode,
        theory=theory_overlay(model, names))


def _lengths(adapter: ModelAdapter, traj: Trajectory, sites: Sequence[Site],
             raw: Optional[torch.Tensor]) -> np.ndarray:
    """Polygon lengths (float64) of the input, every site and the output, streaming over
    chunks of consecutive points (one shared point between chunks): the first chunk of two
    points, then as many as :func:`points_per_chunk` allows for the values a point records."""
    totals = np.zeros(len(sites) + 2)
    start, size = 0, 2
    while start < len(traj) - 1:
        images = _images(adapter, traj.points[start:start + size], sites, raw)
        for i, z in enumerate(images):
            totals[i] += float(polyline_length(z.reshape(len(z), -1).to(torch.float64)))
        start += size - 1
        size = max(2, points_per_chunk(sum(z[0].numel() for z in images)))
    return totals


def _images(adapter: ModelAdapter, points: torch.Tensor, sites: Sequence[Site],
            raw: Optional[torch.Tensor]) -> list[torch.Tensor]:
    x = adapter.prepare_raw(points)
    y, captured = adapter.run(x, sites, raw=raw)
    missing = [site.name for site in sites if site.name not in captured]
    if missing:
        raise invalid(adapter.where, "layers that the forward pass calls",
                      f"never called: {missing}", "pass layers=[...] among the modules the "
                      "model uses")
    return [x] + [captured[site.name] for site in sites] + [y]


def theory_overlay(model: nn.Module, names: Sequence[str]) -> Optional[dict]:
    """Theorem 3's per-layer factors for an nngauge MLP of hard_tanh or relu units with
    gaussian init (weights N(0, sigma_w^2 / k), biases N(0, sigma_b^2)) and no norm or skip:
    the bound's ``rate``, ``upper_rate`` and ``asymptotic_rate``, Theorem 4's transition rate
    sqrt(k) / sqrt(1 + sigma_b^2 / sigma_w^2) (written here from the theorem's statement),
    and the row ``positions`` of the hidden activation layers; None for other models."""
    from nngauge.activations import from_spec
    from nngauge.nn import MLP
    from nngauge.theory import trajectory_growth_bound

    if not isinstance(model, MLP):
        return None
    config = model.config
    activation = from_spec(config.activation)
    standard = activation.name == "relu" or (
        activation.name == "hard_tanh" and activation.breakpoints == (-1.0, 1.0))
    if not standard or config.init != "gaussian" or config.norm is not None or (
            config.skip is not None or config.depth < 2):
        return None
    sigma_w, sigma_b = config.sigma_w * config.scale, config.bias_std * config.scale
    bound = trajectory_growth_bound(config.width, config.depth - 1, sigma_w=sigma_w,
                                    sigma_b=sigma_b, act=activation.name)
    acts = [f"layers.{i}.act" for i in range(config.depth - 1)]
    return {
        "activation": activation.name, "width": config.width, "sigma_w": sigma_w,
        "sigma_b": sigma_b, "rate": bound.rate, "upper_rate": bound.upper_rate,
        "asymptotic_rate": bound.asymptotic_rate,
        "theorem4_rate": math.sqrt(config.width) / math.sqrt(1.0 + (sigma_b / sigma_w) ** 2),
        "positions": [names.index(name) for name in acts if name in names],
    }
