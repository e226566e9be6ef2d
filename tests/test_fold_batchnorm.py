"""fold_batchnorm: same eval-mode function, no batchnorm left, user's model untouched."""

import copy

import pytest
import torch
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures._fold import fold_batchnorm
from nngauge.nn import mlp


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
