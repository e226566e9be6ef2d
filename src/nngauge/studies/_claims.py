"""Claims: which run is running which unit, under a lease its driver renews.

Several drivers (``nngauge study run`` processes, on one machine or many) may work on one
database at the same time; the ``claims`` table (see :mod:`nngauge.studies._db`) splits the
work between them, after the heartbeat design of Optuna's RDB storage (Akiba et al.,
"Optuna: A Next-generation Hyperparameter Optimization Framework", KDD 2019): a running
trial's process records heartbeats, and a trial whose last heartbeat is older than a grace
period belongs to a dead process. Here such a unit is taken over by another run.

- **Claim** (one transaction, before a unit goes to a worker): take over the unit's claim if
  its lease has expired (``UPDATE ... WHERE key = k AND expires < now``, rowcount 1), else
  insert a new claim (the primary key lets one of two racing inserts win; the other gets an
  integrity error: the unit is busy). A claimed unit whose row is already in ``units`` was
  finished by another run: the claim is dropped and the unit skipped.
- **Heartbeat**: while units run, a thread of the driver renews the leases of all its claims
  every ``lease / 3`` seconds (one ``UPDATE ... WHERE owner = me``).
- **End of a unit**: a finished unit's claim is dropped in the transaction that writes it; a
  failed unit's claim is released (deleted), so that a later run tries it again; when a run
  ends, also by Ctrl-C or an error, it releases all its claims.
- **A driver dies**: its leases run out, and another run (a concurrent one, or the rerun)
  takes its units over. Should it only have stalled, both may finish a unit: the ``units``
  primary key keeps the first result, and the second counts as done by another run.

Times are seconds since the epoch on the database server's clock when the server reports its
time zone (PostgreSQL; the offset of this machine's clock is measured once), else on this
machine's clock (SQLite, a file of this machine). Clock differences between machines larger
than the lease can only cause a unit to be run twice, never to be written twice.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterator, Literal, Optional

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from nngauge.studies._db import claims, units

Outcome = Literal["claimed", "busy", "done"]
"""What a claim attempt found: the unit is now this run's, another live run holds it, or it
is already in the database."""

DEFAULT_LEASE = 30.0
"""Seconds a claim lasts without renewal (renewed every third of it): how long the units of a
killed driver wait before another run takes them over."""


def owner_id() -> str:
    """This run's name in the claims: ``host:pid:random`` (the random part tells apart two
    runs of one process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def clock_offset(engine: Engine) -> float:
    """Seconds to add to this machine's ``time.time()`` to read the database server's clock;
    0 when the server gives its time without a time zone (SQLite, MySQL)."""
    with engine.connect() as conn:
        before = time.time()
        now = conn.execute(select(func.current_timestamp())).scalar()
        after = time.time()
    if not isinstance(now, datetime) or now.tzinfo is None:
        return 0.0
    return now.timestamp() - (before + after) / 2


@dataclass
class Claims:
    """One run's claims on the units of one study (see the module docstring).

    Example:
        >>> from nngauge.studies._db import open_db
        >>> engine = open_db("sqlite://")
        >>> mine, other = Claims(engine, "study"), Claims(engine, "study")
        >>> mine.claim("unit-1"), other.claim("unit-1"), other.held_by_others()
        ('claimed', 'busy', {'unit-1'})
        >>> mine.release(); other.claim("unit-1")
        'claimed'
    """

    engine: Engine
    study_id: str
    lease: float = DEFAULT_LEASE
    owner: str = field(default_factory=owner_id)
    offset: float = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def claim(self, key: str) -> Outcome:
        """Claim unit ``key`` for this run, in one transaction."""
        now = self.now()
        try:
            with self.engine.begin() as conn:
                taken = conn.execute(
                    claims.update().where(claims.c.key == key, claims.c.expires < now)
                    .values(owner=self.owner, expires=now + self.lease)).rowcount
                if not taken:
                    conn.execute(claims.insert().values(key=key, study_id=self.study_id,
                                                        owner=self.owner,
                                                        expires=now + self.lease))
                if conn.execute(select(units.c.key).where(units.c.key == key)).first():
                    conn.execute(claims.delete().where(claims.c.key == key))
                    return "done"
        except IntegrityError:  # a live claim of another run won the insert
            return "busy"
        return "claimed"

    def held_by_others(self) -> set[str]:
        """Keys of this study's units that other runs hold under a live lease (one query:
        the claims table holds only the units in flight)."""
        with self.engine.connect() as conn:
            return set(conn.execute(select(claims.c.key).where(
                claims.c.study_id == self.study_id, claims.c.owner != self.owner,
                claims.c.expires >= self.now())).scalars())

    def release(self, key: Optional[str] = None) -> None:
        """Drop this run's claim on ``key`` (None: all its claims)."""
        mine = claims.c.owner == self.owner
        if key is not None:
            mine &= claims.c.key == key
        with self.engine.begin() as conn:
            conn.execute(claims.delete().where(mine))

    def renew(self) -> None:
        """Extend the leases of all this run's claims by ``lease`` seconds from now."""
        with self.engine.begin() as conn:
            conn.execute(claims.update().where(claims.c.owner == self.owner)
                         .values(expires=self.now() + self.lease))

    @contextmanager
    def heartbeat(self) -> Iterator[Claims]:
        """Renew the leases from a thread while the block runs; at its end (also on Ctrl-C or
        an error) stop, and release every claim of this run."""
        stop = threading.Event()
        thread = threading.Thread(target=self._beat, args=(stop,), daemon=True,
                                  name="nngauge-study-heartbeat")
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            try:
                self.release()
            except SQLAlchemyError:  # the database is gone: the leases expire by themselves
                pass

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(self.lease / 3):
            try:
                self.renew()
            except SQLAlchemyError:  # a passing outage: try again at the next beat
                pass
