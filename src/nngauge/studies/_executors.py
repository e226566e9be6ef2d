"""Run a study: plan its units, claim and execute the missing ones, store each result.

Executors:

- ``"local"`` (default): a process pool on this machine (``concurrent.futures`` with the
  ``spawn`` start method, one torch thread per worker). At most ``workers`` units are in flight;
  when a worker process dies (killed, out of memory), the pool is rebuilt and the units that
  were in flight are retried up to ``max_retries`` times. Workers die with their driver: each
  holds the read end of a pipe whose write end only the driver holds, and a thread of the
  worker ends it when the pipe closes: when the driver dies (even by SIGKILL), and when a run
  stops early (Ctrl-C, an error), so that nothing waits on the units in flight. Workers ignore
  SIGINT (a Ctrl-C on the terminal reaches them too): the driver decides.
- ``"ray"``: Ray tasks (``max_retries`` re-executes a task whose worker died), at most as many
  in flight as the cluster has CPUs. Joins a running cluster at ``address`` (``"auto"``,
  ``"host:port"`` or ``"ray://host:port"``), or, without one, starts a local instance with
  ``workers`` CPUs; a Ray already initialized in this process is used as it is. A run that
  stops early cancels its tasks; when a driver dies, Ray ends its job's tasks (and a local Ray
  started by the driver ends with it).

Several runs may share one database (``nngauge study run`` twice, on one machine or many): a
unit is claimed before it goes to a worker (:mod:`nngauge.studies._claims`), so every unit
runs once. A run skips the units other runs finished, waits for those other live runs are
running, takes over those whose lease expired (their driver died), and ends when every unit
of the plan is in the database or has failed in this run.

Only drivers write to the database, one transaction per finished unit (see
:mod:`nngauge.studies._db`), so an interrupted study loses at most its units in flight and a
rerun of the same spec runs exactly the missing units.
"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Optional, Union

from nngauge._numbers import is_finite
from nngauge.errors import InvalidInputError, NNGaugeError, require_extra
from nngauge.studies._claims import DEFAULT_LEASE, Claims, clock_offset
from nngauge.studies._db import DEFAULT_URL, finished_keys, open_db, register_study, write_unit
from nngauge.studies._spec import StudySpec, load_spec
from nngauge.studies._units import UnitRunner, UnitTask, plan_units, resolve_architectures, run_unit

ExecutorName = Literal["local", "ray"]
Progress = Callable[[int, int], None]
"""``progress(done, total)`` after each unit found in the database (and once at the start)."""

_POLL = 1.0
"""Seconds between looks at the units other runs hold, while this run waits for them."""


@dataclass(frozen=True)
class RunSummary:
    """What :func:`run_study` did.

    Attributes:
        study_id: the spec's hash; total: units in the plan; skipped: already in the database
        when the run started; ran: finished and written by this run; failed: ``{unit key:
        error}`` of units that raised or exhausted their retries (not written: a rerun tries
        them again); by_others: finished by other runs during this one; warnings:
        ``{"Category: text": units}`` of the warnings raised by the units this run finished
        (the runner's ``"warnings"``; :func:`warning_lines` states each kind once).
    """

    study_id: str
    total: int
    skipped: int
    ran: int
    failed: dict = field(default_factory=dict)
    by_others: int = 0
    warnings: dict = field(default_factory=dict)


NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
"""Numbers in a warning's text: warnings that differ only in them are one kind."""


def warning_lines(warnings: dict[str, int]) -> list[str]:
    """``{text: units}`` as one line per kind of warning (texts equal but for their numbers),
    most frequent first: how many units raised it, and its first text.

    Example:
        >>> warning_lines({"UserWarning: 3 steps": 2, "UserWarning: 5 steps": 1,
        ...                "RuntimeWarning: overflow": 1})
        ['3 units: UserWarning: 3 steps', '1 unit: RuntimeWarning: overflow']
    """
    kinds: dict[str, list] = {}
    for text, count in sorted(warnings.items()):
        kind = kinds.setdefault(NUMBER.sub("#", text), [0, text])
        kind[0] += count
    return [f"{count} unit{'s' if count != 1 else ''}: {text}"
            for count, text in sorted(kinds.values(), key=lambda k: (-k[0], k[1]))]


def run_study(spec: Union[StudySpec, str, Path], db: str = DEFAULT_URL, *,
              executor: ExecutorName = "local", workers: Optional[int] = None,
              address: Optional[str] = None, max_retries: int = 2,
              runner: UnitRunner = run_unit, progress: Optional[Progress] = None,
              connect_timeout: float = 10.0, lease: float = DEFAULT_LEASE) -> RunSummary:
    """Run (or resume) a study and store every unit's results in the database at ``db``.

    The database is opened and checked writable before any unit runs; other runs may work on
    it at the same time (see the module docstring).

    Args:
        spec: a :class:`StudySpec` or the path of its TOML file.
        db: a SQLAlchemy URL (default ``sqlite:///study.db``).
        executor: "local" (default, a process pool) or "ray".
        workers: local processes, or CPUs of a Ray instance started here (default: CPUs of
            this machine, at most the number of units to run).
        address: Ray cluster to join (only with executor="ray").
        max_retries: re-executions of a unit whose worker died.
        runner: the function run for each unit (module-level, picklable); default
            :func:`nngauge.studies._units.run_unit`.
        progress: called as ``progress(done, total)``.
        connect_timeout: seconds to wait for the Ray cluster at ``address`` (the TCP
            connection, then Ray's lookup of the cluster, about one try a second).
        lease: seconds this run's claim on a unit lasts unless renewed (every third of it):
            how long another run waits before it takes over the units of a dead driver.

    Returns:
        :class:`RunSummary`.

    Raises:
        InvalidInputError: a bad argument or spec, or a database that cannot be opened or
            written to; nothing has run then.
        KeyboardInterrupt: on Ctrl-C, after stopping the workers and releasing this run's
            claims; the units finished so far are in the database.
    """
    where = "run_study()"
    if not isinstance(spec, StudySpec):
        spec = load_spec(spec)
    _check_arguments(where, executor, address, workers, max_retries, lease)
    archs = resolve_architectures(spec)  # before the database: a bad spec writes nothing
    ray = _RaySession(address, workers, connect_timeout) if executor == "ray" else None
    try:  # the database after Ray connected: an unreachable cluster writes nothing either
        engine = open_db(db)
        try:
            register_study(engine, spec, archs)
            plan = plan_units(spec)
            claims = Claims(engine, spec.study_id, lease, offset=clock_offset(engine))
            work = _Work(spec, archs, plan, finished_keys(engine, (u.key for u in plan)),
                         claims, progress)
            with claims.heartbeat():
                if ray is None and work.todo:
                    n = min(workers or os.cpu_count() or 1, len(work.todo))
                    _run_local(work, runner, n, max_retries)
                elif work.todo:
                    _run_ray(ray.module, work, runner, max_retries)
            return RunSummary(spec.study_id, work.total, work.skipped, work.ran, work.failed,
                              work.by_others, dict(work.warnings))
        finally:
            engine.dispose()
    finally:
        if ray is not None:
            ray.close()


def _check_arguments(where, executor, address, workers, max_retries, lease) -> None:
    if executor not in ("local", "ray"):
        raise InvalidInputError(f"{where} expected executor 'local' or 'ray'; got {executor!r}. "
                                "Fix: pick one.")
    if address is not None and executor != "ray":
        raise InvalidInputError(f"{where} expected --address only with the Ray executor; got "
                                f"executor {executor!r}. Fix: add --executor ray.")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise InvalidInputError(f"{where} expected workers an integer >= 1; got {workers!r}. "
                                "Fix: pass e.g. --workers 2.")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidInputError(f"{where} expected max_retries an integer >= 0; got "
                                f"{max_retries!r}. Fix: pass e.g. max_retries=2.")
    if not is_finite(lease) or lease <= 0:
        raise InvalidInputError(f"{where} expected lease a number of seconds > 0; got "
                                f"{lease!r}. Fix: pass e.g. lease={DEFAULT_LEASE:g}.")


class _Work:
    """This run's share of a plan: claims units for an executor and stores their results.

    ``todo`` holds, in plan order, the units not in the database that this run has neither
    claimed nor seen finished: those other live runs hold stay in it until they finish (then
    counted in ``by_others``) or their lease expires (then this run claims them).
    """

    def __init__(self, spec: StudySpec, archs, plan, done: set, claims: Claims,
                 progress: Optional[Progress]) -> None:
        self.spec, self.archs, self.claims, self.progress = spec, archs, claims, progress
        self.todo = {u.key: u for u in plan if u.key not in done}
        self.total, self.skipped = len(plan), len(done)
        self.ran = self.by_others = 0
        self.failed: dict[str, str] = {}
        self.warnings: dict[str, int] = {}
        self._report()

    def take(self) -> Optional[UnitTask]:
        """Claim the first unit of ``todo`` that no other live run holds; None when none is
        free now."""
        busy = self.claims.held_by_others()
        for key in [k for k in self.todo if k not in busy]:
            outcome = self.claims.claim(key)
            if outcome == "busy":  # another run claimed it since ``busy`` was read
                continue
            unit = self.todo.pop(key)
            if outcome == "claimed":
                return UnitTask(self.spec, self.archs[unit.arch_index], unit)
            self.by_others += 1
            self._report()
        return None

    def finish(self, task: UnitTask, result: dict) -> None:
        """Store a finished unit (counted as another run's when that run wrote it first)."""
        if write_unit(self.claims.engine, self.spec.study_id, task.unit, result):
            self.ran += 1
            for text in result.get("warnings", ()):
                self.warnings[text] = self.warnings.get(text, 0) + 1
        else:
            self.by_others += 1
        self._report()

    def fail(self, task: UnitTask, reason: str) -> None:
        """Record a failed unit and release its claim, for a later run to try again."""
        self.failed[task.unit.key] = reason
        self.claims.release(task.unit.key)

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.skipped + self.ran + self.by_others, self.total)


# ------------------------------------------------------------------------------------ local


def _one_torch_thread() -> None:
    """One torch thread per worker: one CPU each, and the same arithmetic under any executor
    (set through the environment when torch is not imported yet, so idle workers stay light)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _local_worker_init(lifeline) -> None:
    """Set up a pool worker: one torch thread, SIGINT left to the driver, and an exit as soon
    as the driver's end of the ``lifeline`` pipe closes."""
    _one_torch_thread()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_closed, args=(lifeline,), daemon=True,
                     name="nngauge-lifeline").start()


def _exit_when_closed(lifeline) -> None:
    """Wait for the end of the pipe (the driver never sends), then end this process at once,
    whatever its main thread is doing."""
    try:
        lifeline.recv()
    except (EOFError, OSError):
        pass
    os._exit(1)


def _run_local(work: _Work, runner, workers: int, max_retries: int) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    retry: list[UnitTask] = []  # claimed units whose worker died, to run again
    attempts: dict[str, int] = {}

    def settle(future, task) -> bool:
        """Store or requeue a finished future's unit; False when its worker died."""
        try:
            result = future.result()
        except BrokenProcessPool:
            attempts[task.unit.key] = attempts.get(task.unit.key, 0) + 1
            if attempts[task.unit.key] > max_retries:
                work.fail(task, "its worker process died (retries exhausted)")
            else:
                retry.append(task)
            return False
        except Exception as exc:  # the unit itself raised: record it and go on
            work.fail(task, _reason(exc))
        else:
            work.finish(task, result)
        return True

    while retry or work.todo:  # one pool per round; a worker's death ends the round
        lifeline, cut = context.Pipe(duplex=False)
        # exits run right to left: ``cut`` closes first, so the workers end at once and the
        # pool's shutdown never waits on a unit (the round stopped early, or all are done)
        with lifeline, ProcessPoolExecutor(workers, mp_context=context,
                                           initializer=_local_worker_init,
                                           initargs=(lifeline,)) as pool, cut:
            in_flight = _local_round(pool, work, runner, workers, retry, settle)
        for future, task in in_flight.items():  # the pool is shut down: all are done now
            settle(future, task)


def _local_round(pool, work: _Work, runner, workers: int, retry: list, settle) -> dict:
    """Keep ``workers`` units in flight on ``pool`` until none is left to run or a worker
    dies; returns the futures still to settle (those of a broken pool)."""
    in_flight: dict = {}
    while True:
        while len(in_flight) < workers:
            task = retry.pop() if retry else work.take()
            if task is None:
                break
            try:
                future = pool.submit(runner, task)
            except BrokenProcessPool:  # broke since the last wait: settle, new round
                retry.append(task)
                return in_flight
            in_flight[future] = task
        if not in_flight:
            if not work.todo:
                return in_flight
            time.sleep(_POLL)  # every unit left is another live run's
            continue
        finished, _ = wait(in_flight, timeout=_POLL if work.todo else None,
                           return_when=FIRST_COMPLETED)
        healthy = True
        for future in finished:
            healthy = settle(future, in_flight.pop(future)) and healthy
        if not healthy:
            return in_flight


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -------------------------------------------------------------------------------------- ray


def _ray_unit(runner, task):
    _one_torch_thread()
    return runner(task)


def _run_ray(ray, work: _Work, runner, max_retries: int) -> None:
    remote = ray.remote(num_cpus=1, max_retries=max_retries)(_ray_unit)
    runner_ref = ray.put(runner)
    pending: dict = {}
    try:
        while True:
            capacity = max(1, int(ray.cluster_resources().get("CPU", 1)))
            while len(pending) < capacity and (task := work.take()) is not None:
                pending[remote.remote(runner_ref, task)] = task
            if not pending:
                if not work.todo:
                    return
                time.sleep(_POLL)  # every unit left is another live run's
                continue
            finished, _ = ray.wait(list(pending), num_returns=1,
                                   timeout=_POLL if work.todo else None)
            for ref in finished:
                task = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the unit raised, or its worker died past its retries
                    work.fail(task, _reason(getattr(exc, "cause", None) or exc))
                else:
                    work.finish(task, result)
    finally:  # stopped early (Ctrl-C, an error): a Ray that outlives the run drops the units
        for ref in pending:
            ray.cancel(ref, force=True)


class _RaySession:
    """Ray for one study run: joins ``address``, or starts a local instance of ``workers``
    CPUs, or uses the Ray this process already initialized (then leaves it running)."""

    def __init__(self, address: Optional[str], workers: Optional[int], timeout: float) -> None:
        if address is not None and "ray" not in sys.modules:
            # Ray looks the cluster up about once a second, 20 times by default, read at import
            os.environ.setdefault("RAY_NUM_REDIS_GET_RETRIES", str(max(1, math.ceil(timeout))))
        self.module = ray = require_extra("ray", "ray", "the Ray study executor")
        self.owned = False
        if ray.is_initialized():
            return
        if address is None:
            ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False,
                     log_to_driver=False)
            self.owned = True
            return
        if address != "auto":
            host, _, port = address.removeprefix("ray://").rpartition(":")
            try:
                socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
            except (OSError, ValueError) as exc:
                raise NNGaugeError(
                    f"the Ray executor expected a reachable cluster at --address (host:port or "
                    f"ray://host:port); got {address!r}: {exc or type(exc).__name__}. Fix: start "
                    "one with `ray start --head` or drop --address to run a local Ray.") from None
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except Exception as exc:
            raise NNGaugeError(f"the Ray executor expected to join the cluster at {address!r}; "
                               f"got {_reason(exc)}. Fix: check the address (`ray status` on "
                               "the head node) or drop --address to run a local Ray.") from None
        self.owned = True

    def close(self) -> None:
        if self.owned:
            self.module.shutdown()
