"""``nngauge reproduce regions-and-loss``: linear regions, loss curvature and errors of one
network over training (Raghu et al. ICML 2017 Theorem 2; Keskar et al. ICLR 2017; Humayun,
Balestriero and Baraniuk ICML 2024), and their Spearman rank correlations.

The real compute code runs once, at a test-only setting smaller than "small" (a 2 x 32 MLP,
three epochs) so that the file stays fast. Checked: the files, one CSV row per scheduled step
and every declared column; tracked values equal the functional calls at the weights of the
last measured step (the Tracker's weight snapshot, the Tracker's seed); the printed rank
correlations are in [-1, 1], equal scipy's on the CSV's columns and appear in the command's
table; training lowers the train and test errors and lengthens the trajectory through test
points (Raghu et al. section 3.2, figure 8).

Seen at the small scale (seeds 0, 1, 2) but not asserted here (the test setting is too short
and too small for them to hold at every seed): the density and the local complexity near
training and test points end below their values at step 0 after an early rise, the top Hessian
eigenvalue and the sharpness end several times lower, and the rank correlations of local
complexity and sharpness with the test error are positive, those of the trajectory length
negative.
"""

import math

import pytest
import torch
from rich.console import Console
from scipy import stats

import nngauge
from nngauge.cli._reproduce import _values_table
from nngauge.reproduce import _regions_and_loss as module
from nngauge.reproduce import get, names
from nngauge.training import log_steps
from test_reproduce import check_files

TINY = module.Settings(width=32, hidden=2, epochs=3, batch_size=32, lr=0.05, per_decade=2,
                       density_points=8, directions=2, radius=0.5, path_points=4,
                       hessian_batch=64, lanczos_steps=8, sharpness_steps=10)
STEPS_PER_EPOCH = 34  # ceil(1078 digits training points / minibatches of 32)
LAST = TINY.epochs * STEPS_PER_EPOCH


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(module.SETTINGS, "small", TINY)
        return get("regions-and-loss").run(tmp_path_factory.mktemp("regions-and-loss"),
                                           generator=torch.Generator().manual_seed(0))


def column(result, name):
    return result.computed.column(name)


def test_registered_with_both_scales():
    assert "regions-and-loss" in names()
    record = get("regions-and-loss")
    assert set(record.differences) == {"small", "paper"}
    assert "Keskar" in record.paper and "Humayun" in record.paper


def test_files_hold_every_column_and_one_row_per_scheduled_step(result):
    steps = sorted({*log_steps(TINY.per_decade, LAST), LAST})
    rows = check_files(result, module.COLUMNS, len(steps))
    assert [int(r["step"]) for r in rows] == steps
    for row in rows:
        assert all(math.isfinite(float(value)) for value in row.values())
    # the CSV's floats are the computed values, losslessly
    assert [float(r["nlc"]) for r in rows] == column(result, "nlc")


def _network_at_last_step(result):
    tracker = result.computed.extra["tracker"]
    step, weights = tracker.weight_snapshots[-1]
    assert step == LAST
    net = module.network(TINY, torch.Generator())
    net.load_state_dict(weights)
    return tracker, net


def test_tracked_values_equal_the_functional_calls(result):
    tracker, net = _network_at_last_step(result)
    train = tracker.data

    def seeded():
        return torch.Generator().manual_seed(tracker.seed)

    direct_nlc = nngauge.nlc(net, train, batch_size=len(train.labels), generator=seeded())
    assert direct_nlc.nlc == pytest.approx(column(result, "nlc")[-1], rel=1e-12)
    options = module.tracked_measures(TINY, train, train)["hessian"][1]
    top = nngauge.hessian(net, train, **options, generator=seeded())
    assert top.eigenvalues[0] == pytest.approx(column(result, "hessian_top")[-1], rel=1e-9)
    assert abs(top.eigenvalues[0]) > 0


def test_correlations_are_spearmans_of_the_csv_and_printed(result):
    pairs = [(a, b) for a in module.REGION for b in module.CURVATURE]
    pairs += [(a, "test_error") for a in (*module.REGION, *module.CURVATURE, "nlc")]
    assert len(pairs) == len(module.REGION) * len(module.CURVATURE) + \
        len(module.REGION) + len(module.CURVATURE) + 1
    assert len([c for c in result.computed.comparison if c.statistic == "spearman"]) == len(pairs)
    for a, b in pairs:
        item = result.computed.compared(f"rho_{a}_{b}")
        assert item.quantity == f"Spearman rho: {module.LABELS[a]} vs {module.LABELS[b]}"
        assert -1.0 <= item.ours <= 1.0
        expected = stats.spearmanr(column(result, a), column(result, b))
        assert item.ours == pytest.approx(expected.statistic, abs=1e-12)
        assert item.p_value == pytest.approx(expected.pvalue) and item.n == len(column(result, a))
        assert f"p = {expected.pvalue:.3g}" in item.printed_note
    console = Console(record=True, width=250)
    console.print(_values_table(result))
    text = console.export_text()
    assert "Spearman rho: Keskar sharpness vs test error" in text
    assert "Spearman rho: local complexity near test points vs top Hessian eigenvalue" in text


def test_training_lowers_the_errors_and_lengthens_the_trajectory(result):
    for name in ("train_error", "test_error"):
        values = column(result, name)
        assert values[0] > 0.5  # ten classes at initialization: about chance
        assert values[-1] < 0.25 and values[-1] < values[0] / 3
    # Raghu et al. section 3.2, figure 8: training increases trajectory length
    for name in ("trajectory_length", "trajectory_length_output"):
        values = column(result, name)
        assert values[-1] > 1.2 * values[0]
