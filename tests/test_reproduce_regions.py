"""``nngauge reproduce raghu-figure1`` and ``regions-vs-bounds``: the linear-region pictures of
Raghu et al. (ICML 2017, figure 1, Theorem 2) and their counts against the literature's bounds.

Checked against independent computations: pane 1 against the count of an arrangement of
lines computed from the first layer's weights; every count against the Serra et al. (2018)
upper bound; first-layer boundaries straight and deeper ones bent (the figure's claim); the
per-line density below Hanin & Rolnick's (2019) expectation bound and about linear in the
number of neurons whatever the depth (their claim).
"""

import math
import os
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch

from nngauge.reproduce import get, names
from nngauge.reproduce._raghu_figure1 import arrangement_regions
from test_reproduce import run


def table(result):
    return [dict(zip(result.computed.columns, row)) for row in result.computed.rows]


@pytest.fixture(scope="module")
def figure1(tmp_path_factory):
    return run("raghu-figure1", tmp_path_factory)


@pytest.fixture(scope="module")
def versus_bounds(tmp_path_factory):
    return run("regions-vs-bounds", tmp_path_factory)


def test_both_are_registered_with_both_scales():
    for name in ("raghu-figure1", "regions-vs-bounds"):
        assert name in names()
        assert set(get(name).differences) == {"small", "paper"}


def test_arrangement_count_of_known_lines():
    # x = 0, y = 0 and x + y = 0.2: 3 lines crossing the square, 3 crossings inside it -> 7
    weight = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert arrangement_regions(weight, np.array([0.0, 0.0, -0.2]), 0.5) == 7
    # moved out of the square, the third line leaves 4 regions
    assert arrangement_regions(weight, np.array([0.0, 0.0, -5.0]), 0.5) == 4


def test_figure1_counts_match_the_arrangement_and_the_bounds(figure1):
    rows = table(figure1)
    assert len(rows) == 20 * 3 + 3 + 3 + 6  # the figure's 20 networks, then the second row
    assert figure1.png_path.exists() and figure1.csv_path.exists()
    per_network = defaultdict(list)
    for row in rows:
        per_network[row["width"], row["hidden_layers"], row["seed"]].append(row["regions"])
        assert row["regions"] <= row["upper_bound"]
        if row["pane"] == 1:
            m = row["width"]
            assert row["regions"] == row["arrangement_regions"]
            assert row["upper_bound"] == 1 + m + m * (m - 1) // 2  # Zaslavsky, Theorem 5
    for counts in per_network.values():
        assert counts == sorted(counts)  # deeper panes refine the shallower ones
    assert any(c[2] > c[0] for c in per_network.values())
    assert {key[:2] for key in per_network} == {(4, 3), (8, 3), (16, 3), (8, 6)}
    larger = figure1.computed.extra["larger"]
    assert larger[1].n_regions > larger[0].n_regions  # width 16 cuts finer than width 8


def _collinear(points: np.ndarray, tol: float = 1e-9) -> bool:
    centred = points - points.mean(0)
    return np.linalg.svd(centred, compute_uv=False)[-1] <= tol * (1 + np.abs(points).max())


def test_figure1_first_layer_lines_are_straight_deeper_ones_bend(figure1):
    result = figure1.computed.extra["result"]
    ends = defaultdict(list)
    for edge in result.edges:
        if edge.depth > 0:
            ends[edge.depth, edge.unit] += [edge.start, edge.end]
    first = [np.array(v) for (depth, _), v in ends.items() if depth == 1]
    deeper = [np.array(v) for (depth, _), v in ends.items() if depth > 1]
    assert first and deeper
    assert all(_collinear(points) for points in first)
    assert not all(_collinear(points) for points in deeper)


def test_figure1_is_deterministic_under_the_seed(figure1, tmp_path):
    again = get("raghu-figure1").run(tmp_path, generator=torch.Generator().manual_seed(0))
    assert again.csv_path.read_text() == figure1.csv_path.read_text()


@pytest.mark.slow
def test_measured_regions_respect_the_bounds(versus_bounds):
    """regions-vs-bounds: at initialization and after training, the exact regions near the data
    <= those of the wide square <= Serra et al. (ICML 2018)'s upper bound, which is Zaslavsky's
    1 + n + C(n, 2) for one hidden layer and >= Montufar et al.'s lower bound; the deepest,
    widest random networks have under 1% of Montufar's count (Hanin & Rolnick's point)."""
    rows = table(versus_bounds)
    assert {r["state"] for r in rows} == {"init", "trained"}
    for r in rows:
        assert r["regions_near"] <= r["regions_wide"] <= r["serra_upper"]
        if r["hidden_layers"] == 1:  # one layer: Zaslavsky's count is the exact maximum
            n = r["width"]
            assert r["serra_upper"] == 1 + n + math.comb(n, 2)
        assert r["montufar_lower"] <= r["serra_upper"]
    deepest = max(r["hidden_layers"] for r in rows)
    widest = max(r["width"] for r in rows)
    big = [r for r in rows if r["hidden_layers"] == deepest and r["width"] == widest]
    # random networks stay far below what the architecture can do (Hanin & Rolnick's point)
    assert all(r["regions_wide"] * 100 < r["montufar_lower"] for r in big)


@pytest.mark.slow
def test_line_density_follows_hanin_rolnick(versus_bounds):
    """Hanin & Rolnick (ICML 2019), Theorem 1: at initialization the boundaries crossed per unit
    length on lines average at most the expectation bound (and above 5% of it), are about
    linear in the number of neurons whatever the depth (per-neuron means within 2.5x), and grow
    over 4x from the fewest to the most neurons."""
    rows = [r for r in table(versus_bounds) if r["state"] == "init"]
    ratio = [r["crossings_per_length"] / r["hr_crossings_bound"] for r in rows]
    assert np.mean(ratio) <= 1.0  # a bound on the expectation at initialization
    assert min(ratio) > 0.05  # and of the right order
    per_depth = defaultdict(list)
    for r in rows:
        per_depth[r["hidden_layers"]].append(r["crossings_per_length"] / r["neurons"])
    means = [np.mean(v) for v in per_depth.values()]
    assert max(means) < 2.5 * min(means)  # linear in neurons, not exponential in depth
    grows = sorted(rows, key=lambda r: r["neurons"])
    assert grows[-1]["crossings_per_length"] > 4 * grows[0]["crossings_per_length"]


@pytest.mark.slow
def test_training_fits_the_digits_plane(versus_bounds):
    """Every regions-vs-bounds network trained on the digits projected to a plane beats its own
    training accuracy at initialization and exceeds 40% (ten classes: chance is 10%)."""
    rows = table(versus_bounds)
    init = {(r["hidden_layers"], r["width"]): r for r in rows if r["state"] == "init"}
    for r in rows:
        if r["state"] == "trained":
            assert r["train_accuracy"] > init[r["hidden_layers"], r["width"]]["train_accuracy"]
            assert r["train_accuracy"] > 0.4  # ten classes: chance is 0.1


@pytest.mark.slow
def test_figure1_through_the_cli(figure1, tmp_path):
    """CLI contract: `nngauge reproduce raghu-figure1 --seed 0` exits 0, prints that pane 1
    equals the direct arrangement count, and writes the same CSV as the in-process run."""
    out = subprocess.run(
        [sys.executable, "-m", "nngauge", "reproduce", "raghu-figure1", "--out",
         str(tmp_path), "--seed", "0", "--seeds", "1"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "pane 1 equals the direct arrangement count" in out.stdout
    assert (tmp_path / "raghu-figure1.csv").read_text() == figure1.csv_path.read_text()


@pytest.mark.slow
def test_verdicts_read_the_regions_as_the_tests_do(figure1, versus_bounds):
    """raghu-figure1: more regions pane after pane and the first layer an arrangement of lines;
    regions-vs-bounds: no count above Serra et al.'s bound: both 'reproduced'."""
    assert figure1.verdict.status == "reproduced", figure1.verdict.reason
    assert versus_bounds.verdict.status == "reproduced", versus_bounds.verdict.reason
    assert "Serra et al.'s upper bound at most" in versus_bounds.verdict.reason
    # proven bounds: only a counting bug could fail them, and every output says so
    assert versus_bounds.verdict.software_check and not figure1.verdict.software_check
    assert versus_bounds.verdict.label == "reproduced (software check, not evidence)"
    assert ("**Verdict: reproduced (software check, not evidence).**"
            in versus_bounds.readme_path.read_text(encoding="utf-8"))
