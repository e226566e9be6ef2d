"""skim (shrinkage section 4.2): exact on affine blocks, Taylor accuracy, copies, errors."""

import pytest
import torch
from torch import nn

from nngauge import InvalidInputError
from nngauge.measures import skim

X = torch.randn(64, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def deep_tanh(gain=1.0):
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        linear = nn.Linear(8, 8)
        nn.init.normal_(linear.weight, std=gain / 8 ** 0.5)
        layers += [linear, nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(8, 2)).double()


def test_affine_block_is_replaced_exactly():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    result = skim(model, X, layers=("0", "1"))
    assert result.absolute_deviation < 1e-12
    assert result.parameters_removed == 72
    assert len(result.model) == 3 and len(model) == 4  # the original is untouched


def test_linearization_is_the_first_order_taylor_expansion():
    model = deep_tanh()
    result = skim(model, X, layers=("4", "7"))
    block = model[4:8]
    hidden = model[:4](X).detach()
    mean = hidden.mean(0, keepdim=True)
    jac = torch.autograd.functional.jacobian(block, mean).reshape(8, 8)
    expected = block(mean) + (hidden - mean) @ jac.T
    got = result.model[4](hidden)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-10, atol=1e-12)


def test_deviation_is_small_when_the_inputs_are_concentrated():
    near = skim(deep_tanh(), 0.01 * X, layers=("4", "7"))
    far = skim(deep_tanh(), 10 * X, layers=("4", "7"))
    assert near.deviation < far.deviation
    assert near.min_input_correlation > far.min_input_correlation


def test_bad_blocks():
    with pytest.raises(InvalidInputError, match="named_modules"):
        skim(deep_tanh(), X, layers=("4", "99"))
    with pytest.raises(InvalidInputError, match="start before end"):
        skim(deep_tanh(), X, layers=("7", "4"))
    bn = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).double()
    with pytest.raises(InvalidInputError, match="eval"):
        skim(bn, X, layers=("0", "1"))
    bn.eval()
    assert skim(bn, X, layers=("0", "1")).absolute_deviation < 1e-10


def test_nngauge_mlp_skims_through_its_sequential_form():
    """Shrinkage section 4.2: in a deep LayerNorm-ReLU MLP correlations shrink towards 1 with
    depth, so a late block is closer to linear on the data than an early block of equal size."""
    from nngauge.nn import mlp

    net = mlp(8, 256, 30, 4, activation="relu", norm="layer", init="gaussian",
              generator=torch.Generator().manual_seed(0)).double()
    seq = net.to_sequential()
    torch.testing.assert_close(seq(X), net(X), rtol=0, atol=0)
    early = skim(seq, X, layers=("3", "20"))  # hidden layers 1-6 (linear, norm, act each)
    late = skim(seq, X, layers=("60", "77"))  # hidden layers 20-25
    assert late.min_input_correlation > early.min_input_correlation
    assert late.deviation < early.deviation
    with pytest.raises(InvalidInputError, match="to_sequential"):
        skim(net, X, layers=("layers.1.linear", "layers.3.act"))
    with pytest.raises(InvalidInputError, match="skip=None"):
        mlp(8, 16, 5, 2, skip=0.5).to_sequential()


def test_skimmed_network_trains_like_the_original():
    """The skimmed copy can be trained (shrinkage section 4.2 trains it beside the full
    network): its parameters require grad where the original's do, frozen ones stay frozen,
    and the original's flags are untouched."""
    model = deep_tanh()
    model[0].weight.requires_grad_(False)
    result = skim(model, X, layers=("4", "7"))
    flags = [p.requires_grad for p in result.model.parameters()]
    assert flags == [False] + [True] * (len(flags) - 1)
    assert [p.requires_grad for p in model.parameters()][:2] == [False, True]
    result.model(X).sum().backward()
    assert result.model[4].linear.weight.grad is not None
    assert result.model[-1].weight.grad is not None


def test_blocks_called_with_default_arguments_are_skimmed_others_refused():
    """A ViT that calls its blocks as timm's does, block(x, attn_mask, is_causal), is skimmed as
    the same ViT calling nn.Sequential's forward (the arguments are their defaults); a call with
    another value is refused, naming the block and the argument."""
    from nngauge.zoo._vit import MaskableVisionTransformer, VisionTransformer

    torch.manual_seed(0)
    maskable = MaskableVisionTransformer(16, 4, 3, 16, 2, 2, 4.0, 10, 0.0).eval()
    plain = VisionTransformer(16, 4, 3, 16, 2, 2, 4.0, 10, 0.0).eval()
    plain.load_state_dict(maskable.state_dict())
    x = torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    a = skim(maskable, x, layers=("blocks.0", "blocks.1"))
    b = skim(plain, x, layers=("blocks.0", "blocks.1"))
    assert a.deviation == pytest.approx(b.deviation, rel=1e-6) and a.deviation > 0
    torch.testing.assert_close(a.model(x), b.model(x))

    class Causal(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = maskable

        def forward(self, x):
            return self.vit(x, is_causal=True)

    with pytest.raises(InvalidInputError, match=r"vit\.blocks\.0 called with \['is_causal'\]"):
        skim(Causal(), x, layers=("vit.blocks.0", "vit.blocks.1"))
