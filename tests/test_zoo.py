"""The reference architectures of nngauge.zoo: shapes, modes, determinism, and their quirks."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from nngauge.errors import InvalidInputError, UnknownNameError
from nngauge.zoo import (
    ZOO,
    BatchNormAct2d,
    Conv1D,
    GELUTanh,
    LayerNorm2d,
    ModelOutput,
    NewGELUActivation,
    QuickGELU,
    Swish,
    bert,
    convnext_block_net,
    dropout_mlp,
    elementwise_zoo_net,
    gpt,
    groupnorm_cnn,
    lstm_classifier,
    mobilenet_block_net,
    resnet18,
    resnet50,
    resnet_small,
    sample_inputs,
    sample_labels,
    vit,
)

NAMES = sorted(ZOO)


def logits_of(entry, out):
    return out if entry.output is None else out[entry.output]


@pytest.mark.parametrize("name", NAMES)
def test_entry_builds_in_train_mode_and_runs_in_both_modes(name):
    entry = ZOO[name]
    assert entry.name == name
    model = entry.build(generator=0)
    assert isinstance(model, nn.Module)
    assert all(m.training for m in model.modules())
    x = sample_inputs(name, 4)
    expected = (4, *entry.label_shape, entry.num_classes)
    for train in (True, False):
        model.train(train)
        logits = logits_of(entry, model(x))
        assert isinstance(logits, torch.Tensor)
        assert logits.shape == expected
        assert torch.isfinite(logits).all()


SEED_7 = {
    "resnet_small": (1399.6004978545816, 162.87208268688119, 8),
    "resnet_small_timm": (1399.6004978545816, 162.87208268688119, 8),
    "vit_small": (158.8858085202034, 162.87208268688119, 8),
    "vit_optional_args": (78.1294290864946, 8.410122743080137, 8),
    "gpt_small": (157.6481633649123, 1562.0, 1562),
    "bert_small": (94.37360887398603, 1562.0, 2),
    "lstm": (1.6669403910636902, -9.219215391087346, 2),
    "lstm_tokens": (15.404583399184048, 1111.0, 2),
    "groupnorm_cnn": (52.38730175215278, 8.410122743080137, 8),
    "mobilenet_block": (338.52723491539837, 8.410122743080137, 8),
    "convnext_block": (131.21423772943513, 162.87208268688119, 8),
    "dropout_mlp": (-3.1026267083507264, -9.219215391087346, 2),
    "elementwise_zoo": (2.9901527939418884, -4.232900021597743, 2),
    "mlp_float64": (-3.1026267083507264, -9.219215391087346, 2),
    "resnet_bfloat16": (1399.7183482507244, 162.84664821624756, 8),
}
"""Per entry, at seed 7: the sum of the floating state, of 3 sample inputs and of 3 labels, as
the builders and samplers gave them when they took ``seed=`` (before ``generator``)."""


@pytest.mark.parametrize("name", NAMES)
def test_an_int_generator_gives_the_networks_and_inputs_the_same_seed_gave(name):
    entry = ZOO[name]
    state = entry.build(generator=7).state_dict().values()
    weights = sum(float(t.double().sum()) for t in state if t.is_floating_point())
    inputs = float(sample_inputs(entry, 3, generator=7).double().sum())
    labels = int(sample_labels(entry, 3, generator=7).sum())
    assert (weights, inputs, labels) == pytest.approx(SEED_7[name], rel=1e-12)


def test_a_torch_generator_seeds_the_build_with_one_draw_and_the_samples_directly():
    from nngauge._random import seed_of

    a = resnet_small(width=4, generator=torch.Generator().manual_seed(5))
    b = resnet_small(width=4, generator=seed_of(torch.Generator().manual_seed(5)))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    draws = torch.Generator().manual_seed(5)
    expected = torch.randn(3, 40, generator=torch.Generator().manual_seed(5))
    assert torch.equal(sample_inputs("dropout_mlp", 3, generator=draws), expected)
    assert not torch.equal(sample_inputs("dropout_mlp", 3, generator=draws), expected)


@pytest.mark.parametrize("call", [
    lambda **kw: ZOO["resnet_small"].build(**kw),
    lambda **kw: ZOO["mlp_float64"].build(**kw),  # through _in_dtype: still one warning
    lambda **kw: gpt(dim=16, depth=1, heads=2, **kw),
    lambda **kw: sample_inputs("lstm", 3, **kw),
    lambda **kw: sample_labels("gpt_small", 3, **kw),
], ids=["build", "build-in-dtype", "gpt", "sample_inputs", "sample_labels"])
def test_seed_still_works_with_one_warning_naming_generator(call):
    with pytest.warns(DeprecationWarning) as caught:
        old = call(seed=3)
    assert len(caught) == 1 and "'generator'" in str(caught[0].message)
    new = call(generator=3)
    if isinstance(old, nn.Module):
        assert all(torch.equal(p, q) for p, q in zip(old.parameters(), new.parameters()))
    else:
        assert torch.equal(old, new)
    with pytest.raises(InvalidInputError, match="'generator' alone"):
        call(seed=3, generator=3)


def test_gpt_logits_per_position():
    entry = ZOO["gpt_small"]
    assert entry.label_shape == entry.input_shape == (16,)
    assert entry.num_classes == entry.vocab_size == 64
    out = entry.build()(sample_inputs(entry, 4))
    assert isinstance(out, dict)
    assert out["logits"].shape == (4, 16, 64)
    assert out["hidden_states"].shape == (4, 16, 32)


@pytest.mark.parametrize("name", NAMES)
def test_sample_inputs_and_labels(name):
    entry = ZOO[name]
    x = sample_inputs(entry, 5, generator=3)
    assert x.shape == (5, *entry.input_shape)
    assert torch.equal(x, sample_inputs(name, 5, generator=3))
    assert not torch.equal(x, sample_inputs(name, 5, generator=4))
    if entry.input_kind == "tokens":
        assert x.dtype == torch.int64
        assert 0 <= x.min() and x.max() < entry.vocab_size
        assert entry.input_module is not None
        embedding = entry.build().get_submodule(entry.input_module)
        assert isinstance(embedding, nn.Embedding)
        assert embedding.num_embeddings == entry.vocab_size
    else:
        assert entry.input_kind == "float"
        assert x.dtype == entry.dtype == next(entry.build().parameters()).dtype
        assert entry.vocab_size is None and entry.input_module is None
    y = sample_labels(entry, 50, generator=1)
    assert y.shape == (50, *entry.label_shape)
    assert y.dtype == torch.int64
    assert 0 <= y.min() and y.max() < entry.num_classes


def test_unknown_entry_name():
    with pytest.raises(UnknownNameError, match="resnet_small"):
        sample_inputs("resnet_huge", 2)
    with pytest.raises(UnknownNameError):
        sample_labels("resnet_huge", 2)


@pytest.mark.parametrize("name", NAMES)
def test_build_is_deterministic_and_keeps_the_global_rng(name):
    entry = ZOO[name]
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    a = entry.build(generator=0).state_dict()
    b = entry.build(generator=0).state_dict()
    c = entry.build(generator=1).state_dict()
    assert torch.equal(torch.get_rng_state(), state)
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


PIECEWISE_LINEAR_LEAVES = (nn.Linear, nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.AdaptiveAvgPool2d,
                           nn.Flatten, nn.Identity, nn.Dropout)


@pytest.mark.parametrize("name", NAMES)
def test_piecewise_linear_flag_matches_the_layers(name):
    entry = ZOO[name]
    leaves = [m for m in entry.build().modules() if not list(m.children())]
    only_pl = all(isinstance(m, PIECEWISE_LINEAR_LEAVES) or type(m) is nn.BatchNorm2d
                  for m in leaves)
    assert entry.piecewise_linear == only_pl


def count_calls(module):
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


def test_torchvision_layout_calls_one_relu_twice_per_block():
    model = resnet_small()
    block = model.layer2[0]
    assert not hasattr(block, "act1") and not hasattr(block, "act2")
    assert isinstance(block.relu, nn.ReLU) and block.relu.inplace
    assert isinstance(block.downsample, nn.Sequential)
    assert [type(m) for m in block.downsample] == [nn.Conv2d, nn.BatchNorm2d]
    assert model.layer1[0].downsample is None
    calls = count_calls(block.relu)
    model(sample_inputs("resnet_small", 2))
    assert len(calls) == 2
    names = [name for name, _ in model.named_children()]
    assert names == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
                     "avgpool", "fc"]


def test_timm_layout_calls_act1_and_act2_once():
    model = resnet_small(layout="timm")
    block = model.layer3[0]
    assert not hasattr(block, "relu")
    act1, act2 = count_calls(block.act1), count_calls(block.act2)
    model(sample_inputs("resnet_small_timm", 2))
    assert len(act1) == len(act2) == 1
    assert hasattr(model, "act1") and not hasattr(model, "relu")


def test_layouts_compute_the_same_function():
    x = sample_inputs("resnet_small", 3)
    tv, timm = resnet_small().eval(), resnet_small(layout="timm").eval()
    torch.testing.assert_close(tv(x), timm(x))


def test_resnet18_stems_and_sizes():
    assert isinstance(resnet18().maxpool, nn.MaxPool2d)
    assert resnet18().conv1.kernel_size == (7, 7)
    cifar = resnet18(stem="cifar", width=8, blocks=(1, 1, 1, 1))
    assert isinstance(cifar.maxpool, nn.Identity)
    assert cifar.conv1.kernel_size == (3, 3) and cifar.conv1.stride == (1, 1)
    assert cifar(torch.randn(2, 3, 8, 8)).shape == (2, 10)
    assert sum(p.numel() for p in resnet18(1000).parameters()) == 11_689_512  # torchvision's
    assert [len(getattr(resnet18(), f"layer{i}")) for i in range(1, 5)] == [2, 2, 2, 2]
    with pytest.raises(InvalidInputError):
        resnet18(stem="tiny")
    with pytest.raises(InvalidInputError):
        resnet18(layout="keras")


def test_resnet50_counts_and_layouts():
    """torchvision's and timm's resnet50 have 25,557,032 parameters with 1,000 classes (each
    library's own count); Bottleneck blocks expand by 4, the layouts name their activations
    as each library does, and compute the same function."""
    for layout in ("torchvision", "timm"):
        assert sum(p.numel() for p in resnet50(1000, layout=layout).parameters()) == 25_557_032
    small = dict(width=4, blocks=(1, 2, 1, 1))
    tv, timm = resnet50(**small).eval(), resnet50(layout="timm", **small).eval()
    assert [len(getattr(tv, f"layer{i}")) for i in range(1, 5)] == [1, 2, 1, 1]
    assert tv.layer2[1].conv3.out_channels == 4 * 8 and hasattr(timm.layer2[1], "act3")
    calls = count_calls(tv.layer2[1].relu)
    x = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(tv(x), timm(x))
    assert len(calls) == 3  # one relu module called three times a block


def test_resnet50_zero_init_last_makes_each_block_its_shortcut():
    """timm's default: each Bottleneck's last BatchNorm scale is zero, so a block without a
    projection returns relu(its input), which for a post-ReLU input is the input itself."""
    model = resnet50(width=4, blocks=(2, 1, 1, 1), zero_init_last=True).eval()
    assert all(float(b.bn3.weight.abs().sum()) == 0.0 for layer in
               (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer)
    block = model.layer1[1]  # no downsample: 16 channels in and out
    x = torch.relu(torch.randn(2, 16, 8, 8))
    torch.testing.assert_close(block(x.clone()), x)
    assert float(resnet50(width=4, blocks=(1, 1, 1, 1)).layer1[0].bn3.weight.sum()) > 0


def test_gpt_tied_embeddings_share_one_parameter():
    """GPT-2 ties its head to the token embedding: one parameter, counted once (GPT-2 small:
    124,439,808 parameters, Hugging Face's count for gpt2)."""
    tied = gpt(64, 16, dim=32, depth=1, heads=2, tie_embeddings=True)
    untied = gpt(64, 16, dim=32, depth=1, heads=2)
    assert tied.lm_head.weight is tied.wte.weight
    assert (sum(p.numel() for p in untied.parameters())
            - sum(p.numel() for p in tied.parameters())) == 64 * 32
    tokens = torch.randint(0, 64, (2, 16))
    assert tied(tokens)["logits"].shape == (2, 16, 64)
    small = gpt(50257, 1024, dim=768, depth=12, heads=12, tie_embeddings=True)
    assert sum(p.numel() for p in small.parameters()) == 124_439_808


def test_vit_layout():
    model = vit(dim=48, depth=1, heads=3)
    assert sum(p.numel() for p in vit(num_classes=1000, image_size=224, patch_size=16)
               .parameters()) == 5_717_416  # timm's vit_tiny_patch16_224
    assert model.pos_embed.shape == (1, 65, 48) and model.cls_token.shape == (1, 1, 48)
    act = model.blocks[0].mlp.act
    assert type(act).__name__ == "GELU" and not isinstance(act, nn.GELU)
    x = torch.randn(5, 8)
    torch.testing.assert_close(act(x), nn.GELU()(x))
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(InvalidInputError):
        vit(image_size=30)
    with pytest.raises(InvalidInputError):
        vit(dim=100, heads=3)


def test_gpt_conv1d_and_gelu():
    model = gpt(depth=1)
    c_attn = model.h[0].attn.c_attn
    assert isinstance(c_attn, Conv1D) and c_attn.weight.shape == (128, 384)
    x = torch.randn(2, 5, 128)
    torch.testing.assert_close(c_attn(x), x @ c_attn.weight + c_attn.bias)
    act = model.h[0].mlp.act
    assert isinstance(act, NewGELUActivation) and not isinstance(act, nn.GELU)
    torch.testing.assert_close(act(x), nn.GELU(approximate="tanh")(x))
    assert model.lm_head.bias is None
    with pytest.raises(InvalidInputError, match="block_size"):
        model(torch.zeros(1, 65, dtype=torch.int64))


def test_gpt_is_causal():
    model = ZOO["gpt_small"].build().eval()
    ids = sample_inputs("gpt_small", 2)
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 64
    a, b = model(ids)["logits"], model(changed)["logits"]
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_bert_model_output():
    entry = ZOO["bert_small"]
    out = entry.build()(sample_inputs(entry, 3))
    assert isinstance(out, ModelOutput)
    assert out.logits is out["logits"] is out[0]
    assert list(out) == ["logits", "last_hidden_state", "pooler_output"]
    assert out.last_hidden_state.shape == (3, 16, 32)
    assert out.pooler_output.shape == (3, 32)
    assert out[-1] is out.pooler_output
    assert out[1:] == (out.last_hidden_state, out.pooler_output)
    with pytest.raises(AttributeError):
        out.loss
    with pytest.raises(KeyError):
        out["loss"]
    restored = pickle.loads(pickle.dumps(ModelOutput(logits=torch.ones(2))))
    assert restored.logits.tolist() == [1.0, 1.0]
    model = bert(depth=2)
    assert isinstance(model.encoder.layer[1].intermediate.intermediate_act_fn, nn.GELU)
    assert isinstance(model.pooler.activation, nn.Tanh)


def test_lstm_input_forms():
    flat = lstm_classifier(5, 16, seq_len=8)
    assert flat(torch.randn(3, 40)).shape == (3, 3)
    seq = lstm_classifier(5, 16)
    flat.load_state_dict(seq.state_dict())
    x = torch.randn(3, 8, 5)
    torch.testing.assert_close(flat(x.reshape(3, 40)), seq(x))
    tokens = lstm_classifier(16, 16, vocab_size=64, num_layers=2)
    assert tokens(torch.randint(0, 64, (3, 12))).shape == (3, 3)
    assert lstm_classifier().lstm.batch_first
    with pytest.raises(InvalidInputError):
        lstm_classifier(seq_len=8, vocab_size=64)


def test_groupnorm_cnn():
    model = groupnorm_cnn(channels=(8, 16, 32))
    assert sum(isinstance(m, nn.GroupNorm) and m.num_groups == 4 for m in model) == 3
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    with pytest.raises(InvalidInputError):
        groupnorm_cnn(channels=(6,))


def test_batchnormact2d_is_a_batchnorm_with_an_activation():
    model = mobilenet_block_net()
    assert isinstance(model.bn1, BatchNormAct2d)
    assert isinstance(model.bn1, nn.BatchNorm2d)
    assert isinstance(model.bn1.act, nn.Hardswish)
    block = model.blocks[0]
    assert isinstance(block.bn1.act, nn.Hardswish) and isinstance(block.bn2.act, nn.ReLU)
    assert type(block.bn3) is nn.BatchNorm2d
    assert block.conv_dw.groups == block.conv_dw.in_channels == 64
    assert isinstance(block.se.gate, nn.Hardsigmoid)
    model.eval()
    x = torch.randn(2, 16, 4, 4)
    bn = nn.BatchNorm2d(16).eval()
    bn.load_state_dict(model.bn1.state_dict())
    torch.testing.assert_close(model.bn1(x), nn.functional.hardswish(bn(x)))


def test_convnext_quirks():
    model = convnext_block_net()
    assert isinstance(model.stem[1], LayerNorm2d) and isinstance(model.stem[1], nn.LayerNorm)
    act = model.blocks[0].mlp.act
    assert isinstance(act, GELUTanh) and isinstance(act, nn.GELU)
    assert act.approximate == "tanh"
    x = torch.randn(100)
    assert not torch.allclose(act(x), nn.GELU()(x), atol=1e-6, rtol=0)
    assert torch.equal(model.blocks[1].ls.gamma, torch.full((32,), 0.1))
    assert model.blocks[0].conv_dw.kernel_size == (7, 7) and model.blocks[0].conv_dw.groups == 32
    y = torch.randn(2, 32, 3, 3)
    expected = nn.functional.layer_norm(y.permute(0, 2, 3, 1), (32,), eps=1e-6)
    torch.testing.assert_close(model.stem[1](y), expected.permute(0, 3, 1, 2))


def test_dropout_mlp_is_random_only_in_train_mode():
    model = dropout_mlp()
    assert sum(isinstance(m, nn.Dropout) and m.p == 0.5 for m in model) == 3
    x = torch.randn(4, 40)
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_elementwise_activations():
    model = elementwise_zoo_net()
    acts = [m for m in model if not isinstance(m, nn.Linear)]
    assert [type(m) for m in acts] == [QuickGELU, nn.Hardswish, Swish]
    assert list(acts[2].parameters()) == []
    x = torch.randn(50)
    torch.testing.assert_close(acts[0](x), x * torch.sigmoid(1.702 * x))
    torch.testing.assert_close(acts[2](x), nn.functional.silu(x))


@pytest.mark.parametrize("call, match", [
    (lambda: vit(dropout=1.5), "dropout a number in \\[0, 1\\]"),
    (lambda: gpt(dropout=-0.1), "dropout a number in \\[0, 1\\]"),
    (lambda: dropout_mlp(p=2.0), "p a number in \\[0, 1\\]"),
    (lambda: resnet18(blocks=(2, 0)), "blocks a non-empty list"),
    (lambda: resnet18(blocks=()), "blocks a non-empty list"),
    (lambda: resnet_small(width=0), "width an integer >= 1"),
    (lambda: bert(heads=2.0), "heads an integer >= 1"),
    (lambda: lstm_classifier(seq_len=0), "seq_len None or an integer >= 1"),
    (lambda: elementwise_zoo_net(generator=-1), "generator a torch.Generator or an integer in"),
    (lambda: sample_inputs(3, 2), "entry_or_name a ZooEntry"),
    (lambda: sample_labels("lstm", -1), "n an integer >= 0"),
])
def test_declared_options_are_refused_with_their_range(call, match):
    with pytest.raises(InvalidInputError, match=f"expected {match}.*got .*Fix"):
        call()


def test_numpy_integers_are_accepted_as_sizes_and_seeds():
    import numpy as np

    i = np.int64
    a, b = resnet_small(i(5), width=i(4), generator=i(3)), resnet_small(5, width=4, generator=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert lstm_classifier(i(5), i(16), num_layers=i(1), seq_len=i(8))(torch.randn(2, 40)).shape \
        == (2, 3)
    assert torch.equal(sample_inputs("lstm", i(2), generator=i(1)),
                       sample_inputs("lstm", 2, generator=1))
    assert sample_labels("lstm", i(3), generator=i(1)).shape == (3,)
