"""Marks nodes down that missed their heartbeats (`AgentService.reap`), every half heartbeat interval.

Only the leader reaps: it shares the scheduler loop's `Leadership`, so one process decides both placements and
failures.
"""

from __future__ import annotations

import logging

from suanli.app.agents import AgentService
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)


class ReaperLoop(LeaderLoop):
    name = "suanli-reaper"

    def __init__(self, agents: AgentService, leadership: Leadership, period_s: float) -> None:
        super().__init__(leadership, period_s)
        self.agents = agents

    def work(self) -> None:
        marked = self.agents.reap()
        if marked:
            log.warning("nodes down (missed heartbeats): %s", ", ".join(marked))
