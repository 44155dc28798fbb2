"""Runs the billing meter (`BillingService.meter`) on a timer and soon after a rental ends (a signal).

Only the leader meters (it shares the scheduler loop's `Leadership`). The meter is idempotent: it posts only
what is not posted yet, under keys the database keeps unique, so a run cut short is completed by the next one.
"""

from __future__ import annotations

from suanli.app.billing import BillingService
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership


class MeterLoop(LeaderLoop):
    name = "suanli-meter"

    def __init__(self, billing: BillingService, leadership: Leadership, interval_s: float) -> None:
        super().__init__(leadership, interval_s)
        self.billing = billing

    def work(self) -> None:
        self.billing.meter()
