"""The study database: URLs that cannot be opened fail in one line and create nothing; a unit is
written atomically (its row and measures, or nothing) and never twice (a second write of it is
"done by another run", not an error); NaN is stored as NULL."""

import math

import pytest
from sqlalchemy import func, select

from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.studies._db import (finished_keys, measures, open_db, register_study, units,
                                 write_unit)
from nngauge.studies._spec import parse_spec
from nngauge.studies._units import Architecture, Unit

SPEC = parse_spec({"architectures": {"explicit": [{"width": 4, "depth": 2}]}})
ARCHS = [Architecture(0, {"d_in": 3, "width": 4, "depth": 2, "d_out": 2, "skip": None})]


@pytest.mark.parametrize("url, reason", [
    ("not a url", "Could not parse"),
    ("nosuchdialect://x/y", "Can't load plugin"),
])
def test_bad_urls_fail_in_one_line(url, reason):
    with pytest.raises(InvalidInputError, match=reason) as info:
        open_db(url)
    assert "\n" not in str(info.value) and "Fix:" in str(info.value)


def test_unreachable_sqlite_folder_creates_nothing(tmp_path):
    target = tmp_path / "missing" / "study.db"
    with pytest.raises(InvalidInputError, match="unable to open database file"):
        open_db(f"sqlite:///{target}")
    assert not (tmp_path / "missing").exists()


def test_password_is_hidden_in_errors():
    with pytest.raises(InvalidInputError) as info:
        open_db("nosuchdialect://user:secret@host/db")
    assert "secret" not in str(info.value) and "***" in str(info.value)


def test_reading_a_database_without_a_study_is_a_clear_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(InvalidInputError, match="run `nngauge study run"):
        open_db(url, create=False)


def _count(engine, table):
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar()


def test_unit_written_once_with_its_measures(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path / 's.db'}")
    register_study(engine, SPEC, ARCHS)
    register_study(engine, SPEC, ARCHS)  # a rerun adds nothing
    unit = Unit("k1", "init", 0, 0)
    assert write_unit(engine, SPEC.study_id, unit,
                      {"measures": {"nlc": 1.5, "output_bias": math.nan}, "seconds": 0.1})
    assert finished_keys(engine, ["k1", "k2"]) == {"k1"}
    # a second write (another run finished the unit too) writes nothing and says so
    assert not write_unit(engine, SPEC.study_id, unit, {"measures": {"nlc": 2.0}, "seconds": 0.1})
    assert _count(engine, units) == 1 and _count(engine, measures) == 2
    with engine.connect() as conn:
        stored = dict(conn.execute(select(measures.c.name, measures.c.value)).all())
    assert stored == {"nlc": 1.5, "output_bias": None}


def test_failed_write_leaves_no_partial_unit(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path / 's.db'}")
    register_study(engine, SPEC, ARCHS)
    write_unit(engine, SPEC.study_id, Unit("k0", "init", 0, 0), {"measures": {"nlc": 1.0},
                                                                 "seconds": 0.1})
    # a stray measure row for k2 makes the measures insert fail after the unit insert of the
    # same transaction succeeded (SQLite does not enforce the foreign key by default)
    with engine.begin() as conn:
        conn.execute(measures.insert().values(unit_key="k2", name="nlc", value=1.0))
    with pytest.raises(NNGaugeError, match="expected to store unit k2"):
        write_unit(engine, SPEC.study_id, Unit("k2", "init", 0, 1), {"measures": {"nlc": 3.0},
                                                                     "seconds": 0.1})
    assert finished_keys(engine, ["k0", "k2"]) == {"k0"}  # the unit row was rolled back


def test_training_unit_columns(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path / 's.db'}")
    register_study(engine, SPEC, ARCHS)
    write_unit(engine, SPEC.study_id, Unit("t", "train", 0, 0, 0.1), {
        "measures": {}, "seconds": 1.0,
        "train": {"best_val_error": 0.25, "test_error": 0.3, "train_error": 0.1, "epochs": 4,
                  "diverged": False}})
    with engine.connect() as conn:
        row = conn.execute(select(units)).mappings().one()
    assert (row["lr"], row["best_val_error"], row["test_error"], row["epochs"],
            row["diverged"]) == (0.1, 0.25, 0.3, 4, False)
