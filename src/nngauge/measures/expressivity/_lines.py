"""Activation patterns along many lines: the machinery transitions and region density share.

- :func:`bisect_changes`: sample points of many segments of a path until every change of
  activation pattern is isolated (the sampled method of both measures);
- :func:`pattern_hashes`: the patterns of points, hashed per site, in chunks;
- :class:`AffineCheck`: the exact method's guard that the network is affine on the engine's
  pieces;
- :class:`PieceBudget`: the exact method's ``max_seconds``, estimated from the share of the
  path done.
"""

from __future__ import annotations

from typing import Optional

import torch

from nngauge._internal.budget import TimeBudget
from nngauge._internal.patterns import CHUNK_POINTS, PatternHasher
from nngauge._internal.piecewise import Intervals
from nngauge.errors import invalid

AFFINE_RTOL = 1e-6
"""Relative tolerance of the check that the network equals the exact engine's affine map."""
AFFINE_CHECK_EVERY = 64
"""That check runs the model on every 64th exact piece."""


class PieceBudget(TimeBudget):
    """``max_seconds`` for the exact engine's walk along segments, whose pieces stream out in
    path order (:class:`~nngauge._internal.budget.TimeBudget`): a network too big for the
    exact method is refused in about a second."""

    def __init__(self, where: str, max_seconds: Optional[float], *, path: str = "the path",
                 shorter: str = "a shorter path") -> None:
        super().__init__(where, max_seconds, what="an exact count", whole=path,
                         fix=f"use method='sampled', {shorter}")

    def check_pieces(self, done: float, pieces: int) -> None:
        """Refuse if ``pieces`` pieces up to the share ``done`` in (0, 1] of the path took
        long enough to trust and predict more than ``max_seconds`` for it."""
        self.check(done, lambda spent: f"{pieces:,} pieces in {done:.3g} of it in "
                   f"{spent:.1f} s, about {pieces / done:,.0f} in all")


class AffineCheck:
    """The exact method's guard: on every :data:`AFFINE_CHECK_EVERY`-th piece, the model at the
    piece's quarter points and midpoint must equal the engine's affine map there (else an
    operation traced as affine is not). Points gather over chunks; the model runs on
    :data:`CHUNK_POINTS` of them at a time (a pass per chunk would read every weight for a
    few points)."""

    def __init__(self, run, anchors, select, where) -> None:
        self.run, self.anchors, self.select, self.where = run, anchors, select, where
        self.seen, self.evaluations = 0, 0
        self.points: list[torch.Tensor] = []
        self.predicted: list[torch.Tensor] = []
        self.scale: list[torch.Tensor] = []

    def add(self, chunk) -> None:
        pieces = chunk.pieces
        first = -self.seen % AFFINE_CHECK_EVERY
        pick = torch.arange(first, max(first, len(pieces)), AFFINE_CHECK_EVERY,
                            device=pieces.lo.device)
        self.seen += len(pieces)
        checked = pieces.take(pick)
        refs = self.select(chunk.output)
        refs = refs.unflatten(0, (len(pieces), Intervals.n_refs))[pick].flatten(2)
        weights = torch.stack([checked.at(f) for f in (0.25, 0.5, 0.75)], 1)  # (n, 3, refs)
        self.points.append(torch.einsum("nqr,nr...->nq...", weights,
                                        self.anchors[checked.slice_index]).flatten(0, 1))
        self.predicted.append(torch.einsum("nqr,nrd->nqd", weights, refs).flatten(0, 1))
        self.scale.append(refs.abs().sum(1).repeat_interleave(3, 0))
        if sum(len(x) for x in self.points) >= CHUNK_POINTS:
            self.flush()

    def flush(self) -> None:
        """Run the model on the gathered points and compare."""
        if not self.points:
            return
        x, predicted = torch.cat(self.points), torch.cat(self.predicted)
        y = self.run(x).reshape(predicted.shape)
        scale = y.abs() + torch.cat(self.scale) + 1e-300
        self.evaluations += len(x)
        self.points, self.predicted, self.scale = [], [], []
        require_affine(y, predicted, scale, self.where, "piece", "use method='sampled'")


def require_affine(y: torch.Tensor, predicted: torch.Tensor, scale: torch.Tensor, where: str,
                   unit: str, fix: str) -> None:
    """Raise unless the model outputs ``y`` equal the exact engine's affine ``predicted`` to
    :data:`AFFINE_RTOL` relative to ``scale`` (else an operation traced as affine is not)."""
    worst = float(((y - predicted).abs() / scale).max()) if y.numel() else 0.0
    if worst > AFFINE_RTOL:
        raise invalid(where, "a network that is affine between the breakpoints of its "
                      "activations and max poolings",
                      f"a model output that differs from the exact engine's affine map on a "
                      f"{unit} (relative deviation {worst:.2e}): an operation traced as affine "
                      "is not (an in-place or batch-mixing operation, ...)", fix)


def segment_of(keys: torch.Tensor) -> torch.Tensor:
    """Segment j of the keys 2 j + t, t in [0, 1]."""
    return torch.div(keys, 2, rounding_mode="floor").long()


def bisect_changes(codes_at, n_sites: int, keys: torch.Tensor, min_width: float,
                   budget: int, chunk: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """Sample points of many segments until every change of pattern is isolated.

    A point of segment j at parameter t in [0, 1] has the key 2 j + t (sorted keys are in
    segment order). Every interval between consecutive points of one segment whose activation
    patterns (hashes of ``codes_at(keys)``, all ``n_sites`` sites) differ is bisected, the
    widest first over all segments, until narrower than ``min_width`` or ``budget``
    evaluations (the initial points included) are spent.

    Returns:
        the sorted keys, their (len(keys), n_sites, 2) pattern hashes, (len(keys) - 1,)
        whether consecutive points lie in one segment and differ in pattern, and whether the
        budget ran out first.
    """
    hasher = PatternHasher()
    hashes = pattern_hashes(codes_at, n_sites, keys, hasher, chunk)
    while True:
        segment = segment_of(keys)
        differs = (hashes[1:] != hashes[:-1]).flatten(1).any(1) & (segment[1:] == segment[:-1])
        widths = keys[1:] - keys[:-1]
        todo = torch.nonzero(differs & (widths > min_width))[:, 0]
        left = budget - len(keys)
        if len(todo) == 0 or left <= 0:
            return keys, hashes, differs, len(todo) > 0
        todo = todo[torch.argsort(widths[todo], descending=True)[:left]]
        mids = (keys[todo] + keys[todo + 1]) / 2
        keys, order = torch.sort(torch.cat([keys, mids]))
        hashes = torch.cat([hashes, pattern_hashes(codes_at, n_sites, mids, hasher, chunk)])[order]


def pattern_hashes(codes_at, n_layers: int, s: torch.Tensor, hasher: PatternHasher,
            chunk: int) -> torch.Tensor:
    """(len(s), n_layers, 2) hashes of each layer's pattern at x(s), ``chunk`` points at a
    time."""
    out = []
    for start in range(0, len(s), chunk):
        part = s[start:start + chunk]
        codes = codes_at(part)
        out.append(torch.stack([hasher(code, i).cpu() for i, code in enumerate(codes)], 1)
                   if codes else torch.zeros(len(part), 0, 2, dtype=torch.int64))
    return torch.cat(out)
