"""Runs the billing meter (`BillingService.meter`) on a timer and soon after a rental ends (a signal).

Only the leader meters (it shares the scheduler loop's `Leadership`). The meter is idempotent: it posts only
what is not posted yet, under keys the database keeps unique, so a run cut short is completed by the next one.
After each pass it posts the SLA credits of the month before (`SlaService.post_due`: once a month), then
runs the `after` jobs: grant expiry, contract revenue, the end of ended contracts' coverage, and the
low-balance warnings and stops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from suanli.app.billing import BillingService
from suanli.app.sla import SlaService
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership


class MeterLoop(LeaderLoop):
    name = "suanli-meter"

    def __init__(
        self,
        billing: BillingService,
        leadership: Leadership,
        interval_s: float,
        sla: SlaService | None = None,
        after: Sequence[Callable[[], object]] = (),
    ) -> None:
        super().__init__(leadership, interval_s)
        self.billing, self.sla, self.after = billing, sla, tuple(after)

    def work(self) -> None:
        self.billing.meter()
        if self.sla is not None:
            self.sla.post_due()
        for job in self.after:
            job()
