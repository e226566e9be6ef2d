"""Activation sites are found one way by every measure that reads them: a network whose
activations are functions called in forward() (F.relu, torch.relu, x.clamp(min=0), F.gelu,
x * torch.sigmoid(x)) gives the same sites and the same values as its copy with activation
modules (same weights), or both are refused naming the unit; counts equal a brute-force set of
sign patterns computed by a manual forward pass. A CIFAR-style ResNet written as research code
writes it (F.relu in every block's forward, batchnorm in eval mode) is measured, and the exact
method refuses early, with its estimate, a path it could not follow within its time budget."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge import (
    BudgetExceededError,
    InvalidInputError,
    activation_patterns,
    loss_landscape,
    region_density,
    regions,
    trajectory_length,
    transitions,
    weight_transitions,
)
from nngauge.proxies import naswot, te_nas_regions
from nngauge.trajectories import line

# name: (module, function, piecewise linear, the unit a refusal names for each)
UNITS = {
    "F.relu": (nn.ReLU, F.relu, True, ()),
    "torch.relu": (nn.ReLU, torch.relu, True, ()),
    "clamp": (nn.ReLU, lambda h: h.clamp(min=0), True, ()),
    "F.gelu": (nn.GELU, F.gelu, False, ("GELU", "gelu")),
    "swish": (nn.SiLU, lambda h: h * torch.sigmoid(h), False, ("SiLU", "sigmoid")),
}
WIDTHS = (2, 7, 6, 3)


class ModuleNet(nn.Module):
    def __init__(self, make):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(WIDTHS[:-1], WIDTHS[1:]))
        self.acts = nn.ModuleList(make() for _ in WIDTHS[2:])

    def forward(self, x):
        for linear, act in zip(self.linears, self.acts):
            x = act(linear(x))
        return self.linears[-1](x)


class FunctionNet(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(WIDTHS[:-1], WIDTHS[1:]))
        self.function = function

    def forward(self, x):
        for linear in self.linears[:-1]:
            x = self.function(linear(x))
        return self.linears[-1](x)


def _pair(name, seed=0):
    make, function, _, _ = UNITS[name]
    torch.manual_seed(seed)
    modular = ModuleNet(make)
    with torch.no_grad():
        for linear in modular.linears:
            linear.weight.mul_(2.0)
    functional = FunctionNet(function)
    functional.load_state_dict(modular.state_dict())
    return modular, functional


def _mlp_codes(net, x):
    """Per hidden layer, the (n, units) signs of the pre-activations, by a manual forward."""
    codes, h = [], x
    with torch.no_grad():
        for linear in net.linears[:-1]:
            pre = linear(h)
            codes.append(pre > 0)
            h = net.function(pre)
    return codes


def _distinct(code):
    return len({tuple(row) for row in code.int().tolist()})


def _refusals(call, units):
    """Both networks refused, the message naming the unit."""
    for unit in units:
        with pytest.raises(InvalidInputError, match=unit):
            call(unit)


@pytest.mark.parametrize("name", list(UNITS))
def test_every_site_reading_measure_agrees_on_module_and_functional_activations(name):
    modular, functional = _pair(name)
    pl, units = UNITS[name][2], UNITS[name][3]
    nets = {"module": modular, "function": functional}
    x = torch.rand(300, 2) * 6 - 3
    codes = _mlp_codes(functional, x)

    # activation_patterns: rows and counts equal, and equal to the brute-force sets
    pats = {k: activation_patterns(net, x, batch_size=128) for k, net in nets.items()}
    for res in pats.values():
        assert [row.units for row in res.layers] == [7, 6]
        assert [row.n_patterns for row in res.layers] == [_distinct(c) for c in codes]
        assert res.n_patterns == _distinct(torch.cat(codes, 1)) > 10
        assert [row.piecewise_linear for row in res.layers] == [pl, pl]
    assert [r.name for r in pats["module"].layers] == ["acts.0", "acts.1"]

    # sampled transitions on a grid (no refinement) equal the changes between grid points
    traj = line(x[0], x[1], 2)
    grid = torch.linspace(0.0, 1.0, 257, dtype=torch.float64)
    path = _mlp_codes(functional, traj.at(grid).float())
    brute = [int((c[1:] != c[:-1]).sum()) for c in path]
    for net in nets.values():
        res = transitions(net, x[0], x[1], method="sampled", n_initial=257, max_evaluations=257)
        assert list(res.per_layer) == brute and sum(brute) > 0
        assert res.n_patterns == _distinct(torch.cat(path, 1))

    lengths = [trajectory_length(net, line(x[0], x[1], 9)) for net in nets.values()]
    assert len(lengths[0].lengths) == 4  # input, two activation sites, output
    # x * sigmoid(x) and SiLU differ by float32 round-off
    assert lengths[0].lengths == pytest.approx(lengths[1].lengths, rel=1e-5)

    refined = [transitions(net, x[0], x[1], method="sampled") for net in nets.values()]
    assert refined[0].per_layer == refined[1].per_layer
    assert refined[0].n_patterns == refined[1].n_patterns
    density = [region_density(net, x[:6], n_directions=2, method="sampled", generator=0)
               for net in nets.values()]
    assert [(r.units, r.transitions_per_length) for r in density[0].layers] == [
        (r.units, r.transitions_per_length) for r in density[1].layers]
    assert density[0].density == density[1].density > 0
    plane = tuple(x[:3])
    grids = [regions(net, plane, method="grid", resolution=48) for net in nets.values()]
    assert grids[0].n_regions == grids[1].n_regions > 1
    y = torch.randint(0, 3, (len(x),))
    scapes = [loss_landscape(net, (x[:40], y[:40]), dims=1, resolution=5, count_regions=True,
                             generator=1) for net in nets.values()]
    np.testing.assert_array_equal(scapes[0].region_changes, scapes[1].region_changes)
    np.testing.assert_array_equal(scapes[0].pattern_distance, scapes[1].pattern_distance)

    if pl:
        exact = [transitions(net, x[0], x[1]) for net in nets.values()]
        assert exact[0].per_layer == exact[1].per_layer == refined[0].per_layer
        assert [r.name for r in exact[1].layers] == [r.name for r in refined[1].layers]
        exact_regions = [regions(net, plane) for net in nets.values()]
        assert exact_regions[0].n_regions == exact_regions[1].n_regions >= grids[0].n_regions
        assert naswot(modular, x[:16]) == naswot(functional, x[:16])
        assert te_nas_regions(modular, x[:3]) == te_nas_regions(functional, x[:3])
        moved = [weight_transitions(net, x[:20], layer="linears.0",
                                    direction={"weight": torch.ones(7, 2)})
                 for net in nets.values()]
        assert moved[0].n_changes == moved[1].n_changes > 0
        np.testing.assert_array_equal(moved[0].per_sample, moved[1].per_sample)
    else:
        which = dict(zip(units, nets.values()))
        _refusals(lambda unit: transitions(which[unit], x[0], x[1]), units)
        _refusals(lambda unit: regions(which[unit], plane), units)
        for net in nets.values():
            with pytest.raises(InvalidInputError, match="piecewise-linear"):
                naswot(net, x[:16])


# ------------------------------------------------------------------ a CIFAR-style ResNet


class Block(nn.Module):
    def __init__(self, channels, act=None):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        if act is not None:
            self.relu1, self.relu2 = act(), act()

    def forward(self, x):
        relu1, relu2 = getattr(self, "relu1", F.relu), getattr(self, "relu2", F.relu)
        out = relu1(self.bn1(self.conv1(x)))
        return relu2(self.bn2(self.conv2(out)) + x)


class ResNet(nn.Module):
    """conv-bn-relu stem, two residual blocks, global average pooling, a linear head; F.relu
    in every forward (``act=None``) or ReLU modules."""

    def __init__(self, channels=4, classes=3, act=None):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(Block(channels, act), Block(channels, act))
        self.fc = nn.Linear(channels, classes)
        if act is not None:
            self.relu = act()

    def forward(self, x):
        out = getattr(self, "relu", F.relu)(self.bn(self.conv(x)))
        out = self.blocks(out)
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))


def _resnets():
    torch.manual_seed(0)
    functional = ResNet()
    with torch.no_grad():  # running statistics as after training, not the identity
        for bn in (m for m in functional.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
    modular = ResNet(act=nn.ReLU)
    modular.load_state_dict(functional.state_dict())
    return functional.eval(), modular.eval()


def _resnet_codes(net, x):
    """The signs of the five pre-activations, by a manual forward (eval-mode batchnorm by
    its formula)."""
    def bn(m, h):
        scale = m.weight / torch.sqrt(m.running_var + m.eps)
        return (h - m.running_mean[:, None, None]) * scale[:, None, None] + m.bias[:, None, None]

    codes = []

    def relu(pre):
        codes.append((pre > 0).flatten(1))
        return pre.clamp(min=0)

    with torch.no_grad():
        out = relu(bn(net.bn, net.conv(x)))
        for block in net.blocks:
            mid = relu(bn(block.bn1, block.conv1(out)))
            out = relu(bn(block.bn2, block.conv2(mid)) + out)
    return codes


def test_cifar_style_resnet_with_functional_relu_equals_brute_force():
    functional, modular = _resnets()
    x = torch.randn(64, 3, 8, 8) * 0.3
    codes = _resnet_codes(functional, x)
    res = activation_patterns(functional, x, batch_size=24)
    assert [row.name for row in res.layers] == ["relu", "relu_1", "relu_2", "relu_3", "relu_4"]
    assert [row.units for row in res.layers] == [256] * 5
    assert [row.n_patterns for row in res.layers] == [_distinct(c) for c in codes]
    assert res.n_patterns == _distinct(torch.cat(codes, 1)) > 1
    by_modules = activation_patterns(modular, x)
    assert [r.n_patterns for r in by_modules.layers] == [r.n_patterns for r in res.layers]

    grid = torch.linspace(0.0, 1.0, 129, dtype=torch.float64)
    path = _resnet_codes(functional, line(x[0], x[1], 2).at(grid).float())
    brute = [int((c[1:] != c[:-1]).sum()) for c in path]
    sampled = transitions(functional, x[0], x[1], method="sampled", n_initial=129,
                          max_evaluations=129)
    assert list(sampled.per_layer) == brute and sum(brute) > 10
    assert sampled.n_patterns == _distinct(torch.cat(path, 1))
    assert transitions(modular, x[0], x[1], method="sampled", n_initial=129,
                       max_evaluations=129).per_layer == sampled.per_layer
    exact = transitions(functional, x[0], x[1])
    assert [r.name for r in exact.layers] == [r.name for r in res.layers]
    # a block named by the user is still read (its functional activations are then not)
    blocks = trajectory_length(functional, line(x[0], x[1], 5), layers=["blocks.0"])
    assert [r.name for r in blocks.layers] == ["input", "blocks.0", "output"]
    assert all(e >= s for e, s in zip(exact.per_layer, sampled.per_layer))
    assert transitions(modular, x[0], x[1]).per_layer == exact.per_layer


def test_exact_methods_refuse_early_with_their_estimate():
    torch.manual_seed(0)
    wide = ResNet(channels=16, classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(BudgetExceededError, match=r"max_seconds=0.01.*estimated .* s for the "
                       r"path .*sampled"):
        transitions(wide, x[0], x[1], max_seconds=0.01)
    with pytest.raises(BudgetExceededError, match=r"max_seconds=0.01.*estimated .* s for the "
                       r"4 segments .*sampled"):
        region_density(wide, x, n_directions=2, max_seconds=0.01, generator=0)


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 4)

    def forward(self, x):
        h = self.linear(x)
        return F.relu(h) if bool(h.sum() > -1e9) else h  # control flow on a value


def test_a_network_whose_functional_activations_cannot_be_found_is_refused():
    with pytest.raises(InvalidInputError, match="could not be traced"):
        activation_patterns(Untraceable(), torch.randn(10, 2))


def test_the_users_model_is_unchanged_and_a_linear_network_has_one_pattern():
    _, functional = _pair("F.relu")
    before = {k: v.clone() for k, v in functional.state_dict().items()}
    activation_patterns(functional, torch.randn(20, 2))
    assert all(torch.equal(before[k], v) for k, v in functional.state_dict().items())
    assert not functional._forward_hooks and isinstance(functional, FunctionNet)
    linear = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    res = activation_patterns(linear, torch.randn(20, 2))
    assert res.n_patterns == 1 and res.layers == ()
