"""``nngauge reproduce NAME``: rebuild a paper's table or figure as a CSV and a PNG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer


REPRODUCE_EXAMPLES = (
    "nngauge reproduce --list",
    "nngauge reproduce nlc-table1 --out reproduce",
    "nngauge reproduce shrinkage-figure2 --scale paper --seed 1",
)


def reproduce(
    name: Optional[str] = typer.Argument(
        None, metavar="NAME", help="Reproduction name, e.g. nlc-table1 (see --list)."),
    out: Path = typer.Option(Path("reproduce"), "--out",
                             help="Directory for NAME.csv and NAME.png (created if missing)."),
    scale: str = typer.Option("small", "--scale",
                              help="small (minutes on 2 cores) or paper (the paper's sizes)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data and the networks."),
    list_all: bool = typer.Option(False, "--list", help="Describe every reproduction and exit."),
) -> None:
    """Reproduce a paper's table or figure; print ours beside the paper's values."""
    from rich.console import Console

    console = Console()
    if list_all:
        console.print(_list_table())
        return
    if name is None:
        from nngauge.reproduce import names

        raise typer.BadParameter(f"give a reproduction name, one of {names()} (or --list)",
                                 param_hint="NAME")
    import torch

    from nngauge.reproduce import get

    reproduction = get(name)
    result = reproduction.run(out, scale=scale, generator=torch.Generator().manual_seed(seed))
    console.print(_values_table(result))
    console.print(f"[bold]Differs from the paper ({result.scale} scale):[/bold]")
    for line in result.differences:
        console.print(f"  - {line}")
    console.print(f"wrote {result.csv_path} and {result.png_path} in {result.seconds:.1f} s")


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
                      "-" if item.paper is None else _number(item.paper), item.note)
    return table


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3g}"
