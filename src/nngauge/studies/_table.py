"""A stored study as one table: a row per unit, its settings, its results and its measures.

:func:`load_table` reads any study back as the pandas DataFrame the scoring functions
(:func:`nngauge.studies.granulated_kendall`, :func:`nngauge.studies.conditional_mutual_information`)
and the study report take: a study over the user's builder (one row per candidate and seed:
its keyword arguments, the metrics of its training, its measures, the stage and error of a
candidate that failed), a model zoo (:func:`nngauge.studies.network_table`'s rows), or a
study of ``[architectures]`` (one row per unit: its architecture's settings, learning rate,
errors and measures).
"""

from __future__ import annotations

import json
import math
from typing import Optional

from nngauge.errors import require_extra
from nngauge.studies._db import DEFAULT_URL
from nngauge.studies._spec import ordered_columns

LEADING = ("key", "candidate", "seed")
"""The first columns of a builder study's table."""
TRAILING = ("stage", "error", "seconds")
"""The columns after the arguments and metrics: where and why a candidate failed, and its
time."""


def load_table(db: str = DEFAULT_URL, study: Optional[str] = None):
    """A stored study as a pandas DataFrame, one row per unit.

    For a study over the user's builder: ``key``, ``candidate`` (the point's index),
    ``seed``, the builder's keyword arguments (one column each), the training's metrics (the
    user's train function's, or fit's: train_accuracy, test_accuracy, train_error,
    test_error, train_loss, test_loss, gap, steps, epochs, diverged), ``stage`` and
    ``error`` (None unless a stage raised), ``seconds``, then the measure columns (at
    initialization under their names, after training with the suffix ``_after``; NaN where a
    candidate failed first). ``attrs["hyperparameters"]`` lists the keyword arguments that
    vary (what the scoring functions condition on), ``attrs["kind"]`` is ``"builder"``,
    ``"zoo"`` or ``"architectures"``, ``attrs["study_id"]`` and ``attrs["name"]`` name the
    study.

    A model zoo gives :func:`nngauge.studies.network_table`'s table; a study of
    ``[architectures]`` one row per unit (``kind`` init or train) with the architecture's
    settings (width, depth, activation, ...), its learning rate and errors, and its measures.

    Args:
        db: SQLAlchemy URL of the results database.
        study: the study's name or id; default: the only study in the database.

    Raises:
        InvalidInputError: no database, or not exactly one study matching ``study``.

    Example:
        >>> import os, tempfile, textwrap
        >>> from nngauge.studies import load_table, parse_spec, run_study
        >>> folder = tempfile.mkdtemp()
        >>> builder = os.path.join(folder, "file.py")
        >>> _ = open(builder, "w").write(textwrap.dedent('''
        ...     import torch
        ...     def build(depth, width):
        ...         layers = [torch.nn.Linear(64, width), torch.nn.ReLU()]
        ...         for _ in range(depth - 1):
        ...             layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        ...         return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
        ...     '''))
        >>> spec = parse_spec({"data": {"source": "digits", "n": 300},
        ...                    "architectures": {"builder": builder + ":build",
        ...                                      "grid": {"depth": [1, 2], "width": [8]}},
        ...                    "measures": {"names": ["n_params"]},
        ...                    "training": {"max_steps": 10}})
        >>> url = "sqlite:///" + os.path.join(folder, "study.db")
        >>> _ = run_study(spec, url, workers=1)
        >>> table = load_table(url)
        >>> list(table.depth), table.attrs["hyperparameters"], list(table.n_params)
        ([1, 2], ['depth'], [610.0, 682.0])
    """
    from nngauge.studies._db import open_db
    from nngauge.studies._summarize import study_spec

    require_extra("pandas", "report", "load_table()")
    engine = open_db(db, create=False)
    try:
        with engine.connect() as conn:
            study_id, name, spec = study_spec(conn, study, "load_table()")
            if "grid" in spec:
                from nngauge.studies._zoo import network_table

                table = network_table(db, study=study_id)
                table.attrs["kind"] = "zoo"
                return table
            if "builder" in spec:
                table = _builder_table(conn, study_id)
            else:
                table = _units_table(conn, study_id)
    finally:
        engine.dispose()
    table.attrs.update(study_id=study_id, name=name)
    return table


def measured_columns(conn, study_id: str) -> tuple[dict[str, dict], list[str]]:
    """unit key -> {measure column: value} of a study, and the columns in the catalogue's
    order (at initialization, then after training)."""
    from sqlalchemy import select

    from nngauge.studies._db import measures, units

    values = conn.execute(select(measures.c.unit_key, measures.c.name, measures.c.value)
                          .join(units, units.c.key == measures.c.unit_key)
                          .where(units.c.study_id == study_id)).all()
    by_key: dict[str, dict] = {}
    for key, column, value in values:
        by_key.setdefault(key, {})[column] = math.nan if value is None else value
    return by_key, ordered_columns(c for row in by_key.values() for c in row)


def _builder_table(conn, study_id: str):
    import pandas as pd
    from sqlalchemy import select

    from nngauge.studies._db import architectures, candidates, units

    rows = conn.execute(select(candidates, units.c.seconds)
                        .join(units, units.c.key == candidates.c.key)
                        .where(candidates.c.study_id == study_id)
                        .order_by(candidates.c.arch_index, candidates.c.seed)).mappings().all()
    points = [json.loads(d) for d in conn.execute(
        select(architectures.c.description).where(architectures.c.study_id == study_id)
        .order_by(architectures.c.arch_index)).scalars()]
    by_key, columns = measured_columns(conn, study_id)
    keys = list(dict.fromkeys(k for point in points for k in point))
    metrics = [json.loads(row["metrics"]) for row in rows]
    metric_names = list(dict.fromkeys(name for m in metrics for name in m))
    records = []
    for row, metric in zip(rows, metrics):
        arguments = json.loads(row["arguments"])
        measured = by_key.get(row["key"], {})
        records.append({"key": row["key"], "candidate": row["arch_index"], "seed": row["seed"],
                        **{k: arguments.get(k) for k in keys},
                        **{m: math.nan if metric.get(m) is None else metric[m]
                           for m in metric_names},
                        "stage": row["stage"], "error": row["error"], "seconds": row["seconds"],
                        **{c: measured.get(c, math.nan) for c in columns}})
    table = pd.DataFrame(records, columns=[*LEADING, *keys, *metric_names, *TRAILING, *columns])
    table.attrs.update(kind="builder", hyperparameters=[
        k for k in keys if len({repr(p.get(k)) for p in points}) > 1])
    return table


def _units_table(conn, study_id: str):
    import pandas as pd
    from sqlalchemy import select

    from nngauge.studies._db import architectures, units

    rows = conn.execute(select(units).where(units.c.study_id == study_id)
                        .order_by(units.c.arch_index, units.c.seed, units.c.kind,
                                  units.c.lr_index)).mappings().all()
    configs = {index: json.loads(config) for index, config in conn.execute(
        select(architectures.c.arch_index, architectures.c.config)
        .where(architectures.c.study_id == study_id)).all()}
    by_key, columns = measured_columns(conn, study_id)
    settings = list(dict.fromkeys(k for config in configs.values() for k in config
                                  if not isinstance(config[k], (list, dict))))
    records = []
    for row in rows:
        config = configs.get(row["arch_index"], {})
        measured = by_key.get(row["key"], {})
        records.append({"key": row["key"], "architecture": row["arch_index"],
                        "seed": row["seed"], "kind": row["kind"],
                        **{k: config.get(k) for k in settings},
                        **{k: row[k] for k in ("lr", "lr_index", "best_val_error", "test_error",
                                               "train_error", "epochs", "diverged", "seconds")},
                        **{c: measured.get(c, math.nan) for c in columns}})
    fixed = ["key", "architecture", "seed", "kind", *settings, "lr", "lr_index",
             "best_val_error", "test_error", "train_error", "epochs", "diverged", "seconds"]
    table = pd.DataFrame(records, columns=fixed + columns)
    table.attrs.update(kind="architectures", hyperparameters=[
        k for k in settings if len({repr(c.get(k)) for c in configs.values()}) > 1])
    return table


__all__ = ["load_table"]
