"""The proxies that read which linear piece each unit is on (NASWOT, SWAP) and TE-NAS's region
count, against brute force: pre-activations computed by hand, each checked against its
activation's kinks; sample-wise patterns and grid patterns enumerated one by one."""

import math

import pytest
import torch
from torch import nn

from nngauge import activation_patterns, proxies
from nngauge.activations import get, modify
from nngauge.errors import InvalidInputError
from nngauge.nn import sample_cnn
from nngauge.nn._sampler import sample_architecture

SHIFTED = modify(get("relu"), dilation=1.25, shift=0.5)
"""relu(1.25 s + 0.5): one kink, at s = -0.4 (the NLC sampler's shifted, dilated ReLU)."""
NETS = {
    "leaky_relu": (lambda: nn.LeakyReLU(0.1), (0.0,)),
    "hardtanh": (nn.Hardtanh, (-1.0, 1.0)),
    "shifted_relu": (SHIFTED.module, (-0.4,)),
}
"""Activation module and its kinks, stated here (not read from nngauge)."""


def _net(activation, seed=0, widths=(3, 16, 12, 2)):
    """Linear, activation, Linear, activation, Linear (float64)."""
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(activation())
    return nn.Sequential(*layers).double()


def _inputs(n, d=3, seed=2, scale=2.0):
    return scale * torch.randn(n, d, generator=torch.Generator().manual_seed(seed),
                               dtype=torch.float64)


def _pieces(net, x, kinks):
    """(n, units) index of each hidden unit's piece, #{j : h > c_j}, from the pre-activations
    of a forward pass written out by hand; and the (n, bits) one-bit-per-kink code."""
    pieces, bits, h = [], [], x
    for module in net:
        if isinstance(module, nn.Linear):
            h = h @ module.weight.T + module.bias
        else:
            above = torch.stack([h > c for c in kinks], -1)  # (n, units, kinks)
            bits.append(above.reshape(len(x), -1))
            pieces.append(above.sum(-1))
            h = module(h)
    return torch.cat(pieces, 1), torch.cat(bits, 1).to(torch.float64)


@pytest.mark.parametrize("name", list(NETS))
def test_naswot_is_the_hamming_kernel_of_one_bit_per_kink(name):
    """K_H = N_A - Hamming over the bits [h_u > c_j] of every unit and kink (hardtanh: two
    bits a unit), built here from hand-computed pre-activations; naswot = log |det K_H|."""
    activation, kinks = NETS[name]
    net, x = _net(activation), _inputs(8)
    _, c = _pieces(net, x, kinks)
    kernel = c @ c.T + (1 - c) @ (1 - c).T
    expected = float(torch.linalg.slogdet(kernel)[1])
    assert math.isfinite(expected)
    assert proxies.naswot(net, x) == pytest.approx(expected, rel=1e-12)


def test_naswot_reads_the_piecewise_linear_units_of_a_mixed_network_only():
    """Hardtanh units are read (two bits each), tanh units are not: the kernel of the
    hardtanh layer alone."""
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(3, 6), nn.Hardtanh(), nn.Linear(6, 5), nn.Tanh(),
                        nn.Linear(5, 2)).double()
    x = _inputs(6)
    h = x @ net[0].weight.T + net[0].bias
    c = torch.cat([h > -1, h > 1], 1).to(torch.float64)
    kernel = c @ c.T + (1 - c) @ (1 - c).T
    assert proxies.naswot(net, x) == pytest.approx(float(torch.linalg.slogdet(kernel)[1]))


def test_naswot_and_swap_refuse_smooth_networks_with_the_reason():
    for act in (nn.Tanh, nn.SELU, nn.GELU):
        for proxy in (proxies.naswot, proxies.swap):
            with pytest.raises(InvalidInputError, match="smooth activations"):
                proxy(_net(act), _inputs(4))


def test_naswot_is_defined_on_every_piecewise_linear_sampled_architecture():
    """The NLC paper's sampler draws ReLU with a shift and dilation half the time: NASWOT is
    defined exactly on the architectures with a ReLU base (MLPs and CNNs), more than the
    unshifted ones (kink at 0) it was defined on when it read only those. Depth and width are
    fixed small for speed (the sampler's other draws do not change with them)."""
    x_mlp, x_cnn = _inputs(64, d=21).float(), _inputs(64, d=64).float()
    mlps = lambda g: sample_architecture(g, 21, 3, width=16, depth=5)  # noqa: E731
    cnns = lambda g: sample_cnn(g, 64, 10, image_shape=(1, 8, 8), depth=3, width=8)  # noqa: E731
    for sample, x, n in ((mlps, x_mlp, 25), (cnns, x_cnn, 20)):
        defined, relu, unshifted = set(), set(), set()
        for seed in range(n):
            model, description = sample(torch.Generator().manual_seed(seed))
            if description.activation == "relu":
                relu.add(seed)
                if description.shift == 0:
                    unshifted.add(seed)
            try:
                proxies.naswot(model, x)
                defined.add(seed)
            except InvalidInputError:
                pass
        assert defined == relu and unshifted < defined


# ----------------------------------------------------------------------------------- SWAP


@pytest.mark.parametrize("name", list(NETS))
def test_swap_counts_the_distinct_sample_wise_patterns_enumerated_unit_by_unit(name):
    """A unit's pattern is the tuple of its pieces over the samples; SWAP is the number of
    distinct tuples, enumerated here unit by unit; the regularised score multiplies it by
    exp(-(Theta - mu)^2 / sigma), Theta the parameter count in thousands."""
    activation, kinks = NETS[name]
    net, x = _net(activation, widths=(3, 40, 30, 2)), _inputs(5)
    pieces, _ = _pieces(net, x, kinks)
    patterns = {tuple(pieces[:, u].tolist()) for u in range(pieces.shape[1])}
    assert 1 < len(patterns) < pieces.shape[1]  # some units share a pattern
    assert proxies.swap(net, x) == len(patterns)
    theta = sum(p.numel() for p in net.parameters()) / 1e3
    factor = math.exp(-((theta - 1.0) ** 2) / 0.5)
    assert proxies.swap(net, x, regularization=(1.0, 0.5)) == pytest.approx(
        len(patterns) * factor, rel=1e-12)


def test_swap_refuses_a_bad_regularization():
    with pytest.raises(InvalidInputError, match="sigma > 0"):
        proxies.swap(_net(nn.ReLU), _inputs(4), regularization=(1.0, 0.0))


# --------------------------------------------------------------------------------- TE-NAS


def test_te_nas_regions_counts_the_patterns_of_the_plane_grid():
    """The grid is the resolution^2 cell centres of the parallelogram x0 + u (x1 - x0) +
    v (x2 - x0), 0 <= u, v <= 1, of the first three samples; the count of distinct patterns
    (pieces of every ReLU and hardtanh unit, by hand) equals te_nas_regions. The grid's points
    share regions (far fewer than resolution^2), where the data's samples each have their
    own."""
    torch.manual_seed(5)
    net = nn.Sequential(nn.Linear(2, 5), nn.ReLU(), nn.Linear(5, 4), nn.Hardtanh(),
                        nn.Linear(4, 1)).double()
    x = torch.tensor([[0.3, -1.0], [2.0, 0.5], [-1.0, 1.5], [7.0, 7.0]], dtype=torch.float64)
    resolution = 40
    centres = (torch.arange(resolution, dtype=torch.float64) + 0.5) / resolution
    u, v = torch.meshgrid(centres, centres, indexing="ij")
    uv = torch.stack([u.reshape(-1), v.reshape(-1)], 1)
    points = x[0] + uv[:, :1] * (x[1] - x[0]) + uv[:, 1:] * (x[2] - x[0])
    h1 = points @ net[0].weight.T + net[0].bias
    h2 = torch.relu(h1) @ net[2].weight.T + net[2].bias
    codes = torch.cat([(h1 > 0).long(), (h2 > -1).long() + (h2 > 1).long()], 1)
    expected = len({tuple(row) for row in codes.tolist()})
    assert 4 < expected < resolution ** 2 / 10
    assert proxies.te_nas_regions(net, x, resolution=resolution) == expected


def test_te_nas_regions_is_not_the_number_of_samples_on_a_sampled_network():
    """On a sampled width-16 ReLU MLP, 300 samples of 21-D data fall in 300 regions (the
    count over the data says nothing about the network); the plane's 3,025 grid points meet
    fewer regions than points."""
    model, _ = sample_architecture(torch.Generator().manual_seed(39), 21, 3, width=16)
    x = _inputs(300, d=21).float()
    model.eval()
    assert activation_patterns(model, x).n_patterns == 300
    assert 1 < proxies.te_nas_regions(model, x) < 55 ** 2
