"""Billing use cases: the price book, quotes, the meter, credits, balances, the journal and payouts
(invoices: `suanli.app.invoices`).

* The price book is seeded from `suanli.app.list_prices` (on-demand and reserved list prices per model; the
  spot list price as the spot floor), for every region (`ANY_REGION`).
* A rental's quote (price breakdown) is made at creation for the most expensive model its selector allows
  (an upper bound; the rate it pays is set at placement from the node's model, `price_micros_per_hour`).
* The meter charges every rental that holds or held an allocation, cumulatively (only the difference to what
  is posted, key `charge:{rental}:{n}`), from its agent-reported start (else `placed_at`) to its end: a stop
  or failure at its end event, a preempted one at its notice deadline, a lost one at its node's last
  heartbeat (the run's `ended_at`); a live one up to now. 60-second minimum; grants before cash; the
  providers are credited the charge minus the commission: all to its node's provider, or, for a rental that
  held several providers' nodes, split among them by the GPU-seconds on each one's nodes
  (`suanli.domain.billing.provider_split`).
* Prepaid: a rental is refused (PaymentRequired) when the tenant's cash + grants minus the new rental's
  minimum charge would go below 0.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from suanli.app import pricing
from suanli.app.errors import Conflict, Forbidden, Invalid, NotFound, PaymentRequired
from suanli.app.fleet import FleetCache
from suanli.app.ids import as_utc, new_id
from suanli.app.list_prices import list_price, price_source
from suanli.app.metering import Metering
from suanli.app.plans import PlanService
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.postings import post_once, retrying
from suanli.app.price_entries import BookEntry, checked, in_force_or_later, layered
from suanli.app.records import Caller, MoneyFacts, PriceEntry, Rental, RentalSpec
from suanli.app.tenants import require_admin, target_tenant
from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import (
    AccountId,
    AccountKind,
    Posting,
    Transaction,
    TxKind,
    Verification,
    grant_postings,
    normalize,
    top_up_postings,
    verify,
)
from suanli.domain.billing.meter import (
    DEFAULT_MINIMUM_S,
)
from suanli.domain.billing.money import charge_micros, money_text, to_epoch_s
from suanli.domain.billing.plans import Grant
from suanli.domain.billing.pricebook import ListPrice, PriceBook, SpotFloor
from suanli.domain.catalog import Catalog, GpuModel
from suanli.domain.request import Tier

ANY_REGION = "*"
MAX_CREDIT_MICROS = 10**15
# the most any account may hold either way (a trillion units): running balances and their sums stay far
# inside the databases' 64-bit integers (past 2**63 SQLite turned them into floats and lost micros)
MAX_ACCOUNT_MICROS = 10**18
LEDGER_PAGE = 100  # transactions in a page of `journal` unless asked otherwise
LEDGER_PAGE_LIMIT = 1000  # the most in one page: each page is one short read, however long the ledger
PAYOUT_PAGE = 100  # payout lines (provider, rental) in a page of `payouts` unless asked otherwise
PAYOUT_PAGE_LIMIT = 1000  # the most in one page: a provider has a line for every rental it was ever paid for
LEDGER_SEQ_MAX = 2**31 - 1  # the last `seq` its column holds (32 bits on PostgreSQL): `after` goes no higher
VERIFY_REUSE_S = 60.0  # how old a whole-ledger verification a tenant's request may be answered with


def _check_room(uow: UnitOfWork, postings: Sequence[Posting]) -> None:
    """Invalid (naming `amount_micros`) when a credit would take an account past `MAX_ACCOUNT_MICROS`."""
    held = uow.ledger.balances(owners={p.account.owner for p in postings})
    for posting in postings:
        if abs(held.get(posting.account, 0) + posting.amount_micros) > MAX_ACCOUNT_MICROS:
            raise Invalid(
                f"{posting.account.kind.value} of {posting.account.owner} would pass "
                f"{MAX_ACCOUNT_MICROS} micros",
                field="amount_micros",
            )


def seed_price_book(catalog: Catalog) -> PriceBook:
    """List prices of every catalogue model, in force since the epoch, valid in every region."""
    prices, floors = [], []
    for model in catalog.models:
        source = price_source(model)
        for tier in (Tier.ON_DEMAND, Tier.RESERVED):
            prices.append(ListPrice(model.name, ANY_REGION, tier, list_price(model, tier.label), 0, source))
        floors.append(SpotFloor(model.name, ANY_REGION, list_price(model, "spot"), 0, f"spot list; {source}"))
    return PriceBook(prices, (), floors)


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
    """A provider's payable balance and per-rental charges that built it (all its lines, over every page,
    sum to the balance exactly)."""

    provider: str
    payable_micros: int
    lines: tuple[PayoutLine, ...]


@dataclass(frozen=True)
class PayoutPage:
    """A page of payout lines in (provider, rental) order, by provider, and the cursor of the next page
    (`provider/rental` of this page's last line) when more follow."""

    payouts: list[Payout]
    next_after: str | None


@dataclass(frozen=True)
class JournalPage:
    """A page of the ledger: (seq, transaction) in chain order, and whether more follow its last seq."""

    entries: list[tuple[int, Transaction]]
    more: bool


class BillingService(Metering):
    """Prices, quotes, the meter (`Metering`), credits, balances, the journal, payouts."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        catalog: Catalog,
        cache: FleetCache,
        *,
        commission_bp: int = 1500,
        prepaid: bool = True,
        pipeline_meter: bool = False,
    ) -> None:
        self.uow, self.clock, self.catalog, self.cache = uow, clock, catalog, cache
        # write a meter batch while the next is read and computed (a second connection: PostgreSQL's server)
        self.pipeline_meter = pipeline_meter
        self.book = seed_price_book(catalog)
        self._book_cache: tuple[tuple[int, int], PriceBook] = ((0, 0), self.book)
        self.commission_bp, self.prepaid = commission_bp, prepaid
        self.terms: PlanService | None = None  # payment terms (set by the wiring); None: `prepaid` decides
        # the last whole-ledger verification (monotonic time it was made, result, count): tenants share it
        self._verified: tuple[float, Verification, int] | None = None
        self._verify_lock = threading.Lock()

    # --- prices and quotes ---------------------------------------------------------------------------

    def prices(self, uow: UnitOfWork | None = None) -> list[BookEntry]:
        """The book's entries in force now and those taking effect later (admins' entries included)."""
        if uow is None:
            with self.uow() as own:
                book = self.price_book(own)
        else:
            book = self.price_book(uow)
        return in_force_or_later(book, to_epoch_s(self.clock.now()))

    def price_book(self, uow: UnitOfWork, stamp: tuple[int, int] | None = None) -> PriceBook:
        """The price book in force: the seeded list prices plus the admins' entries (rebuilt only when an
        entry was added: the stored entries' count and max id key the cached book; `stamp` when read)."""
        stamp = uow.prices.stamp() if stamp is None else stamp
        cached_stamp, cached = self._book_cache
        if stamp == cached_stamp:
            return cached
        book = layered(self.book, uow.prices.list())
        self._book_cache = (stamp, book)
        return book

    def set_prices(self, caller: Caller, entries: Sequence[PriceEntry]) -> list[PriceEntry]:
        """Admin: store price entries (all or none), each in force from its `effective_from` (now when not
        given; never in the past). Returns them as stored."""
        require_admin(caller)
        now = self.clock.now()
        with self.uow() as uow:
            _, fleet = self.cache.load(uow)
            regions = set(fleet.regions) if fleet is not None else set()
            valid = checked(entries, self.catalog, regions, now, caller.tenant.name)
            stored = [uow.prices.add(entry) for entry in valid]
            uow.commit()
        return stored

    def quote(
        self,
        spec: RentalSpec,
        shape: Any,
        at: datetime,
        tenant_id: str | None = None,
        uow: UnitOfWork | None = None,
        facts: MoneyFacts | None = None,
        among: Collection[str] | None = None,
    ) -> dict[str, Any]:
        """The price breakdown of a new rental: for the most expensive model its selector allows (of those
        `among`, the fleet's it could run on, when given), with the tenant's plan discount and contract
        coverage (`suanli.app.pricing`); read in `uow` when given, from the tenant's `facts` (read here unless
        given; plans and contracts only when the tenant has any)."""
        if uow is None:
            with self.uow() as own:
                return self.quote(spec, shape, at, tenant_id, own, among=among)
        tier = Tier.parse(spec.tier)
        tenant = tenant_id or ""
        facts = uow.terms.money_facts(tenant) if facts is None else facts
        book = self.price_book(uow, facts.price_stamp)
        plans = uow.terms.plans(tenant) if facts.plan_count else []
        contracts = uow.contracts.list(tenant) if facts.contract_count else []
        quotes = []
        for model in self._models(spec, among):
            try:
                quotes.append(
                    pricing.price(
                        uow,
                        book,
                        tenant_id=tenant,
                        tier=tier,
                        shape=shape,
                        pools=[pricing.Pool(model, ANY_REGION, spec.nodes)],
                        at=at,
                        bid_micros_per_gpu_hour=spec.bid_micros_per_gpu_hour,
                        stage="created",
                        plans=plans,
                        contracts=contracts,
                    )
                )
            except BillingError:
                continue
        if not quotes:
            raise Invalid(
                f"no price for {spec.gpu_model or 'any model'} at tier {tier.label}", field="gpu_model"
            )
        return max(quotes, key=lambda q: (q["final_micros_per_hour"], q["base_micros_per_hour"]))

    def placement_quote(
        self,
        uow: UnitOfWork,
        rental: Rental,
        shape: Any,
        placed: Sequence[tuple[GpuModel, str]],
        utilization: Mapping[tuple[str, str], int],
        now: datetime,
    ) -> dict[str, Any]:
        """The quote a placed rental is charged by: its nodes' models and regions, the pools' utilization
        (spot), the tenant's plan and contracts; the creation quote is kept under `created`."""
        quoted = pricing.price(
            uow,
            self.price_book(uow),
            tenant_id=rental.tenant_id,
            tier=Tier.parse(rental.spec.tier),
            shape=shape,
            pools=pricing.pools_of(placed, utilization),
            at=now,
            bid_micros_per_gpu_hour=rental.spec.bid_micros_per_gpu_hour,
            rental_id=rental.id,
        )
        if rental.quote is not None:
            quoted["created"] = dict(rental.quote)
        return quoted

    def spot_rates(
        self,
        uow: UnitOfWork,
        running: Sequence[tuple[Rental, Any, Sequence[tuple[GpuModel, str]]]],
        utilization: Mapping[tuple[str, str], int],
        now: datetime,
    ) -> dict[str, int]:
        """The current rate of each running spot rental (rental, shape, its nodes' model and region): its
        pools' spot price at `utilization`, capped at its bid (`pricing.spot_rate`). A rental whose pool has
        no price is left out (it keeps its rate)."""
        book = self.price_book(uow)
        rates: dict[str, int] = {}
        for rental, shape, placed in running:
            try:
                pools = pricing.pools_of(placed, utilization)
                bid = rental.spec.bid_micros_per_gpu_hour
                rates[rental.id] = pricing.spot_rate(book, shape, pools, now, bid)
            except BillingError:
                continue
        return rates

    def spot_floor_of(self, uow: UnitOfWork, now: datetime) -> Callable[[str, str], int | None]:
        """(model, region) -> the spot floor per GPU-hour there at `now` (at most the on-demand list price),
        or None where the book has no price: what a spot bid must reach to be placed."""
        book, at_s = self.price_book(uow), to_epoch_s(now)
        found: dict[tuple[str, str], int | None] = {}

        def floor(model: str, region: str) -> int | None:
            if (model, region) not in found:
                try:
                    found[(model, region)] = min(
                        book.spot_floor(model, region, at_s).floor_micros_per_gpu_hour,
                        book.list_price(model, region, Tier.ON_DEMAND, at_s).price_micros_per_gpu_hour,
                    )
                except BillingError:
                    found[(model, region)] = None
            return found[(model, region)]

        return floor

    def below_floor(
        self,
        uow: UnitOfWork,
        running: Sequence[tuple[Rental, Sequence[tuple[GpuModel, str]]]],
        now: datetime,
    ) -> dict[str, int]:
        """Spot rentals whose bid has fallen below the spot floor of a pool they are in (an admin raised it
        since they were placed): rental id -> that floor per GPU-hour. They get notice like any victim. A bid
        already below the floor at placement keeps paying its bid (it is not "falling" below it)."""
        book = self.price_book(uow)
        at_s = to_epoch_s(now)

        def floor(model: GpuModel, region: str, when_s: int) -> int:
            return min(
                book.spot_floor(model.name, region, when_s).floor_micros_per_gpu_hour,
                book.list_price(model.name, region, Tier.ON_DEMAND, when_s).price_micros_per_gpu_hour,
            )

        found: dict[str, int] = {}
        for rental, placed in running:
            bid = rental.spec.bid_micros_per_gpu_hour
            if bid is None or rental.placed_at is None:
                continue
            placed_s = to_epoch_s(rental.placed_at)
            for model, region in placed:
                try:
                    now_floor, then_floor = floor(model, region, at_s), floor(model, region, placed_s)
                except BillingError:
                    continue
                if bid < now_floor and bid >= then_floor:
                    found[rental.id] = now_floor
                    break
        return found

    def _models(self, spec: RentalSpec, among: Collection[str] | None = None) -> list[GpuModel]:
        models = [m for m in self.catalog.models if not spec.gpu_model or m.matches(spec.gpu_model)]
        if among:  # a model the fleet lacks prices nothing it could run on (unless none is left)
            models = [m for m in models if m.name in among] or models
        if spec.mig_profile is not None:
            models = [m for m in models if m.mig is not None and m.mig.has_profile(spec.mig_profile)]
        return models

    def check_funds(
        self,
        uow: UnitOfWork,
        tenant_id: str,
        quoted: dict[str, Any],
        facts: MoneyFacts | None = None,
        now: datetime | None = None,
    ) -> None:
        """Raise PaymentRequired when the new rental's minimum charge, with the minimum its rentals placed in
        the last minute or still waiting may owe (charged when they end, not ahead), would take the balance
        below the tenant's floor (prepaid: 0; postpaid: minus its credit limit; see `suanli.app.plans`); the
        balance and terms come from the tenant's `facts` (read here unless given)."""
        facts = uow.terms.money_facts(tenant_id) if facts is None else facts
        balance = Balance(tenant_id, facts.cash_micros, facts.grants_micros)
        since = (now or self.clock.now()) - timedelta(seconds=DEFAULT_MINIMUM_S)
        minimum = charge_micros(int(quoted["final_micros_per_hour"]), DEFAULT_MINIMUM_S)
        owed = charge_micros(uow.rentals.rate_owing_minimums(tenant_id, since), DEFAULT_MINIMUM_S)
        if self.terms is not None:
            terms = self.terms.terms_or_default(facts.terms)
            refused, floor = terms.refuses(balance.available_micros - owed, minimum), terms.floor_micros
        else:
            refused, floor = self.prepaid and balance.available_micros - owed - minimum < 0, 0
        if refused:
            recent = (
                f", {money_text(owed)} owed by rentals waiting or started in the last minute" if owed else ""
            )
            raise PaymentRequired(
                f"insufficient balance: {money_text(balance.available_micros)} available (cash "
                f"{money_text(balance.cash_micros)}, grants {money_text(balance.grants_micros)}, floor "
                f"{money_text(floor)}{recent}); this rental's {DEFAULT_MINIMUM_S}-s minimum costs "
                f"{money_text(minimum)}; ask an admin for credit",
                field="balance",
            )

    # --- credits, balances, the journal ---------------------------------------------------------------

    def credit(
        self,
        caller: Caller,
        tenant_id: str,
        amount_micros: int,
        grant: bool,
        key: str | None,
        memo: str = "",
        expires_at: datetime | None = None,
    ) -> Transaction:
        """Admin: a top-up (external cash -> tenant cash) or a grant (promotions -> tenant grants; with an
        optional expiry, after which what is left of it goes back: `PlanService.expire_grants`)."""
        require_admin(caller)
        if not 0 < amount_micros <= MAX_CREDIT_MICROS:
            raise Invalid(f"amount must be 1..{MAX_CREDIT_MICROS} micros", field="amount_micros")
        if expires_at is not None and not grant:
            raise Invalid("only a grant expires", field="expires_at")
        expires_at = None if expires_at is None else as_utc(expires_at)  # a naive time is UTC
        kind = TxKind.GRANT if grant else TxKind.TOP_UP
        postings = (
            grant_postings(tenant_id, amount_micros) if grant else top_up_postings(tenant_id, amount_micros)
        )
        tx_key = f"credit:{tenant_id}:{key}" if key else f"credit:{tenant_id}:{new_id('crd')}"
        grant_id = "grt_" + hashlib.sha256(tx_key.encode()).hexdigest()[:20]
        tx_memo = memo[:200] or (
            f"grant by {caller.tenant.name}" if grant else f"top-up by {caller.tenant.name}"
        )
        expires_s = None if expires_at is None else to_epoch_s(expires_at)

        def work() -> Transaction:
            now = self.clock.now()
            with self.uow() as uow:
                if uow.tenants.get(tenant_id) is None:
                    raise NotFound(f"no tenant {tenant_id}")
                existing = uow.ledger.get(tx_key)
                if existing is not None:  # a retry: the same credit, or a conflict (as Stripe's keys)
                    if existing.postings != normalize(postings) or existing.kind is not kind:
                        raise Conflict("this Idempotency-Key was used with a different credit", field="key")
                    if existing.memo != tx_memo:
                        raise Conflict("this Idempotency-Key was used with another memo", field="memo")
                    earlier = next((g for g in uow.terms.grants(tenant_id) if g.id == grant_id), None)
                    if grant and (earlier is None or earlier.expires_s != expires_s):
                        raise Conflict(
                            "this Idempotency-Key was used with another expiry", field="expires_at"
                        )
                    return existing
                if expires_at is not None and expires_at <= now:
                    raise Invalid("must be in the future", field="expires_at")
                _check_room(uow, postings)
                if grant:
                    uow.terms.add_grant(
                        Grant(grant_id, tenant_id, amount_micros, to_epoch_s(now), expires_s), memo[:200]
                    )
                tx = post_once(
                    uow,
                    now,
                    key=tx_key,
                    kind=kind,
                    postings=postings,
                    ref=grant_id if grant else tenant_id,
                    memo=tx_memo,
                )
                uow.commit()
                return tx

        return retrying(work)

    def balance(self, caller: Caller, tenant_id: str | None = None) -> Balance:
        target = target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            return _balance(uow, target)

    def journal(
        self, caller: Caller, tenant_id: str | None = None, after_seq: int = 0, limit: int = LEDGER_PAGE
    ) -> JournalPage:
        """A page of the caller's transactions (with a posting to its accounts; an admin: all, or one
        tenant's) in chain order: at most `limit` (`LEDGER_PAGE_LIMIT` at most) past `after_seq`."""
        if not 1 <= limit <= LEDGER_PAGE_LIMIT:
            raise Invalid(f"limit must be between 1 and {LEDGER_PAGE_LIMIT}", field="limit")
        owner = tenant_id if caller.is_admin else target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if owner is not None and uow.tenants.get(owner) is None:
                raise NotFound(f"no tenant {owner}")  # as for its balance, not an empty list
            entries = uow.ledger.page(owner, after_seq, limit + 1)  # one more: is there a next page?
        return JournalPage(entries[:limit], more=len(entries) > limit)

    def verify(self, caller: Caller) -> tuple[Verification, int]:
        """Recompute the whole chain and every balance against the running balances and the postings' sums
        (any caller); and the count. A tenant gets a verification at most `VERIFY_REUSE_S` old: each one
        reads the whole platform's ledger, which no tenant may make the server do at its request rate."""
        with self._verify_lock:
            last = self._verified
            if not caller.is_admin and last is not None and time.monotonic() - last[0] < VERIFY_REUSE_S:
                return last[1], last[2]
            result, count = self._verify_now()
            self._verified = (time.monotonic(), result, count)
            return result, count

    def _verify_now(self) -> tuple[Verification, int]:
        """The journal, the running balances and the postings' sums as of one moment: read apart, a charge
        committed between the reads (the meter posts every pass) showed as balances off the chain."""
        with self.uow() as uow:
            uow.read_snapshot()
            transactions = uow.ledger.transactions(None)
            stored = uow.ledger.balances(None)
            posted = uow.ledger.posted_balances()
            lines, posted_lines = uow.ledger.payout_lines(), uow.ledger.posted_payables()
        result = verify(transactions, expected_balances=stored)
        chain = result.balances
        drift = tuple(
            f"postings of {account} sum to {posted.get(account, 0)}, the chain says {chain.get(account, 0)}"
            for account in sorted(set(posted) | set(chain))
            if posted.get(account, 0) != chain.get(account, 0)
        )
        problems = result.problems + drift + _line_drift(lines, posted_lines)
        return replace(result, problems=problems), len(transactions)

    def payouts(
        self,
        caller: Caller,
        provider: str | None = None,
        after: str | None = None,
        limit: int = PAYOUT_PAGE,
    ) -> PayoutPage:
        """A page of the providers' payables from the ledger: at most `limit` lines (one per provider and
        rental) past the cursor `after`, each provider with its whole balance.

        A provider key (whose tenant name is the fleet's provider name) sees only its own; an admin all, or
        one with `provider`; a tenant key is Forbidden.
        """
        if not 1 <= limit <= PAYOUT_PAGE_LIMIT:
            raise Invalid(f"limit must be between 1 and {PAYOUT_PAGE_LIMIT}", field="limit")
        past = None if after is None else _payout_cursor(after)
        provider = _payout_provider(caller, provider)
        with self.uow() as uow:
            rows = uow.ledger.payables(provider, past, limit + 1)  # one more: is there a next page?
            if provider is not None and caller.is_admin and not rows and past is None:
                _, fleet = self.cache.load(uow)
                if fleet is None or provider not in {node.provider for node in fleet.nodes}:
                    raise NotFound(f"no provider {provider!r} in the fleet or the ledger", field="provider")
            lines: dict[str, list[PayoutLine]] = {}
            for owner, ref, amount, count in rows[:limit]:
                lines.setdefault(owner, []).append(PayoutLine(ref, amount, count))
            if provider is not None and past is None:
                lines.setdefault(provider, [])
            kinds = (AccountKind.PROVIDER_PAYABLE,)
            balances = uow.ledger.balances(lines, kinds=kinds) if lines else {}
        payouts = [
            Payout(owner, balances.get(AccountId.provider_payable(owner), 0), tuple(found))
            for owner, found in sorted(lines.items())
        ]
        next_after = f"{rows[limit - 1][0]}/{rows[limit - 1][1]}" if len(rows) > limit else None
        return PayoutPage(payouts, next_after)


def _line_drift(
    kept: dict[tuple[str, str], tuple[int, int]], posted: dict[tuple[str, str], tuple[int, int]]
) -> tuple[str, ...]:
    """The payout lines (micros, transactions) kept with the postings that differ from the postings' sums."""
    return tuple(
        f"payout line {owner}/{ref} holds {kept.get((owner, ref), (0, 0))} (micros, transactions), its "
        f"postings sum to {posted.get((owner, ref), (0, 0))}"
        for owner, ref in sorted(set(kept) | set(posted))
        if kept.get((owner, ref), (0, 0)) != posted.get((owner, ref), (0, 0))
    )


def _payout_provider(caller: Caller, provider: str | None) -> str | None:
    """Whose payouts the caller may read: a provider key its own, an admin anyone's (`provider` or all)."""
    if caller.tenant.role == "provider":
        if provider is not None and provider != caller.tenant.name:
            raise Forbidden("a provider key sees only its own payouts")
        return caller.tenant.name
    if not caller.is_admin:
        raise Forbidden("payouts need a provider or admin key")
    return provider


def _payout_cursor(after: str) -> tuple[str, str]:
    """(provider, rental) of a payouts cursor `provider/rental` (a rental id has no '/'); Invalid naming
    `after` otherwise."""
    provider, slash, ref = after.rpartition("/")
    if not slash or not provider:
        raise Invalid("after must be a payouts page's cursor: provider/rental", field="after")
    return provider, ref


def _balance(uow: UnitOfWork, tenant_id: str) -> Balance:
    balances = uow.ledger.balances([tenant_id])
    return Balance(
        tenant_id,
        balances.get(AccountId.tenant_cash(tenant_id), 0),
        balances.get(AccountId.tenant_grants(tenant_id), 0),
    )
