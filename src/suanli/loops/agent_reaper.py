"""Marks nodes down that missed their heartbeats (`AgentService.reap`) and stops the rentals at their time
limit (`RentalService.stop_overdue`), every half heartbeat interval (at most 5 s).

Only the leader reaps: it shares the scheduler loop's `Leadership`, so one process decides both placements and
failures.
"""

from __future__ import annotations

import logging

from suanli.app.agents import AgentService
from suanli.app.rentals import RentalService
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)


class ReaperLoop(LeaderLoop):
    name = "suanli-reaper"

    def __init__(
        self,
        agents: AgentService,
        leadership: Leadership,
        period_s: float,
        rentals: RentalService | None = None,
    ) -> None:
        super().__init__(leadership, period_s)
        self.agents, self.rentals = agents, rentals

    def work(self) -> None:
        marked = self.agents.reap()
        if marked:
            log.warning("nodes down (missed heartbeats): %s", ", ".join(marked))
        if self.rentals is not None and (stopped := self.rentals.stop_overdue()):
            log.info("stopped at their max duration: %s", ", ".join(stopped))
