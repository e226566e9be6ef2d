"""nngauge's own predictors as zero-cost proxies (nngauge.proxies._ours): each equals the
measure it wraps, called directly; nlc_rule's formula on hand cases; the model's state is kept;
they run on a zoo ResNet; DIRECTIONS covers every proxy."""

import math
import types
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import (
    correlations,
    jacobian_norm,
    kernel_conditioning,
    nlc,
    proxies,
    region_density,
    trajectory_length,
)
from nngauge._internal.data import as_batches
from nngauge.errors import InvalidInputError
from nngauge.proxies import _ours
from nngauge.trajectories import through
from nngauge.zoo import resnet_small

OURS = ("nlc_score", "output_bias", "nlc_rule", "jacobian_growth", "rho_max",
        "kernel_condition", "trajectory_growth", "region_density")
CHEAP = {"jacobian_growth": {"n_iter": 10, "tol": 1e-3},
         "trajectory_growth": {"max_samples": 3, "resolution": 33, "tol": 0.05,
                               "max_points": 257},
         "region_density": {"max_samples": 2, "n_directions": 2}}
"""Options that keep the slow predictors fast on the state and zoo tests."""


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8),
                         nn.ReLU(), nn.Linear(8, 3))


@pytest.fixture(scope="module")
def x():
    return torch.randn(40, 5, generator=_seeded(1))


# --------------------------------------------------------------- equal to the measures


def test_nlc_wrappers_equal_one_batch_of_the_nlc_measure(net, x):
    """nlc_score and output_bias are nngauge.nlc's fields on one batch (n_batches=1) drawn by
    the same generator, bit for bit, and nlc_rule its formula on that NLC; with
    n_batches=None they equal the measure's default (one pass)."""
    direct = nlc(net, x, batch_size=16, n_batches=1, generator=_seeded(2))
    assert proxies.nlc_score(net, x, batch_size=16, generator=_seeded(2)) == direct.nlc
    assert proxies.output_bias(net, x, batch_size=16, generator=_seeded(2)) == direct.output_bias
    assert proxies.nlc_rule(net, x, batch_size=16, generator=_seeded(2)) == max(
        0.0, math.log10(1 / direct.nlc), math.log10(direct.nlc / 3))
    assert proxies.nlc_score(net, x, n_batches=None, generator=_seeded(3)) == nlc(
        net, x, generator=_seeded(3)).nlc


def test_jacobian_growth_is_the_last_hidden_over_the_first_linear_layer(net, x):
    """The default layers are the first linear layer ("0") and the last before the read-out
    ("4"; "6" is the read-out): the growth is the ratio of their RMS-normalized operator norms
    from nngauge.jacobian_norm with the same generator; explicit layers give the same."""
    rows = jacobian_norm(net, x, rms=True, layers=["0", "4"], n_batches=1,
                         generator=_seeded(4)).layers
    assert [row.name for row in rows] == ["0", "4", "output"]
    expected = rows[1].norm / rows[0].norm
    assert proxies.jacobian_growth(net, x, generator=_seeded(4)) == expected
    assert proxies.jacobian_growth(net, x, layers=["0", "4"], generator=_seeded(4)) == expected


def test_rho_max_and_kernel_condition_equal_their_measures(net, x):
    """rho_max is nngauge.correlations' rho_max; kernel_condition is the condition number of
    the conjugate kernel nngauge.kernel_conditioning reports (over its default layers) at the
    last linear layer before the read-out, by default on half as many samples as that layer
    has units (4: finite, where the measure's 200 samples make it singular)."""
    assert proxies.rho_max(net, x, max_samples=20) == correlations(net, x,
                                                                   max_samples=20).rho_max
    rows = {row.name: row for row in kernel_conditioning(net, x, max_samples=6).layers}
    assert list(rows) == ["0", "2", "4", "6", "output"]
    assert proxies.kernel_condition(net, x, max_samples=6) == rows["4"].condition_number
    assert proxies.kernel_condition(net, x, layer="2", max_samples=6) == (
        rows["2"].condition_number)
    by_default = {row.name: row for row in kernel_conditioning(net, x, max_samples=4).layers}
    assert proxies.kernel_condition(net, x) == by_default["4"].condition_number < math.inf
    assert kernel_conditioning(net, x).layers[2].condition_number == math.inf


def test_trajectory_growth_is_the_geometric_mean_of_the_measured_growths(net, x):
    """On the path through the first n_anchors samples, trajectory_growth equals
    (l_K / l_0)^(1/K) of nngauge.trajectory_length's lengths (K activation layers, output row
    left out) and the geometric mean of its per-layer growth column; with a generator, the
    anchors are the batch it draws."""
    result = trajectory_length(net, through(x[:4], 65), tol=1e-2)
    assert [row.name for row in result.layers] == ["input", "1", "3", "5", "output"]
    growth = proxies.trajectory_growth(net, x, max_samples=4, resolution=65, tol=1e-2)
    assert growth == pytest.approx((result.lengths[3] / result.lengths[0]) ** (1 / 3),
                                   rel=1e-12)
    assert growth == pytest.approx(float(np.exp(np.mean(np.log(result.growth[1:4])))),
                                   rel=1e-12)
    drawn = next(iter(as_batches(x, batch_size=4, n_batches=1, generator=_seeded(11)))).inputs
    lengths = trajectory_length(net, through(drawn, 65), tol=1e-2).lengths
    assert proxies.trajectory_growth(net, x, max_samples=4, resolution=65, tol=1e-2,
                                     generator=_seeded(11)) == pytest.approx(
        (lengths[3] / lengths[0]) ** (1 / 3), rel=1e-12)


def test_region_density_equals_the_measure_at_the_default_radius(net, x):
    """region_density is nngauge.region_density's density on the first max_samples samples
    with the same generator, at the measure's default r = 0.05 x the RMS distance between two
    of those samples (computed here over all pairs); its local-complexity shortcut leaves the
    density unchanged."""
    points = x[:6].double()
    pairs = torch.cdist(points, points)[tuple(torch.triu_indices(6, 6, 1))]
    radius = 0.05 * float(pairs.pow(2).mean().sqrt())
    direct = region_density(net, x, radius=radius, max_samples=6, n_directions=3,
                            generator=_seeded(5))
    assert proxies.region_density(net, x, max_samples=6, n_directions=3,
                                  generator=_seeded(5)) == pytest.approx(direct.density,
                                                                         rel=1e-9)
    assert proxies.region_density(net, x, radius=0.3, max_samples=6, n_directions=3,
                                  generator=_seeded(5)) == region_density(
        net, x, radius=0.3, max_samples=6, n_directions=3, generator=_seeded(5)).density


# ---------------------------------------------------------------------------- nlc_rule


@pytest.mark.parametrize("value, bias, expected", [
    (2.0, 1.0, 0.0), (1.0, 1.0, 0.0), (3.0, 1.0, 0.0), (10.0, 1.0, math.log10(10 / 3)),
    (0.5, 1.0, math.log10(1 / 0.5)), (300.0, 999.0, 2.0), (2.0, 1000.0, 0.0),
    (2.0, 1000.5, math.inf), (0.0, 1.0, math.inf)])
def test_nlc_rule_is_the_distance_in_decades_from_the_ideal_range(monkeypatch, net, x, value,
                                                                  bias, expected):
    """With nngauge.nlc replaced by a stub returning (NLC, output bias): 0 inside [1, 3]
    (bounds included), log10(NLC / 3) above, log10(1 / NLC) below, inf when the bias exceeds
    1000 strictly (the paper's 1000 Q_j(S f) < Q f) or the NLC is 0."""
    monkeypatch.setattr(_ours, "nlc", lambda *a, **k: types.SimpleNamespace(
        nlc=value, output_bias=bias))
    assert proxies.nlc_rule(net, x) == pytest.approx(expected, rel=1e-12)


def test_nlc_rule_options_and_a_network_with_a_huge_output_offset(monkeypatch, net, x):
    """The range and threshold are options: NLC 8 is log10(8 / 4) from (2, 4), and bias 20 is
    flagged at threshold 10. A real network whose read-out adds 1e6 to every output has output
    bias far above 1000 (inf), the same network with bias 0 a finite value; a bad range is
    refused naming nlc_rule()."""
    torch.manual_seed(3)
    offset = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    with torch.no_grad():
        offset[2].bias.fill_(1e6)
    assert proxies.output_bias(offset, x, generator=_seeded(6)) > 1e3
    assert proxies.nlc_rule(offset, x, generator=_seeded(6)) == math.inf
    with torch.no_grad():
        offset[2].bias.zero_()
    assert math.isfinite(proxies.nlc_rule(offset, x, generator=_seeded(6)))
    with pytest.raises(InvalidInputError, match=r"nlc_rule\(\) expected ideal"):
        proxies.nlc_rule(offset, x, ideal=(3.0, 1.0))
    monkeypatch.setattr(_ours, "nlc", lambda *a, **k: types.SimpleNamespace(
        nlc=8.0, output_bias=20.0))
    assert proxies.nlc_rule(net, x, ideal=(2.0, 4.0)) == pytest.approx(math.log10(2.0))
    assert proxies.nlc_rule(net, x, bias_threshold=10.0) == math.inf


# ----------------------------------------------------------------- state, zoo, errors


def _bn_net():
    torch.manual_seed(4)
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * 4 * 4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8),
                        nn.ReLU(), nn.Linear(8, 3))
    net[5].eval()  # a mix of modes
    net[0].bias.requires_grad_(False)  # a frozen parameter
    net[4].weight.grad = torch.full_like(net[4].weight, 0.25)  # a gradient left by the user
    return net


def _state(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            [m.training for m in model.modules()],
            [p.requires_grad for p in model.parameters()],
            [None if p.grad is None else p.grad.clone() for p in model.parameters()])


def _same(a, b):
    return (a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
            and a[1] == b[1] and a[2] == b[2]
            and all((g is None and h is None) or torch.equal(g, h) for g, h in zip(a[3], b[3])))


@pytest.mark.parametrize("name", OURS)
def test_every_predictor_leaves_a_batchnorm_network_as_it_was(name):
    """Parameters, buffers (running statistics, num_batches_tracked), train/eval modes,
    requires_grad flags and .grad are the same after the predictor, on a network with
    batchnorm in train mode (frozen on the data for the per-point ones) and in eval mode; the
    result is a float."""
    net = _bn_net()
    x = torch.randn(12, 2, 6, 6, generator=_seeded(7))
    before = _state(net)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trajectory lengths not converged at a coarse tol
        value = getattr(proxies, name)(net, x, generator=_seeded(8), **CHEAP.get(name, {}))
    assert isinstance(value, float) and not math.isnan(value)
    assert _same(before, _state(net))


@pytest.mark.slow
def test_every_predictor_runs_on_a_zoo_resnet():
    """On the zoo's torchvision-layout ResNet (batchnorm in train mode, a ReLU module called
    twice per block, in-place residual adds, a shortcut convolution) every predictor gives a
    finite positive float (rho_max: in [-1, 1]) and leaves the model as it was."""
    model = resnet_small(width=4, generator=0)
    x = torch.randn(8, 3, 16, 16, generator=_seeded(9))
    before = _state(model)
    for name in OURS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = getattr(proxies, name)(model, x, generator=_seeded(10),
                                           **CHEAP.get(name, {}))
        assert math.isfinite(value) and (value > 0 or name in ("rho_max", "nlc_rule")), name
        assert _same(before, _state(model)), name


def test_missing_layers_and_points_are_refused_with_the_fix(x):
    """Too few layers for jacobian_growth (one hidden linear layer) or kernel_condition (no
    hidden layer), a network without activation layers for trajectory_growth, and one sample
    for region_density's default radius each give an InvalidInputError naming the predictor,
    what was expected and the fix."""
    shallow = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    with pytest.raises(InvalidInputError, match=r"jacobian_growth\(\) expected at least two.*"
                                                r"Fix: pass layers="):
        proxies.jacobian_growth(shallow, x)
    with pytest.raises(InvalidInputError, match=r"kernel_condition\(\) expected a linear.*"
                                                r"Fix: pass layer="):
        proxies.kernel_condition(nn.Linear(5, 3), x)
    with pytest.raises(InvalidInputError, match=r"trajectory_growth\(\) expected a network "
                                                r"with activation"):
        proxies.trajectory_growth(nn.Linear(5, 3), x, resolution=9)
    with pytest.raises(InvalidInputError, match=r"region_density\(\) expected at least 2 "
                                                r"distinct samples.*Fix: .*radius="):
        proxies.region_density(shallow, x, max_samples=1)


def test_directions_cover_every_proxy_with_the_papers_signs():
    """DIRECTIONS has a +1 / -1 for every scalar proxy nngauge.proxies exports (te_nas_rank
    combines two of them and is left out): lower is better for the NLC rule and its parts,
    Jacobian growth, rho_max and the two condition numbers; higher for the rest."""
    scalar = set(proxies.__all__) - {"DIRECTIONS", "te_nas_rank"}
    assert set(proxies.DIRECTIONS) == scalar
    lower = {name for name, sign in proxies.DIRECTIONS.items() if sign == -1}
    assert lower == {"nlc_score", "output_bias", "nlc_rule", "jacobian_growth", "rho_max",
                     "kernel_condition", "te_nas"}
    assert set(proxies.DIRECTIONS.values()) == {-1, 1}
