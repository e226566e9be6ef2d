"""The page of ``nngauge study report``: which measures predicted a study's test error.

One self-contained HTML page per study (:func:`nngauge.studies.load_table`'s table): what ran
and what failed, the predictor table scored as the field scores generalization measures
(Kendall's tau, Jiang et al.'s granulated Kendall Psi and PGDL's conditional mutual information,
each with its bootstrap interval: Jiang, Neyshabur, Mobahi, Krishnan & Bengio, "Fantastic
Generalization Measures and Where to Find Them", ICLR 2020, section 3; Jiang et al., "NeurIPS
2020 Competition: Predicting Generalization in Deep Learning", 2020), each measure against the
target as a scatter plot, the granulated view (tau within groups that differ in one
hyperparameter, per hyperparameter and measure), the best and worst networks with their
settings, and the time spent.
"""

from __future__ import annotations

import html
import math
from typing import Any, Optional, Sequence

from nngauge.errors import invalid

_STYLE = ("body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1.5rem;"
          "color:#1d232a}table{border-collapse:collapse;font-size:.8rem;margin:.5rem 0}th,td"
          "{border:1px solid #d0d7de;padding:.2rem .5rem;text-align:right}th{background:"
          "#f6f8fa}td:first-child,th:first-child{text-align:left}.small{color:#57606a;"
          "font-size:.8rem}img{max-width:100%}td.error{text-align:left;max-width:40rem}")
SHOWN = 5
"""Networks shown at each end of the best / worst table."""
CONDITIONED = 2
"""Varied hyperparameters PGDL's conditional mutual information needs (pairs of them);
with one, Jiang et al.'s conditioning on single hyperparameters is used."""


def measure_columns(table) -> list[str]:
    """The columns of ``table`` that are study measures (at initialization or ``_after``)."""
    from nngauge.studies._spec import STUDY_COLUMNS

    return [c for c in table.columns if c in STUDY_COLUMNS]


def default_target(table) -> str:
    """``test_error`` when the table has finite values of it, else ``gap``."""
    for name in ("test_error", "gap"):
        if name in table.columns and table[name].notna().any():
            return name
    raise invalid("study_page()", "a table with test_error or gap values", "neither",
                  "train the networks (the study's [training]), or pass target=")


def study_table(db: str, study: Optional[str] = None):
    """The table :func:`study_page` draws for the study in ``db``:
    :func:`nngauge.studies.load_table`'s, or, for a study of ``[architectures]`` (a row per
    unit: measures on the init units, errors on the training units), one row per architecture
    and seed with its measures and the test error of its best run
    (:func:`nngauge.studies.summarize`'s points)."""
    from nngauge.studies import load_table, summarize

    table = load_table(db, study)
    if table.attrs.get("kind") != "architectures":
        return table
    attrs = dict(table.attrs)
    points = summarize(db, study=attrs["study_id"]).to_frame()
    points.attrs.update(attrs, hyperparameters=[])
    return points


def study_page(table, *, target: Optional[str] = None,
               measures: Optional[Sequence[str]] = None, n_resamples: int = 200,
               source: str = "") -> str:
    """One self-contained HTML page (inline CSS and PNGs, every user string escaped) for the
    study in ``table`` (see the module docstring).

    Args:
        table: :func:`nngauge.studies.load_table`'s DataFrame (its ``attrs`` name the study
            and its hyperparameters).
        target: the column predicted (default :func:`default_target`).
        measures: the measure columns scored (default: every study measure in the table).
        n_resamples: bootstrap resamples of every score.
        source: where the table came from (the database URL), shown on the page.
    """
    from nngauge.studies import score_measures

    where = "study_page()"
    target = target or default_target(table)
    if target not in table.columns:
        raise invalid(where, f"target a column of the table ({', '.join(table.columns)})",
                      repr(target), "pass e.g. --target test_error")
    measures = list(measures) if measures is not None else measure_columns(table)
    missing = [m for m in measures if m not in table.columns]
    if missing or not measures:
        raise invalid(where, "measure columns of the table", f"{missing or 'none'}",
                      "take measures at initialization ([measures] names) or pass --measures")
    hyperparameters = list(table.attrs.get("hyperparameters", []))
    ok = table[table[target].notna()]
    scores = None
    if len(ok) >= 3 and hyperparameters:
        scores = score_measures(ok, measures, target, hyperparameters,
                                conditioning="pgdl" if len(hyperparameters) >= CONDITIONED
                                else "jiang", n_resamples=n_resamples)
    elif len(ok) >= 3:
        from nngauge.studies import kendall_tau

        scores = [kendall_tau(ok, m, target, n_resamples=n_resamples) for m in measures]
    name = str(table.attrs.get("name", "study"))
    parts = [
        f"<h1>Study {html.escape(name)}</h1>",
        _overview(table, target, source),
        _predictor_section(scores, hyperparameters, target),
        _scatter_section(ok, measures, target, hyperparameters),
        _granulated_section(scores, hyperparameters),
        _ends_section(ok, target, hyperparameters, measures),
        _failures_section(table),
    ]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>nngauge "
            f"study {html.escape(name)}</title><style>{_STYLE}</style></head><body>"
            + "".join(parts) + "</body></html>")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, error_column: int = -1
           ) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    error = ' class="error"'
    body = "".join("<tr>" + "".join(
        f"<td{error if i == error_column else ''}>{_cell(v)}</td>"
        for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _overview(table, target: str, source: str) -> str:
    failed = int(table["error"].notna().sum()) if "error" in table.columns else 0
    seconds = table["seconds"].astype(float) if "seconds" in table.columns else None
    time = "" if seconds is None or not len(seconds) else (
        f" Units took {seconds.sum():.1f} s of worker time in all (median {seconds.median():.2f}"
        f" s, longest {seconds.max():.1f} s).")
    hyperparameters = table.attrs.get("hyperparameters", [])
    return (f"<p class=\"small\">{len(table)} rows ({html.escape(str(table.attrs.get('kind', '')))}"
            f" study {html.escape(str(table.attrs.get('study_id', '')))} in "
            f"<code>{html.escape(source)}</code>), {failed} failed; varied: "
            f"{html.escape(', '.join(hyperparameters) or 'nothing')}; target "
            f"<b>{html.escape(target)}</b> ({int(table[target].notna().sum())} rows with a "
            f"value).{time}</p>")


def _predictor_section(scores, hyperparameters: list, target: str) -> str:
    title = "<h2>Predictors</h2>"
    if scores is None:
        return title + "<p>Not scored: the scores need at least 3 rows with a target value.</p>"
    if isinstance(scores, list):  # no varied hyperparameter: Kendall's tau alone
        rows = [[k.measure, k.n, {-1: "-", 1: "+"}.get(expected_sign(k.measure), "?"),
                 _interval(k.tau, k.low, k.high)] for k in scores]
        return (title + f"<p class=\"small\">Kendall's tau of each measure with "
                f"{html.escape(target)} over all rows, 95% bootstrap interval; the study varies "
                "no hyperparameter of a grid, so there is no granulated coefficient or "
                "conditional mutual information. <i>expected</i>: the sign a good predictor "
                "has (see below).</p>"
                + _table(["measure", "n", "expected", "tau [95%]"], rows))
    rows = []
    for row in predictor_order(scores):
        s = row.summary()
        direction = expected_sign(row.name)
        rows.append([s["measure"], s["n"], {-1: "-", 1: "+"}.get(direction, "?"),
                     _interval(s["tau"], s["tau_low"], s["tau_high"]),
                     _interval(s["psi"], s["psi_low"], s["psi_high"]),
                     _interval(s["cmi"], s["cmi_low"], s["cmi_high"]), s["cmi_condition"]])
    return (title + f"<p class=\"small\">Each measure against {html.escape(target)}, scored "
            "by the granulated Kendall coefficient Psi (Jiang et al., ICLR 2020, section "
            "3: Kendall's tau among networks that differ in one hyperparameter, averaged "
            "over the hyperparameters), Kendall's tau over all rows and the conditional mutual "
            f"information ({_CONDITIONING[scores.conditioning]}; in bits, 0: no information "
            "beyond the hyperparameters). Brackets: 95% bootstrap intervals over "
            f"{scores.n_resamples} resamples of the rows. <i>expected</i>: the sign of tau a "
            "good predictor has, from the measure's known direction (a larger value predicts "
            "higher accuracy: -, against an error or a gap), fixed before the study; ? where "
            "none is known. Order: Psi in the expected direction, largest first (measures of "
            "unknown direction by |Psi|, after those of known direction).</p>"
            + _table(["measure", "n", "expected", "tau [95%]", "Psi [95%]", "CMI [95%]",
                      "condition"], rows))


def expected_sign(column: str) -> Optional[int]:
    """The sign of tau(measure, error) a good predictor has: minus its known direction
    (:func:`nngauge.studies._predictors.known_directions`; a column measured after training,
    ``_after``, shares its measure's), None where none is known."""
    from nngauge.studies._predictors import known_directions
    from nngauge.studies._spec import AFTER

    direction = known_directions().get(column.removesuffix(AFTER))
    return None if direction is None else -direction


def predictor_order(scores) -> list:
    """The scored measures by Psi in their expected direction, largest first; those of no
    known direction after them by |Psi|; NaN last."""

    def key(row) -> tuple:
        psi = row.granulated.mean
        sign = expected_sign(row.name)
        if not math.isfinite(psi):
            return (2, 0.0)
        return (0, -sign * psi) if sign is not None else (1, -abs(psi))

    return sorted(scores.rows, key=key)


_CONDITIONING = {"pgdl": "PGDL's, on pairs of hyperparameters",
                 "jiang": "Jiang et al.'s, on single hyperparameters"}


def _interval(value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return "-"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{value:+.3f}"
    return f"{value:+.3f} [{low:+.2f}, {high:+.2f}]"


def _scatter_section(ok, measures: list, target: str, hyperparameters: list) -> str:
    from nngauge._plots import wants_log
    from nngauge.report._figures import png_data_uri

    if ok.empty:
        return "<h2>Measures against the target</h2><p>No row has a target value.</p>"
    colour_by = hyperparameters[0] if hyperparameters else None
    levels = sorted(ok[colour_by].astype(str).unique()) if colour_by else [""]
    figures = []
    for measure in measures:
        x = ok[measure].astype(float)

        def draw(ax, measure=measure, x=x):
            for i, level in enumerate(levels):
                chosen = (ok[colour_by].astype(str) == level) if colour_by else x.notna()
                ax.scatter(x[chosen], ok[target][chosen], s=18, color=f"C{i % 10}",
                           label=f"{colour_by}={level}" if colour_by else None)
            ax.set_xlabel(measure)
            ax.set_ylabel(target)
            if wants_log(list(x.dropna())):
                ax.set_xscale("log")
            if colour_by:
                ax.legend(fontsize=7)

        figures.append(f"<img alt=\"{html.escape(measure)} against {html.escape(target)}\" "
                       f"src=\"{png_data_uri(draw, size=(5.2, 3.4))}\">")
    return ("<h2>Measures against the target</h2><p class=\"small\">One point per row"
            + (f", coloured by {html.escape(colour_by)}" if colour_by else "") + ".</p>"
            + "".join(figures))


def _granulated_section(scores, hyperparameters: list) -> str:
    from nngauge.report._figures import png_data_uri

    title = "<h2>Granulated view</h2>"
    if scores is None or isinstance(scores, list):
        return title + "<p>No varied hyperparameter to condition on (see Predictors).</p>"
    ordered = predictor_order(scores)
    names = [row.name for row in ordered]
    psi = {h: [row.granulated.per_hyperparameter.get(h, math.nan) for row in ordered]
           for h in hyperparameters}

    def draw(ax):
        width = 0.8 / max(1, len(hyperparameters))
        for i, h in enumerate(hyperparameters):
            ax.bar([j + i * width for j in range(len(names))],
                   [0.0 if math.isnan(v) else v for v in psi[h]], width, label=h,
                   color=f"C{i % 10}")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names, rotation=30,
                      ha="right", fontsize=8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_ylabel("psi (tau within groups)")
        ax.legend(fontsize=7)

    rows = [[h, *psi[h]] for h in hyperparameters]
    return (title + "<p class=\"small\">psi per hyperparameter: Kendall's tau between measure "
            "and target among networks that differ in that hyperparameter only, averaged over "
            "the settings of the others (Jiang et al.'s psi_i). A measure that predicts only "
            "through one hyperparameter scores near 0 on the others.</p>"
            + _table(["hyperparameter", *names], rows)
            + f"<img alt=\"granulated Kendall per hyperparameter\" "
              f"src=\"{png_data_uri(draw, size=(8.0, 3.4))}\">")


def _ends_section(ok, target: str, hyperparameters: list, measures: list) -> str:
    if ok.empty:
        return ""
    ordered = ok.sort_values(target)
    settings = hyperparameters or [c for c in ("candidate", "network", "arch_index")
                                   if c in ok.columns]
    header = ["", *settings, "seed", target, *measures]
    rows = [["best", *(r[s] for s in settings), r["seed"], r[target],
             *(float(r[m]) for m in measures)] for _, r in ordered.head(SHOWN).iterrows()]
    rows += [["worst", *(r[s] for s in settings), r["seed"], r[target],
              *(float(r[m]) for m in measures)]
             for _, r in ordered.tail(min(SHOWN, max(0, len(ordered) - SHOWN))).iterrows()]
    return (f"<h2>Best and worst by {html.escape(target)}</h2><p class=\"small\">The "
            f"{SHOWN} lowest and highest values of the target with their settings and "
            "measures.</p>" + _table(header, rows))


def _failures_section(table) -> str:
    if "error" not in table.columns or not table["error"].notna().any():
        return "<h2>Failures</h2><p>None.</p>"
    failed = table[table["error"].notna()]
    settings = table.attrs.get("hyperparameters", []) or ["candidate"]
    rows = [[*(r[s] for s in settings if s in table.columns), r["seed"], r.get("stage", ""),
             r["error"]] for _, r in failed.iterrows()]
    header = [*(s for s in settings if s in table.columns), "seed", "stage", "error"]
    return (f"<h2>Failures</h2><p class=\"small\">{len(failed)} rows recorded an error; the "
            "others ran.</p>" + _table(header, rows, error_column=len(header) - 1))


__all__ = ["default_target", "measure_columns", "study_page", "study_table"]
