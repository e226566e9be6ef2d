"""The newer zero-cost proxies (nngauge.proxies.zico, meco, meco_opt, zen_score) against
explicit loops over batches, samples, layers and channels on tiny networks, the invariances
their definitions imply, determinism by generator, the inputs they refuse, state restoration,
and the zoo's ResNet, ViT, GPT and LSTM."""

import copy
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge import proxies
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.zoo import ZOO, sample_inputs, sample_labels


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


def _mlp(seed=0, bias=True):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7, bias=bias), nn.ReLU(), nn.Linear(7, 6, bias=bias),
                         nn.ReLU(), nn.Linear(6, 3, bias=bias)).double()


def _labelled(n, seed=0, d_in=5, classes=3):
    g = _seeded(seed)
    return (torch.randn(n, d_in, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (n,), generator=g))


def _cnn(seed=0, bias=True, norm=False):
    torch.manual_seed(seed)
    layers = [nn.Conv2d(2, 4, 3, padding=1, bias=bias)]
    layers += [nn.BatchNorm2d(4, eps=1e-12)] if norm else []
    layers += [nn.ReLU(), nn.Conv2d(4, 5, 3, bias=bias)]
    layers += [nn.BatchNorm2d(5, eps=1e-12)] if norm else []
    layers += [nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 3)]
    return nn.Sequential(*layers).double()


def _state(model):
    return ([t.detach().clone() for t in list(model.parameters()) + list(model.buffers())],
            [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()],
            [p.grad for p in model.parameters()],
            sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()))


def _same(a, b):
    return (all(torch.equal(s, t) for s, t in zip(a[0], b[0])) and a[1:3] == b[1:3]
            and all(g is h for g, h in zip(a[3], b[3])) and a[4] == b[4])


# ----------------------------------------------------------------------------------- ZiCo


def _zico_by_hand(model, batches):
    """Each batch's weight gradients by .backward() on a copy (train mode as the model is),
    then, per module, log(sum over weight entries with std > 0 of mean|g| / std g)."""
    grads = []
    for x, y in batches:
        ref = copy.deepcopy(model)
        F.cross_entropy(ref(x), y).backward()
        grads.append({n: p.grad.numpy().copy() for n, p in ref.named_parameters()
                      if p.dim() >= 2})
    sums = {}
    for name in grads[0]:
        g = np.stack([batch[name] for batch in grads])
        std = g.std(axis=0)
        mean_abs = np.abs(g).mean(axis=0)
        layer = name.rpartition(".")[0]
        sums[layer] = sums.get(layer, 0.0) + float((mean_abs[std > 0] / std[std > 0]).sum())
    return sum(math.log(s) for s in sums.values() if s > 0)


@pytest.mark.parametrize("n_batches", [2, 3])
def test_zico_equals_the_layer_sums_of_per_batch_gradients_by_hand(n_batches):
    """The first n_batches x batch_size samples split into mini-batches of batch_size, each
    mini-batch's cross-entropy differentiated alone: ZiCo = sum over modules of log(sum over
    their weight entries of mean_b |g| / std_b g), biases not read."""
    model = _mlp()
    x, y = _labelled(4 * n_batches + 3)
    batches = [(x[4 * b:4 * b + 4], y[4 * b:4 * b + 4]) for b in range(n_batches)]
    expected = _zico_by_hand(model, batches)
    assert proxies.zico(model, x, y, batch_size=4, n_batches=n_batches) == pytest.approx(
        expected, rel=1e-12)


def test_zico_normalizes_each_mini_batch_by_its_own_batchnorm_statistics():
    """A batchnorm CNN in train mode: each mini-batch's gradient is that of the network run on
    the mini-batch alone (its own statistics), as a loop of backward passes gives."""
    model = _cnn(norm=True)
    g = _seeded(1)
    x, y = torch.randn(6, 2, 5, 5, generator=g, dtype=torch.float64), torch.tensor(
        [0, 1, 2, 2, 1, 0])
    expected = _zico_by_hand(model, [(x[:3], y[:3]), (x[3:], y[3:])])
    assert proxies.zico(model, x, y, batch_size=3) == pytest.approx(expected, rel=1e-10)


def test_zico_is_invariant_to_batch_order_and_to_rescaling_a_relu_unit():
    """mean and std are symmetric in the batches; scaling a bias-free ReLU layer by c and the
    next by 1 / c keeps the function and scales the two layers' gradients by 1 / c and c,
    which their ratios cancel. Scaling one layer alone changes ZiCo."""
    model = _mlp(bias=False)
    x, y = _labelled(8)
    swapped = torch.cat([x[4:], x[:4]]), torch.cat([y[4:], y[:4]])
    value = proxies.zico(model, x, y, batch_size=4)
    assert proxies.zico(model, *swapped, batch_size=4) == pytest.approx(value, rel=1e-12)
    rescaled, alone = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        rescaled[0].weight.mul_(7.0)
        rescaled[2].weight.div_(7.0)
        alone[0].weight.mul_(7.0)
    assert proxies.zico(rescaled, x, y, batch_size=4) == pytest.approx(value, rel=1e-9)
    assert abs(proxies.zico(alone, x, y, batch_size=4) - value) > 1e-3


def test_zico_with_two_batches_has_every_ratio_at_least_one():
    """For two batches mean|g| / std g = (|g1| + |g2|) / |g1 - g2| >= 1 (triangle inequality),
    so ZiCo >= sum over layers of log(weight entries), here all varying."""
    model = _mlp()
    x, y = _labelled(40)
    floor = sum(math.log(p.numel()) for p in model.parameters() if p.dim() >= 2)
    assert proxies.zico(model, x, y, batch_size=20) >= floor


def test_zico_is_determined_by_its_generator():
    model = _mlp()
    x, y = _labelled(50)
    a = proxies.zico(model, x, y, batch_size=8, generator=3)
    assert a == proxies.zico(model, x, y, batch_size=8, generator=3)
    assert a != proxies.zico(model, x, y, batch_size=8, generator=4)


def test_zico_refuses_what_has_no_deviation_or_no_weights():
    model = _mlp()
    x, y = _labelled(8)
    with pytest.raises(InvalidInputError, match="n_batches an integer >= 2"):
        proxies.zico(model, x, y, n_batches=1)
    with pytest.raises(InvalidInputError, match="at least 2 samples"):
        proxies.zico(model, x[:1], y[:1])
    with pytest.raises(InvalidInputError, match="labelled data"):
        proxies.zico(model, x)
    same = x[:1].expand(8, -1), y[:1].expand(8)
    with pytest.raises(InvalidInputError, match="differ between the mini-batches.*Fix"):
        proxies.zico(model, *same, batch_size=4)
    frozen = copy.deepcopy(model)
    for p in frozen.parameters():
        p.requires_grad_(p.dim() == 1)
    with pytest.raises(InvalidInputError, match="two or more dimensions"):
        proxies.zico(frozen, x, y, batch_size=4)


# ----------------------------------------------------------------------------------- MeCo


def _outputs(model, x, kinds=(nn.Conv2d, nn.Linear)):
    """Each conv / linear layer's output on x, by forward hooks, in call order."""
    seen = []
    handles = [m.register_forward_hook(lambda m, a, o: seen.append(o.detach()))
               for m in model.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def _lambda_min(rows):
    """Smallest eigenvalue of numpy's Pearson correlation of the rows of a (C, P) array."""
    return float(np.linalg.eigvalsh(np.corrcoef(rows)).min())


def test_meco_equals_the_smallest_correlation_eigenvalues_by_hand():
    """For every sample (a loop) and every convolution (a loop), lambda_min of
    numpy.corrcoef over the C x (H W) map; summed over layers, averaged over samples."""
    model = _cnn()
    x = torch.randn(3, 2, 6, 6, generator=_seeded(2), dtype=torch.float64)
    maps = [m for m in _outputs(model, x) if m.dim() == 4]
    expected = np.mean([sum(_lambda_min(m[i].reshape(m.shape[1], -1).numpy()) for m in maps)
                        for i in range(len(x))])
    assert proxies.meco(model, x, batch_size=3) == pytest.approx(expected, rel=1e-9)


def test_meco_reads_a_linear_layers_channels_on_the_last_dimension():
    """A per-position MLP on sequences (b, T, d): channels are the last dimension, positions
    the T steps; the classifier head's (b, 3) output has no positions and is not read."""
    torch.manual_seed(3)
    body = nn.Sequential(nn.Linear(4, 5), nn.GELU(), nn.Linear(5, 3)).double()
    model = nn.Sequential(body, nn.Flatten(), nn.Linear(30, 2)).double()
    x = torch.randn(2, 10, 4, generator=_seeded(4), dtype=torch.float64)
    maps = [m for m in _outputs(model, x) if m.dim() == 3]
    expected = np.mean([sum(_lambda_min(m[i].T.numpy()) for m in maps) for i in range(2)])
    assert proxies.meco(model, x, batch_size=2) == pytest.approx(expected, rel=1e-9)


def test_each_meco_term_lies_in_0_1_with_its_ends_where_the_definition_puts_them():
    """A correlation matrix is PSD with unit diagonal: lambda_min in [0, 1]. 8 channels over
    2 x 2 = 4 positions are dependent (rank <= 3): exactly 0. Three input channels of white
    noise passed by an identity 1 x 1 convolution over 64 x 64 positions are nearly
    uncorrelated: close to 1. A channel constant over the positions (zero weights) makes the
    layer's term 0, as the authors' code does."""
    g = _seeded(5)
    for seed in range(3):
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Conv2d(2, 6, 3), nn.Tanh(), nn.Conv2d(6, 4, 3)).double()
        x = torch.randn(2, 2, 9, 9, generator=g, dtype=torch.float64)
        for name in ("0", "2"):
            assert 0.0 <= proxies.meco(net, x, layers=name) <= 1.0
    wide = nn.Sequential(nn.Conv2d(2, 8, 1)).double()
    assert proxies.meco(wide, torch.randn(1, 2, 2, 2, dtype=torch.float64)) == pytest.approx(
        0.0, abs=1e-12)
    identity = nn.Sequential(nn.Conv2d(3, 3, 1, bias=False)).double()
    with torch.no_grad():
        identity[0].weight.copy_(torch.eye(3).reshape(3, 3, 1, 1))
    white = torch.randn(1, 3, 64, 64, generator=g, dtype=torch.float64)
    assert 0.95 < proxies.meco(identity, white) <= 1.0
    dead = nn.Sequential(nn.Conv2d(3, 3, 1)).double()
    with torch.no_grad():
        dead[0].weight[1].zero_()
        dead[0].bias[1] = 0.5
    assert proxies.meco(dead, white) == pytest.approx(0.0, abs=1e-12)


def test_meco_is_invariant_to_positive_rescaling_and_not_to_a_sign_flip():
    """Pearson correlation ignores each channel's positive scale: scaling the first
    convolution of a bias-free ReLU network by c > 0 scales every later map by c and leaves
    MeCo unchanged; c < 0 changes which units the ReLU passes, and MeCo."""
    model = _cnn(bias=False)
    x = torch.randn(2, 2, 6, 6, generator=_seeded(6), dtype=torch.float64)
    value = proxies.meco(model, x, batch_size=2)
    for c, same in ((3.0, True), (-1.0, False)):
        scaled = copy.deepcopy(model)
        with torch.no_grad():
            scaled[0].weight.mul_(c)
        got = proxies.meco(scaled, x, batch_size=2)
        assert (got == pytest.approx(value, rel=1e-9)) is same


def test_meco_opt_is_a_rescaled_eigenvalue_of_sampled_channels():
    """With n_channels >= every layer's channels MeCo_opt is MeCo. With 3 of 4 and 3 of 5
    channels it is sum_l (C_l / 3) lambda_min of one 3-channel subset per layer: one of the
    values enumerated over all subsets; a seed fixes the subsets."""
    model = _cnn()
    x = torch.randn(1, 2, 6, 6, generator=_seeded(7), dtype=torch.float64)
    assert proxies.meco_opt(model, x, n_channels=5) == pytest.approx(proxies.meco(model, x),
                                                                     rel=1e-12)
    maps = [m[0].reshape(m.shape[1], -1).numpy() for m in _outputs(model, x) if m.dim() == 4]
    per_layer = [[len(m) / 3 * _lambda_min(m[list(s)]) for s in itertools.combinations(
        range(len(m)), 3)] for m in maps]
    candidates = [sum(c) for c in itertools.product(*per_layer)]
    values = {proxies.meco_opt(model, x, n_channels=3, generator=seed) for seed in range(6)}
    assert all(min(abs(v - c) for c in candidates) < 1e-9 for v in values)
    assert len(values) > 1
    assert proxies.meco_opt(model, x, n_channels=3, generator=2) == proxies.meco_opt(
        model, x, n_channels=3, generator=2)


def test_meco_refuses_networks_without_feature_maps_and_one_sample_batchnorm():
    """An MLP's layers give one value per unit: MeCo is undefined, refused with the fix. A
    one-sample forward pass through a train-mode batchnorm over a 1 x 1 map is impossible:
    refused with batch_size=2 as the fix, which then works."""
    with pytest.raises(InvalidInputError, match="feature maps.*MeCo is not defined"):
        proxies.meco(_mlp(), torch.randn(4, 5, dtype=torch.float64))
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3),
                        nn.BatchNorm2d(4))
    x = torch.randn(3, 2, 5, 5)
    with pytest.raises(InvalidInputError, match="one sample.*batch_size=2"):
        proxies.meco(net, x)
    assert 0 <= proxies.meco(net, x, batch_size=2) <= 2
    with pytest.raises(InvalidInputError, match="n_channels an integer >= 2"):
        proxies.meco_opt(net, x, n_channels=1)


# ------------------------------------------------------------------------------ Zen-score


def _zen_by_hand(model, x, eps, alpha=0.01):
    """A float64 copy in train mode; f = the input of the AdaptiveAvgPool2d, sigma from the
    inputs of every BatchNorm2d on x (loops over samples and channels)."""
    ref = copy.deepcopy(model).double().train()
    seen = {}
    hooks = [m.register_forward_pre_hook(lambda m, a, _k=k: seen.setdefault(_k, []).append(
        a[0].detach())) for k, m in enumerate(ref.modules())
        if isinstance(m, (nn.BatchNorm2d, nn.AdaptiveAvgPool2d))]
    with torch.no_grad():
        ref(x)
        ref(x + alpha * eps)
    for h in hooks:
        h.remove()
    pool = max(seen)
    f0, f1 = seen.pop(pool)
    delta = np.mean([float((f0[i] - f1[i]).norm()) for i in range(len(x))])
    score = math.log(delta)
    for values in seen.values():
        z = values[0]
        variances = [float(z[:, j].var(unbiased=False)) for j in range(z.shape[1])]
        score += math.log(math.sqrt(np.mean(variances)))
    return score


def _draws(seed, shape):
    g = _seeded(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64), torch.randn(
        shape, generator=g, dtype=torch.float64)


def test_zen_score_equals_log_delta_plus_the_batchnorm_scales_by_hand():
    """Weights as given: x then epsilon drawn from the generator (batch_size Gaussian
    samples of the data's shape), Delta the mean over samples of the Frobenius norm of the
    pre-GAP map's change, plus log sqrt(mean over channels of the batch variance) of every
    batchnorm's input."""
    model = _cnn(norm=True).float()
    x, eps = _draws(0, (6, 2, 5, 5))
    got = proxies.zen_score(model, torch.zeros(1, 2, 5, 5), batch_size=6, init="as_given",
                            generator=0)
    assert got == pytest.approx(_zen_by_hand(model, x, eps), rel=1e-10)


def test_zen_score_draws_gaussian_weights_in_module_order():
    """init='gaussian' scores the network with every conv / linear weight drawn from N(0, 1)
    (modules in order, before x and epsilon), biases 0, batchnorm scales 1 and shifts 0:
    the same as the weights set so by hand and scored as given; two networks of one
    architecture then score the same, while their given weights do not."""
    model = _cnn(norm=True)
    g = _seeded(5)
    redrawn = copy.deepcopy(model)
    with torch.no_grad():
        for m in redrawn.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g, dtype=torch.float64))
                m.bias.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.fill_(1.0)
                m.bias.zero_()
    data = torch.zeros(1, 2, 5, 5)
    gaussian = proxies.zen_score(model, data, batch_size=4, generator=5)
    assert gaussian == pytest.approx(
        proxies.zen_score(redrawn, data, batch_size=4, init="as_given", generator=g), rel=1e-12)
    other = _cnn(seed=9, norm=True)
    assert proxies.zen_score(other, data, batch_size=4, generator=5) == pytest.approx(
        gaussian, rel=1e-12)
    assert proxies.zen_score(other, data, batch_size=4, init="as_given", generator=1) != (
        proxies.zen_score(model, data, batch_size=4, init="as_given", generator=1))


def test_zen_score_moves_by_log_c_when_a_layer_is_scaled_by_c():
    """Without batchnorm, a bias-free ReLU network is positively homogeneous in its first
    layer's weights: scaling them by c scales f and Delta by c, and Zen by log c. With
    batchnorm after a convolution the map does not change (Delta the same) but the
    batchnorm's input, and sigma_bar, scale by c: Zen moves by log c again, which a score
    without the batchnorm terms would miss."""
    data = torch.zeros(1, 2, 5, 5)
    for norm in (False, True):
        model = _cnn(bias=False, norm=norm)
        scaled = copy.deepcopy(model)
        with torch.no_grad():
            scaled[0].weight.mul_(5.0)
        base = proxies.zen_score(model, data, batch_size=8, init="as_given", generator=3)
        moved = proxies.zen_score(scaled, data, batch_size=8, init="as_given", generator=3)
        assert moved - base == pytest.approx(math.log(5.0), rel=1e-6)


def test_zen_score_reads_the_datas_shape_only_and_its_generator():
    """The inputs are Gaussian: data of the same shape with other values gives the same score;
    the generator fixes it, another seed changes it; n_probes averages independent draws."""
    model = _mlp().float()
    a = proxies.zen_score(model, torch.randn(3, 5), generator=0)
    assert a == proxies.zen_score(model, 100 * torch.ones(1, 5), generator=0)
    assert a != proxies.zen_score(model, torch.randn(3, 5), generator=1)
    two = proxies.zen_score(model, torch.randn(3, 5), n_probes=2, generator=0)
    g = _seeded(0)
    first = proxies.zen_score(model, torch.randn(3, 5), generator=g)
    second = proxies.zen_score(model, torch.randn(3, 5), generator=g)
    assert first == a and two == pytest.approx((first + second) / 2, rel=1e-12)


def test_zen_score_reads_the_layer_it_is_told_and_refuses_what_it_cannot_score():
    """layer= names the module whose input is f (here the head, after pooling); an unknown
    name, a batch of one (no batch statistics), alpha <= 0, an unknown init, and a network
    whose output ignores its input are refused with what was expected and the fix."""
    model = _cnn(norm=True)
    data = torch.zeros(1, 2, 5, 5)
    pooled = proxies.zen_score(model, data, batch_size=4, layer="8", generator=0)
    assert pooled != proxies.zen_score(model, data, batch_size=4, generator=0)
    with pytest.raises(InvalidInputError, match="layer names"):
        proxies.zen_score(model, data, layer="nope")
    with pytest.raises(InvalidInputError, match="batch_size an integer >= 2"):
        proxies.zen_score(model, data, batch_size=1)
    with pytest.raises(InvalidInputError, match="alpha a finite number > 0"):
        proxies.zen_score(model, data, alpha=0.0)
    with pytest.raises(InvalidInputError, match="init in"):
        proxies.zen_score(model, data, init="xavier")

    class Constant(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 2)

        def forward(self, x):
            return self.fc(0 * x)

    with pytest.raises(InvalidInputError, match="finite and positive.*Fix"):
        proxies.zen_score(Constant(), torch.randn(2, 5))


# ------------------------------------------------------------------ state and the zoo

NEW = {"zico": {"batch_size": 3}, "meco": {"batch_size": 2}, "meco_opt": {"batch_size": 2},
       "zen_score": {"batch_size": 4}}


@pytest.mark.parametrize("name", sorted(NEW))
def test_every_new_proxy_leaves_the_model_as_it_was(name):
    """Parameters, buffers (batchnorm running statistics), modes (a mix), requires_grad
    flags, .grad and hooks are as before, for the float32 model and its float64 twin."""
    for dtype in (torch.float32, torch.float64):
        net = _cnn(norm=True).to(dtype)
        net[1].eval()
        net[0].bias.requires_grad_(False)
        net[3].weight.grad = torch.ones_like(net[3].weight)
        x, y = torch.randn(6, 2, 5, 5, dtype=dtype), torch.tensor([0, 1, 2, 0, 1, 2])
        before = _state(net)
        value = getattr(proxies, name)(net, x, y if name == "zico" else None, **NEW[name])
        assert isinstance(value, float) and math.isfinite(value)
        assert _same(before, _state(net))


REFUSED = {("lstm", "meco"), ("lstm", "meco_opt")}
"""MeCo is undefined on the LSTM classifier: no layer output has positions to correlate."""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")
@pytest.mark.parametrize("model_name", ["resnet_small", "vit_small", "gpt_small", "lstm"])
def test_the_new_proxies_run_on_a_resnet_a_vit_a_gpt_and_an_lstm(model_name):
    """Each gives a finite float or, for the pairs in REFUSED only, an NNGaugeError saying
    what was expected; the model's state is kept either way."""
    entry = ZOO[model_name]
    model = entry.build(generator=0)
    x, y = sample_inputs(entry, 6), sample_labels(entry, 6)
    before = _state(model)
    for name, options in NEW.items():
        arguments = (model, x, y if name == "zico" else None)
        options = {**options, "output": entry.output, "generator": 0}
        if (model_name, name) in REFUSED:
            with pytest.raises(NNGaugeError, match="expected.*Fix"):
                getattr(proxies, name)(*arguments, **options)
        else:
            assert math.isfinite(getattr(proxies, name)(*arguments, **options)), name
        assert _same(before, _state(model)), name
