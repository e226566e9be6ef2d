"""nlc-lr (NLC paper, figures 7-8, appendices B.1 and E.2): sampled architectures trained from
a per-network geometric grid of starting rates (E.2's smallest rate times 3^i); the command
runs once at the small scale (seed 0) and the figures' claims are asserted."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from nngauge.reproduce._nlc_lr import COLUMNS, REPRODUCTION


@pytest.fixture(scope="module")
def figure(tmp_path_factory):
    out = tmp_path_factory.mktemp(REPRODUCTION.name)
    return REPRODUCTION.run(out, scale="small", generator=torch.Generator().manual_seed(0))


def rows(result):
    return [dict(zip(COLUMNS, r)) for r in result.computed.rows
            if isinstance(r[2], float) and math.isfinite(r[2]) and r[2] > 0]


@pytest.mark.slow
def test_grid_indices_and_rates_are_the_selected_runs(figure):
    """Every architecture has one selected run per criterion, inside the 8-rate grid, and the
    CSV and figure are written with the declared columns; the rate ratio of two runs is 3 to
    the power of their index difference (E.2's factor), since both come from one network's
    grid."""
    assert figure.csv_path.exists() and figure.png_path.stat().st_size > 10_000
    header = figure.csv_path.read_text().splitlines()[0].split(",")
    assert tuple(header) == COLUMNS and len(figure.computed.rows) == 24
    for r in rows(figure):
        assert 0 <= r["best_lr_index"] < 8 and 0 <= r["lowest_train_error_index"] < 8
        ratio = r["lowest_train_error_lr"] / r["best_lr"]
        assert ratio == pytest.approx(3.0 ** (r["lowest_train_error_index"]
                                              - r["best_lr_index"]), rel=1e-9)
        assert r["generalizes"] == (r["test_error"] < 2 / 3 - 0.1)


@pytest.mark.slow
def test_selected_rate_falls_with_the_nlc(figure):
    """Figure 8 (B.1): over the architectures that train better than chance, the starting rate
    of the run of lowest training error falls as the initial NLC grows (Spearman < -0.5,
    p < 0.01, equal to scipy's on the CSV), and the fitted log-log slope is negative and
    reported beside B.1's -2; the verdict states both."""
    trained = [r for r in rows(figure) if r["trains"]]
    x = np.log10([r["nlc"] for r in trained])
    y = np.log10([r["lowest_train_error_lr"] for r in trained])
    rho, p = stats.spearmanr(x, y)
    assert rho < -0.5 and p < 0.01
    compared = figure.computed.compared("8b_rho")
    assert compared.ours == pytest.approx(rho, abs=1e-12)
    assert compared.p_value == pytest.approx(p) and compared.n == len(trained)
    slope = figure.computed.compared("8b_slope")
    assert slope.ours == pytest.approx(np.polyfit(x, y, 1)[0]) and slope.ours < 0
    assert slope.paper == -2.0
    assert figure.verdict.status in ("reproduced", "qualitatively")
    assert f"slope {slope.ours:.2f}" in figure.verdict.reason
