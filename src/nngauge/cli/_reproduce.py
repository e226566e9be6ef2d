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
    seeds: Optional[int] = typer.Option(
        None, "--seeds", min=1, help="Run at seeds SEED, SEED+1, ... and give the majority's "
        "verdict with how many agree (default: 3 for the statistical reproductions, 1 for "
        "the deterministic ones; --list says which)."),
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
        _reproduce(console, name, out, scale, seed, run_all, seeds)


def _reproduce(console, name: Optional[list[str]], out: Optional[Path], scale: str, seed: int,
               run_all: bool, seeds: Optional[int]) -> None:
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
                     seed, "--all" if run_all else " ".join(selected), seeds)
        return
    reproduction = get(name[0])
    out = out if out is not None else Path("reproduce") / reproduction.name
    result = reproduction.run(out, scale=scale, generator=seed, n_seeds=seeds)
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
    seeds_csv = "" if result.seeds_csv_path is None else f", {result.seeds_csv_path}"
    console.print(f"wrote {result.csv_path}, {result.png_path}{seeds_csv} and "
                  f"{result.readme_path} in {result.seconds:.1f} s")


def _run_several(console, selected: list[str], out: Path, scale: str, seed: int,
                 asked: str, seeds: Optional[int]) -> None:
    from rich.table import Table

    from nngauge.reproduce._index import INDEX_NAME, run_all

    done = []

    def progress(name: str) -> None:
        done.append(name)
        console.print(f"[{len(done)}/{len(selected)}] {name}")

    results = run_all(out, scale=scale, generator=seed, names=selected, progress=progress,
                      n_seeds=seeds)
    table = Table(title=f"nngauge reproduce {asked} ({scale} scale, from seed {seed})")
    for column in ("name", "verdict", "per seed", "seconds"):
        table.add_column(column)
    for result in results:
        table.add_row(result.name, result.verdict.label if result.verdict else "-",
                      ", ".join(f"{o.seed}: {o.status}" for o in result.per_seed),
                      f"{result.seconds:.1f}")
    console.print(table)
    console.print(f"wrote {out / INDEX_NAME}")


def _list_table():
    from rich.table import Table

    from nngauge.reproduce import REPRODUCTIONS

    table = Table(title="nngauge reproduce", show_lines=True,
                  caption="time: the default (small) scale's wall time on 2 idle cores at one "
                  "seed, start-up included; seeds: how many seeds it runs by default (3: its "
                  "verdict rests on random draws)", caption_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("paper: figure/table, description")
    table.add_column("time", no_wrap=True)
    table.add_column("seeds", no_wrap=True)
    for record in REPRODUCTIONS.values():
        table.add_row(record.name, f"{record.paper}: {record.target}\n{record.description}",
                      record.small_runtime, str(record.n_seeds))
    return table


def _values_table(result):
    from rich.table import Table

    from nngauge.reproduce._base import format_spread

    several = len(result.per_seed) > 1
    first = result.per_seed[0].seed if result.per_seed else None
    table = Table(title=f"{result.name} ({result.scale} scale"
                  + (f"; seed {first}, spread over {len(result.per_seed)} seeds)" if several
                     else ")"))
    columns = (("quantity", "left"), ("ours", "right"),
               *((("over seeds", "right"),) if several else ()), ("paper", "right"),
               ("note", "left"))
    for column, justify in columns:
        table.add_column(column, justify=justify)
    for item in result.computed.comparison:
        spread = (format_spread(result.spread(item.key)),) if several else ()
        table.add_row(item.quantity, _number(item.ours), *spread,
                      "-" if item.paper is None else _number(item.paper), item.printed_note)
    return table


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3g}"
