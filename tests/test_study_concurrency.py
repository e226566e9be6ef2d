"""Runs sharing a database, and runs that stop: claims give each unit to one run (a dead run's
units are taken over once its lease expires), results are written once, a database that
refuses writes fails before any unit trains, workers die with their driver (SIGKILL), Ctrl-C
exits 130 keeping the finished units, and failed units exit 1."""

import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import MetaData, func, select
from sqlalchemy.exc import SQLAlchemyError

from nngauge.cli import main
from nngauge.errors import InvalidInputError
from nngauge.studies import plan_units, run_study
from nngauge.studies._claims import Claims
from nngauge.studies._db import claims, metadata, open_db, register_study, units, write_unit
from nngauge.studies._units import Architecture, UnitTask
from test_study_run import FAKE, _assert_complete, fake_result

TINY = """
[data]
source = "gaussian:d=3"
n = 40
[architectures]
explicit = [{width = 4, depth = 2}, {width = 4, depth = 2, activation = "tanh"},
            {width = 4, depth = 3}]
[measures]
names = ["nlc"]
[training]
lrs = [0.1]
batch_size = 8
max_epochs = 1
"""
"""Six units (three architectures: init and one training run) of about a tenth of a second."""

SLOW = """
[data]
source = "gaussian:d=3"
n = 2000
[architectures]
explicit = [{width = 8, depth = 2}, {width = 8, depth = 2, activation = "tanh"}]
[measures]
names = ["nlc"]
[training]
lrs = [0.01]
batch_size = 4
max_epochs = 1000
patience = 1000
decay_patience = 1000
"""
"""Four units in plan order: init (about a second), training (minutes), init, training."""


def write_spec(folder: Path, text: str) -> Path:
    path = folder / "spec.toml"
    path.write_text(text)
    return path


def _default_sigint() -> None:
    """In the child before exec: Ctrl-C's default disposition, unblocked. A process started
    with SIGINT ignored keeps it ignored (Python installs its KeyboardInterrupt handler only
    when SIGINT is not ignored), and the disposition the test process has depends on what ran
    in it before."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_cli(spec: Path, url: str, *args: str) -> subprocess.Popen:
    """``nngauge study run`` in a new session (so that signals reach it alone), with SIGINT's
    default disposition."""
    return subprocess.Popen([sys.executable, "-m", "nngauge", "study", "run", str(spec),
                             "--db", url, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_sigint)


def count(url: str, table) -> int:
    """Rows of ``table``; 0 while the database or the table does not exist yet."""
    try:
        engine = open_db(url, create=False)
    except InvalidInputError:
        return 0
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(table)).scalar()
    except SQLAlchemyError:
        return 0
    finally:
        engine.dispose()


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.1)


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...); [] if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return text[text.rindex(")") + 2:].split()


def _processes(field: int, value: int) -> dict[int, str]:
    """Processes whose stat ``field`` (1: parent, 3: session) is ``value``: pid -> command."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _stat(int(entry.name))[field:field + 1] == [str(value)]:
            try:
                out[int(entry.name)] = (entry / "cmdline").read_text().replace("\0", " ")
            except OSError:  # ended meanwhile
                pass
    return out


def children(pid: int) -> dict[int, str]:
    return _processes(1, pid)


def alive(pid: int) -> bool:
    state = _stat(pid)[:1]
    return state not in ([], ["Z"], ["X"])


def pool_workers(pid: int) -> list[int]:
    return [p for p, cmd in children(pid).items() if "spawn_main" in cmd]


def stop_session(process: subprocess.Popen) -> None:
    """Cleanup after a test: SIGKILL what is left of the session the test started."""
    for pid in [process.pid, *_processes(3, process.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def keys_of(spec_path: Path) -> set[str]:
    from nngauge.studies import load_spec

    return {u.key for u in plan_units(load_spec(spec_path))}


# --------------------------------------------------------------------------------- claims


def test_claims_give_a_unit_to_one_live_run(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path / 's.db'}")
    a, b = (Claims(engine, "study", lease=30.0) for _ in range(2))
    assert a.owner != b.owner
    assert a.claim("k1") == "claimed"
    assert b.claim("k1") == "busy"  # a's lease is live
    assert b.held_by_others() == {"k1"} and a.held_by_others() == set()
    with engine.begin() as conn:  # a's driver died: its lease ran out
        conn.execute(claims.update().values(expires=a.now() - 1))
    assert b.held_by_others() == set()
    assert b.claim("k1") == "claimed"  # taken over
    assert a.held_by_others() == {"k1"}
    before = _expires(engine, "k1")
    time.sleep(0.01)
    b.renew()
    assert _expires(engine, "k1") > before
    a.release()  # a holds nothing any more: b's claim stays
    assert _expires(engine, "k1") is not None
    b.release("k1")
    assert _expires(engine, "k1") is None
    engine.dispose()


def test_a_finished_unit_drops_its_claim_and_cannot_be_claimed(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path / 's.db'}")
    a, b = Claims(engine, FAKE.study_id), Claims(engine, FAKE.study_id)
    unit = plan_units(FAKE)[0]
    assert a.claim(unit.key) == "claimed"
    assert write_unit(engine, FAKE.study_id, unit, {"measures": {"nlc": 1.0}, "seconds": 0.0})
    assert _expires(engine, unit.key) is None
    assert b.claim(unit.key) == "done" and _expires(engine, unit.key) is None
    with engine.begin() as conn:  # a stale claim on a finished unit (a late writer's)
        conn.execute(claims.insert().values(key=unit.key, study_id=FAKE.study_id, owner="x",
                                            expires=0.0))
    assert b.claim(unit.key) == "done" and _expires(engine, unit.key) is None
    engine.dispose()


def _expires(engine, key):
    with engine.connect() as conn:
        return conn.execute(select(claims.c.expires).where(claims.c.key == key)).scalar()


def test_a_database_written_before_claims_gets_the_table_and_keeps_its_rows(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = open_db(url)
    register_study(engine, FAKE, [Architecture(0, {"skip": None})])
    write_unit(engine, FAKE.study_id, plan_units(FAKE)[0], {"measures": {"nlc": 1.0},
                                                           "seconds": 0.0})
    claims.drop(engine)  # the schema of before
    engine.dispose()
    engine = open_db(url)
    reflected = MetaData()
    reflected.reflect(engine)
    assert set(reflected.tables) == set(metadata.tables)
    assert count(url, units) == 1
    engine.dispose()


# ------------------------------------------------------------------- databases that refuse


def marking_runner(task, marker: str) -> dict:
    """Leaves a file behind: proof that a unit started."""
    Path(marker).write_text("ran")
    return fake_result(task)


@pytest.mark.parametrize("old_schema", [False, True])
def test_a_read_only_database_fails_before_any_unit_runs(tmp_path, old_schema):
    path = tmp_path / "s.db"
    engine = open_db(f"sqlite:///{path}")
    if old_schema:
        claims.drop(engine)
    engine.dispose()
    marker = tmp_path / "marker"
    with pytest.raises(InvalidInputError, match="expected a database this run can write to; "
                       "got .*readonly database. Fix: ") as info:
        run_study(FAKE, f"sqlite:///file:{path}?mode=ro&uri=true", workers=1,
                  runner=functools.partial(marking_runner, marker=str(marker)))
    assert "\n" not in str(info.value)
    assert not marker.exists()


# ------------------------------------------------------------------- runs sharing a database


def test_a_run_waits_for_a_live_claim_and_takes_it_over_when_it_expires(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    engine = open_db(url)
    held = plan_units(FAKE)[0].key
    with engine.begin() as conn:  # a run that died a moment ago: its lease has 2 s left
        conn.execute(claims.insert().values(key=held, study_id=FAKE.study_id,
                                            owner="elsewhere:1:dead", expires=time.time() + 2))
    engine.dispose()
    started = time.monotonic()
    summary = run_study(FAKE, url, workers=1, runner=fake_result)
    assert time.monotonic() - started > 2
    assert (summary.ran, summary.by_others, summary.failed) == (8, 0, {})
    _assert_complete(url, FAKE)
    assert count(url, claims) == 0


def test_a_unit_another_run_finishes_is_counted_not_run_again(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    engine = open_db(url)
    unit = plan_units(FAKE)[0]
    with engine.begin() as conn:  # a live run is on it
        conn.execute(claims.insert().values(key=unit.key, study_id=FAKE.study_id,
                                            owner="elsewhere:1:live", expires=time.time() + 60))

    def other_run_finishes() -> None:
        time.sleep(1.0)
        write_unit(engine, FAKE.study_id, unit, fake_result(UnitTask(FAKE, None, unit)))

    other = threading.Thread(target=other_run_finishes)
    other.start()
    seen = []
    summary = run_study(FAKE, url, workers=1, runner=fake_result,
                        progress=lambda done, total: seen.append(done))
    other.join()
    engine.dispose()
    assert (summary.ran, summary.by_others, summary.skipped) == (7, 1, 0)
    assert seen[-1] == 8
    _assert_complete(url, FAKE)


def sleepy_runner(task, seconds: float) -> dict:
    """The first unit takes ``seconds``; the others are instant."""
    if task.unit.arch_index == 0 and task.unit.kind == "init":
        time.sleep(seconds)
    return fake_result(task)


@pytest.mark.slow
def test_the_heartbeat_keeps_a_unit_longer_than_its_lease_claimed(tmp_path):
    """A unit that runs 4 s under a 1 s lease stays claimed by its run at twice the lease (only
    the heartbeat's renewals keep it), so another run finds it busy; the run completes all 8
    units itself."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = plan_units(FAKE)[0].key
    result = {}
    run = threading.Thread(target=lambda: result.update(summary=run_study(
        FAKE, url, workers=1, lease=1.0, runner=functools.partial(sleepy_runner, seconds=4))))
    run.start()
    wait_until(lambda: count(url, claims) == 1, 30, "the first unit is claimed")
    engine = open_db(url)
    other = Claims(engine, FAKE.study_id)
    time.sleep(2.0)  # twice the lease: only renewals keep the claim
    assert other.held_by_others() == {first} and other.claim(first) == "busy"
    run.join()
    engine.dispose()
    assert (result["summary"].ran, result["summary"].by_others) == (8, 0)


@pytest.mark.slow
def test_two_concurrent_cli_runs_split_the_units(tmp_path):
    """Two `nngauge study run` processes on one SQLite database at once both exit 0, every unit
    is stored once, the units each printed as run add up to the plan (none run twice), and no
    claim is left."""
    run_two_and_assert_split(write_spec(tmp_path, TINY), f"sqlite:///{tmp_path / 's.db'}")


def run_two_and_assert_split(spec: Path, url: str) -> None:
    """Two ``study run`` processes on ``url`` at once: they split the units."""
    runs = [start_cli(spec, url, "--workers", "1") for _ in range(2)]
    try:
        outputs = [run.communicate(timeout=120) for run in runs]
    finally:
        for run in runs:
            stop_session(run)
    assert_split(runs, outputs, spec, url)


def assert_split(runs, outputs, spec: Path, url: str) -> None:
    """Both runs succeeded, each unit is in the database once, and was run by one of them."""
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, err
    keys = keys_of(spec)
    engine = open_db(url, create=False)
    with engine.connect() as conn:
        stored = list(conn.execute(select(units.c.key)).scalars())
    engine.dispose()
    assert sorted(stored) == sorted(keys)  # every unit, once
    ran = [int(re.search(r"(\d+) units run", out).group(1)) for out, _ in outputs]
    assert sum(ran) == len(keys), outputs  # no unit was run by both
    assert count(url, claims) == 0


# ------------------------------------------------------------------------- runs that stop


@pytest.mark.slow
def test_killing_the_driver_ends_its_workers(tmp_path):
    """SIGKILL of a `study run` driver while its 2 pool workers run units ends every process it
    spawned (the workers and multiprocessing's tracker) within 10 s."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    driver = start_cli(write_spec(tmp_path, SLOW), url, "--workers", "2")
    try:
        wait_until(lambda: len(pool_workers(driver.pid)) == 2 and count(url, claims) == 2, 60,
                   "two workers run units")
        time.sleep(1.0)  # well into their units
        spawned = list(children(driver.pid))  # the workers, and multiprocessing's tracker
        assert all(alive(pid) for pid in spawned)
        driver.kill()
        driver.wait()
        wait_until(lambda: not any(alive(pid) for pid in spawned), 10,
                   f"the processes {spawned} of the killed driver end")
    finally:
        stop_session(driver)


def ray_unit_workers(session: int) -> list[int]:
    """Processes of a session running a study unit as a Ray task (Ray names them so)."""
    return [pid for pid, cmd in _processes(3, session).items()
            if cmd.startswith("ray::_ray_unit")]


@pytest.mark.slow
def test_killing_a_ray_driver_ends_its_tasks(tmp_path):
    """SIGKILL of a `study run --executor ray` driver (a local Ray it started) while a unit
    runs as a Ray task ends that task's processes within 10 s."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    driver = start_cli(write_spec(tmp_path, SLOW), url, "--executor", "ray", "--workers", "1")
    try:  # a local Ray started by the driver: Ray's processes share the driver's session
        wait_until(lambda: count(url, units) == 1 and ray_unit_workers(driver.pid), 60,
                   "the Ray task of the second unit runs")
        running = ray_unit_workers(driver.pid)
        driver.kill()
        driver.wait()
        wait_until(lambda: not any(alive(pid) for pid in running), 10,
                   f"the Ray task processes {running} of the killed driver end")
    finally:
        stop_session(driver)


@pytest.mark.slow
def test_ctrl_c_exits_130_keeping_the_finished_units(tmp_path):
    """CLI contract: SIGINT during a unit makes `study run` exit 130, saying 1 of 4 units are in
    the database and that rerunning resumes; the finished unit is kept, no claim is left, and
    the workers end."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    driver = start_cli(write_spec(tmp_path, SLOW), url, "--workers", "1")
    try:
        wait_until(lambda: count(url, units) == 1, 60, "the first unit is written")
        spawned = list(children(driver.pid))
        driver.send_signal(signal.SIGINT)  # the second unit trains for minutes
        try:
            _, err = driver.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            driver.kill()
            _, err = driver.communicate()
            pytest.fail(f"`study run` did not end within 60 s of SIGINT; its stderr:\n{err}")
    finally:
        stop_session(driver)
    assert driver.returncode == 130, err
    assert ("interrupted: 1 of 4 units are in the database; rerun the same command to resume"
            in err)
    assert count(url, units) == 1 and count(url, claims) == 0
    wait_until(lambda: not any(alive(pid) for pid in spawned), 10, "the workers end")


def failing_runner(task) -> dict:
    if task.unit.arch_index == 1:
        raise ValueError("boom in the unit")
    return fake_result(task)


def test_cli_exits_1_when_units_failed(tmp_path, monkeypatch, capsys):
    import nngauge.studies

    monkeypatch.setattr(nngauge.studies, "run_study",
                        functools.partial(run_study, runner=failing_runner))
    spec = write_spec(tmp_path, TINY)
    url = f"sqlite:///{tmp_path / 's.db'}"
    monkeypatch.setattr(sys, "argv", ["nngauge", "study", "run", str(spec), "--db", url,
                                      "--workers", "1"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    out, err = capsys.readouterr()
    assert "4 units run, 0 already done, 0 done by other runs, 2 failed of 6" in out
    assert "error: 2 units failed" in err and "ValueError: boom in the unit" in err
    assert count(url, units) == 4 and count(url, claims) == 0
