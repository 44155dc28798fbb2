"""SLA credits: each tenant's monthly availability from the node outages that hit its rentals, and the credit
posted for it (see `suanli.domain.billing.sla` for the definition and the tiers).

* Outages are recorded by `suanli.app.agents` (a node marked down opens one at its last heartbeat; it closes
  when the node heartbeats again). A rental's interval is the meter's billable interval
  (`suanli.app.usage.billable_end`) in the clock's whole seconds, as outages are, and its nodes every node
  it held.
* `post_month(month)` posts each tenant's credit once, under key `sla:{tenant}:{yyyy-mm}` (platform revenue ->
  tenant cash, the outage ids in the memo); a month that has not ended is refused. A key already posted is
  kept as it is (a later recomputation never posts twice). `post_due()` does it for the month before now and
  runs after every meter pass; a month it has finished is remembered, and a month without outages costs one
  query.
* `report(caller, month)`: a tenant's availability, the outages that hit it, its affected charges and credit
  (up to now for the running month), and the posted credit when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from suanli.app.errors import Conflict, Invalid, NotFound
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.postings import post_once, retrying
from suanli.app.records import BillableRental, Caller
from suanli.app.tenants import require_admin
from suanli.app.usage import billable_end, metered, rental_usage
from suanli.domain.billing.invoice import InvoiceError, Month
from suanli.domain.billing.ledger import AccountKind, Transaction, TxKind
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.sla import SlaRental, SlaReport, sla_key, sla_report

_CHARGED = frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE})


@dataclass(frozen=True, slots=True)
class SlaStatement:
    """A tenant's SLA month and, once posted, its credit transaction."""

    report: SlaReport
    ended: bool  # the month is over (only then is a credit posted)
    posted: Transaction | None
    new: bool = False  # posted by this call

    @property
    def posted_micros(self) -> int:
        if self.posted is None:
            return 0
        return self.posted.amount_to(frozenset({AccountKind.TENANT_CASH}))


def parse_month(text: str) -> Month:
    try:
        return Month.parse(text)
    except InvoiceError as error:
        raise Invalid(str(error), field="month") from None


def previous_month(moment: datetime) -> Month:
    at = moment.astimezone(UTC)
    return Month(at.year - 1, 12) if at.month == 1 else Month(at.year, at.month - 1)


def _datetime(epoch_s: int) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


class SlaService:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock) -> None:
        self.uow, self.clock = uow, clock
        self._finished: set[Month] = set()

    # --- reading ---------------------------------------------------------------------------------------

    def report(self, caller: Caller, month_text: str, tenant_id: str | None = None) -> SlaStatement:
        """The caller's SLA month (an admin may name another tenant)."""
        month = parse_month(month_text)
        target = caller.tenant.id if tenant_id is None or tenant_id == caller.tenant.id else tenant_id
        if target != caller.tenant.id and not caller.is_admin:
            raise NotFound(f"no tenant {target}")
        now_s = to_epoch_s(self.clock.now())
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            (found,) = self._reports(uow, month, now_s, only=target)
            posted = uow.ledger.get(sla_key(target, month))
        return SlaStatement(found, now_s >= month.end_s, posted)

    # --- posting ---------------------------------------------------------------------------------------

    def post_month(self, caller: Caller, month_text: str) -> list[SlaStatement]:
        """Admin: post every tenant's credit for an ended month; the tenants whose rentals an outage hit."""
        require_admin(caller)
        return self._post(parse_month(month_text), self.clock.now())

    def post_due(self, now: datetime | None = None) -> int:
        """Post the credits of the month before `now` (the meter loop calls it); the credits newly posted."""
        now = now or self.clock.now()
        month = previous_month(now)
        if month in self._finished:
            return 0
        done = self._post(month, now)
        self._finished.add(month)
        return sum(1 for s in done if s.new)

    def _post(self, month: Month, now: datetime) -> list[SlaStatement]:
        now_s = to_epoch_s(now)
        if now_s < month.end_s:
            raise Conflict(f"{month} has not ended; its SLA credits are posted after it", field="month")
        with self.uow() as uow:
            reports = [r for r in self._reports(uow, month, now_s, only=None) if r.down_s > 0]
        result = []
        for found in reports:
            posted, new = self._post_one(found, now) if found.credit_micros > 0 else (None, False)
            result.append(SlaStatement(found, True, posted, new))
        return result

    def _post_one(self, found: SlaReport, now: datetime) -> tuple[Transaction, bool]:
        """Post the month's credit once; a credit already posted under the key stays as it was."""

        def work() -> tuple[Transaction, bool]:
            with self.uow() as uow:
                existing = uow.ledger.get(found.key)
                if existing is not None:
                    return existing, False
                tx = post_once(
                    uow,
                    now,
                    key=found.key,
                    kind=TxKind.SLA_CREDIT,
                    postings=found.postings(),
                    ref=found.tenant_id,
                    memo=found.memo,
                )
                uow.commit()
                return tx, True

        return retrying(work)

    # --- computing -------------------------------------------------------------------------------------

    @staticmethod
    def _reports(uow: UnitOfWork, month: Month, now_s: int, *, only: str | None) -> list[SlaReport]:
        """Reports for `only` (always one, even without outages) or for every tenant an outage hit."""
        outages = uow.outages.overlapping(_datetime(month.start_s), _datetime(month.end_s))
        if not outages and only is None:
            return []
        billable = [b for b in uow.rentals.billable() if only is None or b.rental.tenant_id == only]
        nodes = uow.outages.nodes_of([b.rental.id for b in billable]) if outages else {}
        by_tenant: dict[str, list[SlaRental]] = {} if only is None else {only: []}
        for item in billable:
            usage = rental_usage(item, {})
            if usage is None:
                continue
            rental_nodes = nodes.get(usage.rental_id, frozenset({item.node}))
            by_tenant.setdefault(usage.tenant, []).append(
                SlaRental(usage.rental_id, usage.started_s, _clock_end_s(item, usage.started_s), rental_nodes)
            )
        reports = []
        for tenant_id, rentals in sorted(by_tenant.items()):
            found = sla_report(tenant_id, month, rentals, outages, {}, now_s)
            if found.down_s > 0:  # only then do charges matter: read them
                found = sla_report(tenant_id, month, rentals, outages, _charges(uow, tenant_id), now_s)
            if only is not None or found.down_s > 0:
                reports.append(found)
        return reports


def _clock_end_s(item: BillableRental, started_s: int) -> int | None:
    """The rental's billable end on the outages' scale (the clock's whole seconds), not the meter's (whole
    seconds counted from its start, a second sooner when the start's fraction is the larger): a lost rental
    ends at its node's last heartbeat, the second its outage starts, and that outage must hit it."""
    end = billable_end(metered(item))
    return None if end is None else max(started_s, to_epoch_s(end))


def _charges(uow: UnitOfWork, tenant_id: str) -> dict[str, list[tuple[int, int]]]:
    charges: dict[str, list[tuple[int, int]]] = {}
    for tx in uow.ledger.transactions(tenant_id):
        if tx.kind is TxKind.CHARGE:
            charges.setdefault(tx.ref, []).append((tx.at_s, tx.amount_to(_CHARGED)))
    return charges
