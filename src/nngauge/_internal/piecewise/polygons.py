"""The 2-D geometry of the piecewise-linear engine: convex polygons of planes, cut along the
lines where affine functions meet their levels (Theorem 2's convex polytopes)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence

import torch

from nngauge._internal.piecewise.geometry import Cut, check_limit


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
        check_limit(len(self) + len(piece), limit)
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
            check_limit(sum(len(d) for d in done) + len(counts) + len(piece), limit)
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


__all__ = ["Polygons", "plane_slice", "plane_weights"]
