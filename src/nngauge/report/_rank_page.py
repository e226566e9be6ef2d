"""The page of ``nngauge rank``: the candidates in rank order and each predictor as bars."""

from __future__ import annotations

import html

from nngauge._plots import wants_log
from nngauge.report._figures import png_data_uri
from nngauge.studies._rank import Ranking

_STYLE = ("body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1.5rem;"
          "color:#1d232a}table{border-collapse:collapse;font-size:.8rem}th,td{border:1px solid "
          "#d0d7de;padding:.2rem .5rem;text-align:right}th{background:#f6f8fa}"
          "td:first-child,th:first-child{text-align:left}.small{color:#57606a;font-size:.8rem}"
          "img{max-width:100%}")


def rank_page(ranking: Ranking, *, builder: str = "", data: str = "") -> str:
    """One self-contained HTML page (inline CSS and PNGs, every user string escaped): what was
    ranked and by which predictor, the table, and one bar chart per measure column with the
    candidates in rank order."""
    ranked = [c for c in ranking.candidates if c.rank is not None]
    labels = [", ".join(f"{k}={c.arguments[k]}" for k in ranking.keys) for c in ranked]
    figures = []
    for column in ranking.columns:
        values = [c.values.get(column, float("nan")) for c in ranked]

        def draw(ax, values=values, column=column):
            ax.bar(range(len(values)), values, color="#4a78b0")
            ax.set_xticks(range(len(values)), labels, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel(column)
            if wants_log(values):
                ax.set_yscale("log")

        figures.append((column, png_data_uri(draw, size=(8.0, 3.2))))
    head, cells = ranking.cells()
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
                   for row in cells)
    direction = "higher" if ranking.direction > 0 else "lower"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>nngauge rank"
        f"</title><style>{_STYLE}</style></head><body><h1>nngauge rank</h1>"
        f"<p class=\"small\">builder <code>{html.escape(builder)}</code> on data "
        f"<code>{html.escape(data)}</code>: {len(ranking.candidates)} candidates, ranked by "
        f"<b>{html.escape(ranking.key)}</b> ({direction} predicts higher accuracy), measured at "
        "initialization, nothing trained. The default predictors ranked best in nngauge's "
        "benchmark of sampled fully-connected networks (README, \"Predicting test error "
        "before training\"); on other families the order is a hypothesis to check.</p>"
        "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
        + rows + "</table>"
        + "".join(f"<h2>{html.escape(column)}</h2><img alt=\"{html.escape(column)}\" "
                  f"src=\"{uri}\">" for column, uri in figures)
        + "</body></html>")


__all__ = ["rank_page"]
