"""The 2-D geometry of the piecewise-linear engine (nngauge._internal.piecewise.Polygons):
cuts along many lines at once, lines through corners, slivers, coincident lines, several
levels, chords, chunked streaming, and max-pooling pieces merged into convex regions."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge._internal.piecewise import (
    EngineReport,
    PiecewiseEngine,
    Polygons,
    float64_copy,
    plane_slice,
)
from nngauge.measures.expressivity._regions import regions
from nngauge.trajectories import plane
from test_piecewise_engine import seeded
from test_regions_exact import PoolConv, assert_partition, mlp

TOL = 1e-12
SQUARE = (0.0, 1.0, 0.0, 1.0)


def square():
    return Polygons.box(SQUARE, 1, torch.device("cpu"))


def reference_values(lines):
    """(1, 3, M) reference values at (0, 0), (1, 0), (0, 1) of f_m = a u + b v + c, for rows
    (a, b, c) of ``lines``."""
    a, b, c = torch.tensor(lines, dtype=torch.float64).T
    return torch.stack([c, a + c, b + c]).unsqueeze(0)


def corners(pieces, i):
    return pieces.vertices[i, :int(pieces.counts[i])]


def test_a_line_through_two_corners_makes_two_triangles():
    for offset in (0.0, 1e-14):  # exactly through the corners, or within the tolerance
        cut = square().cut(reference_values([[1.0, 1.0, -1.0 - offset]]), (0.0,), TOL)
        assert cut.pieces.counts.tolist() == [3, 3] and cut.merged == 2
        torch.testing.assert_close(cut.pieces.sizes(), torch.tensor([0.5, 0.5],
                                                                    dtype=torch.float64))


def test_a_sliver_within_the_tolerance_is_not_cut_and_is_counted():
    cut = square().cut(reference_values([[1.0, 1.0, -1e-13]]), (0.0,), TOL)
    assert len(cut.pieces) == 1 and cut.merged == 1
    wide = square().cut(reference_values([[1.0, 1.0, -1e-9]]), (0.0,), TOL)
    assert len(wide.pieces) == 2 and wide.merged == 0


def test_coincident_lines_share_one_boundary():
    cut = square().cut(reference_values([[1.0, -0.5, -0.2], [2.0, -1.0, -0.4]]), (0.0,), TOL)
    assert len(cut.pieces) == 2
    assert float(cut.pieces.sizes().sum()) == pytest.approx(1.0)


def test_many_polygons_lines_and_levels_at_once():
    """Three polygons, 9 lines, 2 levels (a hard tanh's): the halves tile their parents, no
    line crosses a final piece, children are consecutive, corners counter-clockwise."""
    gen = torch.Generator().manual_seed(0)
    start = square().cut(reference_values([[1.0, 0.3, -0.6], [-0.2, 1.0, -0.5]]), (0.0,), TOL)
    values = torch.randn(len(start.pieces), 3, 9, generator=gen, dtype=torch.float64)
    levels = (-0.5, 0.5)
    cut = start.pieces.cut(values, levels, TOL)
    parent = cut.parent
    assert bool((parent[1:] >= parent[:-1]).all()) and len(cut.pieces) > 20
    areas = torch.zeros(len(start.pieces), dtype=torch.float64).index_add_(
        0, parent, cut.pieces.sizes())
    torch.testing.assert_close(areas, start.pieces.sizes())
    assert bool((cut.pieces.sizes() > 0).all())
    slope = values[:, 1:] - values[:, :1]
    for i in range(len(cut.pieces)):
        p, uv = int(parent[i]), corners(cut.pieces, i)
        f = values[p, 0] + uv @ slope[p]  # (corners, 9)
        for level in levels:
            assert not bool(((f > level + 1e-9).any(0) & (f < level - 1e-9).any(0)).any())


def test_rounds_are_logarithmic_in_the_pieces():
    """64 lines through random points of a square: about 1,500 pieces in fewer than
    2 log2(pieces) rounds (a line per piece and round in a fixed order would need up to 64)."""
    gen = torch.Generator().manual_seed(1)
    normal = torch.randn(64, 2, generator=gen, dtype=torch.float64)
    through = torch.rand(64, 2, generator=gen, dtype=torch.float64)
    lines = torch.cat([normal, -(normal * through).sum(1, keepdim=True)], 1)
    import nngauge._internal.piecewise.polygons as polygons

    calls, halves = [], polygons._halves
    try:
        polygons._halves = lambda *args: calls.append(1) or halves(*args)
        cut = square().cut(reference_values(lines.tolist()), (0.0,), TOL)
    finally:
        polygons._halves = halves
    assert len(cut.pieces) > 1000 and len(calls) < 2 * math.log2(len(cut.pieces))


def test_chords_of_a_line_through_polygons():
    pieces = square()
    ends, crosses = pieces.chords(torch.tensor([[-0.5, 1.0, 0.0]], dtype=torch.float64), TOL)
    assert crosses.tolist() == [True]
    assert sorted(ends[0].tolist()) == [[0.5, 0.0], [0.5, 1.0]]
    _, misses = pieces.chords(torch.tensor([[-2.0, 1.0, 0.0]], dtype=torch.float64), TOL)
    assert misses.tolist() == [False]


def test_small_chunks_give_the_same_partition():
    model = float64_copy(seeded(mlp(2, nn.ReLU, 12, 3), 0, 1.5)).eval()
    anchors = torch.tensor([[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64)

    def areas(**options):
        engine = PiecewiseEngine(model, anchors[:1], where="test", **options)
        start, slices = plane_slice(anchors, (0.0, 1.0, 0.0, 1.0))
        chunks = list(engine.run(start, slices, merge_tol=TOL, report=EngineReport()))
        return len(chunks), torch.sort(torch.cat([c.pieces.sizes() for c in chunks])).values

    (one, whole), (many, small) = areas(), areas(max_elements=3000)
    assert one == 1 and many > 5
    torch.testing.assert_close(small, whole, rtol=0, atol=1e-15)


def test_max_pooling_pieces_of_one_pattern_are_one_convex_region():
    """A max pooling is cut along every entry that meets its window's maximum, also where the
    arg-max does not change: such pieces share a pattern and are one region, their hull."""
    model = seeded(PoolConv(), 3, 1.5)
    gen = torch.Generator().manual_seed(5)
    res = regions(model, tuple(torch.randn(3, 2, 5, 5, generator=gen, dtype=torch.float64)),
                  bounds=(0.0, 0.5, 0.0, 0.5))
    assert res.n_pieces > res.n_regions > 50
    assert_partition(res)
    assert len({r.pattern.tobytes() for r in res.regions}) == res.n_regions
    for region in res.regions:  # convex, counter-clockwise
        a = region.polygon
        b, c = np.roll(a, -1, 0), np.roll(a, -2, 0)
        turn = (b[:, 0] - a[:, 0]) * (c[:, 1] - b[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0]
                                                                                - b[:, 0])
        assert bool((turn > 0).all())


def test_plane_helper():
    p = plane(torch.zeros(3), torch.tensor([2.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 1.0]))
    torch.testing.assert_close(p.anchors, torch.tensor([[0.0, 0, 0], [2, 0, 0], [0, 1, 1]]))
    uv = torch.tensor([[0.25, -1.0], [2.0, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(p.coordinates(p.at(uv)), uv)
    same = plane(torch.zeros(3), directions=(torch.tensor([2.0, 0, 0]), torch.tensor([0, 1.0, 1])))
    torch.testing.assert_close(same.directions, p.directions)
