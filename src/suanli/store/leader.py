"""Who runs the scheduler: on PostgreSQL the holder of a session advisory lock (`pg_try_advisory_lock`) on a
connection kept out of the pool; on SQLite the one server process (a SQLite database has one server).

One `Leadership` is shared by the scheduler, meter and reaper loops, whose checks run in worker threads; a
lock serialises them, since a SQLAlchemy connection must not be used by two threads at once.
"""

from __future__ import annotations

import threading

from sqlalchemy import Connection, Engine, text

LEADER_LOCK = 0x5A4C_0002


class Leadership:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.single_process = engine.dialect.name != "postgresql"
        self._connection: Connection | None = None
        self._guard = threading.Lock()

    @property
    def held(self) -> bool:
        """True while this process leads, as of its last check (no database call)."""
        return self.single_process or self._connection is not None

    def try_acquire(self) -> bool:
        """True while this process leads; cheap to call before every cycle."""
        if self.single_process:
            return True
        with self._guard:
            return self._try_acquire()

    def _try_acquire(self) -> bool:
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT 1"))
                self._connection.commit()
                return True
            except Exception:  # the connection died, and the lock with it
                self._drop()
        connection = self.engine.connect()
        won = bool(
            connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": LEADER_LOCK}).scalar()
        )
        connection.commit()
        if won:
            self._connection = connection
        else:
            connection.close()
        return won

    def release(self) -> None:
        with self._guard:
            self._release()

    def _release(self) -> None:
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LEADER_LOCK})
                self._connection.commit()
            finally:
                self._drop()

    def _drop(self) -> None:
        if self._connection is not None:
            try:
                self._connection.invalidate()
                self._connection.close()
            finally:
                self._connection = None
