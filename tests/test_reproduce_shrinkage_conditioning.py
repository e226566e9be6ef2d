"""Reproductions of the shrinkage paper's figures 1 and 3 and the deep-conditioning paper's
figures 1, 2 and 6: each command runs once at the small scale (seed 0) and the papers' claims
are asserted."""

import csv

import numpy as np
import pytest
import torch


def run(reproduction, tmp_path_factory):
    out = tmp_path_factory.mktemp(reproduction.name)
    return reproduction.run(out, scale="small", generator=torch.Generator().manual_seed(0))


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def check_files(result, columns):
    rows = read_csv(result.csv_path)
    assert tuple(rows[0].keys()) == tuple(columns)
    assert len(rows) == len(result.computed.rows)
    assert result.png_path.stat().st_size > 10_000
    return rows


# --- shrinkage-figure1 ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def figure1(tmp_path_factory):
    from nngauge.reproduce._shrinkage_figure1 import REPRODUCTION

    return run(REPRODUCTION, tmp_path_factory)


def by_depth(result):
    computed = result.computed
    out = {}
    for depth in computed.extra["depths"]:
        keep = [row for row in computed.rows if row[0] == depth]
        out[depth] = {name: np.array([row[computed.columns.index(name)] for row in keep],
                                     dtype=object) for name in computed.columns}
    return out


@pytest.mark.slow
def test_figure1_files(figure1):
    """The CSV has the declared columns and one row per (depth, rho_0); the PNG is drawn."""
    from nngauge.reproduce._shrinkage_figure1 import COLUMNS

    check_files(figure1, COLUMNS)


@pytest.mark.slow
def test_figure1_measured_follows_theory(figure1):
    """Figure 1: at width 1024 the measured rho_L(rho_0) follows the infinite-width map
    P_L o ... o P_1 everywhere, at every depth, within 2 / sqrt(1024) (twice the size of a
    finite-width correlation's fluctuations)."""
    for depth, cols in by_depth(figure1).items():
        gap = np.abs(cols["measured"].astype(float) - cols["theory"].astype(float))
        assert gap.max() < 2 / np.sqrt(1024), (depth, gap.max())


@pytest.mark.slow
def test_figure1_bound_holds(figure1):
    """Figure 1 / remark 2: the excess-convexity bound lies above the infinite-width curve on
    [0, 1] exactly, and above the measured curve up to finite-width noise, 2 / sqrt(1024) (the
    bound touches the infinite-width curve at rho_0 = 0 and 1)."""
    for depth, cols in by_depth(figure1).items():
        keep = cols["rho_0"].astype(float) >= 0
        bound = cols["bound"][keep].astype(float)
        assert np.all(bound >= cols["theory"][keep].astype(float) - 1e-9), depth
        assert np.all(bound >= cols["measured"][keep].astype(float) - 2 / np.sqrt(1024)), depth


@pytest.mark.slow
def test_figure1_shrinkage_grows_with_depth(figure1):
    """Figure 1 / section 3: the curve's floor rho_L(0) rises with depth (representations
    shrink) while rho_L(1) stays 1: the curve turns flat-then-steep."""
    cols = by_depth(figure1)
    floors = []
    for depth in sorted(cols):
        rho = cols[depth]["rho_0"].astype(float)
        measured = cols[depth]["measured"].astype(float)
        floors.append(measured[np.argmin(np.abs(rho))])
        assert measured[-1] > 0.999
    assert all(b > a + 0.05 for a, b in zip(floors, floors[1:])), floors


@pytest.mark.slow
def test_figure1_verdict(figure1):
    """The judge reads figure 1 as reproduced (the tests' criteria) and names the loose
    constant of the proof's excess-convexity bound."""
    assert figure1.verdict.status == "reproduced"
    assert "the floor rho_L(0) rises" in figure1.verdict.reason
    assert "The bound is loose" in figure1.verdict.reason


# --- shrinkage-figure3 ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def figure3(tmp_path_factory):
    from nngauge.reproduce._shrinkage_figure3 import REPRODUCTION

    return run(REPRODUCTION, tmp_path_factory)


def series(result, init, quantity, field="measured"):
    columns = result.computed.columns
    return np.array([row[columns.index(field)] for row in result.computed.rows
                     if row[0] == init and row[1] == quantity], dtype=float)


@pytest.mark.slow
def test_figure3_files(figure3):
    """The CSV has the declared columns and all quantities for both initializations; the
    power-iteration operator norm (nngauge.jacobian_norm) matches the SVD of the Jacobian."""
    from nngauge.reproduce._shrinkage_figure3 import COLUMNS

    rows = check_files(figure3, COLUMNS)
    assert {(r["init"], r["quantity"]) for r in rows} == {
        (i, q) for i in ("critical", "chaotic")
        for q in ("1 - rho_max", "jacobian_op", "gradient_norm", "singular_value",
                  "jacobian_op power iteration")}
    for init in ("critical", "chaotic"):  # nngauge.jacobian_norm agrees with the full SVD
        power = series(figure3, init, "jacobian_op power iteration")
        svd = series(figure3, init, "jacobian_op power iteration", "theory")
        assert power == pytest.approx(svd, rel=1e-3)


@pytest.mark.slow
def test_figure3_critical_shrinks_chaotic_does_not(figure3):
    """Figures 3a-3b: at critical initialization 1 - rho_max falls with depth (to under half its
    first-layer value) and stays under eq. 4.2; at chaotic initialization it stays near
    1 - rho_fp = 1 (above 0.8)."""
    critical = series(figure3, "critical", "1 - rho_max")
    bound = series(figure3, "critical", "1 - rho_max", "bound")
    assert critical[-1] < 0.5 * critical[0]
    assert np.all(critical[1:] <= bound[1:])
    assert series(figure3, "chaotic", "1 - rho_max")[-1] > 0.8


@pytest.mark.slow
def test_figure3_jacobian_explodes_only_when_chaotic(figure3):
    """Figures 3c-3d: the Jacobian operator norm of the chaotic network grows with depth (more
    than 5x from layer 1 to the top, and above eq. 4.3), at least 5x faster than the critical
    one's, which stays within 5x (its infinite-width gain is constant; the finite-width
    spectrum widens slowly); the chaotic spectrum's top singular value is 5x the critical one's."""
    chaotic = series(figure3, "chaotic", "jacobian_op")
    critical = series(figure3, "critical", "jacobian_op")
    bound = series(figure3, "chaotic", "jacobian_op", "bound")
    assert chaotic[-1] > 5 * chaotic[0]
    assert np.all(chaotic[1:] >= bound[1:])
    assert critical[-1] < 5 * critical[0]
    assert chaotic[-1] / chaotic[0] > 5 * critical[-1] / critical[0]
    assert (series(figure3, "chaotic", "singular_value")[0]
            > 5 * series(figure3, "critical", "singular_value")[0])


@pytest.mark.slow
def test_figure3_gradients_explode_only_when_chaotic(figure3):
    """Figures 3e-3f: backpropagated gradients dl/dz^(l) grow towards the input layers when
    chaotic (first layer over 10x the last) and stay within 3x of each other when critical."""
    chaotic = series(figure3, "chaotic", "gradient_norm")
    critical = series(figure3, "critical", "gradient_norm")
    assert chaotic[0] > 10 * chaotic[-1]
    assert 1 / 3 < critical[0] / critical[-1] < 3


@pytest.mark.slow
def test_figure3_verdict(figure3):
    """The judge reads figure 3 as reproduced: critical shrinks without exploding, chaotic
    explodes without shrinking."""
    assert figure3.verdict.status == "reproduced"
    assert "chaotic ones explode without shrinking" in figure3.verdict.reason


# --- conditioning-figure2 ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def conditioning2(tmp_path_factory):
    from nngauge.reproduce._conditioning_figure2 import REPRODUCTION

    return run(REPRODUCTION, tmp_path_factory)


def panel(result, name, activation):
    rows = [r for r in result.computed.rows if r[0] == name and r[1] == activation]
    return (np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
            np.array([np.nan if r[4] is None else r[4] for r in rows]))


@pytest.mark.slow
def test_conditioning2_files(conditioning2):
    """The CSV has the declared columns and four panels for NormReLU and SELU."""
    from nngauge.reproduce._conditioning_figure2 import COLUMNS

    rows = check_files(conditioning2, COLUMNS)
    assert {(r["panel"], r["activation"]) for r in rows} == {
        (p, a) for p in ("shape", "dual", "norm transfer", "bias") for a in ("norm_relu", "selu")}


@pytest.mark.slow
def test_conditioning2_closed_forms_match_quadrature(conditioning2):
    """Figures 2 and 6: NormReLU's dual map and norm transfer in closed form agree with
    Gauss-Hermite quadrature (1e-6)."""
    for name in ("dual", "norm transfer"):
        _, value, quad = panel(conditioning2, name, "norm_relu")
        assert np.max(np.abs(value - quad)) < 1e-6, name


@pytest.mark.slow
def test_conditioning2_normalization_and_figure6_facts(conditioning2):
    """Eq. (2) and appendix I, fact 1: NormReLU has E phi = 0 and E phi^2 = 1, so the norm
    transfer passes through (1, 1) and is non-decreasing and concave on [0, 4]; the bias
    (E phi(sqrt(q) z))^2 is non-negative, 0 at q = 1 and convex on [0.7, 4] (fact 1's range
    was lost from the paper's text; below q ~ 0.65 the bias is not convex); the normalized dual
    map fixes 1 and is increasing."""
    q, transfer, _ = panel(conditioning2, "norm transfer", "norm_relu")
    one = np.argmin(np.abs(q - 1))
    assert transfer[one] == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.diff(transfer) >= -1e-12)
    assert np.all(np.diff(transfer, 2) <= 1e-9)
    _, bias, _ = panel(conditioning2, "bias", "norm_relu")
    assert bias[one] == pytest.approx(0.0, abs=1e-12) and np.all(bias >= 0)
    assert np.all(np.diff(bias[q >= 0.7], 2) >= -1e-9)
    rho, dual, _ = panel(conditioning2, "dual", "norm_relu")
    assert dual[-1] == pytest.approx(1.0) and np.all(np.diff(dual) > 0)


@pytest.mark.slow
def test_conditioning2_normrelu_resembles_selu(conditioning2):
    """Figure 2: NormReLU and SELU look alike: their normalized dual maps differ by < 0.05."""
    _, a, _ = panel(conditioning2, "dual", "norm_relu")
    _, b, _ = panel(conditioning2, "dual", "selu")
    assert np.max(np.abs(a - b)) < 0.05


@pytest.mark.slow
def test_conditioning2_lemma_2_1(conditioning2):
    """Lemma 2.1: with batchnorm before, or layernorm after, each activation, normalizing the
    activation leaves the output unchanged (relative difference < 1e-10 in float64); the
    control (layernorm before the activation) differs."""
    value = {key: conditioning2.computed.compared(key).ours
             for key in ("lemma_batchnorm", "lemma_post_layernorm", "control_pre_layernorm")}
    assert value["lemma_batchnorm"] < 1e-10
    assert value["lemma_post_layernorm"] < 1e-10
    assert value["control_pre_layernorm"] > 1e-3


@pytest.mark.slow
def test_conditioning2_verdict(conditioning2):
    """The judge reads figures 2 and 6 and Lemma 2.1 with the bias convex only from q = 0.7
    on: fact 1's range was lost from the text and 0.7 was chosen after seeing the curve, so
    both ranges are reported and the verdict is "qualitatively", not "reproduced"."""
    assert conditioning2.verdict.status == "qualitatively"
    assert "convex only from q = 0.7 on: on the figure's [0, 4], not convex" in \
        conditioning2.verdict.reason
    assert "[0.7, 4], a range chosen after seeing the curve" in conditioning2.verdict.reason


# --- conditioning-figure1 ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def conditioning1(tmp_path_factory):
    from nngauge.reproduce._conditioning_figure1 import REPRODUCTION

    return run(REPRODUCTION, tmp_path_factory)


@pytest.mark.slow
def test_conditioning1_files(conditioning1):
    """The CSV has the declared columns and one row per network and epoch (epoch 0 included)."""
    from nngauge.reproduce._conditioning_figure1 import COLUMNS, NETWORKS, SETTINGS

    rows = check_files(conditioning1, COLUMNS)
    assert len(rows) == len(NETWORKS) * (SETTINGS["small"].epochs + 1)


@pytest.mark.slow
def test_conditioning1_dot_products_fall_as_error_falls(conditioning1):
    """Figure 1: for batchnorm, layernorm and NormReLU networks alike, the held-out error
    falls over training and so does the mean normalized dot product of held-out
    representations (final below initial; over the pairs of epochs whose errors differ beyond
    sampling noise, at least three in four move together)."""
    from nngauge.reproduce._conditioning_figure1 import (
        MIN_CONCORDANCE,
        MIN_PAIRS,
        NETWORKS,
        distinguishable_concordance,
    )

    n_heldout = int(conditioning1.computed.compared("n_heldout").ours)
    assert n_heldout == 449
    for name in NETWORKS:
        rows = [r for r in conditioning1.computed.rows if r[0] == name]
        errors, dots = [r[2] for r in rows], [r[3] for r in rows]
        assert errors[-1] < 0.5 * errors[0], name
        assert dots[-1] < dots[0], name
        concordance, pairs = distinguishable_concordance(errors, dots, n_heldout)
        assert pairs >= MIN_PAIRS and concordance > MIN_CONCORDANCE, (name, concordance, pairs)
        assert conditioning1.computed.compared(f"{name}_concordance").n == pairs


def test_distinguishable_concordance_counts_only_pairs_beyond_sampling_noise():
    """Pairs of epochs whose errors differ by less than twice the standard error of their
    difference do not count (here: 0.08 vs 0.09 on 450 digits, 0.55 standard errors); those that differ count with
    the sign of the dot products' move, brute force over the pairs."""
    from nngauge.reproduce._conditioning_figure1 import distinguishable_concordance

    errors, dots = [0.9, 0.2, 0.08, 0.09], [0.9, 0.4, 0.30, 0.29]
    # apart: (0.9, all three), (0.2, 0.08), (0.2, 0.09); all concordant. (0.08, 0.09): noise.
    assert distinguishable_concordance(errors, dots, 450) == (1.0, 5)
    rising = [0.3, 0.4, 0.5, 0.6]  # the dot product rises as the error falls
    assert distinguishable_concordance(errors, rising, 450) == (-1.0, 5)
    assert distinguishable_concordance([0.1, 0.1, 0.1], [0.5, 0.4, 0.3], 450)[1] == 0


def _planted_conditioning1(dots_of):
    """A computed figure 1 whose errors fall 0.9 -> 0.08 over 5 epochs with a noisy plateau,
    and the dot products ``dots_of(name)``."""
    from nngauge.reproduce._base import Comparison, Computed
    from nngauge.reproduce._conditioning_figure1 import COLUMNS, NETWORKS

    errors = (0.9, 0.2, 0.08, 0.095, 0.082)
    rows = tuple((name, epoch, error, dot) for name in NETWORKS
                 for epoch, (error, dot) in enumerate(zip(errors, dots_of(name))))
    return Computed(columns=COLUMNS, rows=rows,
                    comparison=(Comparison("held-out", 450, key="n_heldout"),))


def test_conditioning1_judge_fails_when_the_dot_products_do_not_follow_the_error():
    """The judge's negative side: one network whose dot product rises as its error falls
    gives "differs" naming it; its plateau's noise does not (a rank correlation over all
    epochs would turn on it); no distinguishable epochs is not evidence."""
    from nngauge.reproduce._conditioning_figure1 import judge

    falls = (0.9, 0.4, 0.31, 0.30, 0.32)  # the plateau's order disagrees with the error's
    assert judge(_planted_conditioning1(lambda name: falls)).status == "reproduced"
    rises = (0.3, 0.5, 0.6, 0.6, 0.7)
    verdict = judge(_planted_conditioning1(
        lambda name: rises if name == "layernorm" else falls))
    assert verdict.status == "differs" and "for layernorm:" in verdict.reason
    late = (0.9, 0.9, 0.9, 0.9, 0.3)  # final below initial, but not as the error falls
    assert judge(_planted_conditioning1(lambda name: late)).status == "differs"


@pytest.mark.slow
def test_conditioning1_verdict(conditioning1):
    """The judge reads figure 1 as reproduced: the dot products fall as the error falls for all
    three networks."""
    assert conditioning1.verdict.status == "reproduced"
    assert "fall as the error falls for all three networks" in conditioning1.verdict.reason
