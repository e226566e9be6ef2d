"""margin, path_norm and capacity: hand-built cases, brute-force path enumeration, rescaling."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.generalization._margin import margin
from nngauge.measures.generalization._norms import capacity, path_norm
from nngauge.nn import mlp


def _net(widths, gen, bias=True):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1], bias=bias).double())
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    net = nn.Sequential(*layers)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return net


def _brute_path_sum(net, p, bias):
    """sum over enumerated paths of prod |w|^p (paths from inputs, and from biases)."""
    linears = [m for m in net if isinstance(m, nn.Linear)]
    ws = [m.weight.detach().numpy() for m in linears]
    bs = [m.bias.detach().numpy() if m.bias is not None else None for m in linears]
    widths = [ws[0].shape[1]] + [w.shape[0] for w in ws]
    total = 0.0
    starts = [(0, None)] + ([(layer, b) for layer, b in enumerate(bs, 1) if b is not None]
                            if bias else [])
    for start, b in starts:
        # a path starting at layer `start`: from an input unit (start 0) or from the bias of
        # unit j_start in layer `start`, then through layers start+1..d
        for units in itertools.product(*[range(h) for h in widths[start:]]):
            prod = 1.0 if b is None else abs(b[units[0]]) ** p
            for offset, (j_prev, j) in enumerate(zip(units[:-1], units[1:])):
                prod *= abs(ws[start + offset][j, j_prev]) ** p
            total += prod
    return total


@pytest.mark.parametrize("p", [1, 2, 3, 0.5])
@pytest.mark.parametrize("bias", [True, False])
def test_path_norm_equals_enumeration(p, bias):
    net = _net([3, 4, 3, 2], torch.Generator().manual_seed(0))
    expected = _brute_path_sum(net, p, bias) ** (1 / p)
    assert path_norm(net, p, bias=bias) == pytest.approx(expected, rel=1e-12)


def test_path_norm_conv_equals_unrolled_dense():
    """A conv layer is a dense layer with shared weights: path norms of the unrolled net agree."""
    gen = torch.Generator().manual_seed(1)
    conv = nn.Conv1d(2, 3, 3, stride=2, padding=1).double()
    head = nn.Linear(3 * 3, 2).double()
    with torch.no_grad():
        for prm in list(conv.parameters()) + list(head.parameters()):
            prm.copy_(torch.randn(prm.shape, generator=gen, dtype=prm.dtype))
    net = nn.Sequential(conv, nn.ReLU(), nn.Flatten(), head)
    dense_w = torch.func.jacrev(lambda x: torch.nn.functional.conv1d(
        x[None], conv.weight, None, stride=2, padding=1).flatten())(torch.zeros(2, 5, dtype=torch.float64))
    dense = nn.Linear(10, 9).double()
    with torch.no_grad():
        dense.weight.copy_(dense_w.reshape(9, 10))
        dense.bias.copy_(conv.bias.repeat_interleave(3))
    unrolled = nn.Sequential(dense, nn.ReLU(), head)
    x = torch.randn(4, 2, 5, generator=gen, dtype=torch.float64)
    assert torch.allclose(unrolled(x.flatten(1)), net(x))
    for p in (1, 2):
        assert path_norm(net, p, input_shape=(2, 5)) == pytest.approx(
            _brute_path_sum(unrolled, p, True) ** (1 / p), rel=1e-12)
    with pytest.raises(NNGaugeError, match="input_shape"):
        path_norm(net, 2)


def test_margin_by_hand():
    scores = torch.tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 2.5], [1.0, 1.0, 4.0], [0.0, 5.0, 2.0]])
    net = nn.Identity()
    labels = torch.tensor([0, 1, 2, 1])
    # margins: 3-1 = 2, 2-2.5 = -0.5, 4-1 = 3, 5-2 = 3
    result = margin(net, scores, labels, percentile=30)  # k = ceil(0.3 * 4) = 2
    assert result.margins.tolist() == [2.0, -0.5, 3.0, 3.0]
    assert result.margin == 2.0 and result.hard_margin == -0.5
    assert margin(net, scores, labels, percentile=0).margin == -0.5
    assert margin(net, (scores, labels), percentile=50).margin == 2.0  # k = 2
    assert result.train_error == 0.25 and result.n_classes == 3


def _rescaled(net, unit, c):
    """Multiply a hidden unit's incoming weights (and bias) by c, outgoing by 1/c."""
    out = _net([3, 4, 3, 2], torch.Generator())
    out.load_state_dict(net.state_dict())
    with torch.no_grad():
        out[0].weight[unit] *= c
        out[0].bias[unit] *= c
        out[2].weight[:, unit] /= c
    return out


def test_node_rescaling_invariance():
    gen = torch.Generator().manual_seed(2)
    net = _net([3, 4, 3, 2], gen)
    scaled = _rescaled(net, unit=1, c=7.0)
    x = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    y = net(x).argmax(1)
    assert torch.allclose(net(x), scaled(x), atol=1e-12)
    for p in (1, 2, 3):
        assert path_norm(scaled, p) == pytest.approx(path_norm(net, p), rel=1e-12)
    assert np.allclose(margin(net, x, y).margins, margin(scaled, x, y).margins)
    a, b = capacity(net, x, y), capacity(scaled, x, y)
    assert a.margin > 0
    assert a.l1_path == pytest.approx(b.l1_path, rel=1e-10)
    assert a.l2_path == pytest.approx(b.l2_path, rel=1e-10)
    assert a.l2 != pytest.approx(b.l2, rel=1e-3)  # the Frobenius product is not invariant


def test_capacity_formulas():
    gen = torch.Generator().manual_seed(3)
    net = _net([4, 5, 3], gen, bias=False)
    x = torch.randn(40, 4, generator=gen, dtype=torch.float64)
    y = net(x).argmax(1)
    res = capacity(net, x, y, percentile=10, bias=False)
    gamma = res.margin
    ws = [net[0].weight.detach().numpy(), net[2].weight.detach().numpy()]
    scores = net(x).detach().numpy()
    other = np.where(np.eye(3)[y.numpy()] > 0, -np.inf, scores).max(1)
    marg = np.sort(scores[np.arange(40), y.numpy()] - other)
    assert gamma == pytest.approx(marg[math.ceil(0.1 * 40) - 1])
    fro = [np.linalg.norm(w) for w in ws]
    spec = [np.linalg.svd(w, compute_uv=False)[0] for w in ws]
    l1 = _brute_path_sum(net, 1, False)
    l2sq = _brute_path_sum(net, 2, False)
    assert res.l2 == pytest.approx(np.prod([4 * f**2 for f in fro]) / gamma**2, rel=1e-10)
    assert res["l2"].plain == pytest.approx(np.prod([f**2 for f in fro]) / gamma**2, rel=1e-10)
    assert res.l1_path == pytest.approx(16 * l1**2 / gamma**2, rel=1e-10)
    assert res.l2_path == pytest.approx((4 * 5) * (4 * 3) * l2sq / gamma**2, rel=1e-10)
    assert res["l2_path"].plain == pytest.approx(l2sq / gamma**2, rel=1e-10)
    assert res.spectral == pytest.approx(5 * 3 * spec[0]**2 * spec[1]**2 / gamma**2, rel=1e-10)
    assert res["spectral"].log10_capacity == pytest.approx(math.log10(res.spectral))
    assert res.lipschitz_l2 == pytest.approx(spec[0] * spec[1])
    l1inf = [np.abs(w).sum(1).max() for w in ws]
    assert res.lipschitz_linf == pytest.approx(l1inf[0] * l1inf[1])
    assert res.log10_lipschitz_capacity_l2 == pytest.approx(4 * math.log10(spec[0] * spec[1] / gamma))
    row = res.layers[0]
    assert (row.units, row.fan_in) == (5, 4)
    assert row.l2_inf == pytest.approx(np.linalg.norm(ws[0], axis=1).max())
    assert row.l1_inf == pytest.approx(l1inf[0])
    # the (spectral) l2 Lipschitz bound really bounds the network's input gradient norms
    jac = torch.func.vmap(torch.func.jacrev(net))(x)
    assert float(torch.linalg.matrix_norm(jac.detach(), ord=2).max()) <= res.lipschitz_l2 + 1e-9
    assert len(res.to_frame()) == 2 and res.to_dict()["measures"][0]["name"] == "l2"


def test_capacity_batchnorm_model_folds_first():
    gen = torch.Generator().manual_seed(4)
    net = mlp(4, 8, 3, 3, norm="batch", generator=gen, dtype=torch.float64)
    net(torch.randn(64, 4, generator=gen, dtype=torch.float64) + 0.5)
    net.eval()
    x = torch.randn(30, 4, generator=gen, dtype=torch.float64)
    y = net(x).argmax(1)
    from nngauge.measures.generalization._fold import fold_batchnorm

    a, b = capacity(net, x, y), capacity(fold_batchnorm(net), x, y)
    assert a.l2 == pytest.approx(b.l2) and a.l1_path_norm == pytest.approx(b.l1_path_norm)
    assert isinstance(net.layers[0].norm, nn.BatchNorm1d)


def test_capacity_non_positive_margin_is_nan_and_says_why():
    """Issue "the first hour of a new user": a capacity at initialization was NaN without a
    word. A margin <= 0 leaves every capacity over margin undefined; the call warns, each NaN
    field says why in ``undefined``, and the norms that do not involve the margin stay."""
    gen = torch.Generator().manual_seed(5)
    net = _net([3, 4, 2], gen)
    x = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    y = 1 - net(x).argmax(1)  # every point misclassified
    with pytest.warns(UserWarning, match=r"capacity\(\): the margin .* <= 0.*misclassifies "
                      r"100% .*undefined.*trained network") as caught:
        res = capacity(net, x, y)
    assert caught[0].filename == __file__  # the caller's line, through every decorator
    assert res.margin < 0
    for name in ("l2", "l1_path", "l2_path", "spectral", "log10_lipschitz_capacity_linf",
                 "log10_lipschitz_capacity_l2"):
        assert math.isnan(getattr(res, name)), name
        assert "margin" in res.undefined[name] and "<= 0" in res.undefined[name]
    assert all(math.isnan(m.capacity) and math.isnan(m.plain) for m in res.measures)
    for name in ("l1_path_norm", "l2_path_norm", "lipschitz_linf", "lipschitz_l2"):
        assert math.isfinite(getattr(res, name)) and name not in res.undefined
    assert res.to_dict()["undefined"]["l2"] == res.undefined["l2"]


def test_capacity_negative_margin_names_the_percentile_that_would_be_positive():
    gen = torch.Generator().manual_seed(5)
    net = _net([3, 4, 2], gen)
    x = torch.randn(40, 3, generator=gen, dtype=torch.float64)
    y = net(x).argmax(1)
    y[:8] = 1 - y[:8]  # 20% misclassified: the 5th-percentile margin is negative
    with pytest.warns(UserWarning, match="percentile above 20") as caught:
        res = capacity(net, x, y)
    assert len(caught) == 1 and res.margin < 0 and math.isnan(res.l2)
    fitted = capacity(net, x, y, percentile=25)  # above the error rate: defined
    assert fitted.margin > 0 and math.isfinite(fitted.l2) and not fitted.undefined


def test_capacity_with_a_positive_margin_does_not_warn():
    gen = torch.Generator().manual_seed(5)
    net = _net([3, 4, 2], gen)
    x = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = capacity(net, x, net(x).argmax(1))
    assert res.margin > 0 and math.isfinite(res.l2) and res.undefined == {}


def test_capacity_keeps_the_path_reason_beside_the_margin_reason():
    gen = torch.Generator().manual_seed(5)
    net = nn.Sequential(nn.Linear(3, 4), nn.Hardtanh(), nn.Linear(4, 2)).double()
    x = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    y = 1 - net(x).argmax(1)
    with pytest.warns(UserWarning, match="margin"):
        res = capacity(net, x, y)
    assert "margin" in res.undefined["l1_path"] and "margin" in res.undefined["l2"]
    assert res.undefined["l1_path"] != res.undefined["l2"]  # also why paths do not apply


def test_bad_input():
    gen = torch.Generator().manual_seed(6)
    net = _net([3, 4, 2], gen)
    x = torch.randn(10, 3, dtype=torch.float64)
    with pytest.raises(NNGaugeError, match=r"expected labels in \[0, 1\].*got.*Fix"):
        margin(net, x, torch.full((10,), 2))
    with pytest.raises(NNGaugeError, match="n_classes >= 2.*not a regressor"):
        margin(_net([3, 4, 1], gen), x, torch.zeros(10, dtype=torch.long))
    with pytest.raises(NNGaugeError, match="empty data"):
        margin(net, torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, dtype=torch.long))
    with pytest.raises(NNGaugeError, match="integer class labels"):
        margin(net, x, torch.zeros(10))
    with pytest.raises(NNGaugeError, match="labels"):
        margin(net, x)
    with pytest.raises(NNGaugeError, match="percentile"):
        margin(net, x, torch.zeros(10, dtype=torch.long), percentile=100)
    with pytest.raises(NNGaugeError, match="p a finite number > 0"):
        path_norm(net, 0)
    with pytest.raises(NNGaugeError, match="MaxPool"):
        path_norm(nn.Sequential(nn.Conv1d(1, 1, 2), nn.MaxPool1d(2)), 1, input_shape=(1, 4))
    with pytest.raises(NNGaugeError, match="LayerNorm.*statistics"):  # skips: see test_paths
        path_norm(mlp(3, 4, 3, 2, norm="layer"), 2)
    with pytest.raises(NNGaugeError, match="Tanh"):
        path_norm(nn.Sequential(nn.Linear(2, 2), nn.Tanh()), 2)


def test_random_labels_and_confusion_set():
    from nngauge.data._labels import confusion_set, random_labels

    y = torch.arange(100) % 5
    new = random_labels(y, 0.3, generator=torch.Generator().manual_seed(0))
    assert new.dtype == y.dtype and torch.equal(y, torch.arange(100) % 5)  # input untouched
    assert 0 < int((new != y).sum()) <= 30 and int(new.max()) < 5
    same = random_labels(y, 0.3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(new, same)
    assert torch.equal(random_labels(y, 0.0), y)
    arr = random_labels(y.numpy(), 1.0, n_classes=7, generator=torch.Generator().manual_seed(1))
    assert isinstance(arr, np.ndarray) and arr.max() < 7
    x = torch.randn(100, 3)
    s = confusion_set(x, y, n_train=60, n_confusion=30, generator=torch.Generator().manual_seed(2))
    assert s.inputs.shape == (90, 3) and int(s.is_confusion.sum()) == 30
    rows = {tuple(r.tolist()) for r in s.train_inputs}
    assert not rows & {tuple(r.tolist()) for r in s.confusion_inputs}  # disjoint
    assert torch.equal(s.labels[:60], s.train_labels)
    index = {tuple(r.tolist()): i for i, r in enumerate(x)}
    assert all(int(y[index[tuple(r.tolist())]]) == int(t) for r, t in zip(s.train_inputs, s.train_labels))
    with pytest.raises(NNGaugeError, match="fraction"):
        random_labels(y, 1.5)
    with pytest.raises(NNGaugeError, match="integer labels"):
        random_labels(y.float(), 0.5)
    with pytest.raises(NNGaugeError, match="n_train"):
        confusion_set(x, y, n_train=90, n_confusion=20)


@pytest.mark.slow
def test_random_labels_need_more_capacity():
    """Figure 1: a network fitting random labels has higher norm/margin capacity than one
    fitting the true labels (same data, architecture and training)."""
    from nngauge.data import digits
    from nngauge.data._labels import random_labels

    data = digits()
    x = data.inputs[:300] / 16.0
    y_true = data.labels[:300]
    y_rand = random_labels(y_true, 1.0, generator=torch.Generator().manual_seed(0))
    results = {}
    for name, y in (("true", y_true), ("random", y_rand)):
        torch.manual_seed(0)
        net = mlp(64, 256, 2, 10, generator=torch.Generator().manual_seed(1))
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for _ in range(1500):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            if loss.item() < 1e-3:
                break
        assert (net(x).argmax(1) == y).all()
        results[name] = capacity(net, x, y)
    for key in ("l2", "l1_path", "l2_path", "spectral"):
        assert results["random"][key].plain > results["true"][key].plain


# ------------------------------------------- networks that are not sums over paths (issue 34)


class _Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, attn_mask=None, is_causal=False):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return self.proj(mixed)


class _Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), _Attention(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1, self.act, self.fc2 = nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)

    def forward(self, x, attn_mask=None, is_causal=False):
        x = x + self.attn(self.norm1(x), attn_mask, is_causal)
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class _ViT(nn.Module):
    """timm-style: patches by a strided conv, class token, position embedding, one pre-norm
    block; forward(x, attn_mask=None, is_causal=False) as timm's."""

    def __init__(self, dim=8, classes=4):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.cls_token = nn.Parameter(0.1 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.1 * torch.randn(1, 5, dim))
        self.block, self.norm, self.head = _Block(dim), nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x, attn_mask=None, is_causal=False):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), tokens], dim=1)
        tokens = self.block(tokens + self.pos_embed, attn_mask, is_causal)
        return self.head(self.norm(tokens)[:, 0])


class _GPT(nn.Module):
    """GPT-style decoder on token ids: causal attention, head tied to the token embedding."""

    def __init__(self, vocab=11, seq=6, dim=8):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Parameter(0.1 * torch.randn(1, seq, dim))
        self.block, self.ln_f = _Block(dim), nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.block(self.wte(ids) + self.wpe[:, :ids.shape[1]], is_causal=True)
        return F.linear(self.ln_f(h), self.wte.weight)


def _by_hand(logits, labels, matrices, percentile=5):
    """gamma (the epsilon-margin, every position a point) and the log10 of prod ||W||_F^2 /
    gamma^2 and prod ||W||_2^2 / gamma^2 over the given weight matrices."""
    scores = logits.detach().double().reshape(-1, logits.shape[-1])
    y = labels.reshape(-1, 1)
    margins = scores.gather(1, y)[:, 0] - scores.scatter(1, y, -math.inf).max(1).values
    gamma = float(margins.sort().values[max(1, math.ceil(percentile / 100 * len(margins))) - 1])
    log_g2 = 2 * math.log(gamma)
    w = [m.detach().double().reshape(m.shape[0], -1) for m in matrices]
    fro = sum(2 * math.log(float(torch.linalg.matrix_norm(m))) for m in w) - log_g2
    spec = sum(2 * math.log(float(torch.linalg.matrix_norm(m, ord=2))) for m in w) - log_g2
    return gamma, fro / math.log(10), spec / math.log(10)


@pytest.mark.parametrize("kind", ["vit", "gpt"])
def test_capacity_l2_and_spectral_of_transformers_equal_the_weight_matrices(kind):
    """Issue 34: capacity refused ViTs ("forward() with 3 arguments", then LayerNorm,
    attention). Its l2 and spectral capacities read only the weights: on a timm-style ViT and a
    GPT on token ids they equal prod ||W_i||^2 / gamma^2 over every Linear / Conv weight (the
    strided patch convolution's operator norm is its kernel matrix's, its patches being
    disjoint; the GPT's head is the tied embedding); the path norms and Lipschitz bounds are
    NaN with the nodes that make them undefined."""
    torch.manual_seed(0)
    if kind == "vit":
        net = _ViT().eval()
        x = torch.randn(40, 3, 8, 8, generator=torch.Generator().manual_seed(1))
        b = net.block
        matrices = [net.patch.weight, b.attn.qkv.weight, b.attn.proj.weight, b.fc1.weight,
                    b.fc2.weight, net.head.weight]
    else:
        net = _GPT().eval()
        x = torch.randint(0, 11, (12, 6), generator=torch.Generator().manual_seed(1))
        b = net.block
        matrices = [b.attn.qkv.weight, b.attn.proj.weight, b.fc1.weight, b.fc2.weight,
                    net.wte.weight]
    with torch.no_grad():
        logits = net(x)
    y = logits.argmax(-1)
    gamma, log_fro, log_spec = _by_hand(logits, y, matrices)
    result = capacity(net, x, y)
    assert result.margin == pytest.approx(gamma, rel=1e-5) and gamma > 0
    assert result.depth == len(matrices)
    assert result["l2"].log10_plain == pytest.approx(log_fro, abs=1e-6)
    assert result["spectral"].log10_plain == pytest.approx(log_spec, abs=1e-5)
    assert result["l2"].log10_capacity == pytest.approx(
        log_fro + len(matrices) * math.log10(4), abs=1e-6)
    for name in ("l1_path", "l2_path", "l1_path_norm", "l2_path_norm", "lipschitz_l2",
                 "lipschitz_linf", "log10_lipschitz_capacity_l2"):
        assert math.isnan(getattr(result, name)), name
    assert "norm1 (LayerNorm)" in result.undefined["l1_path_norm"]
    assert "norm1 (LayerNorm)" in result.undefined["lipschitz_l2"]
    assert "1-Lipschitz" in result.undefined["lipschitz_l2"]
    assert {"l2", "spectral"}.isdisjoint(result.undefined)
    left_out = "cls_token, pos_embed" if kind == "vit" else "wpe ("  # wte is the head's
    assert any("left out of the products: " + left_out in note for note in result.notes)
    if kind == "gpt":
        assert "wte (Embedding)" in result.undefined["l2_path"]
    else:
        with pytest.raises(NNGaugeError, match="norm1 \\(LayerNorm\\).*Fix"):
            path_norm(net, input_shape=(3, 8, 8))


def test_capacity_names_the_weights_it_leaves_out():
    """An LSTM's own weights are no Linear / Conv layer: the products run over the head
    alone, and the notes say which weights they leave out (a network of Linear layers: none)."""
    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.head = nn.LSTM(3, 5, batch_first=True), nn.Linear(5, 2)

        def forward(self, x):
            return self.head(self.lstm(x)[0][:, -1])

    torch.manual_seed(0)
    net = Recurrent()
    x = torch.randn(16, 4, 3, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = net(x).argmax(1)
    result = capacity(net, x, y, percentile=0)
    assert result.depth == 1 and result.layers[0].name == "head"
    head = float(net.head.weight.detach().norm())
    assert result.layers[0].frobenius == pytest.approx(head, rel=1e-6)
    assert any("left out of the products: lstm.weight_ih_l0, lstm.weight_hh_l0 " in note
               for note in result.notes), result.notes
    mlp_net = _net([3, 4, 2], torch.Generator().manual_seed(5))
    xs = torch.randn(20, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    plain = capacity(mlp_net, xs, mlp_net(xs).argmax(1))
    assert not any("left out" in note for note in plain.notes)


class _HFConv1D(nn.Module):
    """Hugging Face's Conv1D: weight stored (in, out), applied with addmm."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) / n_in**0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(
            *x.shape[:-1], -1)


class _Twin(nn.Module):
    """conv -> tanh -> flatten -> Conv1D -> tanh -> Linear; ``guarded`` adds a branch on a
    tensor's value (torch.fx cannot trace it), ``norm`` a batchnorm after the convolution."""

    def __init__(self, guarded, norm=False):
        super().__init__()
        self.guarded = guarded
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.norm = nn.BatchNorm2d(3) if norm else nn.Identity()
        self.fc1, self.fc2 = _HFConv1D(75, 10), nn.Linear(10, 4)

    def forward(self, x):
        if self.guarded and bool(x.abs().sum() > 1e12):
            raise ValueError("inputs out of range")
        h = torch.tanh(self.norm(self.conv(x))).flatten(1)
        return self.fc2(torch.tanh(self.fc1(h)))


def test_capacity_of_a_model_fx_cannot_trace_reads_its_weight_modules():
    """Issue 34: capacity refused any model torch.fx could not trace (a GPT whose forward
    checks its sequence length), though its l2 and spectral capacities read the weights alone.
    Such a model (without batchnorm to fold) is measured from the weight modules its forward
    calls: the same numbers as its traceable twin (a Conv2d's operator norm, Hugging Face's
    Conv1D with its weight stored (in, out)), the path norms and Lipschitz bounds NaN saying
    the graph is missing; with a batchnorm it is refused, naming the tracing."""
    torch.manual_seed(0)
    plain = _Twin(guarded=False).eval()
    guarded = _Twin(guarded=True).eval()
    guarded.load_state_dict(plain.state_dict())
    x = torch.randn(60, 2, 5, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = plain(x).argmax(1)
    twin, result = capacity(plain, x, y), capacity(guarded, x, y)
    assert [r.name for r in result.layers] == ["conv", "fc1", "fc2"]
    assert [(r.units, r.fan_in) for r in result.layers] == [(3, 18), (10, 75), (4, 10)]
    assert result.margin == pytest.approx(twin.margin) and result.margin > 0
    conv = twin.layers[0]  # the traced twin's operator norm of the convolution
    assert conv.name == "conv" and result.layers[0].spectral == pytest.approx(conv.spectral)
    dense = [guarded.fc1.weight.detach().double().T, guarded.fc2.weight.detach().double()]
    fro = [float(guarded.conv.weight.detach().double().norm())] + [
        float(w.norm()) for w in dense]
    spec = [conv.spectral] + [float(torch.linalg.matrix_norm(w, ord=2)) for w in dense]
    gamma2 = result.margin**2
    assert result.l2 == pytest.approx(math.prod(4 * f**2 for f in fro) / gamma2, rel=1e-9)
    assert result.spectral == pytest.approx(
        3 * 10 * 4 * math.prod(s**2 for s in spec) / gamma2, rel=1e-6)
    for name in ("l1_path", "l2_path", "l1_path_norm", "lipschitz_l2", "lipschitz_linf"):
        assert math.isnan(getattr(result, name)), name
        assert "could not be traced" in result.undefined[name]
    assert any(note.startswith("not traced (tracing failed") for note in result.notes)
    with pytest.raises(NNGaugeError, match="torch.fx can trace"):
        capacity(_Twin(guarded=True, norm=True).eval(), x, y)
