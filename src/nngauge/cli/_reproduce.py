"""``nngauge reproduce NAME``: rebuild a paper's table or figure as a CSV and a PNG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

REPRODUCE_EXAMPLES = (
    "nngauge reproduce --list",
    "nngauge reproduce --all --out reproduce",
    "nngauge reproduce nlc-figure2 --scale paper --seed 1 --ray auto",
)


def reproduce(
    name: Optional[list[str]] = typer.Argument(
        None, metavar="NAME...", help="Reproduction name(s), e.g. nlc-table1 (see --list); "
        "several run into OUT/NAME each, with OUT/index.html."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Directory for NAME.csv, NAME.png and README.md (created if "
        "missing; default reproduce/NAME), or for the folders and index.html of several."),
    scale: str = typer.Option("small", "--scale",
                              help="small (minutes on 2 cores) or paper (the paper's sizes)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data and the networks."),
    list_all: bool = typer.Option(False, "--list", help="Describe every reproduction and exit."),
    run_all: bool = typer.Option(False, "--all", help="Run every reproduction into OUT/NAME "
                                 "and write OUT/index.html (OUT default: reproduce)."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS",
                                      help="Run the units of the reproductions that run a "
                                      "study (nlc-figure2/3/9/10, nlc-lr, predictors) on the "
                                      "Ray cluster at ADDRESS ('auto': this machine's); "
                                      "default: a local process pool."),
) -> None:
    """Reproduce a paper's table or figure; print ours beside the paper's values and the
    verdict (reproduced / qualitatively / differs / paper error)."""
    from rich.console import Console

    console = Console()
    if list_all:
        console.print(_list_table())
        return
    from nngauge.reproduce._base import study_executor

    with study_executor(ray):
        _reproduce(console, name, out, scale, seed, run_all)


def _reproduce(console, name: Optional[list[str]], out: Optional[Path], scale: str, seed: int,
               run_all: bool) -> None:
    from nngauge.reproduce import get, names

    if run_all and name:
        raise typer.BadParameter(f"--all runs every reproduction; got also {' '.join(name)}",
                                 param_hint="NAME")
    if not run_all and not name:
        raise typer.BadParameter(f"give a reproduction name, one of {names()} (or --list, "
                                 "--all)", param_hint="NAME")
    if run_all or len(name) > 1:
        selected = names() if run_all else [get(n).name for n in name]  # unknown names: exit 2
        _run_several(console, selected, out if out is not None else Path("reproduce"), scale,
                     seed, "--all" if run_all else " ".join(selected))
        return
    reproduction = get(name[0])
    out = out if out is not None else Path("reproduce") / reproduction.name
    result = reproduction.run(out, scale=scale, generator=seed)
    console.print(_values_table(result))
    console.print(f"[bold]Differs from the paper ({result.scale} scale):[/bold]")
    for line in result.differences:
        console.print(f"  - {line}")
    if result.verdict is not None:
        console.print(f"[bold]Verdict: {result.verdict.label}.[/bold] {result.verdict.reason}")
    if result.warnings:
        from rich.markup import escape

        console.print("[bold]Warnings from the study's workers[/bold] (each kind once):")
        for line in result.warnings:
            console.print(f"  - {escape(line)}", highlight=False)
    console.print(f"wrote {result.csv_path}, {result.png_path} and {result.readme_path} in "
                  f"{result.seconds:.1f} s")


def _run_several(console, selected: list[str], out: Path, scale: str, seed: int,
                 asked: str) -> None:
    from rich.table import Table

    from nngauge.reproduce._index import INDEX_NAME, run_all

    done = []

    def progress(name: str) -> None:
        done.append(name)
        console.print(f"[{len(done)}/{len(selected)}] {name}")

    results = run_all(out, scale=scale, generator=seed, names=selected, progress=progress)
    table = Table(title=f"nngauge reproduce {asked} ({scale} scale, seed {seed})")
    for column in ("name", "verdict", "seconds"):
        table.add_column(column)
    for result in results:
        table.add_row(result.name, result.verdict.label if result.verdict else "-",
                      f"{result.seconds:.1f}")
    console.print(table)
    console.print(f"wrote {out / INDEX_NAME}")


def _list_table():
    from rich.table import Table

    from nngauge.reproduce import REPRODUCTIONS

    table = Table(title="nngauge reproduce", show_lines=True,
                  caption="time: the default (small) scale's wall time on 2 idle cores, "
                  "start-up included", caption_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("paper: figure/table, description")
    table.add_column("time", no_wrap=True)
    for record in REPRODUCTIONS.values():
        table.add_row(record.name, f"{record.paper}: {record.target}\n{record.description}",
                      record.small_runtime)
    return table


def _values_table(result):
    from rich.table import Table

    table = Table(title=f"{result.name} ({result.scale} scale)")
    for column, justify in (("quantity", "left"), ("ours", "right"), ("paper", "right"),
                            ("note", "left")):
        table.add_column(column, justify=justify)
    for item in result.computed.comparison:
        table.add_row(item.quantity, _number(item.ours),
                      "-" if item.paper is None else _number(item.paper), item.printed_note)
    return table


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3g}"
