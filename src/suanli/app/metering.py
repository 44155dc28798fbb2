"""The meter (`Metering`, a part of `BillingService`): every rental's charge to date posted in batches of
rentals in id order, each batch one database transaction chained on the one before.

With `pipeline_meter` (the server on PostgreSQL) a batch is written on a second connection while the next is
read and computed: the next batch chains on the hash its predecessor will commit and spends the grants its
predecessor left, and the batches still commit in order. A conflict (another writer appended after a batch's
head, or posted one of its rentals' charges) throws away what was computed past the last committed batch, and
the run reads again from there, as a sequential run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from suanli.app.errors import Conflict
from suanli.app.ports import UnitOfWork
from suanli.app.postings import APPEND_ATTEMPTS  # conflicts in a row at one batch before the run gives up
from suanli.app.records import END_STATES, MeterRental
from suanli.app.usage import rental_usage, replaced
from suanli.domain.billing.ledger import AccountId, AccountKind, Transaction, TxKind
from suanli.domain.billing.meter import PostedCharges, RentalUsage, charge_postings, provider_parts
from suanli.domain.billing.money import to_epoch_s

if TYPE_CHECKING:
    from suanli.app.billing import BillingService

# a live rental's later charges stamp it as changed (`GET /v1/rentals?updated_after=`) at most this often: its
# first charge and its final one (closing it) always do; each stamp is a write (`rental_charge_stamps`, 0055)
CHARGE_RESTAMP_S = 300.0


@dataclass(frozen=True, slots=True)
class MeterRun:
    """What a meter run charges: at `now`, only `only`'s rentals or only the ended ones, `batch` at a time."""

    now: datetime
    only: Sequence[str] | None
    batch: int
    providers: dict[str, str]
    ended_only: bool


@dataclass(frozen=True, slots=True)
class MeterBatch:
    """One batch's charges, computed and not yet written; `head`: the chain's head once they are."""

    added: list[Transaction]
    closed: list[str]
    charged: list[tuple[str, str]]  # (rental id, tenant id) of each rental charged
    last: str | None  # the last rental id read, when more may follow
    head: str


@dataclass(slots=True)
class GrantsSeen:
    """The tenants' grants balances as a run's charges leave them (read once per tenant, then carried)."""

    balances: dict[AccountId, int] = field(default_factory=dict)
    tenants: set[str] = field(default_factory=set)


@dataclass(slots=True)
class MeterProgress:
    """What a run has committed: the transactions, the last batch's last rental id, and whether it is done."""

    added: int = 0
    after: str | None = None
    done: bool = False

    def committed(self, batch: MeterBatch) -> None:
        self.added += len(batch.added)
        self.after, self.done = batch.last, batch.last is None


class Metering:
    """The meter, a part of `BillingService`."""

    def meter(
        self: BillingService,
        now: datetime | None = None,
        only: Sequence[str] | None = None,
        batch: int = 2000,
        *,
        ended_only: bool = False,
    ) -> int:
        """Post every rental's charge delta at `now` (only `only`'s, or only the ended ones' when
        `ended_only`); returns the number of transactions added.

        The rentals still open for billing are read in id order, `batch` at a time; each batch is one
        database transaction (its charges chained on the head before it, then its closed rentals marked), so
        a run cut short keeps the batches it committed and the next run posts exactly the rest.
        """
        with self.uow() as uow:
            providers = self._providers(uow)
        run = MeterRun(now or self.clock.now(), only, batch, providers, ended_only)
        progress, conflicts = MeterProgress(), 0
        while not progress.done:
            cursor = progress.after
            try:
                self._meter_batches(run, progress)
            except Conflict:  # another writer appended after a batch's head: read the new head, redo
                conflicts = conflicts + 1 if progress.after == cursor else 1
                if conflicts >= APPEND_ATTEMPTS:
                    raise
        return progress.added

    def meter_ended(self: BillingService, now: datetime | None = None) -> int:
        """Post the final charges of the rentals that ended and are still open for billing (what a rental's
        end wakes the meter for); the live ones wait for the meter's timer. The transactions added."""
        return self.meter(now, ended_only=True)

    def _meter_batches(self: BillingService, run: MeterRun, progress: MeterProgress) -> None:
        """Charge the batches after `progress.after` until the last, moving `progress` on as each commits."""
        if not self.pipeline_meter:
            while not progress.done:
                with self.uow() as uow:
                    computed = self._meter_batch(uow, run, progress.after, None, GrantsSeen())
                    if computed is None:
                        progress.done = True
                        return
                    self._write_batch(uow, computed, run.now)
                    uow.commit()
                progress.committed(computed)
            return
        grants, head, cursor = GrantsSeen(), None, progress.after
        writing: tuple[Future[None], MeterBatch] | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="meter-writer") as writer:
            while True:
                with self.uow() as uow:  # read and computed while the batch before is written
                    computed = self._meter_batch(uow, run, cursor, head, grants)
                if writing is not None:
                    writing[0].result()  # its Conflict ends this attempt: `progress` is where it began
                    progress.committed(writing[1])
                if computed is None:
                    progress.done = True
                    return
                if computed.last is None:  # the last batch: nothing to read meanwhile
                    self._write_alone(computed, run.now)
                    progress.committed(computed)
                    return
                writing = (writer.submit(self._write_alone, computed, run.now), computed)
                head, cursor = computed.head, computed.last

    def _write_alone(self: BillingService, computed: MeterBatch, now: datetime) -> None:
        with self.uow() as uow:
            self._write_batch(uow, computed, now)
            uow.commit()

    @staticmethod
    def _write_batch(uow: UnitOfWork, computed: MeterBatch, now: datetime) -> None:
        """A batch's charges appended, its charged rentals stamped and its closed rentals marked."""
        uow.ledger.append_many(computed.added, now)
        uow.rentals.stamp_charged(computed.charged, unless_within_s=CHARGE_RESTAMP_S)
        uow.rentals.close_billing(computed.closed, now)

    def _meter_batch(
        self: BillingService,
        uow: UnitOfWork,
        run: MeterRun,
        after: str | None,
        head: str | None,
        grants: GrantsSeen,
    ) -> MeterBatch | None:
        """The charges of the batch after `after`, chained on `head` (None: the ledger's head now), grants
        spent as `grants` left them (its tenants not seen yet read now); None when no rental is left."""
        now_s = to_epoch_s(run.now)
        if head is None:  # read first: whatever is appended after it (by anyone) makes the append conflict
            head = uow.ledger.head_hash()
        items = uow.rentals.meter_page(after, run.batch, run.only, ended_only=run.ended_only)
        if not items:
            return None
        last = items[-1].id if len(items) >= run.batch else None
        posted = uow.ledger.posted_charges(item.id for item in items)
        rates = uow.rentals.rate_changes(first=items[0].id, last=items[-1].id)  # spot re-pricing
        runs = uow.rentals.run_spans([item.id for item in items if replaced(item)])  # re-queued
        held = uow.rentals.held_allocations(first=items[0].id, last=items[-1].id)  # several nodes
        unseen = {item.tenant_id for item in items} - grants.tenants
        if unseen:
            grants.balances.update(uow.ledger.balances(unseen, kinds=(AccountKind.TENANT_GRANTS,)))
            grants.tenants |= unseen
        added: list[Transaction] = []
        closed: list[str] = []
        usages = [
            rental_usage(
                item, run.providers, rates.get(item.id, ()), runs.get(item.id, ()), held.get(item.id, ())
            )
            for item in items
        ]
        shared = [usage.rental_id for usage in usages if usage is not None and usage.shared]
        credits = uow.ledger.provider_credits(shared) if shared else {}
        tenant_of: dict[str, str] = {}
        for item, usage in zip(items, usages, strict=True):
            if usage is None:  # no rate: never charged
                if item.state in END_STATES:
                    closed.append(item.id)
                continue
            if _final(item, usage, now_s):  # what is posted now is all it will ever be charged
                closed.append(usage.rental_id)
            already = posted.get(usage.rental_id, PostedCharges())
            credited = dict(credits.get(usage.rental_id, {}))
            for at_s, delta in usage.charge_by_day(already.micros, now_s):  # one charge per UTC day
                tx = self._charge(head, usage, at_s, delta, already, grants.balances, credited)
                head = tx.hash
                already = PostedCharges(already.micros + delta, already.count + 1)
                added.append(tx)
                tenant_of[usage.rental_id] = item.tenant_id
        return MeterBatch(added, closed, sorted(tenant_of.items()), last, head)

    def _charge(
        self: BillingService,
        head: str,
        usage: RentalUsage,
        at_s: int,
        delta: int,
        already: PostedCharges,
        balances: dict[AccountId, int],
        credited: dict[str, int],
    ) -> Transaction:
        """The rental's next charge, `delta` run up by `at_s` after `already`, chained on `head`; the grants
        balance and what each provider was `credited` are moved on by it, for the charge after."""
        grants_account = AccountId.tenant_grants(usage.tenant)
        grants = balances.get(grants_account, 0)
        parts = None
        if usage.shared:  # several providers' nodes: each its share to date less what it had
            parts = provider_parts(usage, delta, self.commission_bp, already.micros, credited, at_s)
            for owner, micros in parts.items():
                credited[owner] = credited.get(owner, 0) + micros
        postings = charge_postings(usage, delta, grants, self.commission_bp, already.micros, parts)
        tx = Transaction.chained(
            head,
            key=f"charge:{usage.rental_id}:{already.count + 1}",
            kind=TxKind.CHARGE,
            at_s=at_s,
            postings=postings,
            ref=usage.rental_id,
            memo=usage.memo(at_s),
        )
        if grants > 0:  # the only balance a charge reads: the tenant's grants, spent first
            balances[grants_account] = grants + sum(
                p.amount_micros for p in tx.postings if p.account == grants_account
            )
        return tx

    def _providers(self: BillingService, uow: UnitOfWork) -> dict[str, str]:
        _, fleet = self.cache.load(uow)
        return {} if fleet is None else {node.name: node.provider for node in fleet.nodes}


def _final(item: MeterRental, usage: RentalUsage, now_s: int) -> bool:
    """The rental has ended for good and `now_s` is past its end: its charge to date is final."""
    return item.state in END_STATES and usage.ended_s is not None and now_s >= usage.ended_s
