"""``summarize`` on a hand-made database: the test error of each point is that of its run with
the lowest validation error, correlations equal scipy's on the same numbers, the ideal NLC range
and the high-bias / skip flags follow their definitions, and the files and table are written."""

import csv
import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from nngauge.errors import InvalidInputError
from nngauge.studies._db import open_db, register_study, write_unit
from nngauge.studies._spec import parse_spec
from nngauge.studies._summarize import summarize
from nngauge.studies._units import Architecture, Unit

RNG = np.random.default_rng(7)
N = 12
NLC = np.exp(RNG.uniform(0, 3, N))
BIAS = np.where(np.arange(N) == 3, 5000.0, RNG.uniform(0.5, 2, N))
JAC = RNG.uniform(0.1, 5, N)
SKIP = np.arange(N) % 4 == 1
# two learning rates per architecture: validation and test errors chosen independently, so the
# best-by-validation run is sometimes the one with the worse test error
VAL = RNG.uniform(0.1, 0.6, (N, 2))
TEST = RNG.uniform(0.1, 0.6, (N, 2))
LRS = (0.1, 0.3)


def _make_db(path, name="hand", seed=0):
    spec = parse_spec({"name": name, "seed": seed,
                       "architectures": {"explicit": [{"width": 4, "depth": 3}] * N}})
    archs = [Architecture(i, {"skip": 1.0 if SKIP[i] else None}) for i in range(N)]
    engine = open_db(f"sqlite:///{path}")
    register_study(engine, spec, archs)
    for i in range(N):
        write_unit(engine, spec.study_id, Unit(f"{name}-i{i}", "init", i, 0), {
            "measures": {"nlc": NLC[i], "output_bias": BIAS[i], "jacobian_norm": JAC[i]},
            "seconds": 0.0})
        for j, lr in enumerate(LRS):
            write_unit(engine, spec.study_id, Unit(f"{name}-t{i}-{j}", "train", i, 0, lr), {
                "measures": {}, "seconds": 0.0,
                "train": {"best_val_error": VAL[i, j], "test_error": TEST[i, j],
                          "train_error": 0.0, "epochs": 3, "diverged": False}})
    engine.dispose()
    return f"sqlite:///{path}"


@pytest.fixture
def db(tmp_path):
    return _make_db(tmp_path / "study.db")


def test_points_take_the_test_error_of_the_best_validation_run(db):
    result = summarize(db)
    best = VAL.argmin(1)
    assert [p["test_error"] for p in result.points] == pytest.approx(TEST[np.arange(N), best])
    assert [p["best_lr"] for p in result.points] == [LRS[j] for j in best]
    assert [p["skip"] for p in result.points] == SKIP.tolist()
    assert [p["high_bias"] for p in result.points] == (BIAS > 1000).tolist()
    assert result.columns == ("nlc", "output_bias", "jacobian_norm")


def test_correlations_equal_scipys(db):
    result = summarize(db)
    test = TEST[np.arange(N), VAL.argmin(1)]
    for row, values in zip(result.correlations, (NLC, BIAS, JAC)):
        rho, rho_p = stats.spearmanr(values, test)
        tau, tau_p = stats.kendalltau(values, test)
        assert row.n == N
        assert (row.spearman, row.spearman_p) == pytest.approx((rho, rho_p), rel=1e-12)
        assert (row.kendall, row.kendall_p) == pytest.approx((tau, tau_p), rel=1e-12)


def test_ideal_range_is_the_nlc_span_of_the_best_fraction(db):
    test = TEST[np.arange(N), VAL.argmin(1)]
    best3 = np.argsort(test)[:math.ceil(0.25 * N)]
    assert summarize(db, top_fraction=0.25).ideal_nlc_range == pytest.approx(
        (NLC[best3].min(), NLC[best3].max()))
    best1 = np.argmin(test)
    assert summarize(db, top_fraction=0.01).ideal_nlc_range == pytest.approx(
        (NLC[best1], NLC[best1]))


def test_files_hold_the_same_numbers(db, tmp_path):
    result = summarize(db)
    written = result.save(tmp_path / "out")
    assert [p.name for p in written] == ["points.csv", "correlations.csv",
                                         "nlc_vs_test_error.png"]
    with open(written[1]) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["measure"] for r in rows] == ["nlc", "output_bias", "jacobian_norm"]
    assert float(rows[0]["spearman"]) == pytest.approx(result.correlations[0].spearman)
    with open(written[0]) as handle:
        points = list(csv.DictReader(handle))
    assert [float(p["nlc"]) for p in points] == pytest.approx(NLC)
    assert written[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_prints_the_table_and_writes_files(db, tmp_path):
    from nngauge.cli import app

    out = CliRunner().invoke(app, ["study", "summarize", "--db", db, "--out",
                                   str(tmp_path / "cli")])
    assert out.exit_code == 0, out.output
    rho = summarize(db).correlations[0].spearman
    assert "nlc" in out.output and f"{rho:+.3f}" in out.output
    assert "observed ideal NLC range" in out.output
    assert (tmp_path / "cli" / "points.csv").exists()


def test_several_studies_need_a_choice(tmp_path):
    url = _make_db(tmp_path / "two.db", "first")
    _make_db(tmp_path / "two.db", "second", seed=1)
    with pytest.raises(InvalidInputError, match="--study"):
        summarize(url)
    assert summarize(url, study="second").name == "second"
    with pytest.raises(InvalidInputError, match="top_fraction"):
        summarize(url, study="second", top_fraction=0)


def test_non_finite_measures_are_left_out_of_their_correlation(tmp_path):
    spec = parse_spec({"architectures": {"explicit": [{"width": 4, "depth": 3}] * 5}})
    engine = open_db(f"sqlite:///{tmp_path / 'inf.db'}")
    register_study(engine, spec, [Architecture(i, {"skip": None}) for i in range(5)])
    kappa = [10.0, math.inf, 30.0, math.nan, 50.0]
    test = [0.2, 0.1, 0.4, 0.3, 0.35]
    for i in range(5):
        write_unit(engine, spec.study_id, Unit(f"i{i}", "init", i, 0), {
            "measures": {"kernel_condition_number": kappa[i]}, "seconds": 0.0})
        write_unit(engine, spec.study_id, Unit(f"t{i}", "train", i, 0, 0.1), {
            "measures": {}, "seconds": 0.0, "train": {"best_val_error": 0.1, "test_error": test[i],
                                                       "train_error": 0.0, "epochs": 1,
                                                       "diverged": False}})
    engine.dispose()
    result = summarize(f"sqlite:///{tmp_path / 'inf.db'}")
    (row,) = result.correlations
    keep = [0, 2, 4]
    rho, p = stats.spearmanr([kappa[i] for i in keep], [test[i] for i in keep])
    assert row.n == 3 and (row.spearman, row.spearman_p) == pytest.approx((rho, p))
    assert result.points[1]["kernel_condition_number"] == math.inf  # stored as it was
    assert math.isnan(result.points[3]["kernel_condition_number"])
    assert result.ideal_nlc_range is None  # no NLC measured


def test_measures_after_training_and_the_lowest_training_error_come_from_their_runs(tmp_path):
    """With ``training.measure_after``, a training unit stores the trained network's measures
    as ``<column>_after``: a point carries those of its selected run (lowest validation
    error, NLC paper E.2), never another rate's, with that run's grid index and training
    error; the run of lowest training error (figures 3D, 7B, 8B) is reported beside it. The
    after-training columns get their own correlations with test error (figure 3C)."""
    spec = parse_spec({"architectures": {"explicit": [{"width": 4, "depth": 3}] * N}})
    engine = open_db(f"sqlite:///{tmp_path / 'after.db'}")
    register_study(engine, spec, [Architecture(i, {"skip": None}) for i in range(N)])
    after = RNG.uniform(0.5, 5, (N, 2))
    train = RNG.uniform(0.0, 0.5, (N, 2))
    for i in range(N):
        write_unit(engine, spec.study_id, Unit(f"i{i}", "init", i, 0), {
            "measures": {"nlc": NLC[i]}, "seconds": 0.0})
        for j, lr in enumerate(LRS):
            write_unit(engine, spec.study_id, Unit(f"t{i}-{j}", "train", i, 0, lr, j), {
                "measures": {"nlc_after": after[i, j]}, "seconds": 0.0,
                "train": {"best_val_error": VAL[i, j], "test_error": TEST[i, j],
                          "train_error": train[i, j], "epochs": 3, "diverged": False}})
    engine.dispose()
    result = summarize(f"sqlite:///{tmp_path / 'after.db'}")
    rows, best, lowest = np.arange(N), VAL.argmin(1), train.argmin(1)
    assert result.columns == ("nlc", "nlc_after")
    assert [p["nlc_after"] for p in result.points] == pytest.approx(after[rows, best])
    assert [p["best_lr_index"] for p in result.points] == best.tolist()
    assert [p["train_error"] for p in result.points] == pytest.approx(train[rows, best])
    assert [p["lowest_train_error"] for p in result.points] == pytest.approx(train.min(1))
    assert [p["lowest_train_error_lr"] for p in result.points] == [LRS[j] for j in lowest]
    assert [p["lowest_train_error_index"] for p in result.points] == lowest.tolist()
    correlation = result.correlations[1]
    assert correlation.measure == "nlc_after"
    assert correlation.spearman == pytest.approx(
        stats.spearmanr(after[rows, best], TEST[rows, best])[0], rel=1e-12)
