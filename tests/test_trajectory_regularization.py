"""TrajectoryRegularization (Raghu et al. section 3.3): penalty by hand, gradients, train/eval,
training reduces the trajectory growth, hooks and errors."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.nn._trajectory_regularization import TrajectoryRegularization, trajectory_penalty


def _net(seed=0, weight=0.01, init_scale=1.0):
    torch.manual_seed(seed)
    reg = TrajectoryRegularization(weight=weight, init_scale=init_scale)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), reg, nn.Linear(5, 2)).double()
    return net, reg


def _hand_length(rows):
    rows = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
    return sum(math.sqrt(sum((a - b) ** 2 for a, b in zip(rows[i + 1], rows[i])))
               for i in range(len(rows) - 1))


def test_penalty_equals_hand_computed_ratio():
    net, reg = _net(weight=0.01, init_scale=1.7)
    handle = TrajectoryRegularization.attach(net)
    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 2.0, 0.0], [0.5, 2.0, -1.0]],
                     dtype=torch.float64)
    y = net(x)
    with torch.no_grad():
        h = torch.tanh(net[0](x)).numpy()
    orig = 1.0 + 2.0 + math.sqrt(0.25 + 1.0)  # polyline through the four inputs
    assert _hand_length(x.numpy()) == pytest.approx(orig)
    ratio = _hand_length(h) / orig
    assert reg.ratio == pytest.approx(ratio, rel=1e-12)
    lam = float(reg.scale.detach())  # 1.7 rounded to float32 at creation
    assert lam == pytest.approx(1.7, rel=1e-7)
    assert float(reg.penalty.detach()) == pytest.approx(0.01 * lam * ratio, rel=1e-12)
    assert float(trajectory_penalty(net).detach()) == pytest.approx(0.01 * lam * ratio,
                                                                    rel=1e-12)
    # outgoing activations scaled by lambda
    expected = net[3](lam * torch.tanh(net[0](x)))
    torch.testing.assert_close(y, expected)
    handle.remove()


def test_gradient_reaches_lambda_and_earlier_layers():
    net, reg = _net(weight=1.0)
    TrajectoryRegularization.attach(net)
    net(torch.randn(6, 3, dtype=torch.float64))
    trajectory_penalty(net).backward()
    # d penalty / d lambda = weight * ratio (lambda = 1 > 0)
    assert float(reg.scale.grad) == pytest.approx(reg.ratio, rel=1e-12)
    assert net[0].weight.grad is not None and float(net[0].weight.grad.abs().sum()) > 0
    assert net[3].weight.grad is None  # after the layer: untouched by the penalty


def test_train_and_eval_behave_the_same():
    net, reg = _net()
    TrajectoryRegularization.attach(net)
    x = torch.randn(7, 3, dtype=torch.float64)
    y_train, p_train = net.train()(x), float(reg.penalty.detach())
    y_eval, p_eval = net.eval()(x), float(reg.penalty.detach())
    torch.testing.assert_close(y_train, y_eval)
    assert p_train == p_eval


def test_sgd_on_penalty_reduces_the_ratio():
    torch.manual_seed(3)
    reg = TrajectoryRegularization(weight=1.0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), reg,
                        nn.Linear(16, 1)).double()
    TrajectoryRegularization.attach(net)
    x = torch.randn(32, 4, dtype=torch.float64)
    target = torch.sin(x.sum(1, keepdim=True))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    ratios = []
    for _ in range(30):
        opt.zero_grad()
        loss = (net(x) - target).pow(2).mean() + trajectory_penalty(net)
        ratios.append(reg.ratio)
        loss.backward()
        opt.step()
    assert ratios[-1] < 0.8 * ratios[0]


def test_small_batches_and_zero_reference_give_zero_penalty():
    net, reg = _net()
    TrajectoryRegularization.attach(net)
    net(torch.randn(1, 3, dtype=torch.float64))
    assert float(reg.penalty.detach()) == 0.0 and math.isnan(reg.ratio)
    net(torch.ones(4, 3, dtype=torch.float64))  # identical inputs: orig length 0
    assert float(reg.penalty.detach()) == 0.0


def test_hook_removed_by_handle():
    net, reg = _net()
    handle = TrajectoryRegularization.attach(net)
    assert len(net._forward_pre_hooks) == 1
    handle.remove()
    assert len(net._forward_pre_hooks) == 0


def test_errors():
    net, reg = _net()
    with pytest.raises(NNGaugeError, match="attach"):  # no reference recorded
        net(torch.randn(4, 3, dtype=torch.float64))
    with pytest.raises(NNGaugeError, match="expected"):
        TrajectoryRegularization.attach(nn.Linear(2, 2))
    with pytest.raises(NNGaugeError, match="weight >= 0"):
        TrajectoryRegularization(weight=-1.0)
    with pytest.raises(NNGaugeError, match="finite"):
        TrajectoryRegularization(init_scale=float("nan"))
    TrajectoryRegularization.attach(net)
    net(torch.randn(4, 3, dtype=torch.float64))
    with pytest.raises(NNGaugeError, match="Fix"):  # batch size changed behind the hook
        reg(torch.randn(5, 5, dtype=torch.float64))


def test_replaces_batchnorm_in_a_conv_net():
    """Figure 11 setting in miniature: the layer stands where batchnorm would in a conv net;
    image representations are flattened per sample for the length."""
    torch.manual_seed(6)
    reg = TrajectoryRegularization()
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), reg, nn.ReLU(), nn.Flatten(),
                        nn.Linear(3 * 5 * 5, 2)).double()
    TrajectoryRegularization.attach(net)
    x = torch.randn(6, 1, 5, 5, dtype=torch.float64)
    net(x)
    with torch.no_grad():
        h = net[0](x)
    expected = _hand_length(h.numpy()) / _hand_length(x.numpy())
    assert reg.ratio == pytest.approx(expected, rel=1e-12)
    trajectory_penalty(net).backward()
    assert net[0].weight.grad is not None and reg.scale.grad is not None
