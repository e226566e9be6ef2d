"""nngauge.nn.cnn and sample_cnn (the predictor benchmark's family of small CNNs on digits
images), and studies with ``architectures.family = "cnn"``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from nngauge import correlations, nlc, proxies
from nngauge.errors import InvalidInputError, UnknownNameError
from nngauge.nn import cnn, sample_cnn
from nngauge.nn._cnn import describe_cnn, max_poolings
from nngauge.studies import parse_spec, run_study
from nngauge.studies._summarize import summarize

MLP_SPEC = {"seed": 3, "data": {"source": "digits"},
            "architectures": {"sample": 4, "overrides": {"depth": 3},
                              "explicit": [{"width": 8, "depth": 2}]},
            "measures": {"names": ["nlc", "n_params"]},
            "training": {"lrs": [0.1], "max_epochs": 1}}
MLP_SPEC_ID = "ed7b327ee9675454"
"""MLP_SPEC's study_id computed before study specs had architecture families."""


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def digits():
    """The first 200 standardized digits images, flat (200, 64), and their labels."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor((x - x.mean(0)) / (x.std(0) + 1e-8), dtype=torch.float32)
    return x[:200], torch.tensor(y[:200])


@pytest.fixture(scope="module")
def sampled():
    """A sampled CNN with every block type present: batch norm, skips and two poolings."""
    return sample_cnn(_gen(8), 64, 10)


def test_flat_and_shaped_inputs_give_the_same_logits():
    """A flat (n, C*H*W) batch is reshaped to image_shape: the same logits as the shaped batch,
    for a non-square multi-channel image too."""
    net = cnn(2 * 4 * 6, 8, 3, 5, image_shape=(2, 4, 6), pool_after=(0, 1), norm="batch",
              skip=1.0, generator=_gen())
    x = torch.randn(7, 2, 4, 6)
    out = net(x.reshape(7, -1))
    assert out.shape == (7, 5)
    assert torch.equal(out, net(x))


def test_inputs_of_another_size_are_refused():
    """Inputs neither (n, d_in) nor (n, *image_shape) raise an error naming both forms."""
    with pytest.raises(InvalidInputError, match=r"\(batch, 64\) or \(batch, 1, 8, 8\)"):
        cnn(64, 8, 2, 10)(torch.randn(3, 63))


def test_structure_follows_the_config():
    """depth conv blocks (kernel 3, padding 1) of width channels, BatchNorm2d without affine,
    pooling modules only after pool_after's blocks, and a linear read-out."""
    net = cnn(64, 16, 4, 10, norm="batch", pool_after=(3, 1), generator=_gen())
    convs = [b.conv for b in net.blocks]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == \
        [(1, 16, (3, 3), (1, 1))] + [(16, 16, (3, 3), (1, 1))] * 3
    assert all(isinstance(b.norm, nn.BatchNorm2d) and not b.norm.affine for b in net.blocks)
    assert [hasattr(b, "pool") for b in net.blocks] == [False, True, False, True]
    assert net.config.pool_after == (1, 3)
    assert (net.readout.in_features, net.readout.out_features) == (16, 10)


def test_skip_adds_the_identity_of_each_block_after_the_first():
    """With linear activations and no norm, skip s gives block i >= 1 the map h + s h' where
    h' is the block's input: the network equals the same weights applied by hand."""
    net = cnn(64, 4, 3, 2, activation="identity", skip=0.5, generator=_gen())
    x = torch.randn(5, 1, 8, 8)
    h = net.blocks[0].conv(x)
    for block in net.blocks[1:]:
        h = block.conv(h) + 0.5 * h
    expected = net.readout(h.mean(dim=(-2, -1)))
    assert torch.allclose(net(x), expected, atol=1e-6)


def test_config_round_trip_rebuilds_identical_weights():
    """cnn(**to_dict() without the family) with the same generator seed gives the same config
    and bit-identical weights; to_dict names the family and holds lists (JSON-ready)."""
    net = cnn(64, 8, 3, 10, activation="unit_scale(modify(tanh, dilation=1.2))", norm="batch",
              skip=0.3, pool_after=[2, 0], init="gaussian", bias_std=0.2, scale=1.1,
              generator=_gen(5), dtype=torch.float64)
    d = net.config.to_dict()
    assert d["family"] == "cnn" and d["image_shape"] == [1, 8, 8] and d["pool_after"] == [0, 2]
    rebuilt = cnn(**{k: v for k, v in d.items() if k != "family"}, generator=_gen(5),
                  dtype=torch.float64)
    assert rebuilt.config == net.config
    for (name, a), (_, b) in zip(net.state_dict().items(), rebuilt.state_dict().items()):
        assert torch.equal(a, b), name


def test_initialization_scales():
    """Orthogonal init: a conv's weight read as out x (in*9) has orthonormal rows times
    sigma_w * scale (default sigma_w sqrt(1 - bias_std^2)); biases are zero with bias_std 0."""
    net = cnn(64, 8, 2, 10, bias_std=0.0, scale=1.1, generator=_gen())
    w = net.blocks[1].conv.weight.detach().double().reshape(8, -1)
    assert torch.allclose(w @ w.T, 1.21 * torch.eye(8, dtype=torch.float64), atol=1e-5)
    assert torch.count_nonzero(net.blocks[1].conv.bias) == 0
    noisy = cnn(64, 8, 2, 10, bias_std=0.6, generator=_gen())
    assert noisy.config.sigma_w == pytest.approx(0.8)


def test_pooling_stops_at_one_by_one():
    """An 8x8 image allows 3 poolings (to 1x1) and a fourth is refused, as is a pooling after
    a block that does not exist; three poolings run down to a 1x1 map."""
    assert max_poolings((1, 8, 8)) == 3 and max_poolings((3, 5, 9)) == 2
    net = cnn(64, 8, 4, 10, pool_after=(0, 1, 2), generator=_gen())
    assert net(torch.randn(2, 64)).shape == (2, 10)
    with pytest.raises(InvalidInputError, match="at most 3 poolings"):
        cnn(64, 8, 4, 10, pool_after=(0, 1, 2, 3))
    with pytest.raises(InvalidInputError, match="pool_after indices of blocks 0..1"):
        cnn(64, 8, 2, 10, pool_after=(2,))
    with pytest.raises(InvalidInputError, match="product C\\*H\\*W is d_in"):
        cnn(63, 8, 2, 10)


def test_sampler_is_deterministic_and_within_its_ranges():
    """The same seed gives the same description and weights; 20 draws stay in the documented
    ranges (depth 2..8, width 8/16/32, at most 2 poolings, batch norm forced for
    square activations and skips)."""
    a, da = sample_cnn(_gen(3), 64, 10)
    b, db = sample_cnn(_gen(3), 64, 10)
    assert da == db
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    for seed in range(20):
        _, d = sample_cnn(seed, 64, 10)
        assert 2 <= d.depth <= 8 and d.width in (8, 16, 32) and len(d.pool_after) <= 2
        assert all(i < d.depth for i in d.pool_after) and d.init == "orthogonal"
        if d.skip is not None or d.activation in ("square", "odd_square"):
            assert d.norm == "batch"
        assert d.to_dict()["family"] == "cnn"


def test_overrides_fix_one_choice_and_leave_the_others():
    """An override changes only its choice (all 20 uniforms are always drawn); a fixed norm is
    used as given."""
    _, d = sample_cnn(4, 64, 10)
    _, fixed = sample_cnn(4, 64, 10, width=32 if d.width != 32 else 8)
    assert fixed.width != d.width and (fixed.depth, fixed.activation, fixed.skip) == \
        (d.depth, d.activation, d.skip)
    _, unnormalized = sample_cnn(4, 64, 10, activation="square", norm=None)
    assert unnormalized.norm is None


def test_bad_overrides_are_refused_clearly():
    """Unknown override names list the valid ones; a wrong value says what was expected."""
    with pytest.raises(UnknownNameError, match="skip_start"):
        sample_cnn(0, 64, 10, skip_start="norm")
    with pytest.raises(InvalidInputError, match="override norm None or 'batch'"):
        sample_cnn(0, 64, 10, norm="layer")
    with pytest.raises(InvalidInputError, match="override width an integer >= 1"):
        sample_cnn(0, 64, 10, width=0)
    with pytest.raises(InvalidInputError, match="product C\\*H\\*W is d_in"):
        sample_cnn(0, 50, 10)


def test_describe_names_the_choices(sampled):
    """describe_cnn summarizes a sampled config in one line."""
    model, d = sampled
    text = describe_cnn(model.config.to_dict())
    assert text.startswith(f"cnn depth {d.depth}, width {d.width}")


@pytest.mark.slow
def test_measures_and_proxies_run_on_a_sampled_cnn(sampled, digits):
    """nlc, correlations, synflow and te_nas give finite values on a sampled CNN (batch norm,
    skips, pooling); naswot runs on a ReLU CNN; flops equals the
    hand count of conv and read-out MACs: sum over blocks of H_i W_i (9 c_in c_out) plus
    width * d_out."""
    model, d = sampled
    assert d.norm == "batch" and d.skip is not None and d.pool_after
    x, y = digits
    r = nlc(model, x, generator=_gen())
    assert math.isfinite(r.nlc) and r.nlc > 0 and math.isfinite(r.output_bias)
    assert -1 <= correlations(model, x[:50]).rho_max <= 1
    for name in ("synflow", "te_nas"):
        assert math.isfinite(getattr(proxies, name)(model, (x, y), generator=_gen())), name
    relu = cnn(64, 8, 3, 10, activation="relu", pool_after=(1,), generator=_gen())
    assert math.isfinite(proxies.naswot(relu, (x[:64], y[:64])))
    side, macs, c_in = 8, 0, 1
    for i in range(d.depth):
        macs += side * side * 9 * c_in * d.width
        c_in = d.width
        side //= 2 if i in d.pool_after else 1
    macs += d.width * 10
    assert proxies.flops(model, (x, y)) == macs
    assert proxies.n_params(model) == d.n_parameters


def test_spec_family_and_image_shape_are_validated():
    """architectures.family is mlp or cnn; image_shape needs family cnn and three positive
    integers; a cnn explicit entry takes cnn() keywords (pool_after, not skip_start)."""
    cases = [({"family": "rnn", "sample": 1}, "architectures.family"),
             ({"image_shape": [1, 8, 8], "sample": 1}, 'family = "cnn" beside it'),
             ({"family": "cnn", "image_shape": [8, 8], "sample": 1}, "three positive integers"),
             ({"family": "cnn", "explicit": [{"width": 8, "depth": 2, "skip_start": "norm"}]},
              r"explicit\[0\].skip_start is not known")]
    for arch, message in cases:
        with pytest.raises((InvalidInputError, UnknownNameError), match=message):
            parse_spec({"architectures": arch})
    spec = parse_spec({"architectures": {"family": "cnn", "image_shape": [1, 4, 16],
                                         "explicit": [{"width": 8, "depth": 2,
                                                       "pool_after": [0]}]}})
    assert spec.architectures.image_shape == (1, 4, 16)
    assert spec.to_dict()["architectures"]["family"] == "cnn"


def test_mlp_study_id_is_unchanged():
    """An MLP spec (family left to its default, or named) keeps the id it had before families
    existed; the CNN family changes the id."""
    assert parse_spec(MLP_SPEC).study_id == MLP_SPEC_ID
    named = {**MLP_SPEC, "architectures": {**MLP_SPEC["architectures"], "family": "mlp"}}
    assert parse_spec(named).study_id == MLP_SPEC_ID
    cnn_spec = {**MLP_SPEC, "architectures": {"family": "cnn", "sample": 4}}
    assert parse_spec(cnn_spec).study_id != MLP_SPEC_ID


def test_image_shape_must_match_the_data():
    """A CNN study whose image_shape does not multiply to the data's features fails before
    running, naming the field and the feature count."""
    from nngauge.studies._units import resolve_architectures

    spec = parse_spec({"data": {"source": "digits"},
                       "architectures": {"family": "cnn", "image_shape": [1, 8, 7],
                                         "sample": 1}})
    with pytest.raises(InvalidInputError, match="architectures.image_shape expected C\\*H\\*W "
                                                "= 64"):
        resolve_architectures(spec)


def test_explicit_cnn_entries_are_built_with_the_spec_image_shape():
    """An explicit cnn entry becomes a CNNConfig dict with the family, the data's widths and
    the spec's image_shape, and build_model rebuilds it as a CNN."""
    from nngauge.studies._units import Unit, UnitTask, build_model, resolve_architectures

    spec = parse_spec({"data": {"source": "digits"},
                       "architectures": {"family": "cnn", "explicit": [
                           {"width": 8, "depth": 2, "pool_after": [1], "skip": 1.0,
                            "norm": "batch"}]}})
    (arch,) = resolve_architectures(spec)
    assert arch.skip and arch.config["family"] == "cnn"
    assert (arch.config["d_in"], arch.config["d_out"], arch.config["image_shape"]) == \
        (64, 10, [1, 8, 8])
    model = build_model(UnitTask(spec, arch, Unit("k", "init", 0, 0)))
    assert model.config.to_dict() == arch.config


@pytest.mark.slow
def test_cnn_study_runs_end_to_end(tmp_path):
    """A digits study of 2 sampled CNNs (NLC and n_params at init, one epoch) stores CNN
    configs and summarizes to 2 points with finite NLC, a test error and the sampled
    networks' parameter counts."""
    from nngauge.studies._units import resolve_architectures

    spec = parse_spec({"data": {"source": "digits"},
                       "architectures": {"family": "cnn", "sample": 2},
                       "measures": {"names": ["nlc", "n_params"]},
                       "training": {"lrs": [0.1], "max_epochs": 1}})
    url = f"sqlite:///{tmp_path / 'cnn.db'}"
    run_study(spec, url, workers=1)
    result = summarize(url)
    assert len(result.points) == 2
    assert all(math.isfinite(p["nlc"]) and 0 <= p["test_error"] <= 1 for p in result.points)
    archs = resolve_architectures(spec)
    assert [p["n_params"] for p in result.points] == \
        [a.description["n_parameters"] for a in archs]


def test_a_cnn_traces_with_torch_fx_so_exact_region_measures_run():
    """The CNN's forward has no control flow on traced values (its input check runs on
    concrete tensors only), so torch.fx traces it and the exact piecewise-linear measures run
    on a ReLU CNN with pooling: region density along lines through the data is finite."""
    import torch.fx

    from nngauge import proxies
    from nngauge.nn import cnn

    net = cnn(64, 8, 3, 10, activation="relu", pool_after=(1,),
              generator=torch.Generator().manual_seed(0))
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(1))
    traced = torch.fx.symbolic_trace(net)
    torch.testing.assert_close(traced(x), net(x))
    assert 0 < proxies.region_density(net, x) < float("inf")


# ------------------------------------------------------------------ 1-D (residual) CNNs


def test_a_one_dimensional_cnn_is_the_hand_written_forward():
    """image_shape (C, L): Conv1d blocks (kernel 3, padding 1), ReLU, max pooling by 2 after the
    listed blocks, the identity skip from the second block on, a mean over positions and the
    read-out: the same logits as F.conv1d / relu / max_pool1d written out, flat or (n, C, L)."""
    from torch.nn import functional as F

    net = cnn(2 * 12, 6, 3, 4, image_shape=(2, 12), skip=1.0, pool_after=(0, 2), generator=_gen())
    assert [type(b.conv).__name__ for b in net.blocks] == ["Conv1d"] * 3
    x = torch.randn(5, 2, 12, generator=_gen(1))
    h = F.max_pool1d(F.relu(F.conv1d(x, net.blocks[0].conv.weight, net.blocks[0].conv.bias,
                                     padding=1)), 2)
    h = h + F.relu(F.conv1d(h, net.blocks[1].conv.weight, net.blocks[1].conv.bias, padding=1))
    h = h + F.relu(F.conv1d(h, net.blocks[2].conv.weight, net.blocks[2].conv.bias, padding=1))
    h = F.max_pool1d(h, 2)
    expected = F.linear(h.mean(-1), net.readout.weight, net.readout.bias)
    torch.testing.assert_close(net(x), expected)
    torch.testing.assert_close(net(x.reshape(5, -1)), expected)


def test_one_dimensional_parameter_counts_by_hand():
    """1-D CNN on (n, 40) signals, width 8, depth 2, 10 classes: conv0 1*8*3 + 8 = 32, conv1
    8*8*3 + 8 = 200, read-out 8*10 + 10 = 90: 322 parameters; batch norm (no affine) and
    dropout add none, the residual skips add none."""
    for options in ({}, {"norm": "batch", "dropout": 0.5}, {"skip": 1.0}):
        net = cnn(40, 8, 2, 10, image_shape=(1, 40), pool_after=(0, 1), **options)
        assert sum(p.numel() for p in net.parameters()) == 32 + 200 + 90


def test_one_dimensional_initialization_statistics():
    """Gaussian init with sigma_w = sqrt(2) (He et al.'s): a conv's weight entries have variance
    2 / fan_in with fan_in = in_channels * 3 (within 5% on 196,608 entries); orthogonal init:
    the weight read as out x (in * 3) has orthonormal rows (out <= in * 3)."""
    net = cnn(40, 256, 2, 10, image_shape=(1, 40), init="gaussian", sigma_w=math.sqrt(2),
              generator=_gen())
    w = net.blocks[1].conv.weight.detach().double()
    assert w.shape == (256, 256, 3)
    assert float(w.var()) == pytest.approx(2 / (256 * 3), rel=0.05)
    assert abs(float(w.mean())) < 0.01 * math.sqrt(2 / 768)
    ortho = cnn(40, 64, 2, 10, image_shape=(1, 40), generator=_gen()).blocks[1].conv.weight
    m = ortho.detach().double().reshape(64, -1)
    torch.testing.assert_close(m @ m.T, torch.eye(64, dtype=torch.float64), atol=1e-5, rtol=0)


def test_dropout_is_a_module_after_each_activation_and_the_identity_in_eval_mode():
    """dropout=p adds blocks.<i>.drop after the activation: the same weights as without it
    (it draws nothing from the generator), the same outputs in eval mode, zeros in training
    mode; p outside [0, 1) is refused with the fix."""
    with_drop = cnn(40, 8, 2, 3, image_shape=(1, 40), dropout=0.5, generator=_gen())
    plain = cnn(40, 8, 2, 3, image_shape=(1, 40), generator=_gen())
    assert all(isinstance(b.drop, nn.Dropout) and b.drop.p == 0.5 for b in with_drop.blocks)
    assert not hasattr(plain.blocks[0], "drop") and with_drop.config.dropout == 0.5
    assert all(torch.equal(a, b) for a, b in zip(with_drop.state_dict().values(),
                                                 plain.state_dict().values()))
    x = torch.randn(6, 40)
    torch.testing.assert_close(with_drop.eval()(x), plain.eval()(x))
    with_drop.train()
    assert not torch.equal(with_drop(x), plain(x))
    with pytest.raises(InvalidInputError, match=r"dropout.*\[0, 1\).*Fix"):
        cnn(40, 8, 2, 3, image_shape=(1, 40), dropout=1.0)


def test_one_dimensional_pooling_is_bounded_by_the_length():
    """A length-5 signal allows floor(log2 5) = 2 poolings; a third is refused naming the
    signal's length."""
    assert max_poolings((1, 5)) == 2
    assert cnn(5, 4, 2, 2, image_shape=(1, 5), pool_after=(0, 1))(torch.randn(3, 5)).shape == \
        (3, 2)
    with pytest.raises(InvalidInputError, match="5 signal at least 1"):
        cnn(5, 4, 3, 2, image_shape=(1, 5), pool_after=(0, 1, 2))
