"""Analyse a study: init measures against test error (NLC paper section 4, figure 2).

One point per (architecture, initialization seed): its measures at initialization and the test
error of its best training run, the run with the lowest validation error over the learning
rates (appendix E.2: "the trained network is the run with the lowest validation error"). In a
model zoo (a ``[grid]`` study) a point is one network and seed, trained once: its test error
and measures; :func:`nngauge.studies.network_table` gives its hyperparameters and record.

For every measure column: Spearman's rho and Kendall's tau between the measure and the test
error, with their two-sided p-values (``scipy.stats.spearmanr`` / ``kendalltau``), over the
points where both are finite.

Observed ideal NLC range: the smallest and largest initial NLC among the best points, the
``ceil(top_fraction * n)`` points (at least one) of lowest test error (default top_fraction 0.1,
the best tenth). The paper reports 1 <~ NLC <~ 3 on its three data sets and notes that it found
the range only by observation, as this does.

High output bias is the paper's flag: output_bias > 1000 (figure 2's red points).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from sqlalchemy import select

from nngauge._numbers import is_finite
from nngauge._results import Result
from nngauge.errors import InvalidInputError, require_extra
from nngauge.studies._db import DEFAULT_URL, architectures, measures, open_db, studies, units
from nngauge.studies._grid import HYPERPARAMETERS
from nngauge.studies._spec import ordered_columns

POINT_FIELDS = ("arch_index", "seed", "skip", "high_bias", "best_lr", "best_lr_index",
                "best_val_error", "test_error", "train_error", "lowest_train_error",
                "lowest_train_error_lr", "lowest_train_error_index")
"""The fields of every point, before its measure columns (see :class:`StudySummary`)."""

HIGH_BIAS = 1000.0
"""NLC paper figure 2: output bias above this marks an architecture as highly biased."""


@dataclass(frozen=True)
class Correlation:
    """Rank correlation of one init measure with test error over ``n`` points."""

    measure: str
    n: int
    spearman: float
    spearman_p: float
    kendall: float
    kendall_p: float


@dataclass(frozen=True)
class StudySummary(Result):
    """Points, correlations and the observed ideal NLC range of a study.

    Attributes:
        study_id, name: the study.
        columns: the measure columns present, in :data:`MEASURES` order.
        points: one dict per (architecture, seed): arch_index, seed, skip, high_bias; the
            selected run (lowest validation error): best_lr, best_lr_index (its position in
            the rate grid), best_val_error, test_error, train_error; the run of lowest
            training error: lowest_train_error, lowest_train_error_lr, lowest_train_error_index;
            the measure columns
            (``<column>_after``: of the selected run's trained network).
        correlations: one :class:`Correlation` per measure column.
        ideal_nlc_range: (low, high) NLC of the best ``top_fraction`` points, or None without
            NLC or test errors.
        top_fraction: the fraction defining "best".
        hyperparameters: for a model zoo (a ``[grid]`` study), the hyperparameters its grid
            varies (:func:`nngauge.studies.network_table` gives every network's); else ().
    """

    study_id: str
    name: str
    columns: tuple[str, ...]
    points: tuple[dict, ...]
    correlations: tuple[Correlation, ...]
    ideal_nlc_range: Optional[tuple[float, float]]
    top_fraction: float
    hyperparameters: tuple[str, ...] = ()

    def to_frame(self):
        """The points as a pandas DataFrame. Needs pandas."""
        pd = require_extra("pandas", "report", "StudySummary.to_frame()")
        return pd.DataFrame(list(self.points))

    def plot(self, ax=None):
        """Figure 2 of the NLC paper: initial NLC (log x) against test error; red: high output
        bias, blue: skip connections, black: others; the observed ideal range shaded."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        points = [p for p in self.points
                  if is_finite(p.get("nlc")) and p["nlc"] > 0 and is_finite(p.get("test_error"))]
        groups = (("high output bias", "tab:red", lambda p: p["high_bias"]),
                  ("skip connections", "tab:blue", lambda p: p["skip"] and not p["high_bias"]),
                  ("others", "black", lambda p: not p["skip"] and not p["high_bias"]))
        for label, color, chosen in groups:
            group = [p for p in points if chosen(p)]
            if group:
                ax.scatter([p["nlc"] for p in group], [p["test_error"] for p in group], s=14,
                           color=color, label=label)
        if self.ideal_nlc_range is not None:
            ax.axvspan(*self.ideal_nlc_range, color="tab:green", alpha=0.15,
                       label="observed ideal range")
        ax.set_xscale("log")
        ax.set_xlabel("NLC at initialization")
        ax.set_ylabel("test error (best learning rate)")
        ax.set_title(f"{self.name}: NLC vs test error")
        ax.legend(fontsize=8)
        return ax

    def save(self, out: Union[str, Path]) -> list[Path]:
        """Write ``points.csv``, ``correlations.csv`` and (when there is NLC data)
        ``nlc_vs_test_error.png`` into the folder ``out``; returns the paths written."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "points.csv", out / "correlations.csv"]
        fields = [*POINT_FIELDS, *self.columns]
        _write_csv(written[0], fields, self.points)
        _write_csv(written[1], list(Correlation.__dataclass_fields__),
                   [c.__dict__ for c in self.correlations])
        if "nlc" in self.columns:
            require_extra("matplotlib", "report", "the study figure")
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(5, 4))
            try:
                self.plot(ax)
                fig.tight_layout()
                fig.savefig(out / "nlc_vs_test_error.png", dpi=120)
            finally:
                plt.close(fig)
            written.append(out / "nlc_vs_test_error.png")
        return written


def summarize(db: str = DEFAULT_URL, *, study: Optional[str] = None,
              top_fraction: float = 0.1) -> StudySummary:
    """Summarize a study stored in the database at ``db`` (see the module docstring).

    Args:
        db: SQLAlchemy URL of the results database.
        study: the study's id or name; default: the only study in the database.
        top_fraction: fraction of points (lowest test error) defining the ideal NLC range.

    Returns:
        :class:`StudySummary`.
    """
    from scipy import stats

    if not (isinstance(top_fraction, (int, float)) and 0 < top_fraction <= 1):
        raise InvalidInputError(f"summarize() expected top_fraction in (0, 1]; got "
                                f"{top_fraction!r}. Fix: pass e.g. 0.1.")
    engine = open_db(db, create=False)
    try:
        with engine.connect() as conn:
            study_id, name, spec = study_spec(conn, study, "summarize()")
            grid = spec.get("grid")
            skip = dict(conn.execute(select(architectures.c.arch_index, architectures.c.skip)
                                     .where(architectures.c.study_id == study_id)).all())
            rows = conn.execute(select(units).where(units.c.study_id == study_id)).mappings().all()
            values = conn.execute(
                select(units.c.key, units.c.arch_index, units.c.seed, measures.c.name,
                       measures.c.value)
                .join(measures, measures.c.unit_key == units.c.key)
                .where(units.c.study_id == study_id)).all()
    finally:
        engine.dispose()
    points = _points(rows, values, skip)
    columns = tuple(ordered_columns(v.name for v in values))
    correlations = []
    for column in columns:
        pairs = [(p[column], p["test_error"]) for p in points.values()
                 if is_finite(p.get(column)) and is_finite(p["test_error"])]
        x, y = zip(*pairs) if pairs else ((), ())
        if len(pairs) >= 3 and len(set(x)) > 1 and len(set(y)) > 1:  # else undefined
            rho, rho_p = stats.spearmanr(x, y)
            tau, tau_p = stats.kendalltau(x, y)
        else:
            rho = rho_p = tau = tau_p = math.nan
        correlations.append(Correlation(column, len(pairs), float(rho), float(rho_p),
                                        float(tau), float(tau_p)))
    varied = () if grid is None else tuple(n for n in HYPERPARAMETERS if len(grid[n]) > 1)
    return StudySummary(study_id, name, columns, tuple(points.values()), tuple(correlations),
                        _ideal_range(list(points.values()), top_fraction), float(top_fraction),
                        varied)


def study_spec(conn, study: Optional[str], where: str) -> tuple[str, str, dict]:
    """(id, name, spec as stored) of the one study matching ``study`` (:func:`_pick_study`)."""
    study_id, name = _pick_study(conn, study, where)
    spec = json.loads(conn.execute(select(studies.c.spec).where(
        studies.c.study_id == study_id)).scalar_one())
    return study_id, name, spec


def _pick_study(conn, study: Optional[str], where: str = "summarize()") -> tuple[str, str]:
    found = conn.execute(select(studies.c.study_id, studies.c.name)).all()
    if study is not None:
        found = [row for row in found if study in (row.study_id, row.name)]
    if len(found) != 1:
        available = [f"{row.name} ({row.study_id})" for row in
                     conn.execute(select(studies.c.study_id, studies.c.name)).all()]
        raise InvalidInputError(f"{where} expected exactly one study matching "
                                f"{study or 'any'}; got {len(found)} of {available}. Fix: "
                                "pass --study NAME_OR_ID.")
    return found[0].study_id, found[0].name


def _points(rows, values, skip) -> dict:
    """One point per (architecture, seed): its measures at initialization, the selected run
    (lowest validation error, E.2) with its rate, grid index, errors and measures after
    training, and the run of lowest training error (figures 3D, 7B, 8B)."""
    points: dict[tuple[int, int], dict] = {}
    by_unit: dict[str, dict] = {}

    def point(arch: int, seed: int) -> dict:
        return points.setdefault((arch, seed), {
            "arch_index": arch, "seed": seed, "skip": bool(skip.get(arch, False)),
            "high_bias": False, "best_lr": None, "best_lr_index": None, "best_val_error": None,
            "test_error": None, "train_error": None, "lowest_train_error": None,
            "lowest_train_error_lr": None, "lowest_train_error_index": None})

    kinds = {row["key"]: row["kind"] for row in rows}
    for key, arch, seed, name, value in values:
        value = math.nan if value is None else value
        if kinds.get(key) == "train":
            by_unit.setdefault(key, {})[name] = value
        else:
            point(arch, seed)[name] = value
    for row in (r for r in rows if r["kind"] in ("network", "builder")):  # trained once
        point(row["arch_index"], row["seed"]).update(
            best_lr=row["lr"], test_error=row["test_error"], train_error=row["train_error"],
            lowest_train_error=row["train_error"], lowest_train_error_lr=row["lr"])
    for row in sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["lr"]):
        p = point(row["arch_index"], row["seed"])
        val = row["best_val_error"] if row["best_val_error"] is not None else math.inf
        if p["best_val_error"] is None or val < p["best_val_error"]:
            p.update(best_lr=row["lr"], best_lr_index=row["lr_index"], best_val_error=val,
                     test_error=row["test_error"], train_error=row["train_error"],
                     **by_unit.get(row["key"], {}))
        train = row["train_error"] if row["train_error"] is not None else math.inf
        if p["lowest_train_error"] is None or train < p["lowest_train_error"]:
            p.update(lowest_train_error=train, lowest_train_error_lr=row["lr"],
                     lowest_train_error_index=row["lr_index"])
    for p in points.values():
        p["high_bias"] = is_finite(p.get("output_bias")) and p["output_bias"] > HIGH_BIAS
    return dict(sorted(points.items()))


def _ideal_range(points: list[dict], top_fraction: float) -> Optional[tuple[float, float]]:
    ranked = sorted((p for p in points if is_finite(p.get("nlc")) and is_finite(p["test_error"])),
                    key=lambda p: p["test_error"])
    if not ranked:
        return None
    best = ranked[:max(1, math.ceil(top_fraction * len(ranked)))]
    return (min(p["nlc"] for p in best), max(p["nlc"] for p in best))


def _write_csv(path: Path, fields: list[str], rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v
                             for k, v in row.items()})
