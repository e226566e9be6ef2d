"""``predictor_table`` on a hand-made database: every row's rank correlations and p-values equal
scipy's on the same numbers (direction applied, against accuracy = 1 - test error), the
bootstrap intervals equal ``scipy.stats.bootstrap``'s, the top-fraction precision equals a hand
count, the pairwise test uses the same resamples for both predictors, columns measured after
training are left out, directions taken from the data are flagged, and the CLI prints and
writes the table."""

import csv
import itertools
import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from nngauge.errors import InvalidInputError
from nngauge.studies import predictor_table
from nngauge.studies._db import open_db, register_study, write_unit
from nngauge.studies._predictors import _top_weights
from nngauge.studies._spec import parse_spec
from nngauge.studies._summarize import summarize
from nngauge.studies._units import Architecture, Unit

RNG = np.random.default_rng(11)
N = 16
LRS = (0.1, 0.3)
VAL = RNG.uniform(0.1, 0.6, (N, 2))
TEST = RNG.uniform(0.1, 0.6, (N, 2))
ERROR = TEST[np.arange(N), VAL.argmin(1)]  # the test error of each point's selected run
SPARSE = RNG.uniform(0, 1, N)
SPARSE[[2, 7, 11]] = np.nan  # stored as NULL: left out of its correlations
INIT = {
    "nlc": np.exp(RNG.uniform(0, 3, N)),
    "n_params": RNG.integers(100, 10_000, N).astype(float),
    "perfect": 1.0 - ERROR,  # identical to accuracy
    "noise": RNG.uniform(0, 1, N),
    "anti": ERROR + RNG.uniform(0, 1e-3, N),  # higher = worse, and no direction given
    "sparse": SPARSE,
}
DIRECTIONS = {"nlc": -1, "n_params": 1, "perfect": 1, "sparse": 1}
RESAMPLES = 199


def _make_db(path):
    spec = parse_spec({"name": "hand", "architectures": {"explicit": [{"width": 4, "depth": 3}]
                                                         * N}})
    engine = open_db(f"sqlite:///{path}")
    register_study(engine, spec, [Architecture(i, {"skip": None}) for i in range(N)])
    for i in range(N):
        write_unit(engine, spec.study_id, Unit(f"i{i}", "init", i, 0), {
            "measures": {name: values[i] for name, values in INIT.items()}, "seconds": 0.0})
        for j, lr in enumerate(LRS):
            write_unit(engine, spec.study_id, Unit(f"t{i}-{j}", "train", i, 0, lr, j), {
                "measures": {"nlc_after": RNG.uniform(1, 3)}, "seconds": 0.0,
                "train": {"best_val_error": VAL[i, j], "test_error": TEST[i, j],
                          "train_error": 0.0, "epochs": 3, "diverged": False}})
    engine.dispose()
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return _make_db(tmp_path_factory.mktemp("predictors") / "study.db")


@pytest.fixture(scope="module")
def summary(db):
    return summarize(db)


@pytest.fixture(scope="module")
def table(summary):
    return predictor_table(summary, directions=DIRECTIONS, n_resamples=RESAMPLES, generator=3)


def _directed(row):
    """The row's predictor with its direction applied, accuracy, over its finite points."""
    x = row.direction * INIT[row.name]
    keep = np.isfinite(x)
    return x[keep], 1.0 - ERROR[keep]


def test_rows_equal_scipys_statistics(table):
    """Each row's rho, tau and p-values are scipy's on (direction x predictor, 1 - test error)
    over the points where the predictor is finite, and the rows come best first."""
    assert len(table.rows) == len(INIT)
    for row in table.rows:
        x, accuracy = _directed(row)
        rho, rho_p = stats.spearmanr(x, accuracy)
        tau, tau_p = stats.kendalltau(x, accuracy)
        assert row.n == len(x) == (N - 3 if row.name == "sparse" else N)
        assert (row.spearman, row.spearman_p) == pytest.approx((rho, rho_p), rel=1e-12)
        assert (row.kendall, row.kendall_p) == pytest.approx((tau, tau_p), rel=1e-12)
    rhos = [row.spearman for row in table.rows]
    assert rhos == sorted(rhos, reverse=True)


def test_after_training_columns_are_no_predictors(summary, table):
    """``nlc_after`` is a column of the summary but gets no row and no pair."""
    assert "nlc_after" in summary.columns
    assert {row.name for row in table.rows} == set(INIT)
    assert all("nlc_after" not in (pair.a, pair.b) for pair in table.pairwise)


def test_directions_given_are_used_and_the_others_come_from_the_data_flagged(summary, table):
    """Named columns keep their given sign unflagged; the others get sign(Spearman(x,
    accuracy)) and are flagged; ``anti`` (test error plus a little noise) is turned into a
    near-perfect predictor that way, and with its true direction (-1) it is one honestly, while
    ``anti`` given +1 comes out near -1; baselines are the names given."""
    for row in table.rows:
        if row.name in DIRECTIONS:
            assert (row.direction, row.direction_from_data) == (DIRECTIONS[row.name], False)
        else:
            rho = stats.spearmanr(INIT[row.name], 1 - ERROR)[0]
            assert row.direction_from_data and row.direction == (1 if rho > 0 else -1)
        assert row.baseline == (row.name == "n_params")
    assert (table["anti"].direction, table["anti"].spearman) == (-1, pytest.approx(1.0))
    honest = predictor_table(summary, directions={"anti": -1}, n_resamples=19)
    assert not honest["anti"].direction_from_data and honest["anti"].spearman > 0.99
    wrong = predictor_table(summary, directions={"anti": 1}, n_resamples=19)
    assert wrong["anti"].spearman == pytest.approx(-1.0)
    assert predictor_table(summary, baselines=("noise",), n_resamples=19)["noise"].baseline


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
def test_top_precision_equals_a_hand_count(summary, fraction):
    """Of the ceil(fraction * n) points a predictor ranks best, the share among the ceil(
    fraction * n) of lowest test error (predictors without ties)."""
    result = predictor_table(summary, directions=DIRECTIONS, top_fraction=fraction,
                             n_resamples=19)
    for row in result.rows:
        x, accuracy = _directed(row)
        k = math.ceil(fraction * len(x))
        best_by_predictor = set(np.argsort(-x)[:k])
        best_by_error = set(np.argsort(-accuracy)[:k])
        assert row.top_precision == pytest.approx(len(best_by_predictor & best_by_error) / k)
    assert result["perfect"].top_precision == 1.0


def test_tied_points_share_the_top_places_as_random_tie_breaking_would():
    """The top-k weights equal the frequency with which each point is in the top k over every
    tie-breaking order (brute force over all permutations)."""
    score = np.array([3.0, 1.0, 2.0, 2.0, 2.0, 0.0])
    for k in range(1, len(score) + 1):
        counts = np.zeros(len(score))
        orders = list(itertools.permutations(range(len(score))))
        for order in orders:
            ranked = sorted(range(len(score)), key=lambda i: (-score[i], order[i]))
            counts[ranked[:k]] += 1
        assert _top_weights(score, k) == pytest.approx(counts / len(orders))


@pytest.mark.slow
def test_bootstrap_intervals_are_scipys_and_reproducible(summary, table):
    """Each interval equals scipy.stats.bootstrap's percentile interval (paired resampling,
    default_rng(seed)), contains the point estimate, and the same seed gives the same table
    while another seed gives other intervals."""
    row = table["nlc"]
    x, accuracy = _directed(row)

    def interval(statistic):
        result = stats.bootstrap((x, accuracy), statistic, paired=True, vectorized=False,
                                 n_resamples=RESAMPLES, method="percentile",
                                 rng=np.random.default_rng(3))
        return tuple(result.confidence_interval)

    assert (row.spearman_low, row.spearman_high) == pytest.approx(
        interval(lambda u, v: stats.spearmanr(u, v)[0]), rel=1e-12)
    assert (row.kendall_low, row.kendall_high) == pytest.approx(
        interval(lambda u, v: stats.kendalltau(u, v)[0]), rel=1e-12)
    for row in table.rows:
        assert row.spearman_low - 1e-12 <= row.spearman <= row.spearman_high + 1e-12
        assert row.kendall_low - 1e-12 <= row.kendall <= row.kendall_high + 1e-12
    again = predictor_table(summary, directions=DIRECTIONS, n_resamples=RESAMPLES, generator=3)
    assert again.to_dict() == table.to_dict()
    other = predictor_table(summary, directions=DIRECTIONS, n_resamples=RESAMPLES, generator=4)
    assert other["nlc"].spearman == table["nlc"].spearman
    assert other["nlc"].spearman_low != table["nlc"].spearman_low


def test_pairwise_differences_are_rho_differences_on_the_same_resamples(table):
    """Every ordered pair appears once; its difference is rho_a - rho_b over the points where
    both are finite (the rows' rhos where both are complete), mirrored in (b, a); its bootstrap
    equals scipy.stats.bootstrap of the difference with both rhos on each resample, and its
    p-value is 2 min(P(D* <= 0), P(D* >= 0))."""
    assert len(table.pairwise) == len(INIT) * (len(INIT) - 1)
    assert len({(p.a, p.b) for p in table.pairwise}) == len(table.pairwise)
    for pair in table.pairwise:
        a, b = table[pair.a], table[pair.b]
        xa, xb = a.direction * INIT[pair.a], b.direction * INIT[pair.b]
        keep = np.isfinite(xa) & np.isfinite(xb)
        accuracy = 1.0 - ERROR[keep]
        expected = (stats.spearmanr(xa[keep], accuracy)[0]
                    - stats.spearmanr(xb[keep], accuracy)[0])
        assert pair.n == keep.sum()
        assert pair.difference == pytest.approx(expected, abs=1e-12)
        if "sparse" not in (pair.a, pair.b):
            assert pair.difference == pytest.approx(a.spearman - b.spearman, abs=1e-12)
        mirror = table.pair(pair.b, pair.a)
        assert (mirror.difference, mirror.p) == pytest.approx((-pair.difference, pair.p))
    pair = table.pair("nlc", "sparse")
    xa, xb = -INIT["nlc"], INIT["sparse"]
    keep = np.isfinite(xb)
    result = stats.bootstrap(
        (xa[keep], xb[keep], 1.0 - ERROR[keep]),
        lambda u, w, v: stats.spearmanr(u, v)[0] - stats.spearmanr(w, v)[0],
        paired=True, vectorized=False, n_resamples=RESAMPLES, method="percentile",
        rng=np.random.default_rng(3))
    d = result.bootstrap_distribution
    assert (pair.low, pair.high) == pytest.approx(tuple(result.confidence_interval), rel=1e-12)
    assert pair.p == pytest.approx(min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0))))


def test_a_perfect_predictor_beats_a_random_one(table):
    """A predictor identical to accuracy gets rho 1 and beats a random one at p < 0.05, which
    in turn beats nothing that ranks above it."""
    assert table["perfect"].spearman == pytest.approx(1.0)
    assert table["perfect"].kendall == pytest.approx(1.0)
    pair = table.pair("perfect", "noise")
    assert pair.p < 0.05 and pair.a_beats_b and table.beats("perfect", "noise")
    assert not table.beats("noise", "perfect")
    with pytest.raises(KeyError, match="known"):
        table.pair("perfect", "nlc_after")


def test_files_hold_the_table(table, tmp_path):
    """``save`` writes both tables as CSV and the bar figure as PNG."""
    written = table.save(tmp_path / "out")
    assert [p.name for p in written] == ["predictors.csv", "pairwise.csv", "predictors.png"]
    with open(written[0]) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["name"] for r in rows] == [row.name for row in table.rows]
    assert float(rows[0]["spearman_low"]) == pytest.approx(table.rows[0].spearman_low)
    with open(written[1]) as handle:
        assert len(list(csv.DictReader(handle))) == len(table.pairwise)
    assert written[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_settings_are_refused(summary):
    """Directions other than +-1, a top fraction outside (0, 1] and no resamples are refused
    with the fix."""
    for kwargs, match in (({"directions": {"nlc": 2}}, "directions of \\+1 or -1"),
                          ({"top_fraction": 0}, "top_fraction"),
                          ({"n_resamples": 0}, "n_resamples")):
        with pytest.raises(InvalidInputError, match=match):
            predictor_table(summary, **kwargs)


@pytest.mark.slow
def test_cli_prints_the_predictors_and_writes_the_files(db, tmp_path):
    """``--predictors`` prints one line per predictor with its rho and interval, a line per
    predictor on the baselines it beats, and with ``--out`` writes the predictor files beside
    the summary's; without the flag the correlation table is printed as before."""
    from nngauge.cli import app

    out = CliRunner().invoke(app, ["study", "summarize", "--db", db, "--predictors", "--out",
                                   str(tmp_path / "cli")])
    assert out.exit_code == 0, out.output
    assert "predictors of accuracy" in out.output and "top-10% precision" in out.output
    lines = out.output.splitlines()
    perfect = [line for line in lines if "perfect" in line and "[" in line]
    assert len(perfect) == 1 and "+1.000" in perfect[0]
    assert any(line.startswith("perfect beats n_params (p") for line in lines)
    assert "n_params beats no baseline" in lines
    for name in ("predictors.csv", "pairwise.csv", "predictors.png", "points.csv"):
        assert (tmp_path / "cli" / name).exists()
    plain = CliRunner().invoke(app, ["study", "summarize", "--db", db])
    assert plain.exit_code == 0 and "Spearman rho" in plain.output
    assert "predictors of accuracy" not in plain.output


def test_too_few_points_give_nan_rows_and_no_verdicts(tmp_path):
    """Below three finite points a predictor's statistics are NaN, its pairs decide nothing,
    and the table still saves (the figure leaves the row out)."""
    from nngauge.studies._summarize import StudySummary

    points = ({"test_error": 0.1, "a": 1.0, "b": 2.0}, {"test_error": 0.2, "a": 2.0, "b": None},
              {"test_error": 0.3, "a": 3.0, "b": None}, {"test_error": 0.4, "a": 4.0, "b": 1.0})
    result = predictor_table(StudySummary("id", "few", ("a", "b"), points, (), None, 0.1),
                             n_resamples=19)
    assert result["b"].n == 2 and math.isnan(result["b"].spearman)
    assert math.isnan(result["b"].top_precision) and result["b"].direction_from_data
    assert [row.name for row in result.rows] == ["a", "b"]  # NaN last
    assert result.pair("a", "b").n == 2 and not result.beats("a", "b")
    assert math.isnan(result.pair("b", "a").p)
    assert len(result.save(tmp_path)) == 3
