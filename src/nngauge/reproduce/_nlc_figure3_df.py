"""``nlc-figure3-df``: trainability without early stopping, and the study retrained with Adam
(NLC paper, figure 3 D and F; section 4, appendices B.1 and E.2).

Philipp & Carbonell, "The Nonlinearity Coefficient - Predicting Generalization in Deep Neural
Networks" (arXiv:1806.00179), figure 3:

- D ("NLC predicts generalization, not trainability"): 50 of the 250 waveform-noise
  architectures, retrained without early stopping on the validation error (the schedule
  watches the training classification error instead) from 60 starting rates (E.2's smallest
  rate with 1e-16, factor 3); the lowest training error over the rates against the initial
  NLC. "Independently of the NLC, the vast majority of architectures achieve a zero or
  near-zero training error"; "many architectures for which the NLC correctly predicts high test
  error are nonetheless trainable."
- F: the 250 waveform-noise architectures retrained with Adam under the same protocol: "the
  results closely match those of SGD from figure 2C."

What we compute: the NLC study of :mod:`nngauge.reproduce._nlc_study` (shared with figures 2,
3, 4, 9 and 10) gives each architecture's initial NLC and SGD test error. D: a random subset of
its architectures, each rebuilt at the study's initialization
(:func:`nngauge.studies._units.build_model`; trained in a thread while the studies' workers
run, and left out if the study has no NLC for it: a constant output) and trained by
:func:`nngauge.training.lr_search` with the training set as the schedule's validation set
(so the rewinds and the kept weights are those of the lowest training error), over a
geometric grid from E.2's smallest rate. F: the same study spec with ``optimizer = "adam"``
(:func:`nngauge.reproduce._nlc_study.study_points`: the same architectures and
initializations).

Claims, each a part that can fail (strict: any failing part gives "differs"):

- D, vast majority: at least :data:`VAST` of the retrained architectures reach a training
  error <= :data:`NEAR_ZERO`, and a one-sided binomial test against half has
  p < :data:`SIGNIFICANCE`;
- D, independent of the NLC: of the architectures with an NLC above :data:`HIGH_NLC` (whose
  test error the NLC predicts to be high), at least half reach that training error, and a
  one-sided Fisher exact test does not find them reaching it less often than the others
  (p >= :data:`SIGNIFICANCE`); not tested without architectures on both sides;
- F, prediction: the initial NLC predicts Adam's test error (Spearman rho > 0,
  p < :data:`SIGNIFICANCE`);
- F, match: Adam's and SGD's test errors agree per architecture (Spearman rho > 0,
  p < :data:`SIGNIFICANCE`), and rho(NLC, test error) differs between the two by at most
  :data:`CLOSE`.
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._internal.threads import one_thread
from nngauge._random import seed_of
from nngauge.reproduce import _nlc_study
from nngauge.reproduce._base import SIGNIFICANCE, Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_figure2 import ABOUT, IDEAL_RANGE
from nngauge.reproduce._nlc_figure3 import CHANCE_ERROR
from nngauge.reproduce._nlc_study import finite, panel_verdict, positive

COLUMNS = ("arch_index", "architecture", "nlc", "high_bias", "skip", "test_error_sgd",
           "test_error_adam", "best_lr_adam", "retrained", "lowest_train_error",
           "lowest_train_error_lr", "lowest_train_error_index")

SETTINGS = {
    "small": {"retrain": {"architectures": 10, "scale": 1e-2, "factor": 3.0, "n_rates": 5,
                          "max_epochs": 30, "batch_size": 50, "stop_after": 2},
              "adam": {"lrs": [0.001, 0.01]}},
    "paper": {"retrain": {"architectures": 50, "scale": 1e-16, "factor": 3.0, "n_rates": 60,
                          "max_epochs": None, "batch_size": 250, "stop_after": None},
              "adam": {}},  # the study's own E.2 grid (lr_start "auto", 40 rates)
}
"""Per scale: D's retraining (architectures drawn from the study, E.2's smallest-rate scale,
the grid's factor and length, an epoch cap, the batch size, and ``stop_after``: the grid is
left once that many larger rates in a row did not lower the training error, None: every
rate) and F's changes to the study's training table besides ``optimizer = "adam"``."""

NEAR_ZERO = 0.05
"""A training error at most this counts as "zero or near-zero" (5 of 100 training points)."""
VAST = 0.75
""""The vast majority": at least three quarters."""
HIGH_NLC = IDEAL_RANGE[1] * ABOUT
"""An NLC above figure 2's ideal range (1 to 3) with its tolerance: the NLC predicts a high
test error."""
CLOSE = 0.2
"""Adam's rho(NLC, test error) "closely matches" SGD's within this."""

DIFFERENCES = {
    "small": (
        *_nlc_study.DIFFERENCES["small"],
        "D: 10 architectures retrained (the paper: 50), from up to 5 rates from E.2's "
        "smallest rate with 1e-2 (the paper: 60 from 1e-16; ours stop after 2 larger rates in "
        "a row that do not help), at most 30 epochs per run (the paper: until its schedule "
        "ends), float64",
        "F: Adam from 2 starting rates (0.001, 0.01) and at most 3 epochs, as the SGD study, "
        "instead of E.2's 40-rate grid with Adam's 4 warm-up epochs",
    ),
    "paper": (
        *_nlc_study.DIFFERENCES["paper"],
        "D: 50 architectures, 60 rates from E.2's smallest rate with 1e-16, float64, as the "
        "paper; F: the study's E.2 grid with Adam (smallest_lr warms Adam up 4 epochs)",
    ),
}


def adam_spec(scale: str) -> dict:
    """The shared study's spec (:data:`nngauge.reproduce._nlc_study.SETTINGS`) trained with
    Adam: only the training table changes (no measures after training)."""
    raw = copy.deepcopy(_nlc_study.SETTINGS[scale][0])
    training = {k: v for k, v in raw["training"].items() if k != "measure_after"}
    raw["training"] = {**training, "optimizer": "adam", **SETTINGS[scale]["adam"]}
    return raw


def retrain_without_early_stopping(scale: str, seed: int, indices) -> dict[int, tuple]:
    """Figure 3D's protocol for the architectures ``indices`` of the shared study: each
    rebuilt at its study initialization and trained from every rate of a geometric grid from
    E.2's smallest rate (:func:`nngauge.training.smallest_lr`, seeded: lr_search would draw its
    minibatches from torch's global generator), the schedule watching the training error;
    index -> (lowest training error, its starting rate, its grid index). One thread (small
    networks: threads only wait for each other)."""
    from nngauge.studies import parse_spec
    from nngauge.studies._units import (
        UnitTask,
        build_model,
        plan_units,
        resolve_architectures,
        study_data,
    )
    from nngauge.training import lr_search, smallest_lr

    options = SETTINGS[scale]["retrain"]
    spec = parse_spec({"name": f"nlc-study-{scale}", "seed": seed,
                       **_nlc_study.SETTINGS[scale][0]})
    architectures = {a.index: a for a in resolve_architectures(spec)}
    initial = {u.arch_index: u for u in plan_units(spec) if u.kind == "init"}
    train, _, _ = study_data(spec.data, spec.seed)
    found = {}
    with one_thread():
        for index in indices:
            model = build_model(UnitTask(spec, architectures[index], initial[index]))
            start = smallest_lr(model, train, batch_size=options["batch_size"],
                                scale=options["scale"], generator=seed)
            search = lr_search(model, train, train, start=start,
                               factor=options["factor"], n_rates=options["n_rates"], edge=0,
                               batch_size=options["batch_size"],
                               max_epochs=options["max_epochs"],
                               stop_after=options["stop_after"], dtype=torch.float64,
                               generator=seed)
            best = search.best_index
            found[index] = (float(search.best.best_val_error), search.rates[best], best)
    return found


def compute(scale: str, generator: torch.Generator) -> Computed:
    from scipy import stats

    seed = seed_of(generator)
    raw, workers = _nlc_study.SETTINGS[scale]
    order = torch.randperm(raw["architectures"]["sample"], generator=generator).tolist()
    chosen = sorted(order[:SETTINGS[scale]["retrain"]["architectures"]])
    with ThreadPoolExecutor(1) as pool:  # D trains in this process while the studies' workers run
        retraining = pool.submit(retrain_without_early_stopping, scale, seed, chosen)
        study = _nlc_study.run(scale, seed)
        adam = _nlc_study.study_points(f"nlc-study-adam-{scale}", adam_spec(scale), workers,
                                       seed)
        retrained = retraining.result()
    points = [p for p in study.points() if positive(p.get("nlc"))]  # D's rows need an NLC
    adam_by_index = {p["arch_index"]: p for p in adam.summary.points}
    rows = []
    for p in points:
        index = p["arch_index"]
        a = adam_by_index.get(index, {})
        lowest = retrained.get(index, (math.nan, math.nan, None))
        rows.append((index, p["architecture"], p["nlc"], p["high_bias"], p["skip"],
                     p["test_error"], a.get("test_error", math.nan),
                     a.get("best_lr", math.nan), index in retrained, *lowest))
    rows = tuple(rows)
    records = [dict(zip(COLUMNS, r)) for r in rows]
    moved = sum(not math.isclose(p["nlc"], adam_by_index.get(p["arch_index"], {}).get(
        "nlc", math.nan), rel_tol=1e-9) for p in points)
    same = Comparison("F: architectures whose initial NLC differs between the two studies",
                      float(moved), None, "0: Adam trains the SGD study's initializations",
                      key="f_other_initializations")
    return Computed(columns=COLUMNS, rows=rows,
                    comparison=(*_d_comparisons(records), *_f_comparisons(records, stats),
                                same))


def _d_comparisons(records: list[dict]) -> tuple[Comparison, ...]:
    from scipy import stats

    done = [r for r in records if r["retrained"] and finite(r["lowest_train_error"])]
    trains = [r["lowest_train_error"] <= NEAR_ZERO for r in done]
    k, n = sum(trains), len(trains)
    vast = stats.binomtest(k, n, 0.5, alternative="greater").pvalue if n else math.nan
    high = [t for r, t in zip(done, trains) if r["nlc"] > HIGH_NLC]
    low = [t for r, t in zip(done, trains) if r["nlc"] <= HIGH_NLC]
    if high and low:
        table = [[sum(high), len(high) - sum(high)], [sum(low), len(low) - sum(low)]]
        fisher = float(stats.fisher_exact(table, alternative="less").pvalue)
    else:
        fisher = math.nan
    rho = (stats.spearmanr([r["nlc"] for r in done], [r["lowest_train_error"] for r in done])
           if n > 2 else None)
    return (
        Comparison(f"D: fraction reaching training error <= {NEAR_ZERO:g}",
                   k / n if n else math.nan, None,
                   "one-sided binomial test against 1/2; the paper: the vast majority",
                   key="d_near_zero", statistic="binomial", p_value=float(vast), n=n),
        Comparison(f"D: fraction reaching it, NLC > {HIGH_NLC:g}",
                   sum(high) / len(high) if high else math.nan, None,
                   f"{sum(low)} of {len(low)} with NLC <= {HIGH_NLC:g}; one-sided Fisher test "
                   "of fewer; the paper: trainable independently of the NLC",
                   key="d_high_nlc", statistic="fisher", p_value=fisher, n=len(high)),
        Comparison("D: Spearman rho(NLC, lowest training error)",
                   math.nan if rho is None else float(rho.statistic), key="d_rho",
                   statistic="spearman",
                   p_value=math.nan if rho is None else float(rho.pvalue), n=n,
                   note="reported, not judged"),
    )


def _f_comparisons(records: list[dict], stats) -> tuple[Comparison, ...]:
    both = [r for r in records if finite(r["test_error_adam"]) and finite(r["test_error_sgd"])]
    nlc = [r["nlc"] for r in both]
    adam = stats.spearmanr(nlc, [r["test_error_adam"] for r in both])
    sgd = stats.spearmanr(nlc, [r["test_error_sgd"] for r in both])
    agree = stats.spearmanr([r["test_error_sgd"] for r in both],
                            [r["test_error_adam"] for r in both])
    return (
        Comparison("F: Spearman rho(NLC, test error) with Adam", float(adam.statistic),
                   key="f_rho", statistic="spearman", p_value=float(adam.pvalue), n=len(both),
                   note="the paper: closely matches SGD's (figure 2C)"),
        Comparison("F: Spearman rho(NLC, test error) with SGD", float(sgd.statistic),
                   key="f_rho_sgd", statistic="spearman", p_value=float(sgd.pvalue),
                   n=len(both), note="the same architectures, the shared study"),
        Comparison("F: Spearman rho(SGD test error, Adam test error)",
                   float(agree.statistic), key="f_agree", statistic="spearman",
                   p_value=float(agree.pvalue), n=len(both),
                   note="per architecture"),
        Comparison("F: median test error, Adam / SGD",
                   float(np.median([r["test_error_adam"] for r in both])
                         / np.median([r["test_error_sgd"] for r in both])), None,
                   f"chance {CHANCE_ERROR:.3g}", key="f_median_ratio"),
    )


def judge(computed: Computed) -> Verdict:
    """Panels D and F, two parts each (see the module docstring); strict: any failing part
    gives "differs", a part without data is "not tested", never passed."""
    near = computed.compared("d_near_zero")
    high = computed.compared("d_high_nlc")
    f_rho, f_sgd = computed.compared("f_rho"), computed.compared("f_rho_sgd")
    agree = computed.compared("f_agree")

    def significant_positive(c: Comparison) -> bool:
        return c.ours > 0 and c.significant(SIGNIFICANCE)

    untested_high = math.isnan(high.p_value)
    checks = {
        "D (vast majority trains)": (
            None if not near.n else near.ours >= VAST and near.significant(SIGNIFICANCE),
            "no architecture retrained" if not near.n else
            f"{near.ours:.0%} of {near.n} reach a training error <= {NEAR_ZERO:g} "
            f"({near.printed_statistics}; at least {VAST:.0%} required)"),
        "D (independent of the NLC)": (
            None if untested_high else high.ours >= 0.5 and not high.significant(SIGNIFICANCE),
            f"no retrained architecture on both sides of NLC {HIGH_NLC:g}" if untested_high
            else f"{high.ours:.0%} of the {high.n} with NLC > {HIGH_NLC:g} reach it "
            f"({high.printed_statistics}; at least half, and not significantly fewer than "
            "the others, required)"),
        "F (NLC predicts Adam's test error)": (
            significant_positive(f_rho),
            f"rho {f_rho.ours:.2f} ({f_rho.printed_statistics})"),
        "F (Adam matches SGD)": (
            significant_positive(agree) and abs(f_rho.ours - f_sgd.ours) <= CLOSE,
            f"rho(SGD error, Adam error) {agree.ours:.2f} ({agree.printed_statistics}); "
            f"rho(NLC, error) Adam {f_rho.ours:.2f} vs SGD {f_sgd.ours:.2f} (within "
            f"{CLOSE:g} required)"),
    }
    return panel_verdict(checks, strict=True)


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    axes = figure.subplots(1, 2)
    done = [r for r in records if r["retrained"] and finite(r["lowest_train_error"])]
    axes[0].scatter([r["nlc"] for r in done], [r["lowest_train_error"] for r in done], s=16,
                    color="tab:red", label="lowest training error")
    axes[0].axhline(NEAR_ZERO, color="gray", ls=":", lw=0.8, label=f"near zero ({NEAR_ZERO:g})")
    axes[0].axvline(HIGH_NLC, color="gray", ls="--", lw=0.8, label=f"NLC {HIGH_NLC:g}")
    axes[0].set_ylabel("lowest training error (no early stopping)", fontsize=8)
    near = computed.compared("d_near_zero")
    axes[0].set_title(f"{near.quantity} {near.ours:.2f} ({near.printed_statistics})",
                      fontsize=8)
    trained = [r for r in records if finite(r["test_error_adam"])]
    axes[1].scatter([r["nlc"] for r in trained], [r["test_error_sgd"] for r in trained], s=10,
                    color="lightgray", label="SGD (figure 2)")
    axes[1].scatter([r["nlc"] for r in trained], [r["test_error_adam"] for r in trained], s=14,
                    color="black", label="Adam")
    axes[1].axhline(CHANCE_ERROR, color="gray", ls="--", lw=0.8, label="chance")
    axes[1].set_ylabel("test error", fontsize=8)
    rho = computed.compared("f_rho")
    axes[1].set_title(f"{rho.quantity} {rho.ours:.2f} ({rho.printed_statistics})",
                      fontsize=8)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("NLC at initialization", fontsize=8)
        ax.legend(fontsize=6)


REPRODUCTION = Reproduction(
    name="nlc-figure3-df",
    paper=cite("nlc"),
    target="Figure 3 (D, F)",
    description="lowest training error without early stopping against the initial NLC "
                "(retrained architectures of the waveform-noise study), and the study "
                "retrained with Adam: NLC vs test error beside SGD's",
    differences=DIFFERENCES,
    small_runtime="~200 s",
    compute=compute,
    plot=plot,
    claim=("Independently of the NLC, the vast majority of architectures reach a zero or "
           "near-zero training error when trained without early stopping over a wide range "
           "of rates (D); retrained with Adam, the NLC predicts test error as with SGD (F)."),
    judge=judge,
    n_seeds=3,
)
