"""sharpness, expected_sharpness, pac_bayes: box, ordering, KL formula, batched == loop."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge.errors import NNGaugeError
from nngauge.measures.generalization._sharpness import (
    expected_sharpness,
    pac_bayes,
    pac_bayes_bound,
    sharpness,
)


def _trained(seed=0, steps=300):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).double()
    x = torch.randn(48, 4, generator=gen, dtype=torch.float64)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    opt = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return net, x, y


def test_sharpness_stays_in_box_and_restores_model():
    net, x, y = _trained()
    net.train()
    before = copy.deepcopy(net.state_dict())
    alpha = 1e-2
    r = sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, n_iter=60, lr=0.05,
                  generator=torch.Generator().manual_seed(1))
    for name, w in net.named_parameters():
        nu = r.perturbation[name]
        assert bool((nu.abs() <= alpha * (w.detach().abs() + 1) + 1e-15).all())
    assert r.max_box_ratio <= 1.0 + 1e-12 and r.max_box_ratio > 0.99  # ascent reaches the wall
    assert r.max_loss > r.loss
    assert r.sharpness == pytest.approx((r.max_loss - r.loss) / (1 + r.loss))
    full = F.cross_entropy(net(x), y).item()
    assert r.loss == pytest.approx(full)
    assert net.training and all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_sharpness_at_least_expected_sharpness():
    """Box half-width alpha(|w|+1) >= sigma = alpha: near a minimum the box maximum exceeds the
    Gaussian average (quadratic model: max over the box >= r^2 tr(H)/2 >= sigma^2 tr(H)/2)."""
    net, x, y = _trained()
    alpha = 5e-3
    sharp = sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, n_iter=100, batch_size=64,
                      generator=torch.Generator().manual_seed(2))
    expected = expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, noise="isotropic",
                                  n_probes=400, batch_size=64,
                                  generator=torch.Generator().manual_seed(3))
    assert expected.loss == pytest.approx(sharp.loss)  # same data: the whole set
    assert sharp.difference >= expected.expected_sharpness + 3 * expected.stderr


def test_kl_matches_formula():
    net, x, y = _trained(steps=5)
    alpha = 0.02
    r = expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, n_probes=4)
    w = np.concatenate([p.detach().numpy().ravel() for p in net.parameters()])
    sigma = alpha * (10 * np.abs(w) + 1)
    assert r.kl == pytest.approx(np.sum(w**2 / (2 * sigma**2)), rel=1e-12)
    # appendix A's printed expression (1/alpha^2) sum (w / (10|w| + 1))^2 is 2 KL
    assert 2 * r.kl == pytest.approx(np.sum((w / (10 * np.abs(w) + 1)) ** 2) / alpha**2)
    iso = expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, noise="isotropic",
                             sigma=0.3, n_probes=4)
    assert iso.kl == pytest.approx(np.sum(w**2) / (2 * 0.3**2), rel=1e-12)


def test_batched_equals_loop_over_copies():
    """The documented draw contract, replayed by copying and perturbing the model."""
    net, x, y = _trained(steps=5)
    alpha, n, b = 0.05, 7, 10
    r = expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=alpha, n_probes=n,
                           batch_size=b, method="weights", chunk_size=3,
                           generator=torch.Generator().manual_seed(4))
    assert r.method == "weights"
    base = int(torch.randint(2**63 - 1, (), generator=torch.Generator().manual_seed(4)))
    params = dict(net.named_parameters())
    expected, bases = [], []
    for k in range(n):
        seed = int(np.random.SeedSequence((base, k)).generate_state(1, np.uint64)[0])
        gen = torch.Generator().manual_seed(seed)
        idx = torch.randperm(len(y), generator=gen)[:b]
        copy_ = copy.deepcopy(net)
        with torch.no_grad():
            for name, p in copy_.named_parameters():
                z = torch.empty_like(p).normal_(generator=gen)
                p.add_(alpha * (10 * params[name].abs() + 1) * z)
        expected.append(F.cross_entropy(copy_(x[idx]), y[idx]).item())
        bases.append(F.cross_entropy(net(x[idx]), y[idx]).item())
    assert np.allclose(r.perturbed_losses, expected, atol=1e-12)
    assert r.expected_sharpness == pytest.approx(np.mean(expected) - np.mean(bases), abs=1e-12)


@pytest.mark.parametrize("method", ["weights", "local"])
def test_expected_sharpness_independent_of_chunks_and_threads(method):
    """Chunk size 1 never gathers distinct points (local), 9 does: same numbers."""
    net, x, y = _trained(steps=5)
    run = lambda chunk: expected_sharpness(
        net, (x, y), loss=F.cross_entropy, alpha=0.05, n_probes=9, batch_size=10, method=method,
        chunk_size=chunk, generator=torch.Generator().manual_seed(8)).perturbed_losses
    reference = run(9)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = run(2)
    finally:
        torch.set_num_threads(threads)
    for other in (run(4), run(1), single):
        assert np.allclose(other, reference, rtol=0, atol=1e-13)
    assert len(set(reference.tolist())) == 9  # distinct perturbations


def test_expected_sharpness_deterministic_and_grows_with_alpha():
    net, x, y = _trained()
    run = lambda a, s: expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=a, n_probes=200,
                                          batch_size=16, generator=torch.Generator().manual_seed(s))
    assert run(0.01, 5).expected_sharpness == run(0.01, 5).expected_sharpness
    assert run(0.003, 5).expected_sharpness < run(0.03, 5).expected_sharpness


def test_pac_bayes_curve_and_bound_monotone():
    net, x, y = _trained()
    r = pac_bayes(net, (x, y), loss=F.cross_entropy, alphas=[0.001, 0.01, 0.05], n_probes=100,
                  batch_size=16, generator=torch.Generator().manual_seed(6))
    kls = [p.kl for p in r.points]
    assert kls[0] > kls[1] > kls[2]  # KL falls as the noise grows
    assert r.points[0].expected_sharpness < r.points[2].expected_sharpness
    for p in r.points:
        assert p.bound == pytest.approx(pac_bayes_bound(r.train_loss, p.expected_sharpness,
                                                        p.kl, 48, 0.05))
    assert r.best_bound == min(p.bound for p in r.points)
    assert len(r.to_frame()) == 3
    base = pac_bayes_bound(0.1, 0.05, 10.0, 500, 0.05)
    assert pac_bayes_bound(0.2, 0.05, 10.0, 500, 0.05) > base
    assert pac_bayes_bound(0.1, 0.06, 10.0, 500, 0.05) > base
    assert pac_bayes_bound(0.1, 0.05, 20.0, 500, 0.05) > base
    assert pac_bayes_bound(0.1, 0.05, 10.0, 500, 0.01) > base
    assert pac_bayes_bound(0.1, 0.05, 10.0, 5000, 0.05) < base
    assert pac_bayes_bound(0.1, 0.05, 10.0, 500, 0.05, form="eq6") == pytest.approx(
        0.15 + math.sqrt((10 + math.log(20)) / 500))


def test_bad_input():
    net, x, y = _trained(steps=1)
    with pytest.raises(NNGaugeError, match="expected labelled data.*Fix"):
        sharpness(net, x, loss=F.cross_entropy, n_iter=2)
    with pytest.raises(NNGaugeError, match="empty data"):
        expected_sharpness(net, (x[:0], y[:0]), loss=F.cross_entropy, alpha=0.1)
    with pytest.raises(NNGaugeError, match="alpha a finite number > 0"):
        expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=-1.0)
    with pytest.raises(NNGaugeError, match="noise"):
        expected_sharpness(net, (x, y), loss=F.cross_entropy, alpha=0.1, noise="uniform")
    with pytest.raises(NNGaugeError, match="scalar"):
        sharpness(net, (x, y), loss=lambda o, t: F.cross_entropy(o, t, reduction="none"), n_iter=2)
    with pytest.raises(NNGaugeError, match="alphas"):
        pac_bayes(net, (x, y), loss=F.cross_entropy, alphas=[])
    with pytest.raises(NNGaugeError, match="delta"):
        pac_bayes(net, (x, y), loss=F.cross_entropy, alphas=[0.1], delta=1.5)
