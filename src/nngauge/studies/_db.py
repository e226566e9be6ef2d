"""The results database (SQLAlchemy 2 Core): any SQLAlchemy URL, SQLite by default.

Tables:

- ``studies``: one row per spec (``study_id`` = hash of the spec's content), its name and JSON;
- ``architectures``: per study and index, the ``mlp`` config and sampler description (JSON)
  and whether it has skip connections;
- ``units``: one row per finished unit (primary key: the unit key), its kind, architecture,
  seed, learning rate and, for training units, the errors;
- ``measures``: one row per (unit, measure column) of an init unit.

The driver writes each finished unit (its ``units`` row and its ``measures`` rows) in one
transaction: a unit is either fully in the database or absent, and a rerun skips exactly the
units present.
"""

from __future__ import annotations

import json
import math
from typing import Iterable, Optional

from sqlalchemy import (Boolean, Column, Float, ForeignKey, Integer, MetaData, String, Table,
                        Text, create_engine, select)
from sqlalchemy.engine import Engine

from nngauge.errors import InvalidInputError

DEFAULT_URL = "sqlite:///study.db"

metadata = MetaData()
studies = Table(
    "studies", metadata,
    Column("study_id", String(32), primary_key=True),
    Column("name", Text, nullable=False),
    Column("spec", Text, nullable=False),
)
architectures = Table(
    "architectures", metadata,
    Column("study_id", String(32), ForeignKey("studies.study_id"), primary_key=True),
    Column("arch_index", Integer, primary_key=True),
    Column("config", Text, nullable=False),
    Column("description", Text),
    Column("skip", Boolean, nullable=False),
)
units = Table(
    "units", metadata,
    Column("key", String(32), primary_key=True),
    Column("study_id", String(32), ForeignKey("studies.study_id"), nullable=False, index=True),
    Column("kind", String(8), nullable=False),
    Column("arch_index", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("lr", Float),
    Column("lr_index", Integer),
    Column("best_val_error", Float),
    Column("test_error", Float),
    Column("train_error", Float),
    Column("epochs", Integer),
    Column("diverged", Boolean),
    Column("seconds", Float, nullable=False),
)
measures = Table(
    "measures", metadata,
    Column("unit_key", String(32), ForeignKey("units.key"), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("value", Float),
)


def open_db(url: str, *, create: bool = True) -> Engine:
    """Open (and with ``create``, set up) the database at a SQLAlchemy URL.

    Raises:
        InvalidInputError: the URL is malformed, its driver is missing, or the database
            cannot be reached: one line, password hidden.

    Example:
        >>> engine = open_db("sqlite://")  # in memory
        >>> sorted(metadata.tables)
        ['architectures', 'measures', 'studies', 'units']
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    shown = url
    try:
        parsed = make_url(url)
        shown = parsed.render_as_string(hide_password=True)
        engine = create_engine(parsed)
        with engine.begin() as conn:
            if create:
                metadata.create_all(conn)
            elif not engine.dialect.has_table(conn, "units"):
                raise InvalidInputError(f"the study database expected the tables of a study run; "
                                        f"got none in {shown}. Fix: run `nngauge study run SPEC "
                                        f"--db {shown}` first.")
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInputError(f"the study database expected a SQLAlchemy URL that can be "
                                f"opened (e.g. {DEFAULT_URL}); got {shown!r}: {reason}. Fix: "
                                "check the URL, its folder and its driver.") from None
    return engine


def register_study(engine: Engine, spec, archs) -> None:
    """Record the study and its architectures (once; a rerun of the same spec adds nothing)."""
    with engine.begin() as conn:
        if conn.execute(select(studies.c.study_id)
                        .where(studies.c.study_id == spec.study_id)).first():
            return
        conn.execute(studies.insert().values(study_id=spec.study_id, name=spec.name,
                                             spec=json.dumps(spec.to_dict(), sort_keys=True)))
        conn.execute(architectures.insert(), [
            {"study_id": spec.study_id, "arch_index": a.index,
             "config": json.dumps(a.config, sort_keys=True),
             "description": None if a.description is None else json.dumps(a.description),
             "skip": a.skip} for a in archs])


def finished_keys(engine: Engine, keys: Iterable[str]) -> set[str]:
    """Those of ``keys`` whose unit is in the database."""
    keys = list(keys)
    found: set[str] = set()
    with engine.connect() as conn:
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            found.update(conn.execute(select(units.c.key).where(units.c.key.in_(chunk))).scalars())
    return found


def write_unit(engine: Engine, study_id: str, unit, result: dict) -> None:
    """Write one finished unit and its measures in a single transaction."""
    train = result.get("train") or {}
    with engine.begin() as conn:
        conn.execute(units.insert().values(
            key=unit.key, study_id=study_id, kind=unit.kind, arch_index=unit.arch_index,
            seed=unit.seed, lr=train.get("lr", unit.lr), lr_index=unit.lr_index,
            best_val_error=_number(train.get("best_val_error")),
            test_error=_number(train.get("test_error")),
            train_error=_number(train.get("train_error")), epochs=train.get("epochs"),
            diverged=train.get("diverged"), seconds=float(result.get("seconds", math.nan))))
        rows = [{"unit_key": unit.key, "name": name, "value": _number(value)}
                for name, value in sorted(result.get("measures", {}).items())]
        if rows:
            conn.execute(measures.insert(), rows)


def _number(value) -> Optional[float]:
    """Floats as stored: NaN becomes NULL (SQL has no NaN); +-inf kept where the backend can."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value
