"""``nngauge rank BUILDER --grid KEY=V1,V2 --data DATA``: candidates ranked before training."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import typer

from nngauge.cli._report import DATA_HELP

RANK_EXAMPLES = (
    "nngauge rank examples/rank_family.py:build --grid depth=2,4,8 --grid width=32,128 "
    "--data digits:image --out rank.html --json rank.json",
    "nngauge rank examples/rank_family.py:build --grid skip=true,false --data digits:image "
    "--measures nlc_rule,kernel_condition,n_params",
)


def rank(
    builder: str = typer.Argument(..., metavar="BUILDER",
                                  help="path/to/file.py:function building one candidate "
                                  "from keyword arguments."),
    grid: list[str] = typer.Option(..., "--grid", metavar="KEY=V1,V2,...",
                                   help="The values of one "
                                   "keyword argument (repeat for each; every combination is "
                                   "a candidate)."),
    data: str = typer.Option(..., "--data", help=DATA_HELP),
    measures: Optional[str] = typer.Option(
        None, "--measures", help="Comma-separated study measures; the first ranks (default: "
        "nlc_rule,te_nas,n_params,flops, the predictors that ranked best at initialization "
        "in nngauge's benchmark, and the baselines)."),
    out: Path = typer.Option(Path("rank.html"), "--out", help="Where to write the HTML page."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write one record per "
                                            "candidate (its arguments and measures) as JSON."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data, the networks and the "
                             "measures."),
    samples: Optional[int] = typer.Option(None, "--samples", min=2, help="Samples of the data "
                                          "to use (default: generated sets 1000, files all)."),
) -> None:
    """Rank candidate architectures at initialization, before any training: every point of
    the grid built, measured on the data and ordered by the first predictor.

    Exit status: 0 when the page is written, 2 on bad input (a builder path, a grid the
    builder does not take, data no candidate runs on)."""
    from nngauge.cli._report import _require_writable
    from nngauge.data._sources import load_data
    from nngauge.report._rank_page import rank_page
    from nngauge.studies._rank import DEFAULT_MEASURES
    from nngauge.studies._rank import rank as rank_candidates

    for option, path in (("--out", out), ("--json", json_out)):
        if path is not None:
            _require_writable(option, path)
    parsed = parse_grid(grid)
    names = DEFAULT_MEASURES if measures is None else tuple(
        m.strip() for m in measures.split(",") if m.strip())
    source = load_data(data, seed=seed, n=samples)
    ranking = rank_candidates(builder, parsed, (source.inputs, source.labels), measures=names,
                              generator=seed)
    typer.echo(ranking.table())
    out.write_text(rank_page(ranking, builder=builder, data=data), encoding="utf-8")
    if json_out is not None:
        records = [{k: _plain(v) for k, v in record.items()} for record in ranking.records()]
        json_out.write_text(json.dumps({"builder": builder, "data": data, "key": ranking.key,
                                        "direction": ranking.direction,
                                        "candidates": records}, indent=2), encoding="utf-8")
    failed = sum(c.rank is None for c in ranking.candidates)
    typer.echo(f"{len(ranking.candidates)} candidates ranked by {ranking.key}"
               + (f" ({failed} without a rank: see their errors)" if failed else "")
               + f"; wrote {out}" + (f" and {json_out}" if json_out is not None else ""))


def parse_grid(options: list[str]) -> dict[str, list[Any]]:
    """``["depth=2,4", "width=64"]`` -> ``{"depth": [2, 4], "width": [64]}`` (values as
    ``key=value`` values are read: ints, floats, booleans, None, else text)."""
    from nngauge.data._sources import parse_value
    from nngauge.errors import invalid

    grid: dict[str, list[Any]] = {}
    for option in options:
        key, sep, values = option.partition("=")
        key = key.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.isidentifier() or not items:
            raise invalid("nngauge rank", "--grid KEY=V1,V2,... (a keyword and its values)",
                          repr(option), "write e.g. --grid depth=2,4,8")
        if key in grid:
            raise invalid("nngauge rank", "each --grid key once", f"{key!r} twice",
                          f"join the values: --grid {key}=V1,V2,...")
        grid[key] = [parse_value(item) for item in items]
    return grid


def _plain(value: Any) -> Any:
    """A JSON value: NaN and infinities as None (strict JSON has neither), other
    non-JSON values as their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
