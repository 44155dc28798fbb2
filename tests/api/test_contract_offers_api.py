"""Contract offers through the real app (SQLite and PostgreSQL): an admin offers a tenant a contract at a
negotiated price; the tenant accepts it (signed at that price, paid once, even when accepted twice at once)
or declines it; another tenant cannot see or take it; an expired, declined or no longer honourable offer
signs nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import ADMIN, ADMIN_KEY, FixedClock, app_client, h100_contract, logged_in_as
from suanli.cli import contract_commands
from suanli.cli.main import app

PRICE = 7_000_000  # negotiated: well under the list price of 2 H100s for 10 h


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with app_client(database_url, prepaid=True) as test_client:
        yield test_client


def _window(days_ahead: float = 3, hours: float = 10, count: int = 2) -> dict:
    start = (datetime.now(UTC) + timedelta(days=days_ahead)).replace(microsecond=0)
    return h100_contract(start, hours, count)


def _offer(client: TestClient, tenant_id: str, **extra) -> dict:
    body = {**_window(), "tenant_id": tenant_id, "price_micros": PRICE, **extra}
    made = client.post("/v1/contract-offers", json=body, headers=ADMIN)
    assert made.status_code == 201, made.text
    return made.json()


def _credit(client: TestClient, tenant_id: str, amount: int) -> None:
    response = client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": amount}, headers=ADMIN)
    assert response.status_code == 201, response.text


def _shown(client: TestClient, headers: dict[str, str], offer_id: str) -> dict:
    (offer,) = [o for o in client.get("/v1/contract-offers", headers=headers).json() if o["id"] == offer_id]
    return offer


def _cash(client: TestClient, headers: dict[str, str]) -> int:
    return client.get("/v1/balance", headers=headers).json()["cash_micros"]


def test_an_offer_is_signed_at_its_price_once_and_only_by_its_tenant(client, tenant) -> None:
    holder_id, holder = tenant("offeree")
    _, other = tenant("bystander")
    body = {**_window(), "tenant_id": holder_id, "price_micros": PRICE}
    assert client.post("/v1/contract-offers", json=body, headers=holder).status_code == 403  # admins offer
    offer = _offer(client, holder_id, **_window(days_ahead=10))
    assert offer["state"] == "open" and offer["price_micros"] == PRICE and offer["contract_id"] is None
    opened = datetime.fromisoformat(offer["created_at"])
    assert datetime.fromisoformat(offer["expires_at"]) - opened == timedelta(days=7)
    sooner = _offer(client, holder_id, **_window(days_ahead=1))  # never open past its window's end
    assert sooner["expires_at"] == sooner["ends_at"]
    client.post(f"/v1/contract-offers/{sooner['id']}/decline", headers=ADMIN)  # withdrawn by the operator
    listed = client.get("/v1/contract-offers", headers=holder).json()
    assert [(o["id"], o["state"]) for o in listed] == [(offer["id"], "open"), (sooner["id"], "declined")]
    assert client.get("/v1/contract-offers", headers=other).json() == []
    for headers in (other, ADMIN):  # neither another tenant nor an operator accepts for the holder
        taken = client.post(f"/v1/contract-offers/{offer['id']}/accept", headers=headers)
        assert taken.status_code == 404 and taken.json()["error"]["field"] == "offer", taken.text

    poor = client.post(f"/v1/contract-offers/{offer['id']}/accept", headers=holder)
    assert poor.status_code == 402, poor.text
    assert client.get("/v1/contracts", headers=holder).json() == []
    _credit(client, holder_id, PRICE + 1_000_000)
    accepted = client.post(f"/v1/contract-offers/{offer['id']}/accept", headers=holder)
    assert accepted.status_code == 201, accepted.text
    contract = accepted.json()
    terms = ("gpu_model", "count", "region", "starts_at", "ends_at")
    assert {k: contract[k] for k in terms} == {k: offer[k] for k in terms}
    assert contract["price_micros"] == PRICE and contract["tenant_id"] == holder_id
    assert _cash(client, holder) == 1_000_000
    again = client.post(f"/v1/contract-offers/{offer['id']}/accept", headers=holder)
    assert again.status_code == 200 and again.json() == contract
    assert _cash(client, holder) == 1_000_000
    shown = _shown(client, holder, offer["id"])
    assert shown["state"] == "accepted" and shown["contract_id"] == contract["id"]
    declined = client.post(f"/v1/contract-offers/{offer['id']}/decline", headers=holder)
    assert declined.status_code == 409 and "accepted" in declined.json()["error"]["message"]
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_two_acceptances_at_once_sign_one_contract_and_charge_once(client, tenant) -> None:
    holder_id, holder = tenant("eager")
    _credit(client, holder_id, 10 * PRICE)
    for _ in range(6):
        offer = _offer(client, holder_id, **_window(count=1))
        at_once = threading.Barrier(2)
        codes: list[int] = []

        def accept(offer_id: str = offer["id"], at_once=at_once, codes=codes) -> None:
            at_once.wait()
            codes.append(client.post(f"/v1/contract-offers/{offer_id}/accept", headers=holder).status_code)

        threads = [threading.Thread(target=accept) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(codes) == [200, 201], codes
    assert len(client.get("/v1/contracts", headers=holder).json()) == 6
    assert _cash(client, holder) == 4 * PRICE
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_declined_expired_and_no_longer_honourable_offers_sign_nothing(client, tenant) -> None:
    holder_id, holder = tenant("undecided")
    rival_id, rival = tenant("rival")
    for tenant_id in (holder_id, rival_id):
        _credit(client, tenant_id, 10**12)
    services = client.app.state.services

    declined = _offer(client, holder_id)
    assert (
        client.post(f"/v1/contract-offers/{declined['id']}/decline", headers=holder).json()["state"]
        == "declined"
    )
    refused = client.post(f"/v1/contract-offers/{declined['id']}/accept", headers=holder)
    assert refused.status_code == 409 and "declined" in refused.json()["error"]["message"]

    soon = datetime.now(UTC) + timedelta(hours=1)
    expiring = _offer(client, holder_id, expires_at=soon.isoformat())
    real_clock = services.contract_offers.clock
    services.contract_offers.clock = FixedClock(soon + timedelta(seconds=1))
    try:
        (shown,) = [
            o for o in client.get("/v1/contract-offers", headers=holder).json() if o["id"] == expiring["id"]
        ]
        assert shown["state"] == "expired"
        late = client.post(f"/v1/contract-offers/{expiring['id']}/accept", headers=holder)
        assert late.status_code == 409 and "expired" in late.json()["error"]["message"]
    finally:
        services.contract_offers.clock = real_clock

    # an offer holds nothing: another tenant signs the capacity first, and the acceptance is refused
    whole = {**_window(days_ahead=5), "count": 64}  # every H100 in cn-north
    capacity = _offer(client, holder_id, **whole)
    signed = client.post("/v1/contracts", json=whole, headers=rival)
    assert signed.status_code == 201, signed.text
    taken = client.post(f"/v1/contract-offers/{capacity['id']}/accept", headers=holder)
    assert taken.status_code == 409 and taken.json()["error"]["field"] == "count", taken.text
    (still,) = [
        o for o in client.get("/v1/contract-offers", headers=holder).json() if o["id"] == capacity["id"]
    ]
    assert still["state"] == "open"
    over = client.post(
        "/v1/contract-offers", json={**whole, "tenant_id": holder_id, "price_micros": 1}, headers=ADMIN
    )
    assert over.status_code == 409 and over.json()["error"]["field"] == "count"  # refused when made, too
    assert client.get("/v1/contracts", headers=holder).json() == []
    for bad, field in (
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ({"region": "mars"}, "region"),
        ({"tenant_id": "ten_nobody"}, "tenant_id"),
        ({"price_micros": -1}, "price_micros"),
    ):
        body = {**_window(), "tenant_id": holder_id, "price_micros": PRICE, **bad}
        wrong = client.post("/v1/contract-offers", json=body, headers=ADMIN)
        assert 400 <= wrong.status_code < 500 and wrong.json()["error"]["field"] == field, (bad, wrong.text)
    assert len(client.get("/v1/contract-offers", headers=ADMIN).json()) == 3


def test_cli_offer_accept_and_decline(client, tenant, monkeypatch) -> None:
    holder_id, holder = tenant("cli-offeree")
    _credit(client, holder_id, PRICE)
    runner, env = CliRunner(), {"COLUMNS": "200"}
    window = _window()
    monkeypatch.setattr(contract_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    args = ["contracts", "offer", "--tenant", holder_id, "--gpu", "H100-SXM-80GB", "--count", "2"]
    args += ["--region", "cn-north", "--from", window["starts_at"][:16], "--until", window["ends_at"][:16]]
    made = runner.invoke(app, [*args, "--price", "7", "--json"], env=env)
    assert made.exit_code == 0, made.output
    offer_id = made.output.split('"id": "')[1].split('"')[0]
    bad = runner.invoke(app, [*args, "--price", "seven"], env=env)
    assert bad.exit_code == 2 and "--price" in bad.output
    tenant_key = holder["Authorization"].removeprefix("Bearer ")
    monkeypatch.setattr(contract_commands, "logged_in", logged_in_as(client, tenant_key))
    listed = runner.invoke(app, ["contracts", "offers"], env=env)
    assert listed.exit_code == 0 and offer_id in listed.output and "7.0000" in listed.output, listed.output
    accepted = runner.invoke(app, ["contracts", "accept", offer_id], env=env)
    assert accepted.exit_code == 0 and "7.0000" in accepted.output, accepted.output
    declined = runner.invoke(app, ["contracts", "decline", offer_id], env=env)
    assert declined.exit_code == 1 and "accepted" in declined.output
