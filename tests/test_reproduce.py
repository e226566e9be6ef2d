"""``nngauge reproduce``: the registry, the files it writes, and the papers' numbers and claims.

Expected values are transcribed by hand from the papers (NLC paper Table 1 and Table 2) or are
closed forms (eq. 4.1 of the shrinkage paper, NLC_relu(1) = 1 / sqrt(1 - 1/pi)); the claims
tested are the ones the papers state (Theorem 1's direction; deep-conditioning's corollaries;
random labels need more capacity than true labels, exploring-generalization figure 1;
trajectory length grows exponentially with depth between Theorem 3's bounds and transitions are
linear in it, expressive-power figures 5, 12-13); the NLC study's printed rank correlations are
recomputed from its CSV.
"""

import csv
import math
import os
import re
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch
from scipy import stats

from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.reproduce import REPRODUCTIONS, get, names

OURS = ("nlc-table1", "nlc-table2", "shrinkage-figure2", "conditioning-depth")

# NLC paper, Table 1, transcribed as printed (strings keep the printed precision).
TABLE1_ACTIVATIONS = ("relu", "selu", "tanh", "sigmoid", "even_tanh", "gaussian", "square",
                      "odd_square")
TABLE1_A = ("1.211", "1.035", "1.085", "1.017", "2.335", "1.577", "1.414", "1.155")
TABLE1_E = ("0.222", "0.030", "0.075", "0.0024", "0.276", "0.155", "2.000", "0.178")
TABLE2_PAPER = {2: 1.22, 5: 2.25, 10: 5.97, 15: 15.2, 20: 37.7, 25: 95.8, 50: 9952}


def half_unit(printed: str) -> float:
    """Half a unit in the last printed digit: the rounding error of a printed number."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10.0 ** -decimals


def tolerance(act: str, row: str, printed: str) -> float:
    """The printed rounding, except sigmoid's row E: its exact value is 0.002347 (checked by
    brute force in test_sigmoid_row_e_is_exact), one unit below the paper's last digit."""
    return half_unit(printed) * (2 if (act, row) == ("sigmoid", "E") else 1) + 1e-12


def run(name, tmp_path_factory):
    out = tmp_path_factory.mktemp(name)
    return get(name).run(out, scale="small", generator=torch.Generator().manual_seed(0))


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def check_files(result, columns, n_rows):
    from matplotlib.image import imread

    assert result.csv_path.name == f"{result.name}.csv"
    rows = read_csv(result.csv_path)
    assert tuple(rows[0]) == columns
    assert len(rows) == n_rows
    image = imread(result.png_path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0  # not a blank canvas
    return rows


@pytest.fixture(scope="module")
def table1(tmp_path_factory):
    return run("nlc-table1", tmp_path_factory)


@pytest.fixture(scope="module")
def table2(tmp_path_factory):
    return run("nlc-table2", tmp_path_factory)


@pytest.fixture(scope="module")
def shrinkage(tmp_path_factory):
    return run("shrinkage-figure2", tmp_path_factory)


@pytest.fixture(scope="module")
def conditioning(tmp_path_factory):
    return run("conditioning-depth", tmp_path_factory)


# --- registry and errors ---------------------------------------------------------------------

def test_registry_lists_every_reproduction_with_both_scales():
    assert set(OURS) <= set(names())
    assert names() == list(REPRODUCTIONS)
    for name in names():
        record = get(name)
        assert record.name == name
        assert record.paper and record.target and record.description and record.small_runtime
        assert set(record.differences) == {"small", "paper"}
        assert all(record.differences[scale] for scale in ("small", "paper"))


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as info:
        get("nlc-table9")
    assert isinstance(info.value, NNGaugeError)
    message = str(info.value)
    assert "nlc-table9" in message and all(name in message for name in OURS)
    assert "Fix:" in message


def test_bad_scale_and_file_as_out_dir(tmp_path):
    with pytest.raises(InvalidInputError, match="scale"):
        get("nlc-table1").run(tmp_path, scale="huge")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(InvalidInputError, match="directory"):
        get("nlc-table1").run(a_file)


# --- nlc-table1 ------------------------------------------------------------------------------

@pytest.mark.slow
def test_table1_writes_csv_and_png(table1):
    """nlc-table1 writes a CSV of 40 rows (8 activations x rows A-E, in the paper's order) with
    the columns activation, row, quantity, ours, paper, and a non-blank PNG."""
    rows = check_files(table1, ("activation", "row", "quantity", "ours", "paper"), 8 * 5)
    assert [r["activation"] for r in rows[::5]] == list(TABLE1_ACTIVATIONS)
    assert [r["row"] for r in rows[:5]] == list("ABCDE")


@pytest.mark.slow
def test_table1_rows_a_and_e_equal_the_papers_table(table1):
    """Rows A (NLC_tau(1)) and E (linear approximation error) equal Philipp & Carbonell, NLC
    paper, Table 1 as printed for all 8 activations, to half a unit in the last printed digit
    (sigmoid's row E: one unit)."""
    value = {(r[0], r[1]): r[3] for r in table1.computed.rows}
    for act, a, e in zip(TABLE1_ACTIVATIONS, TABLE1_A, TABLE1_E):
        assert abs(value[act, "A"] - float(a)) <= tolerance(act, "A", a), act
        assert abs(value[act, "E"] - float(e)) <= tolerance(act, "E", e), act


@pytest.mark.slow
def test_sigmoid_row_e_is_exact(table1):
    """Brute force: least squares affine fit of sigmoid on 2e6 Gaussian samples."""
    s = np.random.default_rng(0).standard_normal(2_000_000)
    t = 1.0 / (1.0 + np.exp(-s))
    design = np.stack([np.ones_like(s), s], axis=1)
    fit = design @ np.linalg.lstsq(design, t, rcond=None)[0]
    brute = np.mean((t - fit) ** 2) / np.mean(fit ** 2)
    value = {(r[0], r[1]): r[3] for r in table1.computed.rows}
    assert value["sigmoid", "E"] == pytest.approx(brute, rel=0.01)


@pytest.mark.slow
def test_table1_measured_rows_follow_the_papers_claims(table1):
    """NLC paper, section 5 and Table 1: the measured 2-layer batchnorm NLC (row B) is within 5%
    of NLC_tau(1) (row A), row C is A^48, and the 49-layer NLC (row D) is within a factor 2 of C
    for 6 of 8 activations and over 10 times C for square and odd_square."""
    value = {(r[0], r[1]): r[3] for r in table1.computed.rows}
    for act in TABLE1_ACTIVATIONS:
        # section 5: the 2-layer batchnorm network's NLC closely matches NLC_tau(1) (row B ~ A)
        assert value[act, "B"] == pytest.approx(value[act, "A"], rel=0.05), act
        assert value[act, "C"] == pytest.approx(value[act, "A"] ** 48, rel=1e-12)
    for act in ("relu", "selu", "tanh", "sigmoid", "even_tanh", "gaussian"):
        # "for 6 out of 8 activation functions, this NLC (line D) closely matches line C"
        assert 0.5 < value[act, "D"] / value[act, "C"] < 2.0, act
    for act in ("square", "odd_square"):  # unstable: far above the compounding prediction
        assert value[act, "D"] > 10 * value[act, "C"], act


@pytest.mark.slow
def test_table1_through_the_cli_prints_rows_a_and_e_as_the_paper(tmp_path):
    """CLI contract: `nngauge reproduce nlc-table1` exits 0, writes the CSV and PNG, and prints
    rows A and E with the paper's printed values beside ours (equal within the printed
    rounding) and the differences from the paper (CIFAR10)."""
    out = subprocess.run(
        [sys.executable, "-m", "nngauge", "reproduce", "nlc-table1", "--out", str(tmp_path),
         "--seed", "1", "--seeds", "1"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "nlc-table1.csv").exists() and (tmp_path / "nlc-table1.png").exists()
    printed = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("│") if c.strip()]
        if len(cells) >= 3 and cells[0][:2] in ("A ", "E "):
            printed[cells[0][0], cells[0].split(": ")[-1]] = (float(cells[1]), float(cells[2]))
    for act, a, e in zip(TABLE1_ACTIVATIONS, TABLE1_A, TABLE1_E):
        for row, paper in (("A", a), ("E", e)):
            ours, shown_paper = printed[row, act]
            assert shown_paper == float(paper)
            assert abs(ours - float(paper)) <= tolerance(act, row, paper), (row, act)
    assert "Differs from the paper" in out.stdout and "CIFAR10" in out.stdout
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "`nngauge reproduce nlc-table1 --scale small --seed 1`" in readme
    took = re.search(r"in ([0-9.]+) s on \d{4}-\d{2}-\d{2} \(([0-9]+) s of CPU\)",
                     readme)  # wall and CPU time, and the day
    assert took and float(took.group(1)) > 0 and int(took.group(2)) >= 0, readme
    assert "Philipp & Carbonell" in readme
    assert re.search(r"\| A [^|]*relu \| 1\.211 \| 1\.211 \|", readme), readme
    assert "## What differs from the paper (small scale), and why" in readme
    assert all(f"- {line}" in readme for line in get("nlc-table1").differences["small"])


def test_the_default_out_is_a_folder_per_command(tmp_path):
    """Without --out each command writes to reproduce/NAME, so that the README.md of one
    command is never overwritten by another's."""
    out = subprocess.run([sys.executable, "-m", "nngauge", "reproduce", "nlc-table2", "--seeds",
                          "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    folder = tmp_path / "reproduce" / "nlc-table2"
    assert {p.name for p in folder.iterdir()} == {"nlc-table2.csv", "nlc-table2.png",
                                                   "README.md"}


def test_cli_list_and_unknown_name():
    env = {**os.environ, "COLUMNS": "200"}
    listed = subprocess.run([sys.executable, "-m", "nngauge", "reproduce", "--list"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    for name in OURS:
        assert name in listed.stdout
    assert "Table 1" in listed.stdout and "Figure 2" in listed.stdout
    bad = subprocess.run([sys.executable, "-m", "nngauge", "reproduce", "nope"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2
    assert "nlc-table1" in bad.stderr and "nope" in bad.stderr


# --- nlc-table2 ------------------------------------------------------------------------------

def test_table2_nlc_grows_with_depth_like_the_paper(table2):
    rows = check_files(table2, ("depth", "nlc", "paper", "nlc_relu_1_power"), 7)
    depth = [int(r["depth"]) for r in rows]
    nlc = [float(r["nlc"]) for r in rows]
    assert depth == sorted(TABLE2_PAPER)
    assert all(b > a for a, b in zip(nlc, nlc[1:]))
    assert [float(r["paper"]) for r in rows] == [TABLE2_PAPER[d] for d in depth]
    relu_nlc = 1.0 / math.sqrt(1.0 - 1.0 / math.pi)  # sqrt(E relu'^2) / std(relu), z ~ N(0,1)
    assert nlc[0] == pytest.approx(relu_nlc, rel=0.03)
    for d, value in zip(depth, nlc):  # Gaussian data instead of CIFAR10: within 25%
        assert value == pytest.approx(TABLE2_PAPER[d], rel=0.25), d
    # exponential compounding: log NLC grows about linearly, log NLC_relu(1) per layer
    slope = np.polyfit(depth, np.log(nlc), 1)[0]
    assert slope == pytest.approx(math.log(relu_nlc), rel=0.15)


def test_table2_is_deterministic_under_the_seed(tmp_path):
    first = get("nlc-table2").run(tmp_path / "a", generator=torch.Generator().manual_seed(3))
    second = get("nlc-table2").run(tmp_path / "b", generator=torch.Generator().manual_seed(3))
    assert first.computed.rows == second.computed.rows
    assert (tmp_path / "a" / "nlc-table2.csv").read_text() == \
        (tmp_path / "b" / "nlc-table2.csv").read_text()


# --- shrinkage-figure2 -----------------------------------------------------------------------

@pytest.mark.slow
def test_shrinkage_figure2_files_bound_and_theory(shrinkage):
    """Shrinkage paper, figure 2: every row's bound equals eq. 4.1 and holds (Theorem 1) for the
    infinite-width theory and, with the measured Jacobian norm, for the searched finite network;
    bound, theory and search all show more shrinkage with depth and with nonlinearity 1 - a, and
    shallow networks follow the infinite-width map to 0.08."""
    columns = ("panel", "depth", "negative_slope", "empirical", "theory", "empirical_min",
               "theory_min", "searched", "bound", "jacobian_op_sq", "bound_measured")
    rows = check_files(shrinkage, columns, 10)
    table = [{k: (v if k == "panel" else float(v)) for k, v in r.items()} for r in rows]
    for r in table:
        depth, a = r["depth"], r["negative_slope"]
        eq_4_1 = math.sqrt(16 * math.pi / (math.pi - 2)) / math.sqrt(depth) \
            * math.sqrt(1 + a * a) / (1 - a)
        assert r["bound"] == pytest.approx(eq_4_1, rel=1e-9)
        # Theorem 1 at infinite width and criticality: 1 - rho_max <= bound
        assert r["theory_min"] <= r["bound"]
        # at finite width, with the measured Jacobian norm in the theorem's left side
        assert r["searched"] <= r["bound_measured"]
        # the gradient search only lowers the correlation of the sample's worst pair
        assert r["searched"] >= r["empirical_min"] - 1e-12
    panel_a = [r for r in table if r["panel"] == "a: depth"]
    panel_b = [r for r in table if r["panel"] == "b: slope"]
    for key in ("bound", "theory", "theory_min", "searched"):  # shrinkage grows with depth
        values = [r[key] for r in panel_a]
        assert all(y < x for x, y in zip(values, values[1:])), key
    for key in ("bound", "theory", "theory_min", "searched"):  # and with nonlinearity (1 - a)
        values = [r[key] for r in panel_b]
        assert all(y > x for x, y in zip(values, values[1:])), key
    for r in panel_a[:2]:  # shallow: the finite network follows the infinite-width map
        assert r["empirical"] == pytest.approx(r["theory"], abs=0.08)


# --- conditioning-depth ----------------------------------------------------------------------

def test_conditioning_relu_grows_normalized_stays_bounded(conditioning):
    columns = ("activation", "kernel", "depth", "width", "theory", "empirical",
               "theory_mean_dot", "empirical_mean_dot")
    check_files(conditioning, columns, 3 * (21 + 4) + 2 * 3)
    series = defaultdict(list)
    for act, kernel, depth, width, theory, empirical, *_ in conditioning.computed.rows:
        series[act, kernel].append((depth if kernel != "nngp width sweep" else width, theory,
                                    empirical))
    relu = series["relu", "nngp"]
    theory = [t for _, t, _ in relu]
    assert all(b > a for a, b in zip(theory[1:], theory[2:]))
    assert relu[-1][2] > 10 * relu[1][2]  # the finite network's kernel degenerates too
    for act in ("normalize(relu)", "norm_relu"):
        for kernel in ("nngp", "ntk"):
            points = series[act, kernel]
            theory = [t for _, t, _ in points]
            empirical = [e for _, _, e in points]
            assert all(b < a for a, b in zip(theory, theory[1:])), (act, kernel)
            assert max(empirical) < 3 * empirical[0], (act, kernel)
        assert series[act, "nngp"][-1][2] < relu[-1][2] / 10
    # Corollary 3.3: exponentially fast to the best value 1 (normalize(relu): mu = 1 - 1/pi...)
    assert series["normalize(relu)", "nngp"][-1][1] < 1.05
    # finite width is why the measured values level off above theory's: at a fixed depth they
    # fall towards theory as the width grows (widths 128, 512, 2048), within 2x at 2048
    for act in ("normalize(relu)", "norm_relu"):
        sweep = series[act, "nngp width sweep"]
        empirical = [e for _, _, e in sweep]
        assert all(b < a for a, b in zip(empirical, empirical[1:])), act
        assert sweep[-1][1] <= empirical[-1] < 2 * sweep[-1][1], act


def test_conditioning_verdict(conditioning):
    """The judge reads conditioning-depth as qualitatively reproduced: the claim holds, but the
    measured condition numbers reach theory's limit 1 only as the width grows."""
    assert conditioning.verdict.status == "qualitatively"
    assert "reached only as the width grows" in conditioning.verdict.reason


# --- nlc-figure2, neyshabur-random-labels, raghu-trajectory, raghu-transitions ----------

NEW = ("nlc-figure2", "neyshabur-random-labels", "raghu-trajectory", "raghu-transitions")


@pytest.fixture(scope="module")
def figure2(tmp_path_factory):
    return run("nlc-figure2", tmp_path_factory)


@pytest.fixture(scope="module")
def random_labels_result(tmp_path_factory):
    return run("neyshabur-random-labels", tmp_path_factory)


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory):
    return run("raghu-trajectory", tmp_path_factory)


@pytest.fixture(scope="module")
def transitions_result(tmp_path_factory):
    return run("raghu-transitions", tmp_path_factory)


def test_the_four_are_registered_with_both_scales():
    for name in NEW:
        assert name in names()
        record = get(name)
        assert set(record.differences) == {"small", "paper"}
        assert all(record.differences[scale] for scale in ("small", "paper"))


# --- nlc-figure2 -----------------------------------------------------------------------------

@pytest.mark.slow
def test_figure2_rows_flags_and_correlations(figure2):
    """nlc-figure2 (NLC paper, figure 2) writes 64 sampled architectures with NLC > 0 (or
    undefined for a dead network), output bias >= 1 and the high-bias (> 1000) and skip flags
    as defined; its Spearman and Kendall correlations equal scipy's on the CSV, positive and
    significant (the paper's claim: NLC predicts test error), with a bootstrap interval above
    0; the best tenth's NLC range is set beside the paper's 1 <~ NLC <~ 3."""
    columns = ("arch_index", "architecture", "nlc", "output_bias", "high_bias", "skip",
               "best_lr", "best_val_error", "test_error")
    rows = check_files(figure2, columns, 64)
    for r in rows:
        nlc, bias, error = float(r["nlc"]), float(r["output_bias"]), float(r["test_error"])
        assert (nlc > 0 and bias >= 1.0 - 1e-9) or (math.isnan(nlc) and math.isnan(bias))
        assert (r["high_bias"] == "True") == (bias > 1000)  # the paper's red points
        assert (r["skip"] == "True") == (" skip " in f" {r['architecture']} ")
        assert "width 16" in r["architecture"]
        assert float(r["best_lr"]) in (0.03, 0.3)
        assert 0.0 <= error <= 1.0
    defined = [r for r in rows if not math.isnan(float(r["nlc"]))]
    assert len(rows) - len(defined) == figure2.computed.compared("constant_output").ours
    nlc = [float(r["nlc"]) for r in defined]
    error = [float(r["test_error"]) for r in defined]
    rho = figure2.computed.compared("rho")
    tau = figure2.computed.compared("tau")
    assert rho.ours == pytest.approx(stats.spearmanr(nlc, error)[0], abs=1e-12)
    assert tau.ours == pytest.approx(stats.kendalltau(nlc, error)[0], abs=1e-12)
    assert rho.p_value == pytest.approx(stats.spearmanr(nlc, error)[1], rel=1e-9)
    assert tau.p_value == pytest.approx(stats.kendalltau(nlc, error)[1], rel=1e-9)
    assert (rho.statistic, rho.n, tau.statistic) == ("spearman", len(defined), "kendall")
    assert rho.ours > 0.3 and stats.spearmanr(nlc, error)[1] < 1e-3
    low = figure2.computed.compared("rho_interval_low").ours
    high = figure2.computed.compared("rho_interval_high").ours
    assert 0 < low < rho.ours < high <= 1
    best = sorted(range(len(defined)), key=lambda i: error[i])[:math.ceil(0.1 * len(defined))]
    lowest = figure2.computed.compared("best_tenth_lowest_nlc")
    assert lowest.ours == pytest.approx(min(nlc[i] for i in best))
    assert lowest.paper == 1.0  # the paper's range 1 <~ NLC <~ 3
    assert any(line.startswith("64 sampled") for line in figure2.differences)


# --- nlc-figure3, nlc-figure9, nlc-figure10: the same study as nlc-figure2 -------------------

@pytest.fixture(scope="module")
def figure3(tmp_path_factory, figure2):
    return run("nlc-figure3", tmp_path_factory)


@pytest.fixture(scope="module")
def figure9(tmp_path_factory, figure2):
    return run("nlc-figure9", tmp_path_factory)


@pytest.fixture(scope="module")
def figure10(tmp_path_factory, figure2):
    return run("nlc-figure10", tmp_path_factory)


def records(result):
    return [dict(zip(result.computed.columns, r)) for r in result.computed.rows]


def measured(result, *columns):
    return [r for r in records(result)
            if all(isinstance(r[c], float) and math.isfinite(r[c]) and r[c] > 0
                   for c in columns)]


@pytest.mark.slow
def test_figures_3_9_10_read_the_one_study_of_figure2(figure2, figure3, figure9, figure10):
    """Figures 3, 9 and 10 plot the architectures of figure 2 (one study per seed and scale,
    run once): the same names, NLCs and test errors, row for row, in CSVs with the declared
    columns."""
    base = {r["arch_index"]: r for r in records(figure2)}
    for result, columns in ((figure3, ("arch_index", "architecture", "skip", "high_bias",
                                       "output_bias", "nlc", "nlc_after", "output_bias_after",
                                       "error_preserving_perturbation", "test_error")),
                            (figure9, ("arch_index", "architecture", "skip", "high_bias",
                                       "output_bias", "output_bias_after", "nlc",
                                       "test_error")),
                            (figure10, ("arch_index", "architecture", "skip", "high_bias",
                                        "nlc", "output_bias", "test_error"))):
        check_files(result, columns, 64)
        for r in records(result):
            same = base[r["arch_index"]]
            assert r["architecture"] == same["architecture"]
            assert r["test_error"] == same["test_error"]
            assert r["nlc"] == same["nlc"] or (math.isnan(r["nlc"]) and math.isnan(same["nlc"]))


@pytest.mark.slow
def test_figure3_nlc_after_training_bias_and_robustness(figure3):
    """NLC paper figure 3: (A) the best tenth start with a low output bias and no
    architecture with a bias > 1000 beats chance; (B) training lowers the NLC of most
    architectures (> 70%) and the initial NLC predicts the final one (Spearman > 0.5,
    p < 1e-3); (E) the higher the initial NLC, the smaller the perturbation of the test set
    that raises its error by 5% (Spearman < 0). Panel C's claim, that the NLC after training
    predicts test error less well than before, fails here, and the verdict says so: the
    command reports panels that fail instead of hiding them."""
    rows = measured(figure3, "nlc", "nlc_after", "output_bias")
    assert len(rows) >= 55
    best = sorted(rows, key=lambda r: r["test_error"])[:math.ceil(0.1 * len(rows))]
    assert max(r["output_bias"] for r in best) < 10
    assert all(r["test_error"] > 0.55 for r in rows if r["output_bias"] > 1000)
    decreased = np.mean([r["nlc_after"] < r["nlc"] for r in rows])
    assert decreased > 0.7
    rho, p = stats.spearmanr([r["nlc"] for r in rows], [r["nlc_after"] for r in rows])
    assert rho > 0.5 and p < 1e-3
    assert figure3.computed.compared("b_rho").ours == pytest.approx(rho, abs=1e-12)
    assert figure3.computed.compared("b_rho").p_value == pytest.approx(p, rel=1e-9)
    robust = measured(figure3, "nlc", "error_preserving_perturbation")
    rho_e = stats.spearmanr([r["nlc"] for r in robust],
                            [r["error_preserving_perturbation"] for r in robust])[0]
    assert rho_e < 0 and figure3.computed.compared("e_rho").ours == pytest.approx(rho_e)
    assert figure3.verdict.status == "qualitatively"
    assert "C fails" in figure3.verdict.reason and "B holds" in figure3.verdict.reason


@pytest.mark.slow
def test_figure9_bias_falls_in_training_and_a_low_final_bias_is_necessary(figure9):
    """NLC paper figure 9 (B.2): (A) the output bias decreases in training for at least half
    the architectures; (B) every architecture better than chance ends training with a bias
    <= 10, and none that ends above 10 beats chance; (C) some architectures have a high
    initial bias (> 10) but an NLC in the ideal range (<= 3)."""
    rows = measured(figure9, "output_bias", "output_bias_after", "nlc")
    assert np.mean([r["output_bias_after"] < r["output_bias"] for r in rows]) >= 0.5
    good = [r for r in rows if r["test_error"] < 2 / 3 - 0.1]
    assert len(good) >= 10 and max(r["output_bias_after"] for r in good) <= 10
    assert all(r["test_error"] >= 2 / 3 - 0.1 for r in rows if r["output_bias_after"] > 10)
    assert any(r["output_bias"] > 10 and r["nlc"] <= 3 for r in rows)
    assert figure9.verdict.status in ("reproduced", "qualitatively")
    assert "A holds" in figure9.verdict.reason
    assert "B (better than chance) holds" in figure9.verdict.reason
    assert "B (high bias) holds" in figure9.verdict.reason


@pytest.mark.slow
def test_figure10_splits_figure2_by_skip_connections(figure10):
    """NLC paper figure 10: each panel holds exactly the architectures with / without skip
    connections, and each shows figure 2's relation (Spearman(NLC, test error) > 0, equal
    to scipy's on the panel's rows); the residual shift is the mean over each group."""
    rows = measured(figure10, "nlc")
    for panel, skip in (("no_skip", False), ("skip", True)):
        group = [r for r in rows if r["skip"] == skip]
        rho = stats.spearmanr([r["nlc"] for r in group], [r["test_error"] for r in group])[0]
        assert rho > 0
        assert figure10.computed.compared(f"{panel}_rho").ours == pytest.approx(rho)
        assert figure10.computed.compared(f"{panel}_median_nlc").ours == pytest.approx(
            np.median([r["nlc"] for r in group]))
    # B.3's skip-connection claims, recomputed from the rows: each claim's word in the verdict
    # and the status follow from scipy's tests, whatever this seed shows
    with_skip = [r["nlc"] for r in rows if r["skip"]]
    without = [r["nlc"] for r in rows if not r["skip"]]
    ratio = figure10.computed.compared("skip_nlc_ratio")
    assert ratio.ours == pytest.approx(np.median(with_skip) / np.median(without))
    assert ratio.p_value == pytest.approx(stats.mannwhitneyu(with_skip, without).pvalue)
    rhos = [figure10.computed.compared(f"{panel}_rho") for panel in ("no_skip", "skip")]
    shift = figure10.computed.compared("skip_error_shift")
    holds = {"relation without skips": rhos[0].ours > 0 and rhos[0].p_value < 0.05,
             "relation with skips": rhos[1].ours > 0 and rhos[1].p_value < 0.05,
             "skips lower the NLC": ratio.ours < 1 and ratio.p_value < 0.05,
             "skips lower the error at a given NLC": shift.ours < 0 and shift.p_value < 0.05}
    for claim, ok in holds.items():
        assert f"{claim} {'holds' if ok else 'fails'}" in figure10.verdict.reason
    held = sum(holds.values())
    assert figure10.verdict.status == ("reproduced" if held == 4 else
                                       "qualitatively" if held >= 2 else "differs")


# --- neyshabur-random-labels -----------------------------------------------------------------

@pytest.mark.slow
def test_random_labels_need_more_capacity(random_labels_result):
    """Neyshabur et al. (NIPS 2017), figure 1: with every network fitted (zero training error),
    the l2, l1-path, l2-path and spectral capacities are higher for random than for true labels
    at every training-set size, the gap grows with the size, and only true labels generalize
    (test error < 0.35 vs > 0.75)."""
    columns = ("labels", "n_train", "measure", "log10_capacity_plain", "log10_capacity",
               "margin", "train_error", "train_loss", "epochs", "test_error")
    check_files(random_labels_result, columns, 3 * 2 * 4)
    value, test_error = {}, {}
    for labels, m, measure, plain, full, margin, train_error, loss, _, test in \
            random_labels_result.computed.rows:
        assert train_error == 0.0 and loss < 1e-2 and margin > 0  # fitted, as the paper
        assert full > plain  # constants 4^d and width factors are > 1
        value[labels, m, measure] = plain
        test_error[labels, m] = test
    sizes = sorted({m for _, m, _ in value})
    for measure in ("l2", "l1_path", "l2_path", "spectral"):
        for m in sizes:  # "the complexity of models learned with random labels is always higher"
            assert value["random", m, measure] > value["true", m, measure], (measure, m)
        gap = [value["random", m, measure] - value["true", m, measure] for m in sizes]
        # "the gap ... increases as we increase the size of the training set"
        assert gap[-1] > gap[0], measure
        # random labels: capacity grows with every added example
        assert value["random", sizes[-1], measure] > value["random", sizes[0], measure]
    for m in sizes:  # true labels generalize, random labels are at chance (10 classes)
        assert test_error["true", m] < 0.35 and test_error["random", m] > 0.75


# --- raghu-trajectory ------------------------------------------------------------------------

@pytest.mark.slow
def test_trajectory_length_grows_between_theorem_3_bounds(trajectory):
    """Raghu et al. (ICML 2017), Theorem 3 and figures 12-13: the trajectory length after every
    layer lies between Theorem 3's lower bound and appendix B's upper bound, grows exponentially
    with depth for large sigma_w (hard tanh, ReLU), and its growth rate rises with sigma_w and
    with the width; layer 0 is the quarter circle's length pi sqrt(k) / 2."""
    columns = ("activation", "width", "sigma_w2", "layer", "length", "ratio", "lower_bound",
               "upper_bound", "asymptotic", "converged")
    hidden = trajectory.computed.extra["hidden"]
    check_files(trajectory, columns, 9 * (hidden + 1))
    series = defaultdict(list)
    for act, width, sigma_w2, layer, length, _, lower, upper, *_ in trajectory.computed.rows:
        series[act, width, sigma_w2].append((layer, length, lower, upper))
    growth = {}
    for (act, width, sigma_w2), points in series.items():
        assert [p[0] for p in points] == list(range(hidden + 1))
        # layer 0: the quarter circle of radius sqrt(k), length pi sqrt(k) / 2 (polygon)
        assert points[0][1] == pytest.approx(math.pi * math.sqrt(width) / 2, rel=1e-4)
        for layer, length, lower, upper in points:
            assert lower <= length, (act, width, sigma_w2, layer)  # Theorem 3
            assert length <= upper * (1 + 1e-9), (act, width, sigma_w2, layer)  # appendix B
        lengths = np.array([p[1] for p in points])
        growth[act, width, sigma_w2] = (lengths[-1] / lengths[0]) ** (1 / hidden)
        if (act == "hard_tanh" and sigma_w2 >= 16) or (act == "relu" and sigma_w2 >= 4):
            # exponential in depth: every layer multiplies the length, log-length ~ linear
            assert np.all(np.diff(lengths) > 0), (act, width, sigma_w2)
            fit = stats.linregress(np.arange(hidden + 1), np.log(lengths))
            assert fit.slope > math.log(1.3) and fit.rvalue ** 2 > 0.95, (act, sigma_w2)
    # growth increases with sigma_w (figures 12, 13b) and with the width (figure 13a)
    for act, width in (("hard_tanh", 32), ("relu", 32)):
        rates = [growth[key] for key in sorted(k for k in growth if k[:2] == (act, width))]
        assert all(b > a for a, b in zip(rates, rates[1:])), act
    by_width = [growth[key] for key in sorted(k for k in growth
                                              if k[0] == "hard_tanh" and k[2] == 16.0)]
    assert all(b > a for a, b in zip(by_width, by_width[1:]))


# --- raghu-transitions -----------------------------------------------------------------------

@pytest.mark.slow
def test_transitions_increase_linearly_with_length(transitions_result):
    """Raghu et al. (ICML 2017), section 2.2 and figure 5: in random hard-tanh networks the
    exact transitions of each layer rise with the length of the trajectory entering it
    (Spearman >= 0.9) and follow a linear law, a log-log slope between 0.8 and 1.2."""
    columns = ("width", "sigma_w2", "layer", "length_in", "transitions",
               "transitions_per_length", "length_converged")
    check_files(transitions_result, columns, 4 * 5)
    rows = transitions_result.computed.rows
    series = defaultdict(list)
    for width, sigma_w2, layer, length, count, ratio, _ in rows:
        assert ratio == pytest.approx(count / length)
        series[width, sigma_w2].append((length, count))
    for key, points in series.items():
        lengths, counts = zip(*points)
        assert lengths[0] == pytest.approx(math.pi * math.sqrt(key[0]) / 2, rel=1e-4)
        # longer trajectory entering a layer -> more transitions in it
        assert stats.spearmanr(lengths, counts)[0] >= 0.9, key
        assert counts[-1] > 2 * counts[0], key
    x = np.log([r[3] for r in rows])
    y = np.log([r[4] for r in rows])
    slope = np.polyfit(x, y, 1)[0]  # linear law: slope 1 in log-log
    assert 0.8 < slope < 1.2
    assert transitions_result.computed.compared("slope").ours == pytest.approx(slope)


@pytest.mark.slow
def test_transitions_through_the_cli_match_the_api(transitions_result, tmp_path):
    """CLI contract: `nngauge reproduce raghu-transitions --seed 0` exits 0, prints the
    differences from the paper and the log-log slope, writes the PNG, and its CSV equals, byte
    for byte, the one written in-process under the same seed."""
    out = subprocess.run(
        [sys.executable, "-m", "nngauge", "reproduce", "raghu-transitions", "--out",
         str(tmp_path), "--seed", "0", "--seeds", "1"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "Differs from the paper" in out.stdout and "log-log slope" in out.stdout
    assert (tmp_path / "raghu-transitions.png").exists()
    # same seed, same numbers: the CLI's CSV equals the one written in-process
    assert (tmp_path / "raghu-transitions.csv").read_text() == \
        transitions_result.csv_path.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("fixture, status, because", [
    ("table2", "reproduced", "largest relative difference"),
    ("shrinkage", "reproduced", "under eq. 4.1's bound in 10 settings"),
    ("figure2", "reproduced", "95% bootstrap interval"),
    ("random_labels_result", "reproduced", "for 4 of 4 measures"),
    # issue 20: Raghu et al.'s Theorem 3 as printed is not a lower bound
    ("trajectory", "qualitatively", "below the rate the theorem states in 9 of 9 settings"),
    ("transitions_result", "reproduced", "log-log slope"),
])
def test_each_verdict_reads_the_figure_as_its_test_does(fixture, status, because, request):
    """Each command's judge agrees with the claims its test asserts: the paper's claim holds
    (reproduced), holds only qualitatively (Theorem 3's printed rate, which the measured
    growth stays below), and says why with the numbers."""
    result = request.getfixturevalue(fixture)
    assert result.verdict.status == status and because in result.verdict.reason
    readme = result.readme_path.read_text(encoding="utf-8")
    assert f"**Verdict: {status}.**" in readme and get(result.name).claim in readme


def test_figure2_keeps_dead_architectures_as_data_and_raises_on_other_failures():
    """A sampled architecture whose output is constant at initialization has no NLC: it is
    counted and left out of the correlations (it failed the whole command before); any other
    failed unit still stops the command, saying which."""
    from nngauge.reproduce._nlc_study import undefined_at_initialization

    dead = ("InvalidInputError: nlc() expected outputs of 'output' that vary over the data; got "
            "a constant output (standard deviation 0). Fix: pass more diverse inputs.")
    assert undefined_at_initialization({}) == 0
    assert undefined_at_initialization({"a": dead, "b": dead}) == 2
    with pytest.raises(NNGaugeError, match="1 failures.*worker process died"):
        undefined_at_initialization({"a": dead, "c": "its worker process died"})


def test_table1_judge_calls_the_failed_section5_claim_a_paper_error(table1):
    """Section 5's "E is about NLC_tau(1) - 1" fails in the paper's own Table 1 for some
    activations: the verdict is "paper error" naming them, never "reproduced"; planted rows E
    = A - 1 (ours and printed) make the claim hold and the verdict "reproduced"."""
    from dataclasses import replace

    from nngauge.reproduce import VERDICTS
    from nngauge.reproduce._nlc_table1 import judge

    verdict = judge(table1.computed)
    assert "paper error" in VERDICTS
    assert verdict.status == "paper error" and "fails for" in verdict.reason
    a = {(r[0]): r for r in table1.computed.rows if r[1] == "A"}
    rows = tuple(r if r[1] != "E" else (*r[:3], a[r[0]][3] - 1.0, a[r[0]][4] - 1.0)
                 for r in table1.computed.rows)
    assert judge(replace(table1.computed, rows=rows)).status == "reproduced"
