"""The results database (SQLAlchemy 2 Core): any SQLAlchemy URL, SQLite by default.

Tables:

- ``studies``: one row per spec (``study_id`` = hash of the spec's content), its name and JSON;
- ``architectures``: per study and index, the ``mlp`` config and sampler description (JSON)
  and whether it has skip connections;
- ``units``: one row per finished unit (primary key: the unit key), its kind, architecture,
  seed, learning rate and, for training units, the errors;
- ``measures``: one row per (unit, measure column) of an init unit;
- ``claims``: one row per unit a run is running now (primary key: the unit key), its owner
  and lease (see :mod:`nngauge.studies._claims`). Added after the others: opening an older
  database for a run creates it, and leaves the other tables as they are;
- ``networks``: one row per finished ``network`` unit of a model zoo (``[grid]`` studies): its
  hyperparameters, one typed column each, and its record (accuracies, losses, gap, steps, stop
  reason: :data:`nngauge.studies._zoo.RECORD`);
- ``weights``: per ``network`` unit (unless ``keep_weights = false``), its initial and final
  ``state_dict`` as ``torch.save`` bytes. These two tables came later, created as ``claims``;
- ``candidates``: one row per finished ``builder`` unit (a study over the user's builder,
  :mod:`nngauge.studies._builder`): the builder's keyword arguments and the metrics of its
  training (JSON), and, when a stage raised, the stage and the error. The last table added.

The driver writes each finished unit (its ``units`` row and its ``measures`` rows) and drops
its claim in one transaction: a unit is either fully in the database or absent, and a rerun
skips exactly the units present. The ``units`` primary key makes the write happen once: a
second run finishing the same unit writes nothing (:func:`write_unit` returns False).
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Iterable, Optional

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    select,
)
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from nngauge.errors import InvalidInputError, NNGaugeError, invalid

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
claims = Table(
    "claims", metadata,
    Column("key", String(32), primary_key=True),  # one claim per unit: inserts race, one wins
    Column("study_id", String(32), nullable=False, index=True),
    Column("owner", String(300), nullable=False),  # the claiming run: host:pid:random
    Column("expires", Float, nullable=False),  # end of the lease, seconds since the epoch
)

networks = Table(
    "networks", metadata,
    Column("key", String(32), ForeignKey("units.key"), primary_key=True),
    Column("study_id", String(32), nullable=False, index=True),
    Column("arch_index", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("family", String(16), nullable=False),
    Column("depth", Integer, nullable=False),
    Column("width", Integer, nullable=False),
    Column("batch_norm", Boolean, nullable=False),
    Column("dropout", Float, nullable=False),
    Column("weight_decay", Float, nullable=False),
    Column("lr", Float, nullable=False),
    Column("batch_size", Integer, nullable=False),
    Column("train_size", Integer, nullable=False),
    Column("label_noise", Float, nullable=False),
    Column("optimizer", String(16), nullable=False),
    Column("train_accuracy", Float),
    Column("test_accuracy", Float),
    Column("train_loss", Float),
    Column("test_loss", Float),
    Column("gap", Float),
    Column("loss_gap", Float),
    Column("test_error", Float),
    Column("steps", Integer, nullable=False),
    Column("epochs", Integer, nullable=False),
    Column("stop_reason", String(16), nullable=False),
    Column("steps_to_0_1", Integer),
    Column("steps_0_1_to_0_01", Integer),
    Column("labels_changed", Float, nullable=False),
)
candidates = Table(
    "candidates", metadata,
    Column("key", String(32), ForeignKey("units.key"), primary_key=True),
    Column("study_id", String(32), nullable=False, index=True),
    Column("arch_index", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("arguments", Text, nullable=False),
    Column("metrics", Text, nullable=False),
    Column("stage", String(16)),
    Column("error", Text),
)
weights = Table(
    "weights", metadata,
    Column("unit_key", String(32), ForeignKey("units.key"), primary_key=True),
    Column("initial", LargeBinary, nullable=False),
    Column("final", LargeBinary, nullable=False),
)


def open_db(url: str, *, create: bool = True) -> Engine:
    """Open the database at a SQLAlchemy URL; with ``create`` (a run), set it up for writing.

    ``create`` creates the missing tables (another run creating them at the same moment is no
    error) and inserts a row and rolls it back, so that a database this run cannot write to
    (a read-only file, a read-only server or user) fails here, before any unit trains.
    PostgreSQL connections give up after 10 s unless the URL sets ``connect_timeout``.

    Raises:
        InvalidInputError: the URL is malformed, its driver is missing, the database cannot be
            reached, or (``create``) it refuses writes: one line, password hidden.

    Example:
        >>> engine = open_db("sqlite://")  # in memory
        >>> " ".join(sorted(metadata.tables))
        'architectures candidates claims measures networks studies units weights'
    """
    from sqlalchemy.engine import make_url

    shown = url
    try:
        parsed = make_url(url)
        shown = parsed.render_as_string(hide_password=True)
        engine = create_engine(_with_connect_timeout(parsed))
        with engine.connect() as conn:
            has_units = engine.dialect.has_table(conn, "units")
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        raise InvalidInputError(f"the study database expected a SQLAlchemy URL that can be "
                                f"opened (e.g. {DEFAULT_URL}); got {shown!r}: {_reason(exc)}. "
                                "Fix: check the URL, its folder and its driver.") from None
    if not create and not has_units:
        engine.dispose()
        raise invalid("the study database", "the tables of a study run", f"none in {shown}",
                      f"run `nngauge study run SPEC --db {shown}` first")
    if create:
        try:
            _create_tables(engine)
            _check_writable(engine)
        except SQLAlchemyError as exc:
            engine.dispose()
            raise invalid("the study database", "a database this run can write to",
                          f"{shown!r}: {_reason(exc)}", "check the permissions of the file "
                          "and its folder (or the database user's rights), or pass another "
                          "--db") from None
    return engine


def _with_connect_timeout(url: URL) -> URL:
    """A PostgreSQL URL gets ``connect_timeout=10`` unless it has one (libpq waits forever)."""
    if url.get_backend_name() != "postgresql" or "connect_timeout" in url.query:
        return url
    return url.update_query_dict({"connect_timeout": "10"})


def _create_tables(engine: Engine, tries: int = 3) -> None:
    """Create the missing tables. Concurrent runs may race to create one (the loser gets
    "already exists"): each try creates what is still missing."""
    for attempt in range(tries):
        try:
            with engine.begin() as conn:
                metadata.create_all(conn)
            return
        except SQLAlchemyError:
            if attempt == tries - 1:
                raise


def _check_writable(engine: Engine) -> None:
    """Insert a claim row and roll it back: raises on a database that refuses writes."""
    with engine.connect() as conn:
        conn.execute(claims.insert().values(key=f"probe-{uuid.uuid4().hex[:24]}", study_id="",
                                            owner="write check", expires=0.0))
        conn.rollback()


def _reason(exc: BaseException) -> str:
    """The first line of an error (drivers append SQL and links on the next ones)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def register_study(engine: Engine, spec, archs) -> None:
    """Record the study and its architectures (once; a rerun of the same spec adds nothing,
    and of two runs registering it at the same moment, the second adds nothing)."""
    if _registered(engine, spec.study_id):
        return
    try:
        with engine.begin() as conn:
            conn.execute(studies.insert().values(study_id=spec.study_id, name=spec.name,
                                                 spec=json.dumps(spec.to_dict(), sort_keys=True)))
            conn.execute(architectures.insert(), [
                {"study_id": spec.study_id, "arch_index": a.index,
                 "config": json.dumps(a.config, sort_keys=True),
                 "description": None if a.description is None else json.dumps(a.description),
                 "skip": a.skip} for a in archs])
    except IntegrityError:
        if not _registered(engine, spec.study_id):
            raise


def _registered(engine: Engine, study_id: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(select(studies.c.study_id)
                            .where(studies.c.study_id == study_id)).first() is not None


def finished_keys(engine: Engine, keys: Iterable[str]) -> set[str]:
    """Those of ``keys`` whose unit is in the database."""
    keys = list(keys)
    found: set[str] = set()
    with engine.connect() as conn:
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            found.update(conn.execute(select(units.c.key).where(units.c.key.in_(chunk))).scalars())
    return found


def write_unit(engine: Engine, study_id: str, unit, result: dict) -> bool:
    """Write one finished unit and its measures, and drop its claim, in a single transaction.

    Returns:
        True when written; False, writing nothing, when the unit is already in the database
        (another run finished it first: it took the unit over when this run's lease lapsed,
        or it ran without claims).

    Raises:
        NNGaugeError: the database refused the rows for another reason (e.g. measures rows
            of this unit left by another tool); nothing of the unit is written.
    """
    train = result.get("train") or {}
    try:
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
            if result.get("network") is not None:
                record = {name: _number(value) if isinstance(value, float) else value
                          for name, value in result["network"].items()}
                conn.execute(networks.insert().values(key=unit.key, study_id=study_id,
                                                      arch_index=unit.arch_index,
                                                      seed=unit.seed, **record))
            if result.get("candidate") is not None:
                candidate = result["candidate"]
                conn.execute(candidates.insert().values(
                    key=unit.key, study_id=study_id, arch_index=unit.arch_index, seed=unit.seed,
                    arguments=json.dumps(candidate["arguments"], sort_keys=True),
                    metrics=json.dumps({k: _number(v) for k, v in candidate["metrics"].items()},
                                       sort_keys=True),
                    stage=candidate["stage"], error=candidate["error"]))
            if result.get("weights") is not None:
                conn.execute(weights.insert().values(unit_key=unit.key, **result["weights"]))
            conn.execute(claims.delete().where(claims.c.key == unit.key))
    except IntegrityError as exc:
        if finished_keys(engine, [unit.key]):
            return False
        raise NNGaugeError(f"the study database expected to store unit {unit.key}; got "
                           f"{_reason(exc)}. Fix: remove the rows other tools left for it, or "
                           "use another --db.") from exc
    return True


def _number(value) -> Optional[float]:
    """Floats as stored: NaN becomes NULL (SQL has no NaN); +-inf kept where the backend can."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value
