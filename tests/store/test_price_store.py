"""Admins' price entries on the real store (SQLite and PostgreSQL): round trip, the stamp that keys the
cached book, and the book layered over the seed through BillingService."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from suanli.app.billing import BillingService
from suanli.app.errors import Forbidden, Invalid
from suanli.app.fleet import FleetCache
from suanli.app.records import Caller, PriceEntry, Tenant
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.pricebook import MigPrice
from suanli.domain.catalog_data import CATALOG
from suanli.domain.request import Tier

FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()
T0 = datetime(2030, 1, 1, tzinfo=UTC)
ADMIN = Caller(Tenant("ten_admin", "root", "admin", T0), "key_admin")
TENANT = Caller(Tenant("ten_a", "a", "tenant", T0), "key_a")
H100 = "H100-SXM-80GB"


@pytest.fixture
def env(store, clock):
    _, factory = store
    with factory() as u:
        u.fleet.put(FLEET, ["h100-a-01"], T0)
        u.commit()
    billing = BillingService(factory, clock, CATALOG, FleetCache(CATALOG))
    return factory, billing, clock


def test_entries_round_trip_in_id_order_and_the_stamp_moves(env) -> None:
    factory, _, _ = env
    with factory() as u:
        assert u.prices.list() == [] and u.prices.stamp() == (0, 0)
        first = u.prices.add(PriceEntry(H100, "*", "on_demand", 2_500_000, T0, "cut", created_at=T0))
        second = u.prices.add(
            PriceEntry(
                "A100-80GB", "eu-west", "reserved", 300_000, T0 + timedelta(days=1), "promo", "1g.10gb"
            )
        )
        u.commit()
    with factory() as u:
        stored = u.prices.list()
        assert u.prices.stamp() == (2, second.id)
    assert [e.id for e in stored] == [first.id, second.id] and first.id is not None
    assert stored[0] == PriceEntry(H100, "*", "on_demand", 2_500_000, T0, "cut", None, first.id, T0)
    assert stored[1].mig_profile == "1g.10gb" and stored[1].effective_from == T0 + timedelta(days=1)
    assert stored[1].effective_from.tzinfo is not None


def test_the_book_is_the_seed_plus_stored_entries_and_cached_until_one_is_added(env) -> None:
    factory, billing, clock = env
    with factory() as u:
        seeded = billing.price_book(u)
        assert billing.price_book(u) is seeded
        assert (
            seeded.list_price(H100, "*", Tier.ON_DEMAND, to_epoch_s(T0)).price_micros_per_gpu_hour
            == 2_990_000
        )
    later = T0 + timedelta(hours=1)
    stored = billing.set_prices(
        ADMIN,
        [
            PriceEntry("h100-sxm-80gb", "*", "on_demand", 2_000_000, later),
            PriceEntry(H100, "cn-north", "spot", 1_000_000),
            PriceEntry("A100-80GB", "*", "on_demand", 250_000, source="slice promo", mig_profile="1g.10gb"),
        ],
    )
    assert [e.gpu_model for e in stored] == [H100, H100, "A100-80GB"]
    assert stored[0].source.startswith("set by operator root") and stored[1].effective_from == T0
    with factory() as u:
        book = billing.price_book(u)
        assert book is not seeded and billing.price_book(u) is book
    at, before = to_epoch_s(later), to_epoch_s(later) - 1
    assert book.list_price(H100, "*", Tier.ON_DEMAND, before).price_micros_per_gpu_hour == 2_990_000
    assert book.list_price(H100, "*", Tier.ON_DEMAND, at).price_micros_per_gpu_hour == 2_000_000
    assert book.spot_floor(H100, "cn-north", at).floor_micros_per_gpu_hour == 1_000_000
    assert book.spot_floor(H100, "eu-west", at).floor_micros_per_gpu_hour == 1_500_000  # falls back to *
    mig = book.mig_price("A100-80GB", "*", Tier.ON_DEMAND, "1g.10gb", at)
    assert isinstance(mig, MigPrice) and mig.price_micros_per_hour == 250_000

    # the listing: in force now plus future-dated; a superseded entry drops out once the new one applies
    listed = [(e.model, e.region, e.effective_from_s) for e in billing.prices() if e.model == H100]
    assert (H100, "*", 0) in listed and (H100, "*", at) in listed
    clock.at = later
    listed = [(e.model, e.region, e.effective_from_s) for e in billing.prices() if e.model == H100]
    assert (H100, "*", at) in listed and (H100, "*", 0) in listed  # the seed spot floor of * stays
    on_demand = [
        e for e in billing.prices() if e.model == H100 and getattr(e, "tier", None) == Tier.ON_DEMAND
    ]
    assert [e.effective_from_s for e in on_demand] == [at]


def test_a_later_entry_for_the_same_instant_wins(env) -> None:
    factory, billing, _ = env
    start = T0 + timedelta(days=2)
    billing.set_prices(ADMIN, [PriceEntry(H100, "*", "reserved", 1_000_000, start)])
    billing.set_prices(ADMIN, [PriceEntry(H100, "*", "reserved", 1_100_000, start)])
    with factory() as u:
        found = billing.price_book(u).list_price(H100, "*", Tier.RESERVED, to_epoch_s(start))
    assert found.price_micros_per_gpu_hour == 1_100_000


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (PriceEntry("Z9000", "*", "on_demand", 1), "gpu_model"),
        (PriceEntry("H100", "*", "on_demand", 1), "gpu_model"),  # ambiguous family
        (PriceEntry(H100, "*", "gold", 1), "tier"),
        (PriceEntry(H100, "*", "on_demand", -1), "price_micros_per_gpu_hour"),
        (PriceEntry(H100, "mars-1", "on_demand", 1), "region"),
        (PriceEntry("L40S", "*", "on_demand", 1, mig_profile="1g.10gb"), "mig_profile"),
        (PriceEntry(H100, "*", "on_demand", 1, mig_profile="9g.99gb"), "mig_profile"),
        (PriceEntry(H100, "*", "spot", 1, mig_profile="1g.10gb"), "mig_profile"),
        (PriceEntry(H100, "*", "on_demand", 1, T0 - timedelta(minutes=2)), "effective_from"),
    ],
)
def test_bad_entries_are_refused_naming_the_field_and_nothing_is_stored(env, entry, field) -> None:
    factory, billing, _ = env
    good = PriceEntry(H100, "*", "on_demand", 1_000_000)
    with pytest.raises(Invalid) as raised:
        billing.set_prices(ADMIN, [good, entry])
    assert raised.value.field == field
    with factory() as u:
        assert u.prices.list() == []


def test_only_an_admin_sets_prices_and_a_minute_of_clock_skew_is_allowed(env) -> None:
    _, billing, _ = env
    with pytest.raises(Forbidden):
        billing.set_prices(TENANT, [PriceEntry(H100, "*", "on_demand", 1)])
    stored = billing.set_prices(ADMIN, [PriceEntry(H100, "*", "on_demand", 1, T0 - timedelta(seconds=30))])
    assert stored[0].effective_from == T0 - timedelta(seconds=30)
