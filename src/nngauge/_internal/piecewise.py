"""The piecewise-linear engine: the exact linear pieces of a network on a slice of input space
(Raghu, Poole, Kleinberg, Ganguli and Sohl-Dickstein, "On the Expressive Power of Deep Neural
Networks", ICML 2017, section 2.1: transitions, activation patterns, Theorem 2, Corollary 1).

A *slice* of dimension k maps slice coordinates s in R^k affinely into input space: a segment
x(t) = (1 - t) a + t b, t in [0, 1] (a polyline is one slice per segment), or a plane. A network
of affine maps, piecewise-linear activations and max pooling is piecewise affine on a slice: on
every *piece* (an interval, a convex polygon) each node v of its graph is affine in s,

    v(s) = v_0 + sum_i s_i (v_i - v_0),

where v_0, ..., v_k are its values at the slice's k + 1 *reference points* (1-D: t = 0, t = 1;
2-D: (0, 0), (1, 0), (0, 1)), the extrapolation of the piece's affine map. Every piece carries
these reference values for every live node; those of the input are the slice's anchors.

:class:`PiecewiseEngine` walks the ops of the model's ``torch.fx`` graph
(:mod:`nngauge._internal.graph`) in topological order, each op evaluated once for all pieces of
a chunk as one batch of shape (pieces * (k + 1), ...):

- an affine op maps the reference values of an affine function to those of its image
  (A v(s) + c has reference values A v_i + c), so it is evaluated on the batch as it is: a
  Linear is one batched matmul for all pieces (over the input features nonzero on some piece:
  after a ReLU about half the units are off throughout a chunk of consecutive pieces);
- at a piecewise-linear activation phi with breakpoints c_1 < ... < c_r, the geometry cuts
  every piece wherever a unit's pre-activation h_u(s) meets a c_j strictly inside it
  (crossings closer than ``merge_tol`` merge and are counted as near-coincident); children
  inherit their parent's reference values (no interpolation). Each unit's region
  r = #{j : h_u > c_j}, read at the piece's interior, selects the linear branch
  phi(h) = a_r h + b_r, applied to the reference values (phi itself never is: they may lie
  outside the piece). The (a_r, b_r) come from phi evaluated at two points inside each region
  on a tensor shaped like one sample, so per-channel PReLU slopes are read as well;
- at a max pooling y_o = max_{i in window(o)} x_i, pieces are cut where an entry of a window
  meets the entry i* maximal at the piece's interior, x_i(s) = x_{i*}(s), until every window's
  arg-max is constant on every piece; y_o is then the arg-max entry's reference values. The
  arg-max index is the site's code (a change of arg-max is a boundary; a cut where the
  arg-max does not change leaves two pieces with equal codes).

Regions and codes are those of :mod:`nngauge._internal.patterns`. Pieces are independent: when
a cut yields more pieces than a chunk holds (:data:`MAX_ELEMENTS`), the rest of the graph runs
chunk by chunk, depth first, so final pieces stream out in slice order (:class:`Chunk`) and
memory stays bounded. The slice's geometry is isolated in a :class:`Geometry` (``n_refs``,
``slice_index``, ``len``, ``take``, ``interior``, ``sizes``, ``cut``): the 1-D
:class:`Intervals` (a polyline's segments) and the 2-D :class:`Polygons` (convex polygons in a
plane's coordinates, cut along the lines where affine functions meet their levels: Theorem 2's
convex polytopes); the propagation is the same for both.
"""

from __future__ import annotations

import copy
import math
import re
from collections import ChainMap, defaultdict
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Optional, Protocol, Sequence, Union

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.graph import GraphOp, ModelGraph, target_name, trace_graph
from nngauge._internal.patterns import region_codes
from nngauge.errors import invalid

MAX_ELEMENTS = 2**20
"""Chunk budget: pieces x (k + 1) x the largest per-sample tensor of an op (a max pooling's
window entries counted) stays below this many elements. Small chunks are faster as well as
lighter: tensors of a few MB reuse freed memory, larger ones are mapped afresh (page faults)."""


LIVE_FRACTION = 0.8
"""A Linear after an activation multiplies only the live input features (nonzero on some piece
of the chunk) when they are at most this fraction of all."""


def float64_copy(model: nn.Module) -> nn.Module:
    """A float64 deep copy of ``model`` (the user's model is never changed): crossings are
    solved in double precision."""
    return copy.deepcopy(model).to(torch.float64)


# ------------------------------------------------------------------------------- geometry


class Geometry(Protocol):
    """The pieces of a k-dimensional slice, as the propagation sees them.

    Attributes:
        n_refs: k + 1, the reference points per piece.
        slice_index: (pieces,) int64, the slice (polyline segment) each piece lies in.
    """

    n_refs: int
    slice_index: torch.Tensor

    def __len__(self) -> int:
        ...

    def take(self, index: torch.Tensor) -> "Geometry":
        """The pieces at ``index`` (int64, (n,)), in that order."""

    def interior(self) -> torch.Tensor:
        """(pieces, k + 1) weights w of a point inside each piece: x = sum_r w_r x_r."""

    def sizes(self) -> torch.Tensor:
        """(pieces,) length (1-D) or area (2-D) of each piece in slice coordinates."""

    def cut(self, values: torch.Tensor, levels: Sequence[float], tol: float,
            limit: Optional[int] = None) -> "Cut":
        """Cut every piece along every set {f = c} (c in ``levels``) met strictly inside it, f
        one of the M affine functions with reference values ``values`` (pieces, k + 1, M).
        Cuts closer than ``tol`` to one another or to the piece's boundary merge. Raises
        :class:`PieceLimit` as soon as the cut is known to make more than ``limit`` pieces
        (before it holds them)."""


class PieceLimit(Exception):
    """A run would make more pieces than its limit: ``pieces`` is a lower bound on their
    number. Measures turn it into their own refusal (naming their option)."""

    def __init__(self, pieces: int) -> None:
        super().__init__(f"more than {pieces} pieces")
        self.pieces = pieces


def _check_limit(pieces: int, limit: Optional[int]) -> None:
    if limit is not None and pieces > limit:
        raise PieceLimit(pieces)


@dataclass(frozen=True)
class Cut:
    """The result of :meth:`Geometry.cut`.

    Attributes:
        parent: (new pieces,) int64 index of each new piece's parent, nondecreasing: the
            children of a piece are consecutive and in slice order.
        pieces: the new pieces.
        merged: crossings dropped for lying within the tolerance of another crossing or of
            the piece's boundary (near-coincident breakpoints).
    """

    parent: torch.Tensor
    pieces: Geometry
    merged: int


@dataclass(frozen=True)
class Intervals:
    """Pieces [lo, hi] of the segments of a polyline: one 1-D slice per segment, in the
    segment's parameter t in [0, 1], reference points t = 0 and t = 1.

    Attributes:
        slice_index: (pieces,) int64 segment of each piece.
        lo, hi: (pieces,) float64 ends of each piece.

    Example:
        >>> import torch
        >>> whole = Intervals.whole(1, torch.device("cpu"))
        >>> h = torch.tensor([[[-1.0, 0.5], [3.0, 2.5]]], dtype=torch.float64)  # (1, refs, units)
        >>> cut = whole.cut(h, (0.0,), 1e-12)  # h_0 = -1 + 4t crosses 0, h_1 = 0.5 + 2t not
        >>> cut.pieces.lo.tolist(), cut.pieces.hi.tolist(), cut.parent.tolist()
        ([0.0, 0.25], [0.25, 1.0], [0, 0])
    """

    slice_index: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    n_refs: ClassVar[int] = 2

    @classmethod
    def whole(cls, n_segments: int, device: torch.device) -> "Intervals":
        """One piece [0, 1] per segment."""
        ones = torch.ones(n_segments, dtype=torch.float64, device=device)
        return cls(torch.arange(n_segments, device=device), torch.zeros_like(ones), ones)

    def __len__(self) -> int:
        return len(self.lo)

    def take(self, index: torch.Tensor) -> "Intervals":
        return Intervals(self.slice_index[index], self.lo[index], self.hi[index])

    def at(self, fraction: float) -> torch.Tensor:
        """(pieces, 2) weights (1 - u, u) of the point u = lo + fraction (hi - lo)."""
        u = self.lo + fraction * (self.hi - self.lo)
        return torch.stack([1.0 - u, u], 1)

    def interior(self) -> torch.Tensor:
        return self.at(0.5)

    def sizes(self) -> torch.Tensor:
        return self.hi - self.lo

    def bounds(self, knots: torch.Tensor) -> torch.Tensor:
        """(pieces, 2) [start, end] of each piece in the polyline's parameter, the segments
        running between consecutive ``knots``."""
        start, step = knots[self.slice_index], knots[self.slice_index + 1] - knots[self.slice_index]
        return torch.stack([start + step * self.lo, start + step * self.hi], 1)

    def cut(self, values: torch.Tensor, levels: Sequence[float], tol: float,
            limit: Optional[int] = None) -> Cut:
        at_lo = torch.lerp(values[:, 0], values[:, 1], self.lo.unsqueeze(1))
        at_hi = torch.lerp(values[:, 0], values[:, 1], self.hi.unsqueeze(1))
        found = [_sign_changes(at_lo, at_hi, c) for c in levels]
        piece = torch.cat([p for p, _ in found])
        lo, hi = self.lo[piece], self.hi[piece]
        t = torch.lerp(lo, hi, torch.cat([u for _, u in found]))
        inside = (t > lo + tol) & (t < hi - tol)
        piece, points = _sorted_within(piece[inside], t[inside])
        keep = torch.ones_like(piece, dtype=torch.bool)
        keep[1:] = (piece[1:] != piece[:-1]) | (points[1:] - points[:-1] > tol)
        merged = len(t) - int(keep.sum())
        _check_limit(len(self) + int(keep.sum()), limit)
        if not bool(keep.any()):
            return Cut(torch.arange(len(self), device=self.lo.device), self, merged)
        return Cut(*self._split(piece[keep], points[keep]), merged)

    def _split(self, piece: torch.Tensor, points: torch.Tensor) -> tuple[torch.Tensor,
                                                                         "Intervals"]:
        """Children of every piece at its sorted cut ``points`` (``piece`` nondecreasing)."""
        counts = torch.bincount(piece, minlength=len(self)) + 1
        parent = torch.repeat_interleave(torch.arange(len(self), device=piece.device), counts)
        first = torch.cumsum(counts, 0) - counts
        starts = torch.empty(len(parent), dtype=self.lo.dtype, device=self.lo.device)
        starts[first] = self.lo
        starts[torch.arange(len(piece), device=piece.device) + piece + 1] = points
        ends = torch.empty_like(starts)
        ends[:-1] = starts[1:]
        ends[first + counts - 1] = self.hi
        return parent, Intervals(self.slice_index[parent], starts, ends)


def _sign_changes(at_lo: torch.Tensor, at_hi: torch.Tensor, level: float) -> tuple[
        torch.Tensor, torch.Tensor]:
    """Pieces whose function (pieces, M) takes ``level`` strictly between its values at the
    piece's ends, and where, as the fraction (level - f(lo)) / (f(hi) - f(lo)) of the piece."""
    piece, unit = ((at_lo > level) != (at_hi > level)).nonzero(as_tuple=True)
    start = at_lo[piece, unit]
    return piece, (level - start) / (at_hi[piece, unit] - start)


def _sorted_within(piece: torch.Tensor, points: torch.Tensor) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """(piece, points) ordered by piece, then by point (two stable sorts)."""
    points, order = torch.sort(points)
    piece, regroup = torch.sort(piece[order], stable=True)
    return piece, points[regroup]


def polyline_slices(vertices: torch.Tensor) -> tuple[Intervals, torch.Tensor]:
    """The 1-D slices of the polyline through ``vertices`` (m, ...): one whole piece per
    segment, and the anchors (m - 1, 2, ...) (each segment's ends: the input's reference
    values)."""
    anchors = torch.stack([vertices[:-1], vertices[1:]], 1)
    return Intervals.whole(len(anchors), vertices.device), anchors


@dataclass(frozen=True)
class Polygons:
    """Convex polygons of planes: one 2-D slice per plane x(u, v) = x_0 + u (x_1 - x_0) +
    v (x_2 - x_0), pieces in its coordinates (u, v), reference points (0, 0), (1, 0), (0, 1).

    Attributes:
        slice_index: (pieces,) int64 plane of each piece.
        vertices: (pieces, K, 2) float64 corners (u, v), counter-clockwise; a polygon of fewer
            than K corners repeats its last one (so maxima and minima over corners, the
            shoelace area and the walk around the boundary need no mask).
        counts: (pieces,) int64 corners of each polygon (at least 3).

    :meth:`cut` splits every polygon along every line {f = c} met strictly inside it (f one
    of M affine functions, c a level) at once: the lines met are found for all polygons x
    functions x levels in one pass (only those meeting the disk around a polygon are
    evaluated at its corners); then, in rounds, every polygon still crossed by a line is split
    in two along the one of its lines that passes closest to its centre (which halves it and
    its other lines about evenly, so that the rounds are about log2 of the pieces made, not
    the lines, deep), and the parent's other lines are kept for each half that they still
    cross. All polygons and lines of a round are one batch. A line crosses a polygon when some
    corner lies
    farther than ``tol`` (in plane coordinates) on each side of it; corners within ``tol`` of
    the cutting line belong to both halves (a crossing merged into a corner), and a line that
    changes sign over the corners but comes within ``tol`` of the boundary only is not cut
    (a sliver ignored): both are counted in :attr:`Cut.merged`. Signed distances are
    evaluated with one elementwise formula, so the round that cuts along a line finds the
    corners where the check that kept the line found them: every half has corners strictly
    on its side and is a proper polygon.

    Example:
        >>> import torch
        >>> square = Polygons.box((0.0, 1.0, 0.0, 1.0), 1, torch.device("cpu"))
        >>> h = torch.tensor([[[-0.5], [0.5], [-0.5]]], dtype=torch.float64)  # h = u - 0.5
        >>> cut = square.cut(h, (0.0,), 1e-12)
        >>> cut.pieces.counts.tolist(), cut.pieces.sizes().tolist(), cut.parent.tolist()
        ([4, 4], [0.5, 0.5], [0, 0])
    """

    slice_index: torch.Tensor
    vertices: torch.Tensor
    counts: torch.Tensor
    n_refs: ClassVar[int] = 3

    @classmethod
    def box(cls, bounds: Sequence[float], n_planes: int, device: torch.device) -> "Polygons":
        """The rectangle u_min <= u <= u_max, v_min <= v <= v_max of every plane, ``bounds`` =
        (u_min, u_max, v_min, v_max)."""
        u0, u1, v0, v1 = (float(b) for b in bounds)
        corners = torch.tensor([[u0, v0], [u1, v0], [u1, v1], [u0, v1]], dtype=torch.float64,
                               device=device)
        return cls(torch.arange(n_planes, device=device),
                   corners.expand(n_planes, 4, 2).clone(),
                   torch.full((n_planes,), 4, dtype=torch.int64, device=device))

    @classmethod
    def concatenate(cls, parts: Sequence["Polygons"]) -> "Polygons":
        """The pieces of ``parts``, in order, as one :class:`Polygons`."""
        width = max(p.vertices.shape[1] for p in parts)
        return cls(torch.cat([p.slice_index for p in parts]),
                   torch.cat([_pad(p.vertices, p.counts, width) for p in parts]),
                   torch.cat([p.counts for p in parts]))

    def __len__(self) -> int:
        return len(self.counts)

    def take(self, index: torch.Tensor) -> "Polygons":
        counts = self.counts[index]
        width = int(counts.max()) if len(counts) else self.vertices.shape[1]
        return Polygons(self.slice_index[index], self.vertices[index, :width], counts)

    def present(self) -> torch.Tensor:
        """(pieces, K) whether each corner slot holds a corner (not a repeat)."""
        return torch.arange(self.vertices.shape[1], device=self.counts.device) \
            < self.counts.unsqueeze(1)

    def _centres(self) -> torch.Tensor:
        """(pieces, 2) mean of each polygon's corners (a point inside it)."""
        return (self.vertices * self.present().unsqueeze(-1)).sum(1) / self.counts.unsqueeze(1)

    def interior(self) -> torch.Tensor:
        return plane_weights(self._centres())

    def sizes(self) -> torch.Tensor:
        """(pieces,) areas (shoelace formula, corners taken relative to the first)."""
        u, v = (self.vertices - self.vertices[:, :1]).unbind(-1)
        return 0.5 * (u * v.roll(-1, 1) - u.roll(-1, 1) * v).sum(1)

    def cut(self, values: torch.Tensor, levels: Sequence[float], tol: float,
            limit: Optional[int] = None) -> Cut:
        # a convex polygon crossed by L distinct lines falls into at least L + 1 pieces, so
        # pieces done + pieces being cut + lines still to cut them bounds the result below
        # (lines that coincide exactly are the exception: the limit is a budget, not a count)
        lines, piece, merged = self._lines_met(values, levels, tol)
        _check_limit(len(self) + len(piece), limit)
        device = self.counts.device
        if not len(piece):
            return Cut(torch.arange(len(self), device=device), self, merged)
        crossed = torch.zeros(len(self), dtype=torch.bool, device=device)
        crossed[piece] = True
        done = [(~crossed).nonzero()[:, 0]]
        parts = [self.take(done[0])]
        origin, vertices, counts = crossed.nonzero()[:, 0], self.vertices[crossed], \
            self.counts[crossed]
        piece = (torch.cumsum(crossed, 0) - 1)[piece]
        while len(piece):
            present = torch.arange(vertices.shape[1], device=device) < counts.unsqueeze(1)
            chosen = _central(piece, lines, vertices, present, counts)
            rest = torch.ones_like(piece, dtype=torch.bool)
            rest[chosen] = False
            dist = _signed_distances(lines[chosen], vertices)
            merged += int((present & (dist.abs() <= tol)).sum())
            vertices, counts = _halves(vertices, counts, dist, tol)
            origin = origin.repeat_interleave(2)
            piece, lines, slivers = _inherit(piece[rest], lines[rest], vertices, tol)
            merged += slivers
            crossed = torch.bincount(piece, minlength=len(counts)) > 0
            done.append(origin[~crossed])
            parts.append(Polygons(self.slice_index[done[-1]], vertices[~crossed],
                                  counts[~crossed]))
            origin, vertices, counts = origin[crossed], vertices[crossed], counts[crossed]
            piece = (torch.cumsum(crossed, 0) - 1)[piece]
            _check_limit(sum(len(d) for d in done) + len(counts) + len(piece), limit)
        order = torch.argsort(torch.cat(done), stable=True)
        return Cut(torch.cat(done)[order], Polygons.concatenate(parts).take(order), merged)

    def _lines_met(self, values: torch.Tensor, levels: Sequence[float], tol: float
                   ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The lines {f = c} crossing each polygon: (lines (n, 3) in normal form, their polygon
        (n,), sorted) and the sign changes that are slivers. Only
        the lines that meet the disk around a polygon's centre through its farthest corner
        (|f(centre) - c| < |grad f| radius) are evaluated at its corners."""
        level = torch.as_tensor(levels, dtype=values.dtype, device=values.device)
        centre = self._centres()
        radius = torch.linalg.vector_norm(self.vertices - centre.unsqueeze(1), dim=2).amax(1)
        slope = values[:, 1:] - values[:, :1]  # (pieces, 2, M): df/du, df/dv
        at = values[:, 0] + centre[:, :1] * slope[:, 0] + centre[:, 1:] * slope[:, 1]
        reach = torch.hypot(slope[:, 0], slope[:, 1]) * radius.unsqueeze(1)
        near = (at.unsqueeze(-1) - level).abs() < reach.unsqueeze(-1)  # (pieces, M, levels)
        piece, unit, which = near.nonzero(as_tuple=True)
        gradient = slope[piece, :, unit]  # (n, 2)
        offset = values[piece, 0, unit] - level[which]
        lines = torch.cat([offset.unsqueeze(1), gradient], 1) \
            / torch.linalg.vector_norm(gradient, dim=1, keepdim=True)
        dist = _signed_distances(lines, self.vertices[piece])
        top, bottom = dist.amax(1), dist.amin(1)
        crossing = (top > tol) & (bottom < -tol)
        return lines[crossing], piece[crossing], int(((top > 0) & (bottom < 0) & ~crossing).sum())

    def chords(self, lines: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The segment where line i (normal form a + b u + c v = 0, (pieces, 3)) crosses
        polygon i: its ends (pieces, 2, 2), and whether it crosses (pieces,) (else the ends
        are meaningless)."""
        dist = _signed_distances(lines, self.vertices)
        crosses = (dist.amax(1) > tol) & (dist.amin(1) < -tol)
        points, side, present = _boundary_walk(self.vertices, self.counts, dist, tol)
        on = (present & (side == 0)).to(torch.uint8)
        first = on.argmax(1)
        last = on.shape[1] - 1 - on.flip(1).argmax(1)
        rows = torch.arange(len(lines), device=lines.device)
        return torch.stack([points[rows, first], points[rows, last]], 1), crosses


def plane_weights(points: torch.Tensor) -> torch.Tensor:
    """(..., 3) weights (1 - u - v, u, v) of plane points (u, v) (..., 2) on the reference
    points (0, 0), (1, 0), (0, 1)."""
    return torch.cat([1.0 - points.sum(-1, keepdim=True), points], -1)


def _signed_distances(lines: torch.Tensor, vertices: torch.Tensor) -> torch.Tensor:
    """(n, K) a + b u + c v for lines (n, 3) at corners (n, K, 2): separate elementwise
    operations, so that a corner's value does not depend on the batch it is computed in."""
    u, v = vertices.unbind(-1)
    return lines[:, :1] + lines[:, 1:2] * u + lines[:, 2:] * v


def _boundary_walk(vertices: torch.Tensor, counts: torch.Tensor, dist: torch.Tensor,
                   tol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each polygon's boundary walked counter-clockwise against a line with signed distances
    ``dist`` (n, K) at its corners, as 2K entries: corner j, then the point where edge j
    (corner j to the next) crosses the line. Returns the entries' points (n, 2K, 2), their
    side (n, 2K) int8 (-1, +1: farther than ``tol`` below / above the line; 0: on it, a
    crossing point or a corner within ``tol``), and which entries exist (n, 2K)."""
    position = torch.arange(dist.shape[1], device=dist.device)
    present = position < counts.unsqueeze(1)
    after = torch.where(position + 1 < counts.unsqueeze(1), position + 1, 0)
    side = (dist > tol).to(torch.int8) - (dist < -tol).to(torch.int8)
    crosses = present & (side * side.gather(1, after) < 0)
    following = dist.gather(1, after)
    fraction = torch.where(crosses, dist / torch.where(crosses, dist - following, 1.0), 0.0)
    step = vertices.gather(1, after.unsqueeze(-1).expand(-1, -1, 2)) - vertices
    crossing = vertices + fraction.unsqueeze(-1) * step
    return (torch.stack([vertices, crossing], 2).flatten(1, 2),
            torch.stack([side, torch.zeros_like(side)], 2).flatten(1),
            torch.stack([present, crosses], 2).flatten(1))


def _central(piece: torch.Tensor, lines: torch.Tensor, vertices: torch.Tensor,
             present: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(polygons,) index of the line (of those crossing polygon ``piece``) that passes closest
    to each polygon's corners' mean: cut first, it splits the polygon and its other lines
    about evenly, so that the rounds of :meth:`Polygons.cut` are about log2(pieces) deep."""
    centre = (vertices * present.unsqueeze(-1)).sum(1) / counts.unsqueeze(1)
    at = _signed_distances(lines, centre[piece].unsqueeze(1))[:, 0].abs()
    best = torch.full((len(counts),), math.inf, dtype=at.dtype, device=at.device)
    best.scatter_reduce_(0, piece, at, "amin")
    hit = (at == best[piece]).nonzero()[:, 0]
    first = torch.full((len(counts),), len(piece), dtype=torch.int64, device=at.device)
    return first.scatter_reduce_(0, piece[hit], hit, "amin")


def _halves(vertices: torch.Tensor, counts: torch.Tensor, dist: torch.Tensor, tol: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Both halves of every polygon along its line: (2n, K', 2) corners and (2n,) counts, the
    half below the line at 2i and the one above at 2i + 1 (each a subsequence of the walk
    around the parent, so counter-clockwise)."""
    points, side, present = _boundary_walk(vertices, counts, dist, tol)
    members = torch.stack([present & (side <= 0), present & (side >= 0)], 1).flatten(0, 1)
    counts = members.sum(1)
    order = torch.sort((~members).to(torch.uint8), dim=1, stable=True).indices
    slot = torch.minimum(torch.arange(int(counts.max()), device=counts.device),
                         counts.unsqueeze(1) - 1)
    rows = torch.arange(len(members), device=counts.device).unsqueeze(1) // 2
    return points[rows, order.gather(1, slot)], counts


def _inherit(piece: torch.Tensor, lines: torch.Tensor, halves: torch.Tensor, tol: float
             ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The parents' remaining lines (sorted by ``piece``) for both halves of each parent
    (2 piece, 2 piece + 1), kept where they still cross the half; and the sign changes that
    became slivers."""
    n = torch.bincount(piece, minlength=len(halves) // 2)
    start = (torch.cumsum(n, 0) - n)[piece]
    row = torch.arange(len(piece), device=piece.device)
    slot = torch.cat([row + start, row + start + n[piece]])
    half = torch.empty_like(slot)
    half[slot] = torch.cat([2 * piece, 2 * piece + 1])
    source = torch.empty_like(slot)
    source[slot] = torch.cat([row, row])
    lines = lines[source]
    dist = _signed_distances(lines, halves[half])
    top, bottom = dist.amax(1), dist.amin(1)
    keep = (top > tol) & (bottom < -tol)
    return half[keep], lines[keep], int(((top > 0) & (bottom < 0) & ~keep).sum())


def _pad(vertices: torch.Tensor, counts: torch.Tensor, width: int) -> torch.Tensor:
    """Polygons (n, K, 2) as (n, width, 2) (width >= K), repeating each one's last corner."""
    slot = torch.minimum(torch.arange(width, device=counts.device), counts.unsqueeze(1) - 1)
    return vertices.gather(1, slot.unsqueeze(-1).expand(-1, -1, 2))


def plane_slice(anchors: torch.Tensor, bounds: Sequence[float]) -> tuple[Polygons,
                                                                          torch.Tensor]:
    """The 2-D slice of the plane through ``anchors`` (3, ...) (x(0, 0), x(1, 0), x(0, 1)):
    its box ``bounds`` (u_min, u_max, v_min, v_max) as one piece, and the anchors (1, 3, ...)
    (the input's reference values)."""
    return Polygons.box(bounds, 1, anchors.device), anchors.unsqueeze(0)


# ---------------------------------------------------------------------------------- sites


@dataclass(frozen=True)
class EngineSite:
    """An op where pieces are cut: a piecewise-linear activation or a max pooling.

    Attributes:
        name: the op's site name (:attr:`nngauge._internal.graph.GraphOp.site`: the module's
            name, ``"name#k"`` for the k-th call of a module called several times, the node's
            name for a function).
        label: readable op label (``"layer1.0.relu (ReLU)"``).
        kind: ``"activation"`` or ``"maxpool"``.
        units: entries of a piece's code: the activation's input numel per sample; the max
            pooling's output numel per sample.
        breakpoints: an activation's breakpoints (None for max pooling).
    """

    name: str
    label: str
    kind: str
    units: int
    breakpoints: Optional[tuple[float, ...]] = None

    @property
    def piecewise_linear(self) -> bool:
        """Always True: the engine accepts piecewise-linear sites only."""
        return True


class _Activation:
    """A piecewise-linear activation: cut at the breakpoints, then the linear branch of each
    unit's region. Codes: int8 regions #{j : h > c_j}."""

    settles = True  # one cut finds every crossing

    def __init__(self, graph: ModelGraph, op: GraphOp, source: fx.Node,
                 constants: dict, example: torch.Tensor) -> None:
        self.source, self.in_shape = source, _shape(graph, source)
        self.breakpoints = op.breakpoints
        self.slope, intercept = _linear_branches(graph, op, source, constants, example)
        self.intercept = intercept if bool(intercept.any()) else None
        self.site = EngineSite(op.site, op.label, "activation", math.prod(self.in_shape),
                               op.breakpoints)
        self.workspace = self.site.units

    def levels(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor,
                                                                      Sequence[float]]:
        return x.flatten(2), self.breakpoints

    def apply(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, Any]:
        flat = x.flatten(2)
        code = region_codes(combine(weights, flat), self.breakpoints)
        out = flat * _branch(self.slope, code).unsqueeze(1)
        if self.intercept is not None:
            out += _branch(self.intercept, code).unsqueeze(1)
        return code, out.reshape(-1, *self.in_shape)


def _branch(table: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """(pieces, units) table[code[p, u], u] of a (regions, units) table."""
    step = torch.diff(table, dim=0)
    value = torch.addcmul(table[0], code >= 1, step[0])
    for region in range(2, len(table)):
        value.addcmul_(code >= region, step[region - 1])
    return value


def combine(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """sum_r weights[p, r] x[p, r, ...]: values at a point of each piece from the reference
    values x (pieces, k + 1, ...) and the point's weights (pieces, k + 1)."""
    return torch.bmm(weights.unsqueeze(1), x.flatten(2)).reshape(x.shape[:1] + x.shape[2:])


def _linear_branches(graph: ModelGraph, op: GraphOp, source: fx.Node, constants: dict,
                     example: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(regions, units) slopes a_r and intercepts b_r with phi(h) = a_r h + b_r in region r,
    from phi evaluated at two points inside each region on tensors shaped like one sample."""
    cuts = op.breakpoints
    inner = [(cuts[0] - 2.0, cuts[0] - 1.0)]
    inner += [(a + (b - a) / 3, a + 2 * (b - a) / 3) for a, b in zip(cuts[:-1], cuts[1:])]
    inner += [(cuts[-1] + 1.0, cuts[-1] + 2.0)]
    points = torch.tensor(inner, dtype=example.dtype, device=example.device)  # (regions, 2)
    shape = _shape(graph, source)
    probe = points.reshape(-1, *[1] * len(shape)).expand(-1, *shape).clone()
    y = graph.evaluate(op, ChainMap({source: probe}, constants)).reshape(len(inner), 2, -1)
    slope = (y[:, 1] - y[:, 0]) / (points[:, 1] - points[:, 0]).unsqueeze(1)
    return slope, y[:, 0] - slope * points[:, 0].unsqueeze(1)


class _MaxPool:
    """Max pooling over windows (O, K) of flat spatial input indices, per channel: cut where
    an entry meets the interior's arg-max, until the arg-max is constant. Codes: int32 flat
    spatial index of each output's arg-max (as ``return_indices=True`` gives)."""

    settles = False  # the arg-max read after a cut may still change inside a child

    def __init__(self, graph: ModelGraph, op: GraphOp, source: fx.Node,
                 constants: dict, example: torch.Tensor) -> None:
        self.source, in_shape = source, _shape(graph, source)
        probe = torch.zeros((1, *in_shape), dtype=example.dtype, device=example.device)
        value = graph.evaluate(op, ChainMap({source: probe}, constants))
        self.with_indices = isinstance(value, (tuple, list))
        self.out_shape = tuple((value[0] if self.with_indices else value).shape[1:])
        dims = int(re.search(r"(\d)d", _pool_name(op)).group(1))
        self.channels = math.prod(in_shape[:-dims])
        self.grid = (self.channels, math.prod(in_shape[-dims:]))
        self.windows = _pool_windows(op, in_shape[-dims:], self.out_shape[-dims:],
                                     graph.module).to(example.device)
        self.site = EngineSite(op.site, op.label, "maxpool", math.prod(self.out_shape))
        self.workspace = self.channels * self.windows.numel()

    def _argmax(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(pieces, C, O) window position of the maximum at each piece's interior."""
        return combine(weights, x)[..., self.windows].argmax(-1)

    def levels(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor,
                                                                      Sequence[float]]:
        x = x.reshape(*x.shape[:2], *self.grid)
        entries = x[..., self.windows]  # (pieces, refs, C, O, K)
        best = self._argmax(x, weights)[:, None, :, :, None]
        top = entries.gather(-1, best.expand(*entries.shape[:-1], 1))
        return (entries - top).flatten(2), (0.0,)

    def apply(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, Any]:
        x = x.reshape(*x.shape[:2], *self.grid)
        best = self._argmax(x, weights)
        code = self.windows[torch.arange(self.windows.shape[0], device=x.device), best]
        index = code.unsqueeze(1).expand(-1, x.shape[1], -1, -1)
        out = x.gather(3, index).reshape(-1, *self.out_shape)
        if self.with_indices:
            out = (out, index.reshape(-1, *self.out_shape))
        return code.flatten(1).to(torch.int32), out


def _pool_name(op: GraphOp) -> str:
    return type(op.module).__name__ if op.module is not None else target_name(op.node)


def _pool_windows(op: GraphOp, size_in: Sequence[int], size_out: Sequence[int],
                  root: nn.Module) -> torch.Tensor:
    """(O, K) flat spatial input index of every window position (O = prod(size_out)), in the
    order pooling scans them; positions in the padding repeat the window's first valid one."""
    if "adaptive" in _pool_name(op).lower():
        axes = [_adaptive_axis(i, o) for i, o in zip(size_in, size_out)]
    else:
        params = _pool_params(op, root, len(size_in))
        axes = [_strided_axis(i, o, *p) for i, o, p in zip(size_in, size_out, zip(*params))]
    dims = len(axes)
    flat, valid = torch.zeros((), dtype=torch.long), torch.ones((), dtype=torch.bool)
    stride = 1
    for i in reversed(range(dims)):
        position, inside = axes[i]
        shape = [1] * (2 * dims)
        shape[i], shape[dims + i] = position.shape
        flat = flat + (position * stride).reshape(shape)
        valid = valid & inside.reshape(shape)
        stride *= size_in[i]
    windows = math.prod(size_out)
    flat, valid = flat.reshape(windows, -1), valid.expand(flat.shape).reshape(windows, -1)
    first = valid.to(torch.int8).argmax(1, keepdim=True)
    return torch.where(valid, flat, flat.gather(1, first))


def _pool_params(op: GraphOp, root: nn.Module, dims: int) -> list[tuple[int, ...]]:
    """(kernel, stride, padding, dilation), each a tuple of ``dims`` ints."""
    names = ("kernel_size", "stride", "padding", "dilation")
    if op.module is not None:
        raw = [getattr(op.module, name) for name in names]
    else:
        kwargs = op.node.normalized_arguments(root, normalize_to_only_use_kwargs=True).kwargs
        raw = [kwargs.get(name) for name in names]
    kernel, stride, padding, dilation = [_per_axis(value, dims) for value in raw]
    return [kernel, stride or kernel, padding or (0,) * dims, dilation or (1,) * dims]


def _per_axis(value: Any, dims: int) -> tuple[int, ...]:
    if value is None or (isinstance(value, (tuple, list)) and not value):
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * dims


def _strided_axis(size_in: int, size_out: int, kernel: int, stride: int, padding: int,
                  dilation: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(size_out, kernel) input positions of each window along one axis, and validity."""
    position = (torch.arange(size_out) * stride - padding).unsqueeze(1) \
        + torch.arange(kernel) * dilation
    return position, (position >= 0) & (position < size_in)


def _adaptive_axis(size_in: int, size_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Adaptive pooling windows [floor(o n / m), ceil((o + 1) n / m)) along one axis."""
    o = torch.arange(size_out)
    start, end = (o * size_in) // size_out, -((-(o + 1) * size_in) // size_out)
    position = start.unsqueeze(1) + torch.arange(int((end - start).max()))
    return position, position < end.unsqueeze(1)


_Rule = Union[_Activation, _MaxPool]


def _graph_op(graph: ModelGraph, node: fx.Node) -> GraphOp:
    return next(op for op in graph.ops if op.node is node)


def _shape(graph: ModelGraph, node: fx.Node) -> tuple[int, ...]:
    """The per-sample shape of a tensor node of ``graph``."""
    return _graph_op(graph, node).shape


# --------------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class Chunk:
    """Final pieces of one chunk, in slice order.

    Attributes:
        pieces: their geometry.
        codes: per site of :attr:`PiecewiseEngine.sites`, the (pieces, units) codes: int8
            regions of an activation, int32 flat arg-max indices of a max pooling.
        output: the model's output (the graph's output value: a tensor, tuple or dict) at the
            pieces' reference points, tensors of shape (pieces * (k + 1), ...) piece-major: the
            output on piece p at weights w is sum_r w_r output[p * (k + 1) + r].
    """

    pieces: Geometry
    codes: tuple[torch.Tensor, ...]
    output: Any


@dataclass
class EngineReport:
    """What a run met.

    Attributes:
        pieces: final pieces (cuts where a max pooling's arg-max does not change included).
        near_coincident: activation crossings merged into another one or into a piece's
            boundary for lying within ``merge_tol`` of it (a sliver piece ignored each).
        smallest: the smallest final piece size (length in t for 1-D slices, area in plane
            coordinates for 2-D ones).
    """

    pieces: int = 0
    near_coincident: int = 0
    smallest: float = math.inf

    def add(self, pieces: Geometry) -> None:
        self.pieces += len(pieces)
        if len(pieces):
            self.smallest = min(self.smallest, float(pieces.sizes().min()))


@dataclass
class _Batch:
    """Pieces and, for each live node, its reference values (pieces * (k + 1), ...); the codes
    of the sites passed so far."""

    pieces: Geometry
    env: dict[fx.Node, Any]
    codes: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class WeightLine:
    """A line theta + t delta through the parameters of one module whose output is linear in
    them (Linear, Conv, batchnorm's affine parameters): along it the module's output is
    f(x; theta) + t f(x; delta), affine in t for a fixed input, so a 1-D slice whose two
    reference points are the same input and t = 0, 1 follows the line exactly.

    Attributes:
        module: the module (every call of it moves).
        delta: its parameters' directions by name (``named_parameters(recurse=False)``);
            parameters left out do not move.
    """

    module: nn.Module
    delta: dict[str, torch.Tensor]

    def shift(self, x: torch.Tensor) -> torch.Tensor:
        """f(x; delta): the module with every parameter replaced by its direction (0 where
        none is given), buffers kept."""
        params = {name: self.delta.get(name, torch.zeros_like(p))
                  for name, p in self.module.named_parameters(recurse=False)}
        return torch.func.functional_call(self.module, params, (x,))


class PiecewiseEngine:
    """The exact linear pieces of a piecewise-linear network on slices of its input space.

    Built once per model (traced with ``torch.fx``, see the module docstring), then
    :meth:`run` on any slices. The model (float64, eval mode, as :func:`float64_copy` and
    ``.eval()`` give) may contain affine ops (Linear, Conv, eval batchnorm, average pooling,
    reshapes, concatenations, residual additions, ...), piecewise-linear activations (ReLU,
    LeakyReLU, PReLU, ReLU6, HardTanh, clamp, nngauge's piecewise-linear activations) and max
    pooling (1-D, 2-D, 3-D, adaptive).

    Attributes:
        sites: the activation and max-pooling sites in graph (call) order.

    Args:
        model: the float64 network; example: one input batch (1, ...) to trace it on.
        where: the measure's name, for error messages.
        max_elements: the chunk budget (:data:`MAX_ELEMENTS`).
        fallback: the measure's option for networks the engine cannot follow, named in the
            refusal.
        weight_line: slices along a line of one module's parameters instead of the input
            (:class:`WeightLine`; 1-D slices whose two anchors are the same input).

    Raises:
        InvalidInputError: naming every op that is not affine, piecewise-linear or a max
            pooling (with the reason), and suggesting ``fallback``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 2), nn.ReLU()).double()
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([0.5, -0.5]))
        >>> engine = PiecewiseEngine(net, torch.zeros(1, 1, dtype=torch.float64), where="doc")
        >>> pieces, anchors = polyline_slices(torch.tensor([[-1.0], [1.0]], dtype=torch.float64))
        >>> chunk, = engine.run(pieces, anchors, merge_tol=1e-12, report=EngineReport())
        >>> chunk.pieces.lo.tolist(), chunk.codes[0].tolist()
        ([0.0, 0.25, 0.75], [[0, 0], [1, 0], [1, 1]])
    """

    def __init__(self, model: nn.Module, example: torch.Tensor, *, where: str,
                 max_elements: int = MAX_ELEMENTS, fallback: str = "method='sampled'",
                 weight_line: Optional[WeightLine] = None) -> None:
        ModelAdapter(model, where=where).call_model(example)  # the standard error on bad input
        graph = trace_graph(model, example, where=where)
        _refuse_unsupported(graph, where, fallback)
        self.graph, self.max_elements, self.weight_line = graph, max_elements, weight_line
        self.input = next(op.node for op in graph.ops if op.kind == "input")
        self.output = next(op.node for op in graph.ops if op.kind == "output")
        self._kinds = {op.node: op.kind for op in graph.ops}
        self._constants = _constants(graph)
        self._schedule = _release_schedule(graph)
        self._rules: dict[int, _Rule] = {
            index: _RULES[op.kind](graph, op, self._source(op), self._constants, example)
            for index, op in enumerate(graph.ops) if op.kind in _RULES}
        self.sites = tuple(rule.site for rule in self._rules.values())
        self._per_sample = max([math.prod(op.shape) for op in graph.ops
                                if op.shape and op.kind != "constant"]
                               + [rule.workspace for rule in self._rules.values()])

    def _source(self, op: GraphOp) -> fx.Node:
        """The input-dependent tensor an activation or max pooling acts on."""
        return next(n for n in op.node.all_input_nodes if self._kinds[n] != "constant")

    def chunk_size(self, n_refs: int) -> int:
        """Pieces per chunk for slices with ``n_refs`` reference points."""
        return max(1, self.max_elements // (n_refs * self._per_sample))

    @torch.no_grad()
    def run(self, pieces: Geometry, anchors: torch.Tensor, *, merge_tol: float,
            report: EngineReport, max_pieces: Optional[int] = None) -> Iterator[Chunk]:
        """Final pieces of ``pieces`` chunk by chunk, in slice order.

        Args:
            pieces: initial pieces (e.g. :func:`polyline_slices`).
            anchors: (slices, k + 1, *input_shape) the input at each slice's reference points.
            merge_tol: crossings closer than this (in slice coordinates) are one.
            report: accumulates the run's :class:`EngineReport`.
            max_pieces: raise :class:`PieceLimit` as soon as the final pieces are known to
                be more (a cut is refused before it holds them: a plane through a
                convolution's thousands of units would otherwise be cut into millions).
        """
        settings = _Settings(merge_tol, self.chunk_size(pieces.n_refs), report, max_pieces)
        for chosen in _chunks(len(pieces), settings.step, anchors.device):
            part = pieces.take(chosen)
            batch = _Batch(part, {self.input: anchors[part.slice_index].flatten(0, 1)})
            yield from self._walk(batch, 0, settings)

    def _walk(self, batch: _Batch, start: int, settings: _Settings) -> Iterator[Chunk]:
        """Evaluate ops from ``start`` on; at a site, cut (and continue chunk by chunk)."""
        for index in range(start, len(self.graph.ops)):
            if index in self._rules:
                yield from self._split(batch, index, settings)
                return
            op = self.graph.ops[index]
            if op.kind not in ("input", "constant"):
                batch.env[op.node] = self._evaluate(op, batch.env)
            self._release(batch.env, index)
        settings.report.add(batch.pieces)
        _check_limit(settings.report.pieces, settings.max_pieces)
        yield Chunk(batch.pieces, tuple(batch.codes), batch.env[self.output])

    def _split(self, batch: _Batch, index: int, settings: _Settings) -> Iterator[Chunk]:
        """Cut at site ``index``; continue each chunk of children (until settled)."""
        rule = self._rules[index]
        done = settings.report.pieces
        limit = None if settings.max_pieces is None else settings.max_pieces - done
        try:  # each piece ends as one final piece or more
            cut = batch.pieces.cut(*rule.levels(_site_input(batch, rule),
                                                batch.pieces.interior()), settings.tol, limit)
        except PieceLimit as exc:
            raise PieceLimit(done + exc.pieces) from None
        if isinstance(rule, _Activation):
            settings.report.near_coincident += cut.merged
        if len(cut.pieces) == len(batch.pieces):
            yield from self._settle(batch, index, settings)
            return
        for chosen in _chunks(len(cut.pieces), settings.step, cut.parent.device):
            child = self._take(batch, cut.parent[chosen], cut.pieces.take(chosen))
            yield from (self._settle(child, index, settings) if rule.settles
                        else self._split(child, index, settings))

    def _settle(self, batch: _Batch, index: int, settings: _Settings) -> Iterator[Chunk]:
        """Apply site ``index`` (its regions are constant on every piece) and walk on."""
        rule = self._rules[index]
        code, out = rule.apply(_site_input(batch, rule), batch.pieces.interior())
        batch.codes.append(code)
        batch.env[self.graph.ops[index].node] = out
        self._release(batch.env, index)
        yield from self._walk(batch, index + 1, settings)

    def _evaluate(self, op: GraphOp, env: dict) -> Any:
        if type(op.module) is nn.Linear and len(op.node.args) == 1 and not op.node.kwargs:
            value = _linear_of_live_features(op.module, env[op.node.args[0]])
        else:
            value = self.graph.evaluate(op, ChainMap(env, self._constants))
        if self.weight_line is not None and op.module is self.weight_line.module:
            x = env[op.node.args[0]]
            at_one = (torch.arange(len(x), device=x.device) % 2).to(x.dtype)  # refs t = 0, 1
            value = value + at_one.view(-1, *[1] * (value.dim() - 1)) * self.weight_line.shift(x)
        return value

    def _release(self, env: dict, index: int) -> None:
        """Drop the nodes no op after ``index`` needs."""
        for node in self._schedule[index]:
            env.pop(node, None)

    def _take(self, batch: _Batch, parent: torch.Tensor, pieces: Geometry) -> _Batch:
        """Children: each new piece gets its parent's reference values and codes; shape
        values (sizes of the batch) are computed again from the new batch."""
        refs, env = batch.pieces.n_refs, {}
        for node, value in batch.env.items():
            env[node] = (self._evaluate(_graph_op(self.graph, node), env)
                         if self._kinds[node] == "shape"
                         else _take_rows(value, parent, refs))
        return _Batch(pieces, env, [code.index_select(0, parent) for code in batch.codes])


_RULES = {"activation": _Activation, "maxpool": _MaxPool}


@dataclass(frozen=True)
class _Settings:
    """One run's tolerance, chunk size, report and piece limit."""

    tol: float
    step: int
    report: EngineReport
    max_pieces: Optional[int]


def _site_input(batch: _Batch, rule: _Rule) -> torch.Tensor:
    """The site's input as (pieces, k + 1, ...)."""
    return batch.env[rule.source].unflatten(0, (len(batch.pieces), batch.pieces.n_refs))


def _chunks(n: int, step: int, device: torch.device) -> Iterator[torch.Tensor]:
    """Indices of ceil(n / step) consecutive chunks of 0..n-1 of near-equal sizes (<= step:
    no small remainder chunk)."""
    edges = torch.linspace(0, n, -(-n // step) + 1).round().long().tolist()
    for start, end in zip(edges[:-1], edges[1:]):
        yield torch.arange(start, end, device=device)


def _linear_of_live_features(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``linear(x)``, multiplying only the input features that are nonzero in some row: units
    an activation turns off on every piece of a chunk (about half after a ReLU, the pieces of
    a chunk being consecutive) cost nothing."""
    live = x.reshape(-1, x.shape[-1]).any(0)
    if int(live.sum()) > LIVE_FRACTION * len(live):
        return linear(x)
    index = live.nonzero()[:, 0]
    weight = linear.weight.t().index_select(0, index).t()  # rows of W^T: contiguous copies
    return F.linear(x.index_select(-1, index), weight, linear.bias)


def _take_rows(value: Any, parent: torch.Tensor, refs: int) -> Any:
    """Rows of the pieces ``parent`` of a batched value (tensors nested in tuples/lists)."""
    if isinstance(value, torch.Tensor):
        return value.unflatten(0, (-1, refs)).index_select(0, parent).flatten(0, 1)
    return type(value)(_take_rows(v, parent, refs) for v in value)


def _refuse_unsupported(graph: ModelGraph, where: str, fallback: str) -> None:
    reasons = [f"{op.label}: {op.reason}" if op.kind == "other" else
               f"{op.label}: not piecewise linear" for op in graph.ops
               if op.kind == "other" or (op.kind == "activation" and not op.piecewise_linear)]
    if reasons:
        raise invalid(where, "a piecewise-linear network (affine maps, piecewise-linear "
                      "activations, max pooling) for the exact method",
                      f"operations it cannot follow exactly: {'; '.join(reasons)}",
                      f"use {fallback} (any network), or replace those operations")


def _constants(graph: ModelGraph) -> dict[fx.Node, Any]:
    """The value of every node that does not depend on the input."""
    values: dict[fx.Node, Any] = {}
    for op in graph.ops:
        if op.kind == "constant":
            values[op.node] = graph.evaluate(op, values)
    return values


def _release_schedule(graph: ModelGraph) -> dict[int, list[fx.Node]]:
    """Op index -> the nodes no later op needs. The inputs of a shape node (``x.size(0)``)
    live as long as it does: it is recomputed from them when pieces are split."""
    keep = {op.node: graph.last_use.get(op.node, index) for index, op in enumerate(graph.ops)}
    for op in reversed(graph.ops):
        if op.kind == "shape":
            for parent in op.node.all_input_nodes:
                keep[parent] = max(keep[parent], keep[op.node])
    schedule: dict[int, list[fx.Node]] = defaultdict(list)
    for op in graph.ops:
        if op.kind != "output":
            schedule[keep[op.node]].append(op.node)
    return schedule


__all__ = ["Chunk", "Cut", "EngineReport", "EngineSite", "Geometry", "Intervals",
           "MAX_ELEMENTS", "PiecewiseEngine", "Polygons", "combine", "float64_copy",
           "plane_slice", "plane_weights", "polyline_slices"]
