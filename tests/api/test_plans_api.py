"""Plans, grants with expiry, payment terms and compute-futures money through the real app (SQLite and
PostgreSQL): a membership's fee and discount, a revenue share's report, a grant expiring, a postpaid credit
limit, a prepaid tenant warned then stopped, and a contract's prepaid price, 0-price usage and transfer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import (
    ADMIN,
    ADMIN_KEY,
    SteppedClock,
    app_client,
    charged,
    h100_contract,
    logged_in_as,
    make_tenant,
    register_agent,
    scheduler_cycles,
    wait_for,
)
from suanli.app.billing import MAX_ACCOUNT_MICROS
from suanli.app.postings import post_once
from suanli.cli import billing_commands, contract_commands, plan_commands, platform_commands
from suanli.cli.main import app
from suanli.domain.billing.ledger import TxKind, top_up_postings
from suanli.domain.billing.money import bp_of, charge_micros

H100 = {"gpu_model": "H100", "gpus": 1}
H100_ON_DEMAND = 2_990_000


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with app_client(database_url, meter_interval_s=3600, prepaid=True, low_balance_grace_s=0) as test_client:
        test_client.app.state.services.meter.after = ()  # the tests run expiry, revenue and enforcement
        yield test_client


def _credit(client: TestClient, tenant_id: str, amount: int, **extra) -> dict:
    response = client.post(
        f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": amount, **extra}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    return response.json()


def _balance(client: TestClient, headers: dict[str, str]) -> dict:
    return client.get("/v1/balance", headers=headers).json()


def _ledger(client: TestClient, tenant_id: str) -> list[dict]:
    return client.get(f"/v1/ledger?tenant={tenant_id}", headers=ADMIN).json()


def test_a_membership_posts_its_fee_and_discounts_on_demand_rentals(client, tenant) -> None:
    tenant_id, headers = tenant("member")
    refused = client.post(
        f"/v1/tenants/{tenant_id}/plans",
        json={"kind": "membership", "discount_bp": 1000, "fee_micros": 120_000_000},
        headers=ADMIN,
    )
    assert refused.status_code == 402 and refused.json()["error"]["field"] == "fee_micros"
    assert client.get("/v1/plans", headers=headers).json() == []  # nothing half-made

    _credit(client, tenant_id, 200_000_000)
    made = client.post(
        f"/v1/tenants/{tenant_id}/plans",
        json={"kind": "membership", "discount_bp": 1000, "fee_micros": 120_000_000},
        headers=ADMIN,
    )
    assert made.status_code == 201, made.text
    plan = made.json()
    assert plan["kind"] == "membership" and plan["ends_at"] > plan["starts_at"]
    assert _balance(client, headers)["cash_micros"] == 80_000_000
    fees = [tx for tx in _ledger(client, tenant_id) if tx["kind"] == "membership"]
    assert len(fees) == 1 and fees[0]["ref"] == plan["id"]

    clash = client.post(
        f"/v1/tenants/{tenant_id}/plans",
        json={"kind": "revenue_share", "revenue_share_bp": 500},
        headers=ADMIN,
    )
    assert clash.status_code == 409 and clash.json()["error"]["field"] == "starts_at"
    not_admin = client.post(f"/v1/tenants/{tenant_id}/plans", json={"kind": "membership"}, headers=headers)
    assert not_admin.status_code == 403

    rental = client.post("/v1/rentals", json=H100, headers=headers).json()
    quote = rental["quote"]
    assert quote["base_micros_per_hour"] == H100_ON_DEMAND
    assert quote["discounts"] == [{"label": f"membership {plan['id']}", "micros_per_hour": 299_000}]
    assert quote["final_micros_per_hour"] == H100_ON_DEMAND - 299_000
    placed = wait_for(client, rental["id"], headers, "placed")
    assert placed["price_micros_per_hour"] == H100_ON_DEMAND - 299_000
    assert placed["quote"]["stage"] == "placed" and placed["quote"]["region"] == "cn-north"
    assert placed["quote"]["created"]["stage"] == "created"

    spot = client.post(
        "/v1/rentals", json={**H100, "tier": "spot", "bid_micros_per_gpu_hour": 3_000_000}, headers=headers
    ).json()
    assert spot["quote"]["discounts"] == []  # a membership discounts on-demand only


@pytest.mark.parametrize(
    ("terms", "field"),
    [
        ({"kind": "membership", "revenue_share_bp": 3000}, "revenue_share_bp"),
        ({"kind": "membership", "discount_bp": 10_001}, "discount_bp"),
        ({"kind": "membership", "fee_micros": -1}, "fee_micros"),
    ],
    ids=["membership-with-share", "discount-over-100", "negative-fee"],
)
def test_a_refused_plan_names_its_field_and_no_plan_id(client, tenant, terms: dict, field: str) -> None:
    """The refusal named a freshly drawn plan id ("plan pln_21ff...: ...") that was never created."""
    tenant_id, headers = tenant("refused")
    refused = client.post(f"/v1/tenants/{tenant_id}/plans", json=terms, headers=ADMIN)
    assert refused.status_code in (400, 422), refused.text
    error = refused.json()["error"]
    assert error["field"] == field and "pln_" not in error["message"], error
    assert client.get("/v1/plans", headers=headers).json() == []


def test_a_members_offers_show_its_discounted_price_and_a_rental_is_charged_it(client, tenant) -> None:
    """The offers are priced for the tenant searching: a member sees 10% off on-demand (not spot), filters on
    that price, and a one-GPU rental placed then is charged what its offer said; another tenant sees the
    list price."""
    member_id, member = tenant("member")
    _, other = tenant("other")
    _credit(client, member_id, 200_000_000)
    plan = {"kind": "membership", "discount_bp": 1000, "fee_micros": 0}
    assert client.post(f"/v1/tenants/{member_id}/plans", json=plan, headers=ADMIN).status_code == 201

    def offered(headers: dict[str, str], query: str = "") -> dict[str, tuple[int, int, int]]:
        q = f"gpu=H100 region=cn-north interconnect=ib {query}"
        found = client.get("/v1/offers", params={"q": q}, headers=headers)
        assert found.status_code == 200, found.text
        prices = ("price_micros_per_gpu_hour", "unit_price_micros_per_hour", "plan_discount_bp")
        return {o["tier"]: tuple(o[name] for name in prices) for o in found.json()}

    discounted = H100_ON_DEMAND - bp_of(H100_ON_DEMAND, 1000)
    assert offered(member) == {"on_demand": (discounted, discounted, 1000), "spot": (1_500_335, 1_500_335, 0)}
    assert offered(other)["on_demand"] == (H100_ON_DEMAND, H100_ON_DEMAND, 0)
    assert set(offered(member, "tier=on_demand price<2.7")) == {"on_demand"}
    assert offered(other, "tier=on_demand price<2.7") == {}

    rental = client.post("/v1/rentals", json={**H100, "regions": ["cn-north"]}, headers=member).json()
    placed = wait_for(client, rental["id"], member, "placed")
    assert placed["price_micros_per_hour"] == discounted


def test_a_revenue_share_tenant_reports_a_month_once(client, tenant) -> None:
    tenant_id, headers = tenant("startup")
    _credit(client, tenant_id, 10_000_000)
    month = datetime.now(UTC).strftime("%Y-%m")
    none_yet = client.post(
        "/v1/revenue-reports", json={"month": month, "revenue_micros": 1_000_000}, headers=headers
    )
    assert none_yet.status_code == 409 and none_yet.json()["error"]["field"] == "month"
    start = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    made = client.post(
        f"/v1/tenants/{tenant_id}/plans",
        json={
            "kind": "revenue_share",
            "discount_bp": 3000,
            "revenue_share_bp": 500,
            "starts_at": start.isoformat(),
        },
        headers=ADMIN,
    )
    assert made.status_code == 201, made.text
    discounted = client.post("/v1/rentals", json=H100, headers=headers).json()
    assert discounted["quote"]["discounts"][0]["micros_per_hour"] == bp_of(
        discounted["quote"]["base_micros_per_hour"], 3000
    )
    refused = client.post("/v1/rentals", json={**H100, "tier": "reserved"}, headers=headers)
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "tier"  # a contract's tier

    report = {"month": month, "revenue_micros": 7_000_001}
    first = client.post("/v1/revenue-reports", json=report, headers=headers)
    assert first.status_code == 201, first.text
    assert first.json()["share_micros"] == 350_000  # 5% of 7,000,001 rounds half up to 350,000
    again = client.post("/v1/revenue-reports", json=report, headers=headers)
    assert again.status_code == 201 and again.json()["share_micros"] == 350_000
    changed = client.post("/v1/revenue-reports", json={"month": month, "revenue_micros": 1}, headers=headers)
    assert changed.status_code == 409
    shares = [tx for tx in _ledger(client, tenant_id) if tx["kind"] == "revenue_share"]
    assert len(shares) == 1 and shares[0]["ref"] == month
    cash = [p["amount_micros"] for p in shares[0]["postings"] if p["owner"] == tenant_id]
    assert cash == [-350_000]
    bad = client.post("/v1/revenue-reports", json={"month": "2026-13", "revenue_micros": 1}, headers=headers)
    assert bad.status_code in (400, 422)


def test_a_grant_expires_with_what_is_left_of_it(client, tenant) -> None:
    services = client.app.state.services
    tenant_id, headers = tenant("hackathon")
    expires = datetime.now(UTC) + timedelta(hours=1)
    grant_tx = _credit(
        client, tenant_id, 5_000_000, grant=True, expires_at=expires.isoformat(), memo="hackathon credits"
    )
    past = client.post(
        f"/v1/tenants/{tenant_id}/credit",
        json={"amount_micros": 1, "grant": True, "expires_at": "2000-01-01T00:00:00Z"},
        headers=ADMIN,
    )
    assert past.status_code == 400 and past.json()["error"]["field"] == "expires_at"
    grants = client.get("/v1/grants", headers=headers).json()
    assert [(g["id"], g["left_micros"]) for g in grants] == [(grant_tx["ref"], 5_000_000)]

    rental_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
    wait_for(client, rental_id, headers, "placed")
    client.post(f"/v1/rentals/{rental_id}/stop", headers=headers)
    services.billing.meter()
    charged = charge_micros(H100_ON_DEMAND, 60)
    assert _balance(client, headers)["grants_micros"] == 5_000_000 - charged

    assert services.plans.expire_grants(expires - timedelta(seconds=1)) == 0
    assert services.plans.expire_grants(expires + timedelta(seconds=1)) == 1
    assert services.plans.expire_grants(expires + timedelta(seconds=2)) == 0  # once
    expiry = [tx for tx in _ledger(client, tenant_id) if tx["kind"] == "grant_expiry"]
    assert len(expiry) == 1 and expiry[0]["ref"] == grant_tx["ref"]
    assert _balance(client, headers)["grants_micros"] == 0
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_a_credit_key_reused_with_another_expiry_or_memo_is_refused_and_a_naive_expiry_is_utc(
    client, tenant
) -> None:
    tenant_id, headers = tenant("promo")
    expires = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    grant = {"amount_micros": 5_000_000, "grant": True, "memo": "promo"}
    naive = {**grant, "expires_at": expires.replace(tzinfo=None).isoformat()}  # no offset: read as UTC
    keyed = {**ADMIN, "Idempotency-Key": "promo-1"}
    first = client.post(f"/v1/tenants/{tenant_id}/credit", json=naive, headers=keyed)
    assert first.status_code == 201, first.text
    again = client.post(f"/v1/tenants/{tenant_id}/credit", json=naive, headers=keyed)
    assert again.status_code == 201 and again.json()["hash"] == first.json()["hash"]
    later = {**grant, "expires_at": (expires + timedelta(days=180)).isoformat()}
    other_expiry = client.post(f"/v1/tenants/{tenant_id}/credit", json=later, headers=keyed)
    assert other_expiry.status_code == 409 and other_expiry.json()["error"]["field"] == "expires_at"
    other_memo = client.post(f"/v1/tenants/{tenant_id}/credit", json={**naive, "memo": "x"}, headers=keyed)
    assert other_memo.status_code == 409 and other_memo.json()["error"]["field"] == "memo"
    (stored,) = client.get("/v1/grants", headers=headers).json()
    assert datetime.fromisoformat(stored["expires_at"]) == expires
    assert _balance(client, headers)["grants_micros"] == 5_000_000


def test_a_credit_that_would_take_an_account_past_a_trillion_units_is_refused(client, tenant) -> None:
    services = client.app.state.services
    tenant_id, headers = tenant("whale")
    with services.billing.uow() as uow:  # a balance near the limit, without a thousand top-ups
        post_once(
            uow,
            datetime.now(UTC),
            key="whale-seed",
            kind=TxKind.TOP_UP,
            postings=top_up_postings(tenant_id, MAX_ACCOUNT_MICROS - 5),
        )
        uow.commit()
    over = client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 6}, headers=ADMIN)
    assert over.status_code == 400 and over.json()["error"]["field"] == "amount_micros", over.text
    assert _balance(client, headers)["cash_micros"] == MAX_ACCOUNT_MICROS - 5
    _credit(client, tenant_id, 5)
    assert _balance(client, headers)["cash_micros"] == MAX_ACCOUNT_MICROS
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_a_revenue_report_for_an_unknown_tenant_is_not_found(client) -> None:
    report = {"month": datetime.now(UTC).strftime("%Y-%m"), "revenue_micros": 1}
    response = client.post("/v1/revenue-reports?tenant=ten_nope", json=report, headers=ADMIN)
    assert response.status_code == 404 and "ten_nope" in response.json()["error"]["message"]


def test_postpaid_credit_limit_and_prepaid_warning_then_stop(client, tenant) -> None:
    services = client.app.state.services
    tenant_id, headers = tenant("enterprise")
    terms = client.put(
        f"/v1/tenants/{tenant_id}/payment-terms",
        json={"mode": "postpaid", "credit_limit_micros": 100_000},
        headers=ADMIN,
    )
    assert terms.status_code == 200 and terms.json()["floor_micros"] == -100_000
    # one H100 minute is 49,833 micros: two fit in the limit, a third would not
    first = client.post("/v1/rentals", json=H100, headers=headers)
    assert first.status_code == 201, first.text
    wait_for(client, first.json()["id"], headers, "placed")
    client.post(f"/v1/rentals/{first.json()['id']}/stop", headers=headers)
    services.billing.meter()
    second = client.post("/v1/rentals", json=H100, headers=headers)
    assert second.status_code == 201
    wait_for(client, second.json()["id"], headers, "placed")
    services.billing.meter()
    assert client.post("/v1/rentals", json=H100, headers=headers).status_code == 402
    bad = client.put(
        f"/v1/tenants/{tenant_id}/payment-terms",
        json={"mode": "prepaid", "credit_limit_micros": 5},
        headers=ADMIN,
    )
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "credit_limit_micros"

    # prepaid with credit for one minute: placed, charged past its balance, warned, then stopped
    prepaid_id, prepaid_headers = tenant("small")
    _credit(client, prepaid_id, charge_micros(H100_ON_DEMAND, 60))
    rental_id = client.post("/v1/rentals", json=H100, headers=prepaid_headers).json()["id"]
    wait_for(client, rental_id, prepaid_headers, "placed")
    later = datetime.now(UTC) + timedelta(minutes=10)
    services.billing.meter(later)
    assert _balance(client, prepaid_headers)["available_micros"] < 0
    assert services.plans.enforce(later)[prepaid_id] == "warn"
    warned = client.get("/v1/payment-terms", headers=prepaid_headers).json()
    assert warned["warned_at"] is not None and warned["stops_at"] is not None
    events = client.get(f"/v1/rentals/{rental_id}", headers=prepaid_headers).json()["events"]
    assert any(e["kind"] == "low_balance" for e in events)
    assert services.plans.enforce(later + timedelta(seconds=1))[prepaid_id] == "stop"
    assert client.get(f"/v1/rentals/{rental_id}", headers=prepaid_headers).json()["state"] == "stopped"
    _credit(client, prepaid_id, 100_000_000)
    services.plans.enforce(later + timedelta(seconds=2))
    assert client.get("/v1/payment-terms", headers=prepaid_headers).json()["warned_at"] is None


def test_a_contract_is_prepaid_covers_its_holders_usage_and_transfers_its_remaining_value(
    client, tenant, monkeypatch
) -> None:
    services = client.app.state.services
    holder_id, holder = tenant("futures-holder")
    buyer_id, buyer = tenant("futures-buyer")
    start = datetime.now(UTC) - timedelta(minutes=1)
    end = start + timedelta(hours=10)
    window = {"gpu_model": "H100-SXM-80GB", "count": 2, "region": "cn-north"}
    body = {**window, "starts_at": start.isoformat(), "ends_at": end.isoformat()}
    poor = client.post("/v1/contracts", json=body, headers=holder)
    assert poor.status_code == 402, poor.text
    reserved = next(
        p["price_micros_per_gpu_hour"]
        for p in client.get("/v1/prices").json()
        if p["gpu_model"] == "H100-SXM-80GB" and p["tier"] == "reserved" and p["kind"] == "list"
    )
    price = reserved * 2 * 10
    _credit(client, holder_id, price + 10_000_000)
    signed = client.post("/v1/contracts", json=body, headers=holder)
    assert signed.status_code == 201, signed.text
    contract = signed.json()
    assert contract["price_micros"] == price
    assert _balance(client, holder)["cash_micros"] == 10_000_000

    trial = client.post("/v1/rentals/dry-run", json={"gpu_model": "H100", "gpus": 3}, headers=holder).json()
    assert trial["contract_covered_gpus"] == 2 and trial["price_micros_per_hour"] == H100_ON_DEMAND
    monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, holder["Authorization"][7:]))
    said = CliRunner().invoke(app, ["rent", "H100:3", "--dry-run"], env={"COLUMNS": "200"})
    assert said.exit_code == 0 and "2 GPU(s) covered by your contracts" in said.output, said.output
    inside = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 2}, headers=holder).json()
    placed = wait_for(client, inside["id"], holder, "placed")
    assert placed["price_micros_per_hour"] == 0
    assert placed["quote"]["contract_covered_gpu_milli"] == 2000
    above = client.post("/v1/rentals", json=H100, headers=holder).json()
    above_placed = wait_for(client, above["id"], holder, "placed")
    assert above_placed["price_micros_per_hour"] == H100_ON_DEMAND  # over the count: on-demand

    halfway = start + timedelta(hours=5)
    assert services.contracts.recognize(halfway) == 1
    assert services.contracts.recognize(halfway) == 0
    broke = client.post(
        f"/v1/contracts/{contract['id']}/transfer", json={"to_tenant_id": buyer_id}, headers=ADMIN
    )  # the buyer has no cash yet: the field named is the request's own
    assert broke.status_code == 402 and broke.json()["error"]["field"] == "to_tenant_id", broke.text
    _credit(client, buyer_id, price)
    moved = client.post(
        f"/v1/contracts/{contract['id']}/transfer", json={"to_tenant_id": buyer_id}, headers=ADMIN
    )
    assert moved.status_code == 200, moved.text
    assert client.get(f"/v1/contracts/{contract['id']}", headers=buyer).json()["tenant_id"] == buyer_id
    transfers = [tx for tx in _ledger(client, buyer_id) if tx["kind"] == "transfer"]
    assert len(transfers) == 1
    paid = -sum(p["amount_micros"] for p in transfers[0]["postings"] if p["owner"] == buyer_id)
    assert 0 < paid < price  # the unearned part only (some time has passed since the start)
    assert _balance(client, buyer)["cash_micros"] == price - paid
    # once its whole value is earned, a pass no longer reads it
    with services.contracts.uow() as uow:
        assert contract["id"] in uow.contracts.to_recognize(end)
    assert services.contracts.recognize(end) == 1
    with services.contracts.uow() as uow:
        assert contract["id"] not in uow.contracts.to_recognize(end + timedelta(days=30))
    assert services.contracts.recognize(end + timedelta(days=30)) == 0
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_a_contract_transferred_in_its_window_covers_the_buyers_running_rentals_at_once(
    client, tenant
) -> None:
    """The buyer's rentals already running in the contract's pool become its claims at the transfer (the
    scheduler counts them reserved), so they pay the contract's 0 from then on, as a holder's rentals placed
    before a window's start do when it opens; the seller's lose the coverage. The buyer paid on-demand."""
    seller_id, seller = tenant("transfer-seller")
    buyer_id, buyer = tenant("transfer-buyer")
    for tenant_id in (seller_id, buyer_id):
        _credit(client, tenant_id, 1_000_000_000)
    pool = {"gpu_model": "H100-SXM-80GB", "gpus": 2, "regions": ["cn-north"]}
    start = datetime.now(UTC) - timedelta(minutes=1)
    signed = client.post("/v1/contracts", json=h100_contract(start, 10, 2), headers=seller)
    assert signed.status_code == 201, signed.text
    sellers = wait_for(
        client, client.post("/v1/rentals", json=pool, headers=seller).json()["id"], seller, "placed"
    )
    assert sellers["price_micros_per_hour"] == 0
    buyers = wait_for(
        client, client.post("/v1/rentals", json=pool, headers=buyer).json()["id"], buyer, "placed"
    )
    assert buyers["price_micros_per_hour"] == 2 * H100_ON_DEMAND

    moved = client.post(
        f"/v1/contracts/{signed.json()['id']}/transfer", json={"to_tenant_id": buyer_id}, headers=ADMIN
    )
    assert moved.status_code == 200, moved.text
    assert client.get(f"/v1/rentals/{buyers['id']}", headers=buyer).json()["price_micros_per_hour"] == 0
    after = client.get(f"/v1/rentals/{sellers['id']}", headers=seller).json()
    assert after["price_micros_per_hour"] == 2 * H100_ON_DEMAND
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_a_holders_rental_larger_than_its_contract_starts_on_what_is_held_for_it(client, tenant) -> None:
    """A holder of 8 H100s asks for 2 nodes of 8 while another tenant takes 6 of the 8 nodes: the 16 GPUs
    left include the 8 held for it, which are not held back from it (it waited with `contract_hold` until
    the window closed). It pays on-demand for the 8 its contract does not cover."""
    holder_id, holder = tenant("partial-holder")
    other_id, other = tenant("partial-other")
    for tenant_id in (holder_id, other_id):
        _credit(client, tenant_id, 1_000_000_000)
    signed = client.post("/v1/contracts", json=h100_contract(datetime.now(UTC), 3, 8), headers=holder)
    assert signed.status_code == 201, signed.text
    six = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "nodes": 6}
    taken = client.post("/v1/rentals", json=six, headers=other).json()
    assert wait_for(client, taken["id"], other, "placed")["state"] == "placed"
    gang = client.post("/v1/rentals", json={**six, "nodes": 2}, headers=holder).json()
    placed = wait_for(client, gang["id"], holder, "placed")
    assert placed["state"] == "placed", placed
    assert placed["quote"]["contract_covered_gpu_milli"] == 8000
    assert placed["price_micros_per_hour"] == 8 * H100_ON_DEMAND


def test_capacity_a_contract_opens_on_in_two_minutes_is_kept_from_rentals_that_would_still_run(
    client, tenant
) -> None:
    """A holder's 8 H100s open in two minutes; another tenant holds 7 of the 8 H100 nodes. Its next
    8-GPU rental declared for an hour would still run when the window opens (and the holder's claim would
    preempt it at once): it waits with `contract_hold`. One declared for a minute ends before: it starts."""
    holder_id, holder = tenant("soon-holder")
    other_id, other = tenant("soon-other")
    for tenant_id in (holder_id, other_id):
        _credit(client, tenant_id, 1_000_000_000)
    start = datetime.now(UTC) + timedelta(minutes=2)
    assert client.post("/v1/contracts", json=h100_contract(start, 3, 8), headers=holder).status_code == 201
    seven = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "nodes": 7, "max_duration_s": 3600}
    assert wait_for(
        client, client.post("/v1/rentals", json=seven, headers=other).json()["id"], other, "placed"
    )
    hour = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "max_duration_s": 3600}
    held = client.post("/v1/rentals", json=hour, headers=other).json()
    waiting = wait_for(client, held["id"], other, "placed", reason="contract_hold")
    assert waiting["pending_reason"] == "contract_hold", waiting
    assert "opening while it would run" in waiting["pending_message"]
    minute = client.post("/v1/rentals", json={**hour, "max_duration_s": 60}, headers=other).json()
    assert wait_for(client, minute["id"], other, "placed")["state"] == "placed"


def _reserved_list_price(client: TestClient, gpu_model: str) -> int:
    return next(
        p["price_micros_per_gpu_hour"]
        for p in client.get("/v1/prices").json()
        if p["gpu_model"] == gpu_model and p["tier"] == "reserved" and p["kind"] == "list"
    )


def test_a_quote_prices_a_contract_says_if_it_can_be_paid_and_signs_nothing(client, tenant) -> None:
    """A buyer sees the prepaid price before signing, and whether its cash covers it; a quote refuses what
    signing would refuse, and signing then charges the quoted price."""
    holder_id, holder = tenant("futures-shopper")
    _, other = tenant("futures-other")
    start = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    body = h100_contract(start, hours=10, count=2)
    unit = _reserved_list_price(client, "H100-SXM-80GB")
    price = unit * 2 * 10
    poor = client.post("/v1/contracts/quote", json=body, headers=holder)
    assert poor.status_code == 200, poor.text
    assert poor.json() == {
        **body,
        "starts_at": start.isoformat().replace("+00:00", "Z"),
        "ends_at": (start + timedelta(hours=10)).isoformat().replace("+00:00", "Z"),
        "tenant_id": holder_id,
        "price_micros_per_gpu_hour": unit,
        "price_micros": price,
        "payable": False,
    }
    assert client.get("/v1/contracts", headers=holder).json() == []
    assert _ledger(client, holder_id) == []

    _credit(client, holder_id, price)
    assert client.post("/v1/contracts/quote", json=body, headers=holder).json()["payable"] is True
    assert _balance(client, holder)["cash_micros"] == price  # quoting charged nothing
    signed = client.post("/v1/contracts", json=body, headers=holder)
    assert signed.status_code == 201 and signed.json()["price_micros"] == price, signed.text
    assert _balance(client, holder)["cash_micros"] == 0

    for changed, status_code, field in (
        ({"count": 10_000}, 409, "count"),  # more than the fleet can honour
        ({"region": "mars"}, 400, "region"),
        ({"gpu_model": "Z99"}, 400, "gpu_model"),
        ({"ends_at": "2020-01-01T00:00:00Z", "starts_at": "2019-12-31T00:00:00Z"}, 400, "ends_at"),
        ({"tenant_id": holder_id}, 403, "tenant_id"),  # another tenant's key
    ):
        headers = other if "tenant_id" in changed else holder
        refused = client.post("/v1/contracts/quote", json={**body, **changed}, headers=headers)
        assert refused.status_code == status_code, (changed, refused.text)
        assert refused.json()["error"]["field"] == field, refused.text
    assert len(client.get("/v1/contracts", headers=holder).json()) == 1
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_signing_again_with_the_same_idempotency_key_returns_the_contract_and_charges_once(
    client, tenant
) -> None:
    """A buyer whose answer was lost signs again with the same key: the same contract (200), one charge,
    even when both signings run at once; the key with other terms is refused, naming the header."""
    holder_id, holder = tenant("futures-retrier")
    _, other = tenant("futures-same-key")
    _credit(client, holder_id, 1_000_000_000)
    start = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    body = h100_contract(start, hours=2)
    price = _reserved_list_price(client, "H100-SXM-80GB") * 2
    first = client.post("/v1/contracts", json=body, headers={**holder, "Idempotency-Key": "buy-1"})
    again = client.post("/v1/contracts", json=body, headers={**holder, "Idempotency-Key": "buy-1"})
    assert (first.status_code, again.status_code) == (201, 200), (first.text, again.text)
    assert again.json() == first.json()
    changed = client.post(
        "/v1/contracts", json={**body, "count": 2}, headers={**holder, "Idempotency-Key": "buy-1"}
    )
    assert changed.status_code == 409 and changed.json()["error"]["field"] == "Idempotency-Key"
    # another tenant's same key is its own: it signs (or is refused) on its own terms
    assert (
        client.post("/v1/contracts", json=body, headers={**other, "Idempotency-Key": "buy-1"}).status_code
        == 402
    )
    assert client.post(
        "/v1/contracts", json=body, headers={**holder, "Idempotency-Key": "k" * 201}
    ).status_code in (
        400,
        422,
    )

    for attempt in range(6):  # both signings at once: each waits for the other's lock, then finds it
        at_once = threading.Barrier(2)
        codes: list[int] = []

        def sign(key: str = f"race-{attempt}", at_once=at_once, codes=codes) -> None:
            at_once.wait()
            response = client.post("/v1/contracts", json=body, headers={**holder, "Idempotency-Key": key})
            codes.append(response.status_code)

        threads = [threading.Thread(target=sign) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(codes) == [200, 201], codes
    contracts = client.get("/v1/contracts", headers=holder).json()
    assert len(contracts) == 7
    paid = [tx for tx in _ledger(client, holder_id) if tx["kind"] == "contract"]
    assert len(paid) == 7 and _balance(client, holder)["cash_micros"] == 1_000_000_000 - 7 * price
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_cli_quotes_a_contract_then_signs_it(client, tenant, monkeypatch) -> None:
    holder_id, holder = tenant("cli-futures")
    _credit(client, holder_id, 1_000_000_000)
    monkeypatch.setattr(
        contract_commands, "logged_in", logged_in_as(client, holder["Authorization"].removeprefix("Bearer "))
    )
    runner, env = CliRunner(), {"COLUMNS": "200"}
    window = ["--gpu", "H100-SXM-80GB", "--count", "1", "--region", "cn-north"]
    window += ["--from", "2031-05-01T00:00", "--until", "2031-05-01T04:00"]
    price = _reserved_list_price(client, "H100-SXM-80GB") * 4
    shown = f"{price / 1_000_000:,.4f}"
    quoted = runner.invoke(app, ["contracts", "quote", *window], env=env)
    assert quoted.exit_code == 0, quoted.output
    assert "1 x H100-SXM-80GB in cn-north, 2031-05-01 00:00 to 2031-05-01 04:00 UTC: 4 GPU-h" in quoted.output
    assert f"= {shown}, prepaid at signing" in quoted.output and "top up" not in quoted.output
    assert client.get("/v1/contracts", headers=holder).json() == []
    signed = runner.invoke(app, ["contracts", "create", *window], env=env)
    assert signed.exit_code == 0 and shown in signed.output, signed.output
    bad = runner.invoke(app, ["contracts", "quote", *window[:2], "--count", "0", *window[4:]], env=env)
    assert bad.exit_code == 2 and "--count" in bad.output
    past = [*window[:6], "--from", "2020-01-01T00:00", "--until", "2031-05-01T04:00"]
    late = runner.invoke(app, ["contracts", "create", *past], env=env)
    assert late.exit_code == 1 and "error: --from: " in late.output, late.output  # the server's refusal


def test_a_holder_cannot_make_another_tenant_pay_for_its_contract(client, tenant) -> None:
    """A transfer with value left charges the buyer: the seller alone must not be able to spend the buyer's
    cash (nor learn the buyer's balance from the refusal)."""
    holder_id, holder = tenant("futures-seller")
    victim_id, victim = tenant("futures-victim")
    start = datetime.now(UTC) - timedelta(minutes=1)
    body = h100_contract(start, hours=10, count=2)
    _credit(client, holder_id, 100_000_000)
    _credit(client, victim_id, 7_654_321)
    contract = client.post("/v1/contracts", json=body, headers=holder).json()
    assert contract["price_micros"] > 0, contract
    poor = client.post(
        f"/v1/contracts/{contract['id']}/transfer", json={"to_tenant_id": victim_id}, headers=holder
    )
    assert "7654321" not in poor.text  # the victim's cash
    assert poor.status_code == 403, poor.text
    _credit(client, victim_id, contract["price_micros"])
    holder_before, victim_before = _balance(client, holder), _balance(client, victim)
    pushed = client.post(
        f"/v1/contracts/{contract['id']}/transfer", json={"to_tenant_id": victim_id}, headers=holder
    )
    assert pushed.status_code == 403, pushed.text
    assert pushed.json()["error"]["field"] == "to_tenant_id"
    assert _balance(client, victim) == victim_before and _balance(client, holder) == holder_before
    assert client.get(f"/v1/contracts/{contract['id']}", headers=holder).json()["tenant_id"] == holder_id
    assert client.get(f"/v1/contracts/{contract['id']}", headers=victim).status_code == 404
    assert [tx["kind"] for tx in _ledger(client, victim_id)] == ["top_up", "top_up"]


def test_two_transfers_of_one_contract_at_once_pay_its_seller_once(client, tenant) -> None:
    """Both transfers read the seller as the holder; the second must not pay the seller again (and leave its
    buyer paying for a contract someone else holds): it finds the holder changed and is refused (409)."""
    seller_id, seller = tenant("futures-seller")
    buyer_ids = [tenant(f"futures-buyer-{i}")[0] for i in range(2)]
    for tenant_id in (seller_id, *buyer_ids):
        _credit(client, tenant_id, 1_000_000_000)
    start = datetime.now(UTC) - timedelta(minutes=1)
    body = h100_contract(start, hours=10)
    for _ in range(12):  # each try races; on the old code most of them paid twice
        contract = client.post("/v1/contracts", json=body, headers=seller).json()
        at_once = threading.Barrier(len(buyer_ids))
        codes: list[int] = []

        def sell(buyer_id: str, contract_id: str = contract["id"], at_once=at_once, codes=codes) -> None:
            at_once.wait()
            path = f"/v1/contracts/{contract_id}/transfer"
            codes.append(client.post(path, json={"to_tenant_id": buyer_id}, headers=ADMIN).status_code)

        threads = [threading.Thread(target=sell, args=(buyer_id,)) for buyer_id in buyer_ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ledger = _ledger(client, seller_id)
        transfers = [tx for tx in ledger if tx["kind"] == "transfer" and tx["ref"] == contract["id"]]
        assert len(transfers) == 1, (codes, transfers)
        assert sorted(codes) in ([200, 200], [200, 409]), codes
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_cli_plan_terms_grants_and_revenue(client, tenant, monkeypatch) -> None:
    tenant_id, headers = tenant("cli-member")
    tenant_key = headers["Authorization"].removeprefix("Bearer ")

    runner = CliRunner()
    env = {"COLUMNS": "200"}
    monkeypatch.setattr(billing_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    monkeypatch.setattr(plan_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    expires = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0).isoformat()
    granted = runner.invoke(
        app, ["admin", "credit", tenant_id, "50", "--grant", "--expires", expires], env=env
    )
    assert granted.exit_code == 0, granted.output
    bad = runner.invoke(app, ["admin", "credit", tenant_id, "5", "--expires", expires], env=env)
    assert bad.exit_code == 2 and "--expires" in bad.output
    runner.invoke(app, ["admin", "credit", tenant_id, "2000"], env=env)
    plan = runner.invoke(
        app,
        ["admin", "plan", tenant_id, "--kind", "membership", "--discount-pct", "10", "--fee", "1200"],
        env=env,
    )
    assert plan.exit_code == 0 and "membership" in plan.output and "1,200.0000" in plan.output, plan.output
    wrong = runner.invoke(app, ["admin", "plan", tenant_id, "--kind", "gold"], env=env)
    assert wrong.exit_code == 2 and "--kind" in wrong.output
    for args, says in (  # each refusal names the option the operator typed, in its units
        (["admin", "credit", tenant_id, "0"], "AMOUNT: "),
        (["admin", "limits", tenant_id, "--weight", "0"], "--weight: "),
        (
            [
                "admin",
                "plan",
                tenant_id,
                "--kind",
                "membership",
                "--starts",
                "2027-05-01",
                "--ends",
                "2027-01-01",
            ],
            "--ends: the plan would end (2027-01-01 00:00 UTC) before it starts (2027-05-01 00:00 UTC)",
        ),
    ):
        refused_option = runner.invoke(app, args, env=env)
        assert refused_option.exit_code in (1, 2) and says in refused_option.output, refused_option.output
        assert "_micros" not in refused_option.output and "pln_" not in refused_option.output
        assert "fair_share" not in refused_option.output
    terms = runner.invoke(
        app, ["admin", "terms", tenant_id, "--mode", "postpaid", "--credit-limit", "100"], env=env
    )
    assert terms.exit_code == 0 and "postpaid" in terms.output and "-100.0000" in terms.output, terms.output

    monkeypatch.setattr(plan_commands, "logged_in", logged_in_as(client, tenant_key))
    shown = runner.invoke(app, ["grants"], env=env)
    assert shown.exit_code == 0 and "50.0000" in shown.output, shown.output
    mine = runner.invoke(app, ["plans", "--json"], env=env)
    assert mine.exit_code == 0 and '"discount_bp": 1000' in mine.output
    month = datetime.now(UTC).strftime("%Y-%m")
    refused = runner.invoke(app, ["report-revenue", month, "100"], env=env)
    assert refused.exit_code == 1 and "no revenue-share plan" in refused.output


def test_a_rental_its_contract_covered_pays_on_demand_once_the_contract_has_ended(database_url: str) -> None:
    """A 1-GPU contract ending 50 s from now covers a 1-GPU rental (0 micros per hour). After the window the
    rental kept its 0 rate for good. Now the meter loop's pass (its jobs as the server wires them) re-prices
    it from the contract's end: the hour after it costs the on-demand rate."""
    clock = SteppedClock()
    with app_client(database_url, clock, meter_interval_s=3600, prepaid=False) as client:
        services = client.app.state.services
        tenant_id = client.post("/v1/tenants", json={"name": "ending"}, headers=ADMIN).json()["id"]
        secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
        headers = {"Authorization": f"Bearer {secret['secret']}"}
        end = clock.now().replace(microsecond=0) + timedelta(seconds=50)  # signed and placed before it
        window = {"gpu_model": "H100-SXM-80GB", "count": 1, "region": "cn-north"}
        body = {**window, "starts_at": (end - timedelta(minutes=1)).isoformat(), "ends_at": end.isoformat()}
        signed = client.post("/v1/contracts", json=body, headers=headers)
        assert signed.status_code == 201, signed.text
        rental = client.post("/v1/rentals", json=H100, headers=headers).json()
        placed = wait_for(client, rental["id"], headers, "placed")
        assert placed["price_micros_per_hour"] == 0 and placed["quote"]["contract_covered_gpu_milli"] == 1000
        clock.step_to(end)
        services.meter.work()  # a meter pass and the jobs after it
        later = end + timedelta(hours=1)
        services.billing.meter(now=later)
        body = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
        assert body["price_micros_per_hour"] == H100_ON_DEMAND
        assert charged(client, rental["id"], headers) == H100_ON_DEMAND  # 0 to the end, then 1 h on-demand


def test_a_rental_placed_before_its_contract_opens_is_covered_from_the_start(database_url: str) -> None:
    """A 1-GPU rental placed just before its tenant's 1-GPU contract opens pays on-demand. It kept that rate
    inside the window while the scheduler counted it as the contract's claim (the tenant paid the contract
    and on-demand for the same GPU: the hour after the start charged 2,990,000 micros). Now the meter
    loop's pass (its jobs as the server wires them) re-prices it from the start: the hour after costs 0,
    and only the seconds before it are charged (running, it owes no minimum yet)."""
    clock = SteppedClock()
    with app_client(database_url, clock, meter_interval_s=3600, prepaid=False) as client:
        services = client.app.state.services
        tenant_id = client.post("/v1/tenants", json={"name": "early"}, headers=ADMIN).json()["id"]
        secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
        headers = {"Authorization": f"Bearer {secret['secret']}"}
        start = clock.now().replace(microsecond=0) + timedelta(seconds=50)  # placed before it
        body = h100_contract(start, hours=2)
        signed = client.post("/v1/contracts", json=body, headers=headers)
        assert signed.status_code == 201, signed.text
        rental = client.post("/v1/rentals", json={**H100, "regions": ["cn-north"]}, headers=headers).json()
        placed = wait_for(client, rental["id"], headers, "placed")
        assert placed["price_micros_per_hour"] == H100_ON_DEMAND  # the window is not open yet
        clock.step_to(start)
        services.meter.work()  # a meter pass and the jobs around it
        services.billing.meter(now=start + timedelta(hours=1))
        body = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
        assert body["price_micros_per_hour"] == 0
        assert body["quote"]["contract_covered_gpu_milli"] == 1000
        placed_at = next(e["at"] for e in placed["events"] if e["kind"] == "placed")
        before_s = int(start.timestamp()) - int(datetime.fromisoformat(placed_at).timestamp())
        assert 49 <= before_s <= 50  # still running: no 60-s minimum charged ahead
        assert charged(client, rental["id"], headers) == charge_micros(H100_ON_DEMAND, before_s)


@pytest.mark.parametrize("ran", [False, True], ids=["stopped-unrun", "stop-confirmed-by-agent"])
def test_a_holders_rental_takes_over_the_coverage_of_one_that_ended(database_url: str, ran: bool) -> None:
    """A 1-GPU contract covers the holder's first rental; its second, placed inside the window, pays
    on-demand (above the count). The first is stopped: the second is within the count now. It kept paying
    on-demand for the rest of the window (the contract's GPU paid twice) while the scheduler counted it as the
    contract's claim. Now it is covered from the first one's stop: charged on-demand only until then."""
    clock = SteppedClock()
    with app_client(database_url, clock, meter_interval_s=3600, prepaid=False) as client:
        services = client.app.state.services
        _, headers = make_tenant(client, "holder")
        start = clock.now().replace(microsecond=0) + timedelta(seconds=50)
        signed = client.post("/v1/contracts", json=h100_contract(start, hours=2), headers=headers)
        assert signed.status_code == 201, signed.text
        spec = {**H100, "regions": ["cn-north"]}
        first = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        node = wait_for(client, first, headers, "placed")["allocation"][0]["node"]
        agent = register_agent(client, node) if ran else {}
        report = {"workloads": [{"rental_id": first, "state": "running"}]}
        if ran:
            assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200
        clock.step_to(start)
        services.meter.work()  # the window opens: the first is covered from its start
        second = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        placed = wait_for(client, second, headers, "placed")
        assert placed["price_micros_per_hour"] == H100_ON_DEMAND, placed  # above the contract's count
        clock.step_to(start + timedelta(minutes=10))
        stopped = client.post(f"/v1/rentals/{first}/stop", headers=headers).json()
        if ran:  # its agent says the workload stopped
            assert stopped["state"] == "stopping", stopped
            report = {"workloads": [{"rental_id": first, "state": "stopped", "exit_code": 143}]}
            assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200
        stopped = client.get(f"/v1/rentals/{first}", headers=headers).json()
        assert stopped["state"] == "stopped", stopped
        body = client.get(f"/v1/rentals/{second}", headers=headers).json()
        assert body["price_micros_per_hour"] == 0 and body["quote"]["contract_covered_gpu_milli"] == 1000
        services.billing.meter(now=start + timedelta(hours=1))
        placed_at = next(e["at"] for e in placed["events"] if e["kind"] == "placed")
        on_demand_s = int((start + timedelta(minutes=10)).timestamp()) - int(
            datetime.fromisoformat(placed_at).timestamp()
        )
        owed = charge_micros(H100_ON_DEMAND, on_demand_s)  # to the second: the placement's is fractional
        assert abs(charged(client, second, headers) - owed) <= charge_micros(H100_ON_DEMAND, 1), on_demand_s


def _crowded_h100s(client: TestClient, name: str) -> tuple[dict, dict, list[str]]:
    """Two funded tenants, `{name}-crowd` and `{name}-holder`: the crowd's eight 8-GPU rentals placed on
    every H100 of the fleet. (crowd's headers, holder's headers, the crowd's rental ids.)"""
    crowd_id, crowd = make_tenant(client, f"{name}-crowd")
    holder_id, holder = make_tenant(client, f"{name}-holder")
    _credit(client, crowd_id, 10**12)
    _credit(client, holder_id, 10**12)
    model = {"gpu_model": "H100-SXM-80GB", "gpus": 8}
    crowded = [client.post("/v1/rentals", json=model, headers=crowd).json()["id"] for _ in range(8)]
    for rental_id in crowded:
        assert wait_for(client, rental_id, crowd, "placed")["state"] == "placed"
    return crowd, holder, crowded


def test_a_holders_running_claim_is_never_the_victim_of_its_next_claim(database_url: str) -> None:
    """Inside an open contract the holder's running rentals are `reserved`: with the fleet's H100s full of
    another tenant's older rentals, the holder's second claim preempts one of those, not the holder's first
    claim (the newest rental, so the one that would lose the fewest GPU-seconds)."""
    with app_client(database_url, preemption_notice_s=1.0) as client:
        crowd, holder, crowded = _crowded_h100s(client, "claims")
        model = {"gpu_model": "H100-SXM-80GB", "gpus": 8}
        start = datetime.now(UTC) - timedelta(minutes=1)
        body = {"gpu_model": "H100-SXM-80GB", "count": 12, "region": "cn-north"}
        body |= {"starts_at": start.isoformat(), "ends_at": (start + timedelta(hours=2)).isoformat()}
        assert client.post("/v1/contracts", json=body, headers=holder).status_code == 201
        first = client.post("/v1/rentals", json=model, headers=holder).json()["id"]
        assert wait_for(client, first, holder, "placed")["state"] == "placed"  # a crowd rental went
        second = client.post("/v1/rentals", json={**model, "gpus": 4}, headers=holder).json()["id"]
        assert wait_for(client, second, holder, "placed")["state"] == "placed"  # another crowd rental went
        assert client.get(f"/v1/rentals/{first}", headers=holder).json()["state"] == "placed"
        gone = [
            r for r in crowded if client.get(f"/v1/rentals/{r}", headers=crowd).json()["state"] != "placed"
        ]
        assert len(gone) == 2


def test_a_notice_for_a_contract_claim_is_withdrawn_when_the_contract_ends_before_the_deadline(
    database_url: str,
) -> None:
    """The holder's claim (reserved) gives another tenant's on-demand rental notice; the contract ends
    before the deadline. Without it the claim is on-demand too and outranks no one: the victim keeps its
    GPUs (it was killed at the deadline for a rental of its own tier), and the claim waits."""
    clock = SteppedClock()
    with app_client(database_url, clock, preemption_notice_s=600.0) as client:
        crowd, holder, crowded = _crowded_h100s(client, "ending")
        model = {"gpu_model": "H100-SXM-80GB", "gpus": 8}
        end = clock.now().replace(microsecond=0) + timedelta(minutes=2)
        body = {"gpu_model": "H100-SXM-80GB", "count": 8, "region": "cn-north"}
        body |= {"starts_at": (clock.now() - timedelta(minutes=1)).isoformat(), "ends_at": end.isoformat()}
        signed = client.post("/v1/contracts", json=body, headers=holder)
        assert signed.status_code == 201, signed.text
        claim = client.post("/v1/rentals", json=model, headers=holder).json()["id"]
        assert (
            wait_for(client, claim, holder, "placed", reason="preempting")["pending_reason"] == "preempting"
        )
        states = {r: client.get(f"/v1/rentals/{r}", headers=crowd).json()["state"] for r in crowded}
        (victim,) = [r for r, state in states.items() if state == "preempting"]
        clock.step_to(end + timedelta(seconds=1))  # the window closed; the deadline is 8 minutes off
        kept = wait_for(client, victim, crowd, "placed")
        assert kept["state"] == "placed" and kept["notice_deadline"] is None
        assert any("no longer outranks it" in e["message"] for e in kept["events"])
        assert any(
            "preempted by a rental of another tenant (reserved)" in e["message"] for e in kept["events"]
        )
        clock.step_to(end + timedelta(minutes=10))  # past the old deadline
        scheduler_cycles(client)
        assert client.get(f"/v1/rentals/{victim}", headers=crowd).json()["state"] == "placed"
        assert client.get(f"/v1/rentals/{claim}", headers=holder).json()["state"] == "pending"


def test_a_contract_sold_back_and_forth_within_a_second_is_paid_for_at_each_sale(
    client, tenant, monkeypatch
) -> None:
    """A to B, B to A, A to B inside one second: the third sale's payment had the first's ledger key (its
    parties and the second) and was taken for a replay, so B held the contract and had paid nothing."""
    services = client.app.state.services
    seller_id, seller = tenant("futures-bouncer")
    buyer_id, buyer = tenant("futures-bounced")
    for tenant_id in (seller_id, buyer_id):
        _credit(client, tenant_id, 1_000_000_000)
    contract = client.post("/v1/contracts", json=h100_contract(datetime.now(UTC), hours=10), headers=seller)
    assert contract.status_code == 201, contract.text
    frozen = services.contracts.clock.now()
    monkeypatch.setattr(services.contracts, "clock", SimpleNamespace(now=lambda: frozen))
    before = {t: _balance(client, h)["cash_micros"] for t, h in ((seller_id, seller), (buyer_id, buyer))}
    path = f"/v1/contracts/{contract.json()['id']}/transfer"
    for to_tenant_id in (buyer_id, seller_id, buyer_id):
        moved = client.post(path, json={"to_tenant_id": to_tenant_id}, headers=ADMIN)
        assert moved.status_code == 200, moved.text
    transfers = [tx for tx in _ledger(client, buyer_id) if tx["kind"] == "transfer"]
    assert len(transfers) == 3
    paid = before[buyer_id] - _balance(client, buyer)["cash_micros"]
    assert paid > 0 and _balance(client, seller)["cash_micros"] - before[seller_id] == paid
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True
