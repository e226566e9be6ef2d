"""fold_batchnorm: same eval-mode function, no batchnorm left, user's model untouched."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.generalization._fold import fold_batchnorm
from nngauge.nn import mlp
from nngauge.zoo import ZOO, sample_inputs


def _randomize_norms(model, gen):
    """Give every batchnorm non-trivial running statistics and affine parameters."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen, dtype=m.running_mean.dtype))
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen, dtype=m.running_var.dtype) + 0.2)
                if m.weight is not None:
                    m.weight.copy_(torch.randn(m.weight.shape, generator=gen, dtype=m.weight.dtype))
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen, dtype=m.bias.dtype))
    return model.eval()


def _no_batchnorm(model):
    return not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_linear_batchnorm(bias, affine):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7, bias=bias), nn.BatchNorm1d(7, affine=affine), nn.ReLU(),
                        nn.Linear(7, 3), nn.BatchNorm1d(3, affine=affine)).double()
    _randomize_norms(net, gen)
    folded = fold_batchnorm(net)
    assert _no_batchnorm(folded)
    x = torch.randn(20, 5, generator=gen, dtype=torch.float64)
    assert torch.allclose(folded(x), net(x), atol=1e-6, rtol=0)


def test_conv_batchnorm_nested():
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    block = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, stride=2), nn.BatchNorm2d(4), nn.ReLU())
    net = nn.Sequential(block, nn.Conv2d(4, 3, 3, groups=1, bias=False), nn.BatchNorm2d(3),
                        nn.Flatten(), nn.Linear(3 * 2 * 2, 2)).double()
    _randomize_norms(net, gen)
    folded = fold_batchnorm(net)
    assert _no_batchnorm(folded)
    x = torch.randn(6, 2, 8, 8, generator=gen, dtype=torch.float64)
    assert torch.allclose(folded(x), net(x), atol=1e-6, rtol=0)


def test_nngauge_mlp_with_batchnorm():
    gen = torch.Generator().manual_seed(2)
    net = mlp(6, 10, 3, 4, norm="batch", generator=gen, dtype=torch.float64)
    net.train()
    net(torch.randn(64, 6, generator=gen, dtype=torch.float64) * 3 + 1)  # moves running stats
    net.eval()
    folded = fold_batchnorm(net)
    assert _no_batchnorm(folded)
    x = torch.randn(9, 6, generator=gen, dtype=torch.float64)
    assert torch.allclose(folded(x), net(x), atol=1e-6, rtol=0)


def test_user_model_untouched():
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).double()
    _randomize_norms(net, torch.Generator().manual_seed(3)).train()
    before = copy.deepcopy(net.state_dict())
    folded = fold_batchnorm(net)
    assert net.training and isinstance(net[1], nn.BatchNorm1d)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert folded is not net and not folded.training


def test_errors():
    lone = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 2))
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        fold_batchnorm(lone)
    no_stats = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3, track_running_stats=False))
    with pytest.raises(NNGaugeError, match="running statistics"):
        fold_batchnorm(no_stats)
    with pytest.raises(NNGaugeError, match="skip"):
        fold_batchnorm(mlp(3, 4, 3, 2, norm="batch", skip=1.0))
    with pytest.raises(NNGaugeError, match="Module"):
        fold_batchnorm("not a model")


def _relative_error(a, b):
    return float((a - b).abs().max().detach()) / float(a.abs().max().detach())


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_folds_exactly_or_refuses(name):
    """Every zoo network either folds (no batchnorm left, the same eval-mode function in
    float64, parameters new tensors) or is refused with an NNGaugeError."""
    entry = ZOO[name]
    net = entry.build(generator=0).double()
    _randomize_norms(net, torch.Generator().manual_seed(0))
    try:
        folded = fold_batchnorm(net, input_shape=entry.input_shape)
    except NNGaugeError:
        assert name not in ("resnet_small", "resnet_small_timm", "dropout_mlp", "groupnorm_cnn")
        return
    assert _no_batchnorm(folded) and not folded.training
    x = sample_inputs(entry, 6).double()
    expected, got = net(x), folded(x)
    assert _relative_error(expected, got) <= 1e-12
    originals = {p.data_ptr() for p in net.parameters()}
    assert not originals & {p.data_ptr() for p in folded.parameters()}


def test_batchnorm_act_is_refused_not_dropped():
    """timm's BatchNormAct2d also applies Hardswish: folding it away would change the function
    (relative error 2.7e3 before this refusal existed)."""
    net = ZOO["mobilenet_block"].build(generator=0)
    with pytest.raises(NNGaugeError, match=r"bn1 \(BatchNormAct2d\): a BatchNorm2d subclass "
                                           r"whose forward could not be traced.*activation"):
        fold_batchnorm(net, input_shape=(3, 16, 16))


def test_resnet_block_names_kept():
    net = ZOO["resnet_small"].build(generator=0)
    _randomize_norms(net, torch.Generator().manual_seed(1))
    folded = fold_batchnorm(net, input_shape=(3, 32, 32))
    names = dict(folded.named_modules())
    assert {"conv1", "layer1.0.conv2", "layer2.0.downsample.0", "fc"} <= set(names)
    assert isinstance(names["layer2.0.downsample.0"], nn.Conv2d)


class _Functional(nn.Module):
    """F.conv2d then F.batch_norm in forward, with parameters and buffers of the module."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 2, 3, 3))
        self.gamma, self.beta = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
        self.register_buffer("mean", torch.randn(3))
        self.register_buffer("var", torch.rand(3) + 0.5)
        self.head = nn.Linear(3 * 4 * 4, 2)

    def forward(self, x):
        h = F.conv2d(x, self.weight, None, 1, 1)
        h = F.batch_norm(h, self.mean, self.var, self.gamma, self.beta, training=False)
        return self.head(torch.flatten(F.relu(h), 1))


def test_functional_conv_and_batch_norm():
    torch.manual_seed(0)
    net = _Functional().double()
    folded = fold_batchnorm(net, input_shape=(2, 4, 4))
    assert "batch_norm" not in folded.code
    x = torch.randn(5, 2, 4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert _relative_error(net(x), folded(x)) <= 1e-12


def test_mlp_with_skips_after_the_norm():
    net = mlp(4, 6, 3, 3, norm="batch", skip=1.0, skip_start="norm",
              generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    net(torch.randn(64, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 1)
    net.eval()
    folded = fold_batchnorm(net)
    assert _no_batchnorm(folded)
    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert _relative_error(net(x), folded(x)) <= 1e-12


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.bn = nn.Linear(3, 3), nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(self.linear(x)) + self.linear(2 * x)


class _Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.bn = nn.Linear(3, 3), nn.BatchNorm1d(3)

    def forward(self, x):
        h = self.linear(x)
        return self.bn(h) + h


@pytest.mark.parametrize("net, match", [
    (nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.BatchNorm1d(3)),
     r"2 \(BatchNorm1d\): does not follow a Linear or Conv layer \(its input comes from "
     r"1 \(ReLU\)"),
    (_Twice(), r"bn \(BatchNorm1d\): follows linear \(Linear\), a module called 2 times"),
    (_Shared(), r"bn \(BatchNorm1d\): follows linear \(Linear\), whose output is also read by add"),
])
def test_refusals_name_the_module(net, match):
    with pytest.raises(NNGaugeError, match=match):
        fold_batchnorm(net)


def test_conv_network_needs_a_shape_the_search_cannot_find():
    net = nn.Sequential(nn.Conv2d(1, 1, 3), nn.BatchNorm2d(1), nn.Flatten(), nn.Linear(10, 2))
    with pytest.raises(NNGaugeError, match="input_shape"):
        fold_batchnorm(net)
