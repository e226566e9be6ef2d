"""``predictors``: nngauge's predictors against the zero-cost NAS proxies on one benchmark.

The NLC paper's headline (Philipp & Carbonell, section 4, figure 2) is that a measure taken at
initialization predicts the test error after training. Zero-cost proxies claim the same for
neural architecture search (compared by Abdelfattah et al., "Zero-Cost Proxies for
Lightweight NAS", ICLR 2021). This benchmark puts them on the same architectures: a study
(:mod:`nngauge.studies`) on waveform-noise samples architectures with the NLC paper's sampler
(appendix C), measures every predictor at initialization on the training set, trains each
architecture with E.2's protocol and ranks the predictors with
:func:`nngauge.studies.predictor_table` (Spearman and Kendall of the direction-signed predictor
with accuracy, 95% bootstrap intervals, top-10% precision, paired-bootstrap tests of each
predictor against the parameter count and FLOPs).

Predictors: the zero-cost proxies (synflow, snip, grasp, grad_norm, fisher, jacob_cov, naswot,
swap, TE-NAS's NTK condition number and region count; the newer ZiCo, MeCo, MeCo_opt and
Zen-score), the cost baselines (n_params, flops), and
nngauge's (NLC and output bias, the NLC rule with the bias flag, Jacobian growth, rho_max,
kernel conditioning, trajectory growth, region density). Three combinations, each the mean of
direction-signed ranks (the sum of ranks TE-NAS uses, section 3.3): ``te_nas_combined`` (its
condition number and region count), ``vote`` (synflow, jacob_cov and naswot: Abdelfattah et
al.'s three-proxy vote, section 5, as a rank average) and ``nlc_rule+skip`` (the NLC rule and
skip connections, section 4 and B.3 of the NLC paper). A predictor undefined on an architecture
(naswot and swap without piecewise-linear units, region_density of a smooth network) is left
out there: each row states its n. The study computes nlc_rule from the NLC and output bias it
records (one NLC per network).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import (
    Comparison,
    Computed,
    Reproduction,
    Verdict,
    run_reproduction_study,
)
from nngauge.studies._spec import PROXIES

MEASURES = ("nlc", "correlations", *PROXIES)
"""The study's measures: every predictor (nlc gives the NLC and output bias, correlations
rho_max and rho_max before global pooling)."""
COMBINATIONS = {
    "te_nas_combined": ("te_nas", "te_nas_regions"),
    "vote": ("synflow", "jacob_cov", "naswot"),
    "nlc_rule+skip": ("nlc_rule", "skip"),
}
"""Combined predictors: name -> the columns whose direction-signed ranks are averaged."""
ZERO_COST = ("synflow", "snip", "grasp", "grad_norm", "fisher", "jacob_cov", "naswot", "swap",
             "te_nas", "te_nas_regions", "te_nas_combined", "vote", "zico", "meco", "meco_opt",
             "zen_score")
"""The zero-cost proxies and their published combinations (not nngauge's predictors)."""
OURS = ("nlc_rule+skip", "nlc_rule")
"""nngauge's candidate rules: the NLC paper's (NLC in its ideal range, no high bias), alone
and with skip connections."""
PUBLISHED = {"synflow": 0.74, "jacob_cov": 0.73, "snip": 0.60, "grad_norm": 0.59,
             "grasp": 0.51, "fisher": 0.36, "vote": 0.82}
"""Spearman rho with final accuracy on NAS-Bench-201, CIFAR-10, all 15,625 cells (Abdelfattah
et al., ICLR 2021): another benchmark, printed beside ours for scale."""
COLUMNS = ("predictor", "n", "direction", "baseline", "spearman", "spearman_low",
           "spearman_high", "spearman_p", "kendall", "kendall_low", "kendall_high",
           "top_precision", "beats_n_params", "beats_flops")

SETTINGS = {
    "mlp": {
        "small": ({
            "data": {"source": "waveform", "n": 500, "split": [0.6, 0.2, 0.2]},
            "architectures": {"sample": 100, "overrides": {"width": 16}},
            "measures": {"names": list(MEASURES), "batch_size": 100},
            "training": {"lrs": [0.03, 0.3], "batch_size": 50, "max_epochs": 3},
        }, 2),
        "paper": ({
            "dtype": "float64",
            "data": {"source": "waveform", "n": 5000, "split": [0.6, 0.2, 0.2]},
            "architectures": {"sample": 250},
            "measures": {"names": list(MEASURES), "batch_size": 250},
            "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40, "lr_scale": 1e-8,
                         "batch_size": 250},
        }, 0),
    },
    "cnn": {
        "small": ({
            "data": {"source": "digits", "split": [0.6, 0.2, 0.2]},
            "architectures": {"family": "cnn", "sample": 60},
            "measures": {"names": list(MEASURES), "batch_size": 100},
            "training": {"lrs": [0.03, 0.3], "batch_size": 50, "max_epochs": 3},
        }, 2),
        "paper": ({
            "dtype": "float64",
            "data": {"source": "digits", "split": [0.6, 0.2, 0.2]},
            "architectures": {"family": "cnn", "sample": 250},
            "measures": {"names": list(MEASURES), "batch_size": 250},
            "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40, "lr_scale": 1e-8,
                         "batch_size": 250},
        }, 0),
    },
}
"""Per family (``mlp``: the NLC paper's sampler on waveform-noise; ``cnn``:
:func:`nngauge.nn.sample_cnn` on digits images) and scale: (the study spec without name and
seed, worker processes; 0: every CPU)."""


def compute(family: str, scale: str, generator: torch.Generator) -> Computed:
    """The benchmark of one architecture family (see the module docstring)."""
    from nngauge.studies import parse_spec, predictor_table, summarize
    from nngauge.studies._predictors import known_directions

    raw, workers = SETTINGS[family][scale]
    seed = seed_of(generator)
    spec = parse_spec({"name": f"predictors-{family}-{scale}", "seed": seed, **raw})
    with tempfile.TemporaryDirectory(prefix="predictors-") as folder:
        url = f"sqlite:///{Path(folder) / 'study.db'}"
        failed = run_reproduction_study(spec, url, workers).failed
        summary = summarize(url)
    directions = known_directions()
    summary = with_combinations(summary, directions)
    directions.update({name: 1 for name in COMBINATIONS})
    table = predictor_table(summary, directions=directions, generator=seed)
    rows = tuple((r.name, r.n, r.direction, r.baseline, r.spearman, r.spearman_low,
                  r.spearman_high, r.spearman_p, r.kendall, r.kendall_low, r.kendall_high,
                  r.top_precision, _beats(table, r.name, "n_params"),
                  _beats(table, r.name, "flops")) for r in table.rows)
    comparison = tuple(
        Comparison(f"Spearman rho({r.name}, accuracy)", r.spearman, PUBLISHED.get(r.name),
                   f"[{r.spearman_low:.2f}, {r.spearman_high:.2f}], n = {r.n}, top-10% "
                   f"precision {r.top_precision:.2f}" + (
                       "; paper: NAS-Bench-201 CIFAR-10" if r.name in PUBLISHED else ""),
                   key=f"rho_{r.name}", statistic="spearman")
        for r in table.rows)
    return Computed(columns=COLUMNS, rows=rows, comparison=(
        *comparison,
        Comparison("architectures", float(len(summary.points)), None,
                   f"{len(failed)} failed units", key="architectures"),
    ), extra={"table": table})


def with_combinations(summary, directions: dict):
    """``summary`` with the :data:`COMBINATIONS` as columns: the mean of the columns'
    direction-signed ranks (average ranks for ties; the skip flag counts +1), over the points
    where every column is finite (NaN elsewhere)."""
    from scipy.stats import rankdata

    points = [dict(p) for p in summary.points]
    for name, parts in COMBINATIONS.items():
        signed = np.array([[directions.get(c, 1) * float(p.get(c, math.nan)) for c in parts]
                           for p in points])
        usable = np.isfinite(signed).all(axis=1)
        combined = np.full(len(points), math.nan)
        if usable.sum() >= 2:
            combined[usable] = np.mean([rankdata(column) for column in signed[usable].T],
                                       axis=0)
        for p, value in zip(points, combined):
            p[name] = float(value)
    return dataclasses.replace(summary, points=tuple(points),
                               columns=(*summary.columns, *COMBINATIONS))


def _beats(table, name: str, baseline: str) -> bool:
    names = {r.name for r in table.rows}
    return name != baseline and baseline in names and table.beats(name, baseline)


def judge(computed: Computed) -> Verdict:
    """The NLC paper's claim through its rule (NLC in 1-3, no high bias): a significant
    positive rank correlation with accuracy that beats the parameter count (reproduced);
    positive but not beating it (qualitatively); else differs. The reason lists the predictors
    that beat n_params and, for each of nngauge's rules, whether it beats every zero-cost proxy
    (combinations included) significantly."""
    table = computed.extra["table"]
    names = {r.name for r in table.rows}
    rule = table["nlc_rule"]
    beating = [r.name for r in table.rows if _beats(table, r.name, "n_params")]
    proxies = [p for p in ZERO_COST if p in names]
    verdicts = []
    for name in OURS:
        unbeaten = [p for p in proxies if not table.beats(name, p)]
        verdicts.append(f"{name} (rho {table[name].spearman:.2f}) beats "
                        + ("every zero-cost proxy significantly" if not unbeaten else
                           f"every zero-cost proxy but {', '.join(unbeaten)}"))
    reason = (f"nlc_rule: rho {rule.spearman:.2f} [{rule.spearman_low:.2f}, "
              f"{rule.spearman_high:.2f}] (p = {rule.spearman_p:.2g}, n = {rule.n}); "
              f"n_params: rho {table['n_params'].spearman:.2f}; beat n_params significantly: "
              f"{', '.join(beating) or 'none'}; " + "; ".join(verdicts))
    if rule.spearman > 0 and rule.spearman_p < 0.05 and "nlc_rule" in beating:
        return Verdict("reproduced", reason + ".")
    if rule.spearman > 0:
        return Verdict("qualitatively", reason + ": the NLC rule predicts accuracy, not "
                       "significantly better than the parameter count.")
    return Verdict("differs", reason + ".")


def plot(computed: Computed, figure) -> None:
    computed.extra["table"].plot(figure.subplots())


CLAIM = ("A measure taken at initialization predicts the test error after training (NLC paper, "
         "section 4); zero-cost proxies claim the same, and the parameter count is a baseline "
         "many of them fail to beat (Abdelfattah et al., ICLR 2021).")
PUBLISHED_ELSEWHERE = ("the published proxy correlations are on NAS-Bench-201 (CIFAR-10 cells), "
                       "not on these networks")

REPRODUCTION = Reproduction(
    name="predictors",
    paper=cite("nlc") + "; " + cite("zero-cost"),
    target="section 4's claim against the zero-cost proxies",
    description="every predictor at initialization (nngauge's and the zero-cost proxies) "
                "ranked by its rank correlation with accuracy after training, over sampled "
                "fully-connected architectures on waveform-noise, against n_params and FLOPs",
    differences={
        "small": (
            "100 sampled architectures of width 16 on 500 waveform points (300/100/100), "
            "2 starting rates (0.03, 0.3), at most 3 epochs per run, float32",
            PUBLISHED_ELSEWHERE,
        ),
        "paper": (
            "250 architectures of the sampler's width with E.2's full protocol (40 rates, "
            "float64): 10,000 training runs, hence --ray ADDRESS for a cluster",
            PUBLISHED_ELSEWHERE,
        ),
    },
    small_runtime="~4 min",
    compute=functools.partial(compute, "mlp"),
    plot=plot,
    claim=CLAIM,
    judge=judge,
    n_seeds=3,
)
