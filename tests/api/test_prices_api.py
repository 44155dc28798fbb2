"""The price book through the real app (SQLite and PostgreSQL): an admin PUTs entries, GET lists them (in
force now and future-dated), new rentals are quoted at the new price once it is in force and not before,
tenants may not set prices, bad entries are refused naming the field; and `suanli admin prices set`."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from conftest import (
    ADMIN,
    ADMIN_KEY,
    AppTransport,
    FixedClock,
    SteppedClock,
    app_client,
    logged_in_as,
    make_tenant,
    wait_for,
)
from suanli.cli import billing_commands
from suanli.cli.main import app
from suanli.client.client import Client
from suanli.wire.billing_schemas import PriceEntryRequest, PriceEntryResponse

H100 = "H100-SXM-80GB"
RENT = {"gpu_model": H100, "gpus": 1}


def _entry(**fields: object) -> dict[str, object]:
    return {"gpu_model": H100, "tier": "on_demand", "price_micros_per_gpu_hour": 2_000_000, **fields}


def _on_demand(client) -> list[dict]:
    found = client.get("/v1/prices").json()
    return [p for p in found if p["gpu_model"] == H100 and p["kind"] == "list" and p["tier"] == "on_demand"]


def test_an_admin_put_is_listed_and_quotes_new_rentals(client, tenant) -> None:
    _, headers = tenant("renter")
    before = client.post("/v1/rentals", json=RENT, headers=headers).json()["quote"]
    assert before["unit_micros_per_gpu_hour"] == 2_990_000

    put = client.put("/v1/prices", json=[_entry(source="Q3 price cut")], headers=ADMIN)
    assert put.status_code == 200, put.text
    (stored,) = put.json()
    assert stored["gpu_model"] == H100 and stored["region"] == "*" and stored["source"] == "Q3 price cut"
    assert stored["id"] > 0 and stored["effective_from_s"] <= time.time()

    listed = _on_demand(client)
    assert [(p["price_micros_per_gpu_hour"], p["source"]) for p in listed] == [(2_000_000, "Q3 price cut")]
    created = client.post("/v1/rentals", json=RENT, headers=headers)
    assert created.status_code == 201, created.text
    quote = created.json()["quote"]
    assert quote["unit_micros_per_gpu_hour"] == 2_000_000 and quote["final_micros_per_hour"] == 2_000_000
    assert quote["source"] == "Q3 price cut"


def test_a_future_dated_entry_is_listed_but_applies_only_from_its_time(database_url: str) -> None:
    clock = SteppedClock()
    with app_client(database_url, clock) as client:
        _a_future_dated_entry_applies_from_its_time(client, clock)


def _a_future_dated_entry_applies_from_its_time(client, clock: SteppedClock) -> None:
    _, headers = make_tenant(client, "planner")
    start = clock.now() + timedelta(seconds=50)  # later than the PUT and two quotes on a slow machine
    far = clock.now() + timedelta(days=30)
    put = client.put(
        "/v1/prices",
        json=[
            _entry(price_micros_per_gpu_hour=2_500_000, effective_from=start.isoformat()),
            _entry(price_micros_per_gpu_hour=2_400_000, effective_from=far.isoformat()),
            _entry(tier="spot", region="cn-north", price_micros_per_gpu_hour=900_000),
            _entry(gpu_model="A100-80GB", mig_profile="1g.10gb", price_micros_per_gpu_hour=123_000),
        ],
        headers=ADMIN,
    )
    assert put.status_code == 200, put.text
    listed = [(p["price_micros_per_gpu_hour"], p["effective_from_s"]) for p in _on_demand(client)]
    assert [price for price, _ in listed] == [2_990_000, 2_500_000, 2_400_000]
    assert listed[2][1] == int(far.timestamp())
    prices = client.get("/v1/prices").json()
    assert {"gpu_model": "A100-80GB", "kind": "mig", "mig_profile": "1g.10gb"}.items() <= next(
        p for p in prices if p["kind"] == "mig"
    ).items()
    assert any(p["region"] == "cn-north" and p["kind"] == "spot_floor" for p in prices)

    now_quote = client.post("/v1/rentals", json=RENT, headers=headers).json()["quote"]
    assert now_quote["unit_micros_per_gpu_hour"] == 2_990_000
    mig = client.post(
        "/v1/rentals", json={"gpu_model": "A100-80GB", "mig_profile": "1g.10gb"}, headers=headers
    ).json()["quote"]
    assert mig["final_micros_per_hour"] == 123_000
    clock.step_to(start + timedelta(seconds=1))
    later = client.post("/v1/rentals", json=RENT, headers=headers).json()["quote"]
    assert later["unit_micros_per_gpu_hour"] == 2_500_000
    assert [p["price_micros_per_gpu_hour"] for p in _on_demand(client)] == [2_500_000, 2_400_000]


def _offered(client, headers: dict[str, str], query: str) -> dict[str, int]:
    """Each tier's unit price per hour in the offers for `query` (one row per tier)."""
    found = client.get("/v1/offers", params={"q": query}, headers=headers)
    assert found.status_code == 200, found.text
    return {o["tier"]: o["unit_price_micros_per_hour"] for o in found.json()}


def test_offers_show_the_price_a_rental_placed_now_pays(client, tenant) -> None:
    """An operator's regional on-demand price and spot floor are what the offers show, as they are what a
    rental placed now pays (the offers used to show the catalogue's list price whatever the book said); the
    spot price follows the pool's utilization, one GPU more (a one-GPU spot rental's own, which the leader
    counts); a future-dated entry shows from its time on."""
    _, headers = tenant("shopper")
    h100 = f"gpu={H100} region=cn-north interconnect=ib"
    assert _offered(client, headers, h100) == {"on_demand": 2_990_000, "spot": 1_500_335}  # u = 1/64
    later = datetime.now(UTC) + timedelta(hours=1)
    entries = [
        _entry(region="cn-north", price_micros_per_gpu_hour=3_500_000),
        _entry(tier="spot", region="cn-north", price_micros_per_gpu_hour=900_000),
        _entry(region="cn-north", price_micros_per_gpu_hour=3_000_000, effective_from=later.isoformat()),
    ]
    assert client.put("/v1/prices", json=entries, headers=ADMIN).status_code == 200
    assert _offered(client, headers, h100) == {"on_demand": 3_500_000, "spot": 900_585}

    body = {**RENT, "gpus": 8, "regions": ["cn-north"]}
    created = client.post("/v1/rentals", json=body, headers=headers)
    assert created.status_code == 201, created.text
    placed = wait_for(client, created.json()["id"], headers, "placed")
    assert placed["price_micros_per_hour"] == 8 * 3_500_000
    # 8 of the pool's 64 GPUs busy, and one more: floor + (on-demand - floor) x 0.140^2 = 900,000 + 50,960
    assert _offered(client, headers, h100) == {"on_demand": 3_500_000, "spot": 950_960}

    offers = client.app.state.services.offers
    real_clock, offers.clock = offers.clock, FixedClock(later + timedelta(seconds=1))
    try:
        assert _offered(client, headers, h100)["on_demand"] == 3_000_000
    finally:
        offers.clock = real_clock


def test_a_tenant_may_not_set_prices(client, tenant) -> None:
    _, headers = tenant("sneaky")
    refused = client.put("/v1/prices", json=[_entry(price_micros_per_gpu_hour=1)], headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert client.put("/v1/prices", json=[_entry()]).status_code == 401
    assert [p["price_micros_per_gpu_hour"] for p in _on_demand(client)] == [2_990_000]


@pytest.mark.parametrize(
    ("entry", "status", "field"),
    [
        (_entry(gpu_model="Z9000"), 400, "gpu_model"),
        (_entry(tier="gold"), 422, "1.tier"),
        (_entry(price_micros_per_gpu_hour=-5), 422, "1.price_micros_per_gpu_hour"),
        (_entry(gpu_model="L40S", mig_profile="1g.10gb"), 400, "mig_profile"),
        (_entry(mig_profile="5g.99gb"), 400, "mig_profile"),
        (_entry(region="mars-1"), 400, "region"),
        (_entry(effective_from="2020-01-01T00:00:00Z"), 400, "effective_from"),
    ],
)
def test_bad_entries_are_refused_naming_the_field(client, entry, status: int, field: str) -> None:
    refused = client.put("/v1/prices", json=[_entry(), entry], headers=ADMIN)
    assert refused.status_code == status, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and (status == 422 or error["message"].startswith("entry 1: "))
    assert [p["price_micros_per_gpu_hour"] for p in _on_demand(client)] == [2_990_000]  # all or none


def test_an_empty_put_is_refused(client) -> None:
    assert client.put("/v1/prices", json=[], headers=ADMIN).status_code == 422


def test_cli_admin_prices_set_sends_one_entry_and_prints_it(client, monkeypatch) -> None:
    sent: list[PriceEntryRequest] = []

    class Sdk(Client):
        def set_prices(self, entries: list[PriceEntryRequest]) -> list[PriceEntryResponse]:
            sent.extend(entries)
            return super().set_prices(entries)

    monkeypatch.setattr(billing_commands, "logged_in", logged_in_as(client, ADMIN_KEY, Sdk))
    runner = CliRunner()
    start = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0, tzinfo=None).isoformat()
    args = ["admin", "prices", "set", "--model", H100, "--tier", "reserved", "--price", "1.8"]
    shown = runner.invoke(
        app,
        [*args, "--region", "eu-west", "--from", start, "--source", "contract list"],
        env={"COLUMNS": "200"},
    )
    assert shown.exit_code == 0, shown.output
    assert "price entries stored" in shown.output and "eu-west" in shown.output
    assert sent[0].effective_from == datetime.fromisoformat(start).replace(tzinfo=UTC)
    assert sent[0].price_micros_per_gpu_hour == 1_800_000  # --price is in units
    as_json = runner.invoke(app, [*args, "--mig-profile", "3g.40gb", "--json"])
    assert as_json.exit_code == 0 and '"mig_profile": "3g.40gb"' in as_json.output

    bad_tier = runner.invoke(
        app, ["admin", "prices", "set", "--model", H100, "--tier", "gold", "--price-micros", "1"]
    )
    assert bad_tier.exit_code != 0 and "--tier" in bad_tier.output
    for price_args, says in (
        (["--price", "1.2345678"], "--price: an amount has at most six decimals"),
        (["--price", "1", "--price-micros", "1"], "--price: give the price"),
        ([], "--price: give the price"),
    ):
        base = ["admin", "prices", "set", "--model", H100, "--tier", "reserved"]
        refused_price = runner.invoke(app, [*base, *price_args])
        assert refused_price.exit_code == 2 and says in refused_price.output, refused_price.output
    bad_from = runner.invoke(app, [*args, "--from", "yesterday"])
    assert bad_from.exit_code != 0 and "--from" in bad_from.output
    refused = runner.invoke(app, [*args, "--region", "mars-1"])
    assert refused.exit_code != 0 and "field region" in refused.output
    assert len(sent) == 3
    listed = Client("http://testserver", transport=AppTransport(client)).prices()
    assert any(p.kind == "mig" and p.mig_profile == "3g.40gb" for p in listed)


def test_cli_prices_filters_by_model_and_says_from_when_each_applies(client, monkeypatch) -> None:
    """`suanli prices --gpu h100`: only the H100 models' entries; the catalogue's apply `always`, a dated
    one from its UTC minute (not epoch seconds)."""
    later = (datetime.now(UTC) + timedelta(days=2)).replace(second=0, microsecond=0)
    entry = _entry(region="cn-north", price_micros_per_gpu_hour=3_100_000, effective_from=later.isoformat())
    assert client.put("/v1/prices", json=[entry], headers=ADMIN).status_code == 200

    monkeypatch.setattr(billing_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    shown = CliRunner().invoke(app, ["prices", "--gpu", "h100"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in shown.output.splitlines()]
    rows = [row for row in rows if row and row[0]]
    assert rows and all("H100" in row[0] for row in rows)
    assert ["H100-SXM-80GB", "on_demand", "list", "*", "2.9900", "always"] in [row[:6] for row in rows]
    dated = ["H100-SXM-80GB", "on_demand", "list", "cn-north", "3.1000", later.strftime("%Y-%m-%d %H:%M")]
    assert dated in [row[:6] for row in rows]


def test_a_spot_offer_is_what_a_one_gpu_spot_rental_placed_now_pays(client, tenant) -> None:
    """The spot offer priced the pool at its utilization without the rental, and the leader prices it with
    its own GPUs counted: a one-GPU rental paid more than the offer said (in an 8-GPU pool, half of it
    rented paid 25% over). The offer is a one-unit rental's price now; a larger one pays more, as its dry
    run says."""
    _, headers = tenant("spot-shopper")
    h100 = f"gpu={H100} region=cn-north interconnect=ib"
    offered = _offered(client, headers, h100)["spot"]
    body = {**RENT, "gpus": 1, "regions": ["cn-north"], "tier": "spot", "bid_micros_per_gpu_hour": 3_000_000}
    created = client.post("/v1/rentals", json=body, headers=headers)
    assert created.status_code == 201, created.text
    placed = wait_for(client, created.json()["id"], headers, "placed")
    assert placed["price_micros_per_hour"] == offered > 1_500_000
    trial = client.post("/v1/rentals/dry-run", json={**body, "gpus": 8}, headers=headers).json()
    assert trial["price_micros_per_hour"] > 8 * _offered(client, headers, h100)["spot"]
