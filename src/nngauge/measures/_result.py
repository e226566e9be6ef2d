"""The shape every measure result shares: frozen dataclasses with to_dict / to_frame / plot.

A result has summary fields and, where the measure has one, a per-layer breakdown: a tuple of
frozen row dataclasses in ``layers``. ``to_frame()`` turns the rows (or the summary, when there
are none) into a pandas DataFrame; pandas and matplotlib are imported only when asked for.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from nngauge.errors import require_extra


def plain(value: Any) -> Any:
    """Tensors, arrays, numpy scalars and nested dataclasses as plain Python values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.repr}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class MeasureResult:
    """Mixin for frozen result dataclasses (fields with ``repr=False`` stay out of to_dict)."""

    def to_dict(self) -> dict[str, Any]:
        """Every reported field as plain Python (lists for arrays, dicts for rows)."""
        return plain(self)

    def to_frame(self):
        """The per-layer breakdown as a pandas DataFrame (one row per layer), or the summary
        as a one-row frame for measures without layers. Needs pandas (``nngauge[report]``)."""
        require_extra("pandas", "report", "to_frame()")
        import pandas as pd

        rows = getattr(self, "layers", None)
        if rows:
            return pd.DataFrame([plain(row) for row in rows])
        summary = {k: v for k, v in self.to_dict().items() if not isinstance(v, (list, dict))}
        return pd.DataFrame([summary])


def quadratic_mean(sum_of_squares: float, count: int) -> float:
    """Q = sqrt(E[v^2]) from a running sum of squares."""
    return math.sqrt(sum_of_squares / count) if count else math.nan


def row_named(rows, name: str, what: str):
    """The row of ``rows`` whose ``.name`` is ``name`` (results' ``__getitem__``), or a
    KeyError listing the names there are."""
    for row in rows:
        if row.name == name:
            return row
    raise KeyError(f"{name!r} is not {what}; known: {[row.name for row in rows]}")
