"""Neuron transitions and activation patterns along a trajectory (Raghu et al. 2017, sec. 2.1).

A neuron *transitions* when its activation switches linear region (ReLU: off <-> on; hard
tanh: -1 <-> linear <-> +1); the activation pattern is the region of every neuron. Along a
trajectory x(t), ``transitions`` counts the transitions of each layer and the distinct
activation patterns met (Corollary 1: along a segment every interval between transitions has
its own pattern, so patterns = linear pieces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Choice, Integer, Maybe, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.budget import DEFAULT_MAX_SECONDS
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import (
    PatternHasher,
    activation_sites,
    points_per_chunk,
    select_pattern_layers,
    site_codes,
)
from nngauge._internal.piecewise import (
    EngineReport,
    PiecewiseEngine,
    float64_copy,
    polyline_slices,
)
from nngauge._results import Result
from nngauge.errors import BudgetExceededError, NNGaugeError, invalid
from nngauge.measures.expressivity._lines import (
    AffineCheck,
    PieceBudget,
    bisect_changes,
)
from nngauge.measures.expressivity._trajectory import theory_overlay
from nngauge.trajectories import Trajectory, line

Method = Literal["exact", "sampled"]


@dataclass(frozen=True)
class TransitionLayer(Result):
    """Transitions of one activation layer (or, exact method, max-pooling site) along the
    trajectory.

    Attributes:
        name: the site's name (the module's name, ``"name#k"`` for the k-th call of a
            module called k > 1 times per forward pass, the traced graph's node name for an
            activation function called in a forward pass, ``F.relu`` and the like: ``"relu"``,
            ``"relu_1"``, ..., in both methods).
        units: neurons in the layer (numel of its pre-activation per point; max pooling: of
            its output).
        transitions: region changes of its neurons along the trajectory (max pooling:
            changes of a window's arg-max).
        n_patterns: distinct patterns of this layer alone.
        piecewise_linear: False when regions are signs of a smooth activation's input.
        kind: "activation" or "maxpool" (exact method).
    """

    name: str
    units: int
    transitions: int
    n_patterns: int
    piecewise_linear: bool
    kind: str = "activation"


@dataclass(frozen=True)
class TransitionsResult(Result):
    """Transitions and activation patterns along a trajectory (Raghu et al. 2017, sec. 2.1).

    Attributes:
        n_patterns: distinct activation patterns (over the chosen layers) met along the path.
        n_transitions: sum of ``per_layer``.
        per_layer: neuron transitions per chosen layer.
        n_pieces: intervals of constant pattern along the path (exact: the linear pieces of
            the network; equals ``n_patterns`` on a segment, Corollary 1).
        pieces: (n_pieces, 2) float64 array of each piece's [t_start, t_end] (exact method;
            None for "sampled").
        layers: per-layer rows (:class:`TransitionLayer`).
        method: "exact" or "sampled".
        path: "segment", or "polyline of n segments (<kind>)": exact counts are exact on the
            polygon (for an arc, the inscribed polygon of the trajectory's points).
        n_evaluations: points at which the network was evaluated (exact: the affinity
            check's; the engine itself propagates two reference rows per piece).
        budget_exhausted: the sampled method stopped refining for lack of evaluations.
        settings: the options used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        theory: Theorem 3 / 4 rates for an nngauge hard_tanh / relu MLP with gaussian init
            (see :func:`nngauge.measures.expressivity._trajectory.theory_overlay`), else None.
        near_coincident: exact: breakpoint crossings within ``merge_tol`` of another crossing
            or of a piece's end, merged into it (each may hide a sliver piece); None for
            "sampled".
        smallest_piece: exact: length in t of the narrowest linear piece; None for "sampled".
    """

    _rows = "layers"
    _headline = "transitions"

    n_patterns: int
    n_transitions: int
    per_layer: tuple[int, ...]
    n_pieces: int
    pieces: Optional[np.ndarray] = field(repr=False, compare=False)
    layers: tuple[TransitionLayer, ...]
    method: str
    path: str
    n_evaluations: int
    budget_exhausted: bool
    settings: dict
    mode: MeasurementMode
    theory: Optional[dict] = None
    near_coincident: Optional[int] = None
    smallest_piece: Optional[float] = None

    def plot(self, ax=None):
        """Transitions per layer (log scale) beside Theorem 4's rate sqrt(k) / sqrt(1 +
        sigma_b^2 / sigma_w^2) per layer (anchored at the first layer) when known. Returns the
        Axes."""
        from nngauge._plots import line_per_layer

        reference = None
        if self.theory is not None and self.per_layer:
            rate = self.theory["theorem4_rate"]
            reference = [max(self.per_layer[0], 1) * rate ** i for i in range(len(self.per_layer))]
        return line_per_layer([row.name for row in self.layers],
                             [max(v, 0.5) for v in self.per_layer], ylabel="transitions",
                             log=True, ax=ax, reference=reference,
                             reference_label="Theorem 4 rate (O-constant 1)")


@constrained(method=Choice.literal(Method), max_pieces=Maybe(Integer(1)),
             max_seconds=Maybe(Real(0, low_open=True)))
@model_options("output", "input_module", "norm_mode", "dropout",
               after={"norm_mode": "template", "dropout": "norm_data"})
def transitions(
    model: nn.Module,
    x0: Any,
    x1: Any = None,
    *,
    method: Method = "exact",
    layers: Optional[Sequence[str]] = None,
    merge_tol: float = 1e-12,
    n_initial: int = 1025,
    min_width: float = 1e-7,
    max_evaluations: int = 2**16,
    max_pieces: Optional[int] = None,
    max_seconds: Optional[float] = DEFAULT_MAX_SECONDS,
    options: ModelOptions,
    template: Optional[torch.Tensor] = None,
    norm_data: Any = None,
) -> TransitionsResult:
    """Neuron transitions and distinct activation patterns along x(t) (Raghu et al. 2017,
    section 2.1, Corollary 1).

    With region_u(t) the linear region of neuron u's activation at x(t) (``pattern`` below),
    T = sum_u #{changes of region_u along t} and A = #{distinct (region_u(t))_u}.

    Methods:
        - ``"exact"`` (default; piecewise-linear networks, any module graph ``torch.fx``
          traces: Linear, Conv, batchnorm and dropout in eval mode, average pooling, reshapes,
          concatenations, residual additions; ReLU, LeakyReLU, PReLU, ReLU6, HardTanh, clamp,
          nngauge piecewise-linear activations, as modules or functions; max pooling): the
          piecewise-linear engine (:mod:`nngauge._internal.piecewise`) carries every piece of
          the path with the affine map (in t) of every live node; at each activation every
          crossing of a breakpoint inside a piece is solved for in closed form and the piece
          split there, at each max pooling pieces are split where a window's arg-max changes,
          so that no region is missed. One row per activation or max-pooling *site*, in call
          order (a module called twice per forward pass gives ``"name#1"``, ``"name#2"``).
          Computed on a float64 copy of the model in its measurement mode. On a segment the
          result is exact; on another trajectory it is exact on its polygon (for an arc of n
          points: the n - 1 chords).
        - ``"sampled"`` (any network): patterns on a grid of ``n_initial`` points of the
          trajectory itself, then every interval whose end patterns differ is bisected
          (widest first) until narrower than ``min_width`` or ``max_evaluations`` is spent.
          Changes that cancel inside an interval are missed, so exact >= sampled. For
          activations that are not piecewise linear (tanh, sigmoid, ...) a neuron's region
          is the sign of its pre-activation. One row per activation site (a module called
          twice per forward pass gives two; activation functions called in ``forward``, found
          in the traced graph, are sites as in the exact method), in call order.

    Args:
        model: the network; its outputs for a point must not depend on the batch
            (batchnorm with running or frozen statistics: ``norm_mode``).
        x0, x1: the segment's endpoints (same shape, no batch dimension), or x0 a
            :class:`~nngauge.trajectories.Trajectory` (line, arc, through) and x1 None.
        method: ``"exact"`` or ``"sampled"``.
        layers: site names whose patterns count (``result.layers[i].name``; a module name
            stands for all its calls in the sampled method); default all. The exact pieces
            always follow every site.
        merge_tol: exact: crossings closer than this in the t of a segment count as one point
            (counted in ``near_coincident``).
        n_initial, min_width, max_evaluations: sampled method's grid, resolution and budget.
        max_pieces: exact method's budget: refuse (naming the sampled method) once more
            pieces than this have been found; None: no limit.
        max_seconds: exact method's time budget: once pieces have been followed for a
            second, the time so far divided by the fraction of the path done estimates the
            whole; refuse (with the estimate, naming the sampled method) as soon as it
            exceeds the budget. Default 60 s; None: no limit.
        output: which output is the model's for dict / tuple / ModelOutput outputs (the exact
            method's affinity check reads it: on every 64th piece the model at the piece's
            quarter points and midpoint must equal the engine's affine map there).
        input_module, template: sampled method: the trajectory lies in this submodule's output
            space (a token model's embedding), and the model runs on the raw input
            ``template`` (one sample) with that output replaced.
        norm_mode, norm_data: batchnorm's statistics: "eval" (running) or "frozen" (computed
            on ``norm_data``, then fixed); "train" is refused (points would depend on each
            other).
        dropout: keep dropout on (the sampled method; the exact one refuses it).

    Returns:
        :class:`TransitionsResult`.

    Raises:
        InvalidInputError: x0 == x1, shapes that differ or that the model rejects, a model
            with operations that are not piecewise linear for ``method="exact"`` (the error
            names every one with the reason and suggests ``method="sampled"``), batchnorm in
            train mode.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 3), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([-1., 0., 1.]))
        >>> res = transitions(net, torch.tensor([-2.0]), torch.tensor([2.0]))
        >>> res.n_patterns, res.per_layer, res.pieces.tolist()
        (4, (3,), [[0.0, 0.25], [0.25, 0.5], [0.5, 0.75], [0.75, 1.0]])
    """
    where = "transitions()"
    adapter = ModelAdapter(model, options, where=where)
    traj = _trajectory(x0, x1, where)
    if method == "exact" and options.input_module is not None:
        raise invalid(where, "method='exact' on the model's own input (the engine traces the "
                      "model from it)", f"input_module={options.input_module!r}",
                      "use method='sampled' to measure from a submodule's output")
    raw = adapter.check_template(template)
    settings = {"method": method, "merge_tol": merge_tol, "n_initial": n_initial,
                "min_width": min_width, "max_evaluations": max_evaluations,
                "max_pieces": max_pieces, "max_seconds": max_seconds}
    with adapter.active(data=norm_data), torch.no_grad():
        adapter.require_independent_samples()
        if method == "exact":
            counts, report = _exact(adapter, float64_copy(adapter.model), traj, layers,
                                    merge_tol, max_pieces, max_seconds)
        else:
            counts = _sampled(adapter, traj, raw, layers, n_initial, min_width,
                              max_evaluations)
            report = {}
    chosen, per_layer, layer_patterns, units, n_patterns, n_pieces, pieces, evals, spent = counts
    kinds = ([layer.kind for layer in chosen] if method == "exact"
             else ["activation"] * len(chosen))
    rows = tuple(TransitionLayer(layer.name, u, t, p, layer.piecewise_linear, kind)
                 for layer, u, t, p, kind in zip(chosen, units, per_layer, layer_patterns,
                                                 kinds))
    vertices = len(traj.polyline()[0]) if method == "exact" else len(traj.anchors)
    path = "segment" if traj.kind == "line" else (
        f"polyline of {vertices - 1} segments ({traj.kind})" if method == "exact"
        else f"{traj.kind} trajectory")
    return TransitionsResult(
        n_patterns=n_patterns, n_transitions=int(sum(per_layer)), per_layer=tuple(per_layer),
        n_pieces=n_pieces, pieces=pieces, layers=rows, method=method, path=path,
        n_evaluations=evals, budget_exhausted=spent, settings=settings, mode=adapter.mode,
        theory=theory_overlay(model, [row.name for row in rows]), **report)


def _trajectory(x0: Any, x1: Any, where: str) -> Trajectory:
    if isinstance(x0, Trajectory):
        if x1 is not None:
            raise invalid(where, "x1=None when x0 is a Trajectory", "both",
                          "pass either a Trajectory or the two endpoints")
        return x0
    if x1 is None:
        raise invalid(where, "two endpoints x0, x1 (or a Trajectory)", "x1=None",
                      "pass x1, or x0=nngauge.trajectories.arc(x0, x1, n)")
    try:
        return line(x0, x1, 2)
    except NNGaugeError as exc:
        raise invalid(where, "two distinct endpoints of one shape", str(exc),
                      "pass x0 and x1 as single inputs (no batch dimension), x0 != x1") from exc


def _exact(adapter: ModelAdapter, model: nn.Module, traj, names, merge_tol, max_pieces,
           max_seconds):
    """Exact pieces of the polyline of ``traj`` through the float64 copy ``model`` from the
    piecewise-linear engine, streamed: per-site statistics, t-bounds and the affinity check
    chunk by chunk, within ``max_seconds`` (estimated from the share of the path done).
    Returns the counts (as :func:`_sampled`) and the engine's report fields of the
    result."""
    where = adapter.where
    vertices, knots = traj.polyline()
    device = next((p.device for p in model.parameters()), vertices.device)
    vertices = vertices.to(dtype=torch.float64, device=device)
    knots = knots.to(dtype=torch.float64, device=device)
    engine = PiecewiseEngine(model, vertices[:1], where=where)
    chosen = select_pattern_layers(engine.sites, names, where)
    pieces, anchors = polyline_slices(vertices)
    stats, report, bounds = _PieceStats(len(engine.sites)), EngineReport(), []
    check = AffineCheck(lambda x: adapter.select(model(x)), anchors, adapter.select, where)
    budget = PieceBudget(where, max_seconds)
    for chunk in engine.run(pieces, anchors, merge_tol=merge_tol, report=report):
        done = float(chunk.pieces.bounds(knots)[-1, 1])
        if max_pieces is not None and report.pieces > max_pieces:
            raise invalid(where, f"at most max_pieces={max_pieces} linear pieces",
                          f"more than {report.pieces} after t = {done:.3g} of [0, 1]",
                          "use method='sampled', or raise max_pieces",
                          error=BudgetExceededError)
        budget.check_pieces(done, report.pieces)
        check.add(chunk)
        stats.add(list(chunk.codes), len(chunk.pieces))
        bounds.append(chunk.pieces.bounds(knots).cpu())
    check.flush()
    bounds = torch.cat(bounds)
    keep = torch.cat([torch.tensor([True]), stats.changed(), torch.tensor([True])])
    edges = torch.cat([bounds[:, 0], bounds[-1:, 1]])[keep]
    merged = torch.stack([edges[:-1], edges[1:]], 1).numpy()
    index = [engine.sites.index(site) for site in chosen]
    counts = (chosen, [stats.transitions[i] for i in index],
              [stats.n_patterns([i]) for i in index], [stats.units[i] for i in index],
              stats.n_patterns(index), len(merged), merged, check.evaluations, False)
    return counts, {"near_coincident": report.near_coincident,
                    "smallest_piece": float((bounds[:, 1] - bounds[:, 0]).min())}


class _PieceStats:
    """Streaming per-layer statistics of consecutive rows of region codes: transitions
    (units that change between consecutive rows), which consecutive rows differ at all,
    and row hashes for counting distinct patterns (only a row that differs from the one
    before it is hashed; the others repeat its hash)."""

    def __init__(self, n_layers: int) -> None:
        self.hasher = PatternHasher()
        self.transitions = [0] * n_layers
        self.units = [0] * n_layers
        self.hashes: list[list[torch.Tensor]] = [[] for _ in range(n_layers)]
        self._changes: list[torch.Tensor] = []
        self._last: Optional[list[tuple[torch.Tensor, torch.Tensor]]] = None

    def add(self, codes: list[torch.Tensor], rows: int) -> None:
        """The next ``rows`` rows: one (rows, units) code per layer."""
        first = self._last is None
        changed = torch.zeros(rows - 1 if first else rows, dtype=torch.bool)
        last = []
        for i, code in enumerate(codes):
            self.units[i] = code.shape[1]
            full = code if first else torch.cat([self._last[i][0], code])
            diff = full[1:] != full[:-1]
            self.transitions[i] += int(diff.sum())
            step = diff.any(1).cpu()
            changed |= step
            fresh = torch.cat([torch.ones(1, dtype=torch.bool), step]) if first else step
            pool = [self.hasher(code[fresh.to(code.device)], i).cpu()]
            if not first:
                pool.insert(0, self._last[i][1])  # the hash the chunk's first rows repeat
            hashes = torch.cat(pool)[torch.cumsum(fresh, 0) - int(first)]
            self.hashes[i].append(hashes)
            last.append((code[-1:], hashes[-1:]))
        self._changes.append(changed)
        self._last = last

    def changed(self) -> torch.Tensor:
        """(rows - 1,) whether each consecutive pair of rows differs in any layer."""
        return torch.cat(self._changes)

    def n_patterns(self, index: Sequence[int]) -> int:
        """Distinct rows over the layers in ``index`` (1 when there are none)."""
        if not index:
            return 1
        return _distinct_rows(sum(torch.cat(self.hashes[i]) for i in index))


def _distinct_rows(pairs: torch.Tensor) -> int:
    """Distinct rows of an (n, 2) tensor (a lexicographic sort; ``torch.unique(dim=0)`` is
    far slower)."""
    order = torch.argsort(pairs[:, 1], stable=True)
    order = order[torch.argsort(pairs[order, 0], stable=True)]
    ordered = pairs[order]
    return 1 + int((ordered[1:] != ordered[:-1]).any(1).sum())


def _sampled(adapter: ModelAdapter, traj: Trajectory, raw: Optional[torch.Tensor], names,
             n_initial, min_width, max_evaluations):
    sites, chosen = activation_sites(adapter, traj.points[:2] if raw is None else raw, names)

    def codes_at(s: torch.Tensor) -> list[torch.Tensor]:
        return site_codes(adapter, sites, chosen, adapter.prepare_raw(traj.at(s)), raw)

    units = [code.shape[1] for code in codes_at(torch.zeros(1, dtype=torch.float64))]
    chunk = points_per_chunk(sum(units), least=16)
    s = torch.linspace(0.0, 1.0, max(2, n_initial), dtype=torch.float64)
    # one segment: its parameters t in [0, 1] are the keys
    s, hashes, differs, exhausted = bisect_changes(codes_at, len(chosen), s, min_width,
                                                   max_evaluations, chunk)
    evaluations = len(s)
    pairs = torch.nonzero(differs).reshape(-1)
    per_layer = [0] * len(chosen)
    for start in range(0, len(pairs), chunk // 2 or 1):
        idx = pairs[start:start + (chunk // 2 or 1)]
        for i, code in enumerate(codes_at(torch.cat([s[idx], s[idx + 1]]))):
            per_layer[i] += int((code[:len(idx)] != code[len(idx):]).sum())
    layer_patterns = [int(torch.unique(hashes[:, i], dim=0).shape[0]) for i in range(len(chosen))]
    n_patterns = int(torch.unique(hashes.sum(1), dim=0).shape[0]) if chosen else 1
    return (chosen, per_layer, layer_patterns, units, n_patterns, int(differs.sum()) + 1, None,
            evaluations, exhausted)
