"""nlc-definition1 (NLC paper, Definition 1, section 5, appendix G): its judge on planted rows
(each criterion failing gives "differs", every verdict a software check), and one run of its
computation at reduced sizes asserting the numbers against closed forms stated here
independently of nngauge.theory."""

import math
from dataclasses import replace

import pytest
import torch

from nngauge.reproduce._nlc_definition1 import (
    COLUMNS,
    EXACT_TOLERANCE,
    SAMPLING_TOLERANCE,
    SETTINGS,
    Z_LIMIT,
    anisotropic,
    compute,
    judge,
    whitened,
)
from nngauge.reproduce import Computed

RELU_NLC = 1.0 / math.sqrt(1.0 - 1.0 / math.pi)
"""NLC_relu(1): Q[relu'(s)] / S[relu(s)] = sqrt(1/2) / sqrt(1/2 - 1/(2 pi)), s ~ N(0, 1)."""

PASSING = (
    ("definition 1", "affine_anisotropic", "affine", 1.18, 1.18, "relative", EXACT_TOLERANCE),
    ("definition 1", "affine_isotropic", "isotropic", 1.0, 1.0, "relative", EXACT_TOLERANCE),
    ("section 5", "activation_relu_1", "relu", 1.21, RELU_NLC, "relative", SAMPLING_TOLERANCE),
    ("section G", "batchnorm_probe_z", "z", 0.3, 0.0, "absolute", Z_LIMIT),
    ("section G", "batchnorm_off_diagonal", "share", 0.08, 0.0, "above", 0.0),
    ("section G", "plain_off_diagonal", "share", 0.0, 0.0, "absolute", 0.0),
)


def planted(**changed) -> Computed:
    """PASSING with the ``ours`` of the rows named by key replaced."""
    return Computed(columns=COLUMNS, rows=tuple(
        row[:3] + (changed.get(row[1], row[3]),) + row[4:] for row in PASSING))


def test_judge_fails_each_planted_violation_as_a_software_check():
    """Every row within its criterion: reproduced. One row out (a linear network off its
    closed form, an activation layer 5% off NLC_tau, a probe estimate 5 standard deviations
    off, batchnorm with a block-diagonal J(X), a plain network with a coupling block, a NaN):
    differs, naming the row. Every verdict is labelled a software check."""
    ok = judge(planted())
    assert ok.status == "reproduced" and ok.software_check, ok.reason
    assert "6 of 6 checks hold" in ok.reason and "probe z = 0.30" in ok.reason
    for key, value in (("affine_isotropic", 1.0 + 1e-6), ("affine_anisotropic", 1.0),
                       ("activation_relu_1", 1.05 * RELU_NLC), ("batchnorm_probe_z", -5.0),
                       ("batchnorm_off_diagonal", 0.0), ("plain_off_diagonal", 1e-3),
                       ("activation_relu_1", math.nan)):
        verdict = judge(planted(**{key: value}))
        assert verdict.status == "differs" and verdict.software_check, (key, verdict.reason)
        assert f"failing: {key} (" in verdict.reason and "5 of 6 checks hold" in verdict.reason


def test_whitened_data_has_covariance_exactly_four_times_the_identity():
    x = anisotropic(200, 8, torch.Generator().manual_seed(0))
    cov = torch.cov(x.T, correction=0)
    spectrum = torch.linalg.eigvalsh(cov)
    assert spectrum.max() / spectrum.min() > 4  # anisotropic: the spectrum 1, 1/2, ..., 1/8
    four = 4 * torch.eye(8, dtype=torch.float64)
    assert torch.allclose(torch.cov(whitened(x).T, correction=0), four, atol=1e-12)


def test_compute_at_reduced_sizes_meets_the_closed_forms(monkeypatch):
    """Reduced sizes: the affine map matches sqrt(Tr(A A^T) Tr C / (d Tr(A C A^T))) and is 1 on
    isotropic data and for an orthogonal network (to 1e-9); the relu layer is within 2.5% of
    1 / sqrt(1 - 1/pi); the batchnorm network's exact NLC equals brute force, the probe
    estimate is within 4 standard deviations, its J(X) couples samples while the plain
    network's is block diagonal: reproduced, a software check."""
    small = SETTINGS["small"]
    monkeypatch.setitem(SETTINGS, "small", replace(
        small, d_in=6, width=12, depth=3, d_out=3, n_linear=60, activation_d=20,
        activation_n=1000, n_batches=3, batch_size=20, n_probes=4))
    computed = compute("small", torch.Generator().manual_seed(0))
    row = {r["key"]: r for r in computed.records()}
    assert row["affine_anisotropic"]["ours"] == pytest.approx(row["affine_anisotropic"][
        "expected"], rel=1e-9)
    assert abs(row["affine_anisotropic"]["ours"] - 1) > 0.01  # anisotropy matters
    assert row["affine_isotropic"]["ours"] == pytest.approx(1.0, rel=1e-9)
    assert row["orthogonal_anisotropic"]["ours"] == pytest.approx(1.0, rel=1e-9)
    assert row["activation_relu_1"]["expected"] == pytest.approx(RELU_NLC, rel=1e-9)
    assert row["activation_relu_1"]["ours"] == pytest.approx(RELU_NLC, rel=0.025)
    assert row["activation_tanh_2"]["ours"] > row["activation_tanh_1"]["ours"] > \
        row["activation_tanh_0.5"]["ours"] > 1
    assert row["batchnorm_exact"]["ours"] == pytest.approx(row["batchnorm_exact"]["expected"],
                                                           rel=1e-9)
    assert abs(row["batchnorm_probe_z"]["ours"]) < Z_LIMIT
    assert row["batchnorm_off_diagonal"]["ours"] > 0.0
    assert row["plain_off_diagonal"]["ours"] == 0.0
    assert computed.compared("plain_per_sample").ours == pytest.approx(
        row["plain_per_sample"]["expected"], rel=1e-9)
    verdict = judge(computed)
    assert verdict.status == "reproduced" and verdict.software_check, verdict.reason
