"""`LeaderLoop`: periodic work that only the leader does, on a timer and when signalled.

An asyncio task in the server's lifespan. Each wake-up (re)checks leadership, then runs `work()` in a worker
thread (it does database work). A failed run is logged and retried at the next wake-up; signals that arrive
during a run collapse into one more run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from suanli.store.leader import Leadership

log = logging.getLogger(__name__)


class LeaderLoop:
    name = "suanli-loop"

    def __init__(self, leadership: Leadership, interval_s: float) -> None:
        self.leadership, self.interval_s = leadership, interval_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.runs = 0

    def work(self) -> None:
        """One run of the loop's work (in a worker thread, on the leader only)."""
        raise NotImplementedError

    def run_once(self) -> None:
        """What one wake-up runs (in a worker thread, on the leader only): `work()` unless a loop tells a
        signal's run from its timer's."""
        self.work()

    def due_in_s(self) -> float | None:
        """Seconds until the work is due again, when that is sooner than the interval (None: the interval)."""
        return None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=self.name)

    def signal(self) -> None:
        """Ask for a run soon; safe from any thread, a no-op when the loop is not running."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        """Cancel the loop and wait for it. The flag and the wake-up also end it when the cancellation is
        swallowed (Python 3.11's `wait_for` can lose a cancel that races its timeout)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            if self._wake is not None:
                self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._loop = None

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            due_s = self.due_in_s()
            timeout_s = self.interval_s if due_s is None else max(0.0, min(self.interval_s, due_s))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                if not await asyncio.to_thread(self.leadership.try_acquire):
                    continue
                await asyncio.to_thread(self.run_once)
                self.runs += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: run failed; retrying on the next wake-up", self.name)
