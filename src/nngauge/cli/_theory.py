"""``nngauge theory ACT``: an activation's infinite-width profile at a glance."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from nngauge.theory._profile import PAPER_CONDITIONING, PAPER_NLC, PAPER_POOLE, PAPER_SHRINKAGE

THEORY_EXAMPLES = (
    "nngauge theory relu",
    "nngauge theory tanh --sigma-w 1.5 --sigma-b 0.1 --arch mlp --json",
    "nngauge theory 'leaky_relu(negative_slope=0.2)' --plot leaky_relu.png --depth 30",
)
ARCH_HELP = ("Correlation map: layernorm (shrinkage eq. 2.3), resnet (eq. A.10) or mlp (q* then "
             "c-map).")


def theory(
    activation: str = typer.Argument(
        ..., metavar="ACTIVATION",
        help="Activation spec, e.g. relu, 'leaky_relu(negative_slope=0.2)', "
        "'normalize(modify(tanh, dilation=1.2))'."
    ),
    sigma_w: float = typer.Option(1.0, "--sigma-w", help="Weight standard deviation sigma_w."),
    sigma_b: float = typer.Option(0.0, "--sigma-b", help="Bias standard deviation sigma_b."),
    arch: str = typer.Option("layernorm", "--arch", help=ARCH_HELP),
    depth: int = typer.Option(50, "--depth", min=1, help="Depth of the plotted iteration."),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Save a PNG of the correlation map iterated over depth "
        "(needs matplotlib: pip install 'nngauge[report]')."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Slope at one, phase, fixed point, NLC_tau(1), mu, linearization error, critical init.

    An activation's infinite-width profile: its correlation map's slope at one and phase, the
    fixed point, the NLC of the activation, its coefficient of non-linearity and the critical
    initialization; a PNG of the map iterated over depth with --plot."""
    from nngauge.theory import profile

    summary = profile(activation, sigma_w=sigma_w, sigma_b=sigma_b, arch=arch)
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2, default=_json_number))
    else:
        _print_table(summary)
    if plot is not None:
        from nngauge.theory._plots import plot_correlation_iteration

        plot_correlation_iteration(summary.correlation_map, depth, plot)
        typer.echo(f"saved {plot}")


def _json_number(value):
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _print_table(summary) -> None:
    from rich.console import Console
    from rich.table import Table

    from nngauge._citations import cite

    rows = [(name, value, *_source(source)) for name, value, source in summary.rows()]
    cited = dict.fromkeys(key for *_, key in rows if key is not None)
    table = Table(title=f"nngauge theory: {summary.activation}", show_header=True,
                  caption="; ".join(cite(key) for key in cited) or None, caption_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("source", style="dim")
    for name, value, source, _ in rows:
        table.add_row(name, value if isinstance(value, str) else f"{value:.6g}", source)
    Console().print(table)


_PAPERS = {PAPER_SHRINKAGE: ("shrinkage", "Shrinkage paper"),
           PAPER_NLC: ("nlc", "Philipp & Carbonell"),
           PAPER_CONDITIONING: ("conditioning", "Agarwal et al."),
           PAPER_POOLE: ("poole", "Poole et al.")}
"""A profile row's paper (its source's first word) -> (key in nngauge._citations, short name)."""


def _source(source: str) -> tuple[str, Optional[str]]:
    """A row's source with the paper named by its authors, and the paper's citation key."""
    paper, _, where = str(source).partition(" ")
    if paper not in _PAPERS:
        return source, None
    key, name = _PAPERS[paper]
    return f"{name} {where}".strip(), key
