"""Compute futures on the real store (SQLite and PostgreSQL): two contracts signed at once never overbook; a
transfer acts on the contract as it is when the transfer's transaction runs, so a contract is never sold
twice; a rental a contract covered pays its
uncovered rate once the contract has ended or was transferred."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from suanli.app.billing import BillingService
from suanli.app.contracts import ContractService
from suanli.app.errors import Conflict, NotFound
from suanli.app.fleet import FleetCache
from suanli.app.records import Booking, Caller, Rental, RentalSpec, Tenant
from suanli.domain.billing.ledger import AccountId, TxKind
from suanli.domain.billing.money import round_half_up
from suanli.domain.billing.pricebook import ListPrice, PriceBook
from suanli.domain.catalog_data import CATALOG
from suanli.domain.contracts import fleet_capacity
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.plan import NodeAllocation, Slice
from suanli.domain.request import Tier

FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()
T0 = datetime(2030, 1, 1, tzinfo=UTC)
SELLER = Caller(Tenant("ten_s", "seller", "tenant", T0), "key_s")
BUYERS = ("ten_b", "ten_c")
MODEL, REGION, NODE = "H100-SXM-80GB", "cn-north", "h100-a-01"
RATE = 2_990_000  # the covered GPU's on-demand rate
HOUR = timedelta(hours=1)


class RacingClock:
    """Now is `at`; the first time it is asked, `meanwhile` runs first (another request's work, finished
    between the moment a use case starts and the moment it writes)."""

    def __init__(self, at: datetime) -> None:
        self.at = at
        self.meanwhile: Callable[[], object] | None = None

    def now(self) -> datetime:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return self.at


@pytest.fixture
def contracts(store) -> tuple[ContractService, RacingClock, object]:
    _, factory = store
    with factory() as u:
        for tenant_id in (SELLER.tenant.id, *BUYERS):
            u.tenants.add(Tenant(tenant_id, tenant_id, "tenant", T0))
        u.fleet.put(FLEET, [], T0)
        u.commit()
    clock = RacingClock(T0)
    billing = BillingService(factory, clock, CATALOG, FleetCache(CATALOG))
    service = ContractService(factory, clock, FleetCache(CATALOG), CATALOG, price_book=billing.price_book)
    return service, clock, factory


@pytest.fixture
def billing(store, contracts) -> BillingService:
    _, clock, factory = contracts
    return BillingService(factory, clock, CATALOG, FleetCache(CATALOG))


def _place_covered(factory, rental_id: str, at: datetime) -> None:
    """A 1-GPU rental of the seller placed at `at`, wholly covered by its contract: 0 micros per hour."""
    quote = {
        "stage": "placed",
        "model": MODEL,
        "region": REGION,
        "tier": "on_demand",
        "base_micros_per_hour": RATE,
        "discounts": [],
        "contract_coverage_micros_per_hour": RATE,
        "contract_covered_gpu_milli": 1000,
        "final_micros_per_hour": 0,
    }
    with factory() as u:
        u.rentals.add(Rental(rental_id, SELLER.tenant.id, "pending", RentalSpec(gpu_model=MODEL, gpus=1), at))
        assert u.rentals.mark_placed(rental_id, at, 0, quote)
        u.rentals.book(
            rental_id, [NodeAllocation(NODE, 0, 0, (Slice(0, 1000, 1024),))], [Booking(NODE, 0, 0)]
        )
        u.commit()


def _charged(factory, rental_id: str) -> int:
    with factory() as u:
        txs = [t for t in u.ledger.transactions(None) if t.ref == rental_id and t.kind is TxKind.CHARGE]
    return sum(-p.amount_micros for t in txs for p in t.postings if p.amount_micros < 0)


def _cash(factory, tenant_id: str) -> int:
    with factory() as u:
        return u.ledger.balances([tenant_id]).get(AccountId.tenant_cash(tenant_id), 0)


def test_a_contract_sold_to_two_buyers_at_once_is_sold_once(contracts) -> None:
    """The seller transfers one contract to ten_b and, at the same time, to ten_c. The transfer read the
    contract before its transaction and acted on that copy (a retry after a ledger conflict too), so both
    went through: ten_b and ten_c each paid the seller the remaining value and only one got the contract.
    Now the second finds the seller no longer holds it."""
    service, clock, factory = contracts
    signed = service.create(SELLER, "H100-SXM-80GB", 2, "cn-north", T0, T0 + timedelta(hours=10), None)
    assert signed.price_micros > 0
    clock.meanwhile = lambda: service.transfer(SELLER, signed.id, "ten_c")
    with pytest.raises(NotFound):
        service.transfer(SELLER, signed.id, "ten_b")
    buyer = Caller(Tenant("ten_c", "ten_c", "tenant", T0), "key_c")
    assert service.get(buyer, signed.id).tenant_id == "ten_c"
    assert _cash(factory, "ten_b") == 0
    assert _cash(factory, "ten_c") == -signed.price_micros
    assert _cash(factory, SELLER.tenant.id) == 0  # paid the price once, got it back once


def test_a_covered_rental_pays_its_rate_after_its_contract_ends(contracts, billing) -> None:
    """A 1-GPU contract over [T0, T0 + 1 h) covers a rental placed at T0 (0 micros per hour). The rental runs
    on; after the window it kept its 0 rate for good: 2 h of an H100 charged 0. Now the meter loop's
    `end_coverage` re-prices it from the contract's end: the second hour costs RATE."""
    service, _, factory = contracts
    service.create(SELLER, MODEL, 1, REGION, T0, T0 + HOUR, None)
    _place_covered(factory, "rnt_c", T0)
    assert service.end_coverage(T0 + HOUR / 2) == 0  # still open
    assert service.end_coverage(T0 + 2 * HOUR) == 1
    assert service.end_coverage(T0 + 2 * HOUR) == 0  # once
    billing.meter(now=T0 + 2 * HOUR)
    assert _charged(factory, "rnt_c") == RATE  # 1 h at 0, then 1 h at RATE


def test_a_covered_rental_of_the_seller_pays_its_rate_from_the_transfer(contracts, billing) -> None:
    """The seller's rental covered by a 1-GPU contract kept its 0 rate after the contract was sold, while
    the buyer's rentals were covered by it too: one contracted GPU covered two. Now the seller's pays from
    the transfer on."""
    service, clock, factory = contracts
    signed = service.create(SELLER, MODEL, 1, REGION, T0, T0 + 10 * HOUR, None)
    _place_covered(factory, "rnt_c", T0)
    clock.at = T0 + HOUR / 2
    service.transfer(SELLER, signed.id, "ten_b")
    billing.meter(now=T0 + HOUR)
    assert _charged(factory, "rnt_c") == round_half_up(RATE * 1800, 3600)


def test_two_free_contracts_signed_at_once_never_overbook_the_pool(store, contracts) -> None:
    """A cluster whose contracts are free (no price, so nothing is posted to the ledger, whose chain
    serialises priced signings). Two tenants each sign for 40 of cn-north's 64 H100s at once: the second
    read the contracts while the first had checked but not committed, and both were signed: 80 of 64.
    Now signings take turns (SQLite's transactions are serialised already)."""
    if store[0].dialect.name != "postgresql":
        pytest.skip("SQLite serialises every transaction (BEGIN IMMEDIATE)")
    service, _, _ = contracts
    capacity = fleet_capacity(parse_fleet(FLEET, source="example", catalog=CATALOG))[(MODEL, REGION)]
    count = capacity // 2 + 8
    results: list[object] = []
    concurrent = threading.Thread(target=lambda: results.append(_sign(service, "ten_b", count)))
    free = PriceBook([ListPrice(MODEL, "*", Tier.RESERVED, 0, 0, "an in-house cluster")])

    def book_meanwhile(_uow) -> PriceBook:  # the first signing has checked the pool and not committed yet
        if not concurrent.is_alive() and not results:
            concurrent.start()
            concurrent.join(timeout=2)  # it finishes unless it has to wait for the first to commit
        return free

    service.price_book = book_meanwhile
    first = _sign(service, "ten_c", count)
    concurrent.join(timeout=10)
    signed = [r for r in (first, *results) if not isinstance(r, Exception)]
    assert len(signed) == 1, results
    assert any(isinstance(r, Conflict) for r in (first, *results))


def _sign(service: ContractService, tenant_id: str, count: int):
    caller = Caller(Tenant(tenant_id, tenant_id, "tenant", T0), f"key_{tenant_id}")
    try:
        return service.create(caller, MODEL, count, REGION, T0, T0 + HOUR, None)
    except Conflict as error:
        return error
