"""Runs the billing meter (`BillingService.meter`) on a timer and soon after a rental ends (a signal).

Only the leader meters (it shares the scheduler loop's `Leadership`). The timer's pass charges every rental
open for billing; a rental's end (`signal_ended`) runs a pass over the ended rentals only (their final
charges; ends that arrive together make one pass), so ends do not post a charge for every live rental. The
meter is idempotent: it posts only what is not posted yet, under keys the database keeps unique, so a run cut
short is completed by the next one, and a rental the end's pass charged and closed is not charged again by the
timer's. Before each pass it runs the `before` jobs at the pass's own instant (contract coverage: a rate
change from a contract's start or end must be in place before the pass charges across it, since the meter
never posts a negative delta). After each timer pass it posts the SLA credits of the month before
(`SlaService.post_due`: once a month), then runs the `after` jobs: grant expiry, contract revenue, and the
low-balance warnings and stops.
"""

from __future__ import annotations

import threading
import time
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
        self._timer_pass_at_monotonic_s = time.monotonic() + interval_s
        self._ended = threading.Event()  # a rental ended since the last pass: its final charge is due

    def signal_ended(self) -> None:
        """A rental ended: meter the ended rentals soon (safe from any thread)."""
        self._ended.set()
        self.signal()

    def due_in_s(self) -> float | None:
        """Seconds to the timer's pass: ends' passes in between do not put it off."""
        return max(0.0, self._timer_pass_at_monotonic_s - time.monotonic())

    def run_once(self) -> None:
        """The timer's pass when it is due; otherwise, after an end, a pass over the ended rentals only."""
        if time.monotonic() >= self._timer_pass_at_monotonic_s:
            self.work()
        elif self._ended.is_set():
            self._ended.clear()  # before the pass reads: an end signalled from now on runs another
            self.meter_ended()

    def work(self) -> None:
        """The timer's pass: every rental open for billing, and the jobs around it."""
        self._timer_pass_at_monotonic_s = time.monotonic() + self.interval_s
        self._ended.clear()  # this pass charges the ended rentals too
        now = self.billing.clock.now()
        for job in self.before:
            job(now)
        self.billing.meter(now=now)
        if self.sla is not None:
            self.sla.post_due()
        for job in self.after:
            job()

    def meter_ended(self) -> None:
        """An end's pass: the final charges of the rentals that ended, at the pass's own instant."""
        now = self.billing.clock.now()
        for job in self.before:
            job(now)
        self.billing.meter_ended(now=now)
