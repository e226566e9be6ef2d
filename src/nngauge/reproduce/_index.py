"""``nngauge reproduce --all``: every reproduction, then one offline index page.

Each reproduction runs into ``DIR/NAME/`` (its CSV, PNG and README.md); ``DIR/index.html`` is
one self-contained page (figures inlined as PNG data, no script, no network) with, per
reproduction, the paper and figure, the paper's claim, our verdict (reproduced /
qualitatively / differs / paper error; "software check, not evidence" where only a bug could
fail it) with its reason and, at several seeds, each seed's verdict and how many agree, the
figure, our numbers beside the paper's (with their spread over the seeds) and what differs.
``DIR/verdicts.csv`` holds the same verdicts as a table (``docs/write_reproductions.py`` writes
the README's table of reproductions from it).
"""

from __future__ import annotations

import base64
import datetime
import html
from pathlib import Path
from typing import Callable, Optional, Sequence

from nngauge._vocabulary import renamed
from nngauge.reproduce._base import (
    ReproductionResult,
    Scale,
    format_number,
    format_spread,
    write_csv,
)

INDEX_NAME = "index.html"
VERDICTS_NAME = "verdicts.csv"
VERDICT_COLUMNS = ("name", "target", "verdict", "software_check", "per_seed", "agree", "seeds",
                   "scale", "seconds", "command", "date")
"""``verdicts.csv``: one row per reproduction: its verdict, each seed's status
(``"0 reproduced; 1 differs"``), how many seeds agree with the verdict, the seed count, the
scale, the wall time, the command that reruns it and the day it ran."""

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
section { border-top: 1px solid #ccc; padding-top: 1em; margin-top: 1.5em; }
img { max-width: 100%; border: 1px solid #eee; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; }
.verdict { font-weight: bold; padding: 1px 6px; border-radius: 3px; }
.reproduced { background: #d4edda; } .qualitatively { background: #fff3cd; }
.differs { background: #f8d7da; } .paper-error { background: #e2d9f3; }
.unjudged { background: #e2e3e5; }
"""


@renamed(seed="generator")
def run_all(out_dir: str | Path, *, scale: Scale = "small", generator: int = 0,
            names: Optional[Sequence[str]] = None,
            progress: Optional[Callable[[str], None]] = None,
            n_seeds: Optional[int] = None) -> list[ReproductionResult]:
    """Run each reproduction (default: all, in listing order) into ``out_dir/NAME`` from the
    same int seed ``generator`` (the README of each names it) at ``n_seeds`` seeds (None:
    each reproduction's own count, :attr:`Reproduction.n_seeds`), then write ``out_dir/index.html``;
    returns the results."""
    from nngauge.reproduce import get
    from nngauge.reproduce import names as all_names

    results = []
    for name in names or all_names():
        if progress is not None:
            progress(name)
        results.append(get(name).run(Path(out_dir) / name, scale=scale, generator=generator,
                                     n_seeds=n_seeds))
    write_index(results, out_dir)
    return results


def write_index(results: Sequence[ReproductionResult], out_dir: str | Path) -> Path:
    """Write ``out_dir/index.html`` and ``out_dir/verdicts.csv`` (:data:`VERDICT_COLUMNS`)
    for ``results``; returns the page's path."""
    from nngauge.reproduce import get

    path = Path(out_dir) / INDEX_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = {}
    for result in results:
        status = result.verdict.status if result.verdict is not None else "unjudged"
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    pairs = [(result, get(result.name)) for result in results]
    body = [f"<h1>nngauge reproduce: {len(results)} figures and tables</h1>",
            f"<p>{_e(summary)}. Each section links to its folder (CSV, README.md).</p>",
            _contents(pairs)]
    body += [_section(result, record) for result, record in pairs]
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>nngauge reproduce</title><style>" + _STYLE + "</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
    path.write_text(page, encoding="utf-8")
    write_csv(path.parent / VERDICTS_NAME, VERDICT_COLUMNS,
              [_verdict_row(result, record) for result, record in pairs])
    return path


def _verdict_row(result: ReproductionResult, record) -> tuple:
    verdict = result.verdict
    status = "unjudged" if verdict is None else verdict.status
    first = result.per_seed[0].seed if result.per_seed else None
    command = f"nngauge reproduce {result.name} --scale {result.scale}" + (
        "" if first is None else f" --seed {first} --seeds {len(result.per_seed)}")
    return (result.name, record.target, status, bool(verdict and verdict.software_check),
            "; ".join(f"{o.seed} {o.status}" for o in result.per_seed),
            sum(o.status == status for o in result.per_seed), len(result.per_seed),
            result.scale, round(result.seconds, 1), command,
            datetime.date.today().isoformat())


def _contents(pairs) -> str:
    rows = "".join(
        f"<tr><td><a href=\"#{_e(r.name)}\">{_e(r.name)}</a></td><td>{_e(record.target)}</td>"
        f"<td>{_badge(r)}</td><td>{_e(_per_seed(r))}</td><td>{r.seconds:.1f} s</td></tr>"
        for r, record in pairs)
    return ("<table><tr><th>name</th><th>figure</th><th>verdict</th><th>per seed</th>"
            "<th>time</th></tr>" + rows + "</table>")


def _per_seed(result: ReproductionResult) -> str:
    """``"0 reproduced, 1 reproduced, 2 differs"`` (the seed alone when it ran at one)."""
    return ", ".join(f"{outcome.seed} {outcome.status}" if len(result.per_seed) > 1
                     else f"seed {outcome.seed}" for outcome in result.per_seed)


def _section(result: ReproductionResult, record) -> str:
    image = base64.b64encode(result.png_path.read_bytes()).decode("ascii")
    reason = result.verdict.reason if result.verdict is not None else "no judgement"
    several = len(result.per_seed) > 1
    rows = "".join(
        f"<tr><td>{_e(c.quantity)}</td><td>{_e(format_number(c.ours))}</td>"
        + (f"<td>{_e(format_spread(result.spread(c.key)))}</td>" if several else "")
        + f"<td>{'-' if c.paper is None else _e(format_number(c.paper))}</td>"
        f"<td>{_e(c.printed_note)}</td></tr>"
        for c in result.computed.comparison)
    table = ("<table><tr><th>quantity</th><th>ours</th>"
             + ("<th>over seeds</th>" if several else "")
             + "<th>paper</th><th>note</th></tr>" + rows + "</table>") if rows else ""
    differences = "".join(f"<li>{_e(line)}</li>" for line in result.differences)
    folder = result.csv_path.parent.name
    return (f"<section id=\"{_e(result.name)}\"><h2>{_e(result.name)}: {_e(record.target)}</h2>"
            f"<p>{_e(record.paper)}. {_e(record.description)}.</p>"
            f"<p><b>The paper's claim:</b> {_e(record.claim or 'not stated')}</p>"
            f"<p>{_badge(result)} {_e(reason)}</p>"
            f"<img alt=\"{_e(result.name)}\" src=\"data:image/png;base64,{image}\">"
            f"{table}<p><b>What differs from the paper ({_e(result.scale)} scale):</b></p>"
            f"<ul>{differences}</ul>"
            f"<p>Files: <a href=\"{_e(folder)}/{_e(result.csv_path.name)}\">CSV</a>, "
            + (f"<a href=\"{_e(folder)}/{_e(result.seeds_csv_path.name)}\">every seed's "
               "values</a>, " if result.seeds_csv_path is not None else "")
            + f"<a href=\"{_e(folder)}/README.md\">README.md</a>; {result.seconds:.1f} s.</p>"
            "</section>")


def _badge(result: ReproductionResult) -> str:
    status = result.verdict.status if result.verdict is not None else "unjudged"
    label = result.verdict.label if result.verdict is not None else status
    return f"<span class=\"verdict {status.replace(' ', '-')}\">{label}</span>"


def _e(text) -> str:
    return html.escape(str(text))
