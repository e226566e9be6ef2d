"""Linear regions of a network on a plane of input space (Raghu et al. 2017, section 2.1,
Theorem 2, figure 1).

A network of affine maps, piecewise-linear activations and max pooling partitions its input
space into convex polytopes, on each of which it is one affine function (Theorem 2); on a
plane x(u, v) = x0 + u (x1 - x0) + v (x2 - x0) the partition is one of convex polygons. After
the first k activation (or max-pooling) sites, the partition is that of the first k sites'
activation patterns: with one hidden layer of ReLUs it is the arrangement of one line per
unit (Theorem 5 bounds its regions), and each later layer bends its lines where they meet the
earlier boundaries (figure 1). :func:`regions` computes the partition exactly with the
piecewise-linear engine (:mod:`nngauge._internal.piecewise`), or, for any network, counts the
activation patterns on a grid of the plane.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Choice, Integer, Maybe, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
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
    PieceLimit,
    PiecewiseEngine,
    Polygons,
    float64_copy,
    plane_slice,
    plane_weights,
)
from nngauge._results import Result
from nngauge.errors import BudgetExceededError, invalid, require_extra
from nngauge.measures.expressivity._lines import require_affine
from nngauge.trajectories import Plane, make_plane

Method = Literal["exact", "grid"]
DEFAULT_BOUNDS = (-0.5, 1.5, -0.5, 1.5)
"""The default box in plane coordinates: the triangle of the three points with a margin."""
VERTEX_TOL = 1e-11
"""Corners of the partition closer than this fraction of the box's diameter are one vertex
(each region's polygon is computed on its own; the copies of a shared corner agree to about
1e-15 of the diameter, 1e-13 at worst in the benchmarks' deep and wide networks)."""
AFFINE_CHECKS = 256
"""That check runs the model at the centres of this many regions (evenly spread)."""
COMPARED_ELEMENTS = 2**24
"""Pattern entries compared at a time when finding the unit that makes each edge."""


@dataclass(frozen=True)
class Region(Result):
    """One linear region of the network on the plane.

    Attributes:
        polygon: (k, 2) float64 corners (u, v), counter-clockwise (None for the grid method).
        pattern: the codes of every site on the region, concatenated in call order
            (``RegionsResult.layers`` gives each site's units): int8 activation regions
            #{j : h > c_j}, or int32 when max-pooling sites (flat arg-max index) are present.
        affine: (A, c) with the network's output on the region A @ (u, v) + c, A of shape
            (d_out, 2), c of shape (d_out,) (None for the grid method).
        area: its area in plane coordinates (grid: cells x cell area).
    """

    _curve = (("u", lambda region: _closed(region.polygon, 0)),
              ("v", lambda region: _closed(region.polygon, 1)))
    _summary = "area"

    polygon: Optional[np.ndarray]
    pattern: np.ndarray
    affine: Optional[tuple[np.ndarray, np.ndarray]]
    area: float


@dataclass(frozen=True)
class Edge(Result):
    """A boundary segment between two regions (or a region and the outside of the box).

    Attributes:
        start, end: (2,) float64 ends in plane coordinates.
        regions: (left, right): the regions on either side, left of start -> end first; -1
            outside the box.
        site: the site whose boundary makes it (the first site whose codes differ across
            it), or None on the box's boundary.
        depth: that site's position in call order, 1-based (0 on the box's boundary).
        unit: the unit of that site whose code changes across it (-1 on the box).
    """

    _curve = (("u", lambda edge: [edge.start[0], edge.end[0]]),
              ("v", lambda edge: [edge.start[1], edge.end[1]]))

    start: np.ndarray
    end: np.ndarray
    regions: tuple[int, int]
    site: Optional[str]
    depth: int
    unit: int


@dataclass(frozen=True)
class RegionLayer(Result):
    """The partition after one site.

    Attributes:
        name: the site's name (as :func:`~nngauge.transitions` names them).
        kind: "activation" or "maxpool".
        units: entries of the site's code.
        depth: the site's position in call order, 1-based.
        regions: regions of the partition by the patterns of every site up to this one.
    """

    name: str
    kind: str
    units: int
    depth: int
    regions: int


@dataclass(frozen=True)
class RegionsResult(Result):
    """The partition of a plane of input space into linear regions (Raghu et al. 2017,
    Theorem 2, figure 1).

    Attributes:
        n_regions: regions of the whole network in the box (exact: linear regions, each a
            convex polygon with one activation pattern and one affine map; grid: distinct
            activation patterns at the grid's points).
        per_depth: regions after each chosen site (the partition by the patterns of every
            site up to it), in call order; non-decreasing.
        n_edges, n_vertices: edges and vertices of the partition as a planar graph, the box's
            boundary included (V - E + F = 1 with F = n_regions); None for the grid method.
        n_pieces: exact: the engine's final pieces (more than the regions where a max
            pooling's window was cut without its arg-max changing: such pieces are one
            region); None for the grid method.
        layers: one :class:`RegionLayer` per chosen site.
        bounds: the box (u_min, u_max, v_min, v_max) in plane coordinates.
        method: "exact" or "grid".
        settings: the options used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        near_coincident: exact: crossings merged into a corner or slivers not cut for lying
            within ``merge_tol`` of a piece's boundary (see
            :class:`~nngauge._internal.piecewise.Polygons`).
        smallest_area: exact: the area of the smallest region.
        collapsed_regions: exact: regions all of whose corners lie within the vertex
            tolerance (:data:`VERTEX_TOL`) of one another (counted, drawn as a point).
        unmatched_edges: exact: edges inside the box whose neighbour region was not found
            (a corner of the neighbour within the vertex tolerance of the edge); 0 normally.
        note: what the method computes and misses.
        vertices: (n_vertices, 2) the partition's vertices.
        corners, offsets: region i's polygon is ``vertices[corners[offsets[i]:offsets[i+1]]]``.
        patterns: (n_regions, units) every region's pattern (see :class:`Region`).
        affine_maps: (n_regions, d_out, 3) [A | c] of every region (None for grid).
        areas: (n_regions,) areas.
        edge_vertices, edge_regions: (n_edges, 2) each edge's vertices and regions (see
            :class:`Edge`); edge_depths, edge_units: (n_edges,) its site (0: the box) and unit.
        decision_boundary: (n, 2, 2) segments in the box where the arg-max of the output
            changes (one output: where it is 0); None for the grid method.
        image: grid method: (len(layers), resolution, resolution) int32 region of each grid
            point (row: v, column: u) after each chosen site; None for exact.
        plane: the :class:`~nngauge.trajectories.Plane`.
        site_names: every site's name, in call order.
        regions: :class:`Region` per region (built from the arrays on first access).
        edges: :class:`Edge` per edge (built on first access).
    """

    _rows = "layers"
    _headline = "regions"

    n_regions: int
    per_depth: tuple[int, ...]
    n_edges: Optional[int]
    n_vertices: Optional[int]
    n_pieces: Optional[int]
    layers: tuple[RegionLayer, ...]
    bounds: tuple[float, float, float, float]
    method: str
    settings: dict
    mode: MeasurementMode
    near_coincident: Optional[int]
    smallest_area: Optional[float]
    collapsed_regions: Optional[int]
    unmatched_edges: Optional[int]
    note: str
    vertices: np.ndarray = field(repr=False, compare=False)
    corners: np.ndarray = field(repr=False, compare=False)
    offsets: np.ndarray = field(repr=False, compare=False)
    patterns: np.ndarray = field(repr=False, compare=False)
    affine_maps: Optional[np.ndarray] = field(repr=False, compare=False)
    areas: np.ndarray = field(repr=False, compare=False)
    edge_vertices: np.ndarray = field(repr=False, compare=False)
    edge_regions: np.ndarray = field(repr=False, compare=False)
    edge_depths: np.ndarray = field(repr=False, compare=False)
    edge_units: np.ndarray = field(repr=False, compare=False)
    decision_boundary: Optional[np.ndarray] = field(repr=False, compare=False)
    image: Optional[np.ndarray] = field(repr=False, compare=False)
    plane: Plane = field(repr=False, compare=False)
    site_names: tuple[str, ...] = field(repr=False, compare=False)

    @functools.cached_property
    def regions(self) -> tuple[Region, ...]:
        """One :class:`Region` per region, in the order of the arrays."""
        polygons = (np.split(self.vertices[self.corners], self.offsets[1:-1])
                    if self.method == "exact" else [None] * self.n_regions)
        affine = ([(m[:, :2], m[:, 2]) for m in self.affine_maps]
                  if self.affine_maps is not None else [None] * self.n_regions)
        return tuple(map(Region, polygons, self.patterns, affine, self.areas.tolist()))

    @functools.cached_property
    def edges(self) -> tuple[Edge, ...]:
        """One :class:`Edge` per edge of the partition."""
        ends = self.vertices[self.edge_vertices]
        names = (None,) + self.site_names
        return tuple(map(Edge, ends[:, 0], ends[:, 1], map(tuple, self.edge_regions.tolist()),
                         [names[d] for d in self.edge_depths.tolist()],
                         self.edge_depths.tolist(), self.edge_units.tolist()))

    def plot(self, ax=None, *, depths: Optional[Sequence[int]] = None,
             decision_boundary: bool = True, points: Any = None):
        """Figure 1 of Raghu et al. (2017): one pane per depth k, the partition by the
        patterns of the first k sites, each boundary coloured by the site that makes it.

        Args:
            ax: a matplotlib Axes (one pane) or a sequence of one Axes per pane; default a
                new figure.
            depths: the k of each pane (1-based positions of sites in call order); default
                every chosen site's depth when there are at most 6, else 4 spread over them
                (the last one the whole network); on one given Axes, the whole network.
            decision_boundary: draw the decision boundary (exact method) on panes of the
                whole network.
            points: inputs (n, ...) to mark, projected onto the plane.

        Returns:
            The numpy array of Axes, one per pane.
        """
        return _plot(self, depths, ax, decision_boundary, points)


def _closed(polygon: Optional[np.ndarray], axis: int) -> list[float]:
    """One coordinate of a region's corners, the first repeated last (none without a
    polygon): the outline :class:`Region`'s curve draws."""
    if polygon is None:
        return []
    return [*polygon[:, axis].tolist(), float(polygon[0, axis])]


@constrained(method=Choice.literal(Method), resolution=Integer(2),
             max_regions=Maybe(Integer(1)))
@model_options("output", "input_module", "norm_mode", after={"norm_mode": "template"})
def regions(
    model: nn.Module,
    plane: Any,
    *,
    bounds: Optional[Sequence[float]] = None,
    layers: Optional[Sequence[str]] = None,
    method: Method = "exact",
    resolution: int = 512,
    max_regions: Optional[int] = None,
    merge_tol: float = 1e-12,
    options: ModelOptions,
    template: Optional[torch.Tensor] = None,
    norm_data: Any = None,
) -> RegionsResult:
    """The linear regions of ``model`` on a plane of its input space (Raghu et al., "On the
    Expressive Power of Deep Neural Networks", ICML 2017, section 2.1, Theorem 2, figure 1).

    On the plane x(u, v) = x0 + u (x1 - x0) + v (x2 - x0) and the box B = [u_min, u_max] x
    [v_min, v_max], with AP(x) the activation pattern (the linear region of every unit's
    activation, the arg-max of every max-pooling window), the regions are the connected sets
    {(u, v) in B : AP(x(u, v)) = p}; by Theorem 2 each is a convex polygon on which the
    network is one affine map F(x(u, v)) = A (u, v) + c. After the first k sites the partition
    is that of the first k sites' patterns (``per_depth``): one hidden layer of m ReLUs gives
    the arrangement of m lines, at most sum_{i<=2} C(m, i) regions (Theorem 5).

    Methods:
        - ``"exact"`` (default: the partition itself, exact to ``merge_tol``, with every
          region's polygon and affine map, for the networks Theorem 2 covers: Linear, Conv,
          batchnorm in eval mode, average pooling, flatten and reshapes, identity skips and
          residual additions; ReLU, LeakyReLU, PReLU, ReLU6, HardTanh, clamp, nngauge's
          piecewise-linear activations; max pooling; any ``torch.fx`` graph of these): the
          piecewise-linear engine carries every polygon with the affine map (in (u, v)) of
          every live node, cuts the polygons along each site's lines
          (:class:`~nngauge._internal.piecewise.Polygons`) and reads each unit's linear
          branch inside; computed on a float64 copy of the model in its measurement mode. The regions' polygons are assembled from the
          engine's pieces (pieces of one pattern, where a max pooling was cut without its
          arg-max changing, are one region: their convex hull), their shared corners merged
          within :data:`VERTEX_TOL`, and edges found between the regions on either side.
        - ``"grid"`` (any network, e.g. tanh or attention): the activation patterns (of the
          activation sites; the sign of the pre-activation for activations that are not
          piecewise linear) at the centres of ``resolution`` x ``resolution`` cells of the
          box; regions are the distinct patterns (narrower ones than a cell are missed; no
          polygons, edges or affine maps), ``image`` holds the region of every cell.

    Args:
        model: the network; its output for a point must not depend on the batch.
        plane: a :class:`~nngauge.trajectories.Plane` (:func:`nngauge.trajectories.plane`), or
            three inputs (x0, x1, x2) of one shape (no batch dimension).
        bounds: (u_min, u_max, v_min, v_max) in plane coordinates; default
            (-0.5, 1.5, -0.5, 1.5), the three points with a margin.
        layers: site names to report (rows of ``layers``, entries of ``per_depth``, panes of
            the plot); default every site. The regions are always the whole network's.
        method: ``"exact"`` or ``"grid"``.
        resolution: grid method: cells per side.
        max_regions: exact method: refuse (naming the option) once the engine holds more
            pieces than this; None: no limit.
        merge_tol: exact method: a line passing within this distance (plane coordinates) of
            a polygon's corner goes through it, and one meeting a polygon only within it is
            not cut (both counted in ``near_coincident``).
        output: which output is the model's for dict / tuple / ModelOutput outputs.
        input_module, template: grid method: the plane lies in this submodule's output (e.g.
            the embedding of a token model: three embedded sequences); the model runs on
            ``template`` (one raw input, e.g. token ids) with that output replaced.
        norm_mode, norm_data: batchnorm's statistics: "eval" (running) or "frozen" (computed
            on ``norm_data``, then fixed); "train" is refused (points would depend on each
            other).

    Returns:
        :class:`RegionsResult`.

    Raises:
        InvalidInputError: points on one line or of different shapes, an empty or inverted
            box, a model that rejects the inputs, a network that is not piecewise linear with
            ``method="exact"`` (naming every operation, suggesting ``method="grid"``),
            batchnorm in train mode.
        BudgetExceededError: (an InvalidInputError) more than ``max_regions`` pieces, known
            before they are made.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from nngauge.trajectories import plane
        >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU())  # lines u = 0.5, v = 0.5, u = v
        >>> with torch.no_grad():
        ...     _ = net[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]))
        ...     _ = net[0].bias.copy_(torch.tensor([-0.5, -0.5, 0.0]))
        >>> p = plane(torch.zeros(2), torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
        >>> res = regions(net, p, bounds=(0.0, 1.0, 0.0, 1.0))
        >>> res.n_regions, res.n_edges, res.n_vertices, res.per_depth
        (6, 14, 9, (6,))
        >>> sorted(round(r.area, 3) for r in res.regions)
        [0.125, 0.125, 0.125, 0.125, 0.25, 0.25]
    """
    where = "regions()"
    adapter = ModelAdapter(model, options, where=where)
    slice_ = _as_plane(plane, where)
    box = _box(bounds, where)
    if method == "exact" and options.input_module is not None:
        raise invalid(where, "method='exact' on the model's own input (the engine traces the "
                      "model from it)", f"input_module={options.input_module!r}",
                      "use method='grid' to partition a plane of a submodule's output")
    raw = adapter.check_template(template)
    settings = {"method": method, "bounds": box, "resolution": resolution,
                "max_regions": max_regions, "merge_tol": merge_tol}
    with adapter.active(data=norm_data), torch.no_grad():
        adapter.require_independent_samples()
        if method == "exact":
            adapter.note("exact regions: computed on a float64 copy of the model")
            fields = _exact(adapter, float64_copy(adapter.model), slice_, box, layers,
                            merge_tol, max_regions)
        else:
            fields = _grid(adapter, slice_, raw, box, layers, resolution)
    return RegionsResult(bounds=box, method=method, settings=settings, mode=adapter.mode,
                         plane=slice_, **fields)


def _as_plane(value: Any, where: str) -> Plane:
    if isinstance(value, Plane):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 3:
        return make_plane(*value, None, where)
    raise invalid(where, "plane= a Plane (nngauge.trajectories.plane) or three inputs "
                  "(x0, x1, x2)", f"{type(value).__name__}",
                  "pass plane=nngauge.trajectories.plane(x0, x1, x2)")


def _box(bounds: Optional[Sequence[float]], where: str) -> tuple[float, float, float, float]:
    if bounds is None:
        return DEFAULT_BOUNDS
    try:
        box = tuple(float(b) for b in bounds)
    except (TypeError, ValueError) as exc:
        raise invalid(where, "bounds=(u_min, u_max, v_min, v_max) of numbers", f"{bounds!r}",
                      "pass four numbers") from exc
    if len(box) != 4 or not all(math.isfinite(b) for b in box) or not (
            box[0] < box[1] and box[2] < box[3]):
        raise invalid(where, "bounds=(u_min, u_max, v_min, v_max), finite, with u_min < u_max "
                      "and v_min < v_max", f"bounds={bounds!r}",
                      "pass a non-empty box, e.g. (-0.5, 1.5, -0.5, 1.5)")
    return box


# ----------------------------------------------------------------------------------- exact


def _exact(adapter: ModelAdapter, model: nn.Module, slice_: Plane, box, names,
           merge_tol: float, max_regions: Optional[int]) -> dict:
    """The exact partition's fields of :class:`RegionsResult`."""
    where = adapter.where
    device = next((p.device for p in model.parameters()), slice_.origin.device)
    anchors = slice_.anchors.to(dtype=torch.float64, device=device)
    engine = PiecewiseEngine(model, anchors[:1], where=where, fallback="method='grid'")
    chosen = select_pattern_layers(engine.sites, names, where)
    pieces, codes, prefix, refs, report = _run(adapter, engine, anchors, box, merge_tol,
                                               max_regions)
    sites = engine.sites
    group, n_regions, first = (_groups(prefix[-1]) if sites else
                               (torch.zeros(len(pieces), dtype=torch.int64), 1,
                                torch.zeros(1, dtype=torch.int64)))
    depth = [sites.index(site) for site in chosen]
    per_depth = [_groups(prefix[i])[1] for i in depth]
    patterns = _patterns(codes, len(sites), first)
    affine = torch.cat([(refs[first, 1:] - refs[first, :1]).transpose(1, 2),
                        refs[first, 0].unsqueeze(-1)], 2)
    areas = torch.zeros(n_regions, dtype=torch.float64).index_add_(0, group, pieces.sizes())
    box_tol = VERTEX_TOL * math.hypot(box[1] - box[0], box[3] - box[2])
    graph = _planar_graph(pieces, group, n_regions, box, box_tol)
    _check_affine(adapter, model, anchors, graph, affine, refs[first], where)
    depths, units = _edge_sites(patterns, None if prefix is None else prefix[:, first],
                                graph["edge_regions"], [site.units for site in sites])
    rows = tuple(RegionLayer(site.name, site.kind, site.units, i + 1, count)
                 for site, i, count in zip(chosen, depth, per_depth))
    return dict(
        n_regions=n_regions, per_depth=tuple(per_depth), n_edges=len(graph["edge_regions"]),
        n_vertices=len(graph["vertices"]), n_pieces=report.pieces, layers=rows,
        near_coincident=report.near_coincident, smallest_area=float(areas.min()),
        collapsed_regions=graph["collapsed"], unmatched_edges=graph["unmatched"],
        note="exact: the linear regions of the network in the box (Theorem 2)",
        vertices=graph["vertices"].numpy(), corners=graph["corners"].numpy(),
        offsets=graph["offsets"].numpy(), patterns=patterns.numpy(),
        affine_maps=affine.numpy(), areas=areas.numpy(),
        edge_vertices=graph["edge_vertices"].numpy(),
        edge_regions=graph["edge_regions"].numpy(), edge_depths=depths.numpy(),
        edge_units=units.numpy(),
        decision_boundary=_decision_boundary(graph, affine, box_tol).numpy(), image=None,
        site_names=tuple(site.name for site in sites))


def _run(adapter: ModelAdapter, engine: PiecewiseEngine, anchors: torch.Tensor, box,
         merge_tol: float, max_regions: Optional[int]) -> tuple:
    """The engine's final pieces of the box on the CPU: (pieces, codes per chunk and site,
    prefix hashes (sites, pieces, 2) of the patterns of the first k sites (None without
    sites), the output at the pieces' reference points (pieces, 3, d_out), the report)."""
    start, slices = plane_slice(anchors, box)
    report, hasher = EngineReport(), PatternHasher()
    pieces, codes, hashes, outputs = [], [], [], []
    try:
        for chunk in engine.run(start, slices, merge_tol=merge_tol, report=report,
                                max_pieces=max_regions):
            pieces.append(Polygons(chunk.pieces.slice_index.cpu(),
                                   chunk.pieces.vertices.cpu(), chunk.pieces.counts.cpu()))
            codes.append([code.cpu() for code in chunk.codes])
            hashes.append([hasher(code, i).cpu() for i, code in enumerate(chunk.codes)])
            outputs.append(adapter.select(chunk.output).reshape(len(chunk.pieces), 3,
                                                                 -1).cpu())
    except PieceLimit as limit:
        raise invalid(adapter.where, f"at most max_regions={max_regions} linear regions",
                      f"{limit} (counted before they were made)",
                      "raise max_regions, shrink the box (bounds=), or use method='grid'",
                      error=BudgetExceededError) from None
    n_sites = len(engine.sites)
    prefix = torch.cumsum(torch.stack([torch.cat([h[i] for h in hashes])
                                       for i in range(n_sites)]), 0) if n_sites else None
    return Polygons.concatenate(pieces), codes, prefix, torch.cat(outputs), report


def _groups(keys: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Rows of equal (n, 2) int64 ``keys``: each row's group, numbered in order of first
    appearance, the number of groups, and each group's first row (a lexicographic sort;
    ``torch.unique(dim=0)`` is far slower)."""
    order = torch.argsort(keys[:, 1], stable=True)
    order = order[torch.argsort(keys[order, 0], stable=True)]
    ordered = keys[order]
    new = torch.ones(len(keys), dtype=torch.bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(1)
    label = torch.empty_like(order)
    label[order] = torch.cumsum(new, 0) - 1
    n = int(new.sum())
    first = torch.full((n,), len(keys), dtype=torch.int64).scatter_reduce_(
        0, label, torch.arange(len(keys)), "amin")
    rank = torch.argsort(first)
    renumber = torch.empty_like(rank)
    renumber[rank] = torch.arange(n)
    return renumber[label], n, first[rank]


def _patterns(codes: list[list[torch.Tensor]], n_sites: int, rows: torch.Tensor
              ) -> torch.Tensor:
    """(len(rows), units) the pieces' codes of every site side by side at ``rows`` (int8, or
    int32 when a max pooling's arg-max indices are among them)."""
    if not n_sites:
        return torch.zeros(len(rows), 0, dtype=torch.int8)
    per_site = [torch.cat([chunk[i] for chunk in codes])[rows] for i in range(n_sites)]
    dtype = torch.int32 if any(c.dtype != torch.int8 for c in per_site) else torch.int8
    return torch.cat([c.to(dtype) for c in per_site], 1)


def _points(anchors: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """x(u, v) (n, ...) from the plane's reference points ``anchors`` (3, ...), as the engine
    parametrizes the plane."""
    return torch.einsum("nr,r...->n...", plane_weights(uv.to(anchors)), anchors)


def _merge_vertices(points: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of one vertex (within about ``tol``) as one: each point's vertex (n,) and the
    vertices (m, 2) (the first copy of each). Points are grouped by their cell in two grids of
    step ``tol``, the second shifted by half a step, and groups sharing a point joined, so
    that copies a rounding error apart never fall in two groups (they would need to straddle
    a line of both grids)."""
    scaled = (points - points.amin(0)) / tol
    groups = [_groups(torch.floor(scaled + shift).to(torch.int64))[0] for shift in (0.0, 0.5)]
    label = torch.arange(len(points))
    while True:
        before = label
        for group in groups:
            least = torch.full((int(group.max()) + 1,), len(points), dtype=torch.int64)
            label = least.scatter_reduce_(0, group, label, "amin")[group]
        if torch.equal(label, before):
            break
    keep, vertex = torch.unique(label, return_inverse=True)
    return vertex, points[keep]


def _hulls(region: torch.Tensor, vertex: torch.Tensor, coords: torch.Tensor, n_regions: int,
           tol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The convex hull of every region's vertices, counter-clockwise: (vertex of each corner,
    offsets (n_regions + 1,) of each region's corners, regions left with fewer than 3
    corners). The vertices are sorted by angle around their mean (a point inside) and the
    corners that are not strict left turns, farther than ``tol`` from the chord of their
    neighbours, dropped in rounds until none is: with angles increasing about an inner point,
    such a corner lies in the triangle of the point and its neighbours, so never on the hull.
    A region whose hull would keep fewer than 3 corners keeps them all (collapsed)."""
    counts = torch.bincount(region, minlength=n_regions)
    centre = torch.zeros(n_regions, 2, dtype=coords.dtype).index_add_(0, region, coords[vertex])
    offset = coords[vertex] - (centre / counts.clamp(min=1).unsqueeze(1))[region]
    order = torch.argsort(torch.atan2(offset[:, 1], offset[:, 0]), stable=True)
    order = order[torch.argsort(region[order], stable=True)]
    region, vertex = region[order], vertex[order]
    while True:
        counts = torch.bincount(region, minlength=n_regions)
        start = (torch.cumsum(counts, 0) - counts)[region]
        size = counts[region]
        position = torch.arange(len(region)) - start
        a = coords[vertex[start + (position - 1) % size]]
        b, c = coords[vertex], coords[vertex[start + (position + 1) % size]]
        turn = (b[:, 0] - a[:, 0]) * (c[:, 1] - b[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - b[:, 0])
        keep = turn > tol * torch.linalg.vector_norm(c - a, dim=1)
        left = torch.bincount(region[keep], minlength=n_regions)
        keep |= (left < 3)[region]
        if bool(keep.all()):
            break
        region, vertex = region[keep], vertex[keep]
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    return vertex, offsets, left < 3


def _planar_graph(pieces: Polygons, group: torch.Tensor, n_regions: int, box, tol: float
                  ) -> dict:
    """The regions' polygons (hulls of their pieces' corners, shared corners merged) and the
    edges between them: vertices (V, 2), corners and offsets (the polygons), edge_vertices
    and edge_regions (E, 2) (right region -1 outside the box), and the counts of collapsed
    regions and of unmatched edges."""
    present = pieces.present()
    merged, coords = _merge_vertices(pieces.vertices[present], tol)
    region = group[present.nonzero()[:, 0]]
    pairs = torch.unique(region * len(coords) + merged)
    corners, offsets, collapsed = _hulls(pairs // len(coords), pairs % len(coords), coords,
                                         n_regions, tol)
    used, corners = torch.unique(corners, return_inverse=True)
    coords = coords[used]
    size = torch.diff(offsets)
    owner = torch.repeat_interleave(torch.arange(n_regions), size)
    position = torch.arange(len(corners)) - offsets[owner]
    following = corners[offsets[owner] + (position + 1) % size[owner]]
    key = corners * len(coords) + following
    ordered, index = torch.sort(key)
    reverse = following * len(coords) + corners
    match = torch.searchsorted(ordered, reverse).clamp(max=len(ordered) - 1)
    found = ordered[match] == reverse
    other = torch.where(found, owner[index[match]], -1)
    row = ~found | (corners < following)
    u0, u1, v0, v1 = box
    sides = torch.stack([(coords[:, 0] - u0).abs() <= tol, (coords[:, 0] - u1).abs() <= tol,
                         (coords[:, 1] - v0).abs() <= tol, (coords[:, 1] - v1).abs() <= tol], 1)
    on_box = (sides[corners] & sides[following]).any(1)
    return {"vertices": coords, "corners": corners, "offsets": offsets,
            "edge_vertices": torch.stack([corners, following], 1)[row],
            "edge_regions": torch.stack([owner, other], 1)[row],
            "collapsed": int(collapsed.sum()), "unmatched": int((~found & ~on_box).sum())}


def _region_polygons(graph: dict) -> Polygons:
    """The regions' polygons as :class:`Polygons` (one plane)."""
    size = torch.diff(graph["offsets"])
    slot = torch.minimum(torch.arange(int(size.max())), size.unsqueeze(1) - 1)
    corners = graph["corners"][graph["offsets"][:-1].unsqueeze(1) + slot]
    return Polygons(torch.zeros(len(size), dtype=torch.int64), graph["vertices"][corners],
                    size)


def _check_affine(adapter: ModelAdapter, model: nn.Module, anchors: torch.Tensor,
                  graph: dict, affine: torch.Tensor, refs: torch.Tensor, where: str) -> None:
    """The guard of the exact method: at the centres of :data:`AFFINE_CHECKS` regions the
    model must equal the region's affine map (else an operation traced as affine is not)."""
    n = len(affine)
    pick = torch.linspace(0, n - 1, min(n, AFFINE_CHECKS)).round().long().unique()
    centre = _region_polygons(graph).take(pick).interior()[:, 1:]
    y = adapter.select(model(_points(anchors, centre.to(anchors.device)))).reshape(
        len(pick), -1).cpu()
    predicted = torch.einsum("nij,nj->ni", affine[pick, :, :2], centre) + affine[pick, :, 2]
    scale = y.abs() + refs[pick].abs().sum(1) + 1e-300
    require_affine(y, predicted, scale, where, "region", "use method='grid'")


def _edge_sites(patterns: torch.Tensor, prefix: Optional[torch.Tensor],
                edge_regions: torch.Tensor, units: Sequence[int]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per edge, the depth (1-based site) and unit of the first code that differs between
    the regions on either side (0 and -1 on the box's boundary): the site is the first whose
    prefix hashes (``prefix``: (sites, regions, 2)) differ, the unit found among its codes."""
    depth = torch.zeros(len(edge_regions), dtype=torch.int64)
    unit = torch.full((len(edge_regions),), -1, dtype=torch.int64)
    if prefix is None:
        return depth, unit
    inner = (edge_regions[:, 1] >= 0).nonzero()[:, 0]
    left, right = edge_regions[inner].unbind(1)
    differ = (prefix[:, left] != prefix[:, right]).any(2)  # (sites, edges)
    site = differ.to(torch.uint8).argmax(0)
    found = differ.any(0)
    depth[inner] = torch.where(found, site + 1, 0)
    start = torch.cumsum(torch.tensor([0, *units]), 0)
    for s in range(len(units)):
        pick = (found & (site == s)).nonzero()[:, 0]
        for chosen in pick.split(max(1, COMPARED_ELEMENTS // units[s])):
            codes = patterns[:, start[s]:start[s + 1]]
            change = codes[left[chosen]] != codes[right[chosen]]
            unit[inner[chosen]] = change.to(torch.uint8).argmax(1)
    return depth, unit


def _decision_boundary(graph: dict, affine: torch.Tensor, tol: float) -> torch.Tensor:
    """(n, 2, 2) segments where the arg-max of the output changes (one output: where it is
    zero). Only regions whose corners disagree can hold some (the set where one output is
    the largest is convex); there, for each pair (i, j) of outputs that may lead somewhere in
    the region (max over corners of y_i at least max_k min over corners of y_k), the chord
    {y_i = y_j} of the polygon is clipped to where y_i = y_j >= every other output."""
    polygons = _region_polygons(graph)
    owner = torch.repeat_interleave(torch.arange(len(affine)), torch.diff(graph["offsets"]))
    vertices = graph["vertices"]
    maps = affine[torch.zeros(len(vertices), dtype=torch.int64).scatter_(
        0, graph["corners"], owner)]  # a region of each vertex: the network is continuous
    y = (torch.einsum("nij,nj->ni", maps[:, :, :2], vertices) + maps[:, :, 2])[graph["corners"]]
    n, d = affine.shape[:2]
    if d == 1:
        top = torch.full((n,), -math.inf, dtype=y.dtype).scatter_reduce_(0, owner, y[:, 0], "amax")
        low = torch.full((n,), math.inf, dtype=y.dtype).scatter_reduce_(0, owner, y[:, 0], "amin")
        region = ((top > 0) & (low < 0)).nonzero()[:, 0]
        ends, crosses = polygons.take(region).chords(_normal_form(affine[region, 0]), tol)
        return ends[crosses]
    best = y.argmax(1)
    first = torch.full((n,), d, dtype=torch.int64).scatter_reduce_(0, owner, best, "amin")
    last = torch.full((n,), -1, dtype=torch.int64).scatter_reduce_(0, owner, best, "amax")
    mixed = (first != last).nonzero()[:, 0]
    spread = owner.unsqueeze(1).expand(-1, d)
    high = torch.full((n, d), -math.inf, dtype=y.dtype).scatter_reduce_(0, spread, y, "amax")
    low = torch.full((n, d), math.inf, dtype=y.dtype).scatter_reduce_(0, spread, y, "amin")
    segments = [torch.zeros(0, 2, 2, dtype=torch.float64)]
    for chosen in mixed.split(max(1, 2**22 // d**2)):
        may = high[chosen] >= low[chosen].amax(1, keepdim=True)  # (m, d)
        pair = (may.unsqueeze(2) & may.unsqueeze(1)).triu(1)
        which, i, j = pair.nonzero(as_tuple=True)
        region = chosen[which]
        maps = affine[region]  # (p, d, 3)
        ends, crosses = polygons.take(region).chords(
            _normal_form(maps[torch.arange(len(i)), i] - maps[torch.arange(len(j)), j]), tol)
        segments.append(_clip_to_leaders(ends[crosses], maps[crosses], i[crosses], j[crosses],
                                         tol))
    return torch.cat(segments)


def _normal_form(maps: torch.Tensor) -> torch.Tensor:
    """Lines a u + b v + c = 0 of affine maps (n, 3) [a, b, c] as (n, 3) [c, a, b] / |(a, b)|
    (signed distance; a zero gradient gives a line that crosses nothing)."""
    norm = torch.linalg.vector_norm(maps[:, :2], dim=1, keepdim=True)
    return torch.cat([maps[:, 2:], maps[:, :2]], 1) / torch.where(norm > 0, norm, math.inf)


def _clip_to_leaders(ends: torch.Tensor, maps: torch.Tensor, i: torch.Tensor, j: torch.Tensor,
                     tol: float) -> torch.Tensor:
    """The part of each chord (n, 2, 2) of {y_i = y_j} where y_i is at least every other
    output of the region's affine maps (n, d, 3), kept when longer than ``tol``."""
    y = torch.einsum("nkc,nec->nek", maps[:, :, :2], ends) + maps[:, :, 2].unsqueeze(1)
    lead = y - y.gather(2, i.reshape(-1, 1, 1).expand(-1, 2, 1))  # y_k - y_i at both ends
    for pair in (i, j):  # y_i and y_j themselves: no constraint (not rounding noise)
        lead.scatter_(2, pair.reshape(-1, 1, 1).expand(-1, 2, 1), 0.0)
    start, slope = lead[:, 0], lead[:, 1] - lead[:, 0]  # y_k - y_i = start + s slope <= 0
    bound = -start / torch.where(slope != 0, slope, 1.0)
    lower = torch.where(slope < 0, bound, 0.0).amax(1).clamp(min=0.0)
    upper = torch.where(slope > 0, bound, 1.0).amin(1).clamp(max=1.0)
    upper = torch.where(((slope == 0) & (start > 0)).any(1), -1.0, upper)
    direction = ends[:, 1] - ends[:, 0]
    keep = (upper - lower) * torch.linalg.vector_norm(direction, dim=1) > tol
    origin = ends[:, 0]
    return torch.stack([origin + lower.unsqueeze(1) * direction,
                        origin + upper.unsqueeze(1) * direction], 1)[keep]


# ------------------------------------------------------------------------------------ grid


def _grid(adapter: ModelAdapter, slice_: Plane, raw: Optional[torch.Tensor], box, names,
          resolution: int) -> dict:
    """The grid method's fields of :class:`RegionsResult`: activation patterns at the centres
    of resolution x resolution cells of the box (``raw``: the template run with
    ``input_module``'s output replaced, else None)."""
    anchors = slice_.anchors.to(torch.float64)
    sites, layers = activation_sites(
        adapter, adapter.prepare_raw(anchors[:1]) if raw is None else raw, None)
    chosen = select_pattern_layers(layers, names, adapter.where)
    index = [layers.index(layer) for layer in chosen]
    u0, u1, v0, v1 = box
    u = u0 + (torch.arange(resolution, dtype=torch.float64) + 0.5) * (u1 - u0) / resolution
    v = v0 + (torch.arange(resolution, dtype=torch.float64) + 0.5) * (v1 - v0) / resolution
    uv = torch.stack(torch.meshgrid(u, v, indexing="xy"), -1).reshape(-1, 2)  # rows: v

    def codes_at(points: torch.Tensor) -> list[torch.Tensor]:
        x = adapter.prepare_raw(_points(anchors, points))
        return [c.cpu() for c in site_codes(adapter, sites, layers, x, raw)]

    hasher = PatternHasher()
    hashes: list[list[torch.Tensor]] = [[] for _ in layers]
    units = [code.shape[1] for code in codes_at(uv[:1])]
    chunk = points_per_chunk(sum(units))
    for points in uv.split(chunk):
        for i, code in enumerate(codes_at(points)):
            hashes[i].append(hasher(code, i))
    if layers:
        prefix = torch.cumsum(torch.stack([torch.cat(h) for h in hashes]), 0)
        group, n_regions, first = _groups(prefix[-1])
        depths = [_groups(prefix[i]) for i in index]
        patterns = torch.cat([torch.cat(c, 1) for c in (codes_at(p) for p in
                                                       uv[first].split(chunk))])
    else:
        group, n_regions = torch.zeros(len(uv), dtype=torch.int64), 1
        depths, patterns = [], torch.zeros(1, 0, dtype=torch.int8)
    cell = (u1 - u0) * (v1 - v0) / resolution**2
    rows = tuple(RegionLayer(layer.name, "activation", units[i], i + 1, count)
                 for layer, i, (_, count, _) in zip(chosen, index, depths))
    empty = np.zeros((0, 2), dtype=np.int64)
    return dict(
        n_regions=n_regions, per_depth=tuple(count for _, count, _ in depths), n_edges=None,
        n_vertices=None, n_pieces=None, layers=rows, near_coincident=None, smallest_area=None,
        collapsed_regions=None, unmatched_edges=None,
        note=f"grid: activation patterns at the centres of {resolution} x {resolution} cells "
             "of the box: a region narrower than a cell is missed, a pattern met in two "
             "places counts once; no polygons, edges or affine maps",
        vertices=np.zeros((0, 2)), corners=np.zeros(0, dtype=np.int64),
        offsets=np.zeros(1, dtype=np.int64), patterns=patterns.numpy(), affine_maps=None,
        areas=(torch.bincount(group, minlength=n_regions) * cell).numpy(),
        edge_vertices=empty, edge_regions=empty, edge_depths=np.zeros(0, dtype=np.int64),
        edge_units=np.zeros(0, dtype=np.int64), decision_boundary=None,
        image=np.stack([g.reshape(resolution, resolution).to(torch.int32).numpy()
                        for g, _, _ in depths]) if depths else None,
        site_names=tuple(layer.name for layer in layers))


# ------------------------------------------------------------------------------------ plot


def _plot(result: RegionsResult, depths, ax, decision_boundary: bool, points: Any):
    """Figure 1 of Raghu et al. (2017) (see :meth:`RegionsResult.plot`)."""
    require_extra("matplotlib", "report", "plot()")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    rows = {row.depth: (i, row) for i, row in enumerate(result.layers)}
    one_axes = ax is not None and not isinstance(ax, (list, tuple, np.ndarray))
    depths = _pane_depths(list(rows), depths, one_axes)
    if ax is None:
        _, ax = plt.subplots(1, len(depths), figsize=(3.6 * len(depths), 3.6), squeeze=False)
    axes = np.atleast_1d(np.asarray(ax, dtype=object)).ravel()
    if len(axes) != len(depths):
        raise invalid("RegionsResult.plot()", f"one Axes per pane ({len(depths)})",
                      f"{len(axes)}", "pass ax=None or a sequence of Axes, one per depth")
    u0, u1, v0, v1 = result.bounds
    colour = plt.get_cmap("tab10")
    marked = None if points is None else result.plane.coordinates(points).numpy()
    for k, axis in zip(depths, axes):
        index, row = rows[k]
        if result.method == "exact":
            drawn = (result.edge_depths >= 1) & (result.edge_depths <= k)
            axis.add_collection(LineCollection(
                result.vertices[result.edge_vertices[drawn]], linewidths=0.7,
                colors=[colour((d - 1) % 10) for d in result.edge_depths[drawn]]))
        else:
            axis.imshow(_grid_boundaries(result.image[:index + 1], colour),
                        origin="lower", extent=(u0, u1, v0, v1), interpolation="nearest")
        axis.plot([u0, u1, u1, u0, u0], [v0, v0, v1, v1, v0], color="black", linewidth=0.8)
        if decision_boundary and result.decision_boundary is not None \
                and k == len(result.site_names):
            axis.add_collection(LineCollection(result.decision_boundary, colors="black",
                                               linewidths=1.8))
        if marked is not None:
            axis.scatter(marked[:, 0], marked[:, 1], s=12, color="black", zorder=3)
        axis.set_xlim(u0, u1)
        axis.set_ylim(v0, v1)
        axis.set_aspect("equal")
        axis.set_title(f"depth {k} (to {row.name}): {row.regions} regions", fontsize=8)
    return axes


def _pane_depths(known: list[int], depths: Optional[Sequence[int]], one_axes: bool
                 ) -> list[int]:
    """The panes' depths: the requested ones (each a chosen site's depth); else the last one
    for ``one_axes``, every chosen one when at most 6, or 4 spread over them ending with the
    last."""
    if depths is None:
        if one_axes:
            return known[-1:]
        if len(known) <= 6:
            return known
        return [known[i] for i in np.unique(np.linspace(0, len(known) - 1, 4).round()
                                            .astype(int))]
    depths = [int(d) for d in np.atleast_1d(depths)]
    unknown = [d for d in depths if d not in known]
    if unknown or not depths:
        raise invalid("RegionsResult.plot()", f"depths among the chosen sites' {known}",
                      f"depths={depths}", "pass depths from [row.depth for row in "
                      "result.layers], or regions(..., layers=...) naming those sites")
    return depths


def _grid_boundaries(images: np.ndarray, colour) -> np.ndarray:
    """(resolution, resolution, 4) RGBA: cells whose region differs from the next cell's
    (right or up) after the last of ``images`` (one per site), coloured by the first site
    after which they differ; transparent elsewhere."""
    differs = np.zeros(images.shape, dtype=bool)
    differs[:, :, :-1] |= images[:, :, 1:] != images[:, :, :-1]
    differs[:, :-1, :] |= images[:, 1:, :] != images[:, :-1, :]
    first = differs.argmax(0)
    rgba = np.array([colour(i % 10) for i in range(len(images))])[first]
    rgba[..., 3] = differs[-1]
    return rgba
