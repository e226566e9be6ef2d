"""Shared by the scripts that write the README's generated sections from a run's files
(docs/write_fantastic.py, docs/write_predictors.py): copy the run's files into the repository
and replace the text between a section's two marker lines."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def two_decimals(text: str) -> str:
    """A number from a run's CSV as the README prints it ("-" for NaN)."""
    value = float(text)
    return "-" if value != value else f"{value:.2f}"


def keep_run(folder: Path, kept: Path, names: tuple[str, ...]) -> None:
    """Copy the run's files ``names`` that exist from ``folder`` into ``kept`` (unless the
    run is already there)."""
    if folder.resolve() == kept:
        return
    kept.mkdir(exist_ok=True)
    for name in names:
        if (folder / name).exists():
            shutil.copy2(folder / name, kept / name)


def write_section(begin: str, end: str, body: str) -> int:
    """Replace README.md's text between the lines ``begin`` and ``end`` with ``body``;
    returns the exit status (1, saying why, when the markers are missing)."""
    text = README.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        print(f"README.md has no {begin} ... {end} section", file=sys.stderr)
        return 1
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    README.write_text(f"{head}{begin}\n{body}\n{end}{tail}", encoding="utf-8")
    return 0
