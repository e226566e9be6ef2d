"""The shape of a reproduction: one record per paper table or figure, one shared runner.

A reproduction module defines a ``compute(scale, generator) -> Computed`` (the numbers: CSV
columns and rows, and the values to print beside the paper's), a ``plot(computed, figure)``
(draws on a fresh matplotlib ``Figure``) and a :class:`Reproduction` record naming the paper,
the table or figure, and what differs from the paper at each scale. :meth:`Reproduction.run`
does the rest: validates the arguments, times the computation, writes ``NAME.csv`` (csv
module, no pandas) and ``NAME.png`` and returns a :class:`ReproductionResult`.
"""

from __future__ import annotations

import csv
import math
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Sequence

import torch

from nngauge.errors import invalid, require_extra

Scale = Literal["small", "paper"]
SCALES: tuple[str, ...] = ("small", "paper")


@dataclass(frozen=True)
class Comparison:
    """One printed value next to the paper's.

    Attributes:
        quantity: what the value is (e.g. ``"A: NLC_tau(1) relu"``).
        ours: our value.
        paper: the value the paper prints (None where the paper prints none, e.g. a figure).
        note: how ours was obtained when it is not the paper's setting.
    """

    quantity: str
    ours: float
    paper: Optional[float] = None
    note: str = ""


@dataclass(frozen=True)
class Computed:
    """What a reproduction's ``compute`` returns.

    Attributes:
        columns: CSV header.
        rows: CSV rows, one tuple per row, in column order.
        comparison: values to print, beside the paper's where it prints them.
        extra: anything the plot needs beyond the rows (e.g. settings), never written.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    comparison: tuple[Comparison, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def column(self, name: str) -> list[Any]:
        """The values of one column, in row order."""
        index = self.columns.index(name)
        return [row[index] for row in self.rows]


@dataclass(frozen=True)
class ReproductionResult:
    """The outcome of :meth:`Reproduction.run`.

    Attributes:
        name: the reproduction's name; scale: ``"small"`` or ``"paper"``.
        computed: the numbers (columns, rows, comparison).
        differences: what differs from the paper at this scale (data, scale, anything not
            rebuilt).
        csv_path, png_path: the files written.
        seconds: wall-clock time of the computation and the files.
    """

    name: str
    scale: str
    computed: Computed
    differences: tuple[str, ...]
    csv_path: Path
    png_path: Path
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (rows as dicts keyed by column)."""
        columns = self.computed.columns
        return {
            "name": self.name, "scale": self.scale, "seconds": self.seconds,
            "csv_path": str(self.csv_path), "png_path": str(self.png_path),
            "differences": list(self.differences),
            "rows": [dict(zip(columns, row)) for row in self.computed.rows],
            "comparison": [c.__dict__ for c in self.computed.comparison],
        }


@dataclass(frozen=True)
class Reproduction:
    """One paper table or figure that ``nngauge reproduce NAME`` rebuilds.

    Attributes:
        name: the command-line name (``"nlc-table1"``).
        paper: the paper's citation (authors, title, venue: :func:`nngauge._citations.cite`).
        target: the table or figure (``"Table 1"``).
        description: one line: what is computed.
        differences: per scale, what differs from the paper (data, sizes, what is not rebuilt).
        small_runtime: the small-scale command's wall time on 2 idle cores, start-up
            included (for ``--list``; measured by ``benchmarks/reproduce_runtimes.py``).
        compute: ``compute(scale, generator) -> Computed``.
        plot: ``plot(computed, figure)`` draws on a matplotlib ``Figure``.
    """

    name: str
    paper: str
    target: str
    description: str
    differences: Mapping[str, tuple[str, ...]]
    small_runtime: str
    compute: Callable[[str, torch.Generator], Computed] = field(repr=False)
    plot: Callable[[Computed, Any], None] = field(repr=False)

    def run(self, out_dir: str | Path, *, scale: Scale = "small",
            generator: Optional[torch.Generator] = None) -> ReproductionResult:
        """Compute, write ``out_dir/NAME.csv`` and ``out_dir/NAME.png``, return the result.

        Args:
            out_dir: directory for the files (created when missing).
            scale: ``"small"`` (default: minutes at most on 2 cores) or ``"paper"`` (the
                paper's sizes where they can be rebuilt: long).
            generator: torch generator seeding everything random (default: seed 0).

        Raises:
            InvalidInputError: an unknown scale or an ``out_dir`` that is a file.
            MissingDependencyError: matplotlib is not installed.
        """
        where = f"reproduce {self.name}"
        if scale not in SCALES:
            raise invalid(where, f"scale in {list(SCALES)}", f"scale={scale!r}",
                          "use 'small' (minutes) or 'paper' (the paper's sizes)")
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise invalid(where, "an output directory", f"out_dir={str(out)!r} is a file",
                          "pass a directory path (it is created when missing)")
        require_extra("matplotlib", "report", f"nngauge reproduce {self.name}")
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        start = time.perf_counter()
        computed = self.compute(scale, generator)
        out.mkdir(parents=True, exist_ok=True)
        csv_path, png_path = out / f"{self.name}.csv", out / f"{self.name}.png"
        write_csv(csv_path, computed.columns, computed.rows)
        self._save_png(computed, png_path)
        return ReproductionResult(self.name, scale, computed, tuple(self.differences[scale]),
                                  csv_path, png_path, time.perf_counter() - start)

    def _save_png(self, computed: Computed, path: Path) -> None:
        from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

        figure = Figure(figsize=(10, 4), layout="constrained")
        self.plot(computed, figure)
        figure.suptitle(textwrap.fill(f"{self.name}: {self.target} of {self.paper}", 150),
                        fontsize=8)
        figure.savefig(path, dpi=100)


def write_csv(path: Path, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Write a header and rows with the csv module (floats as repr: lossless)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows([_cell(value) for value in row] for row in rows)


def _cell(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return "" if value is None else value


def seed_from(generator: torch.Generator) -> int:
    """A numpy / data seed drawn from the torch generator (so one seed drives everything)."""
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
