"""nngauge.nn.mlp: the NLC paper's appendix C networks."""

import math

import pytest
import torch

from nngauge.activations import get
from nngauge.errors import InvalidInputError
from nngauge.nn._mlp import mlp, orthogonal_submatrix


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_depth_counts_weight_layers():
    net = mlp(5, 16, 2, 3, generator=gen())
    acts = [name for name, _ in net.named_modules() if name.endswith(".act")]
    linears = [name for name, _ in net.named_modules() if name.endswith(".linear")]
    assert acts == ["layers.0.act"] and len(linears) == 2


@pytest.mark.parametrize("rows,cols", [(30, 10), (10, 30), (20, 20)])
def test_orthogonal_init_has_the_papers_scaling(rows, cols):
    w = orthogonal_submatrix(rows, cols, gen(), torch.float64)
    factor = max(1.0, math.sqrt(rows / cols))
    small = min(rows, cols)
    gram = w.T @ w if rows >= cols else w @ w.T
    torch.testing.assert_close(gram, factor**2 * torch.eye(small, dtype=torch.float64))


def test_gaussian_init_variance_and_bias_correction():
    net = mlp(400, 400, 3, 400, init="gaussian", bias_std=math.sqrt(0.05), generator=gen(),
              dtype=torch.float64)
    w = net.layers[1].linear.weight
    assert net.config.sigma_w == pytest.approx(math.sqrt(0.95))
    assert (w.var() * 400).item() == pytest.approx(0.95, rel=0.02)
    assert net.layers[1].linear.bias.var().item() == pytest.approx(0.05, rel=0.25)


def test_joint_scale_multiplies_weights_and_biases():
    base = mlp(6, 8, 3, 2, bias_std=0.1, generator=gen(), dtype=torch.float64)
    scaled = mlp(6, 8, 3, 2, bias_std=0.1, scale=1.1, generator=gen(), dtype=torch.float64)
    for p, q in zip(base.parameters(), scaled.parameters()):
        torch.testing.assert_close(q, 1.1 * p)


@pytest.mark.parametrize("skip_start", ["linear", "norm"])
def test_skip_connections_match_a_hand_written_forward(skip_start):
    net = mlp(4, 6, 5, 3, activation="tanh", norm="layer", skip=0.5, skip_start=skip_start,
              generator=gen(), dtype=torch.float64)
    x = torch.randn(7, 4, generator=gen(1), dtype=torch.float64)
    L = net.layers
    act = L[0].act
    ln = L[0].norm

    def start(z):
        return z if skip_start == "linear" else ln(z)

    z1 = L[0].linear(x)
    s1 = start(z1)
    h1 = act(ln(z1))
    h2 = act(ln(L[1].linear(h1)))
    z3 = L[2].linear(h2) + 0.5 * s1
    s3 = start(z3)
    h3 = act(ln(z3))
    h4 = act(ln(L[3].linear(h3)))
    out = L[4].linear(h4) + 0.5 * s3 @ net.skip_projection.T
    torch.testing.assert_close(net(x), out)


def test_activation_specs_and_objects():
    net = mlp(3, 4, 3, 2, activation="leaky_relu(negative_slope=0.2)")
    assert net.config.activation == "leaky_relu(negative_slope=0.2)"
    t = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(net.layers[0].act(t), torch.tensor([-0.4, 3.0]))
    spec = "normalize(modify(tanh, dilation=1.2))"
    assert mlp(3, 4, 3, 2, activation=spec).config.activation == spec
    assert mlp(3, 4, 3, 2, activation=get("relu")).config.activation == "relu"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"depth": 4, "skip": 1.0}, "odd depth"),
        ({"depth": 0}, "depth an integer >= 1"),
        ({"norm": "group"}, "norm None or in"),
        ({"init": "xavier"}, "init in"),
        ({"bias_std": -1.0}, "bias_std a finite number >= 0"),
        ({"bias_std": 1.0}, "bias_std < 1 when sigma_w"),
        ({"scale": 0.0}, "scale a finite number > 0"),
        ({"sigma_w": float("nan")}, "sigma_w None or a finite number > 0"),
        ({"skip_start": "act"}, "skip_start in"),
        ({"activation": 3}, "activation an activation name"),
        ({"dtype": torch.int64}, "floating-point torch.dtype"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"d_in": 3, "width": 4, "depth": 3, "d_out": 2} | kwargs
    with pytest.raises(InvalidInputError, match=match):
        mlp(args.pop("d_in"), args.pop("width"), args.pop("depth"), args.pop("d_out"), **args)


def test_numpy_integer_sizes_give_python_ints_in_the_config():
    import numpy as np

    net = mlp(np.int64(3), np.int64(4), np.int64(3), np.int64(2))
    assert all(type(getattr(net.config, k)) is int for k in ("d_in", "width", "depth", "d_out"))
    assert net(torch.randn(2, 3)).shape == (2, 2)


def test_dropout_follows_every_hidden_activation():
    """dropout=p puts layers.<i>.drop (nn.Dropout(p)) after every hidden activation, none after
    the output layer; the weights equal those of the network without dropout, eval outputs
    too; in training mode about a fraction p of the hidden units are zeroed."""
    net = mlp(10, 400, 3, 2, dropout=0.25, generator=torch.Generator().manual_seed(0))
    plain = mlp(10, 400, 3, 2, generator=torch.Generator().manual_seed(0))
    assert [hasattr(block, "drop") for block in net.layers] == [True, True, False]
    assert net.layers[0].drop.p == 0.25 and net.config.dropout == 0.25
    assert plain.config.dropout == 0.0 and not hasattr(plain.layers[0], "drop")
    x = torch.randn(64, 10)
    torch.testing.assert_close(net.eval()(x), plain.eval()(x))
    net.train()
    hidden = net.layers[0].drop(torch.ones(64, 400))
    assert float((hidden == 0).double().mean()) == pytest.approx(0.25, abs=0.01)
    assert float(hidden.max()) == pytest.approx(1 / 0.75)
    assert [type(m).__name__ for m in net.to_sequential()][:4] == ["Linear", "ActivationModule",
                                                                   "Dropout", "Linear"]
