"""Contracts (compute futures): quote, sign if the fleet can honour it, list, transfer; their money.

Overbooking is refused by the domain's `check_contract`: at every instant of the window, the contracts of a
(model, region) stay within the fleet's GPUs of that model in that region less those down then: nodes in a
scheduled maintenance window, and nodes cordoned now, counted as down from now on with no end
(`app/downtime.py`).

Money (with a price book): signing posts the prepaid price, the reserved list price x GPUs x window hours,
from the holder's cash into the contract's prepaid account (key `contract:{id}`); the holder's rentals inside
the count and window then pay 0 marginal price (`suanli.app.pricing`). `recognize` earns the prepaid value
pro rata over the window into platform revenue (key `contract_earned:{id}:{earned to date}`). A transfer
first earns what is due, then the buyer pays the seller the remaining value
(key `transfer:{id}:{seller}:{buyer}:{epoch s}`). Coverage ends with the contract: from its end
(`follow_coverage`, a meter-loop job) or its transfer, the holder's rentals it covered pay their uncovered
rate, and from its start the holder's rentals placed before it are covered (`app/coverage.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from suanli.app.coverage import extend_coverage, settle_coverage
from suanli.app.downtime import down_for_contracts
from suanli.app.errors import Conflict, Forbidden, Invalid, NotFound, OverSpendLimit, PaymentRequired
from suanli.app.fleet import FleetCache
from suanli.app.ids import check_idempotency_key, derived_id, new_id, upcoming_window
from suanli.app.limits import spent_now
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.postings import post_once, retrying
from suanli.app.records import Caller, ContractRecord, domain_contract
from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import AccountId, TxKind
from suanli.domain.billing.money import money_text, to_epoch_s
from suanli.domain.billing.plans import (
    contract_postings,
    contract_price_micros,
    recognition_postings,
    recognized_micros,
    transfer_postings,
)
from suanli.domain.billing.pricebook import PriceBook
from suanli.domain.catalog import Catalog
from suanli.domain.contracts import ContractError, check_contract, fleet_capacity, transfer
from suanli.domain.errors import CatalogError
from suanli.domain.quotas import over_spend_limit
from suanli.domain.request import Tier


@dataclass(frozen=True, slots=True)
class ContractOrder:
    """What a buyer asks to hold: `count` GPUs of a model in a region over [starts_at, ends_at), for
    `tenant_id` (an admin's choice) or else the caller."""

    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    tenant_id: str | None = None


@dataclass(frozen=True, slots=True)
class ContractQuote:
    """A contract as signing it now would hold it, its prepaid price, and whether the payer can pay it now."""

    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    price_micros_per_gpu_hour: int  # the reserved list price at the window's start
    price_micros: int  # prepaid at signing: that price x GPUs x window hours
    payable: bool


PAST_START_SLACK_S = 300  # a window may start this long before now: "now", as a client's clock read it


def _terms(record: ContractRecord) -> tuple[str, str, int, str, datetime, datetime]:
    """Holder, model, count, region and window: what an idempotency key and a quote stand for."""
    return (record.tenant_id, record.gpu_model, record.count, record.region, record.starts_at, record.ends_at)


def _cash(uow: UnitOfWork, tenant_id: str) -> int:
    return uow.ledger.balances([tenant_id]).get(AccountId.tenant_cash(tenant_id), 0)


class ContractService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        cache: FleetCache,
        catalog: Catalog,
        *,
        price_book: Callable[[UnitOfWork], PriceBook] | None = None,
        refuses: Callable[[UnitOfWork, str, int, int], bool] | None = None,
    ) -> None:
        """`price_book` prices contracts (none: they are free); `refuses(uow, tenant, available, charge)` is
        the payer's payment terms check."""
        self.uow, self.clock, self.cache, self.catalog = uow, clock, cache, catalog
        self.price_book, self.refuses = price_book, refuses

    def create(
        self, caller: Caller, order: ContractOrder, idempotency_key: str | None = None
    ) -> tuple[ContractRecord, bool]:
        """The signed contract and True, or the one signed earlier with the same key (same holder and
        terms) and False: a buyer who lost the answer signs again safely, and pays once."""
        check_idempotency_key(idempotency_key)
        record = self.draft(caller, order)
        if idempotency_key is not None:  # one key, one contract per holder: its id follows from the key
            record = replace(record, id=derived_id("ctr", record.tenant_id, idempotency_key))

        def work() -> tuple[ContractRecord, bool]:
            with self.uow() as uow:
                signed, created = self.sign(uow, record)
                uow.commit()
                return signed, created

        return retrying(work)

    def quote(self, caller: Caller, order: ContractOrder) -> ContractQuote:
        """What signing would hold and prepay now, signing nothing; the errors signing would raise (a spend
        cap's included), except that a price the payer cannot pay now is reported (`payable`), so the buyer
        sees what to top up."""
        record = self.draft(caller, order)
        with self.uow() as uow:  # never committed
            self.check(uow, record)
            unit_micros, price = self._list_price(uow, record)
            if price:
                self._within_spend_limits(uow, record.tenant_id, price, record.created_at)
            payable = not price or self._payable(uow, record.tenant_id, price)
        return ContractQuote(*_terms(record), unit_micros, price, payable)

    def draft(self, caller: Caller, order: ContractOrder) -> ContractRecord:
        """The contract as it would be signed now: holder allowed, model known, window not over."""
        holder = order.tenant_id or caller.tenant.id
        if holder != caller.tenant.id and not caller.is_admin:
            raise Forbidden("only admins sign contracts for another tenant", field="tenant_id")
        try:
            model = self.catalog.get(order.gpu_model)
        except CatalogError as error:
            raise Invalid(str(error), field="gpu_model") from None
        now = self.clock.now()
        starts_at, ends_at = upcoming_window(order.starts_at, order.ends_at, now)
        if starts_at < now - timedelta(seconds=PAST_START_SLACK_S):  # else it prepays hours already over
            raise Invalid(
                f"the window starts {starts_at:%Y-%m-%d %H:%M} UTC, before now ({now:%Y-%m-%d %H:%M}): a "
                "contract holds and charges from its start, so start it now or later",
                field="starts_at",
            )
        return ContractRecord(
            new_id("ctr"), holder, model.name, order.count, order.region, starts_at, ends_at, now
        )

    def check(self, uow: UnitOfWork, record: ContractRecord) -> None:
        """Refuse a contract for no tenant, no fleet, an unknown region, or more than the fleet can honour."""
        if uow.tenants.get(record.tenant_id) is None:
            raise NotFound(f"no tenant {record.tenant_id}", field="tenant_id")
        _, fleet = self.cache.load(uow)
        if fleet is None:
            raise Conflict("no fleet yet: PUT /v1/fleet first", field="gpu_model")
        if record.region not in fleet.regions:
            raise Invalid(f"unknown region {record.region!r}", field="region")
        existing = [domain_contract(c) for c in uow.contracts.list(None)]
        down = down_for_contracts(uow, fleet, record.created_at)  # windows, and cordons with no end
        try:
            check_contract(domain_contract(record), existing, fleet_capacity(fleet), down)
        except ContractError as error:
            raise Conflict(str(error), field=error.field or "count") from None

    def sign(
        self, uow: UnitOfWork, record: ContractRecord, price_micros: int | None = None
    ) -> tuple[ContractRecord, bool]:
        """Sign `record` in `uow` (not committed): checked, priced (at the reserved list price, or at
        `price_micros`, an accepted offer's), paid from the holder's cash and stored; or the contract already
        stored under its id (signed before with the same key or offer) and False."""
        holder, region, count, now = record.tenant_id, record.region, record.count, record.created_at
        uow.contracts.lock_signing()  # two signings at once must not both fit beside the same contracts
        earlier = uow.contracts.get(record.id)  # signed before under the same idempotency key
        if earlier is not None:
            if _terms(earlier) != _terms(record):
                message = "this Idempotency-Key was used with a different contract"
                raise Conflict(message, field="Idempotency-Key")
            return earlier, False
        self.check(uow, record)
        if price_micros is not None:
            record = replace(record, price_micros=price_micros)
        else:
            record = replace(record, price_micros=self._list_price(uow, record)[1])
        if record.price_micros:
            self._within_spend_limits(uow, holder, record.price_micros, now)
            self._charge(uow, holder, record.price_micros, "the contract's prepaid price")
        uow.contracts.add(record)
        if record.price_micros:
            post_once(
                uow,
                now,
                key=f"contract:{record.id}",
                kind=TxKind.CONTRACT,
                postings=contract_postings(holder, record.id, record.price_micros),
                ref=record.id,
                memo=f"{count} x {record.gpu_model} in {region}, {record.starts_at:%Y-%m-%d %H:%M} to "
                f"{record.ends_at:%Y-%m-%d %H:%M} UTC, prepaid",
            )
        return record, True

    def _list_price(self, uow: UnitOfWork, record: ContractRecord) -> tuple[int, int]:
        """The reserved list price per GPU-hour at the window's start, and the contract's price at it: GPUs x
        window hours (both 0 without a price book: contracts are free)."""
        if self.price_book is None:
            return 0, 0
        start_s, end_s = to_epoch_s(record.starts_at), to_epoch_s(record.ends_at)
        try:
            unit = self.price_book(uow).list_price(record.gpu_model, record.region, Tier.RESERVED, start_s)
        except BillingError as error:
            raise Invalid(str(error), field="gpu_model") from None
        per_hour = unit.price_micros_per_gpu_hour
        return per_hour, contract_price_micros(per_hour, record.count, start_s, end_s)

    def _payable(self, uow: UnitOfWork, tenant_id: str, amount_micros: int) -> bool:
        """Whether paying `amount_micros` from cash keeps to the payer's terms."""
        return self.refuses is None or not self.refuses(uow, tenant_id, _cash(uow, tenant_id), amount_micros)

    def _within_spend_limits(
        self,
        uow: UnitOfWork,
        tenant_id: str,
        amount_micros: int,
        now: datetime,
        what: str = "the contract's prepaid price",
        field: str = "count",
    ) -> None:
        """Refuse (409 `over_spend_limit`) a purchase past the buyer's spend caps or own budget: its price
        counts as spent today, as its invoice and `suanli budget` count it."""
        limits = uow.terms.limits().get(tenant_id)
        if limits is None:
            return
        spent = spent_now(uow, [tenant_id], now.timestamp())[tenant_id]
        why = over_spend_limit(limits, spent, amount_micros)
        if why is not None:
            raise OverSpendLimit(f"{what} is {money_text(amount_micros)}: {why}", field=field)

    def _charge(
        self, uow: UnitOfWork, tenant_id: str, amount_micros: int, what: str, field: str = "tenant_id"
    ) -> None:
        """Refuse (PaymentRequired, naming the request's `field` for the payer) when paying `amount_micros`
        from cash breaks the payer's terms."""
        if not self._payable(uow, tenant_id, amount_micros):
            cash = _cash(uow, tenant_id)
            raise PaymentRequired(
                f"{what} is {money_text(amount_micros)} and {tenant_id} has {money_text(cash)} in cash; "
                "top up first",
                field=field,
            )

    def recognize(self, now: datetime | None = None) -> int:
        """Earn every priced contract's value due by `now`; returns the transactions added."""
        now = now or self.clock.now()
        with self.uow() as uow:
            ids = uow.contracts.to_recognize(now)  # all earned: not read again
        return sum(retrying(lambda i=contract_id: self._recognize_one(i, now)) for contract_id in ids)

    def follow_coverage(self, now: datetime | None = None) -> int:
        """Follow each contract's window with its holder's rentals (`app/coverage.py`): from a start, cover
        the live rentals placed before it; from an end, uncover what the contracts still open no longer
        back. A meter-loop job, run before the pass; it reads only contracts whose start or end is still to
        follow (`coverage_stage`), and marks each in the transaction that re-prices, so a pass killed midway
        leaves the rest to the next one and nothing is done twice. How many rentals were re-priced."""
        now = now or self.clock.now()
        with self.uow() as uow:
            due = uow.contracts.coverage_due(now)
        steps = sorted(
            (instant, stage + 1, contract.id)
            for contract, reached in due
            for stage, instant in enumerate((max(contract.starts_at, contract.created_at), contract.ends_at))
            if stage >= reached and instant <= now
        )
        changed: set[str] = set()
        for _, stage, contract_id in steps:
            changed.update(self._follow(contract_id, stage))
        return len(changed)

    def _follow(self, contract_id: str, stage: int) -> list[str]:
        """Re-price the holder's rentals at the contract's start (stage 1) or end (stage 2), once."""
        with self.uow() as uow:
            if not uow.contracts.mark_coverage(contract_id, stage):
                return []  # another pass followed it first
            contract = uow.contracts.get(contract_id)
            assert contract is not None
            pool = (uow, contract.tenant_id, contract.gpu_model, contract.region)
            if stage == 1:
                changed = extend_coverage(*pool, max(contract.starts_at, contract.created_at))
            else:
                changed = settle_coverage(*pool, contract.ends_at)
            uow.commit()
        return changed

    def _recognize_one(self, contract_id: str, now: datetime) -> int:
        with self.uow() as uow:
            added = self._earn(uow, contract_id, now)
            uow.commit()
            return added

    def _earn(self, uow: UnitOfWork, contract_id: str, now: datetime) -> int:
        record = uow.contracts.get(contract_id)
        if record is None or not record.price_micros:
            return 0
        earned = recognized_micros(
            record.price_micros, to_epoch_s(record.starts_at), to_epoch_s(record.ends_at), to_epoch_s(now)
        )
        account = AccountId.contract_prepaid(record.id)
        balance = uow.ledger.balances([record.id]).get(account, 0)
        recognized = record.price_micros - balance
        delta = earned - recognized
        if delta <= 0:
            uow.contracts.set_recognized(record.id, recognized)
            return 0
        uow.contracts.set_recognized(record.id, earned)
        post_once(
            uow,
            now,
            key=f"contract_earned:{record.id}:{earned}",
            kind=TxKind.CONTRACT,
            postings=recognition_postings(record.id, delta),
            ref=record.id,
            memo=(
                f"earned {money_text(earned)} of {money_text(record.price_micros)} by "
                f"{now:%Y-%m-%d %H:%M:%S} UTC"
            ),
        )
        return 1

    def list(self, caller: Caller) -> list[ContractRecord]:
        with self.uow() as uow:
            return uow.contracts.list(None if caller.is_admin else caller.tenant.id)

    def get(self, caller: Caller, contract_id: str) -> ContractRecord:
        with self.uow() as uow:
            record = uow.contracts.get(contract_id)
        if record is None or (not caller.is_admin and record.tenant_id != caller.tenant.id):
            raise NotFound(f"no contract {contract_id}")
        return record

    def transfer(self, caller: Caller, contract_id: str, to_tenant_id: str) -> ContractRecord:
        """Hand a contract to another tenant; a priced one: the buyer pays the seller its remaining value.
        The contract is read, locked, inside the transfer's own transaction: a transfer that ran meanwhile
        wins, and the caller must still hold it (a contract is never sold twice). The holder may give away a
        contract with nothing left to pay; one whose buyer would pay needs an admin (who has the buyer's
        agreement): a holder must not spend another tenant's cash."""
        now = self.clock.now()

        def work() -> ContractRecord:
            with self.uow() as uow:
                record = uow.contracts.get(contract_id, lock=True)
                if record is None or (not caller.is_admin and record.tenant_id != caller.tenant.id):
                    raise NotFound(f"no contract {contract_id}")
                if uow.tenants.get(to_tenant_id) is None:
                    raise NotFound(f"no tenant {to_tenant_id}", field="to_tenant_id")
                try:
                    moved = transfer(domain_contract(record), to_tenant_id, now.timestamp())
                except ContractError as error:
                    raise Conflict(str(error), field="to_tenant_id") from None
                if record.price_micros and moved.tenant != record.tenant_id:
                    self._earn(uow, record.id, now)
                    account = AccountId.contract_prepaid(record.id)
                    value = uow.ledger.balances([record.id]).get(account, 0)
                    if value > 0:
                        if not caller.is_admin:
                            raise Forbidden(
                                f"the buyer would pay its remaining value, {money_text(value)}: only an "
                                "admin, with the buyer's agreement, transfers a contract with value left",
                                field="to_tenant_id",
                            )
                        what = f"the contract's remaining value, which {moved.tenant} would pay,"
                        self._within_spend_limits(uow, moved.tenant, value, now, what, "to_tenant_id")
                        self._charge(
                            uow, moved.tenant, value, "the contract's remaining value", "to_tenant_id"
                        )
                        post_once(
                            uow,
                            now,
                            # one key per sale (the row is locked): two sales between the same two
                            # tenants in one second each pay; a key of the parties and the second took
                            # the later one for a replay of the first while the contract still changed hands
                            key=f"transfer:{record.id}:{new_id('sale')}",
                            kind=TxKind.TRANSFER,
                            postings=transfer_postings(moved.tenant, record.tenant_id, value),
                            ref=record.id,
                            memo=f"{record.id} from {record.tenant_id} to {moved.tenant}: remaining value",
                        )
                uow.contracts.set_tenant(record.id, moved.tenant)
                settle_coverage(uow, record.tenant_id, record.gpu_model, record.region, now)  # the seller's
                if record.starts_at <= now < record.ends_at:  # the buyer's rentals there are its claims now
                    extend_coverage(uow, moved.tenant, record.gpu_model, record.region, now)
                uow.commit()
                return replace(record, tenant_id=moved.tenant)

        return retrying(work)
