"""The piecewise-linear engine (nngauge._internal.piecewise) against brute force.

The brute force runs the model's own operations (its torch.fx graph evaluated node by node,
activations and poolings applied as they are) at a dense grid of t and reads every site's code
off its input: activation regions #{j : h > c_j}, max-pooling arg-max indices as
``return_indices=True`` gives them. Every grid point's codes must equal those of the exact piece
containing it (pointwise, so pieces narrower than the grid step are accounted for: they are
the only difference between exact and dense counts), the network output must equal each piece's
affine map, and graphs the engine cannot follow are refused by name.
"""

import copy
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge import NNGaugeError
from nngauge._internal.graph import trace_graph
from nngauge._internal.piecewise import (
    EngineReport,
    Intervals,
    PiecewiseEngine,
    float64_copy,
    polyline_slices,
)
from nngauge._internal.piecewise.engine import _linear_of_live_features
from nngauge.measures.expressivity._transitions import transitions
from nngauge.zoo import ZOO, sample_inputs

KNOTS = torch.tensor([0.0, 1.0], dtype=torch.float64)


# ------------------------------------------------------------------------------ brute force


class DenseScan:
    """Codes of every activation / max-pooling site at a batch of points, computed with the
    model's real operations (not the engine's linear branches)."""

    def __init__(self, model, example):
        self.graph = trace_graph(model, example, where="test")
        self.kinds = {op.node: op.kind for op in self.graph.ops}

    def __call__(self, x):
        env, codes = {}, []
        for op in self.graph.ops:
            if op.kind == "input":
                env[op.node] = x
                continue
            if op.kind in ("activation", "maxpool"):
                source = next(n for n in op.node.all_input_nodes if self.kinds[n] != "constant")
                codes.append(self._code(op, env[source]))
            env[op.node] = self.graph.evaluate(op, env)
        return codes, env[self.graph.ops[-1].node]

    def _code(self, op, x):
        if op.kind == "activation":
            flat = x.reshape(len(x), -1)
            return torch.stack([flat > c for c in op.breakpoints]).sum(0)
        if op.module is not None:
            pool = copy.copy(op.module)
            pool.return_indices = True
            _, index = pool(x)
        else:
            kwargs = dict(op.node.normalized_arguments(
                self.graph.module, normalize_to_only_use_kwargs=True).kwargs)
            kwargs.update(input=x, return_indices=True)
            _, index = op.node.target(**kwargs)
        return index.reshape(len(x), -1)


@dataclass
class Exact:
    """The engine's final pieces on a segment: bounds (P, 2) in t, codes per site (P, units),
    the output's reference values (P, 2, d), the run's report and the sites."""

    bounds: torch.Tensor
    codes: list
    outputs: torch.Tensor
    report: EngineReport
    sites: tuple


def run_exact(model, x0, x1, **options):
    engine = PiecewiseEngine(float64_copy(model).eval(), x0[None], where="test", **options)
    pieces, anchors = polyline_slices(torch.stack([x0, x1]))
    report = EngineReport()
    chunks = list(engine.run(pieces, anchors, merge_tol=1e-12, report=report))
    codes = [torch.cat([chunk.codes[i] for chunk in chunks]) for i in range(len(engine.sites))]
    outputs = torch.cat([chunk.output.reshape(len(chunk.pieces), 2, -1) for chunk in chunks])
    bounds = torch.cat([chunk.pieces.bounds(KNOTS) for chunk in chunks])
    return Exact(bounds, codes, outputs, report, engine.sites)


def compare_dense(model, x0, x1, exact, n, chunk=4096):
    """Pointwise: the codes of each of n equally spaced t (model's real operations) equal those
    of the exact piece holding it (t within 1e-9 of a boundary excepted). Returns the dense
    count of code changes per site and of distinct whole patterns."""
    scan = DenseScan(model, x0[None])
    starts, ends = exact.bounds[:, 0].contiguous(), exact.bounds[:, 1].contiguous()
    shape = (-1,) + (1,) * x0.dim()
    changes, patterns, last = np.zeros(len(exact.codes), dtype=np.int64), set(), None
    with torch.no_grad():
        for t in torch.linspace(0.0, 1.0, n, dtype=torch.float64).split(chunk):
            x = (1 - t.reshape(shape)) * x0 + t.reshape(shape) * x1
            codes, y = scan(x)
            if last is None:  # the scan computes what the model does
                torch.testing.assert_close(y, model(x), rtol=1e-12, atol=1e-12)
            piece = (torch.searchsorted(starts, t, right=True) - 1).clamp(min=0)
            edge = torch.minimum(t - starts[piece], ends[piece] - t) < 1e-9
            for dense, expected in zip(codes, exact.codes):
                wrong = (dense != expected[piece].to(dense.dtype)).any(1)
                assert not bool((wrong & ~edge).any()), "a grid point's code differs"
            if last is not None:
                codes = [torch.cat([a, b]) for a, b in zip(last, codes)]
            diffs = [c[1:] != c[:-1] for c in codes]
            changes += [int(d.sum()) for d in diffs]
            # every pattern met is the first row or a row right after a change
            rows = torch.nonzero(torch.stack([d.any(1) for d in diffs]).any(0))[:, 0] + 1
            rows = rows if last is not None else torch.cat([torch.zeros(1, dtype=torch.long),
                                                            rows])
            whole = torch.cat([c.to(torch.int64) for c in codes], 1)[rows]
            patterns.update(hash(row.numpy().tobytes()) for row in whole)
            last = [c[-1:] for c in codes]
    return changes.tolist(), len(patterns)


def pieces_without_grid_point(bounds, n):
    a, b = bounds[:, 0].numpy() * (n - 1), bounds[:, 1].numpy() * (n - 1)
    hit = np.ceil(a) < b
    hit[-1] = True
    return int((~hit).sum())


def assert_matches_dense(model, x0, x1, n=10**6, wide=True):
    """Exact transitions() counts vs the dense scan: equal when every piece holds a grid point
    (``wide``: asserted), else exact >= dense (the pieces without a grid point explain it)."""
    exact = run_exact(model, x0, x1)
    result = transitions(model, x0, x1)
    assert [site.name for site in exact.sites] == [row.name for row in result.layers]
    changes, n_patterns = compare_dense(model, x0, x1, exact, n)
    missing = pieces_without_grid_point(exact.bounds, n)
    if wide:
        assert missing == 0
    if missing == 0:
        assert list(result.per_layer) == changes and result.n_patterns == n_patterns
    else:
        assert all(e >= d for e, d in zip(result.per_layer, changes))
        assert n_patterns <= result.n_patterns <= n_patterns + missing
    assert result.n_pieces == result.n_patterns  # Corollary 1 on a segment
    return result, exact


def assert_output_is_piecewise_affine(model, x0, x1, exact, n=1000):
    """At n random t the network output equals the affine map of the piece holding t (its
    reference values at t = 0 and t = 1 interpolated)."""
    t = torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    piece = (torch.searchsorted(exact.bounds[:, 0].contiguous(), t, right=True) - 1).clamp(min=0)
    refs = exact.outputs[piece]
    predicted = torch.lerp(refs[:, 0], refs[:, 1], t.unsqueeze(1))
    shape = (-1,) + (1,) * x0.dim()
    with torch.no_grad():
        y = model((1 - t.reshape(shape)) * x0 + t.reshape(shape) * x1).reshape(n, -1)
    assert float(((y - predicted).abs() / (1 + y.abs())).max()) < 1e-9


# ----------------------------------------------------------------------------------- models


def seeded(module, seed, gain=1.0):
    """Float64 copy with Gaussian weights (gain / sqrt(fan_in)) and biases of std 0.3."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * gain / math.sqrt(p[0].numel()))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module.double().eval()


class PoolNet(nn.Module):
    """Conv -> ReLU -> MaxPool2d(2) -> Conv -> ReLU6 -> F.max_pool2d(3, stride 2, padding 1)
    -> Linear; input (2, 8, 8)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.act1 = nn.Conv2d(2, 4, 3, padding=1), nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2, self.act2 = nn.Conv2d(4, 5, 3, padding=1), nn.ReLU6()
        self.fc = nn.Linear(20, 3)

    def forward(self, x):
        x = self.pool(self.act1(self.conv1(x)))
        x = F.max_pool2d(self.act2(self.conv2(x)), 3, 2, 1)
        return self.fc(torch.flatten(x, 1))


class OddPools(nn.Module):
    """MaxPool1d with stride < kernel and ceil_mode, and adaptive max pooling 5x5 -> 3x3
    (overlapping windows of unequal sizes); input (6,)."""

    def __init__(self):
        super().__init__()
        self.lin1, self.pool1 = nn.Linear(6, 16), nn.MaxPool1d(3, stride=2, ceil_mode=True)
        self.lin2, self.act = nn.Linear(8, 50), nn.LeakyReLU(0.2)
        self.pool2 = nn.AdaptiveMaxPool2d(3)
        self.fc = nn.Linear(18, 2)

    def forward(self, x):
        h = self.pool1(self.lin1(x).view(-1, 2, 8)).flatten(1)
        h = self.pool2(self.act(self.lin2(h)).view(-1, 2, 5, 5))
        return self.fc(h.flatten(1))


class ResidualMLP(nn.Module):
    """Residual blocks h + W2 act(W1 h) with ONE activation module called in every block, an
    F.relu stem, a clamp, and a batch size read before the first activation and used after."""

    def __init__(self, width=12, blocks=3):
        super().__init__()
        self.stem = nn.Linear(5, width)
        self.inner = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
        self.outer = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
        self.act = nn.ReLU()
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        batch = x.size(0)
        h = F.relu(self.stem(x))
        for inner, outer in zip(self.inner, self.outer):
            h = h + outer(self.act(inner(h)))
        return self.head(torch.clamp(h, -2.0, 2.0).view(batch, -1))


class PReLUNet(nn.Module):
    """Conv with a per-channel PReLU (random slopes), then F.hardtanh; input (1, 6, 6)."""

    def __init__(self):
        super().__init__()
        self.conv, self.act = nn.Conv2d(1, 3, 3), nn.PReLU(3)
        self.fc = nn.Linear(48, 4)

    def forward(self, x):
        return F.hardtanh(self.fc(self.act(self.conv(x)).flatten(1)), -0.5, 0.5)


def endpoints(shape, seed, scale=2.0):
    gen = torch.Generator().manual_seed(100 + seed)
    return (torch.randn(2, *shape, generator=gen, dtype=torch.float64) * scale).unbind(0)


def mlp_of(act, seed, width=16, gain=2.0):
    return seeded(nn.Sequential(nn.Linear(5, width), act(), nn.Linear(width, width), act(),
                                nn.Linear(width, 2)), seed, gain)


# ------------------------------------------------------------------------------------ tests


@pytest.mark.slow
@pytest.mark.parametrize("build, shape, seed", [
    (lambda: seeded(PoolNet(), 0, 1.5), (2, 8, 8), 0),
    (lambda: seeded(OddPools(), 1, 1.5), (6,), 1),
    (lambda: seeded(ResidualMLP(), 2, 1.5), (5,), 2),
    (lambda: seeded(PReLUNet(), 3, 2.0), (1, 6, 6), 3),
    (lambda: mlp_of(lambda: nn.LeakyReLU(0.1), 4), (5,), 4),
    (lambda: mlp_of(nn.ReLU6, 5, gain=6.0), (5,), 5),
    (lambda: mlp_of(nn.Hardtanh, 6, gain=3.0), (5,), 6),
], ids=["maxpool-cnn", "maxpool1d-adaptive", "residual-mlp", "prelu-conv", "leaky-relu",
        "relu6", "hardtanh"])
def test_exact_pieces_equal_a_million_point_dense_scan(build, shape, seed):
    """On max pooling (2d, 1d ceil-mode, adaptive), a residual MLP, PReLU, LeakyReLU, ReLU6 and
    Hardtanh networks, every exact piece holds a point of a 10^6-point dense scan whose codes
    (read off the model's own operations) equal the piece's, so exact transitions() equal the
    dense counts (more than 10), and the output is each piece's affine map to 1e-9."""
    model = build()
    x0, x1 = endpoints(shape, seed)
    result, exact = assert_matches_dense(model, x0, x1)
    assert result.n_transitions > 10  # a non-trivial case
    assert_output_is_piecewise_affine(model, x0, x1, exact)


def test_sites_are_named_per_call_and_kind():
    model = seeded(ResidualMLP(), 2, 1.5)
    res = transitions(model, *endpoints((5,), 2))
    assert [row.name for row in res.layers] == ["relu", "act#1", "act#2", "act#3", "clamp"]
    pool = transitions(seeded(PoolNet(), 0), *endpoints((2, 8, 8), 0))
    assert [(row.name, row.kind, row.units) for row in pool.layers] == [
        ("act1", "activation", 256), ("pool", "maxpool", 64), ("act2", "activation", 80),
        ("max_pool2d", "maxpool", 20)]
    second = transitions(model, *endpoints((5,), 2), layers=["act#2"])
    assert second.per_layer == res.per_layer[2:3]
    with pytest.raises(NNGaugeError, match=r"act#1"):
        transitions(model, *endpoints((5,), 2), layers=["act"])


def resnet(name, seed=0):
    """A zoo ResNet with non-trivial batchnorm running statistics, in eval mode, float64."""
    entry = ZOO[name]
    model = entry.build(generator=seed).double()
    with torch.no_grad():
        for i in range(3):
            model(sample_inputs(entry, 16, generator=10 + i).double())
    return model.eval()


@pytest.mark.slow
def test_zoo_resnet_matches_dense_scan():
    """Exact transitions of a ResNet (stem max pooling, residual blocks) equal a dense scan of
    10,000 points on a tenth of the segment between two inputs (about 370 pieces, so 27
    points a piece on average; the whole segment's 5,600 pieces would need 20 times the scan
    for the same density). The timm layout is the same function with the same transitions
    (next test), so one layout is scanned."""
    name = "resnet_small_timm"
    model = resnet(name)
    x0, x1 = sample_inputs(name, 2, generator=1).double().unbind(0)
    x1 = torch.lerp(x0, x1, 0.1)
    result, exact = assert_matches_dense(model, x0, x1, n=10_000, wide=False)
    assert result.n_pieces > 300 and result.layers[1].kind == "maxpool"
    assert_output_is_piecewise_affine(model, x0, x1, exact)


@pytest.mark.slow
def test_torchvision_and_timm_layouts_give_the_same_transitions():
    """One ReLU module called twice per block (torchvision) or two modules (timm): the same
    function, so the same per-site transitions in the same order."""
    tv, timm = resnet("resnet_small"), resnet("resnet_small_timm")
    x0, x1 = sample_inputs("resnet_small", 2, generator=2).double().unbind(0)
    a, b = transitions(tv, x0, x1), transitions(timm, x0, x1)
    assert a.per_layer == b.per_layer and a.n_patterns == b.n_patterns
    assert [row.name for row in a.layers][2:4] == ["layer1.0.relu#1", "layer1.0.relu#2"]
    assert [row.name for row in b.layers][2:4] == ["layer1.0.act1", "layer1.0.act2"]
    np.testing.assert_array_equal(a.pieces, b.pieces)


def test_chunks_stream_in_path_order():
    """A chunk budget of a few pieces gives exactly the pieces and codes of one big chunk."""
    model = seeded(PoolNet(), 0, 1.5)
    x0, x1 = endpoints((2, 8, 8), 0)
    whole, small = run_exact(model, x0, x1), run_exact(model, x0, x1, max_elements=20_000)
    assert len(whole.bounds) > 50
    torch.testing.assert_close(small.bounds, whole.bounds, rtol=0, atol=0)
    for a, b in zip(small.codes, whole.codes):
        assert torch.equal(a, b)
    assert torch.equal(whole.bounds[1:, 0], whole.bounds[:-1, 1])


def test_polyline_segments_are_consecutive():
    model = mlp_of(nn.ReLU, 7)
    vertices = torch.stack(endpoints((5,), 7) + endpoints((5,), 8))
    engine = PiecewiseEngine(float64_copy(model).eval(), vertices[:1], where="test")
    pieces, anchors = polyline_slices(vertices)
    chunks = list(engine.run(pieces, anchors, merge_tol=1e-12, report=EngineReport()))
    knots = torch.linspace(0, 1, 4, dtype=torch.float64)
    bounds = torch.cat([chunk.pieces.bounds(knots) for chunk in chunks])
    assert bounds[0, 0] == 0 and bounds[-1, 1] == 1
    torch.testing.assert_close(bounds[1:, 0], bounds[:-1, 1], rtol=0, atol=1e-15)
    assert set(torch.cat([chunk.pieces.slice_index for chunk in chunks]).tolist()) == {0, 1, 2}


def test_near_coincident_crossings_are_merged_and_counted():
    """Two units crossing 1e-14 apart in t: one boundary, one merged crossing."""
    whole = Intervals.whole(1, torch.device("cpu"))
    h = torch.tensor([[[-0.5, -0.5 - 1e-14, -0.25], [0.5, 0.5 - 1e-14, 0.75]]],
                     dtype=torch.float64)
    cut = whole.cut(h, (0.0,), 1e-12)
    assert cut.merged == 1 and cut.pieces.lo.tolist() == [0.0, 0.25, 0.5]
    assert cut.parent.tolist() == [0, 0, 0]
    again = cut.pieces.cut(h[[0, 0, 0]], (0.0,), 1e-12)
    # every crossing now lies on a boundary: no new piece, each crossing counted once
    assert len(again.pieces) == 3 and again.merged == 3


def test_refuses_what_it_cannot_follow_and_names_it():
    gn = ZOO["groupnorm_cnn"].build(generator=0).double().eval()
    x0, x1 = sample_inputs("groupnorm_cnn", 2).double().unbind(0)
    with pytest.raises(NNGaugeError, match=r"1 \(GroupNorm\): GroupNorm is neither.*5 \("
                       r"GroupNorm\).*method='sampled'"):
        transitions(gn, x0, x1)
    tanh = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh()).double()
    with pytest.raises(NNGaugeError, match=r"3 \(Tanh\): not piecewise linear.*sampled"):
        transitions(tanh, *endpoints((5,), 0))
    bn = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU()).double().train()
    with pytest.raises(NNGaugeError, match=r"1 \(BatchNorm1d\): batchnorm using batch stat"):
        PiecewiseEngine(bn, torch.zeros(2, 5, dtype=torch.float64), where="test")
    with pytest.raises(NNGaugeError, match="eval"):
        transitions(bn, *endpoints((5,), 0))


class OptionalArguments(nn.Module):
    """A forward taking more than its input, as timm's and Hugging Face's do."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(3, 6), nn.Linear(6, 2)

    def forward(self, x, mask=None, negate=False, *args, scale=2.0, **kwargs):
        h = F.relu(self.lin1(x))
        if mask is not None:
            h = h * mask
        if negate:
            h = -h
        return self.lin2(h) * scale


class Wrapped(nn.Module):
    """The workaround the refusal used to ask for: forward(x) calling the model."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)


def test_forward_parameters_with_defaults_are_traced_with_their_defaults():
    """Issue 34: "forward() with 3 arguments ... wrap the model". Parameters after the input
    that have defaults (and *args, **kwargs) are traced with their defaults: the graph takes
    one input and computes model(x); exact transitions equal those of the wrapped model."""
    torch.manual_seed(0)
    model = OptionalArguments().double()
    x = torch.randn(5, 3, dtype=torch.float64)
    graph = trace_graph(model, x, where="test")
    assert [n.target for n in graph.module.graph.nodes if n.op == "placeholder"] == ["x"]
    torch.testing.assert_close(graph.module(x), model(x))
    assert not torch.allclose(model(x, negate=True), model(x))  # the defaults were used
    x0, x1 = endpoints((3,), 1)
    assert transitions(model, x0, x1).n_transitions == transitions(
        Wrapped(model), x0, x1).n_transitions > 0


def test_a_forward_argument_without_default_is_refused_naming_it():
    class Pair(nn.Module):
        def forward(self, x, mask, scale=1.0):
            return x * mask * scale

    with pytest.raises(NNGaugeError, match=r"required arguments \['mask'\].*Fix: wrap the "
                       r"model in a module whose forward\(x\)"):
        trace_graph(Pair(), torch.zeros(2, 3), where="test")


class BatchMixing(nn.Module):
    """Subtracts the batch mean: traced as affine, yet not a function of each sample."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        return F.relu(h - h.mean(0, keepdim=True))


def test_affinity_guard_catches_a_batch_mixing_op():
    torch.manual_seed(0)
    with pytest.raises(NNGaugeError, match="affine map"):
        transitions(BatchMixing().double(), torch.full((3,), -5.0, dtype=torch.float64),
                    torch.full((3,), 5.0, dtype=torch.float64))


def test_an_affine_network_is_one_piece():
    model = nn.Sequential(nn.Linear(5, 3), nn.BatchNorm1d(3), nn.Dropout(0.5)).double().eval()
    res = transitions(model, *endpoints((5,), 0))
    assert (res.n_pieces, res.n_patterns, res.per_layer) == (1, 1, ())
    assert res.pieces.tolist() == [[0.0, 1.0]]


def test_coincident_units_share_one_boundary():
    """Two units with the same pre-activation cross together: one boundary (the second
    crossing is merged and reported), both units transition there."""
    net = nn.Sequential(nn.Linear(1, 3), nn.ReLU()).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0], [1.0], [-1.0]]))
        net[0].bias.copy_(torch.tensor([0.5, 0.5, 0.25]))
    res = transitions(net, torch.tensor([-1.0], dtype=torch.float64),
                      torch.tensor([1.0], dtype=torch.float64))
    assert (res.n_pieces, res.per_layer, res.near_coincident) == (3, (3,), 1)
    np.testing.assert_allclose(res.pieces[:, 0], [0.0, 0.25, 0.625])


def test_linear_skips_features_that_are_zero_on_every_piece():
    linear = nn.Linear(6, 4).double()
    x = torch.randn(5, 3, 6, dtype=torch.float64)
    for dead in ([], [0, 2, 3, 5], list(range(6))):
        x[..., dead] = 0.0
        torch.testing.assert_close(_linear_of_live_features(linear, x), linear(x))
