"""Marks nodes down that missed their heartbeats (`AgentService.reap`) and stops the rentals at their time
limit (`RentalService.stop_overdue`), every half heartbeat interval (at most 5 s).

Only the leader reaps: it shares the scheduler loop's `Leadership`, so one process decides both placements and
failures. After a pause in its own ticks (the process stalled, or it leads again) it marks no node down on the
first tick: heartbeats sent to it meanwhile may still wait in its sockets, and a healthy node's rentals would
end lost. The pause is judged on the process's monotonic clock, never the service's clock (which tests and the
simulator move).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from suanli.app.agents import AgentService
from suanli.app.rentals import RentalService
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)

STALL_FLOOR_S = 2.0  # a gap between ticks shorter than this is scheduling jitter, never a stall


class ReaperLoop(LeaderLoop):
    name = "suanli-reaper"

    def __init__(
        self,
        agents: AgentService,
        leadership: Leadership,
        period_s: float,
        rentals: RentalService | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(leadership, period_s)
        self.agents, self.rentals, self.monotonic_s = agents, rentals, monotonic_s
        self.ticked_at_s: float | None = None

    def stalled_s(self) -> float | None:
        """The pause since the last tick when long enough to have kept heartbeats unread (else None)."""
        now_s = self.monotonic_s()
        last_s, self.ticked_at_s = self.ticked_at_s, now_s
        if last_s is None or now_s - last_s <= max(self.agents.timeout_s / 2, STALL_FLOOR_S):
            return None
        return now_s - last_s

    def work(self) -> None:
        if (paused_s := self.stalled_s()) is not None:
            log.warning("reaping paused %.1f s: no node is marked down before the next tick", paused_s)
        elif marked := self.agents.reap():
            log.warning("nodes down (missed heartbeats): %s", ", ".join(marked))
        if self.rentals is not None and (stopped := self.rentals.stop_overdue()):
            log.info("stopped at their max duration: %s", ", ".join(stopped))
