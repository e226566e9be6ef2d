"""Data-free layer spectra (issue 33): ``nngauge.layer_spectra`` against brute force and closed
forms. The ESD is the squared singular values of each weight matrix (numpy's SVD here); the
stable rank and the norms are computed by hand; the Clauset-Shalizi-Newman fit recovers planted
Pareto exponents and equals a plain scan of every candidate x_min; the Marchenko-Pastur fit finds
no spike in Gaussian matrices and exactly the planted rank-one spikes; convolutions are read as
the matrices built here by index loops; every zoo network runs; bad inputs are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import catalogue, layer_spectra
from nngauge.errors import InvalidInputError
from nngauge.measures.generalization import _spectra
from nngauge.measures.generalization._spectra import fit_power_law, mp_median
from nngauge.zoo import ZOO


def _gaussian(n: int, m: int, seed: int, std: float = 1.0) -> torch.Tensor:
    draws = torch.Generator().manual_seed(seed)
    return torch.randn(n, m, generator=draws, dtype=torch.float64) * std


def _linear(weight: torch.Tensor) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False).to(weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
    return layer


def _esd(matrix: np.ndarray) -> np.ndarray:
    """Squared singular values, ascending (numpy's SVD)."""
    return np.sort(np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False) ** 2)


def _pareto(alpha: float, n: int, seed: int) -> np.ndarray:
    """n draws of the density (alpha - 1) x^-alpha on [1, inf) (inverse transform)."""
    return (1 - np.random.default_rng(seed).random(n)) ** (-1 / (alpha - 1))


# ------------------------------------------------------------------ norms by hand


def test_stable_rank_and_log_norms_by_hand():
    w = _gaussian(80, 50, 0)
    row = layer_spectra(nn.Sequential(_linear(w)))["0"]
    fro2 = float(torch.linalg.matrix_norm(w, "fro") ** 2)
    spec2 = float(torch.linalg.matrix_norm(w, 2) ** 2)
    assert row.stable_rank == pytest.approx(fro2 / spec2, rel=1e-10)
    assert row.log_spectral_norm == pytest.approx(math.log10(spec2), rel=1e-10)
    assert row.log_norm == pytest.approx(math.log10(fro2), rel=1e-10)
    assert row.lambda_max == pytest.approx(spec2, rel=1e-10)
    assert row.shape == (80, 50) and row.n_eigenvalues == 50
    np.testing.assert_allclose(row.eigenvalues, _esd(w), rtol=1e-9, atol=1e-12 * spec2)
    # the comparison can fail: a rank-one matrix has stable rank 1, the identity n
    u = _gaussian(30, 1, 1) @ _gaussian(1, 20, 2)
    assert layer_spectra(nn.Sequential(_linear(u)), min_eigenvalues=3)["0"].stable_rank \
        == pytest.approx(1.0, rel=1e-9)
    assert layer_spectra(nn.Sequential(_linear(torch.eye(20, dtype=torch.float64))))[
        "0"].stable_rank == pytest.approx(20.0, rel=1e-12)


def test_alpha_weighted_log_alpha_norm_and_the_network_means():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(60, 120), nn.ReLU(), nn.Linear(120, 90), nn.ReLU(),
                        nn.Linear(90, 4))
    result = layer_spectra(net)
    fitted = [r for r in result.layers if math.isfinite(r.alpha)]
    assert [r.name for r in fitted] == ["0", "2"] and result.n_fitted == 2
    for r in fitted:
        assert r.alpha_weighted == pytest.approx(r.alpha * math.log10(r.lambda_max))
        positive = r.eigenvalues[r.eigenvalues > 0]
        assert r.log_alpha_norm == pytest.approx(math.log10(np.sum(positive ** r.alpha)))
        assert r.alpha_stderr == pytest.approx((r.alpha - 1) / math.sqrt(r.n_tail))
    assert result.alpha == pytest.approx(np.mean([r.alpha for r in fitted]))
    assert result.alpha_weighted == pytest.approx(np.mean([r.alpha_weighted for r in fitted]))
    every = result.layers
    assert result.log_spectral_norm == pytest.approx(np.mean([r.log_spectral_norm for r in every]))
    assert result.stable_rank == pytest.approx(np.mean([r.stable_rank for r in every]))
    assert result.n_spikes == sum(r.n_spikes for r in fitted)
    assert math.isnan(result["4"].alpha) and result["4"].n_spikes is None


# ------------------------------------------------------------------ the power-law fit


@pytest.mark.parametrize("alpha", [2.0, 3.0, 4.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_recovers_a_planted_pareto_exponent(alpha, seed):
    """2,000 eigenvalues of density ~ lambda^-alpha: the fit is within 0.2. (Over 200 seeds
    the error exceeded 0.2 for 0 draws at alpha 2, 2 at alpha 3 and 9 at alpha 4: the KS
    choice of x_min sometimes keeps a short tail; these fixed seeds are not among them.)"""
    fit = fit_power_law(_pareto(alpha, 2000, seed))
    assert abs(fit.alpha - alpha) < 0.2
    assert fit.n_tail > 100


@pytest.mark.slow
def test_alpha_recovers_the_exponent_of_a_matrix_with_a_pareto_spectrum():
    """A 2,000 x 2,000 matrix W = H1 diag(sqrt(lambda)) H2 (H1, H2 Householder reflections:
    orthogonal) with lambda 2,000 Pareto draws of exponent 3: layer_spectra's alpha is the fit
    of W's ESD and within 0.2 of 3."""
    lam = _pareto(3.0, 2000, 0)
    rng = np.random.default_rng(1)

    def householder() -> np.ndarray:
        v = rng.standard_normal(2000)
        return np.eye(2000) - 2 * np.outer(v, v) / (v @ v)

    w = householder() * np.sqrt(lam) @ householder()
    row = layer_spectra(nn.Sequential(_linear(torch.from_numpy(w))))["0"]
    assert abs(row.alpha - 3.0) < 0.2
    assert row.alpha == pytest.approx(fit_power_law(np.sort(lam)).alpha, rel=1e-6)


def _brute_force_fit(values) -> tuple[float, float, float, int]:
    """Clauset, Shalizi and Newman's scan, one candidate and one point at a time."""
    xs = sorted(float(v) for v in values)
    best = None
    for xmin in sorted(set(xs))[:-1]:
        tail = [x for x in xs if x >= xmin]
        n = len(tail)
        alpha = 1 + n / sum(math.log(x / xmin) for x in tail)
        distance = 0.0
        for k, x in enumerate(tail):
            fitted = 1 - (x / xmin) ** (1 - alpha)
            distance = max(distance, (k + 1) / n - fitted, fitted - k / n)
        if best is None or distance < best[2]:
            best = (alpha, xmin, distance, n)
    return best


@pytest.mark.parametrize("sample", ["layer", "pareto_with_ties"])
def test_the_fit_equals_a_brute_force_ks_scan(sample, monkeypatch):
    if sample == "layer":
        values = layer_spectra(nn.Sequential(_linear(_gaussian(300, 150, 3))))["0"].eigenvalues
    else:
        values = np.round(_pareto(2.5, 150, 4), 1)  # ties: candidates are distinct values
        values = np.append(values, values.max())  # the largest value twice: no candidate
    expected = _brute_force_fit(values)
    for block in (_spectra.KS_BLOCK, 997):  # one block; blocks of 6 candidates (997 // 150)
        monkeypatch.setattr(_spectra, "KS_BLOCK", block)
        fit = fit_power_law(values)
        assert (fit.alpha, fit.xmin, fit.ks_distance, fit.n_tail) == pytest.approx(
            expected, rel=1e-9)


def test_layer_spectra_fits_the_esd_it_reports():
    row = layer_spectra(nn.Sequential(_linear(_gaussian(200, 120, 5))))["0"]
    fit = fit_power_law(row.eigenvalues)
    assert (row.alpha, row.xmin, row.ks_distance, row.n_tail) == (
        fit.alpha, fit.xmin, fit.ks_distance, fit.n_tail)


# ------------------------------------------------------------------ Marchenko-Pastur


def test_the_mp_median_is_the_median_of_the_mp_density():
    scipy_integrate = pytest.importorskip("scipy.integrate")
    for q in (1.0, 1.7, 4.0, 50.0):
        a, b = (1 - q ** -0.5) ** 2, (1 + q ** -0.5) ** 2

        def density(x, q=q, a=a, b=b):
            return q / (2 * math.pi * x) * math.sqrt(max((b - x) * (x - a), 0.0))

        total = scipy_integrate.quad(density, a, b, limit=200)[0]
        below = scipy_integrate.quad(density, a, mp_median(q), limit=200)[0]
        assert total == pytest.approx(1.0, abs=1e-6)
        assert below == pytest.approx(0.5, abs=1e-6)
    assert mp_median(1.0) == pytest.approx(0.6528, abs=1e-4)  # Gavish & Donoho's mu_1


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(400, 200), (300, 300)])
def test_a_gaussian_matrix_fits_mp_with_no_spike(shape, seed):
    n, m = shape
    w = _gaussian(n, m, seed, std=0.5)
    row = layer_spectra(nn.Sequential(_linear(w)))["0"]
    assert row.sigma_mp == pytest.approx(0.5, rel=0.03)  # 100 seeds: at most 1.9% off
    assert row.lambda_plus == pytest.approx(0.25 * (math.sqrt(n) + math.sqrt(m)) ** 2, rel=0.04)
    assert row.mp_soft_rank == pytest.approx(1.0, abs=0.08)  # 100 seeds: 0.97-1.07
    assert row.n_spikes == 0


@pytest.mark.parametrize("k", [1, 3, 5])
def test_planted_rank_one_spikes_are_counted(k):
    """W = G + sum_i theta_i u_i v_i^T, G Gaussian (std 0.5), orthonormal u_i, v_i, theta_i
    from 2 to 4 times the BBP threshold sigma (N M)^(1/4): each spike's eigenvalue leaves the
    bulk, and exactly k are counted; with k = 0 none."""
    n, m, std = 400, 200, 0.5
    gen = torch.Generator().manual_seed(10 + k)
    u = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(m, k, generator=gen, dtype=torch.float64))[0]
    theta = std * (n * m) ** 0.25 * torch.linspace(2.0, 4.0, k, dtype=torch.float64)
    spikes = (u * theta) @ v.T
    w = _gaussian(n, m, 20 + k, std=std)
    assert layer_spectra(nn.Sequential(_linear(w + spikes)))["0"].n_spikes == k
    assert layer_spectra(nn.Sequential(_linear(w)))["0"].n_spikes == 0
    row = layer_spectra(nn.Sequential(_linear(w + spikes)))["0"]
    assert row.sigma_mp == pytest.approx(std, rel=0.03)  # the median ignores the spikes
    assert row.mp_soft_rank < 0.7


# ------------------------------------------------------------------ which matrices


def test_convolutions_are_the_matrices_built_by_hand():
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 8, (2, 3), groups=2)
    w = conv.weight.detach().double().numpy()  # (8, 3, 2, 3)
    unfold = np.zeros((8, 3 * 2 * 3))
    positions = {}
    for o in range(8):
        for i in range(3):
            for a in range(2):
                for b in range(3):
                    unfold[o, i * 6 + a * 3 + b] = w[o, i, a, b]
                    positions.setdefault((a, b), np.zeros((8, 3)))[o, i] = w[o, i, a, b]
    net = nn.Sequential(conv)
    row = layer_spectra(net, min_eigenvalues=3)["0"]
    assert row.kind == "conv" and row.shape == (18, 8) and row.n_matrices == 1
    np.testing.assert_allclose(row.eigenvalues, _esd(unfold), rtol=1e-9, atol=1e-14)
    pooled = layer_spectra(net, conv="per_position", min_eigenvalues=3)["0"]
    assert pooled.shape == (8, 3) and pooled.n_matrices == 6 and pooled.n_eigenvalues == 18
    expected = np.sort(np.concatenate([_esd(p) for p in positions.values()]))
    np.testing.assert_allclose(pooled.eigenvalues, expected, rtol=1e-9, atol=1e-14)
    frobenius = sum(np.sum(p ** 2) for p in positions.values())
    top = max(_esd(p)[-1] for p in positions.values())
    assert pooled.stable_rank == pytest.approx(frobenius / top)
    # the two readings differ, and a 1-D and a transposed convolution are read alike
    assert pooled.stable_rank != pytest.approx(row.stable_rank)
    conv1d = nn.Conv1d(5, 7, 4)
    rows = layer_spectra(nn.Sequential(conv1d, nn.ConvTranspose1d(7, 5, 3)),
                         min_eigenvalues=3).layers
    assert [r.shape for r in rows] == [(20, 7), (15, 7)]
    np.testing.assert_allclose(rows[0].eigenvalues,
                               _esd(conv1d.weight.detach().reshape(7, 20).numpy()), rtol=1e-6)


class _HFConv1D(nn.Module):
    """A linear layer storing its weight (in, out), as Hugging Face's GPT-2 Conv1D."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf))


def test_embeddings_recurrent_attention_and_transposed_linear_weights():
    torch.manual_seed(0)
    net = nn.ModuleDict({
        "emb": nn.Embedding(50, 12), "lstm": nn.LSTM(12, 16, num_layers=2),
        "attn": nn.MultiheadAttention(16, 4), "hf": _HFConv1D(24, 16),
        "norm": nn.LayerNorm(16)})
    result = layer_spectra(net, min_eigenvalues=3)
    kinds = {r.name: (r.kind, r.shape) for r in result.layers}
    assert kinds == {
        "emb": ("embedding", (50, 12)),
        "lstm.weight_ih_l0": ("recurrent", (64, 12)), "lstm.weight_hh_l0": ("recurrent", (64, 16)),
        "lstm.weight_ih_l1": ("recurrent", (64, 16)), "lstm.weight_hh_l1": ("recurrent", (64, 16)),
        "attn.in_proj_weight": ("attention", (48, 16)), "attn.out_proj": ("linear", (16, 16)),
        "hf": ("linear", (24, 16))}
    np.testing.assert_allclose(result["lstm.weight_hh_l1"].eigenvalues,
                               _esd(net["lstm"].weight_hh_l1.detach().numpy()), rtol=1e-6)
    np.testing.assert_allclose(result["hf"].eigenvalues,
                               _esd(net["hf"].weight.detach().numpy()), rtol=1e-6)
    # a module's name selects every matrix in it; a row's name selects that row
    assert [r.name for r in layer_spectra(net, layers="lstm", min_eigenvalues=3).layers] == [
        "lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.weight_ih_l1", "lstm.weight_hh_l1"]
    assert [r.name for r in layer_spectra(net, layers=["hf", "attn.out_proj"]).layers] == [
        "attn.out_proj", "hf"]


def test_a_shared_matrix_is_one_row():
    emb = nn.Embedding(40, 16)
    head = nn.Linear(16, 40, bias=False)
    head.weight = emb.weight
    assert [r.name for r in layer_spectra(nn.Sequential(emb, head)).layers] == ["0"]


@pytest.mark.parametrize("name", list(ZOO))
def test_every_zoo_network_runs_and_is_left_as_it_was(name):
    model = ZOO[name].build(generator=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [p.requires_grad for p in model.parameters()]
    result = layer_spectra(model)
    assert result.layers and result.n_fitted >= 1
    for row in result.layers:
        assert math.isfinite(row.log_spectral_norm) and row.stable_rank >= 1.0 - 1e-9
        assert math.isfinite(row.alpha) == (row.note == "")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert flags == [p.requires_grad for p in model.parameters()] and model.training
    names = {r.name for r in result.layers}
    expected = {"gpt_small": {"wte", "h.0.attn.c_attn", "lm_head"},
                "lstm": {"lstm.weight_ih_l0", "lstm.weight_hh_l0", "fc"},
                "vit_small": {"patch_embed.proj", "blocks.0.attn.qkv"},
                "resnet_small": {"conv1", "layer1.0.conv1", "fc"}}.get(name, set())
    assert expected <= names


# ------------------------------------------------------------------ small or odd layers


def test_small_zero_and_orthogonal_matrices_get_nan_with_a_reason():
    small = nn.Linear(30, 6)
    zero = nn.Linear(40, 40)
    nn.init.zeros_(zero.weight)
    orthogonal = nn.Linear(40, 40)
    nn.init.orthogonal_(orthogonal.weight)
    result = layer_spectra(nn.Sequential(small, zero, orthogonal))
    assert [math.isnan(r.alpha) for r in result.layers] == [True, True, True]
    assert result["0"].note.startswith("6 nonzero eigenvalues, fewer than min_eigenvalues=10")
    assert result["1"].note == "all-zero weights: no spectrum"
    assert result["1"].log_spectral_norm == -math.inf
    assert "equal to the weights' precision" in result["2"].note
    assert result["2"].stable_rank == pytest.approx(40.0, rel=1e-5)
    assert result.n_fitted == 0 and math.isnan(result.alpha) and result.n_spikes == 0
    assert not math.isnan(layer_spectra(nn.Sequential(small), min_eigenvalues=6)["0"].alpha)


def test_the_result_protocol():
    pytest.importorskip("pandas")
    result = layer_spectra(nn.Sequential(_linear(_gaussian(50, 30, 7)), nn.ReLU(),
                                         _linear(_gaussian(8, 50, 8))))
    out = result.to_dict()
    assert "eigenvalues" not in out["layers"][0] and out["layers"][0]["name"] == "0"
    assert out["conv"] == "unfold" and out["n_fitted"] == 1
    frame = result.to_frame()
    assert list(frame["name"]) == ["0", "2"] and "alpha" in frame.columns
    assert result["2"].shape == (50, 8)


def test_a_study_records_the_columns_from_the_weights_alone():
    from nngauge.studies._units import _run

    entry = catalogue()["layer_spectra"]
    net = nn.Sequential(_linear(_gaussian(60, 40, 9)))
    columns = _run(entry, net, (None, None, None), 16, None)
    result = layer_spectra(net)
    assert columns == {column: getattr(result, field) for column, field in entry.columns.items()}
    assert {"alpha", "alpha_weighted", "log_spectral_norm", "stable_rank"} <= set(columns)


# ------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("call, message", [
    (lambda: layer_spectra(nn.ReLU()), "expected a model with weight matrices"),
    (lambda: layer_spectra(nn.Linear(4, 4), layers="nope"), r"got \['nope'\]"),
    (lambda: layer_spectra(nn.Linear(4, 4), conv="slices"), "conv in"),
    (lambda: layer_spectra(nn.Linear(4, 4), min_eigenvalues=2), "min_eigenvalues"),
    (lambda: layer_spectra("model"), "model"),
    (lambda: layer_spectra(nn.Linear(4, 4), layers=3), "layers"),
])
def test_bad_inputs_are_refused(call, message):
    with pytest.raises(InvalidInputError, match=f"{message}.*Fix"):
        call()
