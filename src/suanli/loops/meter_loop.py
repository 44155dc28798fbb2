"""Runs the billing meter (`BillingService.meter`) on a timer and soon after a rental ends (a signal).

Only the leader meters (it shares the scheduler loop's `Leadership`). The meter is idempotent: it posts only
what is not posted yet, under keys the database keeps unique, so a run cut short is completed by the next one.
Before each pass it runs the `before` jobs at the pass's own instant (contract coverage: a rate change from a
contract's start or end must be in place before the pass charges across it, since the meter never posts a
negative delta). After each pass it posts the SLA credits of the month before (`SlaService.post_due`: once a
month), then runs the `after` jobs: grant expiry, contract revenue, and the low-balance warnings and stops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

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
        before: Sequence[Callable[[datetime], object]] = (),
    ) -> None:
        super().__init__(leadership, interval_s)
        self.billing, self.sla, self.after, self.before = billing, sla, tuple(after), tuple(before)

    def work(self) -> None:
        now = self.billing.clock.now()
        for job in self.before:
            job(now)
        self.billing.meter(now=now)
        if self.sla is not None:
            self.sla.post_due()
        for job in self.after:
            job()
