"""Region density: how finely a network cuts input space into linear regions near given points.

Two views of the partition near points x_1..x_n (samples of the data, or Gaussian points with
the data's mean and per-feature standard deviation, the comparison of data, test and random
points the literature makes):

- **density along lines**: the linear regions met on segments [x - r u, x + r u] through each
  point along random unit directions u, per unit length. Exact for piecewise-linear networks
  (the piecewise-linear engine, :mod:`nngauge._internal.piecewise`, runs every segment of
  every point as a slice of one batched run), sampled for any network. At initialization it
  grows linearly in the number of neurons (Hanin and Rolnick, "Complexity of Linear Regions in
  Deep Networks", ICML 2019), far below the exponential worst case of Raghu et al. 2017.
- **local complexity** (Humayun, Balestriero and Baraniuk, "Deep Networks Always Grok and Here
  is Why", ICML 2024, figure 4, "local complexity approximation"; after "SplineCam", CVPR
  2023): per layer, the number of neurons whose boundary meets a cross-polytope (or cube) of
  radius r around x, read off the neighbourhood's vertices pushed through the network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Choice, Integer, Maybe, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.budget import DEFAULT_MAX_SECONDS
from nngauge._internal.data import collect
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import (
    CHUNK_POINTS,
    PatternLayer,
    activation_sites,
    select_pattern_layers,
    site_codes,
)
from nngauge._internal.piecewise import EngineReport, Intervals, PiecewiseEngine, float64_copy
from nngauge._internal.sites import Site
from nngauge._results import Result
from nngauge._vocabulary import deprecated_attribute, renamed
from nngauge.errors import invalid
from nngauge.measures.expressivity._lines import (
    AffineCheck,
    PieceBudget,
    bisect_changes,
    segment_of,
)

Method = Literal["exact", "sampled"]
Points = Literal["data", "random"]
Neighbourhood = Literal["cross-polytope", "cube"]
MAX_CUBE_DIMS = 12
"""A cube neighbourhood of P dimensions has 2^P vertices: at most 4,096 per point."""
RELATIVE_RADIUS = 0.05
"""``radius=None``: r is this fraction of the RMS distance between two of the samples."""


@dataclass(frozen=True)
class DensityLayer(Result):
    """One site's share of the partition near the points.

    Attributes:
        name: the site's name (the module's name, ``"name#k"`` for the k-th call of a module
            called several times per forward pass, the node's name for ``F.relu`` and the like).
        kind: ``"activation"`` or ``"maxpool"`` (exact method).
        units: neurons of the site (its pre-activation's numel per point; max pooling: outputs).
        transitions_per_length: region changes of its neurons (max pooling: arg-max changes)
            along all segments, divided by their total length n_points n_directions 2 r.
        local_complexity: mean over the points of the site's neurons whose boundary meets the
            neighbourhood; NaN where no forward hook reads the site (max pooling, functional
            activations such as ``F.relu``).
        local_complexity_std: their standard deviation over the points.
    """

    name: str
    kind: str
    units: int
    transitions_per_length: float
    local_complexity: float
    local_complexity_std: float


@dataclass(frozen=True)
class RegionDensityResult(Result):
    """Linear regions per unit length along lines, and local complexity, near points.

    Attributes:
        density: mean over the points of ``per_point``.
        density_std: standard deviation of ``per_point`` over the points.
        per_point: (n_points,) float64 array: linear regions per unit length on the point's
            segments, averaged over its directions (left out of ``to_dict``).
        regions: (n_points, n_directions) int64 array of the linear regions of each segment
            (left out of ``to_dict``).
        local_complexity: mean over the points of the total local complexity of the rows
            that have one.
        local_complexity_std: its standard deviation over the points.
        per_point_complexity: (n_points,) int64 array, the total per point (left out of
            ``to_dict``).
        layers: per-site rows (:class:`DensityLayer`), in call order.
        radius: r, the segments' half-length and the neighbourhood's radius.
        n_directions: segments per point.
        n_samples: points measured (``n_points``: its deprecated name).
        points: ``"data"`` or ``"random"``.
        method: ``"exact"`` or ``"sampled"``.
        settings: the options used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        near_coincident: exact method: breakpoint crossings merged into another within
            ``merge_tol`` (a sliver piece ignored each); None for ``"sampled"``.
        n_evaluations: sampled method: points of the segments at which patterns were read;
            exact method: the affinity check's evaluations.
        budget_exhausted: sampled method: refinement stopped for lack of evaluations.
        centers: (n_points, *input_shape) float64 points measured (left out of ``to_dict``).
        directions: (n_points, n_directions, *input_shape) float64 unit directions u (left
            out of ``to_dict``): segment (i, j) is centers[i] +- radius directions[i, j].
    """

    _rows = "layers"
    _headline = "transitions_per_length"

    density: float
    density_std: float
    per_point: np.ndarray = field(repr=False, compare=False)
    regions: np.ndarray = field(repr=False, compare=False)
    local_complexity: float
    local_complexity_std: float
    per_point_complexity: np.ndarray = field(repr=False, compare=False)
    layers: tuple[DensityLayer, ...]
    radius: float
    n_directions: int
    n_samples: int
    points: str
    method: str
    settings: dict
    mode: MeasurementMode
    near_coincident: Optional[int]
    n_evaluations: int
    budget_exhausted: bool
    centers: torch.Tensor = field(repr=False, compare=False)
    directions: torch.Tensor = field(repr=False, compare=False)

    def plot(self, ax=None):
        """Per-site bars: transitions per unit length (left axis) beside local complexity
        (right axis); returns the Axes. Needs matplotlib."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        positions = np.arange(len(self.layers))
        ax.bar(positions - 0.2, [row.transitions_per_length for row in self.layers], 0.4,
               color="C0", label="transitions per unit length")
        ax.set_ylabel("transitions per unit length")
        twin = ax.twinx()
        twin.bar(positions + 0.2, [row.local_complexity for row in self.layers], 0.4,
                 color="C1", label="local complexity (neurons)")
        twin.set_ylabel("local complexity (neurons)")
        ax.set_xticks(list(positions))
        ax.set_xticklabels([row.name for row in self.layers], rotation=60, ha="right",
                           fontsize=7)
        ax.set_title(f"{self.points} points, r = {self.radius:g}: {self.density:.3g} regions "
                     f"per unit length, local complexity {self.local_complexity:.3g}",
                     fontsize=9)
        ax.figure.legend(loc="upper right", fontsize=7)
        ax.figure.tight_layout()
        return ax

    n_points = deprecated_attribute("n_samples")


@renamed(n_points="max_samples")
@constrained(radius=Maybe(Real(0, low_open=True)), n_directions=Integer(1),
             method=Choice.literal(Method), points=Choice.literal(Points),
             max_samples=Maybe(Integer(1)), neighbourhood=Choice.literal(Neighbourhood),
             neighbourhood_dims=Maybe(Integer(1)), max_seconds=Maybe(Real(0, low_open=True)))
@model_options("output", "norm_mode")
def region_density(
    model: nn.Module,
    data: Any,
    *,
    radius: Optional[float] = None,
    n_directions: int = 8,
    layers: Optional[Sequence[str]] = None,
    method: Method = "exact",
    points: Points = "data",
    max_samples: Optional[int] = None,
    neighbourhood: Neighbourhood = "cross-polytope",
    neighbourhood_dims: Optional[int] = None,
    merge_tol: float = 1e-12,
    n_initial: int = 257,
    min_width: float = 1e-7,
    max_evaluations: int = 2**12,
    max_seconds: Optional[float] = DEFAULT_MAX_SECONDS,
    generator: Optional[torch.Generator | int] = None,
    options: ModelOptions,
    norm_data: Any = None,
    batch_size: int = CHUNK_POINTS,
) -> RegionDensityResult:
    """How finely ``model`` cuts input space into linear regions near points: regions per unit
    length along random lines, and the local complexity of Humayun, Balestriero and Baraniuk.

    **Density along lines.** For each point x_i and each of ``n_directions`` unit directions
    u_ij = g / ||g|| (g standard Gaussian, from ``generator``), R_ij is the number of linear
    regions of the segment [x_i - r u_ij, x_i + r u_ij] (maximal intervals of constant
    activation pattern: 1 + the points where some unit changes region or some max pooling its
    arg-max), and

        per_point_i = (1 / D) sum_j R_ij / (2 r),    density = mean_i per_point_i,

    with ``density_std`` the spread over the points; per site, transitions_per_length = (unit
    changes of the site on all segments) / (n D 2 r). At initialization the density grows
    linearly in the number of neurons (Hanin and Rolnick, "Complexity of Linear Regions in Deep
    Networks", ICML 2019). Methods:

    - ``"exact"`` (default; piecewise-linear networks, as :func:`~nngauge.transitions` accepts
      them): all n D segments go through one run of the piecewise-linear engine as separate
      1-D slices (every piece of every segment carries the affine map of every live node; each
      layer is one batched matmul over the pieces of a chunk), and R_ij counts the pieces of
      slice (i, j) whose codes differ from the piece before, exactly as ``transitions(model,
      x - r u, x + r u).n_pieces`` does on one segment. Computed on a float64 copy; every 64th
      piece is checked against the model (the engine's affine map must equal the output).
    - ``"sampled"`` (any network): activation patterns at ``n_initial`` equally spaced points
      of every segment, then every interval whose end patterns differ is bisected (widest
      first over all segments, all of them batched) until narrower than ``min_width`` or
      ``max_evaluations`` points per segment are spent; changes that cancel inside an
      interval are missed (exact >= sampled in the same precision: this method runs in the
      model's dtype). Activation sites only (no max pooling); the region of a smooth
      activation's unit is the sign of its pre-activation.

    **Local complexity** (Humayun, Balestriero and Baraniuk, "Deep Networks Always Grok and
    Here is Why", ICML 2024, figure 4: local complexity approximation; after Humayun et al.,
    "SplineCam", CVPR 2023). The neighbourhood of x is the convex hull of the vertices

        cross-polytope: V_x = {x +- r v_p : p = 1..P},
        cube:           V_x = {x + r sum_p s_p v_p : s in {-1, +1}^P},

    with v_1..v_P orthonormal: the coordinate axes (P = the input's dimension; the
    cross-polytope is then the l1 ball of radius r around x, the cube the l-infinity ball) or,
    with ``neighbourhood_dims=P``, P random orthonormal directions per point (QR of a Gaussian
    matrix from ``generator``; the paper's experiments use P = 20 to 25 with r from 0.005 to
    5). The vertices go through the network; at site l, whose pre-activation h^l_k is affine in
    the layer's input on the hull of the vertices' images (the paper's layer-local
    approximation: exact for the first layer), neuron k's boundary {h^l_k = c} (c a breakpoint
    of the activation; the sign for smooth activations) meets the neighbourhood iff its region
    is not constant over the vertices:

        LC_l(x) = #{k : region(h^l_k(v)) != region(h^l_k(v')) for some v, v' in V_x},
        LC(x) = sum_l LC_l(x).

    For one hidden layer h = W x + b and the axes' cross-polytope this is the closed form
    #{k : |w_k . x + b_k| < r max_i |w_ki|} (cube: r ||w_k||_1). The paper's code reads the
    pre-activation of every Linear layer, the output layer included; here every activation
    site, as the other expressivity measures. Rows give the mean and spread over the points.

    Args:
        model: the network; its output for a point must not depend on the batch (batchnorm
            with running or frozen statistics: ``norm_mode``).
        data: the points: a tensor (n, ...), numpy array, (inputs, labels) pair, Dataset or
            DataLoader of floating inputs; the first ``max_samples`` are used.
        radius: r > 0, in input units: the segments' half-length and the neighbourhood's radius;
            None: 0.05 x the root-mean-square distance between two of the samples,
            sqrt(mean_{a < b} ||x_a - x_b||^2) (a fixed fraction of the data's spread, at
            least 2 distinct samples).
        n_directions: D >= 1, segments per point.
        layers: site names of the rows (``result.layers[i].name``); default all. The density
            always counts every site; ``local_complexity`` sums the rows.
        method: ``"exact"`` or ``"sampled"`` (the density's method; local complexity is read
            from forward passes either way).
        points: ``"data"`` (the samples) or ``"random"`` (as many Gaussian points with the
            samples' per-feature mean and standard deviation, from ``generator``).
        max_samples: use the first max_samples samples (None: all).
        neighbourhood: ``"cross-polytope"`` (the paper's, 2P vertices) or ``"cube"`` (2^P
            vertices, P <= 12).
        neighbourhood_dims: P, random orthonormal directions per point; None: the input's
            coordinate axes (P = its dimension d: 2 d vertices per point; pass
            e.g. 25 for images).
        merge_tol: exact: crossings closer than this in a segment's t in [0, 1] are one.
        max_seconds: exact: time budget; once pieces have been followed for a second, the time
            so far over the share of the segments done estimates the whole, and an estimate
            over the budget is refused at once with it (naming the sampled method). Default
            60 s; None: no limit.
        n_initial, min_width, max_evaluations: sampled: grid points per segment, the width
            in t below which intervals are not bisected, and the evaluation budget per segment
            (shared by all segments).
        generator: torch.Generator for the directions, the random points and frames.
        output: which output is the model's for dict / tuple / ModelOutput outputs (the exact
            method's affinity check reads it).
        norm_mode, norm_data: batchnorm's statistics: "eval" (running) or "frozen" (computed on
            ``norm_data``, by default ``data``, then fixed); "train" is refused.
        batch_size: model inputs per forward pass (neighbourhood vertices, sampled points; at
            least one point's vertices). The results do not depend on it.

    Returns:
        :class:`RegionDensityResult`.

    Raises:
        InvalidInputError: radius not positive, n_directions < 1, bad options, non-floating
            data, fewer than 2 samples for ``points="random"``, samples without spread for
            ``radius=None``, a cube of more than 12
            dimensions, a model with operations that are not piecewise linear for the exact
            method (the error names each and suggests ``method="sampled"``), batchnorm in
            train mode.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 3), nn.ReLU())  # breakpoints at x = 1, 0, -1
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([-1., 0., 1.]))
        >>> res = region_density(net, torch.zeros(1, 1), radius=0.5, n_directions=2)
        >>> res.density, res.local_complexity, [row.name for row in res.layers]
        (2.0, 1.0, ['1'])
    """
    where = "region_density()"
    adapter = ModelAdapter(model, options, where=where)
    samples = collect(data, where=where, max_samples=max_samples, require_float=False).inputs
    if not samples.is_floating_point():
        raise invalid(where, "real-valued inputs (points are moved along lines in input space)",
                      f"integer inputs (token ids, dtype {samples.dtype})",
                      "measure a network on real-valued inputs (for a token model, its layers "
                      "after the embedding, on embedded inputs)")
    samples = samples.detach().to(torch.float64)
    if radius is None:
        radius = _spread_radius(samples, where)
    centers = samples if points == "data" else _random_points(samples, generator, where)
    n, shape = len(centers), tuple(centers.shape[1:])
    directions = _unit_directions(n, n_directions, shape, generator).to(centers.device)
    frames = _frames(n, math.prod(shape), neighbourhood, neighbourhood_dims, generator, where)
    anchors = torch.stack([centers.unsqueeze(1) - radius * directions,
                           centers.unsqueeze(1) + radius * directions], 2).flatten(0, 1)
    with adapter.active(data=data if norm_data is None else norm_data), torch.no_grad():
        adapter.require_independent_samples()
        sites, patterns = activation_sites(adapter, centers[:2], None)
        if method == "exact":
            lines = _exact_lines(adapter, anchors, layers, merge_tol, max_seconds)
        else:
            lines = _sampled_lines(adapter, sites, patterns, anchors, layers, n_initial,
                                   min_width, max_evaluations * len(anchors), batch_size)
        complexity = _local_complexity(adapter, sites, patterns, centers, frames, radius,
                                       neighbourhood, batch_size)
    regions = lines.regions.reshape(n, n_directions).cpu().numpy()
    per_point = regions.mean(1) / (2 * radius)
    rows = _rows(lines, complexity, patterns, len(anchors) * 2 * radius)
    picked = [i for row in rows for i, p in enumerate(patterns) if p.name == row.name]
    totals = complexity[:, picked].sum(1).cpu().numpy()
    settings = {"method": method, "neighbourhood": neighbourhood,
                "neighbourhood_dims": neighbourhood_dims,
                "vertices_per_point": _n_vertices(neighbourhood, frames.shape[2]),
                "batch_size": batch_size}
    settings.update({"merge_tol": merge_tol, "max_seconds": max_seconds} if method == "exact"
                    else {"n_initial": n_initial, "min_width": min_width,
                          "max_evaluations": max_evaluations})
    return RegionDensityResult(
        density=float(per_point.mean()), density_std=float(per_point.std()),
        per_point=per_point, regions=regions, local_complexity=float(totals.mean()),
        local_complexity_std=float(totals.std()), per_point_complexity=totals,
        layers=rows, radius=float(radius), n_directions=n_directions, n_samples=n, points=points,
        method=method, settings=settings, mode=adapter.mode,
        near_coincident=lines.near_coincident, n_evaluations=lines.n_evaluations,
        budget_exhausted=lines.budget_exhausted, centers=centers.cpu(),
        directions=directions.cpu())


def _spread_radius(samples: torch.Tensor, where: str) -> float:
    """:data:`RELATIVE_RADIUS` x the RMS distance between two of the samples (the mean of
    ||x_a - x_b||^2 over pairs a < b is twice the summed unbiased per-entry variance)."""
    points = samples.flatten(1)
    spread = float(points.var(0).sum().mul(2).sqrt()) if len(points) > 1 else 0.0
    if not spread > 0:
        raise invalid(where, "at least 2 distinct samples (radius=None is a fraction of their "
                      "spread)", f"{len(points)} sample(s), spread {spread:g}",
                      "pass more samples, or radius=<half-length in input units>")
    return RELATIVE_RADIUS * spread


def _random_points(samples: torch.Tensor, generator: Optional[torch.Generator],
                   where: str) -> torch.Tensor:
    """Gaussian points with the samples' per-feature mean and standard deviation."""
    if len(samples) < 2:
        raise invalid(where, "at least 2 samples to estimate the per-feature mean and standard "
                      "deviation of points='random'", f"{len(samples)} sample",
                      "pass more samples, or points='data'")
    noise = torch.randn(samples.shape, generator=generator, dtype=torch.float64)
    return samples.mean(0) + samples.std(0) * noise.to(samples.device)


def _unit_directions(n: int, count: int, shape: tuple[int, ...],
                     generator: Optional[torch.Generator]) -> torch.Tensor:
    """(n, count, *shape) float64 directions g / ||g|| with g standard Gaussian."""
    g = torch.randn(n, count, math.prod(shape), generator=generator, dtype=torch.float64)
    return (g / g.norm(dim=2, keepdim=True)).reshape(n, count, *shape)


def _frames(n: int, dim: int, neighbourhood: str, dims: Optional[int],
            generator: Optional[torch.Generator], where: str) -> torch.Tensor:
    """The neighbourhood's orthonormal directions as columns: (1, dim, dim) coordinate axes
    for ``dims=None``, else (n, dim, dims) random orthonormal frames (QR of Gaussians)."""
    if dims is not None and dims > dim:
        raise invalid(where, f"neighbourhood_dims at most the input's dimension {dim}",
                      f"neighbourhood_dims={dims}", "pass fewer dimensions, or None")
    size = dim if dims is None else dims
    if neighbourhood == "cube" and size > MAX_CUBE_DIMS:
        raise invalid(where, f"a cube of at most {MAX_CUBE_DIMS} dimensions (2^P vertices)",
                      f"{size} dimensions", "pass neighbourhood_dims=12 or fewer, or "
                      "neighbourhood='cross-polytope' (2P vertices)")
    if dims is None:
        return torch.eye(dim, dtype=torch.float64).unsqueeze(0)
    gaussian = torch.randn(n, dim, dims, generator=generator, dtype=torch.float64)
    return torch.linalg.qr(gaussian).Q


def _n_vertices(neighbourhood: str, dims: int) -> int:
    """Vertices of a cross-polytope (2P) or cube (2^P) of P dimensions."""
    return 2 * dims if neighbourhood == "cross-polytope" else 2**dims


def _vertex_offsets(frames: torch.Tensor, neighbourhood: str, radius: float) -> torch.Tensor:
    """(k, vertices, dim) offsets of the neighbourhood's vertices from its center."""
    rows = frames.transpose(1, 2)  # (k, P, dim): v_1..v_P
    if neighbourhood == "cross-polytope":
        return radius * torch.cat([rows, -rows], 1)
    size = rows.shape[1]
    corners = torch.arange(2**size).unsqueeze(1).bitwise_right_shift(torch.arange(size)) & 1
    signs = (2.0 * corners - 1.0).to(rows)  # (2^P, P)
    return radius * torch.matmul(signs, rows)


def _local_complexity(adapter: ModelAdapter, sites: Sequence[Site],
                      patterns: Sequence[PatternLayer], centers: torch.Tensor,
                      frames: torch.Tensor, radius: float, neighbourhood: str,
                      batch_size: int) -> torch.Tensor:
    """(n, sites) int64 neurons per activation site whose region is not constant over each
    point's neighbourhood vertices; the vertices of as many points as ``batch_size`` inputs
    hold go through one forward pass."""
    n, flat = len(centers), centers.flatten(1)
    per_pass = max(1, batch_size // _n_vertices(neighbourhood, frames.shape[2]))
    counts = []
    for start in range(0, n, per_pass):
        part = flat[start:start + per_pass]
        offsets = _vertex_offsets(frames if len(frames) == 1 else frames[start:start + per_pass],
                                  neighbourhood, radius)
        vertices = part.unsqueeze(1) + offsets.to(part.device)
        x = adapter.prepare_raw(vertices.reshape(-1, *centers.shape[1:]))
        codes = site_codes(adapter, sites, patterns, x, None)
        crossed = [(c != c[:, :1]).any(1).sum(1) for c in
                   (code.reshape(len(part), vertices.shape[1], -1) for code in codes)]
        counts.append(torch.stack(crossed, 1).cpu() if crossed
                      else torch.zeros(len(part), 0, dtype=torch.int64))
    return torch.cat(counts)


@dataclass(frozen=True)
class _Lines:
    """Counts along the segments: regions per segment, per reported site (name, kind, units,
    transitions on all segments), and the method's diagnostics."""

    regions: torch.Tensor
    sites: list[tuple[str, str, int, int]]
    near_coincident: Optional[int]
    n_evaluations: int
    budget_exhausted: bool


class _SegmentCounter:
    """Streaming counts over consecutive rows of codes (pieces or sampled points, in segment
    order) tagged with their segment: per segment the boundaries (consecutive rows of one
    segment whose codes differ at some site), per site the units that change between
    consecutive rows of one segment."""

    def __init__(self, n_segments: int, n_sites: int) -> None:
        self.boundaries = torch.zeros(n_segments, dtype=torch.int64)
        self.transitions = [0] * n_sites
        self._last: Optional[tuple[torch.Tensor, list[torch.Tensor]]] = None

    def add(self, segment: torch.Tensor, codes: Sequence[torch.Tensor]) -> None:
        if self._last is not None:
            segment = torch.cat([self._last[0], segment])
            codes = [torch.cat([a, b]) for a, b in zip(self._last[1], codes)]
        segment = segment.cpu()
        same = (segment[1:] == segment[:-1]).unsqueeze(1)
        changed = torch.zeros(len(segment) - 1, dtype=torch.bool)
        for i, code in enumerate(codes):
            diff = (code[1:] != code[:-1]) & same.to(code.device)
            self.transitions[i] += int(diff.sum())
            changed |= diff.any(1).cpu()
        self.boundaries += torch.bincount(segment[1:][changed], minlength=len(self.boundaries))
        self._last = (segment[-1:], [code[-1:] for code in codes])

    def regions(self) -> torch.Tensor:
        return self.boundaries + 1


def _exact_lines(adapter: ModelAdapter, anchors: torch.Tensor, names, merge_tol: float,
                 max_seconds: Optional[float]) -> _Lines:
    """All segments (``anchors``: (segments, 2, ...)) as slices of one engine run on a
    float64 copy of the model, counted chunk by chunk, within ``max_seconds``."""
    model = float64_copy(adapter.model)
    device = next((p.device for p in model.parameters()), anchors.device)
    anchors = anchors.to(device)
    engine = PiecewiseEngine(model, anchors[:1, 0], where=adapter.where)
    chosen = select_pattern_layers(engine.sites, names, adapter.where)
    counter, report = _SegmentCounter(len(anchors), len(engine.sites)), EngineReport()
    check = AffineCheck(lambda x: adapter.select(model(x)), anchors, adapter.select,
                         adapter.where)
    budget = PieceBudget(adapter.where, max_seconds, path=f"the {len(anchors)} segments",
                        shorter="fewer samples or directions, or a smaller radius")
    for chunk in engine.run(Intervals.whole(len(anchors), device), anchors, merge_tol=merge_tol,
                            report=report):
        last = len(chunk.pieces) - 1  # segments stream out in order
        done = (int(chunk.pieces.slice_index[last]) + float(chunk.pieces.hi[last])) / len(anchors)
        budget.check_pieces(done, report.pieces)
        check.add(chunk)
        counter.add(chunk.pieces.slice_index, chunk.codes)
    check.flush()
    sites = [(site.name, site.kind, site.units, counter.transitions[engine.sites.index(site)])
             for site in chosen]
    return _Lines(counter.regions(), sites, report.near_coincident, check.evaluations, False)


def _sampled_lines(adapter: ModelAdapter, sites: Sequence[Site],
                   patterns: Sequence[PatternLayer], anchors: torch.Tensor, names,
                   n_initial: int, min_width: float, budget: int, batch_size: int) -> _Lines:
    """Patterns at points of every segment, refined by :func:`bisect_changes` over all
    segments at once; the counts then read the codes at the ends of the intervals whose
    patterns differ (the rows between two such ends all repeat the first's pattern)."""
    chosen = select_pattern_layers(patterns, names, adapter.where)

    def codes_at(keys: torch.Tensor) -> list[torch.Tensor]:
        segment = segment_of(keys)
        t = (keys - 2 * segment).reshape(-1, *[1] * (anchors.dim() - 2)).to(anchors.device)
        x = torch.lerp(anchors[segment, 0], anchors[segment, 1], t)
        return site_codes(adapter, sites, patterns, adapter.prepare_raw(x), None)

    grid = torch.linspace(0.0, 1.0, max(2, n_initial), dtype=torch.float64)
    keys = (2.0 * torch.arange(len(anchors), dtype=torch.float64).unsqueeze(1) + grid).flatten()
    units = [code.shape[1] for code in codes_at(keys[:1])]
    keys, _, differs, spent = bisect_changes(codes_at, len(patterns), keys, min_width,
                                          budget, batch_size)
    ends = torch.nonzero(differs)[:, 0]
    rows = torch.unique(torch.cat([ends, ends + 1]))
    counter = _SegmentCounter(len(anchors), len(patterns))
    for start in range(0, len(rows), batch_size):
        part = keys[rows[start:start + batch_size]]
        counter.add(segment_of(part), codes_at(part))
    index = {p.name: i for i, p in enumerate(patterns)}
    lines = [(p.name, "activation", units[index[p.name]], counter.transitions[index[p.name]])
             for p in chosen]
    return _Lines(counter.regions(), lines, None, len(keys), spent)


def _rows(lines: _Lines, complexity: torch.Tensor, patterns: Sequence[PatternLayer],
          length: float) -> tuple[DensityLayer, ...]:
    """One row per reported site: transitions per unit length, and the local complexity of
    the activation site of the same name (NaN where there is none)."""
    index = {p.name: i for i, p in enumerate(patterns)}
    rows = []
    for name, kind, units, count in lines.sites:
        values = complexity[:, index[name]].double() if name in index else None
        rows.append(DensityLayer(
            name, kind, units, count / length,
            math.nan if values is None else float(values.mean()),
            math.nan if values is None else float(values.std(correction=0))))
    return tuple(rows)


__all__ = ["DensityLayer", "RegionDensityResult", "bisect_changes", "region_density"]
