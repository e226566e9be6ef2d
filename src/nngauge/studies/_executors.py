"""Run a study: plan its units, skip the finished ones, execute the rest, store each result.

Executors:

- ``"local"`` (default): a process pool on this machine (``concurrent.futures`` with the
  ``spawn`` start method, one torch thread per worker). At most ``workers`` units are in flight;
  when a worker process dies (killed, out of memory), the pool is rebuilt and the units that
  were in flight are retried up to ``max_retries`` times.
- ``"ray"``: Ray tasks (``max_retries`` re-executes a task whose worker died). Joins a running
  cluster at ``address`` (``"auto"``, ``"host:port"`` or ``"ray://host:port"``), or, without
  one, starts a local instance with ``workers`` CPUs; a Ray already initialized in this process
  is used as it is.

Only the driver writes to the database, one transaction per finished unit (see
:mod:`nngauge.studies._db`), so an interrupted study loses at most its units in flight and a
rerun of the same spec runs exactly the missing units.
"""

from __future__ import annotations

import math
import os
import socket
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Optional, Union

from nngauge.errors import InvalidInputError, NNGaugeError, require_extra
from nngauge.studies._db import DEFAULT_URL, finished_keys, open_db, register_study, write_unit
from nngauge.studies._spec import StudySpec, load_spec
from nngauge.studies._units import (UnitRunner, UnitTask, plan_units, resolve_architectures,
                                    run_unit)

ExecutorName = Literal["local", "ray"]
Progress = Callable[[int, int], None]
"""``progress(done, total)`` after each finished unit (and once at the start)."""


@dataclass(frozen=True)
class RunSummary:
    """What :func:`run_study` did.

    Attributes:
        study_id: the spec's hash; total: units in the plan; skipped: already in the database;
        ran: finished and written now; failed: ``{unit key: error}`` of units that raised or
        exhausted their retries (not written: a rerun tries them again).
    """

    study_id: str
    total: int
    skipped: int
    ran: int
    failed: dict = field(default_factory=dict)


def run_study(spec: Union[StudySpec, str, Path], db: str = DEFAULT_URL, *,
              executor: ExecutorName = "local", workers: Optional[int] = None,
              address: Optional[str] = None, max_retries: int = 2,
              runner: UnitRunner = run_unit, progress: Optional[Progress] = None,
              connect_timeout: float = 10.0) -> RunSummary:
    """Run (or resume) a study and store every unit's results in the database at ``db``.

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

    Returns:
        :class:`RunSummary`.
    """
    where = "run_study()"
    if not isinstance(spec, StudySpec):
        spec = load_spec(spec)
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
    archs = resolve_architectures(spec)  # before the database: a bad spec writes nothing
    ray = _RaySession(address, workers, connect_timeout) if executor == "ray" else None
    try:  # the database after Ray connected: an unreachable cluster writes nothing either
        engine = open_db(db)
        try:
            register_study(engine, spec, archs)
            plan = plan_units(spec)
            done = finished_keys(engine, (u.key for u in plan))
            tasks = [UnitTask(spec, archs[u.arch_index], u) for u in plan if u.key not in done]
            count = [len(done)]
            if progress is not None:
                progress(count[0], len(plan))

            def on_done(task: UnitTask, result: dict) -> None:
                write_unit(engine, spec.study_id, task.unit, result)
                count[0] += 1
                if progress is not None:
                    progress(count[0], len(plan))

            failed: dict[str, str] = {}
            if tasks and ray is None:
                n = min(workers or os.cpu_count() or 1, len(tasks))
                _run_local(tasks, runner, n, max_retries, on_done, failed)
            elif tasks:
                _run_ray(ray.module, tasks, runner, max_retries, on_done, failed)
            return RunSummary(spec.study_id, len(plan), len(done), count[0] - len(done), failed)
        finally:
            engine.dispose()
    finally:
        if ray is not None:
            ray.close()


# ------------------------------------------------------------------------------------ local


def _worker_init() -> None:
    """One torch thread per worker: one CPU each, and the same arithmetic under any executor
    (set through the environment when torch is not imported yet, so idle workers stay light)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _run_local(tasks, runner, workers, max_retries, on_done, failed) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = list(reversed(tasks))
    attempts: dict[str, int] = {}

    def settle(future, task) -> bool:
        """Store or requeue a finished future's unit; False when its worker died."""
        try:
            result = future.result()
        except BrokenProcessPool:
            attempts[task.unit.key] = attempts.get(task.unit.key, 0) + 1
            if attempts[task.unit.key] > max_retries:
                failed[task.unit.key] = "its worker process died (retries exhausted)"
            else:
                queue.append(task)
            return False
        except Exception as exc:  # the unit itself raised: record it and go on
            failed[task.unit.key] = _reason(exc)
        else:
            on_done(task, result)
        return True

    while queue:  # one pool per round; a worker's death ends the round and loses its pool
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init) as pool:
            in_flight: dict = {}
            healthy = True
            while healthy and (queue or in_flight):
                while queue and len(in_flight) < workers:
                    try:
                        future = pool.submit(runner, queue[-1])
                    except BrokenProcessPool:  # broke since the last wait: settle, new round
                        break
                    in_flight[future] = queue.pop()
                if not in_flight:
                    break
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    healthy = settle(future, in_flight.pop(future)) and healthy
        for future, task in in_flight.items():  # the pool is shut down: all are done now
            settle(future, task)


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -------------------------------------------------------------------------------------- ray


def _ray_unit(runner, task):
    _worker_init()
    return runner(task)


def _run_ray(ray, tasks, runner, max_retries, on_done, failed) -> None:
    remote = ray.remote(num_cpus=1, max_retries=max_retries)(_ray_unit)
    runner_ref = ray.put(runner)
    pending = {remote.remote(runner_ref, task): task for task in tasks}
    while pending:
        finished, _ = ray.wait(list(pending), num_returns=1)
        for ref in finished:
            task = pending.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as exc:  # the unit raised, or its worker died past its retries
                failed[task.unit.key] = _reason(getattr(exc, "cause", None) or exc)
            else:
                on_done(task, result)


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
