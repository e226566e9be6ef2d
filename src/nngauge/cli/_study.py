"""``nngauge study run SPEC --db URL`` and ``nngauge study summarize --db URL``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer

from nngauge.cli._help import Command, Group, epilog

DB_HELP = "SQLAlchemy URL of the results database, e.g. sqlite:///study.db."
RUN_EXAMPLES = (
    "nngauge study run examples/study_small.toml --db sqlite:///study.db",
    "nngauge study run examples/study_small.toml --executor ray --address auto",
    "nngauge study run examples/zoo.toml --db sqlite:///zoo.db --workers 2",
)
SUMMARIZE_EXAMPLES = (
    "nngauge study summarize --db sqlite:///study.db",
    "nngauge study summarize --db sqlite:///study.db --study small --out results",
    "nngauge study summarize --db sqlite:///study.db --predictors --out results",
)

REPORT_EXAMPLES = (
    "nngauge study report sqlite:///study.db --out study.html",
    "nngauge study report sqlite:///zoo.db --study zoo-default --target gap --out zoo.html",
)

study_app = typer.Typer(cls=Group,
                        help="Architecture studies: measure at init, train, correlate.",
                        epilog=epilog(RUN_EXAMPLES[0], SUMMARIZE_EXAMPLES[0]),
                        no_args_is_help=True, rich_markup_mode=None)


@study_app.command("run", cls=Command, epilog=epilog(*RUN_EXAMPLES))
def run(
    spec: Path = typer.Argument(..., metavar="SPEC",
                                help="The study spec (TOML, or JSON); see examples/study_small.toml, and "
                                "examples/zoo.toml for a model zoo ([grid])."),
    db: str = typer.Option("sqlite:///study.db", "--db", help=DB_HELP),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray."),
    address: Optional[str] = typer.Option(None, "--address",
                                          help="Ray cluster to join (auto, host:port, "
                                          "ray://host:port); default: start a local Ray."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1,
                                          help="Worker processes (local) or CPUs of a local "
                                          "Ray (default: this machine's CPUs)."),
    max_retries: int = typer.Option(2, "--max-retries", min=0,
                                    help="Re-executions of a unit whose worker died."),
) -> None:
    """Run (or resume) a study: units already in the database are skipped.

    Runs sharing a database split the units. Exit status: 0 when every unit is in the
    database, 1 when some failed (rerun to retry them), 2 on bad input, 130 on Ctrl-C (finished
    units kept)."""
    from nngauge.studies import run_study

    progress = _progress()
    try:
        with progress:
            summary = run_study(spec, db, executor=executor, workers=workers, address=address,
                                max_retries=max_retries, progress=progress)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: {progress.done} of {progress.total} units are in the "
                   "database; rerun the same command to resume", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"study {summary.study_id}: {summary.ran} units run, {summary.skipped} already "
               f"done, {summary.by_others} done by other runs, {len(summary.failed)} failed of "
               f"{summary.total}")
    if summary.warnings:
        from nngauge.studies._executors import warning_lines

        typer.echo("warnings from the units (each kind once):", err=True)
        for line in warning_lines(summary.warnings):
            typer.echo(f"  {line}", err=True)
    if summary.failed:
        key, reason = next(iter(summary.failed.items()))
        typer.echo(f"error: {len(summary.failed)} units failed (first: {key}: {reason}); rerun "
                   "the same command to retry them", err=True)
        raise typer.Exit(1)


@study_app.command("summarize", cls=Command,
                   epilog=epilog(*SUMMARIZE_EXAMPLES))
def summarize(
    db: str = typer.Option("sqlite:///study.db", "--db", help=DB_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for points.csv, "
                                       "correlations.csv and nlc_vs_test_error.png (with "
                                       "--predictors also predictors.csv, pairwise.csv and "
                                       "predictors.png; for a model zoo also networks.csv, "
                                       "one row per network)."),
    study: Optional[str] = typer.Option(None, "--study", help="Study name or id (default: "
                                        "the only one in the database)."),
    top_fraction: float = typer.Option(0.1, "--top-fraction", min=0.0, max=1.0,
                                       help="Fraction of best points defining the ideal NLC "
                                       "range (and the predictors' top precision)."),
    predictors: bool = typer.Option(False, "--predictors",
                                    help="Instead of the correlation table: every init measure "
                                    "as a predictor of accuracy, with bootstrap intervals, "
                                    "top-fraction precision, and which of the baselines "
                                    "n_params and flops it beats significantly."),
) -> None:
    """Rank correlations of init measures with test error, and the NLC figure (for a model
    zoo also every network's hyperparameters, gap and record)."""
    from rich.console import Console
    from rich.table import Table

    from nngauge.studies import summarize as summarize_study

    result = summarize_study(db, study=study, top_fraction=top_fraction)
    console = Console(width=max(120 if predictors else 100, Console().width))
    ranked = None
    if predictors:
        from nngauge.studies import predictor_table

        ranked = predictor_table(result, top_fraction=top_fraction)
        _print_predictors(console, ranked, len(result.points))
    else:
        table = Table(title=f"{result.name} ({result.study_id}): {len(result.points)} points")
        for column in ("measure", "n", "Spearman rho", "p", "Kendall tau", "p"):
            table.add_column(column, justify="left" if column == "measure" else "right")
        for c in result.correlations:
            table.add_row(c.measure, str(c.n), _fmt(c.spearman), _fmt(c.spearman_p, p=True),
                          _fmt(c.kendall), _fmt(c.kendall_p, p=True))
        console.print(table)
    if result.ideal_nlc_range is not None:
        low, high = result.ideal_nlc_range
        console.print(f"observed ideal NLC range (best {result.top_fraction:.0%} of points by "
                      f"test error): {low:.3g} .. {high:.3g}")
    if out is not None:
        written = result.save(out) + (ranked.save(out) if ranked is not None else [])
        if result.hyperparameters:  # a model zoo: every network's hyperparameters and record
            from nngauge.studies import network_table

            written.append(out / "networks.csv")
            network_table(db, study=result.study_id).to_csv(written[-1], index=False)
        console.print("wrote " + ", ".join(str(p) for p in written))


@study_app.command("report", cls=Command, epilog=epilog(*REPORT_EXAMPLES))
def report(
    db: str = typer.Argument(..., metavar="DB", help=DB_HELP),
    out: Path = typer.Option(Path("study.html"), "--out", help="Where to write the page."),
    study: Optional[str] = typer.Option(None, "--study", help="Study name or id (default: "
                                        "the only one in the database)."),
    target: Optional[str] = typer.Option(None, "--target", help="The column the measures "
                                         "predict (default: test_error, else gap)."),
    measures: Optional[str] = typer.Option(None, "--measures", help="Comma-separated measure "
                                           "columns to score (default: every one measured)."),
    n_resamples: int = typer.Option(200, "--n-resamples", min=10,
                                    help="Bootstrap resamples behind every interval."),
) -> None:
    """One HTML page for a study: its predictor table with intervals, each measure against
    the target, the granulated view per hyperparameter, the best and worst networks with their
    settings, time and failures."""
    from nngauge.report._study_page import study_page, study_table

    table = study_table(db, study)
    chosen = None if measures is None else [m.strip() for m in measures.split(",") if m.strip()]
    page = study_page(table, target=target, measures=chosen, n_resamples=n_resamples,
                      source=db)
    out.write_text(page, encoding="utf-8")
    typer.echo(f"wrote {out}: {len(table)} rows of study {table.attrs['name']!r}")


def _print_predictors(console, ranked, n_points: int) -> None:
    """The predictor table, then one line per predictor naming the baselines it beats."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{escape(ranked.name)} ({ranked.study_id}): {n_points} points; "
                  "init measures as predictors of accuracy (1 - test error), best first",
                  caption="rho, tau: rank correlation of direction x measure with accuracy "
                  "(positive: predicts well), 95% bootstrap interval; direction +1: higher "
                  "values predict higher accuracy; (data): sign chosen from these data, which "
                  "flatters the measure")
    top = f"top-{ranked.top_fraction:.0%} precision"
    for column in ("predictor", "Spearman rho [95%]", "Kendall tau [95%]", top, "n",
                   "direction", "baseline"):
        table.add_column(column, justify="left" if column == "predictor" else "right",
                         no_wrap=column != "predictor")
    for row in ranked.rows:
        table.add_row(escape(row.name),
                      f"{_fmt(row.spearman)} {_interval(row.spearman_low, row.spearman_high)}",
                      f"{_fmt(row.kendall)} {_interval(row.kendall_low, row.kendall_high)}",
                      "-" if math.isnan(row.top_precision) else f"{row.top_precision:.2f}",
                      str(row.n), f"{row.direction:+d}" + (" (data)"
                                                           if row.direction_from_data else ""),
                      "baseline" if row.baseline else "")
    console.print(table)
    baselines = [row.name for row in ranked.rows if row.baseline]
    if not baselines:
        console.print("no baseline column (n_params, flops) in this study: nothing to compare "
                      "the predictors with")
        return
    console.print(f"beats: Spearman rho significantly above the baseline's (paired bootstrap "
                  f"of the difference, two-sided p < {ranked.alpha})", highlight=False)
    for row in ranked.rows:
        beaten = [f"{b} (p{_p_value(ranked.pair(row.name, b).p, ranked.n_resamples)})"
                  for b in baselines if b != row.name and ranked.beats(row.name, b)]
        console.print(escape(f"{row.name} beats {', '.join(beaten) or 'no baseline'}"),
                      highlight=False)


def _interval(low: float, high: float) -> str:
    from rich.markup import escape

    return escape(f"[{_fmt(low)}, {_fmt(high)}]")


def _p_value(p: float, n_resamples: int) -> str:
    """``=p``, or ``<2/n_resamples`` where no resample crossed zero (see PredictorTable)."""
    return f"<{2 / n_resamples:.1g}" if p == 0 else f"={p:.2g}"


def _fmt(value: float, p: bool = False) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:.2g}" if p else f"{value:+.3f}"


class _progress:
    """``progress(done, total)`` for :func:`run_study`: remembers the last count, and shows it
    as a rich progress bar on a terminal."""

    def __init__(self) -> None:
        self.bar = None
        self.task = None
        self.done = self.total = 0

    def __enter__(self) -> _progress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("units", total=None)
        return self

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
