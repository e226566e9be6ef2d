"""The slice geometry the piecewise-linear engine propagates: the :class:`Geometry` protocol,
the 1-D :class:`Intervals` (a polyline's segments) and the :class:`Cut` of a set of pieces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional, Protocol, Sequence

import torch


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


def check_limit(pieces: int, limit: Optional[int]) -> None:
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
        check_limit(len(self) + int(keep.sum()), limit)
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


__all__ = ["Cut", "Geometry", "Intervals", "PieceLimit", "check_limit", "polyline_slices"]
