"""jacobian_norm's exact operator norms (one forward-mode pass over the input basis for every
layer) against full Jacobians, against Lanczos, and the choice between the two."""

import copy

import pytest
import torch

import nngauge._internal.jacobian as jacobian_module
import nngauge.measures.propagation._jacobian as measure_module
from nngauge.errors import InvalidInputError
from nngauge.measures import jacobian_norm
from nngauge.nn import mlp
from nngauge.zoo import ZOO, sample_inputs

from jacobian_oracle import full_norms

EXACT = 1e-10


def assert_rows_equal_full(model, x, result, norm_mode):
    """Every row of ``result`` equals the full-Jacobian norm of its layer to EXACT (relative),
    states error 0 and convergence, and the result says the exact method ran."""
    assert result.op_method == "exact" and result.iterations == 0 and result.converged
    if norm_mode is not None:  # None: batchnorm as found, which the measure left unchanged
        model.train(norm_mode == "train")
    for row in result.layers:
        exact = full_norms(model, x, row.name, result.batch_coupled).sort().values
        got = torch.from_numpy(row.per_sample).sort().values  # batches are drawn shuffled
        assert row.error == 0.0 and row.converged, row.name
        torch.testing.assert_close(got, exact, rtol=EXACT, atol=0, msg=row.name)


def linear_layers(model):
    return [name for name, m in model.named_modules()
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))][:-1]


def test_exact_equals_the_full_jacobian_norms_of_an_mlp():
    """On a float64 MLP every layer's exact norm equals the SVD of its full per-sample
    Jacobian to 1e-10."""
    model = mlp(6, 16, 5, 3, activation="tanh",
                generator=torch.Generator().manual_seed(0)).double()
    x = torch.randn(9, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    result = jacobian_norm(model, x, layers=linear_layers(model), op_method="exact")
    assert len(result.layers) == 5
    assert_rows_equal_full(model, x, result, "eval")


def test_exact_in_sample_chunks_equals_one_chunk(monkeypatch):
    """A memory cap of one sample's Jacobians (9 chunks) gives the same norms as one chunk:
    the repeated-batch bookkeeping maps each tangent copy back to its sample."""
    model = mlp(6, 16, 3, 3, generator=torch.Generator().manual_seed(0)).double()
    x = torch.randn(9, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    layers = linear_layers(model)
    whole = jacobian_norm(model, x, layers=layers, op_method="exact")
    monkeypatch.setattr(measure_module, "EXACT_MEMORY", 6 * (2 * 16 + 3) * 8)
    calls = []
    monkeypatch.setattr(jacobian_module, "_top_singular",
                        lambda jac, top=jacobian_module._top_singular: calls.append(1) or top(jac))
    chunked = jacobian_norm(model, x, layers=layers, op_method="exact")
    assert len(calls) == 9 * 3  # one chunk per sample, three layers each
    for a, b in zip(whole.layers, chunked.layers):
        torch.testing.assert_close(torch.from_numpy(a.per_sample),
                                   torch.from_numpy(b.per_sample), rtol=1e-12, atol=0)


ZOO_CASES = [
    pytest.param("resnet_small", "eval", 4, id="resnet_small-eval"),
    pytest.param("resnet_small", "train", 4, id="resnet_small-train-coupled"),
    pytest.param("lstm", None, None, id="lstm"),
    pytest.param("elementwise_zoo", None, None, id="elementwise_zoo"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, norm_mode, crop", ZOO_CASES)
def test_exact_equals_the_full_jacobian_norms_of_zoo_models(name, norm_mode, crop):
    """On zoo models in float64 (a ResNet in eval mode and in train mode, where batchnorm
    couples the batch and the whole-batch Jacobian is measured; an LSTM, whose oneDNN kernel
    has no forward-mode derivative; behaviour-only activations) the output's exact norm and
    a hidden layer's equal those of the full Jacobians to 1e-10."""
    entry = ZOO[name]
    model = entry.build(generator=0).double()
    x = sample_inputs(entry, 2, generator=1).double()
    if crop is not None:
        x = x[..., :crop, :crop].contiguous()  # 48 inputs keep the reference cheap
    layers = linear_layers(model)[-1:]
    result = jacobian_norm(model, x, layers=layers, op_method="exact", norm_mode=norm_mode,
                           batch_size=len(x))
    assert result.batch_coupled == (norm_mode == "train")
    assert [row.name for row in result.layers] == layers + ["output"]
    assert_rows_equal_full(model, x, result, norm_mode)


def batchnorm_mlp():
    model = mlp(5, 10, 4, 3, norm="batch", generator=torch.Generator().manual_seed(2)).double()
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    return model, x


def test_exact_on_a_batchnorm_mlp_in_train_mode_is_the_whole_batch_norm():
    """With batchnorm in train mode the exact norm is that of the whole-batch Jacobian J(X)
    (one value per batch), as Lanczos measures it, to 1e-10 at every layer."""
    model, x = batchnorm_mlp()
    result = jacobian_norm(model, x, layers=linear_layers(model), op_method="exact",
                           batch_size=len(x))
    assert result.batch_coupled
    assert all(row.per_sample.shape == (1,) for row in result.layers)
    assert_rows_equal_full(model, x, result, "train")


@pytest.mark.parametrize("coupled", [False, True], ids=["per-sample", "batchnorm-train"])
def test_exact_and_lanczos_agree_within_the_stated_error(coupled):
    """Lanczos's estimate of every layer lies within its stated relative error below the
    exact norm (a Ritz value never exceeds it), per sample and for a coupled batch."""
    if coupled:
        model, x = batchnorm_mlp()
    else:
        model = mlp(8, 24, 5, 4, generator=torch.Generator().manual_seed(4)).double()
        x = torch.randn(7, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    common = dict(layers=linear_layers(model), batch_size=len(x), n_batches=1)
    exact = jacobian_norm(model, x, op_method="exact", **common)
    lanczos = jacobian_norm(model, x, op_method="lanczos", tol=1e-8, n_iter=200, **common)
    assert lanczos.op_method == "lanczos" and lanczos.converged and lanczos.iterations > 0
    for e, a in zip(exact.layers, lanczos.layers):
        # batches are drawn shuffled: sorting keeps any per-sample ordering of the two
        true = torch.from_numpy(e.per_sample).sort().values
        estimate = torch.from_numpy(a.per_sample).sort().values
        assert 0 < a.error <= 1e-8
        assert (estimate <= true * (1 + 1e-12)).all(), e.name
        assert (estimate >= true * (1 - a.error) - 1e-14).all(), e.name


def test_auto_picks_exact_on_a_deep_low_dimensional_mlp():
    """With 8 inputs and 12 measured layers the 8 tangents cost far less than Lanczos's steps
    through the prefixes: "auto" runs the exact method (error 0) and gives its values."""
    model = mlp(8, 32, 12, 2, generator=torch.Generator().manual_seed(6)).double()
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    layers = linear_layers(model)
    auto = jacobian_norm(model, x, layers=layers)
    exact = jacobian_norm(model, x, layers=layers, op_method="exact")
    assert auto.op_method == "exact" and auto.iterations == 0
    assert all(row.error == 0.0 for row in auto.layers)
    assert [row.norm for row in auto.layers] == [row.norm for row in exact.layers]


@pytest.mark.slow
def test_auto_picks_lanczos_on_an_image_network():
    """A 3 x 32 x 32 input (3,072 tangents) on a ResNet outweighs a few Lanczos steps per
    layer: "auto" runs Lanczos (steps counted, a positive error bound)."""
    entry = ZOO["resnet_small"]
    model = entry.build(generator=0)
    result = jacobian_norm(model, sample_inputs(entry, 2), norm_mode="eval", n_iter=2,
                           tol=1e-3, layers=linear_layers(model)[-1:])
    assert result.d_in == 3072
    assert result.op_method == "lanczos" and 0 < result.iterations <= 2


@pytest.mark.parametrize("coupled", [False, True], ids=["per-sample", "batchnorm-train"])
def test_the_model_is_left_as_given(coupled):
    """The exact path (repeated batch, or vmap with batchnorm buffers set aside) leaves the
    model's parameters, buffers (running statistics), modes, requires_grad flags and hooks as
    they were."""
    if coupled:
        model, x = batchnorm_mlp()
    else:
        model = mlp(5, 10, 4, 3, generator=torch.Generator().manual_seed(2)).double()
        x = torch.randn(6, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    model.layers[0].linear.weight.requires_grad_(False)
    state = copy.deepcopy(model.state_dict())
    modes = [m.training for m in model.modules()]
    flags = [p.requires_grad for p in model.parameters()]
    result = jacobian_norm(model, x, layers=linear_layers(model), op_method="exact")
    assert result.op_method == "exact" and result.batch_coupled == coupled
    assert [m.training for m in model.modules()] == modes
    assert [p.requires_grad for p in model.parameters()] == flags
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


class _Cube(torch.autograd.Function):
    """x^3 with a backward (twice differentiable) but no forward-mode rule (no jvp)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad


class _CubeWithJvp(_Cube):
    """x^3 with a forward-mode rule in the old style (no setup_context): dual tensors work,
    torch.func transforms refuse it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x ** 3

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * tangent


class _CubeNet(torch.nn.Module):
    def __init__(self, batchnorm, cube=_Cube):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 5), torch.nn.Linear(5, 3)
        self.norm = torch.nn.BatchNorm1d(5) if batchnorm else torch.nn.Identity()
        self.cube = cube

    def forward(self, x):
        return self.b(self.cube.apply(self.norm(self.a(x))))


def test_a_model_vmap_refuses_is_measured_exactly_on_a_repeated_batch():
    """Where torch.func cannot map the model (an old-style autograd.Function with a jvp) the
    per-sample exact path repeats the batch with one basis tangent per copy: still exact (the
    full Jacobian's norm to 1e-10), no fallback note."""
    torch.manual_seed(0)
    model = _CubeNet(False, _CubeWithJvp).double()
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    result = jacobian_norm(model, x, op_method="exact")
    assert result.mode.notes == ()
    assert_rows_equal_full(model, x, result, None)


@pytest.mark.parametrize("batchnorm", [False, True], ids=["per-sample", "batchnorm-train"])
def test_no_forward_mode_derivative_falls_back_to_lanczos_with_a_note(batchnorm):
    """An operation without a forward-mode rule (a custom autograd.Function with no jvp; under
    torch.func also no setup_context) makes even op_method="exact" run Lanczos, say so in
    mode.notes and in op_method, and still measure the norm (to Lanczos's bound)."""
    torch.manual_seed(0)
    model = _CubeNet(batchnorm).double()
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    result = jacobian_norm(model, x, op_method="exact", tol=1e-9, n_iter=50)
    assert result.op_method == "lanczos" and result.converged
    assert any("used Lanczos" in note for note in result.mode.notes)
    true = full_norms(model, x, "output", batchnorm).sort().values
    got = torch.from_numpy(result.layers[-1].per_sample).sort().values
    torch.testing.assert_close(got, true, rtol=1e-8, atol=0)


def test_exact_refuses_dropout_and_oversized_jacobians(monkeypatch):
    """op_method="exact" with dropout on, or with Jacobians over the memory cap, is refused
    with the fix; "auto" then runs Lanczos instead."""
    model = mlp(6, 16, 3, 3, generator=torch.Generator().manual_seed(0)).double()
    x = torch.randn(4, 6, dtype=torch.float64)
    with pytest.raises(InvalidInputError, match="op_method='lanczos'"):
        jacobian_norm(model, x, op_method="exact", dropout=True)
    monkeypatch.setattr(measure_module, "EXACT_MEMORY", 100)
    with pytest.raises(InvalidInputError, match="op_method='lanczos'"):
        jacobian_norm(model, x, op_method="exact")
    assert jacobian_norm(model, x, n_iter=5).op_method == "lanczos"
