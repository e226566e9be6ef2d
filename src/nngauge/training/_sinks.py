"""Where a :class:`~nngauge.training.Tracker` writes its rows: CSV, JSON lines, TensorBoard.

A sink has ``write(step, values)`` (``values``: column name -> float) and ``close()``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Union

from nngauge.errors import invalid, require_extra

PathLike = Union[str, Path]


class Sink(Protocol):
    """Anything with ``write(step, values)`` and ``close()``."""

    def write(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class CSVSink:
    """One CSV row per measured step: a ``step`` column, then the measure columns.

    The header is that of the first row; when a later row brings new columns (a field that
    was None before, a measure that skipped a layer), the file is rewritten once with them
    appended to the header, and cells a row has no value for are left empty.
    """

    def __init__(self, path: PathLike) -> None:
        self.path, self._file, self._writer = Path(path), None, None

    def write(self, step: int, values: Mapping[str, float]) -> None:
        row = {"step": step, **values}
        if self._writer is None:
            self._open("w", list(row))
            self._writer.writeheader()
        elif not row.keys() <= set(self._writer.fieldnames):
            self._widen([k for k in row if k not in self._writer.fieldnames])
        self._writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
        self._file.flush()

    def _open(self, mode: str, fieldnames: list[str]) -> None:
        self._file = self.path.open(mode, newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=fieldnames, restval="")

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file with ``new`` columns appended to the header."""
        fieldnames = [*self._writer.fieldnames, *new]
        self._file.close()
        with self.path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        self._open("w", fieldnames)
        self._writer.writeheader()
        self._writer.writerows(rows)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class JSONLSink:
    """One JSON object per line and measured step: ``{"step": ..., column: value, ...}``.

    Non-finite values are written as null.
    """

    def __init__(self, path: PathLike) -> None:
        self.path, self._file = Path(path), None

    def write(self, step: int, values: Mapping[str, float]) -> None:
        if self._file is None:
            self._file = self.path.open("w")
        row = {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
               for k, v in values.items()}
        self._file.write(json.dumps({"step": step, **row}) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class TensorBoardSink:
    """Scalars in a TensorBoard event file (``torch.utils.tensorboard.SummaryWriter``).

    Each column is a tag, the step the global step. TensorBoard stores scalars as float32.

    Args:
        log_dir: the run directory (ignored when ``writer`` is given).
        writer: an existing ``SummaryWriter`` to share (not closed by :meth:`close`).
    """

    def __init__(self, log_dir: Optional[PathLike] = None, *, writer: Any = None) -> None:
        self.log_dir, self._writer, self._owned = log_dir, writer, writer is None

    def write(self, step: int, values: Mapping[str, float]) -> None:
        if self._writer is None:
            require_extra("tensorboard", "tensorboard", "TensorBoardSink")
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(None if self.log_dir is None else str(self.log_dir))
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, global_step=step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            if self._owned:
                self._writer.close()


def as_sink(spec: Any) -> Sink:
    """A sink object as is; a path ending in .csv or .jsonl as a file sink."""
    if hasattr(spec, "write") and hasattr(spec, "close"):
        return spec
    if isinstance(spec, (str, Path)) and Path(spec).suffix in (".csv", ".jsonl"):
        return CSVSink(spec) if Path(spec).suffix == ".csv" else JSONLSink(spec)
    raise invalid("Tracker()", "sinks: CSVSink, JSONLSink, TensorBoardSink or a .csv/.jsonl path",
                  repr(spec), "pass e.g. sinks=['run.csv', TensorBoardSink('runs/a')]")
