"""benchmarks/_rows.py: what the benchmark scripts record for ``make bench`` (RESULTS.md)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

ROWS_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "_rows.py"


@pytest.fixture(scope="module")
def rows():
    """benchmarks/_rows.py imported by path (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_rows_under_test", ROWS_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(rows):
    rows.record("landscape 31 x 31", ours_s=2.0, baseline="loop over copies", baseline_s=5.0,
                setting="MLP 40-256-256-3", load_before=0.5, load_after=0.75, goal=5.0,
                threads=1)


def _table(rows):
    rows.record_table("cost vs depth", ["depth", "seconds"], [[2, 0.1], [3, 0.15]],
                      "python benchmarks/bench_transitions.py", setting="500 pieces",
                      load_before=1.0, load_after=1.25, threads=1)


def test_nothing_written_without_the_variable(rows, tmp_path, monkeypatch):
    """Without NNGAUGE_BENCH_ROWS, record and record_table write no file anywhere."""
    monkeypatch.delenv(rows.ROWS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    _record(rows)
    _table(rows)
    assert list(tmp_path.iterdir()) == []


def test_record_writes_one_json_row(rows, tmp_path, monkeypatch):
    """With the variable, record appends exactly one JSON line whose speedup is
    baseline_s / ours_s, with the loads, goal, threads and the script's command."""
    path = tmp_path / "rows.jsonl"
    monkeypatch.setenv(rows.ROWS_ENV, str(path))
    _record(rows)
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])
    assert row["speedup"] == pytest.approx(5.0 / 2.0)
    assert (row["measure"], row["baseline"], row["goal"]) == ("landscape 31 x 31",
                                                              "loop over copies", 5.0)
    assert (row["ours_s"], row["baseline_s"], row["load"], row["threads"]) == (2.0, 5.0,
                                                                             [0.5, 0.75], 1)
    assert row["command"].startswith("python ") and "table" not in row


def test_record_table_writes_one_json_table(rows, tmp_path, monkeypatch):
    """record_table appends one JSON line marked ``table`` with its title, columns, rows, loads
    and the given command; a second call appends a second line."""
    path = tmp_path / "rows.jsonl"
    monkeypatch.setenv(rows.ROWS_ENV, str(path))
    _table(rows)
    table = json.loads(path.read_text().splitlines()[0])
    assert table == {"table": True, "title": "cost vs depth", "columns": ["depth", "seconds"],
                     "rows": [[2, 0.1], [3, 0.15]], "setting": "500 pieces",
                     "load": [1.0, 1.25], "threads": 1,
                     "command": "python benchmarks/bench_transitions.py"}
    _record(rows)
    assert len(path.read_text().splitlines()) == 2


def test_record_table_rejects_ragged_rows(rows, tmp_path, monkeypatch):
    """A row with a different number of cells than columns is an error naming both counts."""
    monkeypatch.setenv(rows.ROWS_ENV, str(tmp_path / "rows.jsonl"))
    with pytest.raises(ValueError, match="2 cells"):
        rows.record_table("t", ["a", "b"], [[1, 2], [3]])


def test_interleaved_warms_then_alternates(rows):
    """interleaved calls each run once untimed, then A, B, A, B, ... ``repeats`` times, and
    returns each run's last value with the loads."""
    calls = []
    timed, loads = rows.interleaved({"a": lambda: calls.append("a") or 1,
                                     "b": lambda: calls.append("b") or 2}, 3)
    assert calls == ["a", "b"] * 4
    assert timed["a"][1] == 1 and timed["b"][1] == 2 and len(loads) == 2


def test_repeats_needs_three(rows):
    """--repeats below 3 is refused (a recorded ratio is a median of >= 3 runs)."""
    assert rows.repeats("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match=">= 3"):
        rows.repeats("2")
