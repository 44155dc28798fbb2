"""Compute futures on the real store (SQLite and PostgreSQL): a transfer acts on the contract as it is when
the transfer's transaction runs, so a contract is never sold twice."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from suanli.app.billing import BillingService
from suanli.app.contracts import ContractService
from suanli.app.errors import NotFound
from suanli.app.fleet import FleetCache
from suanli.app.records import Caller, Tenant
from suanli.domain.billing.ledger import AccountId
from suanli.domain.catalog_data import CATALOG

FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()
T0 = datetime(2030, 1, 1, tzinfo=UTC)
SELLER = Caller(Tenant("ten_s", "seller", "tenant", T0), "key_s")
BUYERS = ("ten_b", "ten_c")


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
