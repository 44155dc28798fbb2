"""Billing use cases: the price book, quotes, the meter, credits, balances and the journal.

* The price book is seeded from `suanli.app.list_prices` (on-demand and reserved list prices per model; the
  spot list price as the spot floor), for every region (`ANY_REGION`).
* A rental's quote (price breakdown) is made at creation for the most expensive model its selector allows
  (an upper bound; the rate it pays is set at placement from the node's model, `price_micros_per_hour`).
* The meter charges every rental that holds or held an allocation, cumulatively (only the difference to what
  is posted, key `charge:{rental}:{n}`), from its agent-reported start (else `placed_at`) to its end: a stop
  or failure at its end event, a preempted one at its notice deadline, a lost one at its node's last
  heartbeat (the run's `ended_at`); a live one up to now. 60-second minimum; grants before cash; the
  provider is credited the charge minus the commission.
* Prepaid: a rental is refused (PaymentRequired) when the tenant's cash + grants minus the new rental's
  minimum charge would go below 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from suanli.app.errors import Conflict, Forbidden, Invalid, NotFound, PaymentRequired
from suanli.app.fleet import FleetCache
from suanli.app.ids import new_id
from suanli.app.list_prices import list_price, price_source
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import END_STATES, BillableRental, Caller, RentalSpec
from suanli.app.tenants import require_admin
from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.invoice import (
    Invoice,
    InvoiceError,
    Month,
    RentalBilling,
    build_invoice,
    gpu_fraction,
)
from suanli.domain.billing.ledger import (
    AccountId,
    AccountKind,
    Transaction,
    TxKind,
    Verification,
    grant_postings,
    normalize,
    top_up_postings,
    verify,
)
from suanli.domain.billing.meter import DEFAULT_MINIMUM_S, PostedCharges, RentalUsage, charge_postings
from suanli.domain.billing.money import charge_micros, to_epoch_s
from suanli.domain.billing.pricebook import ListPrice, PriceBook, Quote, SpotFloor, quote
from suanli.domain.catalog import Catalog, GpuModel
from suanli.domain.request import Tier

ANY_REGION = "*"
APPEND_ATTEMPTS = 5
MAX_CREDIT_MICROS = 10**15


def seed_price_book(catalog: Catalog) -> PriceBook:
    """List prices of every catalogue model, in force since the epoch, valid in every region."""
    prices, floors = [], []
    for model in catalog.models:
        source = price_source(model)
        for tier in (Tier.ON_DEMAND, Tier.RESERVED):
            prices.append(ListPrice(model.name, ANY_REGION, tier, list_price(model, tier.label), 0, source))
        floors.append(SpotFloor(model.name, ANY_REGION, list_price(model, "spot"), 0, f"spot list; {source}"))
    return PriceBook(prices, (), floors)


def quote_json(q: Quote) -> dict[str, Any]:
    return {
        "model": q.model,
        "region": q.region,
        "tier": q.tier.label,
        "at_s": q.at_s,
        "unit_micros_per_gpu_hour": q.unit_micros_per_gpu_hour,
        "base_micros_per_hour": q.base_micros_per_hour,
        "discounts": [{"label": label, "micros_per_hour": amount} for label, amount in q.discounts],
        "contract_coverage_micros_per_hour": q.contract_coverage_micros_per_hour,
        "final_micros_per_hour": q.final_micros_per_hour,
        "minimum_s": DEFAULT_MINIMUM_S,
        "source": q.source,
    }


@dataclass(frozen=True, slots=True)
class Balance:
    tenant_id: str
    cash_micros: int
    grants_micros: int

    @property
    def available_micros(self) -> int:
        return self.cash_micros + self.grants_micros


@dataclass(frozen=True, slots=True)
class PayoutLine:
    """What one rental (a charge's `ref`) added to a provider's payable."""

    ref: str
    amount_micros: int
    transactions: int


@dataclass(frozen=True, slots=True)
class Payout:
    """A provider's payable balance and the per-rental charges that built it (their exact sum)."""

    provider: str
    payable_micros: int
    lines: tuple[PayoutLine, ...]


class BillingService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        catalog: Catalog,
        cache: FleetCache,
        *,
        commission_bp: int = 1500,
        prepaid: bool = True,
    ) -> None:
        self.uow, self.clock, self.catalog, self.cache = uow, clock, catalog, cache
        self.book = seed_price_book(catalog)
        self.commission_bp, self.prepaid = commission_bp, prepaid

    # --- prices and quotes ---------------------------------------------------------------------------

    def prices(self) -> list[ListPrice | SpotFloor]:
        return [*self.book.list_prices, *self.book.spot_floors]

    def price_book(self, uow: UnitOfWork) -> PriceBook:
        """The price book in force: the seeded list prices plus the admins' entries."""
        return self.book

    def quote(self, spec: RentalSpec, shape: Any, at: datetime) -> dict[str, Any]:
        """The price breakdown of a new rental: for the most expensive model its selector allows."""
        tier = Tier.parse(spec.tier)
        candidates = self._models(spec)
        at_s = to_epoch_s(at)
        quotes = []
        for model in candidates:
            try:
                quotes.append(
                    quote(
                        self.book,
                        model=model,
                        region=ANY_REGION,
                        tier=tier,
                        shape=shape,
                        at_s=at_s,
                        node_count=spec.nodes,
                    )
                )
            except BillingError:
                continue
        if not quotes:
            raise Invalid(
                f"no price for {spec.gpu_model or 'any model'} at tier {tier.label}", field="gpu_model"
            )
        return quote_json(max(quotes, key=lambda q: q.final_micros_per_hour))

    def _models(self, spec: RentalSpec) -> list[GpuModel]:
        models = [m for m in self.catalog.models if not spec.gpu_model or m.matches(spec.gpu_model)]
        if spec.mig_profile is not None:
            models = [m for m in models if m.mig is not None and m.mig.has_profile(spec.mig_profile)]
        return models

    def check_funds(self, uow: UnitOfWork, tenant_id: str, quoted: dict[str, Any]) -> None:
        """Raise PaymentRequired when the new rental's minimum charge would take the balance below 0."""
        if not self.prepaid:
            return
        balance = _balance(uow, tenant_id)
        minimum = charge_micros(int(quoted["final_micros_per_hour"]), DEFAULT_MINIMUM_S)
        if balance.available_micros - minimum < 0:
            raise PaymentRequired(
                f"insufficient balance: {balance.available_micros} micros available (cash "
                f"{balance.cash_micros}, grants {balance.grants_micros}); this rental's "
                f"{DEFAULT_MINIMUM_S}-s minimum costs {minimum} micros; ask an admin for credit",
                field="balance",
            )

    # --- the meter -----------------------------------------------------------------------------------

    def meter(self, now: datetime | None = None, only: Sequence[str] | None = None) -> int:
        """Post every rental's charge delta at `now`; returns the number of transactions added."""
        for attempt in range(APPEND_ATTEMPTS):
            try:
                return self._meter_once(now or self.clock.now(), only)
            except Conflict:  # another writer appended after the same head: read the new head, redo
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
        return 0

    def _meter_once(self, now: datetime, only: Sequence[str] | None) -> int:
        now_s = to_epoch_s(now)
        with self.uow() as uow:
            billable = uow.rentals.billable()
            if only is not None:
                wanted = set(only)
                billable = [b for b in billable if b.rental.id in wanted]
            if not billable:
                return 0
            providers = self._providers(uow)
            posted = uow.ledger.posted_charges()
            balances = uow.ledger.balances({b.rental.tenant_id for b in billable})
            head = uow.ledger.head_hash()
            added = 0
            for item in billable:
                usage = self._usage(item, providers)
                if usage is None:
                    continue
                already = posted.get(usage.rental_id, PostedCharges())
                delta = usage.charge_delta(already.micros, now_s)
                if delta == 0:
                    continue
                grants = balances.get(AccountId.tenant_grants(usage.tenant), 0)
                tx = Transaction.chained(
                    head,
                    key=f"charge:{usage.rental_id}:{already.count + 1}",
                    kind=TxKind.CHARGE,
                    at_s=now_s,
                    postings=charge_postings(usage, delta, grants, self.commission_bp),
                    ref=usage.rental_id,
                    memo=f"{usage.billable_s(now_s)} s at {usage.rate_micros_per_hour} micros/h",
                )
                uow.ledger.append(tx, now)
                head = tx.hash
                for posting in tx.postings:
                    balances[posting.account] = balances.get(posting.account, 0) + posting.amount_micros
                added += 1
            uow.commit()
            return added

    def _providers(self, uow: UnitOfWork) -> dict[str, str]:
        _, fleet = self.cache.load(uow)
        return {} if fleet is None else {node.name: node.provider for node in fleet.nodes}

    @staticmethod
    def _usage(item: BillableRental, providers: dict[str, str]) -> RentalUsage | None:
        rental = item.rental
        rate = rental.price_micros_per_hour
        if rate is None and rental.quote is not None:
            rate = int(rental.quote["final_micros_per_hour"])  # type: ignore[call-overload]
        start = item.run_started_at or rental.placed_at
        if rate is None or start is None:
            return None
        end: datetime | None = None
        if rental.state == "preempted":
            end = rental.notice_deadline or item.ended_at
        elif rental.state == "lost":
            end = item.run_ended_at or item.ended_at
        elif rental.state in END_STATES:
            end = item.ended_at or item.run_ended_at
        elif rental.state == "pending":  # re-queued after a lost node: billed to its last run's end
            end = item.run_ended_at or start
        started_s = to_epoch_s(start)
        ended_s = None if end is None else max(started_s, to_epoch_s(end))
        return RentalUsage(
            rental.id, rental.tenant_id, providers.get(item.node, "platform"), rate, started_s, ended_s
        )

    # --- credits, balances, the journal ---------------------------------------------------------------

    def credit(
        self, caller: Caller, tenant_id: str, amount_micros: int, grant: bool, key: str | None, memo: str = ""
    ) -> Transaction:
        """Admin: a top-up (external cash -> tenant cash) or a grant (promotions -> tenant grants)."""
        require_admin(caller)
        if not 0 < amount_micros <= MAX_CREDIT_MICROS:
            raise Invalid(f"amount must be 1..{MAX_CREDIT_MICROS} micros", field="amount_micros")
        kind = TxKind.GRANT if grant else TxKind.TOP_UP
        postings = (
            grant_postings(tenant_id, amount_micros) if grant else top_up_postings(tenant_id, amount_micros)
        )
        tx_key = f"credit:{tenant_id}:{key}" if key else f"credit:{tenant_id}:{new_id('crd')}"
        for attempt in range(APPEND_ATTEMPTS):
            now = self.clock.now()
            with self.uow() as uow:
                if uow.tenants.get(tenant_id) is None:
                    raise NotFound(f"no tenant {tenant_id}")
                existing = uow.ledger.get(tx_key)
                if existing is not None:
                    if existing.postings != normalize(postings) or existing.kind is not kind:
                        raise Conflict("this Idempotency-Key was used with a different credit", field="key")
                    return existing
                tx = Transaction.chained(
                    uow.ledger.head_hash(),
                    key=tx_key,
                    kind=kind,
                    at_s=to_epoch_s(now),
                    postings=postings,
                    ref=tenant_id,
                    memo=memo[:200]
                    or (f"grant by {caller.tenant.id}" if grant else f"top-up by {caller.tenant.id}"),
                )
                try:
                    uow.ledger.append(tx, now)
                    uow.commit()
                except Conflict:
                    if attempt == APPEND_ATTEMPTS - 1:
                        raise
                    continue
                return tx
        raise Conflict("the ledger stayed busy; try again")  # pragma: no cover

    def balance(self, caller: Caller, tenant_id: str | None = None) -> Balance:
        target = self._target(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            return _balance(uow, target)

    def journal(self, caller: Caller, tenant_id: str | None = None) -> list[Transaction]:
        """The caller's transactions (with a posting to its accounts); an admin: all, or one tenant's."""
        owner = tenant_id if caller.is_admin else self._target(caller, tenant_id)
        with self.uow() as uow:
            return uow.ledger.transactions(owner)

    def verify(self, caller: Caller) -> tuple[Verification, int]:
        """Recompute the whole chain and every balance against the stored sums (any caller); and the count."""
        with self.uow() as uow:
            transactions = uow.ledger.transactions(None)
            stored = uow.ledger.balances(None)
        return verify(transactions, expected_balances=stored), len(transactions)

    def payouts(self, caller: Caller, provider: str | None = None) -> list[Payout]:
        """Providers' payable balances from the ledger, per rental.

        A provider key (whose tenant name is the fleet's provider name) sees only its own; an admin all, or
        one with `provider`; a tenant key is Forbidden.
        """
        role = caller.tenant.role
        if role == "provider":
            if provider is not None and provider != caller.tenant.name:
                raise Forbidden("a provider key sees only its own payouts")
            provider = caller.tenant.name
        elif not caller.is_admin:
            raise Forbidden("payouts need a provider or admin key")
        with self.uow() as uow:
            rows = uow.ledger.payables(provider)
        lines: dict[str, list[PayoutLine]] = {}
        for owner, ref, amount, count in rows:
            if amount != 0:
                lines.setdefault(owner, []).append(PayoutLine(ref, amount, count))
        if provider is not None:
            lines.setdefault(provider, [])
        return [
            Payout(owner, sum(x.amount_micros for x in found), tuple(found))
            for owner, found in sorted(lines.items())
        ]

    # --- invoices --------------------------------------------------------------------------------------

    def invoice(self, caller: Caller, month_text: str, tenant_id: str | None = None) -> Invoice:
        """The caller's invoice for a UTC month (`yyyy-mm`); an admin may name another tenant."""
        try:
            month = Month.parse(month_text)
        except InvoiceError as error:
            raise Invalid(str(error), field="month") from None
        target = self._target(caller, tenant_id)
        now_s = to_epoch_s(self.clock.now())
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            billable = [b for b in uow.rentals.billable() if b.rental.tenant_id == target]
            _, fleet = self.cache.load(uow)
            transactions = uow.ledger.transactions(target)
        charged = frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE})
        charges: dict[str, list[tuple[int, int]]] = {}
        for tx in transactions:
            if tx.kind is TxKind.CHARGE:
                charges.setdefault(tx.ref, []).append((tx.at_s, tx.amount_to(charged)))
        nodes = {} if fleet is None else {node.name: node for node in fleet.nodes}
        regions = {} if fleet is None else dict(fleet.regions)
        rentals = []
        for item in billable:
            usage = self._usage(item, {})
            if usage is None:
                continue
            rentals.append(self._rental_billing(item, usage, nodes, regions))
        return build_invoice(target, month, rentals, charges, now_s)

    def _rental_billing(
        self, item: BillableRental, usage: RentalUsage, nodes: dict[str, Any], regions: dict[str, Any]
    ) -> RentalBilling:
        """Energy facts from the rental's first node (model TDP, region PUE and grid intensity).

        Measured power is not passed: the store keeps only each node's latest heartbeat telemetry, not a
        history to average over a rental's interval, so TDP x the utilization estimate is used.
        """
        rental, spec = item.rental, item.rental.spec
        node = nodes.get(item.node)
        model_name = node.gpu_model if node is not None else None
        if model_name is None and rental.quote is not None:
            model_name = str(rental.quote.get("model") or "") or None
        tdp = None
        if model_name is not None and model_name in self.catalog:
            tdp = self.catalog.get(model_name).tdp_watts
        region = regions.get(node.region) if node is not None else None
        discounts: tuple[tuple[str, int], ...] = ()
        if rental.quote is not None:
            found = rental.quote.get("discounts") or []
            discounts = tuple(
                (str(d["label"]), int(d["micros_per_hour"]))  # type: ignore[index,call-overload]
                for d in found  # type: ignore[attr-defined]
            )
        return RentalBilling(
            rental_id=rental.id,
            started_s=usage.started_s,
            ended_s=usage.ended_s,
            rate_micros_per_hour=usage.rate_micros_per_hour,
            gpu_fraction=gpu_fraction(spec.gpus, spec.nodes, spec.mig_profile, spec.share_milli),
            gpu_model=model_name,
            region=None if region is None else region.name,
            tdp_watts=tdp,
            pue=None if region is None else region.pue,
            grid_gco2_per_kwh=None if region is None else region.grid_gco2_per_kwh,
            discounts=discounts,
        )

    @staticmethod
    def _target(caller: Caller, tenant_id: str | None) -> str:
        if tenant_id is None or tenant_id == caller.tenant.id:
            return caller.tenant.id
        if not caller.is_admin:
            raise NotFound(f"no tenant {tenant_id}")
        return tenant_id


def _balance(uow: UnitOfWork, tenant_id: str) -> Balance:
    balances = uow.ledger.balances([tenant_id])
    return Balance(
        tenant_id,
        balances.get(AccountId.tenant_cash(tenant_id), 0),
        balances.get(AccountId.tenant_grants(tenant_id), 0),
    )
