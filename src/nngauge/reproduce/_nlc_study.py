"""The NLC paper's architecture study on waveform-noise (appendix E.2), shared by
``nlc-figure2``, ``nlc-figure3``, ``nlc-figure4``, ``nlc-figure9`` and ``nlc-figure10`` (and
retrained with Adam by ``nlc-figure3-df``, :func:`study_points`).

A study (:mod:`nngauge.studies`) on waveform-noise: architectures drawn by the paper's sampler
(:func:`nngauge.nn.sample_architecture`, appendix C), each measured at initialization (NLC and
output bias, :func:`nngauge.nlc`) and trained with :func:`nngauge.training.fit` (E.2's
protocol) from every starting learning rate of a grid; the trained network is the run of
lowest validation error. Its NLC and output bias are measured again after training on the
training set (figures 3B-C, 9), and its largest error-preserving perturbation of the test set
(:func:`nngauge.error_preserving_perturbation`, E.3, figure 3E).

The study runs once per (scale, seed) in a process (the figures share it, e.g. under
``reproduce --all``); its SQLite database lives in a temporary directory deleted after the run.
"""

from __future__ import annotations

from typing import Optional

import functools
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nngauge._numbers import is_finite as finite  # the figure modules import it from here
from nngauge.errors import NNGaugeError
from nngauge.reproduce._base import Verdict, run_reproduction_study

_AFTER = ["nlc", "error_preserving_perturbation"]

SETTINGS = {
    "small": ({
        "data": {"source": "waveform", "n": 500, "split": [0.6, 0.2, 0.2]},
        "architectures": {"sample": 64, "overrides": {"width": 16}},
        "measures": {"names": ["nlc"], "batch_size": 100},
        "training": {"lrs": [0.03, 0.3], "batch_size": 50, "max_epochs": 3,
                     "measure_after": _AFTER},
    }, 2),
    "paper": ({  # appendix D (waveform: 5000 points, 3000/1000/1000) and E.2
        "dtype": "float64",
        "data": {"source": "waveform", "n": 5000, "split": [0.6, 0.2, 0.2]},
        "architectures": {"sample": 250},
        "measures": {"names": ["nlc"], "batch_size": 250},
        "training": {"lr_start": "auto", "lr_factor": 3.0, "n_lrs": 40, "lr_scale": 1e-8,
                     "batch_size": 250, "measure_after": _AFTER},
    }, 0),  # 0: every CPU
}
"""Per scale: (the study spec without name and seed, the number of worker processes)."""

DIFFERENCES = {
    "small": (
        "64 sampled architectures of width 16 (the sampler's width gives ~1M parameters) "
        "instead of 250 per data set (750 over the paper's three data sets)",
        "500 waveform points (300/100/100) instead of 5000 (3000/1000/1000)",
        "2 starting learning rates (0.03, 0.3) and at most 3 epochs per run, instead of 40 "
        "rates from E.2's heuristic and training until the schedule ends; float32",
        "waveform-noise only: the MNIST and CIFAR10 panels are not drawn",
    ),
    "paper": (
        "waveform-noise only (250 architectures): the MNIST and CIFAR10 panels (the other "
        "500 of the 750) are not drawn",
        "10,000 training runs: days on one CPU machine, hence --ray ADDRESS for a cluster",
    ),
}
"""What the shared study changes from the paper, per scale."""

CONSTANT_OUTPUT = "constant output"
"""How a measure unit fails on a network whose output does not vary over the data at
initialization (e.g. every unit of a layer dead): its NLC and output bias are undefined."""


@dataclass(frozen=True)
class StudyPoints:
    """The study's outcome.

    Attributes:
        summary: :class:`nngauge.studies.StudySummary` (points with measures before and
            after training, correlations with test error).
        names: architecture index -> a short description (:func:`describe`).
        undefined: sampled architectures with a constant output at initialization (left out).
        configs: architecture index -> its :class:`~nngauge.nn.MLPConfig` as a dict (depth,
            width, activation, ...).
    """

    summary: object
    names: dict
    undefined: int
    configs: dict = field(default_factory=dict)

    def points(self) -> list[dict]:
        """Copies of the summary's points, each with its ``architecture`` name."""
        return [{**p, "architecture": self.names[p["arch_index"]]} for p in self.summary.points]


@functools.lru_cache(maxsize=4)
def run(scale: str, seed: int) -> StudyPoints:
    """Run the study at ``scale`` with study seed ``seed`` (once per process: the 3 seeds of a
    statistical reproduction stay cached for the next command of the study)."""
    raw, workers = SETTINGS[scale]
    return study_points(f"nlc-study-{scale}", raw, workers, seed)


def study_points(name: str, raw: dict, workers: int, seed: int) -> StudyPoints:
    """Run the study spec ``raw`` (without name and seed) named ``name`` with study seed
    ``seed`` on ``workers`` processes (0: every CPU) in a temporary database. A spec that
    differs from :data:`SETTINGS`' only in its training (e.g. Adam) trains the same
    architectures from the same initializations (both derive from the seed and the data)."""
    from nngauge.studies import parse_spec, summarize

    spec = parse_spec({"name": name, "seed": seed, **raw})
    with tempfile.TemporaryDirectory(prefix="nlc-study-") as folder:
        url = f"sqlite:///{Path(folder) / 'study.db'}"
        result = run_reproduction_study(spec, url, workers)
        undefined = undefined_at_initialization(result.failed)
        summary = summarize(url)
        configs = _architecture_configs(url, spec.study_id)
    names = {index: describe(config) for index, config in configs.items()}
    return StudyPoints(summary, names, undefined, configs)


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
        raise NNGaugeError(f"the NLC study expected every unit to finish; got {len(other)} "
                           f"failures: {other[:3]}. Fix: run the study with `nngauge study "
                           "run` to see each error.")
    return len(failed)


def _architecture_names(url: str, study_id: str) -> dict[int, str]:
    """Architecture index -> :func:`describe` of its config, from a study's database."""
    return {index: describe(config)
            for index, config in _architecture_configs(url, study_id).items()}


def _architecture_configs(url: str, study_id: str) -> dict[int, dict]:
    from sqlalchemy import select

    from nngauge.studies._db import architectures, open_db

    engine = open_db(url, create=False)
    try:
        with engine.connect() as conn:
            found = conn.execute(select(architectures.c.arch_index, architectures.c.config)
                                 .where(architectures.c.study_id == study_id)).all()
    finally:
        engine.dispose()
    return {index: json.loads(config) for index, config in found}


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


GROUPS = (("high output bias", "tab:red", lambda r: r["high_bias"]),
          ("skip connections", "tab:blue", lambda r: r["skip"] and not r["high_bias"]),
          ("others", "black", lambda r: not r["skip"] and not r["high_bias"]))
"""The figures' colours (figure 2's caption): (label, colour, whether a record with
``high_bias`` and ``skip`` belongs), red taking precedence over blue."""


def positive(value) -> bool:
    """A finite number > 0 (plottable on a log axis)."""
    return finite(value) and value > 0


def panel_verdict(checks: dict[str, tuple[Optional[bool], str]], *,
                  strict: bool = False) -> Verdict:
    """A figure of several panels judged panel by panel: ``checks`` maps each claim to (it
    holds, or None when the data cannot speak to it (e.g. no high-bias architecture was
    sampled): "not tested"; the deciding numbers). Every claim tested and holding:
    reproduced; every tested claim holding but some not tested, or at least two holding:
    qualitatively; fewer: differs. With ``strict``, any failing claim gives differs (claims
    that stand or fall together, e.g. section 6's confounders). The reason names each claim,
    holding, failing or not tested, with its numbers: a claim without data never passes."""
    held = [panel for panel, (ok, _) in checks.items() if ok]
    failed = [panel for panel, (ok, _) in checks.items() if ok is False]
    words = {True: "holds", False: "fails", None: "not tested"}
    reason = "; ".join(f"{panel} {words[ok]}: {why}" for panel, (ok, why) in checks.items()) + "."
    if len(held) == len(checks):
        return Verdict("reproduced", reason)
    if strict and failed:
        return Verdict("differs", reason)
    return Verdict("qualitatively" if not failed or len(held) >= 2 else "differs", reason)
