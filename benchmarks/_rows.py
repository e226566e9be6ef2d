"""One row of ``benchmarks/RESULTS.md``: what each benchmark script records for ``make bench``.

A benchmark prints its own table for a reader; it also calls :func:`record` once per ratio it
measured. ``record`` writes nothing unless ``run_all.py`` asked for rows (the environment
variable ``NNGAUGE_BENCH_ROWS`` names a JSON-lines file), so the scripts stay usable alone.

Every ratio is a speed-up, the baseline's (or peer's) time over nngauge's, from one run in
which both sides were warm and interleaved (A, B, A, B, ...; medians of >= 3 repeats): > 1
means nngauge is faster. ``goal`` is the speed-up the issue asks for (None: no goal, a
measurement only). A table that is not a ratio (cost vs depth, a report's seconds per section)
goes through :func:`record_table`; :func:`interleaved` times runs the way a ratio needs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from typing import Callable, Optional

ROWS_ENV = "NNGAUGE_BENCH_ROWS"


def load() -> float:
    """The 1-minute load average of the machine (0.0 where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return 0.0


def command() -> str:
    """The command that ran the calling script, as a user would type it."""
    return "python " + shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def record(measure: str, *, ours_s: float, baseline: str, baseline_s: float,
           setting: str, load_before: float, load_after: float,
           goal: Optional[float] = None, threads: Optional[int] = None) -> None:
    """Append one result row (a no-op unless ``NNGAUGE_BENCH_ROWS`` names a file).

    Args:
        measure: what was timed, e.g. "NNGP+NTK, erf".
        ours_s: nngauge's median seconds.
        baseline: the baseline or peer, e.g. "neural-tangents 0.6.5 (jitted, warm)".
        baseline_s: its median seconds, measured in the same interleaved run.
        setting: the problem size, e.g. "1,000 x 50 inputs, 20 layers, float64".
        load_before, load_after: the load average around the timed runs.
        goal: the speed-up asked for (baseline / nngauge), or None.
        threads: torch's intra-op threads during the run (None: torch's current setting).
    """
    path = os.environ.get(ROWS_ENV)
    if not path:
        return
    if threads is None:
        import torch
        threads = torch.get_num_threads()
    row = {
        "measure": measure, "setting": setting, "ours_s": float(ours_s),
        "baseline": baseline, "baseline_s": float(baseline_s),
        "speedup": float(baseline_s) / float(ours_s), "goal": goal,
        "load": [round(load_before, 2), round(load_after, 2)], "threads": int(threads),
        "command": command(),
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


_script_command = command  # record_table's ``command`` argument shadows the function


def record_table(title: str, columns: list[str], rows: list[list], command: Optional[str] = None,
                 *, setting: str = "", load_before: Optional[float] = None,
                 load_after: Optional[float] = None, threads: Optional[int] = None) -> None:
    """Append one table that is not a ratio (a no-op unless ``NNGAUGE_BENCH_ROWS`` names a file),
    e.g. cost vs depth, or a report's seconds per section against a target.

    The JSON line has the key ``table`` (true), which ratio rows from :func:`record` lack, and
    ``title``, ``columns``, ``rows``, ``setting``, ``load``, ``threads``, ``command``.

    Args:
        title: what the table shows, e.g. "transitions: cost vs depth, 500 pieces".
        columns: the column headers.
        rows: one list of cells per row, as many cells as ``columns``.
        command: the command that produced it (None: the calling script's command).
        setting: the problem size and anything a reader needs to read the cells.
        load_before, load_after: the load average around the timed runs (None: not measured).
        threads: torch's intra-op threads during the run (None: torch's current setting).
    """
    path = os.environ.get(ROWS_ENV)
    if not path:
        return
    widths = {len(row) for row in rows}
    if widths - {len(columns)}:
        raise ValueError(f"record_table({title!r}): every row needs {len(columns)} cells (one "
                         f"per column {columns}), got rows of {sorted(widths)} cells; pad or "
                         "trim the rows")
    if threads is None:
        import torch
        threads = torch.get_num_threads()
    loads = [load_before, load_after]
    table = {
        "table": True, "title": title, "columns": list(columns),
        "rows": [list(row) for row in rows], "setting": setting,
        "load": None if None in loads else [round(value, 2) for value in loads],
        "threads": int(threads),
        "command": command if command is not None else _script_command(),
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(table) + "\n")


def repeats(text: str) -> int:
    """argparse type of ``--repeats``: an integer >= 3 (a recorded ratio is of medians of >= 3
    interleaved runs)."""
    value = int(text)
    if value < 3:
        raise argparse.ArgumentTypeError(f"must be >= 3 (medians of >= 3 interleaved runs), got "
                                         f"{value}")
    return value


def interleaved(runs: dict[str, Callable[[], object]], repeats: int
                ) -> tuple[dict[str, tuple[float, object]], tuple[float, float]]:
    """Time ``runs`` the way a recorded ratio needs: one untimed warm-up call of each, then the
    runs taking turns (A, B, A, B, ...) ``repeats`` times.

    Returns (name -> (median seconds, last value), (load before, load after) the timed runs).
    """
    for run in runs.values():
        run()
    before = load()
    times: dict[str, list[float]] = {name: [] for name in runs}
    values: dict[str, object] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            values[name] = run()
            times[name].append(time.perf_counter() - start)
    after = load()
    return {name: (statistics.median(times[name]), values[name]) for name in runs}, (before, after)
