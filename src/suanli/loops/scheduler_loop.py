"""Runs a scheduling cycle when signalled (a rental was submitted, stopped or resized) and on a timer.

The cycle (database and domain work) runs in a worker thread, on the leader only (see `LeaderLoop`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from suanli.app.scheduling import CycleReport, Scheduler
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership


class SchedulerLoop(LeaderLoop):
    name = "suanli-scheduler"

    def __init__(
        self,
        scheduler: Scheduler,
        leadership: Leadership,
        interval_s: float,
        on_report: Callable[[CycleReport], None],
    ) -> None:
        super().__init__(leadership, interval_s)
        self.scheduler, self.on_report = scheduler, on_report

    @property
    def cycles(self) -> int:
        return self.runs

    def work(self) -> None:
        self.on_report(self.scheduler.run_cycle())

    async def stop(self) -> None:
        await super().stop()
        await asyncio.to_thread(self.leadership.release)
