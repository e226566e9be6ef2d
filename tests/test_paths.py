"""path_norm and capacity on graphs: explicit path enumeration through the dense matrices of
every layer (residual identity edges, padding copies, pooling weights, batchnorm), node
rescaling, and the refusals that name the node."""

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.generalization._norms import capacity, path_norm
from nngauge.nn import mlp
from nngauge.zoo import resnet_small

P_VALUES = (0.5, 1, 2, 3)


def _randomize(model, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen, dtype=prm.dtype) * scale)
    return model


def _dense(function, in_shape):
    """The matrix (out, in) of a linear map, column by column on the identity basis."""
    n = math.prod(in_shape)
    basis = torch.eye(n, dtype=torch.float64).reshape(n, *in_shape)
    with torch.no_grad():
        return (function(basis) - function(torch.zeros_like(basis))).reshape(n, -1).T.numpy()


def _path_products(edges, biases, n_inputs, sink):
    """prod |w| of every path, enumerated one by one (depth-first): from every input unit of
    node "x", and from every unit of ``biases`` (node -> bias vector), to node ``sink``."""
    out = defaultdict(list)
    for source, target, matrix in edges:
        out[source].append((target, np.abs(matrix)))
    products = []

    def walk(node, unit, product):
        if node == sink:
            products.append(product)
            return
        for target, matrix in out[node]:
            column = matrix[:, unit]
            for j in np.flatnonzero(column):
                walk(target, j, product * column[j])

    for i in range(n_inputs):
        walk("x", i, 1.0)
    for node, bias in biases.items():
        for j, b in enumerate(np.abs(bias)):
            walk(node, j, b)
    return np.array(products)


def _check(net, edges, biases, n_inputs, sink, input_shape=None):
    """path_norm against the enumeration, for every p, with and without bias paths."""
    with_bias = _path_products(edges, biases, n_inputs, sink)
    without = _path_products(edges, {}, n_inputs, sink)
    for p in P_VALUES:
        assert path_norm(net, p, input_shape=input_shape) == pytest.approx(
            (with_bias**p).sum() ** (1 / p), rel=1e-10)
        assert path_norm(net, p, bias=False, input_shape=input_shape) == pytest.approx(
            (without**p).sum() ** (1 / p), rel=1e-10)


def test_residual_mlp_equals_enumeration():
    """nngauge's mlp with a skip: h0 = W0 x + b0 feeds layer 1 (through ReLU) and the output
    (through the fixed projection P, strength 0.7):
    out = W2 relu(W1 relu(h0) + b1) + b2 + 0.7 P h0."""
    net = mlp(3, 4, 3, 2, skip=0.7, bias_std=0.5, generator=torch.Generator().manual_seed(0),
              dtype=torch.float64)
    w = [blk.linear.weight.detach().numpy() for blk in net.layers]
    b = [blk.linear.bias.detach().numpy() for blk in net.layers]
    projection = net.skip_projection.numpy()
    edges = [("x", "h0", w[0]), ("h0", "h1", w[1]), ("h1", "h2", w[2]), ("h2", "out", np.eye(2)),
             ("h0", "out", 0.7 * projection)]
    _check(net, edges, {"h0": b[0], "h1": b[1], "h2": b[2]}, 3, "out")


class _AveragePool(nn.Module):
    """F.avg_pool2d in forward (a function node), with a divisor override."""

    def forward(self, x):
        return F.avg_pool2d(x, 3, 2, 1, divisor_override=4)


class _ResidualCNN(nn.Module):
    """conv1 -> ReLU -> (depthwise conv2 + identity) -> ReLU -> pool -> flatten -> fc."""

    def __init__(self, pool, padding_mode="zeros"):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3, padding=1)
        self.conv2 = nn.Conv2d(2, 2, 3, padding=1, groups=2, padding_mode=padding_mode)
        self.pool = pool
        self.fc = nn.Linear(18, 2)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h) + h)
        return self.fc(torch.flatten(self.pool(h), 1))


@pytest.mark.parametrize("pool, padding_mode", [
    (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), "zeros"),
    (nn.AvgPool2d(3, stride=2, padding=1), "zeros"),
    (nn.AvgPool2d(2, ceil_mode=True), "zeros"),
    (nn.AdaptiveAvgPool2d(3), "zeros"),  # windows 2, 3, 2 on 5 entries
    (_AveragePool(), "circular"),
    (nn.AdaptiveAvgPool2d(3), "reflect"),
])
def test_residual_cnn_with_pooling_equals_enumeration(pool, padding_mode):
    net = _randomize(_ResidualCNN(pool, padding_mode).double(), seed=1)
    shape = (2, 5, 5)
    conv1, conv2 = net.conv1, net.conv2
    c1 = _dense(lambda t: conv1(t), (1, 5, 5))
    pooled = _dense(pool, shape)
    if padding_mode == "zeros":
        conv_edges = [("h1", "h2", _dense(lambda t: conv2(t), shape))]
    else:  # the padding copies input entries: a layer of 0/1 edges, then a valid convolution
        pads = conv2._reversed_padding_repeated_twice
        padded = (2, 7, 7)
        conv_edges = [
            ("h1", "padded", _dense(lambda t: F.pad(t, pads, mode=padding_mode), shape)),
            ("padded", "h2", _dense(lambda t: F.conv2d(t, conv2.weight, groups=2), padded))]
    edges = [("x", "h1", c1), *conv_edges, ("h1", "h2", np.eye(50)),
             ("h2", "pooled", pooled), ("pooled", "out", net.fc.weight.detach().numpy())]
    biases = {"h1": np.repeat(conv1.bias.detach().numpy(), 25),
              "h2": np.repeat(conv2.bias.detach().numpy(), 25), "out": net.fc.bias.detach().numpy()}
    _check(net, edges, biases, 25, "out", input_shape=(1, 5, 5))


def test_batchnorm_network_equals_enumeration():
    """The first batchnorm folds into its Linear; the second (after a ReLU) stays a diagonal
    affine node: edges diag(s), bias t = beta - s mu."""
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3), nn.ReLU(),
                        nn.BatchNorm1d(3), nn.Linear(3, 2)).double()
    _randomize(net, seed=2)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for bn in (net[1], net[5]):
            bn.running_mean.copy_(torch.randn(bn.num_features, generator=gen, dtype=torch.float64))
            bn.running_var.copy_(torch.rand(bn.num_features, generator=gen, dtype=torch.float64)
                                 + 0.5)
    net.eval()

    def affine(bn):
        s = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy()
        return s, bn.bias.detach().numpy() - s * bn.running_mean.numpy()

    (s0, t0), (s1, t1) = affine(net[1]), affine(net[5])
    w = [net[i].weight.detach().numpy() for i in (0, 3, 6)]
    b = [net[i].bias.detach().numpy() for i in (0, 3, 6)]
    edges = [("x", "h0", s0[:, None] * w[0]), ("h0", "h1", w[1]), ("h1", "n1", np.diag(s1)),
             ("n1", "out", w[2])]
    _check(net, edges, {"h0": s0 * b[0] + t0, "h1": b[1], "n1": t1, "out": b[2]}, 3, "out")


def test_node_rescaling_invariance_on_a_residual_net():
    """Scaling a unit's incoming weights (and bias) by c and its outgoing ones by 1/c keeps the
    function (ReLU is positively homogeneous) and every path product."""
    net = mlp(3, 5, 3, 2, skip=1.0, bias_std=0.3, generator=torch.Generator().manual_seed(4),
              dtype=torch.float64)
    scaled = mlp(3, 5, 3, 2, skip=1.0, bias_std=0.3, dtype=torch.float64)
    scaled.load_state_dict(net.state_dict())
    with torch.no_grad():
        for layer, unit, c in ((0, 2, 7.0), (1, 4, 0.1)):  # h0 feeds the skip, h1 does not
            scaled.layers[layer].linear.weight[unit] *= c
            scaled.layers[layer].linear.bias[unit] *= c
            scaled.layers[layer + 1].linear.weight[:, unit] /= c
            if layer == 0:
                scaled.skip_projection[:, unit] /= c
    x = torch.randn(20, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.allclose(net(x), scaled(x), atol=1e-12)
    for p in (1, 2, 3):
        assert path_norm(scaled, p) == pytest.approx(path_norm(net, p), rel=1e-12)


def test_deep_network_does_not_overflow():
    """150 layers of weights ~ 30: the path norm exceeds float64 (inf) but capacity's logs stay
    finite."""
    net = nn.Sequential(*[m for _ in range(150) for m in (nn.Linear(8, 8), nn.ReLU())],
                        nn.Linear(8, 3)).double()
    _randomize(net, seed=6, scale=30.0)
    assert path_norm(net, 1) == math.inf
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    result = capacity(net, x, net(x).argmax(1))
    assert result.l1_path_norm == math.inf and math.isfinite(result["l1_path"].log10_capacity)


def test_max_pooling_is_refused_naming_the_node():
    net = resnet_small(width=4, generator=0)
    with pytest.raises(NNGaugeError, match=r"maxpool \(MaxPool2d\): max pooling selects one "
                                           r"path per window.*average pooling"):
        path_norm(net, 2, input_shape=(3, 16, 16))


def test_capacity_of_a_max_pooling_resnet():
    """l2 and spectral capacities are defined; the path-based ones are NaN, with the reason."""
    net = resnet_small(width=4, generator=0).eval()
    x = torch.randn(12, 3, 16, 16, generator=torch.Generator().manual_seed(8))
    result = capacity(net, x, net(x).argmax(1))
    assert math.isfinite(result.l2) and math.isfinite(result.spectral)
    assert math.isnan(result.l1_path) and math.isnan(result.l2_path_norm)
    assert "maxpool (MaxPool2d)" in result.undefined["l1_path"]
    assert result.depth == 13 and result.layers[0].name == "conv1"
    assert any("derives its bounds for chains" in note for note in result.notes)
    assert {row.spectral_method for row in result.layers} == {"power", "matrix"}
    product = math.prod(row.spectral for row in result.layers)
    assert result.lipschitz_l2 == pytest.approx(product)


@pytest.mark.parametrize("module, match", [
    (nn.ReLU6(), r"1 \(ReLU6\): not a positively homogeneous activation"),
    (nn.GroupNorm(2, 4), r"1 \(GroupNorm\).*normalization by statistics"),
])
def test_refusals_name_the_node(module, match):
    net = nn.Sequential(nn.Conv2d(1, 4, 3), module, nn.Flatten(), nn.Linear(16, 2))
    with pytest.raises(NNGaugeError, match=match):
        path_norm(net, 2, input_shape=(1, 4, 4))


class _Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return x * self.fc(x)


def test_product_of_input_dependent_tensors_is_refused():
    with pytest.raises(NNGaugeError, match=r"mul \(mul\).*product of two input-dependent"):
        path_norm(_Gated(), 1)
