"""The measures Jiang et al. compare ("Fantastic Generalization Measures and Where to Find
Them", ICLR 2020, appendix C): distance from initialization, the norm- and margin-based family,
sigma-search flatness with its PAC-Bayes bounds, the gradient noise and the steps to reach a
loss, each against a brute-force computation written here (flattened parameter vectors, numpy
norms, explicit loops over probes, ascent steps and mini-batches), and the catalogue readers
that give them the network at initialization (Tracker, studies)."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from nngauge import distance_from_init, flatness, gradient_noise, norm_measures
from nngauge.errors import InvalidInputError, UnknownNameError
from nngauge.measures.generalization._sharpness import perturbation_seeds
from nngauge.training import EpochRecord, Tracker, fit, steps_to_loss

# ----------------------------------------------------------------------------- fixtures


def _mlp(seed: int = 0, width: int = 6) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 3))


def _conv(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(75, 4))


def _moved(net: nn.Module, seed: int = 1, scale: float = 0.3) -> nn.Module:
    """A copy of ``net`` with every parameter moved (a stand-in for training)."""
    out = copy.deepcopy(net)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return out


def _fitted(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Labels the network fits (a positive margin everywhere)."""
    with torch.no_grad():
        return net(x).argmax(dim=1)


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().flatten() for p in net.parameters()])


def _matrices(net: nn.Module) -> list[np.ndarray]:
    """The weight matrices (kernels reshaped to (out, rest)), in order, as numpy."""
    return [p.detach().double().reshape(p.shape[0], -1).numpy()
            for name, p in net.named_parameters() if p.dim() >= 2]


X4 = torch.randn(40, 4, generator=torch.Generator().manual_seed(2))
X_IMG = torch.randn(30, 1, 5, 5, generator=torch.Generator().manual_seed(3))


# ------------------------------------------------------------------ distance from init


@pytest.mark.parametrize("build, kinds", [(_mlp, 2), (_conv, 2)])
def test_distance_from_init_by_hand(build, kinds):
    start = build()
    net = _moved(start)
    r = distance_from_init(net, start)
    diff = (_flat(net) - _flat(start)).numpy()
    assert r.total == pytest.approx(np.linalg.norm(diff), rel=1e-12)
    assert r.relative == pytest.approx(np.linalg.norm(diff) / np.linalg.norm(_flat(start)))
    assert r.n_parameters == diff.size
    ws, w0s = _matrices(net), _matrices(start)
    assert len(r.layers) == kinds
    for row, w, w0 in zip(r.layers, ws, w0s):
        assert row.frobenius == pytest.approx(np.linalg.norm(w - w0), rel=1e-12)
        assert row.spectral == pytest.approx(np.linalg.norm(w - w0, 2), rel=1e-10)
        assert row.initial_frobenius == pytest.approx(np.linalg.norm(w0), rel=1e-12)
    assert r.frobenius_squared == pytest.approx(sum(np.linalg.norm(w - w0) ** 2
                                                    for w, w0 in zip(ws, w0s)))
    assert r.spectral_squared == pytest.approx(sum(np.linalg.norm(w - w0, 2) ** 2
                                                   for w, w0 in zip(ws, w0s)))
    assert r.spectral_sum == pytest.approx(sum(np.linalg.norm(w - w0, 2)
                                               for w, w0 in zip(ws, w0s)))
    # the total counts the biases: moving one bias changes it, not the rows
    biased = copy.deepcopy(net)
    with torch.no_grad():
        list(biased.parameters())[-1].add_(10.0)
    moved = distance_from_init(biased, start)
    assert moved.total > r.total + 5 and moved.frobenius_squared == pytest.approx(
        r.frobenius_squared)


def test_distance_of_a_conv_uses_the_reshaped_kernel_and_layers_selects_rows():
    start = _conv()
    net = _moved(start)
    r = distance_from_init(net, start, layers="0")
    kernel = (net[0].weight - start[0].weight).detach().double()
    assert [row.name for row in r.layers] == ["0"]
    assert r.layers[0].spectral == pytest.approx(
        float(torch.linalg.matrix_norm(kernel.reshape(3, 9), ord=2)))
    assert r.spectral_sum == pytest.approx(r.layers[0].spectral)
    assert r.total == pytest.approx(distance_from_init(net, start).total)  # always all
    with pytest.raises(UnknownNameError, match="expected layers .*got .*Fix"):
        distance_from_init(net, start, layers="conv9")


def test_identical_networks_are_at_distance_zero():
    net = _mlp()
    r = distance_from_init(net, copy.deepcopy(net))
    assert r.total == 0 and r.spectral_sum == 0 and r.relative == 0


@pytest.mark.parametrize("other", [lambda: _mlp(width=7), lambda: nn.Sequential(
    nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 3)), _conv])
def test_different_architectures_are_refused(other):
    net = _mlp()
    for call in (lambda: distance_from_init(net, other()),
                 lambda: norm_measures(net, X4, _fitted(net, X4), initial_model=other()),
                 lambda: flatness(net, X4, _fitted(net, X4), initial_model=other(),
                                  n_iter=1, n_probes=1)):
        with pytest.raises(InvalidInputError, match="expected initial_model .*got .*Fix"):
            call()


def test_distance_refuses_what_is_not_a_model():
    with pytest.raises(InvalidInputError, match="expected initial_model"):
        distance_from_init(_mlp(), None)


# ------------------------------------------------------------------------ norm measures


def _margin_by_hand(net: nn.Module, x: torch.Tensor, y: torch.Tensor, percentile: float):
    with torch.no_grad():
        out = net(x).double()
    true = out[torch.arange(len(y)), y]
    others = out.clone()
    others[torch.arange(len(y)), y] = -math.inf
    margins = np.sort((true - others.max(1).values).numpy())
    return margins[max(1, math.ceil(percentile / 100 * len(margins))) - 1]


def _path_norm_by_hand(net: nn.Module, shape: tuple) -> float:
    """sum over paths of prod w^2: every parameter squared, the network run on ones (ReLU is
    the identity on its nonnegative inputs), the outputs summed."""
    squared = copy.deepcopy(net)
    with torch.no_grad():
        for p in squared.parameters():
            p.copy_(p.double().square().to(p.dtype))
        return float(squared.double()(torch.ones(1, *shape, dtype=torch.float64)).sum())


def _fisher_rao_by_hand(net: nn.Module, x: torch.Tensor, y: torch.Tensor, depth: int) -> float:
    """(d + 1)^2 / m sum_j <theta, grad l_j>^2, one backward pass per sample."""
    total = 0.0
    for xj, yj in zip(x, y):
        net.zero_grad()
        F.cross_entropy(net(xj[None]), yj[None]).backward()
        total += sum(float((p.detach() * p.grad).sum()) for p in net.parameters()) ** 2
    net.zero_grad()
    return (depth + 1) ** 2 * total / len(y)


@pytest.mark.parametrize("build, x", [(_mlp, X4), (_conv, X_IMG)])
def test_norm_measures_by_hand(build, x):
    start = build()
    net = _moved(start, scale=0.1)
    y = _fitted(net, x)
    r = norm_measures(net, x, y, initial_model=start)
    ws, w0s = _matrices(net), _matrices(start)
    d = len(ws)
    spec = np.array([np.linalg.norm(w, 2) for w in ws])
    fro = np.array([np.linalg.norm(w) for w in ws])
    dist_f = np.array([np.linalg.norm(w - w0) for w, w0 in zip(ws, w0s)])
    dist_s = np.array([np.linalg.norm(w - w0, 2) for w, w0 in zip(ws, w0s)])
    gamma = _margin_by_hand(net, x, y, 10)
    log_spec, log_fro, log_g2 = (np.log(spec ** 2).sum(), np.log(fro ** 2).sum(),
                                 np.log(gamma ** 2))
    expected = {
        "margin": gamma, "inverse_margin": 1 / gamma ** 2,
        "log_prod_spectral": log_spec, "log_prod_spectral_over_margin": log_spec - log_g2,
        "log_sum_spectral": np.log(d * np.prod(spec ** 2) ** (1 / d)),
        "log_sum_spectral_over_margin": np.log(d * (np.prod(spec ** 2) / gamma ** 2) ** (1 / d)),
        "log_prod_frobenius": log_fro, "log_prod_frobenius_over_margin": log_fro - log_g2,
        "log_sum_frobenius": np.log(d * np.prod(fro ** 2) ** (1 / d)),
        "log_sum_frobenius_over_margin": np.log(d * (np.prod(fro ** 2) / gamma ** 2) ** (1 / d)),
        "frobenius_over_spectral": (fro ** 2 / spec ** 2).sum(),
        "log_spectral_orig": np.log(np.prod(spec ** 2) / gamma ** 2 * (fro ** 2 / spec ** 2).sum()),
        "log_spectral_init": np.log(np.prod(spec ** 2) / gamma ** 2
                                    * (dist_f ** 2 / spec ** 2).sum()),
        "frobenius_distance": (dist_f ** 2).sum(), "spectral_distance": (dist_s ** 2).sum(),
        "parameter_norm": (fro ** 2).sum(),
        "path_norm": _path_norm_by_hand(net, tuple(x.shape[1:])),
        "fisher_rao": _fisher_rao_by_hand(net, x, y, d),
    }
    expected["path_norm_over_margin"] = expected["path_norm"] / gamma ** 2
    for name, value in expected.items():
        assert getattr(r, name) == pytest.approx(value, rel=1e-6, abs=1e-9), name
    assert r.depth == d and r.m == len(y) and r.undefined == {}
    assert r.n_parameters == sum(p.numel() for p in net.parameters())
    for row, s, f_, df, ds in zip(r.layers, spec, fro, dist_f, dist_s):
        assert (row.spectral, row.frobenius, row.distance_frobenius,
                row.distance_spectral) == pytest.approx((s, f_, df, ds), rel=1e-8)


def test_the_margin_is_the_10th_percentile_and_divides_every_over_margin_field():
    net = _mlp()
    y = _fitted(net, X4)
    r10, r30 = norm_measures(net, X4, y), norm_measures(net, X4, y, percentile=30)
    assert r10.margin == pytest.approx(_margin_by_hand(net, X4, y, 10))
    assert r30.margin > r10.margin
    shift = 2 * math.log(r30.margin / r10.margin)
    assert r10.log_prod_spectral == r30.log_prod_spectral
    assert r10.log_prod_spectral_over_margin - r30.log_prod_spectral_over_margin == \
        pytest.approx(shift)
    assert r10.path_norm_over_margin / r30.path_norm_over_margin == pytest.approx(
        math.exp(shift))


def test_norm_measures_without_initial_model_or_positive_margin_say_why():
    net = _mlp()
    r = norm_measures(net, X4, _fitted(net, X4))
    assert math.isnan(r.frobenius_distance) and math.isnan(r.layers[0].distance_spectral)
    assert "initial_model" in r.undefined["log_spectral_init"]
    assert not math.isnan(r.log_spectral_orig)
    wrong = (_fitted(net, X4) + 1) % 3  # every point misclassified
    with pytest.warns(UserWarning, match="margin"):
        bad = norm_measures(net, X4, wrong)
    assert bad.margin < 0 and math.isnan(bad.inverse_margin)
    assert math.isnan(bad.log_sum_frobenius_over_margin) and not math.isnan(bad.parameter_norm)
    assert "margin" in bad.undefined["path_norm_over_margin"]


def test_norm_measures_fold_batchnorm_as_jiang_et_al_do():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
        net[1].weight.uniform_(0.5, 2)
    net.eval()
    bn = net[1]
    scale = (bn.weight.detach().double() / (bn.running_var.double() + bn.eps).sqrt())
    folded = net[0].weight.detach().double() * scale[:, None]
    r = norm_measures(net, X4, _fitted(net, X4))
    assert r.layers[0].frobenius == pytest.approx(float(folded.norm()), rel=1e-10)


def test_norm_measures_needs_labels():
    with pytest.raises(InvalidInputError, match="expected labels"):
        norm_measures(_mlp(), X4)


# ----------------------------------------------------------------------------- flatness


def _error(net: nn.Module, params: dict, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((functional_call(net, params, (x,)).argmax(1) != y).double().mean())


def _pacbayes_deviation_by_hand(net, x, y, sigma, *, n_probes, seed, magnitude=False,
                                epsilon=1e-3):
    """|mean_k err(w + s z_k) - err(w)| with the probes' Gaussians drawn as the search draws
    them (one seed per probe, then parameter by parameter), in a loop over probes."""
    params = {n: p.detach() for n, p in net.named_parameters()}
    base = _error(net, params, x, y)
    errors = []
    for s in perturbation_seeds(torch.Generator().manual_seed(seed), n_probes):
        gen = torch.Generator().manual_seed(s)
        moved = {}
        for n, w in params.items():
            z = torch.empty_like(w).normal_(generator=gen)
            std = (sigma ** 2 * w ** 2 + epsilon ** 2).sqrt() if magnitude else sigma
            moved[n] = w + std * z
        errors.append(_error(net, moved, x, y))
    return abs(float(np.mean(errors)) - base)


def _sharpness_deviation_by_hand(net, x, y, alpha, *, steps, lr, batch_size, seed,
                                 magnitude=False, epsilon=1e-3):
    """|err(w + u*) - err(w)|, u* by signed projected ascent of the cross-entropy in the box,
    on the mini-batches the search draws."""
    params = {n: p.detach() for n, p in net.named_parameters()}
    box = {n: ((alpha ** 2 * w ** 2 + epsilon ** 2).sqrt() if magnitude
               else torch.full_like(w, alpha)) for n, w in params.items()}
    base_seed = int(torch.randint(2**63 - 1, (), generator=torch.Generator().manual_seed(seed)))
    gen = torch.Generator().manual_seed(base_seed)
    u = {n: torch.zeros_like(w) for n, w in params.items()}
    for _ in range(steps):
        idx = torch.randint(len(y), (min(batch_size, len(y)),), generator=gen)
        shifted = {n: (params[n] + u[n]).requires_grad_(True) for n in params}
        loss = F.cross_entropy(functional_call(net, shifted, (x[idx],)), y[idx])
        grads = torch.autograd.grad(loss, list(shifted.values()))
        for (n, g) in zip(shifted, grads):
            u[n] = torch.clamp(u[n] + lr * box[n] * g.sign(), -box[n], box[n])
    return abs(_error(net, {n: params[n] + u[n] for n in params}, x, y)
               - _error(net, params, x, y))


FLAT_X = torch.randn(120, 4, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("magnitude", [False, True])
def test_pacbayes_search_brackets_the_crossing_of_a_dense_scan(magnitude):
    """The bracket's ends have the deviations of the hand-made probes, on both sides of the
    threshold, and the first crossing of a dense scan of sigma (same probes) lies within one
    scan step of the bracket."""
    net = _mlp(width=12)
    y = _fitted(net, FLAT_X)
    r = flatness(net, FLAT_X, y, magnitude=magnitude, n_probes=8, n_iter=12, generator=7)

    def deviation(sigma):
        return _pacbayes_deviation_by_hand(net, FLAT_X, y, sigma, n_probes=8, seed=7,
                                           magnitude=magnitude)

    assert r.deviation_lower <= 0.1 < r.deviation_upper
    assert deviation(r.lower) == pytest.approx(r.deviation_lower, abs=1e-6)
    assert deviation(r.upper) == pytest.approx(r.deviation_upper, abs=1e-6)
    assert r.sigma == r.lower and r.upper - r.lower <= r.upper * 2 ** -5
    for p in r.points[-3:]:
        assert deviation(p.sigma) == pytest.approx(p.deviation, abs=1e-6)
    grid = np.linspace(0, 3 * r.upper, 61)[1:]
    first = next(s for s in grid if deviation(s) > 0.1)
    step = (grid[1] - grid[0]) * (1 + 1e-9)  # a scan point can sit on the bracket's end
    assert r.lower - step <= first <= r.upper + step
    assert r.flatness == pytest.approx(1 / r.sigma ** 2)


@pytest.mark.parametrize("magnitude", [False, True])
def test_sharpness_search_brackets_the_crossing_of_a_dense_scan(magnitude):
    net = _mlp(width=12)
    y = _fitted(net, FLAT_X)
    settings = {"ascent_iter": 5, "lr": 0.3, "batch_size": 32}
    r = flatness(net, FLAT_X, y, kind="sharpness", magnitude=magnitude, n_iter=10,
                 generator=3, **settings)

    def deviation(alpha):
        return _sharpness_deviation_by_hand(net, FLAT_X, y, alpha, steps=5, lr=0.3,
                                            batch_size=32, seed=3, magnitude=magnitude)

    assert r.deviation_lower <= 0.1 < r.deviation_upper
    assert deviation(r.lower) == pytest.approx(r.deviation_lower, abs=1e-6)
    assert deviation(r.upper) == pytest.approx(r.deviation_upper, abs=1e-6)
    grid = np.linspace(0, 3 * r.upper, 31)[1:]
    first = next(s for s in grid if deviation(s) > 0.1)
    step = (grid[1] - grid[0]) * (1 + 1e-9)  # a scan point can sit on the bracket's end
    assert r.lower - step <= first <= r.upper + step
    # the worst case is worse than the average: the box search finds a smaller scale
    gaussian = flatness(net, FLAT_X, y, magnitude=magnitude, n_probes=8, n_iter=10, generator=3)
    assert r.sigma < gaussian.sigma


@pytest.mark.parametrize("crossing", [3e-4, 0.7, 1.0, 5e3])
def test_the_search_brackets_a_crossing_at_any_scale_to_its_relative_precision(crossing):
    """A deviation that crosses the threshold at ``crossing``: the bracket holds it and its
    width is 2**-n_iter of its lower end, whether the crossing lies above or far below the
    first sigma (a search of [0, 1] by halving its width left sigma = 0 there: flatness inf
    at n_iter = 8 for a crossing at 3e-4)."""
    from nngauge.measures.generalization._flatness import _bisect

    points, (lower, d_lower), (upper, d_upper) = _bisect(
        lambda sigma: 0.2 if sigma > crossing else 0.0, 0.1, 8)
    assert d_lower <= 0.1 < d_upper and lower <= crossing < upper
    assert upper - lower <= lower * 2 ** -8 * (1 + 1e-12)
    assert len(points) <= 2 + abs(math.log2(crossing)) + 8


def test_the_search_reports_a_deviation_that_never_or_always_crosses():
    """Never above the threshold: upper is inf (flatness 1/sigma^2 of the last sigma tried);
    above it at every scale down to 2**-40: lower is 0 (flatness inf)."""
    from nngauge.measures.generalization._flatness import MAX_DOUBLINGS, _bisect

    _, lower, upper = _bisect(lambda sigma: 0.0, 0.1, 8)
    assert upper[0] == math.inf and lower[0] == 2.0 ** MAX_DOUBLINGS
    _, lower, upper = _bisect(lambda sigma: 1.0, 0.1, 8)
    assert lower[0] == 0.0 and upper[0] == 2.0 ** -MAX_DOUBLINGS


def test_a_search_with_a_wrong_threshold_would_not_pass_the_bracket_check():
    """The bracket check can fail: the bracket of a threshold of 0.3 does not hold the
    crossing of 0.1."""
    net = _mlp(width=12)
    y = _fitted(net, FLAT_X)
    r = flatness(net, FLAT_X, y, threshold=0.3, n_probes=8, n_iter=12, generator=7)
    assert not (r.deviation_lower <= 0.1 < r.deviation_upper)
    assert _pacbayes_deviation_by_hand(net, FLAT_X, y, r.lower, n_probes=8, seed=7) > 0.1


@pytest.mark.parametrize("kind", ["pacbayes", "sharpness"])
@pytest.mark.parametrize("magnitude", [False, True])
def test_flatness_bounds_by_hand(kind, magnitude):
    start = _mlp(width=12)
    net = _moved(start, scale=0.05)
    y = _fitted(net, FLAT_X)
    r = flatness(net, FLAT_X, y, kind=kind, magnitude=magnitude, initial_model=start,
                 n_probes=4, n_iter=6, ascent_iter=3, generator=0)
    w, w0 = _flat(net).numpy(), _flat(start).numpy()
    omega, m, eps = w.size, len(y), 1e-3
    sigma = r.sigma / (math.sqrt(math.log(2 * omega)) if kind == "sharpness" else 1.0)
    if kind == "sharpness":
        eps = eps / math.sqrt(math.log(2 * omega))
    rest = math.log(m / sigma) + 10

    def bound(x):
        if not magnitude:
            return (x ** 2).sum() / (4 * sigma ** 2) + rest
        prior = eps ** 2 + (sigma ** 2 + 1) * (x ** 2).sum() / omega
        return np.log(prior / (eps ** 2 + sigma ** 2 * x ** 2)).sum() / 4 + rest

    assert r.bound_init == pytest.approx(bound(w - w0), rel=1e-9)
    assert r.bound_orig == pytest.approx(bound(w), rel=1e-9)
    if kind == "sharpness" and not magnitude:  # Jiang et al.'s ||x||^2 log(2 omega) / (4 a^2)
        assert r.bound_orig - rest == pytest.approx(
            (w ** 2).sum() * math.log(2 * omega) / (4 * r.sigma ** 2), rel=1e-9)
    assert r.n_parameters == omega and r.m == m and (r.epsilon is not None) == magnitude
    assert math.isnan(flatness(net, FLAT_X, y, kind=kind, magnitude=magnitude, n_probes=2,
                               n_iter=2, ascent_iter=2, generator=0).bound_init)


def test_magnitude_aware_probes_scale_with_the_weights():
    """With magnitude, a zero weight moves by epsilon only: a network whose only nonzero
    weights are tiny is flat at scales where the plain search is not."""
    net = _mlp(width=12)
    y = _fitted(net, FLAT_X)
    plain = flatness(net, FLAT_X, y, n_probes=8, n_iter=8, generator=1)
    aware = flatness(net, FLAT_X, y, magnitude=True, n_probes=8, n_iter=8, generator=1)
    assert aware.sigma > plain.sigma  # weights |w| < 1: sigma |w| < sigma


def test_flatness_on_the_loss_and_bad_inputs():
    net = _mlp()
    y = _fitted(net, X4)
    r = flatness(net, X4, y, criterion="loss", threshold=0.05, n_probes=4, n_iter=6,
                 generator=0)
    assert r.criterion == "loss" and r.deviation_lower <= 0.05 < r.deviation_upper
    with pytest.raises(InvalidInputError, match="expected labelled data"):
        flatness(net, X4)
    with pytest.raises(InvalidInputError, match="integer class labels"):
        flatness(net, X4, torch.randn(40, 3))
    with pytest.raises(InvalidInputError, match="expected kind"):
        flatness(net, X4, y, kind="hessian")


# ---------------------------------------------------------------------- gradient noise


@pytest.mark.parametrize("batch_size", [1, 8])
def test_gradient_noise_by_an_explicit_loop_over_batches(batch_size):
    net = _mlp()
    y = torch.randint(0, 3, (len(X4),), generator=torch.Generator().manual_seed(0))
    r = gradient_noise(net, X4[:36], y[:36], batch_size=batch_size, generator=4)
    order = torch.randperm(36, generator=torch.Generator().manual_seed(4))
    k = 36 // batch_size
    grads = []
    for b in range(k):
        idx = order[b * batch_size:(b + 1) * batch_size]
        net.zero_grad()
        F.cross_entropy(net(X4[idx]), y[idx]).backward()
        grads.append(torch.cat([p.grad.double().flatten() for p in net.parameters()]))
    net.zero_grad()
    g = torch.stack(grads)
    mean = g.mean(0)
    assert r.noise == pytest.approx(float(((g - mean) ** 2).sum(1).mean()), rel=1e-6)
    assert r.mean_gradient_norm == pytest.approx(float(mean.norm()), rel=1e-6)
    assert (r.n_batches, r.batch_size, r.n_samples) == (k, batch_size, k * batch_size)
    assert sum(p.noise for p in r.parameters) == pytest.approx(r.noise)
    assert [p.name for p in r.parameters] == [n for n, _ in net.named_parameters()]


def test_gradient_noise_is_zero_when_every_batch_is_the_same():
    """Copies of one labelled point: every mini-batch has the same gradient, no noise; the
    same network on varied points has some."""
    net = _mlp()
    y = _fitted(net, X4)
    same = gradient_noise(net, X4[:1].repeat(20, 1), y[:1].repeat(20), batch_size=5,
                          generator=0)
    varied = gradient_noise(net, X4[:20], y[:20], batch_size=5, generator=0)
    assert same.noise < 1e-10 * varied.noise and same.mean_gradient_norm > 0


def test_gradient_noise_bad_inputs():
    with pytest.raises(InvalidInputError, match="expected labelled data"):
        gradient_noise(_mlp(), X4)
    with pytest.raises(InvalidInputError, match="at least two mini-batches"):
        gradient_noise(_mlp(), X4, _fitted(_mlp(), X4), batch_size=30)


# ------------------------------------------------------------------ optimization steps


def test_steps_to_loss_reads_fit_history():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, generator=gen)
    y = (x[:, 0] > 0).long()
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    result = fit(net, (x[:40], y[:40]), (x[40:], y[40:]), lr=0.5, batch_size=10,
                 max_epochs=30, loss_scaling=False, generator=1)
    history = result.history
    assert [row.steps for row in history] == [4 * row.epoch for row in history]
    target = history[3].train_loss
    first = next(row for row in history[1:] if row.train_loss <= target)
    assert steps_to_loss(result, target) == first.steps == steps_to_loss(history, target)
    assert steps_to_loss(result, 1e-12) is None
    assert steps_to_loss(result, 10.0) == 4  # the first epoch's loss is below 10


def test_steps_to_loss_bad_inputs():
    with pytest.raises(InvalidInputError, match="expected history"):
        steps_to_loss([1.0, 2.0], 0.1)
    with pytest.raises(InvalidInputError, match="expected target"):
        steps_to_loss([EpochRecord(0, 0.1, math.nan, math.nan, 0.5, "improved")], 0.0)


# ---------------------------------------------------- the network at initialization fed


def test_the_tracker_gives_the_initial_network():
    start = _mlp()
    net = copy.deepcopy(start)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    y = _fitted(_mlp(seed=3), X4)
    given = Tracker(["distance_from_init"], initial_model=start)
    kept = Tracker(["distance_from_init"])
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(net(X4), y).backward()
        opt.step()
        row_given = given.step(net, (X4, y))
        row_kept = kept.step(net, (X4, y))
    assert row_given["distance_from_init/total"] == pytest.approx(
        distance_from_init(net, start).total)
    first = kept.initial_model  # a copy of the model at the Tracker's first step
    assert kept.history["distance_from_init/total"].iloc[0] == 0.0
    assert row_kept["distance_from_init/total"] == pytest.approx(
        distance_from_init(net, first).total)
    assert given.initial_model is start
    with pytest.raises(InvalidInputError, match="initial_model"):
        Tracker(["distance_from_init"], initial_model="start")


def test_a_study_records_every_flatness_column_and_the_distance_from_init():
    from nngauge.data import LabelledData
    from nngauge.studies._spec import MEASURES
    from nngauge.studies._units import _measure

    start = _mlp(width=8)
    net = _moved(start, scale=0.05)
    train = LabelledData(FLAT_X[:60], _fitted(net, FLAT_X[:60]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        columns = _measure(["flatness", "distance_from_init"], net, (train, train, train), 32,
                           torch.Generator().manual_seed(0), initial=start)
    assert set(columns) == set(MEASURES["flatness"]) | {"distance_from_init"}
    assert len(MEASURES["flatness"]) == 12 and "sharpness_mag_flatness" in columns
    assert columns["distance_from_init"] == pytest.approx(distance_from_init(net, start).total)
    assert all(math.isfinite(v) for v in columns.values())
    at_init = _measure(["distance_from_init"], start, (train,) * 3, 32, None)
    assert at_init == {"distance_from_init": 0.0}


def test_a_trained_unit_measures_its_distance_from_its_own_initialization():
    """A study's training unit gives measure_after the network before training: the distance
    equals the one of the same unit retrained here from build_model's network."""
    from nngauge.studies._spec import parse_spec
    from nngauge.studies._units import (
        UnitTask,
        _generator,
        build_model,
        derive_seed,
        plan_units,
        resolve_architectures,
        run_unit,
        study_data,
    )

    spec = parse_spec({"architectures": {"explicit": [{"width": 8, "depth": 2}]},
                       "data": {"source": "gaussian:d=5", "n": 40},
                       "training": {"lrs": [0.3], "max_epochs": 2,
                                    "measure_after": ["distance_from_init"]}})
    unit = next(u for u in plan_units(spec) if u.kind == "train")
    task = UnitTask(spec, resolve_architectures(spec)[0], unit)
    after = run_unit(task)["measures"]["distance_from_init_after"]
    start = build_model(task)
    net = copy.deepcopy(start)
    train, val, test = study_data(spec.data, spec.seed)
    t = spec.training
    fit(net, train, val, test=test, lr=0.3, optimizer=t.optimizer, batch_size=t.batch_size,
        max_epochs=t.max_epochs, patience=t.patience, decay_patience=t.decay_patience,
        n_decays=t.n_decays, loss_scaling=t.loss_scaling,
        generator=_generator(derive_seed(spec.seed, "train", unit.arch_index, unit.seed,
                                         unit.lr)))
    assert after > 0
    assert after == pytest.approx(float((_flat(net) - _flat(start)).norm()), rel=1e-9)
