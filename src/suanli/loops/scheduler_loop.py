"""Runs a scheduling cycle when signalled (a rental was submitted, stopped or resized) and on a timer.

An asyncio task in the server's lifespan; the cycle itself (database and domain work) runs in a worker
thread. Only the leader runs cycles: each wake-up first (re)checks leadership.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from suanli.app.scheduling import CycleReport, Scheduler
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)


class SchedulerLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        leadership: Leadership,
        interval_s: float,
        on_report: Callable[[CycleReport], None],
    ) -> None:
        self.scheduler, self.leadership, self.interval_s = scheduler, leadership, interval_s
        self.on_report = on_report
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.cycles = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="suanli-scheduler")

    def signal(self) -> None:
        """Ask for a cycle soon; safe from any thread, a no-op when the loop is not running."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.leadership.release)
        self._loop = None

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
            self._wake.clear()
            try:
                if not await asyncio.to_thread(self.leadership.try_acquire):
                    continue
                report = await asyncio.to_thread(self.scheduler.run_cycle)
                self.cycles += 1
                self.on_report(report)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying on the next wake-up")
