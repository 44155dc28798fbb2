"""Marks nodes down that missed their heartbeats (`AgentService.reap`), every half heartbeat interval.

An asyncio task in the server's lifespan; the reap (database work) runs in a worker thread. Only the leader
reaps: it shares the scheduler loop's `Leadership`, so one process decides both placements and failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from suanli.app.agents import AgentService
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)


class ReaperLoop:
    def __init__(self, agents: AgentService, leadership: Leadership, period_s: float) -> None:
        self.agents, self.leadership, self.period_s = agents, leadership, period_s
        self._task: asyncio.Task[None] | None = None
        self.reaps = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="suanli-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                if not await asyncio.to_thread(self.leadership.try_acquire):
                    continue
                marked = await asyncio.to_thread(self.agents.reap)
                self.reaps += 1
                if marked:
                    log.warning("nodes down (missed heartbeats): %s", ", ".join(marked))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reaping failed; retrying on the next tick")
