"""``nlc-figure2``: NLC at initialization vs test error over sampled architectures (NLC paper,
figure 2, waveform-noise panel; appendix E.2).

A study (:mod:`nngauge.studies`) on waveform-noise: architectures drawn by the paper's sampler
(:func:`nngauge.nn.sample_architecture`, appendix C), each measured at initialization (NLC and
output bias, :func:`nngauge.nlc`) and trained with :func:`nngauge.training.fit` (E.2's protocol)
from every starting learning rate of a grid; the trained network is the run of lowest
validation error, and its test error is plotted against the initial NLC. Red points: high
output bias (output bias > 1000, the paper's flag); blue: skip connections. Spearman's rho and
Kendall's tau between NLC and test error come from :func:`nngauge.studies.summarize`.

The study's SQLite database lives in a temporary directory that is deleted after the run (the
reproduction writes only ``nlc-figure2.csv`` and ``nlc-figure2.png``).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from nngauge._citations import cite
from nngauge.errors import NNGaugeError
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, seed_from

IDEAL_RANGE = (1.0, 3.0)
"""The paper's observed ideal NLC range, 1 <~ NLC <~ 3 (section 4), drawn on the plot."""
COLUMNS = ("arch_index", "architecture", "nlc", "output_bias", "high_bias", "skip",
           "best_lr", "best_val_error", "test_error")


@dataclass(frozen=True)
class Settings:
    spec: dict
    workers: int


SETTINGS = {
    "small": Settings(spec={
        "data": {"source": "waveform", "n": 500, "split": [0.6, 0.2, 0.2]},
        "architectures": {"sample": 64, "overrides": {"width": 16}},
        "measures": {"names": ["nlc"], "batch_size": 100},
        "training": {"lrs": [0.03, 0.3], "batch_size": 50, "max_epochs": 3},
    }, workers=2),
    "paper": Settings(spec={  # appendix D (waveform: 5000 points, 3000/1000/1000) and E.2
        "dtype": "float64",
        "data": {"source": "waveform", "n": 5000, "split": [0.6, 0.2, 0.2]},
        "architectures": {"sample": 250},
        "measures": {"names": ["nlc"], "batch_size": 250},
        "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40, "lr_scale": 1e-8,
                     "batch_size": 250},
    }, workers=0),  # 0: every CPU
}


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.studies import parse_spec, run_study, summarize

    settings = SETTINGS[scale]
    spec = parse_spec({"name": f"nlc-figure2-{scale}", "seed": seed_from(generator),
                       **settings.spec})
    with tempfile.TemporaryDirectory(prefix="nlc-figure2-") as folder:
        url = f"sqlite:///{Path(folder) / 'study.db'}"
        run = run_study(spec, url, workers=settings.workers or None)
        undefined = undefined_at_initialization(run.failed)
        summary = summarize(url)
        names = _architecture_names(url, spec.study_id)
    rows = tuple(
        (p["arch_index"], names[p["arch_index"]], p.get("nlc", math.nan),
         p.get("output_bias", math.nan), bool(p["high_bias"]), bool(p["skip"]), p["best_lr"],
         p["best_val_error"], p["test_error"])
        for p in summary.points)
    nlc_corr = next(c for c in summary.correlations if c.measure == "nlc")
    low, high = summary.ideal_nlc_range or (math.nan, math.nan)
    comparison = (
        Comparison("Spearman rho(NLC, test error)", nlc_corr.spearman, None,
                   f"p = {nlc_corr.spearman_p:.3g}, n = {nlc_corr.n}"),
        Comparison("Kendall tau(NLC, test error)", nlc_corr.kendall, None,
                   f"p = {nlc_corr.kendall_p:.3g}"),
        Comparison("lowest NLC of the best tenth", low, IDEAL_RANGE[0],
                   "paper: ideal range 1 <~ NLC <~ 3 (observed)"),
        Comparison("highest NLC of the best tenth", high, IDEAL_RANGE[1], ""),
        Comparison("architectures with high output bias", float(sum(r[4] for r in rows)), None,
                   "output bias > 1000"),
        Comparison("architectures with skip connections", float(sum(r[5] for r in rows)), None,
                   ""),
        Comparison("architectures with a constant output at initialization", float(undefined),
                   None, "NLC undefined (no output variance): left out of the correlations"),
        *_more_statistics(rows, generator),
    )
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison)


def _more_statistics(rows, generator: torch.Generator) -> list[Comparison]:
    """Spearman's 95% bootstrap interval (paired resampling of architectures), Spearman without
    the high-bias architectures (the paper's red points, which fail whatever their NLC), and
    the skip-connection claim of section 4 / B.3: lower NLC with skip connections, and lower
    test error at a given NLC (mean residual of a fit of test error on log NLC)."""
    import numpy as np
    from scipy import stats

    points = [r for r in rows if _positive(r[2]) and _finite(r[8])]
    nlc = np.array([r[2] for r in points])
    error = np.array([r[8] for r in points])
    spearman = lambda a, b: stats.spearmanr(a, b)[0]  # noqa: E731
    interval = stats.bootstrap((nlc, error), spearman, paired=True, vectorized=False,
                               n_resamples=999, method="percentile",
                               random_state=np.random.default_rng(seed_from(generator)))
    low, high = interval.confidence_interval
    clean = [i for i, r in enumerate(points) if not r[4]]
    rho, p = stats.spearmanr(nlc[clean], error[clean])
    skip = np.array([bool(r[5]) for r in points])
    fit = np.polyfit(np.log(nlc[clean]), error[clean], 1)
    residual = error - np.polyval(fit, np.log(nlc))
    no_bias = ~np.array([bool(r[4]) for r in points])
    return [
        Comparison("Spearman rho, 95% bootstrap interval low", float(low), None,
                   "999 paired resamples of the architectures"),
        Comparison("Spearman rho, 95% bootstrap interval high", float(high), None, ""),
        Comparison("Spearman rho without high output bias", float(rho), None,
                   f"p = {p:.3g}, n = {len(clean)}"),
        Comparison("median NLC, with / without skip connections",
                   float(np.median(nlc[skip]) / np.median(nlc[~skip])), None,
                   f"{np.median(nlc[skip]):.3g} / {np.median(nlc[~skip]):.3g}; section 4: "
                   "skip connections lead to lower NLC (< 1)"),
        Comparison("test error at a given NLC, with - without skip connections",
                   float(residual[skip & no_bias].mean() - residual[~skip & no_bias].mean()),
                   None, "mean residual of a linear fit of test error on log NLC; B.3: lower "
                   "test error for a given NLC with skip connections (< 0)"),
    ]


CONSTANT_OUTPUT = "constant output"
"""How a measure unit fails on a network whose output does not vary over the data at
initialization (e.g. every unit of a layer dead): its NLC and output bias are undefined."""


def undefined_at_initialization(failed: dict[str, str]) -> int:
    """The number of failed study units whose network has a constant output at initialization
    (a sampled architecture can be dead: a data point, not an error); any other failure raises.

    Example:
        >>> undefined_at_initialization({"u1": "InvalidInputError: nlc() expected outputs "
        ...                              "that vary; got a constant output (std 0)."})
        1
    """
    other = sorted(reason for reason in failed.values() if CONSTANT_OUTPUT not in reason)
    if other:
        raise NNGaugeError(f"nlc-figure2 expected every study unit to finish; got "
                           f"{len(other)} failures: {other[:3]}. Fix: run the study with "
                           "`nngauge study run` to see each error.")
    return len(failed)


def _architecture_names(url: str, study_id: str) -> dict[int, str]:
    from sqlalchemy import select

    from nngauge.studies._db import architectures, open_db

    engine = open_db(url, create=False)
    try:
        with engine.connect() as conn:
            found = conn.execute(select(architectures.c.arch_index, architectures.c.config)
                                 .where(architectures.c.study_id == study_id)).all()
    finally:
        engine.dispose()
    return {index: describe(json.loads(config)) for index, config in found}


def describe(config: dict) -> str:
    """A short name of an :class:`~nngauge.nn.MLPConfig` dict.

    Example:
        >>> describe({"depth": 5, "width": 16, "activation": "tanh", "norm": "batch",
        ...           "skip": 0.5, "skip_start": "linear", "bias_std": 0.0, "scale": 1.0})
        'depth 5, width 16, tanh, batch norm, skip 0.5 (linear)'
    """
    parts = [f"depth {config['depth']}", f"width {config['width']}", config["activation"]]
    if config.get("norm"):
        parts.append(f"{config['norm']} norm")
    if config.get("skip") is not None:
        parts.append(f"skip {config['skip']:.3g} ({config['skip_start']})")
    if config.get("bias_std"):
        parts.append(f"bias std {config['bias_std']:.3g}")
    if config.get("scale", 1.0) != 1.0:
        parts.append(f"scale {config['scale']:g}")
    return ", ".join(parts)


def plot(computed: Computed, figure) -> None:
    ax = figure.subplots()
    groups = (("high output bias", "tab:red", lambda r: r["high_bias"]),
              ("skip connections", "tab:blue", lambda r: r["skip"] and not r["high_bias"]),
              ("others", "black", lambda r: not r["skip"] and not r["high_bias"]))
    rows = computed.records()
    rows = [r for r in rows if _positive(r["nlc"]) and _finite(r["test_error"])]
    for label, color, chosen in groups:
        group = [r for r in rows if chosen(r)]
        if group:
            ax.scatter([r["nlc"] for r in group], [r["test_error"] for r in group], s=16,
                       color=color, label=label)
    ax.axvspan(*IDEAL_RANGE, color="tab:green", alpha=0.15, label="paper's ideal range 1-3")
    ax.set_xscale("log")
    ax.set_xlabel("NLC at initialization")
    ax.set_ylabel("test error (best learning rate)")
    ax.set_title("waveform-noise", fontsize=9)
    ax.legend(fontsize=8)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _positive(value) -> bool:
    return _finite(value) and value > 0


def judge(computed: Computed) -> Verdict:
    """The paper: NLC predicts test error (figure 2, a positive rank correlation); the skip
    connections' part of the claim (section 4, B.3) is reported either way."""
    rho = computed.compared("Spearman").ours
    note = computed.compared("Spearman").note
    n = len(computed.rows)
    low = computed.compared("Spearman rho, 95% bootstrap interval low").ours
    high = computed.compared("Spearman rho, 95% bootstrap interval high").ours
    skip_nlc = computed.compared("median NLC, with / without skip").ours
    skip_error = computed.compared("test error at a given NLC").ours
    skips = (f"; skip connections: median NLC ratio {skip_nlc:.2f} (paper: < 1), test error at "
             f"a given NLC {skip_error:+.3f} (paper: < 0)")
    if rho > 0 and "p = " in note and float(note.split("p = ")[1].split(",")[0]) < 0.05:
        return Verdict("reproduced", f"Spearman rho {rho:.2f} ({note}; 95% bootstrap interval "
                       f"{low:.2f} to {high:.2f})" + skips + ".")
    if rho > 0:
        return Verdict("qualitatively", f"Spearman rho {rho:.2f} ({note}): the sign of the "
                       f"paper's relation, not significant with {n} architectures.")
    return Verdict("differs", f"Spearman rho {rho:.2f} ({note}): no positive relation between "
                   f"NLC and test error over these {n} architectures.")


REPRODUCTION = Reproduction(
    name="nlc-figure2",
    paper=cite("nlc"),
    target="Figure 2",
    description="NLC at initialization vs test error of sampled architectures trained on "
                "waveform-noise (a study: sampler, NLC, E.2 training, rank correlations)",
    differences={
        "small": (
            "64 sampled architectures of width 16 (the sampler's width gives ~1M parameters) "
            "instead of 250 per data set (750 over the paper's three data sets)",
            "500 waveform points (300/100/100) instead of 5000 (3000/1000/1000)",
            "2 starting learning rates (0.03, 0.3) and at most 3 epochs per run, instead of 40 "
            "rates from E.2's heuristic and training until the schedule ends; float32",
            "waveform-noise only: the MNIST and CIFAR10 panels and the insets are not drawn; "
            "the paper prints no correlation, so Spearman / Kendall have no paper value",
        ),
        "paper": (
            "waveform-noise only (250 architectures): the MNIST and CIFAR10 panels (the other "
            "500 of the 750) and the insets are not drawn",
            "the paper prints no correlation, so Spearman / Kendall have no paper value",
        ),
    },
    small_runtime="~30 s",
    compute=compute,
    plot=plot,
    claim=("The NLC at initialization predicts the test error after training: the best "
           "architectures have NLC between about 1 and 3, and those with a high output bias fail "
           "(figure 2)."),
    judge=judge,
)
