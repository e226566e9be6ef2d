"""Which init measures predict trained accuracy, and which beat the cost baselines.

The comparison of zero-cost proxies by Abdelfattah, Mehrotra, Dudziak & Lane, "Zero-Cost
Proxies for Lightweight NAS", ICLR 2021, section 4 (Spearman rho, Kendall tau, top-10%
precision, with the number of parameters and FLOPs as baselines), run on a study's points (NLC
paper section 4: one point per architecture and seed, the test error of its best run), with
bootstrap intervals and a test of the difference between two predictors.

Per predictor P (every measure column of the study except ``<column>_after``, which is measured
after training) over the n points where P and the test error are finite:

- direction d in {+1, -1}: +1 when higher P predicts higher accuracy. From ``directions``;
  for a column it does not name, d = -sign(Spearman(P, test error)) (+1 on a zero or undefined
  rho), flagged ``direction_from_data``: a sign chosen on the same data flatters the predictor
  (its rho cannot come out negative).
- ``spearman``, ``kendall`` (tau-b): rank correlations of (d * P, accuracy = 1 - test error),
  with scipy's two-sided p-values (``scipy.stats.spearmanr`` / ``kendalltau``). Positive means
  that P ranks the networks as their accuracy does; 1 is a perfect predictor.
- ``*_low``, ``*_high``: 95% percentile bootstrap intervals: ``scipy.stats.bootstrap``
  resampling the n (P, accuracy) pairs together (paired), ``n_resamples`` times, from
  ``numpy.random.default_rng(seed)``, ``seed`` the int ``generator`` (or one draw from a
  torch.Generator). Resamples on which a correlation is undefined (a constant
  resample) are left out of the percentiles.
- ``top_precision``: |T_P & T_acc| / k with k = ceil(top_fraction * n), T_P the k points of
  largest d * P and T_acc the k points of lowest test error. Points tied at the k-th value
  share the places left equally: the expected precision under random tie-breaking.

Pairwise test (paired bootstrap): for predictors A and B over the m points where both and the
test error are finite, D = rho_A - rho_B. Each resample draws m points with replacement and
computes both rhos on the same points: scipy draws the resampled indices from the seed and m
alone, so every predictor's resamples on those m points are the same ones. The two-sided
p-value is p = min(1, 2 * min(P*(D* <= 0), P*(D* >= 0))) over the resamples: the smallest
level at which the equal-tailed percentile interval of D excludes 0. A beats B when D > 0 and
p < ``alpha`` (0.05). The p-value is resolved to 1/n_resamples: p = 0 means that no resample
put D on the other side of zero (p < 2/n_resamples). The pair (B, A) mirrors (A, B).

Example:
    >>> from nngauge.studies._summarize import StudySummary
    >>> errors, widths = [0.4, 0.3, 0.35, 0.1, 0.2], [8, 16, 12, 64, 32]
    >>> points = tuple({"test_error": e, "n_params": w} for e, w in zip(errors, widths))
    >>> summary = StudySummary("id", "toy", ("n_params",), points, (), None, 0.1)
    >>> table = predictor_table(summary, n_resamples=99)
    >>> row = table["n_params"]
    >>> round(row.spearman, 3), row.direction, row.direction_from_data, row.baseline
    (1.0, 1, False, True)
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from nngauge._constraints import SEED_OR_GENERATOR, constrained
from nngauge._random import seed_of
from nngauge._results import Result, plain, row_named
from nngauge._vocabulary import renamed
from nngauge.errors import invalid, require_counts, require_extra
from nngauge.studies._spec import AFTER
from nngauge.studies._summarize import _write_csv

ALPHA = 0.05
"""Level of the pairwise test behind ``a_beats_b``."""

CONFIDENCE = 0.95
"""Level of the bootstrap intervals."""

MIN_POINTS = 3
"""Fewest points on which a predictor's correlations are computed (NaN below)."""

BASELINES = ("n_params", "flops")
"""The cost baselines of Abdelfattah et al. (ICLR 2021), section 4."""

STUDY_DIRECTIONS = {"nlc": -1, "output_bias": -1, "jacobian_norm": -1, "rho_max": -1,
                    "rho_max_before_pooling": -1, "kernel_condition_number": -1}
"""The directions of the study's own measure columns (:data:`~nngauge.studies.MEASURES`), as
those of their forms in :data:`nngauge.proxies.DIRECTIONS` (nlc_score, output_bias,
jacobian_growth, rho_max, kernel_condition); rho_max before global pooling as rho_max."""


def known_directions() -> dict[str, int]:
    """Column -> direction for every predictor whose direction is known in advance: the
    proxies' (:data:`nngauge.proxies.DIRECTIONS`) and the study's own measures'."""
    from nngauge.proxies import DIRECTIONS

    return {**DIRECTIONS, **STUDY_DIRECTIONS}


@dataclass(frozen=True)
class PredictorRow:
    """One predictor's rank correlations with accuracy (see the module docstring)."""

    name: str
    n: int
    direction: int
    direction_from_data: bool
    baseline: bool
    spearman: float
    spearman_p: float
    spearman_low: float
    spearman_high: float
    kendall: float
    kendall_p: float
    kendall_low: float
    kendall_high: float
    top_precision: float


@dataclass(frozen=True)
class PredictorPair:
    """``difference`` = rho_a - rho_b over the ``n`` points where both are finite, its 95%
    percentile bootstrap interval (``low``, ``high``), the paired-bootstrap two-sided p-value,
    and whether a's rho is significantly above b's (``difference > 0`` and ``p < alpha``)."""

    a: str
    b: str
    n: int
    difference: float
    low: float
    high: float
    p: float
    a_beats_b: bool


@dataclass(frozen=True)
class PredictorTable(Result):
    """Predictors of accuracy in a study, best first, and their pairwise comparisons.

    Attributes:
        study_id, name: the study.
        rows: one :class:`PredictorRow` per predictor, by Spearman rho descending (NaN last).
        pairwise: one :class:`PredictorPair` per ordered pair of predictors.
        top_fraction, n_resamples, seed, alpha: the settings used.
    """

    study_id: str
    name: str
    rows: tuple[PredictorRow, ...]
    pairwise: tuple[PredictorPair, ...]
    top_fraction: float
    n_resamples: int
    seed: int
    alpha: float

    def __getitem__(self, name: str) -> PredictorRow:
        return row_named(self.rows, name, "a predictor of this study")

    def pair(self, a: str, b: str) -> PredictorPair:
        """The comparison of predictor ``a`` with predictor ``b``."""
        for pair in self.pairwise:
            if (pair.a, pair.b) == (a, b):
                return pair
        raise KeyError(f"({a!r}, {b!r}) is not a pair of predictors of this study; known: "
                       f"{[row.name for row in self.rows]}")

    def beats(self, a: str, b: str) -> bool:
        """Whether ``a``'s rho is significantly above ``b``'s (at ``alpha``)."""
        return self.pair(a, b).a_beats_b

    def to_frame(self):
        """The rows as a pandas DataFrame. Needs pandas."""
        pd = require_extra("pandas", "report", "PredictorTable.to_frame()")
        return pd.DataFrame([plain(row) for row in self.rows])

    def plot(self, ax=None):
        """Horizontal bars of each predictor's Spearman rho with accuracy (direction applied),
        best on top, with its bootstrap interval; baselines grey and hatched, a ``*`` after the
        names whose direction was taken from the data."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        rows = [row for row in self.rows if math.isfinite(row.spearman)]
        y = np.arange(len(rows))[::-1]
        rho = np.array([row.spearman for row in rows])
        low = np.array([row.spearman_low for row in rows])
        high = np.array([row.spearman_high for row in rows])
        known = np.isfinite(low) & np.isfinite(high)
        xerr = np.where(known, np.clip([rho - low, high - rho], 0.0, None), 0.0)
        bars = ax.barh(y, rho, xerr=xerr, capsize=3, edgecolor="dimgrey",
                       color=["lightgrey" if row.baseline else "tab:blue" for row in rows])
        for bar, row in zip(bars, rows):
            if row.baseline:
                bar.set_hatch("//")
        ax.set_yticks(y, [row.name + (" *" if row.direction_from_data else "") for row in rows])
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel(f"Spearman rho with accuracy ({CONFIDENCE:.0%} bootstrap interval)")
        ax.set_title(f"{self.name}: predictors of accuracy\n(grey, hatched: baselines; "
                     "*: direction from the data)", fontsize=9)
        return ax

    def save(self, out: Union[str, Path]) -> list[Path]:
        """Write ``predictors.csv``, ``pairwise.csv`` and ``predictors.png`` into the folder
        ``out``; returns the paths written."""
        require_extra("matplotlib", "report", "the predictor figure")
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "predictors.csv", out / "pairwise.csv", out / "predictors.png"]
        _write_csv(written[0], list(PredictorRow.__dataclass_fields__),
                   [row.__dict__ for row in self.rows])
        _write_csv(written[1], list(PredictorPair.__dataclass_fields__),
                   [pair.__dict__ for pair in self.pairwise])
        fig, ax = plt.subplots(figsize=(6, 1.5 + 0.3 * len(self.rows)))
        try:
            self.plot(ax)
            fig.tight_layout()
            fig.savefig(written[2], dpi=120)
        finally:
            plt.close(fig)
        return written


@renamed(seed="generator")
@constrained(generator=SEED_OR_GENERATOR)
def predictor_table(summary, *, directions: Optional[Mapping[str, int]] = None,
                    top_fraction: float = 0.1, n_resamples: int = 999, generator: Any = 0,
                    baselines: Sequence[str] = BASELINES) -> PredictorTable:
    """Rank every init measure of a study as a predictor of accuracy (module docstring).

    Args:
        summary: a :class:`~nngauge.studies.StudySummary` (``summarize(db)``).
        directions: column -> +1 (higher predicts higher accuracy) or -1; default
            :func:`known_directions`; columns not named get their sign from the data
            (flagged).
        top_fraction: fraction of points defining the top-fraction precision.
        n_resamples: bootstrap resamples (intervals and pairwise test).
        generator: an int seed of the bootstrap's ``numpy.random.Generator`` (default 0), or
            a torch.Generator from which one seed is drawn.
        baselines: columns flagged as baselines (those present in the study).

    Returns:
        :class:`PredictorTable`.
    """
    directions = known_directions() if directions is None else dict(directions)
    baselines = (baselines,) if isinstance(baselines, str) else tuple(baselines)
    _check(directions, top_fraction, n_resamples)
    seed = seed_of(generator)
    accuracy = 1.0 - np.array([_number(p.get("test_error")) for p in summary.points])
    names = [c for c in summary.columns if not c.endswith(AFTER)]
    raw = {c: np.array([_number(p.get(c)) for p in summary.points]) for c in names}
    scored, rows = {}, []
    resamples = _Resamples(int(n_resamples), int(seed))
    for name in names:
        mask = np.isfinite(raw[name]) & np.isfinite(accuracy)
        direction, from_data = _direction(raw[name][mask], accuracy[mask], directions.get(name))
        scored[name] = direction * raw[name]
        rows.append(_row(name, scored[name], accuracy, mask, resamples, direction=direction,
                         direction_from_data=from_data, baseline=name in baselines,
                         top_fraction=top_fraction))
    rows.sort(key=lambda row: -row.spearman if math.isfinite(row.spearman) else math.inf)
    pairwise = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairwise.extend(_pairs(a, b, scored, accuracy, resamples))
    return PredictorTable(summary.study_id, summary.name, tuple(rows), tuple(pairwise),
                          float(top_fraction), int(n_resamples), int(seed), ALPHA)


def _check(directions: dict, top_fraction, n_resamples) -> None:
    where = "predictor_table()"
    wrong = {k: v for k, v in directions.items() if v not in (1, -1) or isinstance(v, bool)}
    if wrong:
        raise invalid(where, "directions of +1 or -1", f"{wrong}",
                      "give +1 where higher values predict higher accuracy, -1 where lower do")
    if not (isinstance(top_fraction, (int, float)) and 0 < top_fraction <= 1):
        raise invalid(where, "top_fraction in (0, 1]", f"{top_fraction!r}", "pass e.g. 0.1")
    require_counts(where, n_resamples=n_resamples)


def _number(value) -> float:
    return math.nan if value is None or isinstance(value, bool) else float(value)


def _direction(x: np.ndarray, accuracy: np.ndarray, given: Optional[int]) -> tuple[int, bool]:
    """(direction, taken from the data): ``given``, or -sign(Spearman(x, test error)), which
    is sign(Spearman(x, accuracy))."""
    if given is not None:
        return int(given), False
    rho = _spearman(x, accuracy) if len(x) >= MIN_POINTS else math.nan
    return (-1 if rho < 0 else 1), True


def _row(name: str, score: np.ndarray, accuracy: np.ndarray, mask: np.ndarray, resamples,
         *, top_fraction: float, **flags) -> PredictorRow:
    from scipy import stats

    x, y = score[mask], accuracy[mask]
    n = len(x)
    if n < MIN_POINTS:
        return PredictorRow(name, n, **flags, **dict.fromkeys(_STATISTICS, math.nan))
    with _quiet():
        rho, rho_p = stats.spearmanr(x, y)
    tau, tau_p = stats.kendalltau(x, y)
    rho_low, rho_high = _interval(resamples.spearman(name, score, accuracy, mask))
    tau_low, tau_high = _interval(resamples.kendall(x, y))
    k = max(1, math.ceil(top_fraction * n))
    precision = float(np.sum(_top_weights(x, k) * _top_weights(y, k)) / k)
    return PredictorRow(name, n, **flags, spearman=float(rho), spearman_p=float(rho_p),
                        spearman_low=rho_low, spearman_high=rho_high, kendall=float(tau),
                        kendall_p=float(tau_p), kendall_low=tau_low, kendall_high=tau_high,
                        top_precision=precision)


_STATISTICS = ("spearman", "spearman_p", "spearman_low", "spearman_high", "kendall",
               "kendall_p", "kendall_low", "kendall_high", "top_precision")


def _pairs(a: str, b: str, scored: dict, accuracy: np.ndarray,
           resamples) -> list[PredictorPair]:
    """(a, b) and its mirror (b, a) over the points where both and the test error are finite."""
    mask = np.isfinite(scored[a]) & np.isfinite(scored[b]) & np.isfinite(accuracy)
    m = int(mask.sum())
    if m < MIN_POINTS:
        return [PredictorPair(a, b, m, *[math.nan] * 4, False),
                PredictorPair(b, a, m, *[math.nan] * 4, False)]
    difference = float(_spearman(scored[a][mask], accuracy[mask])
                       - _spearman(scored[b][mask], accuracy[mask]))
    d = (resamples.spearman(a, scored[a], accuracy, mask)
         - resamples.spearman(b, scored[b], accuracy, mask))
    d = d[np.isfinite(d)]
    p = float(min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0)))) if d.size else math.nan
    low, high = _interval(d)
    return [PredictorPair(a, b, m, difference, low, high, p, bool(difference > 0 and p < ALPHA)),
            PredictorPair(b, a, m, -difference, -high, -low, p,
                          bool(-difference > 0 and p < ALPHA))]


class _Resamples:
    """Bootstrap distributions from ``scipy.stats.bootstrap`` (paired, a fresh
    ``default_rng(seed)`` each time, so that the same number of points gets the same resampled
    indices); Spearman distributions are kept per (predictor, points) for the pairwise test."""

    def __init__(self, n_resamples: int, seed: int) -> None:
        self.n_resamples, self.seed = n_resamples, seed
        self.cache: dict[tuple[str, bytes], np.ndarray] = {}

    def spearman(self, name: str, score: np.ndarray, accuracy: np.ndarray,
                 mask: np.ndarray) -> np.ndarray:
        """Spearman rho of (score, accuracy) on each resample of the points in ``mask``."""
        key = (name, mask.tobytes())
        if key not in self.cache:
            self.cache[key] = self._distribution((score[mask], accuracy[mask]), _spearman, True)
        return self.cache[key]

    def kendall(self, x: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
        """Kendall tau of (x, accuracy) on each resample: one scipy call per resample, as
        ``kendalltau`` is O(n log n) where a batched tau would take O(n^2) memory."""
        from scipy import stats

        return self._distribution((x, accuracy), lambda u, v: stats.kendalltau(u, v)[0], False)

    def _distribution(self, data, statistic, vectorized: bool) -> np.ndarray:
        from scipy import stats

        with _quiet():
            result = stats.bootstrap(data, statistic, n_resamples=self.n_resamples,
                                     paired=True, vectorized=vectorized, method="percentile",
                                     confidence_level=CONFIDENCE,
                                     rng=np.random.default_rng(self.seed))
        return np.asarray(result.bootstrap_distribution, dtype=float)


def _spearman(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho along ``axis`` (Pearson correlation of average ranks); NaN where x or y
    is constant."""
    from scipy import stats

    rx, ry = stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis) / np.sqrt((rx * rx).sum(axis) * (ry * ry).sum(axis))


def _interval(distribution: np.ndarray) -> tuple[float, float]:
    """The equal-tailed percentile interval of the finite values of ``distribution``."""
    finite = distribution[np.isfinite(distribution)]
    if not finite.size:
        return math.nan, math.nan
    tail = 50 * (1 - CONFIDENCE)
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def _top_weights(score: np.ndarray, k: int) -> np.ndarray:
    """P(point in the k of largest score) under random tie-breaking: 1 above the k-th largest
    value, the places left shared by the points tied at it, 0 below."""
    kth = np.sort(score)[-k]
    above, tied = score > kth, score == kth
    return np.where(above, 1.0, np.where(tied, (k - above.sum()) / tied.sum(), 0.0))


@contextmanager
def _quiet():
    """Silence scipy's warnings about constant inputs (their correlations are NaN here)."""
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        yield
