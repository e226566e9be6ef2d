"""hessian: top eigenvalues, trace, density moments, Gauss-Newton and per-layer blocks equal
those of the exact matrices (torch.autograd.functional) on small float64 networks; per-batch
eigenvalues, eigenvectors, determinism, the model left as found, bad inputs."""

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.curvature import CurvatureOperator, functional_model
from nngauge.errors import NNGaugeError
from nngauge.measures.curvature import HessianResult, hessian
from nngauge.training._flatten import columns

EXACT = {"tol": 1e-9, "n_iter": 400}


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3)).double()


def _conv(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.Tanh(), nn.Conv2d(4, 4, 3), nn.Tanh(),
                         nn.Flatten(), nn.Linear(16, 3)).double()


def _batchnorm(seed=0):
    """Batchnorm with running statistics of its own, left in train mode."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.Tanh(),
                          nn.Linear(12, 3)).double()
    with torch.no_grad():
        for _ in range(3):
            model(2 * torch.randn(32, 6, dtype=torch.float64) + 1)
    return model


def _data(shape=(6,), n=40, seed=1):
    gen = _gen(seed)
    return (torch.randn(n, *shape, generator=gen, dtype=torch.float64),
            torch.randint(0, 3, (n,), generator=gen))


def _flat_function(model, fn):
    """fn(theta) as a function of the flattened trainable parameters, and their value."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def of(flat):
        theta, offset = {}, 0
        for n, p in named:
            theta[n] = flat[offset:offset + p.numel()].view(p.shape)
            offset += p.numel()
        return fn(theta)

    return of, torch.cat([p.detach().flatten() for _, p in named])


def _exact_hessian(model, x, y, loss=F.cross_entropy, train=False):
    model = copy.deepcopy(model).train(train)
    skip = {f"{n}.{b}": None for n, m in model.named_modules() if train and
            isinstance(m, nn.BatchNorm1d) for b in ("running_mean", "running_var",
                                                    "num_batches_tracked")}
    f, flat = _flat_function(model, lambda th: loss(functional_call(model, {**th, **skip},
                                                                    (x,)), y))
    return torch.autograd.functional.hessian(f, flat)


def _exact_ggn(model, x, y, loss=F.cross_entropy):
    model = copy.deepcopy(model).eval()
    f, flat = _flat_function(model, lambda th: functional_call(model, th, (x,)).reshape(-1))
    jac = torch.autograd.functional.jacobian(f, flat)
    out = f(flat).detach()
    h_loss = torch.autograd.functional.hessian(
        lambda o: loss(o.view(len(x), -1), y), out)
    return jac.T @ h_loss @ jac


def _top(matrix, k):
    return torch.linalg.eigvalsh(matrix).flip(0)[:k].numpy()


def _state(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {m: m.training for m in model.modules()},
            {n: p.requires_grad for n, p in model.named_parameters()},
            [len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
             for m in model.modules()])


def _same_state(model, state):
    tensors, modes, grads, hooks = state
    return (all(torch.equal(tensors[k], v) for k, v in model.state_dict().items())
            and all(m.training == modes[m] for m in model.modules())
            and all(p.requires_grad == grads[n] for n, p in model.named_parameters())
            and hooks == _state(model)[3])


@pytest.mark.parametrize("build, shape", [(_mlp, (6,)), (_conv, (1, 6, 6)),
                                          (_batchnorm, (6,))], ids=["mlp", "conv", "batchnorm"])
def test_top_k_and_trace_equal_the_exact_hessian(build, shape):
    model, (x, y) = build(), _data(shape)
    state = _state(model)
    n = sum(p.numel() for p in model.parameters())
    r = hessian(model, (x, y), top_k=3, batch_size=len(y), n_probes=3 * n, generator=_gen(),
                **EXACT)
    exact = _exact_hessian(model, x, y)
    np.testing.assert_allclose(r.eigenvalues, _top(exact, 3), rtol=1e-6)
    assert r.trace == pytest.approx(float(exact.trace()), rel=1e-6)
    assert r.trace_stderr == 0.0 and r.n_probes == 2 * n and r.n_params == n
    assert r.converged and max(r.residuals) < 1e-7 * r.eigenvalues[0]
    assert r.n_samples == len(y) and r.n_batches == 1 and r.eigenvalues_ci is None
    assert r.mode.norm_mode == ("eval" if build is _batchnorm else "no batch statistics")
    assert _same_state(model, state)


def test_density_moments_equal_those_of_the_exact_hessian():
    """n orthonormal probes make the quadrature's moments (p < 2 * steps) exact."""
    model, (x, y) = _mlp(), _data()
    n = sum(p.numel() for p in model.parameters())
    r = hessian(model, (x, y), trace=False, density=True, density_probes=n, n_iter=3,
                batch_size=len(y), generator=_gen())
    exact = _exact_hessian(model, x, y)
    assert r.density.nodes.shape == (n, 3)
    np.testing.assert_allclose(r.density.weights.sum(1), 1.0, rtol=1e-12)
    assert r.density.moment(0) == pytest.approx(1.0, rel=1e-12)
    assert r.density.moment(1) == pytest.approx(float(exact.trace()) / n, rel=1e-6)
    assert r.density.moment(2) == pytest.approx(float((exact**2).sum()) / n, rel=1e-6)
    grid, values = r.density.evaluate(points=4000)
    assert np.trapezoid(values, grid) == pytest.approx(1.0, rel=1e-3)


def test_density_probe_moments_are_unbiased_with_few_probes():
    model, (x, y) = _mlp(), _data()
    r = hessian(model, (x, y), trace=False, density=True, density_probes=6, n_iter=20,
                batch_size=len(y), generator=_gen())
    exact = _exact_hessian(model, x, y)
    assert r.density.moment(0) == pytest.approx(1.0, rel=1e-12)
    assert r.density.nodes.max() == pytest.approx(float(_top(exact, 1)[0]), rel=1e-3)
    first = (r.density.weights * r.density.nodes).sum(1)
    stderr = first.std(ddof=1) / np.sqrt(len(first))
    assert abs(first.mean() - float(exact.trace()) / len(exact)) < 4 * stderr


@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
def test_ggn_equals_jacobian_transpose_loss_hessian_jacobian(loss):
    model, (x, y) = _mlp(), _data()
    n = sum(p.numel() for p in model.parameters())
    r = hessian(model, (x, y), loss=loss, kind="ggn", top_k=3, batch_size=16, n_probes=3 * n,
                generator=_gen(), **EXACT)
    fn = F.cross_entropy if loss == "cross_entropy" else (
        lambda o, t: F.mse_loss(o, F.one_hot(t, 3).double()))
    exact = _exact_ggn(model, x, y, fn)
    np.testing.assert_allclose(r.eigenvalues, _top(exact, 3), rtol=1e-6)
    assert r.trace == pytest.approx(float(exact.trace()), rel=1e-6)
    assert r.kind == "ggn" and r.n_batches == 3


def test_per_layer_rows_equal_the_exact_diagonal_blocks():
    model, (x, y) = _mlp(), _data()
    exact = _exact_hessian(model, x, y)
    r = hessian(model, (x, y), per_layer=True, batch_size=len(y), n_probes=3 * 272,
                generator=_gen(), **EXACT)
    assert [row.name for row in r.layers] == ["0", "2", "4"]
    start = 0
    for row in r.layers:
        block = exact[start:start + row.n_params, start:start + row.n_params]
        start += row.n_params
        assert row.eigenvalue == pytest.approx(float(_top(block, 1)[0]), rel=1e-6)
        assert row.trace == pytest.approx(float(block.trace()), rel=1e-6)
        assert row.converged
    assert sum(row.trace for row in r.layers) == pytest.approx(float(exact.trace()), rel=1e-6)
    assert len(r.to_frame()) == 3


def test_each_batch_has_its_own_top_eigenvalues_and_an_interval():
    model, (x, y) = _mlp(), _data(n=48)
    r = hessian(model, (x, y), top_k=2, batch_size=16, trace=False, generator=_gen(), **EXACT)
    per_batch = np.array([_top(_exact_hessian(model, x[i:i + 16], y[i:i + 16]), 2)
                          for i in range(0, 48, 16)])
    np.testing.assert_allclose(r.batch_eigenvalues, per_batch, rtol=1e-6)
    np.testing.assert_allclose(r.batch_eigenvalues_mean, per_batch.mean(0), rtol=1e-6)
    for (low, high), mean in zip(r.eigenvalues_ci, per_batch.mean(0)):
        assert low < mean < high
    np.testing.assert_allclose(r.eigenvalues, _top(_exact_hessian(model, x, y), 2), rtol=1e-6)
    assert r.n_batches == 3 and r.n_samples == 48


def test_per_batch_false_skips_the_batch_runs_and_keeps_the_top_k():
    """per_batch=False: the same top-k of all the data from fewer products, no interval."""
    model, (x, y) = _mlp(), _data(n=48)
    full = hessian(model, (x, y), top_k=2, batch_size=16, trace=False, generator=_gen(), **EXACT)
    lean = hessian(model, (x, y), top_k=2, batch_size=16, trace=False, per_batch=False,
                   generator=_gen(), **EXACT)
    np.testing.assert_allclose(lean.eigenvalues, full.eigenvalues, rtol=1e-6)
    assert lean.eigenvalues_ci is None and lean.batch_eigenvalues_mean is None
    assert lean.batch_eigenvalues.shape == (0, 2)
    assert lean.n_products < full.n_products and lean.settings["per_batch"] is False


def test_eigenvectors_are_unit_eigenvectors_by_parameter():
    model, (x, y) = _mlp(), _data()
    r = hessian(model, (x, y), top_k=2, return_eigenvectors=True, trace=False,
                batch_size=len(y), generator=_gen(), **EXACT)
    exact = _exact_hessian(model, x, y)
    for value, vector in zip(r.eigenvalues, r.eigenvectors):
        assert {k: v.shape for k, v in vector.items()} == {
            k: p.shape for k, p in model.named_parameters()}
        flat = torch.cat([vector[k].flatten() for k, _ in model.named_parameters()])
        assert float(flat.norm()) == pytest.approx(1.0, rel=1e-12)
        assert float((exact @ flat - value * flat).norm()) < 1e-7 * value
    assert "eigenvectors" not in r.to_dict()


@pytest.mark.parametrize("method", ["auto", "hutch++", "hutchinson"])
def test_a_small_trace_budget_is_within_its_error_and_deterministic(method):
    model, (x, y) = _mlp(), _data()
    exact = float(_exact_hessian(model, x, y).trace())
    options = {"n_probes": 60, "batch_size": len(y), "trace_method": method, "per_layer": True}
    a = hessian(model, (x, y), generator=_gen(3), **options)
    b = hessian(model, (x, y), generator=_gen(3), **options)
    assert a.to_dict() == b.to_dict()
    assert a.trace_stderr > 0 and abs(a.trace - exact) < 5 * a.trace_stderr
    assert a.n_probes == 60 and a.settings["trace_method"] == method
    assert a.trace_method in ({"hutch++", "hutchinson"} if method == "auto" else {method})
    assert {row.trace_method for row in a.layers} <= {"hutch++", "hutchinson"}


def test_labels_keyword_dataset_and_chunking_give_the_same_result():
    model, (x, y) = _mlp(), _data()
    options = {"batch_size": 20, "n_probes": 30, "generator": None}
    pair = hessian(model, (x, y), **{**options, "generator": _gen()})
    keyword = hessian(model, x, y, **{**options, "generator": _gen()})
    dataset = hessian(model, torch.utils.data.TensorDataset(x, y),
                      **{**options, "generator": _gen()}, chunk_size=3)
    assert pair.eigenvalues == keyword.eigenvalues
    np.testing.assert_allclose(dataset.eigenvalues, pair.eigenvalues, rtol=1e-10)
    assert dataset.trace == pytest.approx(pair.trace, rel=1e-10)
    first = hessian(model, (x, y), **{**options, "generator": _gen()}, n_batches=1)
    assert first.n_samples == 20


def test_only_trainable_parameters_and_train_mode_batchnorm():
    model, (x, y) = _batchnorm(), _data()
    model[0].weight.requires_grad_(False)
    state = _state(model)
    r = hessian(model, (x, y), top_k=2, norm_mode="train", batch_size=len(y), n_probes=3 * 75,
                generator=_gen(), **EXACT)
    exact = _exact_hessian(model, x, y, train=True)
    assert r.n_params == len(exact) == 12 + 24 + 39
    np.testing.assert_allclose(r.eigenvalues, _top(exact, 2), rtol=1e-6)
    assert r.trace == pytest.approx(float(exact.trace()), rel=1e-6)
    assert r.mode.norm_mode == "train"
    assert _same_state(model, state)


@pytest.mark.parametrize("kind", ["hessian", "ggn"])
@pytest.mark.parametrize("retain", [True, False], ids=["retained", "fresh"])
def test_retained_and_fresh_products_equal_the_exact_matrix(kind, retain):
    """Both ways of differentiating a batch (kept graph, forward-over-reverse afresh) give C V
    for a chunk of vectors, batch by batch, in chunks of any size."""
    model, (x, y) = _mlp(), _data()
    adapter = ModelAdapter(model)
    params = {n: p.detach() for n, p in model.named_parameters()}
    op = CurvatureOperator(functional_model(model, adapter.select), F.cross_entropy, params,
                           [(x[:25], y[:25]), (x[25:], y[25:])], kind=kind, chunk_size=4,
                           retain=retain)
    vectors = torch.randn(9, op.dim, generator=_gen(), dtype=torch.float64)
    exact = _exact_hessian(model, x, y) if kind == "hessian" else _exact_ggn(model, x, y)
    torch.testing.assert_close(op.apply(vectors), vectors @ exact, rtol=1e-10, atol=1e-12)
    assert op.products == 9 and bool(op._shared.retained) == retain


class _Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(3, 4, batch_first=True), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def test_model_without_forward_mode_derivatives_falls_back_to_reverse_mode():
    torch.manual_seed(0)
    model = _Recurrent()
    x, y = torch.randn(6, 5, 3), torch.randint(0, 2, (6,))
    exact = _exact_hessian(model, x, y)
    r = hessian(model, (x, y), trace=False, generator=_gen(), tol=1e-6)
    assert r.eigenvalues[0] == pytest.approx(float(_top(exact, 1)[0]), rel=1e-4)
    notes = []
    params = {n: p.detach() for n, p in model.named_parameters()}
    op = CurvatureOperator(functional_model(model, lambda out: out), F.cross_entropy, params,
                           [(x, y)], retain=False, note=notes.append)
    vectors = torch.randn(3, op.dim, generator=_gen())
    torch.testing.assert_close(op.apply(vectors), vectors @ exact, rtol=1e-4, atol=1e-5)
    assert len(notes) == 1 and "reverse-over-reverse" in notes[0]


def test_custom_loss_and_output_selector():
    class Dict(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def forward(self, x):
            return {"logits": self.net(x), "other": x}

    model, (x, y) = Dict(), _data()
    r = hessian(model, (x, y), loss=F.cross_entropy, output="logits", batch_size=len(y),
                trace=False, generator=_gen(), **EXACT)
    exact = _exact_hessian(model.net, x, y)
    assert r.eigenvalues[0] == pytest.approx(float(_top(exact, 1)[0]), rel=1e-6)
    assert r.loss == "cross_entropy" and "'logits'" in r.mode.output


def test_results_serialize_flatten_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    model, (x, y) = _mlp(), _data()
    r = hessian(model, (x, y), top_k=2, density=True, density_probes=2, n_iter=10,
                batch_size=20, n_probes=9, generator=_gen())
    assert isinstance(r, HessianResult)
    text = json.dumps(r.to_dict())
    assert "eigenvalues_ci" in text and "nodes" in r.to_dict()["density"]
    flat = columns("hessian", r)
    assert flat["hessian/eigenvalues/0"] == r.eigenvalues[0]
    assert flat["hessian/trace"] == r.trace
    assert len(r.to_frame()) == 1
    ax = r.plot()
    ax.figure.savefig(tmp_path / "density.png")
    without = hessian(model, (x, y), trace=False, n_iter=5)  # no density, no trace:
    bars = without.plot()  # the default plot, the top eigenvalues as labelled bars
    assert [t.get_text() for t in bars.get_xticklabels()] == [
        f"eigenvalues[{i}]" for i in range(len(without.eigenvalues))]
    assert [p.get_height() for p in bars.patches] == pytest.approx(list(without.eigenvalues))


def _no_params():
    return nn.Sequential(nn.Tanh())


def _frozen():
    model = _mlp()
    model.requires_grad_(False)
    return model


@pytest.mark.parametrize("build, call, match", [
    (_mlp, lambda m, x, y: hessian(m, x), "labelled data"),
    (_mlp, lambda m, x, y: hessian(m, (x, y + 3)), r"labels in \[0, 2\]"),
    (_mlp, lambda m, x, y: hessian(m, (x, y.double())), "integer class labels"),
    (_no_params, lambda m, x, y: hessian(m, (x, y)), "trainable parameters"),
    (_frozen, lambda m, x, y: hessian(m, (x, y)), "requires_grad"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), top_k=0), "top_k an integer >= 1"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), top_k=436), r"top_k <= .*\(435\)"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), kind="fisher"), "kind in"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), loss="hinge"), "loss in"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), y), "not both"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), n_probes=2), "n_probes an integer >= 3"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), top_k=5, n_iter=4), "n_iter >= top_k"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), tol=0), r"tol a number in \(0, 1\)"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), trace_method="hutch"), "trace_method in"),
    (_mlp, lambda m, x, y: hessian(m, (x, y), loss=lambda o, t: o), "scalar"),
])
def test_bad_inputs_raise_clear_errors(build, call, match):
    model, (x, y) = build(), _data()
    state = _state(model)
    with pytest.raises(NNGaugeError, match=match) as info:
        call(model, x, y)
    assert "expected" in str(info.value) and "Fix:" in str(info.value)
    assert _same_state(model, state)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet_small", "vit_small"])
def test_zoo_models_give_finite_values(name):
    """On the zoo ResNet (batchnorm) and ViT, hessian gives finite top eigenvalues, trace and
    per-batch eigenvalues over 2 batches of 4, and leaves the model's tensors, modes,
    requires_grad flags and hooks as it found them (a smoke test: no reference values)."""
    from nngauge.zoo import ZOO, sample_inputs, sample_labels

    entry = ZOO[name]
    model = entry.build(generator=0)
    state = _state(model)
    x, y = sample_inputs(entry, 8), sample_labels(entry, 8)
    r = hessian(model, (x, y), top_k=2, batch_size=4, n_probes=6, n_iter=8,
                generator=_gen())
    assert np.isfinite(r.eigenvalues).all() and np.isfinite(r.trace)
    assert np.isfinite(r.batch_eigenvalues).all() and r.n_batches == 2
    assert _same_state(model, state)
