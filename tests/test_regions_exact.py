"""Linear regions on a plane (nngauge.measures.expressivity._regions, Raghu et al. 2017,
Theorem 2, Theorem 5, figure 1) against brute force.

The brute force runs the model's own operations (its torch.fx graph node by node, as
test_piecewise_engine.DenseScan does) at a grid of 1001 x 1001 points of the box and reads
every site's code there. Pointwise, every grid point must lie in the polygon of the exact
region with its pattern; every region the grid misses must be narrower than the grid can
see (a convex set of width w holds a disc of radius w / 3, and a disc of radius h / sqrt(2)
holds a point of a grid of step h); so the exact count is the dense count plus the regions
narrower than the grid. The affine maps must reproduce the network, the polygons tile the box,
the planar graph satisfies Euler's formula, and a one-hidden-layer network gives the regions
of its line arrangement, counted here from the lines themselves.
"""

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import BudgetExceededError, NNGaugeError
from nngauge._internal.patterns import PatternHasher
from nngauge.measures.expressivity._regions import regions
from nngauge.theory import hyperplane_regions
from nngauge.trajectories import plane
from test_piecewise_engine import DenseScan, resnet, seeded

DENSE = 1001  # grid points per side: 1,002,001 points


# ----------------------------------------------------------------------------------- models


def mlp(d_in, act, width, depth, d_out=3):
    layers, d = [], d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), act()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, d_out))


class PoolConv(nn.Module):
    """Conv -> ReLU -> MaxPool2d(2) -> Linear on inputs (2, 5, 5) (dimension 50)."""

    def __init__(self):
        super().__init__()
        self.conv, self.act, self.pool = nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(self.pool(self.act(self.conv(x))).flatten(1))


class Residual(nn.Module):
    """A stem, two residual blocks h + W2 relu(W1 h) and a head, on inputs of dimension 2."""

    def __init__(self, width=10):
        super().__init__()
        self.stem = nn.Linear(2, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(),
                                                  nn.Linear(width, width)) for _ in range(2))
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def points_of(shape, seed, scale=1.0):
    """Three random inputs (float64) spanning the plane."""
    gen = torch.Generator().manual_seed(200 + seed)
    return tuple(torch.randn(3, *shape, generator=gen, dtype=torch.float64).mul(scale).unbind(0))


NETWORKS = {
    "relu-mlp-2d": (lambda: seeded(mlp(2, nn.ReLU, 12, 3), 0, 1.5), (2,), 1.0),
    "relu-mlp-50d": (lambda: seeded(mlp(50, nn.ReLU, 10, 2), 1, 1.5), (50,), 0.5),
    "hardtanh-mlp-50d": (lambda: seeded(mlp(50, nn.Hardtanh, 8, 2), 2, 3.0), (50,), 0.4),
    "maxpool-conv-50d": (lambda: seeded(PoolConv(), 3, 1.5), (2, 5, 5), 0.6),
    "residual-mlp-2d": (lambda: seeded(Residual(), 4, 1.0), (2,), 1.0),
}


# ------------------------------------------------------------------------------ brute force


def grid_points(res, n=DENSE):
    """(n * n, 2) plane coordinates of the grid (endpoints included) and its step."""
    u0, u1, v0, v1 = res.bounds
    u = torch.linspace(u0, u1, n, dtype=torch.float64)
    v = torch.linspace(v0, v1, n, dtype=torch.float64)
    return torch.stack(torch.meshgrid(u, v, indexing="xy"), -1).reshape(-1, 2), (u1 - u0) / (n - 1)


def inputs_at(res, uv):
    anchors = res.plane.anchors.to(torch.float64)
    weights = torch.cat([1 - uv.sum(1, keepdim=True), uv], 1)
    return torch.einsum("nr,r...->n...", weights, anchors)


class Locator:
    """Finds the exact region holding points from their patterns, read by the model's own
    operations (DenseScan), via two 64-bit hashes of the whole pattern."""

    def __init__(self, model, res):
        self.res, self.hasher = res, PatternHasher()
        self.scan = DenseScan(model, inputs_at(res, torch.zeros(1, 2, dtype=torch.float64)))
        keys = self.hasher(torch.from_numpy(res.patterns).to(torch.int64), 0)
        self.keys = keys[:, 0] * 1_000_003 + keys[:, 1]  # one sortable key (collisions ~2^-64)
        self.order = torch.argsort(self.keys)

    def __call__(self, uv):
        """(region of each point, -1 where its pattern is no region's; model outputs; the
        points' pattern keys)."""
        with torch.no_grad():
            codes, y = self.scan(inputs_at(self.res, uv))
        pattern = torch.cat([c.reshape(len(uv), -1).to(torch.int64) for c in codes], 1) \
            if codes else torch.zeros(len(uv), 0, dtype=torch.int64)
        keys = self.hasher(pattern, 0)
        key = keys[:, 0] * 1_000_003 + keys[:, 1]
        ordered = self.keys[self.order]
        where = torch.searchsorted(ordered, key).clamp(max=len(ordered) - 1)
        region = torch.where(ordered[where] == key, self.order[where], -1)
        return region, y.reshape(len(uv), -1), key


def padded_polygons(res):
    """(n_regions, K, 2) polygons, each repeating its last corner."""
    size = np.diff(res.offsets)
    slot = np.minimum(np.arange(size.max()), size[:, None] - 1)
    return torch.from_numpy(res.vertices[res.corners[res.offsets[:-1, None] + slot]])


def depth_inside(polygons, region, uv):
    """How far each point lies inside its region's polygon (negative: outside)."""
    a = polygons[region]
    b = a.roll(-1, 1)
    edge = b - a
    length = torch.linalg.vector_norm(edge, dim=2)
    cross = (edge[..., 0] * (uv[:, None, 1] - a[..., 1]) - edge[..., 1] * (uv[:, None, 0]
                                                                            - a[..., 0]))
    return torch.where(length > 0, cross / length.clamp(min=1e-300), math.inf).amin(1)


def widths(polygons):
    """The width of each convex polygon: the least extent across an edge's direction."""
    a, b = polygons, polygons.roll(-1, 1)
    edge = b - a
    length = torch.linalg.vector_norm(edge, dim=2)
    normal = torch.stack([-edge[..., 1], edge[..., 0]], -1) / length.clamp(min=1e-300)[..., None]
    extent = torch.einsum("pkc,pjc->pkj", normal, polygons)  # edge k's normal . corner j
    span = extent.amax(2) - extent.amin(2)
    return torch.where(length > 0, span, math.inf).amin(1)


def assert_matches_dense(model, res, chunk=2**16):
    """Every grid point in its own pattern's polygon; the regions the grid misses narrower
    than it can see; the exact count = dense patterns + those."""
    locate, polygons = Locator(model, res), padded_polygons(res)
    uv, step = grid_points(res)
    hit, keys = torch.zeros(res.n_regions, dtype=torch.bool), []
    for part in uv.split(chunk):
        region, _, key = locate(part)
        assert bool((region >= 0).all()), "a grid point's pattern is no exact region's"
        assert float(depth_inside(polygons, region, part).min()) > -1e-9
        hit[region] = True
        keys.append(torch.unique(key))
    dense = len(torch.unique(torch.cat(keys)))  # distinct patterns on the grid
    narrow = widths(polygons[~hit]) < 3 * step / math.sqrt(2)
    assert bool(narrow.all()), "a region the grid misses is wide enough to hold a grid point"
    assert res.n_regions == dense + len(narrow)
    return dense, len(narrow)


def assert_affine_maps(model, res, n=1000):
    """At n random points the output equals the affine map of the region holding them."""
    u0, u1, v0, v1 = res.bounds
    uv = torch.rand(n, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    uv = uv * torch.tensor([u1 - u0, v1 - v0], dtype=torch.float64) + torch.tensor([u0, v0])
    region, y, _ = Locator(model, res)(uv)
    assert bool((region >= 0).all())
    maps = torch.from_numpy(res.affine_maps)[region]
    predicted = torch.einsum("nij,nj->ni", maps[:, :, :2], uv) + maps[:, :, 2]
    assert float(((y - predicted).abs() / (1 + y.abs())).max()) < 1e-9


def assert_partition(res):
    """The polygons (counter-clockwise, of the regions' areas) tile the box, Euler's formula
    holds, every edge inside the box separates two regions, per_depth grows."""
    u0, u1, v0, v1 = res.bounds
    assert res.areas.sum() == pytest.approx((u1 - u0) * (v1 - v0), rel=1e-12)
    polygons = padded_polygons(res)
    u, v = (polygons - polygons[:, :1]).unbind(-1)
    shoelace = 0.5 * (u * v.roll(-1, 1) - u.roll(-1, 1) * v).sum(1)
    np.testing.assert_allclose(shoelace.numpy(), res.areas, rtol=1e-9, atol=1e-14)
    assert res.n_vertices - res.n_edges + res.n_regions == 1
    assert res.unmatched_edges == 0 and res.collapsed_regions == 0
    assert bool((res.edge_regions[:, 1] >= 0).sum() == (res.edge_depths > 0).sum())
    assert list(res.per_depth) == sorted(res.per_depth) and res.per_depth[-1] == res.n_regions


# ------------------------------------------------------------------------------------ tests


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NETWORKS))
def test_exact_regions_equal_a_million_point_dense_grid(name):
    """Exact linear regions on a plane (ReLU and Hardtanh MLPs, a max-pooling conv, a residual
    MLP) equal a dense scan of a 1001 x 1001 grid: every grid point lies in its pattern's
    polygon, and the exact count is the dense count (over 100) plus regions too narrow for the
    grid; the affine maps reproduce the output, and the polygons tile the box (Euler's formula)."""
    build, shape, scale = NETWORKS[name]
    model = build()
    res = regions(model, points_of(shape, len(name), scale))
    dense, _ = assert_matches_dense(model, res)
    assert dense > 100  # a non-trivial partition
    assert_affine_maps(model, res)
    assert_partition(res)


def random_lines(k, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(k, 2, generator=gen, dtype=torch.float64), \
        torch.randn(k, generator=gen, dtype=torch.float64) * 0.6


def one_layer(weight, bias, act=nn.ReLU):
    """Hidden units w_i . x + b_i, output sum_i (-1)^i act_i - 0.1."""
    net = nn.Sequential(nn.Linear(2, len(bias)), act(), nn.Linear(len(bias), 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(weight)
        net[0].bias.copy_(bias)
        net[2].weight.copy_((-1.0) ** torch.arange(len(bias)).unsqueeze(0))
        net[2].bias.fill_(-0.1)
    return net


def arrangement(lines, box):
    """Faces, edges and vertices of an arrangement of lines a u + b v + c = 0 (rows of
    ``lines``) in the box, no three through a point: each line crossing the box adds a face,
    and so does each crossing of two lines inside it."""
    u0, u1, v0, v1 = box
    corners = np.array([[u0, v0], [u1, v0], [u1, v1], [u0, v1]])
    values = corners @ lines[:, :2].T + lines[:, 2]
    crossing = (values.max(0) > 0) & (values.min(0) < 0)
    lines = lines[crossing]
    inside = np.zeros(len(lines), dtype=np.int64)
    for i in range(len(lines)):
        for j in range(i + 1, len(lines)):
            if abs(np.linalg.det(lines[[i, j], :2])) < 1e-12:  # a hard tanh's parallel pair
                continue
            u, v = np.linalg.solve(lines[[i, j], :2], -lines[[i, j], 2])
            if u0 < u < u1 and v0 < v < v1:
                inside[[i, j]] += 1
    points = int(inside.sum()) // 2
    return (1 + len(lines) + points, 4 + 2 * len(lines) + int((inside + 1).sum()),
            4 + 2 * len(lines) + points)


@pytest.mark.parametrize("act, seed", [(nn.ReLU, 0), (nn.ReLU, 1), (nn.Hardtanh, 2)])
def test_one_hidden_layer_is_a_line_arrangement(act, seed):
    weight, bias = random_lines(12, seed)
    levels = [0.0] if act is nn.ReLU else [-1.0, 1.0]
    lines = np.concatenate([np.column_stack([weight.numpy(), bias.numpy() - c])
                            for c in levels])
    box = (-1.0, 1.0, -1.0, 1.0)
    res = regions(one_layer(weight, bias, act),
                  plane(torch.zeros(2), directions=torch.eye(2)), bounds=box)
    assert (res.n_regions, res.n_edges, res.n_vertices) == arrangement(lines, box)
    assert_partition(res)


def test_theorem_5_regions_of_lines_in_general_position():
    """k lines at well-separated angles through points near the centre: all crossings inside
    the box, so the arrangement has r(k, 2) = 1 + k + C(k, 2) regions, Theorem 5's bound."""
    k = 7
    gen = torch.Generator().manual_seed(3)
    angle = (torch.arange(k) + 0.3 * torch.rand(k, generator=gen)) * math.pi / k
    weight = torch.stack([torch.cos(angle), torch.sin(angle)], 1).double()
    bias = (torch.rand(k, generator=gen) - 0.5).double() * 0.2
    res = regions(one_layer(weight, bias), plane(torch.zeros(2), directions=torch.eye(2)),
                  bounds=(-1.0, 1.0, -1.0, 1.0))
    assert res.n_regions == hyperplane_regions(k, 2) == 29


def test_per_depth_and_edges_by_site():
    """A 3-hidden-layer ReLU net of width 4, as in figure 1: the partition after each layer
    refines the one before; edges made by a site separate regions whose codes differ first
    at that site and unit."""
    model = seeded(mlp(2, nn.ReLU, 4, 3), 5, 2.0)
    res = regions(model, plane(torch.zeros(2), directions=torch.eye(2)),
                  bounds=(-2.0, 2.0, -2.0, 2.0))
    assert [row.name for row in res.layers] == ["1", "3", "5"]
    assert res.per_depth[0] <= hyperplane_regions(4, 2) and res.per_depth[0] > 1
    assert res.per_depth[0] < res.per_depth[1] < res.per_depth[2] == res.n_regions
    inner = [edge for edge in res.edges if edge.regions[1] >= 0]
    assert len(inner) == res.n_edges - int((res.edge_depths == 0).sum()) > 0
    for edge in inner:
        left, right = (res.regions[i].pattern for i in edge.regions)
        differ = np.nonzero(left != right)[0]
        assert differ[0] == 4 * (edge.depth - 1) + edge.unit
        assert edge.site == res.layers[edge.depth - 1].name
    chosen = regions(model, res.plane, bounds=res.bounds, layers=["3"])
    assert chosen.per_depth == res.per_depth[1:2] and chosen.n_regions == res.n_regions


def test_decision_boundary_is_where_the_leading_output_changes():
    model = seeded(mlp(2, nn.ReLU, 8, 4), 6, 1.5)
    res = regions(model, plane(torch.zeros(2), directions=torch.eye(2)),
                  bounds=(-2.0, 2.0, -2.0, 2.0))
    segments = torch.from_numpy(res.decision_boundary)
    assert len(segments) > 5
    for s in (0.1, 0.5, 0.9):  # on every segment, the two leading outputs tie
        with torch.no_grad():
            y = model(segments[:, 0] + s * (segments[:, 1] - segments[:, 0]))
        top = y.topk(2, dim=1).values
        assert float((top[:, 0] - top[:, 1]).abs().max()) < 1e-9
    # every change of the leading output between neighbouring grid points lies near a segment
    n = 401
    u = torch.linspace(-2.0, 2.0, n, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(u, u, indexing="xy"), -1)
    with torch.no_grad():
        label = model(grid.reshape(-1, 2)).argmax(1).reshape(n, n)
    change = torch.cat([((grid[:, 1:] + grid[:, :-1]) / 2)[label[:, 1:] != label[:, :-1]],
                        ((grid[1:] + grid[:-1]) / 2)[label[1:] != label[:-1]]])
    a, b = segments[:, 0], segments[:, 1]
    along = ((change[:, None] - a) * (b - a)).sum(2) / ((b - a) ** 2).sum(1)
    nearest = a + along.clamp(0, 1)[..., None] * (b - a)
    gap = torch.linalg.vector_norm(change[:, None] - nearest, dim=2).amin(1)
    assert len(change) > 20 and float(gap.max()) < 4.0 / (n - 1)


def test_one_output_boundary_is_its_zero_set():
    weight, bias = random_lines(5, 7)
    net = one_layer(weight, bias)
    res = regions(net, plane(torch.zeros(2), directions=torch.eye(2)),
                  bounds=(-1.0, 1.0, -1.0, 1.0))
    segments = torch.from_numpy(res.decision_boundary)
    with torch.no_grad():
        y = net(segments.mean(1))
    assert len(segments) > 0 and float(y.abs().max()) < 1e-12


@pytest.mark.slow
def test_torchvision_and_timm_resnets_give_the_same_partition():
    """One ReLU module called twice per block (torchvision) or two modules (timm): the same
    function, so the same regions (over 20) on a plane of inputs, with the same per-depth
    counts, vertices and patterns, the sites named per layout, and a valid partition."""
    tv, timm = resnet("resnet_small"), resnet("resnet_small_timm")
    from nngauge.zoo import sample_inputs

    x = sample_inputs("resnet_small", 3, generator=4).double()
    box = (0.0, 0.006, 0.0, 0.006)
    a, b = (regions(model, tuple(x), bounds=box) for model in (tv, timm))
    assert a.n_regions == b.n_regions > 20 and a.per_depth == b.per_depth
    assert [row.name for row in a.layers][2:4] == ["layer1.0.relu#1", "layer1.0.relu#2"]
    assert [row.name for row in b.layers][2:4] == ["layer1.0.act1", "layer1.0.act2"]
    np.testing.assert_array_equal(a.vertices, b.vertices)
    np.testing.assert_array_equal(a.patterns, b.patterns)
    assert a.layers[1].kind == "maxpool"
    assert_partition(a)


def test_grid_method_counts_patterns_at_cell_centres():
    model = seeded(mlp(2, nn.ReLU, 12, 3), 0, 1.5)
    p = points_of((2,), 11)
    exact = regions(model, p)
    grid = regions(model, p, method="grid", resolution=256)
    assert grid.method == "grid" and "no polygons" in grid.note
    assert grid.n_regions <= exact.n_regions and grid.n_regions > 0.8 * exact.n_regions
    assert grid.image.shape == (3, 256, 256) and grid.per_depth[-1] == grid.n_regions
    assert len(np.unique(grid.image[-1])) == grid.n_regions
    assert grid.areas.sum() == pytest.approx(4.0)
    assert grid.regions[0].polygon is None and grid.regions[0].affine is None
    tanh = seeded(mlp(2, nn.Tanh, 12, 2), 1, 1.5)
    smooth = regions(tanh, p, method="grid", resolution=128)
    assert smooth.n_regions > 10 and len(smooth.layers) == 2


def test_piece_budget_is_refused_before_the_pieces_are_made():
    """A plane through a convolution with 4,096 units meets millions of regions: the budget
    is refused from the lower bound (L crossing lines make >= L + 1 pieces), not after."""
    conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(16 * 16 * 16, 2))
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with pytest.raises(BudgetExceededError, match=r"got more than (\d+) pieces \(counted") as e:
        regions(conv, tuple(x), max_regions=1000)
    found = int(re.search(r"more than (\d+) pieces", str(e.value)).group(1))
    assert 1000 < found < 20_000  # refused at the first cut, not after making them all


def test_grid_method_on_a_plane_of_embeddings_of_a_token_model():
    from nngauge.zoo import ZOO, sample_inputs

    entry = ZOO["gpt_small"]
    model, tokens = entry.build(generator=0), sample_inputs(entry, 3, generator=0)
    with torch.no_grad():
        embedded = model.get_submodule(entry.input_module)(tokens)
    p = plane(*embedded)
    res = regions(model, p, method="grid", resolution=16, input_module=entry.input_module,
                  template=tokens[0])
    assert res.image.shape[1:] == (16, 16) and res.n_regions > 1
    assert res.per_depth[-1] == res.n_regions == len(np.unique(res.image[-1]))
    with pytest.raises(NNGaugeError, match="method='grid'"):
        regions(model, p, input_module=entry.input_module, template=tokens[0])
    with pytest.raises(NNGaugeError, match="template"):
        regions(model, p, method="grid", input_module=entry.input_module)
    with pytest.raises(NNGaugeError, match="input_module= and template="):
        plane(*tokens)


def test_bad_inputs_are_refused_with_a_fix():
    model = seeded(mlp(2, nn.ReLU, 4, 1), 0)
    p = plane(torch.zeros(2), directions=torch.eye(2))
    with pytest.raises(NNGaugeError, match="one line"):
        plane(torch.zeros(2), torch.ones(2), 2 * torch.ones(2))
    with pytest.raises(NNGaugeError, match="one line"):
        regions(model, (torch.zeros(2), torch.ones(2), -torch.ones(2)))
    with pytest.raises(NNGaugeError, match="one shape"):
        plane(torch.zeros(2), torch.ones(3), torch.zeros(2))
    for box in [(1.0, 0.0, 0.0, 1.0), (0.0, 1.0, 0.5, 0.5), (0.0, math.inf, 0.0, 1.0), (0, 1)]:
        with pytest.raises(NNGaugeError, match="u_min < u_max"):
            regions(model, p, bounds=box)
    tanh = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 3), nn.Tanh())
    with pytest.raises(NNGaugeError, match=r"3 \(Tanh\): not piecewise linear.*method='grid'"):
        regions(tanh, p)
    with pytest.raises(BudgetExceededError, match="max_regions.*raise max_regions"):
        regions(seeded(mlp(2, nn.ReLU, 16, 2), 1, 1.5), p, max_regions=10)
    with pytest.raises(NNGaugeError, match="method"):
        regions(model, p, method="sampled")
    with pytest.raises(NNGaugeError, match="resolution"):
        regions(model, p, method="grid", resolution=1)
    with pytest.raises(NNGaugeError, match="Plane"):
        regions(model, torch.zeros(3, 2))
    bn = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.ReLU()).train()
    with pytest.raises(NNGaugeError, match="norm_mode"):
        regions(bn, p)


def test_plot_draws_one_pane_per_depth():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    model = seeded(mlp(2, nn.ReLU, 4, 3), 5, 2.0)
    res = regions(model, plane(torch.zeros(2), directions=torch.eye(2)),
                  bounds=(-2.0, 2.0, -2.0, 2.0))
    axes = res.plot(points=torch.randn(5, 2))
    assert len(axes) == 3
    drawn = [len(axis.collections[0].get_segments()) for axis in axes]
    assert drawn == [int(((res.edge_depths >= 1) & (res.edge_depths <= k)).sum())
                     for k in (1, 2, 3)]
    assert len(axes[-1].collections) == 3  # boundaries, decision boundary, points
    grid = regions(model, res.plane, bounds=res.bounds, method="grid", resolution=64)
    assert len(grid.plot(depths=[3])) == 1
    with pytest.raises(NNGaugeError, match="depths"):
        res.plot(depths=[7])
