"""Correlation maps P(rho) of wide networks: Monte Carlo, closed forms vs quadrature, phases."""

import numpy as np
import pytest
import torch

from nngauge.activations import get
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.theory._correlation import correlation_map, length_fixed_point
from nngauge.theory._critical import critical_init
from nngauge.theory._gaussian import gaussian_covariance, hermite_coefficients

WIDTH = 2048
DEPTH = 10
RHO0 = (-0.5, 0.2, 0.9)
NETWORKS = 128  # independent networks per setting; their mean cosine is compared with theory
TOL = 0.02


def monte_carlo(settings, networks, *, sampler="gram", seed=0, device="cpu"):
    """Mean empirical cosine of input pairs over networks, shape (len(settings), DEPTH + 1, 3).

    Each setting is (activation, sigma_w, sigma_b, arch, q_in); inputs have exact cosines RHO0
    and ||x||^2 = q_in * WIDTH. Per layer, with W_ij ~ N(0, sigma_w^2), b_i ~ N(0, sigma_b^2):
    - layernorm (shrinkage paper eq. 2.1; normalization without centering or affine):
      y = W phi(z) / sqrt(N) + b,  z_next = sqrt(N) y / ||y||
    - resnet (section 3; U_ij ~ N(0, 1)):
      y = z + W phi(normalize(U z / sqrt(N))) / sqrt(N) + b,  z_next = normalize(y)
    - mlp (Poole et al. 2016): h_next = W phi(h) / sqrt(N) + b.

    ``sampler="weights"`` draws the N x N matrices. ``sampler="gram"`` draws W a / sqrt(N) for
    the batch a (N x k) directly: given a, its rows are iid N(0, a^T a / N), because a fresh W
    is independent of a. Both give the same network outputs in distribution; "gram" costs
    O(N k^2) per layer instead of O(N^2), which affords the hundreds of networks needed: one
    network's cosines drift by ~0.05 over 10 layers at N = 2048 (random-walk accumulation of
    O(N^-1/2) steps), shared by all its input pairs.
    """
    gen = torch.Generator(device).manual_seed(seed)
    # Gaussians drawn in float32 (5x faster on CPU), all arithmetic in float64
    gauss = lambda *shape: torch.randn(*shape, generator=gen, device=device).double()  # noqa: E731

    def dense(a):  # W a / sqrt(N), W_ij ~ N(0, 1), batched over networks: a is (K, N, k)
        if sampler == "weights":
            return gauss(a.shape[0], WIDTH, WIDTH) @ a / np.sqrt(WIDTH)
        evals, evecs = torch.linalg.eigh(a.transpose(1, 2) @ a / WIDTH)
        root = evecs * evals.clamp(min=0.0).sqrt().unsqueeze(1)  # root @ root^T = a^T a / N
        return gauss(*a.shape) @ root.transpose(1, 2)

    basis, _ = torch.linalg.qr(gauss(networks, WIDTH, 2 * len(RHO0)))
    e1, e2 = basis[..., : len(RHO0)], basis[..., len(RHO0):]
    rho = torch.tensor(RHO0, dtype=torch.float64, device=device)
    x = torch.cat([e1, rho * e1 + torch.sqrt(1 - rho**2) * e2], dim=-1) * np.sqrt(WIDTH)
    out = []
    for act, sw, sb, arch, q_in in settings:
        phi, z = act.torch_fn, x * np.sqrt(q_in)
        trace = [_cosines(z)]
        for _ in range(DEPTH):
            bias = sb * gauss(networks, WIDTH, 1)
            if arch == "layernorm":
                z = _normalize(sw * dense(phi(z)) + bias)
            elif arch == "resnet":
                z = _normalize(z + sw * dense(phi(_normalize(dense(z)))) + bias)
            else:
                z = sw * dense(phi(z)) + bias
            trace.append(_cosines(z))
        out.append(torch.stack(trace).mean(dim=1).cpu().numpy())
    return np.array(out)


def _normalize(y):
    return np.sqrt(y.shape[-2]) * y / y.norm(dim=-2, keepdim=True)


def _cosines(h):
    n = len(RHO0)
    a, b = h[..., :n], h[..., n:]
    return (a * b).sum(-2) / (a.norm(dim=-2) * b.norm(dim=-2))


def _settings():
    """(label, correlation map, expected phase); critical sigmas come from critical_init."""
    out = []
    for name, chaotic_sb in [("erf", 0.15), ("tanh", 0.1), ("relu", None)]:
        sw, sb = critical_init(name)
        out += [(f"{name}-critical", correlation_map(name, sw, sb), "critical"),
                (f"{name}-ordered", correlation_map(name, 1.0, sb + 0.8), "ordered")]
        if chaotic_sb is not None:  # relu under LayerNorm is never chaotic: P'(1) = 1/(1 + 2 sb^2)
            out.append((f"{name}-chaotic", correlation_map(name, 1.0, chaotic_sb), "chaotic"))
    sw_c, sb_c = critical_init("tanh", sigma_b=0.3, arch="mlp")
    sw_r, _ = critical_init("relu", sigma_b=0.0, arch="mlp")
    out += [
        ("mlp-tanh-ordered", correlation_map("tanh", 1.0, 0.3, arch="mlp"), "ordered"),
        ("mlp-tanh-critical", correlation_map("tanh", sw_c, sb_c, arch="mlp"), "critical"),
        ("mlp-tanh-chaotic", correlation_map("tanh", 1.6, 0.3, arch="mlp"), "chaotic"),
        ("mlp-relu-critical", correlation_map("relu", sw_r, 0.0, arch="mlp"), "critical"),
        # no bias: q* = 0 (sigma_w^2 < 2) or none (> 2), yet P is defined (C_q = q C_1)
        ("mlp-relu-vanishing", correlation_map("relu", 1.0, 0.0, arch="mlp"), "ordered"),
        ("mlp-relu-exploding", correlation_map("relu", 1.6, 0.0, arch="mlp"), "chaotic"),
        ("resnet-erf-chaotic", correlation_map("erf", 1.5, 0.0, arch="resnet"), "chaotic"),
    ]
    return out


SETTINGS = _settings()


@pytest.fixture(scope="module")
def empirical():
    return monte_carlo([_spec(m) for _, m, _ in SETTINGS], NETWORKS)


def _spec(cmap):
    return cmap.activation, cmap.sigma_w, cmap.sigma_b, cmap.arch, cmap.q


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SETTINGS)), ids=[s[0] for s in SETTINGS])
def test_wide_networks_follow_iterate(empirical, index):
    """Each setting's correlation map has the expected phase (ordered, critical, chaotic), and
    the mean cosine of input pairs over 128 Monte Carlo networks of width 2048 follows the
    infinite-width map P iterated over 10 layers to within 0.02 (Poole et al. (NIPS 2016) for
    the MLP; shrinkage paper eq. 2.1 and section 3 for LayerNorm and ResNet)."""
    label, cmap, phase = SETTINGS[index]
    assert cmap.phase == phase
    theory = cmap.iterate(np.array(RHO0), DEPTH)
    assert np.max(np.abs(empirical[index] - theory)) < TOL, (label, empirical[index] - theory)


@pytest.mark.slow
def test_networks_with_explicit_weight_matrices_follow_iterate():
    """Networks with the literal N x N Gaussian weight matrices (not the Gram sampler) follow the
    iterated correlation map to within 0.03 in the ordered phase (erf, relu), where 4 networks
    suffice because noise is damped; the all-phase check uses the same networks in distribution."""
    maps = [m for label, m, _ in SETTINGS if label in ("erf-ordered", "relu-ordered")]
    empirical = monte_carlo([_spec(m) for m in maps], 4, sampler="weights")
    for cmap, emp in zip(maps, empirical):
        assert np.max(np.abs(emp - cmap.iterate(np.array(RHO0), DEPTH))) < 0.03


@pytest.mark.parametrize("name, slope", [("relu", 0.5), ("leaky_relu(negative_slope=0.2)", 0.52)])
@pytest.mark.parametrize("sigma_w", [0.8, 1.41, 1.5, 3.0])
def test_homogeneous_mlp_without_bias_needs_no_fixed_point(name, slope, sigma_w):
    # C_q(rho) = q C_1(rho) for a positively homogeneous phi, so without bias P is the layer's
    # normalized kernel at every sigma_w and input variance, P'(1) = 1, and the variance and
    # squared gradients scale by chi_1 = sigma_w^2 E[phi'(z)^2] per layer (Poole et al. 2016)
    cmap = correlation_map(name, sigma_w, 0.0, arch="mlp")
    same = correlation_map(name, 1.0, 0.0, arch="mlp", q0=7.0)
    rho = np.linspace(-1.0, 1.0, 9)
    np.testing.assert_allclose(cmap(rho), same(rho), atol=1e-12)
    c1 = gaussian_covariance(name, rho, q1=1.0, q2=1.0)
    np.testing.assert_allclose(cmap(rho), c1 / c1[-1], atol=1e-12)
    assert float(cmap.derivative(1.0)) == pytest.approx(1.0, abs=1e-10)
    assert cmap.slope_at_one == pytest.approx(sigma_w**2 * slope, rel=1e-10)
    assert cmap.variance_ratio == pytest.approx(sigma_w**2 * c1[-1], rel=1e-10)
    if name == "relu":  # the arc-cosine kernel of degree 1: P(0) = 1 / pi
        assert float(cmap(0.0)) == pytest.approx(1 / np.pi, abs=1e-12)


def test_length_fixed_point_brute_force():
    # relu: q -> sigma_w^2 q / 2 + sigma_b^2, so q* = sigma_b^2 / (1 - sigma_w^2 / 2)
    assert length_fixed_point("relu", 1.2, 0.5) == pytest.approx(0.25 / (1 - 0.72), rel=1e-12)
    # tanh: plain fixed-point iteration with an independent Gauss-Hermite rule
    z, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / w.sum()
    q = 1.0
    for _ in range(500):
        q = 1.5**2 * np.sum(w * np.tanh(np.sqrt(q) * z) ** 2) + 0.3**2
    assert length_fixed_point("tanh", 1.5, 0.3) == pytest.approx(q, rel=1e-10)
    assert length_fixed_point("tanh", 0.9, 0.0) == 0.0  # variances vanish


@pytest.mark.parametrize("arch", ["layernorm", "resnet", "mlp"])
@pytest.mark.parametrize("name", ["erf", "relu", "leaky_relu"])
def test_closed_form_matches_quadrature(name, arch):
    rho = np.linspace(-1.0, 1.0, 9)
    closed = correlation_map(name, 1.3, 0.4, arch=arch, method="closed")
    quad = correlation_map(name, 1.3, 0.4, arch=arch, method="quadrature")
    np.testing.assert_allclose(closed(rho), quad(rho), atol=1e-10)
    np.testing.assert_allclose(closed.derivative(rho[1:-1]), quad.derivative(rho[1:-1]), atol=1e-8)
    assert closed.slope_at_one == pytest.approx(quad.slope_at_one, abs=1e-8)


@pytest.mark.parametrize("arch", ["layernorm", "resnet", "mlp"])
@pytest.mark.parametrize("name", ["erf", "tanh", "relu"])
def test_derivative_matches_finite_differences(name, arch):
    cmap = correlation_map(name, 1.2, 0.3, arch=arch)
    rho = np.array([-0.8, -0.3, 0.0, 0.4, 0.85])
    h = 1e-5
    finite = (cmap(rho + h) - cmap(rho - h)) / (2 * h)
    np.testing.assert_allclose(cmap.derivative(rho), finite, rtol=1e-6, atol=1e-8)
    one_sided = (cmap(1.0) - cmap(1.0 - h)) / h
    assert cmap.slope_at_one == pytest.approx(float(one_sided), rel=1e-3)


@pytest.mark.parametrize("name, sb", [("tanh", 0.0), ("relu", 0.7), ("gelu", 0.2)])
def test_layernorm_map_is_the_hermite_series_eq_2_4(name, sb):
    # P(rho) = (sb^2 + sw^2 a0^2) / D + sw^2 / D * sum_{k>=1} a_k^2 rho^k, D = sb^2 + sw^2 ||phi||^2
    sw = 1.1
    a = hermite_coefficients(name, 120)
    rho = np.linspace(-0.9, 0.9, 7)
    d = sb**2 + sw**2 * float(gaussian_covariance(name, 1.0))  # ||phi||^2; the series' tail is slow
    series = (sb**2 + sw**2 * np.polynomial.polynomial.polyval(rho, a**2)) / d
    np.testing.assert_allclose(correlation_map(name, sw, sb)(rho), series, atol=1e-6)


def test_resnet_map_is_eq_a10():
    erf = get("erf")
    c = lambda r: 2 / np.pi * np.arcsin(2 * r / 3)  # noqa: E731  C[erf | rho], appendix B
    sigma = 0.7
    rho = np.linspace(-1, 1, 11)
    expected = (rho + sigma**2 * c(rho)) / (1 + sigma**2 * c(1.0))
    actual = correlation_map(erf, sigma, arch="resnet")(rho)
    np.testing.assert_allclose(actual, expected, atol=1e-14)


def test_phases():
    assert correlation_map("relu", 1.0, 0.0).phase == "critical"
    assert correlation_map("relu", 2.0, 0.5).phase == "ordered"
    assert correlation_map("erf", 1.0, 0.0).phase == "chaotic"
    assert correlation_map("erf", *critical_init("erf")).phase == "critical"
    assert correlation_map("identity", 1.0, 0.5).phase == "ordered"
    assert correlation_map("relu", np.sqrt(2.0), 0.0, arch="mlp").phase == "critical"
    assert correlation_map("tanh", 0.5, 0.1, arch="mlp").phase == "ordered"
    step = correlation_map("step", 1.0, 0.5)  # jumps: P'(1) is infinite
    assert step.slope_at_one == np.inf and step.phase == "chaotic"


def test_fixed_point():
    chaotic = correlation_map("erf", 1.0, 0.2)
    assert chaotic.phase == "chaotic"
    rho_fp = chaotic.fixed_point()
    assert 0.0 < rho_fp < 1.0
    assert float(chaotic(rho_fp)) == pytest.approx(rho_fp, abs=1e-12)
    assert float(chaotic.derivative(rho_fp)) < 1.0  # attracting
    np.testing.assert_allclose(chaotic.iterate(np.array([0.0, 0.5, 0.99]), 300)[-1], rho_fp,
                               atol=1e-9)
    assert correlation_map("erf", 1.0, 0.0).fixed_point() == 0.0  # odd, sb = 0: P(0) = 0
    ordered = correlation_map("tanh", 1.0, 1.0)
    assert ordered.fixed_point() == 1.0
    assert ordered.iterate(0.0, 400)[-1] == pytest.approx(1.0, abs=1e-6)
    assert correlation_map("identity").fixed_point() == 0.0  # P is the identity


def test_iterate_shapes_and_start():
    cmap = correlation_map("relu")
    rho0 = np.array([[0.0, 0.5], [-1.0, 1.0]])
    trace = cmap.iterate(rho0, 3)
    assert trace.shape == (4, 2, 2)
    np.testing.assert_array_equal(trace[0], rho0)
    np.testing.assert_allclose(trace[2], cmap(cmap(rho0)))
    assert cmap.iterate(0.3, 0).shape == (1,)
    assert cmap.to_dict()["phase"] == "critical"


def test_bad_input_says_expected_got_fix():
    cmap = correlation_map("relu")
    cases = [
        lambda: cmap(1.5),
        lambda: cmap.derivative(np.array([0.0, -2.0])),
        lambda: cmap.iterate(0.1, -1),
        lambda: correlation_map("relu", -1.0),
        lambda: correlation_map("relu", 1.0, np.nan),
        lambda: correlation_map("relu", 0.0, 0.0),
        lambda: correlation_map("relu", 2.0, 0.1, arch="mlp"),  # length map diverges
        lambda: correlation_map("step").derivative(0.5),
        lambda: correlation_map("tanh", 0.9, 0.0, arch="mlp")(0.5),  # q* = 0
    ]
    for case in cases:
        with pytest.raises(InvalidInputError) as info:
            case()
        message = str(info.value)
        assert "expected" in message and "got" in message and "Fix:" in message
    with pytest.raises(InvalidInputError, match="arch in .*layernorm.*resnet.*mlp"):
        correlation_map("relu", arch="batchnorm")
    with pytest.raises(NNGaugeError):
        correlation_map("no_such_activation")
