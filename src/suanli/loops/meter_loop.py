"""Runs the billing meter (`BillingService.meter`) on a timer and soon after a rental ends (a signal).

An asyncio task in the server's lifespan; the meter run (database work) goes to a worker thread. Only the
leader meters: it shares the scheduler loop's `Leadership`. The meter is idempotent (it posts only what is not
posted yet, under keys the database keeps unique), so a run cut short is completed by the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from suanli.app.billing import BillingService
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)


class MeterLoop:
    def __init__(self, billing: BillingService, leadership: Leadership, interval_s: float) -> None:
        self.billing, self.leadership, self.interval_s = billing, leadership, interval_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.runs = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="suanli-meter")

    def signal(self) -> None:
        """Ask for a meter run soon (a rental ended); safe from any thread, a no-op when not running."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
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
                await asyncio.to_thread(self.billing.meter)
                self.runs += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("meter run failed; retrying on the next wake-up")
