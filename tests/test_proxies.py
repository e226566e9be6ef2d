"""Zero-cost proxies (nngauge.proxies) against hand computations on tiny networks, the
invariances their papers state, state restoration, and the zoo's ResNet, LSTM and GPT."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nngauge import proxies
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.zoo import ZOO, sample_inputs, sample_labels

LABELLED = ("snip", "grasp", "grad_norm", "fisher")
ALL = ("synflow", "snip", "grasp", "grad_norm", "fisher", "jacob_cov", "naswot", "swap",
       "te_nas", "te_nas_regions", "n_params", "flops")


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


def _mlp(seed=0, d_in=5, width=7, d_out=3, act=nn.ReLU):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, width), act(), nn.Linear(width, width), act(),
                         nn.Linear(width, d_out)).double()


def _data(n=6, d_in=5, classes=3, seed=0):
    g = _seeded(seed)
    return (torch.randn(n, d_in, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (n,), generator=g))


# ------------------------------------------------------------------------------- synflow


def test_synflow_of_a_linear_net_is_depth_times_the_path_sum():
    """For a bias-free linear net, R = 1^T |W2| |W1| 1 is homogeneous of degree 1 in each
    layer's weights, so sum |theta dR/dtheta| = (number of layers) x R (Euler): synflow equals
    2 R for two layers and 3 R for three, whatever the weights' signs."""
    torch.manual_seed(0)
    two = nn.Sequential(nn.Linear(4, 6, bias=False), nn.Linear(6, 2, bias=False))
    three = nn.Sequential(nn.Linear(4, 6, bias=False), nn.Linear(6, 5, bias=False),
                          nn.Linear(5, 2, bias=False))
    for net, depth in ((two, 2), (three, 3)):
        path = torch.ones(1, 4, dtype=torch.float64)
        for layer in net:
            path = path @ layer.weight.detach().double().abs().T
        assert proxies.synflow(net, torch.randn(3, 4)) == pytest.approx(
            depth * float(path.sum()), rel=1e-12)


def test_synflow_reads_only_the_shape_of_the_data():
    """Synflow's input is the all-ones tensor (Tanaka et al., data-free): data of the same shape
    with other values, scale or number of samples give the identical score."""
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * 4 * 4, 3))
    scores = {proxies.synflow(net, x) for x in (torch.randn(5, 2, 6, 6),
                                                100 * torch.rand(2, 2, 6, 6) - 50,
                                                torch.zeros(1, 2, 6, 6))}
    assert len(scores) == 1 and next(iter(scores)) > 0


def test_synflow_treats_batchnorm_as_the_identity():
    """As in Abdelfattah et al.'s code, batchnorm is the identity for synflow: a net with a
    batchnorm layer (in train mode, with arbitrary statistics) scores the same as the net
    without it (the batchnorm's own parameters get no gradient)."""
    torch.manual_seed(2)
    with_bn = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():
        with_bn[1].running_mean.normal_()
        with_bn[1].weight.normal_()
    without = nn.Sequential(with_bn[0], nn.Identity(), with_bn[2], with_bn[3])
    assert proxies.synflow(with_bn, torch.randn(4, 3)) == pytest.approx(
        proxies.synflow(without, torch.randn(4, 3)), rel=1e-12)


def test_synflow_refuses_an_overflowing_flow():
    """A flow past float64's range is refused with a message saying why, not returned as
    inf."""
    net = nn.Sequential(*[nn.Linear(64, 64, bias=False) for _ in range(80)])
    with torch.no_grad():
        for layer in net:
            layer.weight.fill_(1000.0)
    with pytest.raises(InvalidInputError, match="finite in float64"):
        proxies.synflow(net, torch.randn(2, 64))


# ----------------------------------------------------------------- loss-gradient proxies


def _loss(model, x, y):
    return F.cross_entropy(model(x), y)


def test_grad_norm_and_snip_equal_autograd_on_the_same_loss():
    """grad_norm = ||dL/dtheta||_2 and snip = sum |theta dL/dtheta| over all parameters, L the
    mean cross-entropy of the batch, computed here with .backward() on a copy."""
    model, (x, y) = _mlp(), _data()
    ref = copy.deepcopy(model)
    _loss(ref, x, y).backward()
    grads = [p.grad for p in ref.parameters()]
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    saliency = sum(float((p.detach() * p.grad).abs().sum()) for p in ref.parameters())
    assert proxies.grad_norm(model, x, y) == pytest.approx(norm, rel=1e-12)
    assert proxies.snip(model, x, y) == pytest.approx(saliency, rel=1e-12)


def test_grasp_equals_minus_theta_dot_hessian_times_gradient():
    """grasp = -theta . (H g) with H the full Hessian of the loss over the flattened
    parameters (torch.autograd.functional.hessian) and g its gradient."""
    model, (x, y) = _mlp(act=nn.Tanh), _data()
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]
    theta = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def loss_of(flat):
        chunks = torch.split(flat, [math.prod(s) for s in shapes])
        params = {n: c.reshape(s) for n, c, s in zip(names, chunks, shapes)}
        return F.cross_entropy(torch.func.functional_call(model, params, (x,)), y)

    hessian = torch.autograd.functional.hessian(loss_of, theta)
    gradient = torch.autograd.functional.jacobian(loss_of, theta)
    expected = -float(theta @ (hessian @ gradient))
    assert proxies.grasp(model, x, y) == pytest.approx(expected, rel=1e-10)


def test_fisher_sums_half_the_mean_squared_channel_saliency():
    """fisher = sum over the outputs a of every Linear / Conv layer and their channels c of
    0.5 mean_n (sum_s a g)^2, g = dL/da, here from a functional forward pass that keeps each
    layer's output (a conv layer's channel is dim 1, summed over its positions)."""
    torch.manual_seed(3)
    net = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 4),
                        nn.ReLU(), nn.Linear(4, 3)).double()
    x = torch.randn(5, 2, 6, 6, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 1, 0])
    a1 = net[0](x)
    a2 = net[3](net[2](net[1](a1)))
    a3 = net[5](net[4](a2))
    grads = torch.autograd.grad(F.cross_entropy(a3, y), [a1, a2, a3])
    conv = (a1 * grads[0]).sum((2, 3))
    expected = sum(float(0.5 * t.detach().pow(2).mean(0).sum())
                   for t in (conv, a2 * grads[1], a3 * grads[2]))
    assert proxies.fisher(net, x, y) == pytest.approx(expected, rel=1e-10)


def test_labels_in_any_data_form_give_the_same_score():
    """(inputs, labels), inputs with labels=, and a DataLoader of pairs are the same batch;
    a generator draws a reproducible batch."""
    model, (x, y) = _mlp(), _data(n=10)
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    values = {proxies.snip(model, x, y), proxies.snip(model, (x, y)),
              proxies.snip(model, loader)}
    assert len(values) == 1
    a = proxies.snip(model, x, y, batch_size=4, generator=_seeded(5))
    assert a == proxies.snip(model, x, y, batch_size=4, generator=_seeded(5))


# ------------------------------------------------------------------ activation proxies


def test_naswot_equals_the_log_determinant_of_the_hand_built_hamming_kernel():
    """Units h1 = x, h2 = x - 1 after a ReLU: inputs -1, 0.5, 2 have codes (0,0), (1,0),
    (1,1); K_H = N_A - Hamming = [[2,1,0],[1,2,1],[0,1,2]], det 4, so naswot = log 4. A
    repeated code makes K_H singular: -inf."""
    net = nn.Sequential(nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 1))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.copy_(torch.tensor([0.0, -1.0]))
    kernel = torch.tensor([[2.0, 1, 0], [1, 2, 1], [0, 1, 2]], dtype=torch.float64)
    expected = float(torch.linalg.slogdet(kernel)[1])
    assert expected == pytest.approx(math.log(4))
    assert proxies.naswot(net, torch.tensor([[-1.0], [0.5], [2.0]])) == pytest.approx(expected)
    assert proxies.naswot(net, torch.tensor([[-1.0], [0.5], [0.7]])) == -math.inf


def test_jacob_cov_equals_the_formula_on_the_full_jacobian():
    """J_i = d sum_c f_c(x_i) / dx_i, read from the full Jacobian of the batch
    (torch.autograd.functional.jacobian, shape (b, C, b, D)); score = -sum(log(v + k) +
    1/(v + k)) over the eigenvalues v of corrcoef(J), k = 1e-5."""
    model, (x, _) = _mlp(act=nn.Tanh), _data(n=6)
    full = torch.autograd.functional.jacobian(model, x)
    rows = torch.stack([full[i, :, i, :].sum(0) for i in range(len(x))]).numpy()
    v = np.linalg.eigvals(np.corrcoef(rows)).real
    expected = -np.sum(np.log(v + 1e-5) + 1 / (v + 1e-5))
    assert proxies.jacob_cov(model, x) == pytest.approx(expected, rel=1e-8)


def test_te_nas_is_the_condition_number_of_the_hand_built_ntk():
    """Theta = G G^T with G's rows the gradients of each sample's summed outputs over the
    parameters named 'weight' (biases excluded, as TE-NAS's code does), built by one
    backward pass per sample; te_nas = lambda_max / lambda_min."""
    model, (x, _) = _mlp(), _data(n=5)
    weights = [p for n, p in model.named_parameters() if "weight" in n]
    rows = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(model(x[i:i + 1]).sum(),
                                                                 weights)])
            for i in range(len(x))]
    g = torch.stack(rows)
    eig = torch.linalg.eigvalsh(g @ g.T)
    assert proxies.te_nas(model, x) == pytest.approx(float(eig[-1] / eig[0]), rel=1e-8)


def test_te_nas_regions_counts_distinct_patterns_and_the_rank_sums_both():
    """The plane through (0, 0), (1, 0), (0, 1) of a 2-D ReLU net with kinks u = 0.5 and
    v = 0.5 is cut into 4 regions, which the grid's points all meet; te_nas_rank adds the rank
    by condition number (low first) to the rank by regions (high first)."""
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    with torch.no_grad():
        net[0].weight.copy_(torch.eye(2))
        net[0].bias.fill_(-0.5)
    corners = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    assert proxies.te_nas_regions(net, corners) == 4.0
    ranks = proxies.te_nas_rank([5.0, math.inf, 2.0], [10, 30, 20])
    assert ranks.tolist() == [5.0, 4.0, 3.0]


# ------------------------------------------------------------------------ cost baselines


def test_n_params_counts_trainable_entries_and_flops_counts_macs():
    """n_params = sum p.numel() over trainable parameters; flops = multiply-accumulates of
    one sample's forward pass: sum of in x out over an MLP's Linear layers, and out_channels x
    output positions x in_channels x kernel area for a convolution (biases not counted)."""
    mlp = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    mlp[2].bias.requires_grad_(False)
    assert proxies.n_params(mlp) == 5 * 7 + 7 + 7 * 3
    assert proxies.flops(mlp, torch.randn(4, 5)) == 5 * 7 + 7 * 3
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 2))
    assert proxies.flops(conv, torch.randn(2, 3, 8, 8)) == 4 * 6 * 6 * 3 * 3 * 3 + 144 * 2


# -------------------------------------------------------------------- state and networks


def _bn_net(dtype=torch.float32):
    torch.manual_seed(4)
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * 4 * 4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    net[5].eval()  # a mix of modes
    net[0].bias.requires_grad_(False)  # a frozen parameter
    net[4].weight.grad = torch.full_like(net[4].weight, 0.25)  # a gradient left by the user
    return net.to(dtype)


def _state(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            [m.training for m in model.modules()],
            [p.requires_grad for p in model.parameters()],
            [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks),
              "forward" in m.__dict__) for m in model.modules()])


def _same(a, b):
    tensors_a, modes_a, flags_a, grads_a, hooks_a = a
    tensors_b, modes_b, flags_b, grads_b, hooks_b = b
    return (all(torch.equal(tensors_a[k], tensors_b[k]) for k in tensors_a)
            and modes_a == modes_b and flags_a == flags_b and hooks_a == hooks_b
            and all((g is None and h is None) or torch.equal(g, h)
                    for g, h in zip(grads_a, grads_b)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ALL)
def test_every_proxy_leaves_a_batchnorm_network_as_it_was(name, dtype):
    """Parameters, buffers (batchnorm running statistics, num_batches_tracked), train/eval
    modes, requires_grad flags, .grad, hooks and forward methods are the same after the proxy
    (float64: the model itself is measured, float32 models on a copy for synflow); the proxy
    returns a float."""
    net = _bn_net(dtype)
    x, y = torch.randn(6, 2, 6, 6, dtype=dtype), torch.tensor([0, 1, 2, 0, 1, 2])
    before = _state(net)
    value = getattr(proxies, name)(net, x, y if name in LABELLED else None)
    assert isinstance(value, float) and not math.isnan(value)
    assert _same(before, _state(net))


@pytest.fixture(scope="module")
def zoo_models():
    return {name: ZOO[name].build(generator=0) for name in ("resnet_small", "lstm", "gpt_small")}


REFUSED = {("lstm", "naswot"), ("gpt_small", "naswot"), ("lstm", "swap"), ("gpt_small", "swap"),
           ("lstm", "te_nas_regions"), ("lstm", "flops")}
"""No piecewise-linear unit (naswot, swap), no activation module (te_nas_regions), a fused
recurrent op FlopCounterMode does not count (flops)."""
CHEAP = {"te_nas_regions": {"resolution": 8}}
"""Options that keep a proxy's run short on the zoo's networks (a coarser grid)."""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")  # LSTM under vmap
@pytest.mark.parametrize("model_name", ["resnet_small", "lstm", "gpt_small"])
def test_every_proxy_runs_on_a_resnet_an_lstm_and_a_gpt(zoo_models, model_name):
    """On the zoo's torchvision-layout ResNet (batchnorm, a ReLU called twice), LSTM and GPT
    (token ids, dict output) every proxy gives a finite float or, for the pairs in REFUSED
    only, an NNGaugeError saying why; the model's state is kept either way."""
    entry, model = ZOO[model_name], zoo_models[model_name]
    x, y = sample_inputs(entry, 4), sample_labels(entry, 4)
    before = _state(model)
    for name in ALL:
        function = getattr(proxies, name)
        kwargs = {} if name in ("n_params", "flops") else {"output": entry.output,
                                                             **CHEAP.get(name, {})}
        call = lambda: function(model, x, y if name in LABELLED else None, **kwargs)  # noqa
        if (model_name, name) in REFUSED:
            with pytest.raises(NNGaugeError, match="expected"):
                call()
        else:
            assert math.isfinite(call()), name
        assert _same(before, _state(model)), name


# ------------------------------------------------------------------------------ bad input


def test_bad_inputs_are_refused_with_what_was_expected_and_the_fix():
    """Labels missing for a loss proxy, labels of the wrong shape, one sample for jacob_cov,
    a network without piecewise-linear units for naswot and swap, an operation without a
    second derivative for grasp, mismatched rank inputs and a non-module model each give an
    InvalidInputError that says what was expected and how to fix it."""
    model, (x, y) = _mlp(), _data()
    for name in LABELLED:
        with pytest.raises(InvalidInputError, match="labelled data.*Fix: pass labels="):
            getattr(proxies, name)(model, x)
    with pytest.raises(InvalidInputError, match="labels shaped like the outputs"):
        proxies.snip(model, x, y[:, None].expand(-1, 2))
    with pytest.raises(InvalidInputError, match="batch_size"):
        proxies.jacob_cov(model, x, batch_size=1)
    with pytest.raises(InvalidInputError, match="at least 2 samples"):
        proxies.jacob_cov(model, x[:1])
    with pytest.raises(InvalidInputError, match="piecewise-linear.*Fix: use jacob_cov"):
        proxies.naswot(_mlp(act=nn.Tanh), x)
    with pytest.raises(InvalidInputError, match="piecewise-linear.*Fix: use jacob_cov"):
        proxies.swap(_mlp(act=nn.SELU), x)
    with pytest.raises(InvalidInputError, match="second derivatives"):
        proxies.grasp(_mlp(act=nn.Hardsigmoid), x, y)
    with pytest.raises(InvalidInputError, match="one condition number and one region count"):
        proxies.te_nas_rank([1.0, 2.0], [3])
    with pytest.raises(InvalidInputError, match="torch.nn.Module"):
        proxies.synflow("mlp", x)
