"""Wake-ups between server processes on PostgreSQL: `NOTIFY` on one channel, `LISTEN` in every process.

A rental created, stopped or resized in one worker must wake the scheduler of the leader (and, when a rental
ended, its meter), which may run in another process (`suanli server --workers N`, or several servers on one
database). A process that is not the leader sends `pg_notify`, its payload `ended` when a rental ended; each
process listens on a connection of its own and passes a notification on to its loops, which act only while
they lead. On SQLite there is one server process: nothing to do.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from suanli.app.ports import Wake

CHANNEL = "suanli_wake"
ENDED = "ended"  # the payload of a wake-up for a rental's end: its final charge is due, the meter runs too
POLL_S = 0.5  # how often the listener checks that it should go on
RETRY_S = 2.0  # after a lost connection

log = logging.getLogger(__name__)


class Wakeups:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.enabled = engine.dialect.name == "postgresql"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def notify(self, *, ended: bool = False) -> None:
        """Wake the other processes' loops, their meter too when `ended` (delivered to listeners once this
        short transaction commits).

        Best effort: the change that calls for it is already committed, and the leader's timer picks it up
        anyway, so a failure is logged, not raised to the request that made the change."""
        if not self.enabled:
            return
        try:
            with self.engine.connect() as connection:
                payload = ENDED if ended else ""
                connection.execute(
                    text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload}
                )
                connection.commit()
        except SQLAlchemyError as error:
            log.warning("could not wake the leader (%s); its timer will run the cycle", error)

    def listen(self, on_wake: Wake) -> None:
        """Call `on_wake` (in a daemon thread) for each notification until `stop`, `ended` when its payload
        says a rental ended."""
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(on_wake,), name="suanli-wakeups", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self, on_wake: Wake) -> None:
        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    while not self._stop.is_set():
                        for notification in connection.notifies(timeout=POLL_S):
                            try:
                                on_wake(ended=notification.payload == ENDED)
                            except Exception:  # a wake-up must not end the listener
                                log.exception("wake-up handler failed")
            except psycopg.Error as error:
                log.warning("wake-up listener lost its connection (%s); retrying", error)
                self._stop.wait(RETRY_S)
