"""Runs a scheduling cycle when signalled (a rental was submitted, stopped or resized) and on a timer.

The cycle (database and domain work) runs in a worker thread, on the leader only (see `LeaderLoop`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from suanli.app.scheduling import CycleReport, Scheduler
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership

DEADLINE_SLACK_S = 0.05


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

    def due_in_s(self) -> float | None:
        """At the next notice deadline (a little after it, so the cycle finds it passed)."""
        deadline = self.scheduler.next_deadline
        if deadline is None:
            return None
        return (deadline - self.scheduler.clock.now()).total_seconds() + DEADLINE_SLACK_S

    async def stop(self) -> None:
        await super().stop()
        await asyncio.to_thread(self.leadership.release)
