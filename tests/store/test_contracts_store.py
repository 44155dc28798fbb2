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
from sqlalchemy import text

from suanli.app.billing import BillingService
from suanli.app.contracts import ContractOrder, ContractService
from suanli.app.errors import Conflict
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
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")  # transfers with value left
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
            rental_id, [NodeAllocation(NODE, 0, 0, (Slice(0, 1000, 1024),))], [Booking(NODE, 0, 0)], at=at
        )
        u.commit()


def _place_on_demand(factory, rental_id: str, at: datetime, gpus: int = 1, first_gpu: int = 0) -> None:
    """A `gpus`-GPU on-demand rental of the seller placed at `at`, uncovered: RATE per GPU-hour."""
    quote = {
        "stage": "placed",
        "model": MODEL,
        "region": REGION,
        "tier": "on_demand",
        "base_micros_per_hour": RATE * gpus,
        "discounts": [],
        "contract_coverage_micros_per_hour": 0,
        "contract_covered_gpu_milli": 0,
        "final_micros_per_hour": RATE * gpus,
    }
    slices = tuple(Slice(i, 1000, 1024) for i in range(first_gpu, first_gpu + gpus))
    spec = RentalSpec(gpu_model=MODEL, gpus=gpus)
    with factory() as u:
        u.rentals.add(Rental(rental_id, SELLER.tenant.id, "pending", spec, at))
        assert u.rentals.mark_placed(rental_id, at, RATE * gpus, quote)
        u.rentals.book(
            rental_id,
            [NodeAllocation(NODE, 0, 0, slices)],
            [Booking(NODE, s.gpu_index, 0) for s in slices],
            at=at,
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
    """The contract is transferred to ten_b and, at the same time, to ten_c. The transfer read the contract
    before its transaction and acted on that copy (a retry after a ledger conflict too), so both went through
    from the seller: ten_b and ten_c each paid the seller the remaining value and only one got the contract.
    Now the second reads the contract after the first (locked in its transaction): it moves from ten_c, who
    is paid by ten_b, and the seller is paid once."""
    service, clock, factory = contracts
    order = ContractOrder("H100-SXM-80GB", 2, "cn-north", T0, T0 + timedelta(hours=10))
    signed, _ = service.create(SELLER, order)
    assert signed.price_micros > 0
    clock.meanwhile = lambda: service.transfer(ADMIN, signed.id, "ten_c")
    assert service.transfer(ADMIN, signed.id, "ten_b").tenant_id == "ten_b"
    assert service.get(ADMIN, signed.id).tenant_id == "ten_b"
    assert _cash(factory, SELLER.tenant.id) == 0  # paid the price once, got it back once
    assert _cash(factory, "ten_c") == 0  # paid the seller, then was paid by ten_b
    assert _cash(factory, "ten_b") == -signed.price_micros


def test_a_covered_rental_pays_its_rate_after_its_contract_ends(contracts, billing) -> None:
    """A 1-GPU contract over [T0, T0 + 1 h) covers a rental placed at T0 (0 micros per hour). The rental runs
    on; after the window it kept its 0 rate for good: 2 h of an H100 charged 0. Now the meter loop's
    `follow_coverage` re-prices it from the contract's end: the second hour costs RATE."""
    service, _, factory = contracts
    service.create(SELLER, ContractOrder(MODEL, 1, REGION, T0, T0 + HOUR))[0]
    _place_covered(factory, "rnt_c", T0)
    assert service.follow_coverage(T0 + HOUR / 2) == 0  # still open
    assert service.follow_coverage(T0 + 2 * HOUR) == 1
    assert service.follow_coverage(T0 + 2 * HOUR) == 0  # once
    billing.meter(now=T0 + 2 * HOUR)
    assert _charged(factory, "rnt_c") == RATE  # 1 h at 0, then 1 h at RATE


def test_a_covered_rental_of_the_seller_pays_its_rate_from_the_transfer(contracts, billing) -> None:
    """The seller's rental covered by a 1-GPU contract kept its 0 rate after the contract was sold, while
    the buyer's rentals were covered by it too: one contracted GPU covered two. Now the seller's pays from
    the transfer on."""
    service, clock, factory = contracts
    signed = service.create(SELLER, ContractOrder(MODEL, 1, REGION, T0, T0 + 10 * HOUR))[0]
    _place_covered(factory, "rnt_c", T0)
    clock.at = T0 + HOUR / 2
    service.transfer(ADMIN, signed.id, "ten_b")
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
        return service.create(caller, ContractOrder(MODEL, count, REGION, T0, T0 + HOUR))[0]
    except Conflict as error:
        return error


def test_a_rental_placed_before_the_window_is_covered_from_its_start(contracts, billing) -> None:
    """A 1-GPU rental placed at T0 - 30 min pays RATE; a 1-GPU contract of its tenant opens at T0. It kept
    paying RATE inside the window while the scheduler counted it as the contract's claim: the tenant paid
    the contract and on-demand for one GPU (1.5 h charged RATE x 1.5). Now the meter loop's coverage job
    re-prices it from T0: the half hour before is charged, the hour after is not; the job is done once."""
    service, clock, factory = contracts
    clock.at = T0 - HOUR
    service.create(SELLER, ContractOrder(MODEL, 1, REGION, T0, T0 + 2 * HOUR))[0]
    _place_on_demand(factory, "rnt_early", T0 - HOUR / 2)
    assert service.follow_coverage(T0 - HOUR / 4) == 0  # not open yet
    assert service.follow_coverage(T0 + timedelta(seconds=20)) == 1
    assert service.follow_coverage(T0 + timedelta(seconds=50)) == 0  # once
    billing.meter(now=T0 + HOUR)
    assert _charged(factory, "rnt_early") == RATE // 2
    service.follow_coverage(T0 + 3 * HOUR)  # the window ended at T0 + 2 h: on-demand again from there
    billing.meter(now=T0 + 3 * HOUR)
    assert _charged(factory, "rnt_early") == RATE // 2 + RATE


def test_the_window_covers_the_earliest_placed_rentals_up_to_its_count(contracts) -> None:
    """Before a 2-GPU contract opens its holder places a 1-GPU rental, then a 2-GPU one, then a 1-GPU one.
    From the start the first is covered, the second for one of its GPUs (half its rate), the third not."""
    service, clock, factory = contracts
    clock.at = T0 - HOUR
    service.create(SELLER, ContractOrder(MODEL, 2, REGION, T0, T0 + 2 * HOUR))[0]
    _place_on_demand(factory, "rnt_1", T0 - HOUR + timedelta(minutes=5), first_gpu=0)
    _place_on_demand(factory, "rnt_2", T0 - HOUR + timedelta(minutes=10), gpus=2, first_gpu=1)
    _place_on_demand(factory, "rnt_3", T0 - HOUR + timedelta(minutes=20), first_gpu=3)
    assert service.follow_coverage(T0) == 2
    with factory() as u:
        found = {r.id: r for r in u.rentals.by_ids(["rnt_1", "rnt_2", "rnt_3"])}
    assert {i: r.price_micros_per_hour for i, r in found.items()} == {
        "rnt_1": 0,
        "rnt_2": RATE,
        "rnt_3": RATE,
    }
    assert found["rnt_2"].quote["contract_covered_gpu_milli"] == 1000


def test_the_coverage_job_reads_only_windows_still_to_follow_and_never_doubles_a_change(contracts) -> None:
    """The job listed every contract ever signed on every pass. Now a followed start and end are each marked
    in the transaction that re-prices: once both are followed the contract is not read again, and a pass
    that follows the end again (its mark lost, as a pass killed before committing leaves it) changes no
    rate."""
    service, clock, factory = contracts
    clock.at = T0 - HOUR
    signed = service.create(SELLER, ContractOrder(MODEL, 1, REGION, T0, T0 + HOUR))[0]
    _place_on_demand(factory, "rnt_early", T0 - HOUR / 2)
    assert service.follow_coverage(T0 + 2 * HOUR) == 1  # covered from T0, uncovered from T0 + 1 h
    with factory() as u:
        assert u.contracts.coverage_due(T0 + 100 * HOUR) == []
        rates = u.rentals.rate_changes(["rnt_early"])["rnt_early"]
        u.session.execute(text("UPDATE contracts SET coverage_stage = 1 WHERE id = :id"), {"id": signed.id})
        u.commit()
    assert [rate for _, rate in rates] == [RATE, 0, RATE]
    assert service.follow_coverage(T0 + 2 * HOUR) == 0
    with factory() as u:
        assert u.rentals.rate_changes(["rnt_early"])["rnt_early"] == rates
