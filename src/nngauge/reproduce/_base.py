"""The shape of a reproduction: one record per paper table or figure, one shared runner.

A reproduction module defines a ``compute(scale, generator) -> Computed`` (the numbers: CSV
columns and rows, and the values to print beside the paper's), a ``plot(computed, figure)``
(draws on a fresh matplotlib ``Figure``) and a :class:`Reproduction` record naming the paper,
the table or figure, and what differs from the paper at each scale. :meth:`Reproduction.run`
does the rest: validates the arguments, times the computation, writes ``NAME.csv`` (csv
module, no pandas), ``NAME.png`` and ``README.md`` (the setting, our numbers beside the
paper's, every deviation from the paper and its reason) and returns a
:class:`ReproductionResult`.
"""

from __future__ import annotations

import csv
import datetime
import math
import textwrap
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Sequence

import torch

from nngauge._constraints import RandomSource
from nngauge._internal.usage import cpu_seconds
from nngauge._random import seed_of, torch_generator
from nngauge._vocabulary import renamed
from nngauge.errors import UnknownNameError, invalid, require_extra
from nngauge.reproduce._seeds import SeedOutcome, majority_verdict, seed_list, seed_rows, spread

Scale = Literal["small", "paper"]
SCALES: tuple[str, ...] = ("small", "paper")
SEED = RandomSource(keep_seed=True)
"""``Reproduction.run``'s generator: an int seed (named in the README) or a torch.Generator."""


SIGNIFICANCE = 0.05
"""The level a judge holds a p-value to: a statistic with a p-value below it is significant."""


@dataclass(frozen=True)
class Comparison:
    """One printed value next to the paper's: a record of the numbers a judge decides from.

    Judges and tests look a comparison up by its ``key`` (:meth:`Computed.compared`) and read
    its fields, never its text: the label (``quantity``) and the ``note`` are free text for the
    reader. The note printed beside the value (:attr:`printed_note`) is generated from the
    fields it states (the p-value and the count), so that the text and the numbers cannot
    disagree. ``key`` and the fields after ``note`` are keyword-only.

    Attributes:
        key: a stable identifier, unique within a :class:`Computed` (e.g. ``"rho"``,
            ``"b_rho"`` for panel B's): what judges and tests look up.
        quantity: what the value is, as printed (e.g. ``"A: NLC_tau(1) relu"``).
        ours: our value.
        paper: the value the paper prints (None where the paper prints none, e.g. a figure).
        note: how ours was obtained when it is not the paper's setting, and what the paper
            says of it; printed after the statistics.
        statistic: what kind of statistic ``ours`` is (``"spearman"``, ``"kendall"``,
            ``"slope"``, ...; None for a plain value).
        p_value: the two-sided p-value of ``statistic`` against no association (None where
            no test applies); the judge reads the sign from ``ours``.
        n: the number of observations ``ours`` is computed over (None: not stated).
    """

    key: str = field(kw_only=True)
    quantity: str
    ours: float
    paper: Optional[float] = None
    note: str = ""
    statistic: Optional[str] = field(default=None, kw_only=True)
    p_value: Optional[float] = field(default=None, kw_only=True)
    n: Optional[int] = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.p_value is not None and self.statistic is None:
            raise invalid(f"Comparison {self.key!r}", "the statistic a p-value belongs to",
                          f"p_value={self.p_value!r} with statistic=None",
                          "name the statistic (e.g. statistic='spearman')")

    @property
    def printed_statistics(self) -> str:
        """The p-value (3 significant digits) and the count where the comparison has them, as
        printed: ``"p = 0.0123, n = 64"`` ("" when it has neither)."""
        return ", ".join(part for part in (
            "" if self.p_value is None else f"p = {self.p_value:.3g}",
            "" if self.n is None else f"n = {self.n}") if part)

    @property
    def printed_note(self) -> str:
        """The note as README.md, the index and ``nngauge reproduce`` print it: the
        :attr:`printed_statistics`, then ``note``.

        Example:
            >>> Comparison("Spearman rho", -0.93, key="rho", statistic="spearman",
            ...            p_value=2.1449e-06, n=14, note="the figure: rho < 0").printed_note
            'p = 2.14e-06, n = 14; the figure: rho < 0'
        """
        return "; ".join(part for part in (self.printed_statistics, self.note) if part)

    def significant(self, level: float = SIGNIFICANCE) -> bool:
        """Whether the p-value is below ``level`` (False for a NaN p-value).

        Raises:
            InvalidInputError: the comparison has no p-value.
        """
        if self.p_value is None:
            raise invalid(f"Comparison {self.key!r}.significant()", "a comparison with a "
                          "p-value", "p_value=None", "ask a comparison that has a p-value")
        return self.p_value < level


VERDICTS: tuple[str, ...] = ("reproduced", "qualitatively", "differs", "paper error")
"""How a rebuilt figure compares with the paper: ``"reproduced"`` (the claim holds and the
paper's printed numbers are matched where it prints them), ``"qualitatively"`` (the claim holds
at our scale, the numbers differ as the differences explain), ``"differs"`` (the claim does
not hold here) or ``"paper error"`` (the paper's numbers are rebuilt, but a claim it makes of
them is contradicted by its own printed numbers or by exact values: the reason gives the
evidence). One vocabulary for every judge: a judge that finds a failed claim never says
"reproduced"."""


@dataclass(frozen=True)
class Verdict:
    """A reproduction's judgement of its own numbers against the paper's claim.

    Attributes:
        status: one of :data:`VERDICTS`.
        reason: why, with the numbers that decide it.
        software_check: True when only a software bug could fail the judged claim (a count
            against a proven bound, a deterministic closed form): the verdict then checks
            nngauge, not the paper, and every output labels it so (:attr:`label`).
    """

    status: str
    reason: str
    software_check: bool = False

    @property
    def label(self) -> str:
        """The status as printed: with "(software check, not evidence)" where it is one."""
        return self.status + (" (software check, not evidence)" if self.software_check else "")

    def __post_init__(self) -> None:
        if self.status not in VERDICTS:
            raise ValueError(f"Verdict status must be one of {VERDICTS}, got {self.status!r}")


@dataclass(frozen=True)
class Computed:
    """What a reproduction's ``compute`` returns.

    Attributes:
        columns: CSV header.
        rows: CSV rows, one tuple per row, in column order.
        comparison: values to print, beside the paper's where it prints them, with distinct
            keys.
        extra: anything the plot needs beyond the rows (e.g. settings), never written.

    Raises:
        InvalidInputError: two comparisons share a key.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    comparison: tuple[Comparison, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def column(self, name: str) -> list[Any]:
        """The values of one column, in row order."""
        index = self.columns.index(name)
        return [row[index] for row in self.rows]

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts keyed by column."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def __post_init__(self) -> None:
        keys = [c.key for c in self.comparison]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise invalid("Computed", "comparisons with distinct keys",
                          f"the keys {repeated} more than once", "give each comparison its own "
                          "key")

    def compared(self, key: str) -> Comparison:
        """The comparison whose key is ``key``.

        Raises:
            UnknownNameError: no comparison has that key (the message lists the known ones).
        """
        for comparison in self.comparison:
            if comparison.key == key:
                return comparison
        raise UnknownNameError(
            f"Computed.compared() expected a comparison key in "
            f"{[c.key for c in self.comparison]}; got {key!r}. Fix: look up one of those keys "
            "(the comparison's key, not its printed label).")


@dataclass(frozen=True)
class ReproductionResult:
    """The outcome of :meth:`Reproduction.run`.

    Attributes:
        name: the reproduction's name; scale: ``"small"`` or ``"paper"``.
        computed: the numbers (columns, rows, comparison).
        differences: what differs from the paper at this scale (data, scale, anything not
            rebuilt).
        csv_path, png_path, readme_path: the files written.
        seconds: wall-clock time of the computation and the files.
        verdict: the reproduction's judgement against the paper's claim; at several seeds
            the majority's (:func:`nngauge.reproduce._seeds.majority_verdict`).
        warnings: the warnings its study's workers raised, each kind once with the number of
            units that raised it (:func:`nngauge.studies.warning_lines`); stated in the README
            beside the verdict.
        per_seed: every seed's numbers and verdict, the first being ``computed``'s (one
            entry at one seed); ``seeds_csv_path`` their table (None at one seed).
    """

    name: str
    scale: str
    computed: Computed
    differences: tuple[str, ...]
    csv_path: Path
    png_path: Path
    seconds: float
    readme_path: Optional[Path] = None
    verdict: Optional[Verdict] = None
    warnings: tuple[str, ...] = ()
    per_seed: tuple[SeedOutcome, ...] = ()
    seeds_csv_path: Optional[Path] = None

    def spread(self, key: str) -> Optional[tuple[float, float]]:
        """The smallest and largest value of comparison ``key`` over the seeds (None at one
        seed)."""
        return spread(self.per_seed, key)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (rows as dicts keyed by column)."""
        columns = self.computed.columns
        return {
            "name": self.name, "scale": self.scale, "seconds": self.seconds,
            "csv_path": str(self.csv_path), "png_path": str(self.png_path),
            "readme_path": None if self.readme_path is None else str(self.readme_path),
            "differences": list(self.differences),
            "rows": [dict(zip(columns, row)) for row in self.computed.rows],
            "comparison": [c.__dict__ for c in self.computed.comparison],
            "verdict": None if self.verdict is None else self.verdict.__dict__,
            "per_seed": [{"seed": outcome.seed, "verdict": None if outcome.verdict is None
                          else outcome.verdict.__dict__} for outcome in self.per_seed],
        }


def _seed_or_default(seed: Optional[int]) -> int:
    """seed=None (the default generator) becomes generator=0; an int passes as it is."""
    return 0 if seed is None else seed


def _seed_with_generator(seed: Optional[int], generator: Any) -> Any:
    """seed= beside generator= (the seed the generator was made with, as run() asked):
    the int seed alone, whose fresh generator draws the same numbers."""
    return generator if seed is None else seed


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
        claim: the paper's claim that the figure or table shows, in one sentence.
        judge: ``judge(computed) -> Verdict``: whether our numbers bear the claim out, read
            from the rows and from the comparisons' fields (by key, never from their text).
        pages: ``pages(computed, out_dir) -> Path``: writes one more file beside the CSV and
            the PNG (e.g. an HTML page of many figures), named in the README; None: none.
        n_seeds: how many consecutive seeds :meth:`run` computes and judges by default: 3 for a
            statistical reproduction (its verdict rests on random draws: sampled architectures,
            training, random directions), 1 for a deterministic one or where three would cost
            hours (``differences`` then says so).
    """

    name: str
    paper: str
    target: str
    description: str
    differences: Mapping[str, tuple[str, ...]]
    small_runtime: str
    compute: Callable[[str, torch.Generator], Computed] = field(repr=False)
    plot: Callable[[Computed, Any], None] = field(repr=False)
    claim: str = ""
    judge: Optional[Callable[[Computed], Verdict]] = field(default=None, repr=False)
    pages: Optional[Callable[[Computed, Path], Path]] = field(default=None, repr=False)
    n_seeds: int = 1

    @renamed(seed=("generator", _seed_or_default, _seed_with_generator))
    def run(self, out_dir: str | Path, *, scale: Scale = "small",
            generator: int | torch.Generator = 0,
            n_seeds: Optional[int] = None) -> ReproductionResult:
        """Compute, write ``out_dir/NAME.csv``, ``NAME.png`` and ``README.md``, return the
        result.

        At several seeds (``generator, generator + 1, ...``) each seed is computed and judged;
        the CSV, PNG and the values printed are the first seed's, each value with its spread
        over the seeds, the verdict the majority's with how many seeds agree, and
        ``NAME_seeds.csv`` holds every seed's verdict and values.

        Args:
            out_dir: directory for the files (created when missing).
            scale: ``"small"`` (default: minutes at most on 2 cores) or ``"paper"`` (the
                paper's sizes where they can be rebuilt: long).
            generator: seeds everything random: an int seed (default 0), named in the README
                as ``nngauge reproduce --seed N``, or a torch.Generator (the README then says
                the caller seeded it).
            n_seeds: how many seeds (None: :attr:`n_seeds` for an int ``generator``, 1 for a
                torch.Generator, whose one stream the caller seeded).

        Raises:
            InvalidInputError: an unknown scale, an ``out_dir`` that is a file, ``n_seeds``
                not a positive int, or ``n_seeds > 1`` with a torch.Generator.
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
        if not SEED.accepts(generator):
            raise invalid(where, f"generator {SEED.expected()}", f"generator={generator!r}",
                          "pass e.g. generator=0 (the default)")
        seed = None if isinstance(generator, torch.Generator) else generator
        count = self._seed_count(seed, n_seeds)
        start, cpu_start = time.perf_counter(), cpu_seconds()
        collected: dict[str, int] = {}
        token = _WORKER_WARNINGS.set(collected)
        try:
            outcomes = []
            for each in (None,) if seed is None else seed_list(seed, count):
                computed = self.compute(scale, torch_generator(generator if each is None
                                                               else each))
                verdict = self.judge(computed) if self.judge is not None else None
                outcomes.append(SeedOutcome(each, computed, verdict))
        finally:
            _WORKER_WARNINGS.reset(token)
        from nngauge.studies._executors import warning_lines

        warned = tuple(warning_lines(collected))
        computed, verdict = outcomes[0].computed, majority_verdict(outcomes)
        out.mkdir(parents=True, exist_ok=True)
        csv_path, png_path = out / f"{self.name}.csv", out / f"{self.name}.png"
        write_csv(csv_path, computed.columns, computed.rows)
        seeds_csv = None
        if len(outcomes) > 1:
            seeds_csv = out / f"{self.name}_seeds.csv"
            write_csv(seeds_csv, *seed_rows(outcomes))
        self._save_png(computed, png_path)
        page = self.pages(computed, out) if self.pages is not None else None
        seconds = time.perf_counter() - start
        cpu = None if cpu_start is None else cpu_seconds() - cpu_start
        readme_path = out / "README.md"
        readme_path.write_text(self.readme(computed, scale, seed, seconds, verdict, page,
                                           cpu_seconds=cpu, warnings=warned,
                                           per_seed=tuple(outcomes)), encoding="utf-8")
        return ReproductionResult(self.name, scale, computed, tuple(self.differences[scale]),
                                  csv_path, png_path, seconds, readme_path, verdict, warned,
                                  tuple(outcomes), seeds_csv)

    def _seed_count(self, seed: Optional[int], n_seeds: Optional[int]) -> int:
        """How many seeds a run computes (validated; see :meth:`run`)."""
        where = f"reproduce {self.name}"
        if n_seeds is not None and (isinstance(n_seeds, bool) or not isinstance(n_seeds, int)
                                    or n_seeds < 1):
            raise invalid(where, "n_seeds, a positive int (or None: the reproduction's "
                          "default)", f"n_seeds={n_seeds!r}", "pass e.g. n_seeds=3")
        if seed is None:
            if n_seeds is not None and n_seeds > 1:
                raise invalid(where, "an int seed to run at several seeds", f"n_seeds={n_seeds} "
                              "with a torch.Generator", "pass generator=0 (seeds 0, 1, ...)")
            return 1
        return self.n_seeds if n_seeds is None else n_seeds

    def readme(self, computed: Computed, scale: str, seed: Optional[int], seconds: float,
               verdict: Optional[Verdict] = None, page: Optional[Path] = None, *,
               cpu_seconds: Optional[float] = None, warnings: Sequence[str] = (),
               per_seed: Sequence[SeedOutcome] = ()) -> str:
        """The Markdown page written beside the CSV and the PNG: what was rebuilt and how (its
        wall-clock time, and the CPU time of this process and its finished workers, which
        other load on the machine does not inflate), the paper's claim and our verdict, our
        numbers beside the paper's, and every deviation from the paper with its reason."""
        command = f"nngauge reproduce {self.name} --scale {scale}"
        command += f" --seed {seed}" if seed is not None else ""
        several = len(per_seed) > 1
        command += f" --seeds {len(per_seed)}" if several else ""
        lines = [f"# {self.name}: {self.target}", "", f"{self.paper}, {self.target}.", "",
                 f"{self.description}.", ""]
        if self.claim:
            lines += [f"**The paper's claim:** {self.claim}", ""]
        if verdict is not None:
            lines += [f"**Verdict: {verdict.label}.** {verdict.reason}", ""]
        if warnings:
            lines += ["**Warnings from the study's workers** (each kind once, with the number "
                      "of units that raised it; the numbers above include those units):", ""]
            lines += [f"- {_md(line)}" for line in warnings] + [""]
        lines += [
                 f"Rebuilt by `{command}` in {seconds:.1f} s on "
                 f"{datetime.date.today().isoformat()}"
                 + ("" if cpu_seconds is None else f" ({cpu_seconds:.0f} s of CPU)")
                 + ("" if seed is not None else " (seeded by the caller's generator)") + ".",
                 "", f"Files: `{self.name}.csv` (columns: {', '.join(computed.columns)}; "
                 f"{len(computed.rows)} rows{f', seed {seed}' if several else ''}), "
                 f"`{self.name}.png`" + (f", `{page.name}`" if page is not None else "")
                 + (f" and `{self.name}_seeds.csv` (every seed's verdict and values)"
                    if several else "") + ".", ""]
        if computed.comparison:
            title = (f"## Our numbers beside the paper's (seed {seed}; the spread over "
                     f"{len(per_seed)} seeds beside)" if several
                     else "## Our numbers beside the paper's")
            lines += [title, "", "| quantity | ours | " + ("over seeds | " if several else "")
                      + "paper | note |", "| --- | --- | " + ("--- | " if several else "")
                      + "--- | --- |"]
            lines += [f"| {_md(c.quantity)} | {format_number(c.ours)} | "
                      + (f"{format_spread(spread(per_seed, c.key))} | " if several else "")
                      + f"{'-' if c.paper is None else format_number(c.paper)} | "
                      f"{_md(c.printed_note)} |"
                      for c in computed.comparison]
            lines.append("")
        lines += [f"## What differs from the paper ({scale} scale), and why", ""]
        lines += [f"- {line}" for line in self.differences[scale]]
        return "\n".join(lines) + "\n"

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
        return repr(float(value))  # numpy's float64 too, without its "np.float64(...)"
    return "" if value is None else value


def format_number(value: Any) -> str:
    """A value as the README and the index print it (4 significant digits for floats)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_spread(interval: Optional[tuple[float, float]]) -> str:
    """A spread over seeds as printed: ``"0.51 to 0.79"`` (``"-"`` when there is none)."""
    return "-" if interval is None else \
        f"{format_number(interval[0])} to {format_number(interval[1])}"


def _md(text: str) -> str:
    """A table cell: pipes escaped, one line."""
    return " ".join(str(text).replace("|", "\\|").split())


def digit_splits(generator: torch.Generator):
    """scikit-learn's digits split 60/20/20 at random (seeded from ``generator``) and
    standardized per pixel on the training part: (train, validation, test)."""
    from nngauge.data import digits, split, standardize

    splits, _ = standardize(*split(digits(), (0.6, 0.2, 0.2), generator=seed_of(generator)))
    return splits


_STUDY_EXECUTOR: ContextVar[dict] = ContextVar("nngauge_study_executor", default={})


@contextmanager
def study_executor(address: Optional[str] = None) -> Iterator[None]:
    """Within: the reproductions that run a study (:func:`run_reproduction_study`) send its
    units to the Ray cluster at ``address`` ("auto": the one this machine belongs to; None:
    the local process pool, the default), as ``nngauge reproduce --ray ADDRESS`` does."""
    token = _STUDY_EXECUTOR.set({} if address is None else {"executor": "ray",
                                                            "address": address})
    try:
        yield
    finally:
        _STUDY_EXECUTOR.reset(token)


_WORKER_WARNINGS: ContextVar[Optional[dict]] = ContextVar("nngauge_worker_warnings",
                                                          default=None)
"""Within :meth:`Reproduction.run`: ``{text: units}`` of the warnings its studies' workers
raised."""


def run_reproduction_study(spec, url: str, workers: int):
    """:func:`nngauge.studies.run_study` of a reproduction's study: on the local process pool
    with ``workers`` processes (0: every CPU), or on Ray inside :func:`study_executor`. The
    warnings its units raised are added to the running reproduction's (its README states
    each kind once)."""
    from nngauge.studies import run_study

    options = _STUDY_EXECUTOR.get()
    summary = run_study(spec, url, **(options or {"workers": workers or None}))
    collected = _WORKER_WARNINGS.get()
    if collected is not None:
        for text, count in summary.warnings.items():
            collected[text] = collected.get(text, 0) + count
    return summary
