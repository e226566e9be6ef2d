"""Studies on PostgreSQL: two concurrent ``nngauge study run`` processes split the units (each
once in the database), a read-only database and an unreachable server fail before any unit
runs, and leases are on the server's clock.

A throwaway server (initdb + pg_ctl) listens on a unix socket in a temporary folder only (no
TCP); when this process runs as root, the server runs as the ``postgres`` user (else
``nobody``), since PostgreSQL refuses to run as root. The tests are skipped, saying what is
missing, without the server binaries on PATH or the psycopg driver
(``pip install 'psycopg[binary]'``).
"""

import functools
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from nngauge.errors import InvalidInputError
from nngauge.studies import run_study
from nngauge.studies._claims import clock_offset
from nngauge.studies._db import open_db
from test_study_concurrency import TINY, marking_runner, run_two_and_assert_split, write_spec
from test_study_run import FAKE

PORT = 5432  # names the socket file only: the server listens on no TCP port


@pytest.fixture(scope="module")
def server():
    """A PostgreSQL server for this module: yields its socket folder."""
    missing = [name for name in ("initdb", "pg_ctl", "postgres") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"PostgreSQL server binaries not on PATH: {', '.join(missing)}")
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("the PostgreSQL driver psycopg is not installed: "
                    "pip install 'psycopg[binary]'")
    root = Path(tempfile.mkdtemp(prefix="nngauge-pg-"))  # short: socket paths are limited
    as_user = _server_user(root)
    try:
        _run(["initdb", "-D", str(root / "data"), "-U", "postgres", "-A", "trust",
              "--no-locale", "-E", "UTF8", "--no-sync"], as_user)
        _run(["pg_ctl", "-D", str(root / "data"), "-l", str(root / "log"), "-w", "-t", "30",
              "-o", f"-k {root} -p {PORT} -c listen_addresses='' -F", "start"], as_user)
        yield root
    finally:
        if (root / "data" / "postmaster.pid").exists():
            _run(["pg_ctl", "-D", str(root / "data"), "-m", "immediate", "-w", "stop"], as_user)
        shutil.rmtree(root, ignore_errors=True)


def _server_user(root: Path) -> dict:
    """subprocess arguments running the server as a user it accepts (not root)."""
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        user = pwd.getpwnam("nobody")
    os.chown(root, user.pw_uid, user.pw_gid)
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _run(command: list, as_user: dict) -> None:
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/",
                         **as_user)
    assert out.returncode == 0, out.stdout + out.stderr


def url_of(server: Path, database: str) -> str:
    return f"postgresql+psycopg://postgres@/{database}?host={server}&port={PORT}"


@pytest.fixture
def database(server, request):
    """A new, empty database: yields its URL."""
    name = request.node.name.lower().replace("[", "_").replace("]", "")[:60]
    admin = create_engine(url_of(server, "postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield url_of(server, name)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.mark.slow
def test_two_concurrent_runs_on_postgresql_split_the_units(tmp_path, database):
    """Two `nngauge study run` processes on one PostgreSQL database at once both exit 0, every
    unit is stored once, none is run by both, and no claim is left."""
    run_two_and_assert_split(write_spec(tmp_path, TINY), database)


def test_a_read_only_postgresql_database_fails_before_any_unit_runs(tmp_path, database):
    open_db(database).dispose()  # the tables exist: only the write check can fail
    admin = create_engine(database, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"ALTER DATABASE {admin.url.database} "
                          "SET default_transaction_read_only = on"))
    admin.dispose()
    marker = tmp_path / "marker"
    with pytest.raises(InvalidInputError, match="expected a database this run can write to; "
                       "got .*read-only transaction. Fix: "):
        run_study(FAKE, database, workers=1,
                  runner=functools.partial(marking_runner, marker=str(marker)))
    assert not marker.exists()


def test_an_unreachable_postgresql_server_fails_in_one_line(server):
    started = time.monotonic()
    with pytest.raises(InvalidInputError, match="can be opened") as info:
        run_study(FAKE, url_of(server / "nowhere", "study"))
    assert "\n" not in str(info.value)
    assert time.monotonic() - started < 15


def test_leases_are_on_the_server_clock(database):
    engine = open_db(database)
    offset = clock_offset(engine)  # the server runs on this machine: the same clock
    engine.dispose()
    assert offset != 0.0 and abs(offset) < 1.0
