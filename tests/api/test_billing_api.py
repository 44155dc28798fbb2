"""Billing through the real app (SQLite and PostgreSQL), prepaid on: prices for anyone, 402 without credit,
admin credit, quotes on rentals, the meter charging a stopped rental once, the ledger verifying (server and
CLI check), and tenant isolation of balances and ledgers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import suanli.client.client as client_module
from conftest import (
    ADMIN,
    ADMIN_KEY,
    WAIT_S,
    SteppedClock,
    app_client,
    charged,
    logged_in_as,
    make_tenant,
    scheduler_cycles,
    wait_for,
)
from suanli.app.billing import LEDGER_SEQ_MAX
from suanli.cli import billing_commands
from suanli.cli.billing_commands import check, to_domain
from suanli.cli.main import app
from suanli.domain.billing.money import charge_micros
from suanli.store.ledger_repositories import SqlLedger
from suanli.wire.billing_schemas import BalanceResponse, LedgerTransactionResponse


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    """Prepaid on (the other API tests run postpaid); the tests run the meter themselves."""
    with app_client(database_url, meter_interval_s=3600, prepaid=True) as test_client:
        yield test_client


H100 = {"gpu_model": "H100", "gpus": 1}


def test_prices_are_public_and_seeded_from_the_list_prices(client) -> None:
    response = client.get("/v1/prices")
    assert response.status_code == 200
    entries = {(p["gpu_model"], p["tier"], p["kind"]): p for p in response.json()}
    h100 = entries[("H100-SXM-80GB", "on_demand", "list")]
    assert h100["price_micros_per_gpu_hour"] == 2_990_000 and "Lambda" in h100["source"]
    assert ("H100-SXM-80GB", "spot", "spot_floor") in entries


def test_a_tenant_without_credit_is_refused_and_a_credited_one_gets_a_quote(client, tenant) -> None:
    tenant_id, headers = tenant("broke")
    refused = client.post("/v1/rentals", json=H100, headers=headers)
    assert refused.status_code == 402, refused.text
    error = refused.json()["error"]
    assert error["code"] == "payment_required"
    assert "insufficient balance: 0.0000 available" in error["message"]

    credit = client.post(
        f"/v1/tenants/{tenant_id}/credit",
        json={"amount_micros": 10_000_000},
        headers={**ADMIN, "Idempotency-Key": "topup-1"},
    )
    assert credit.status_code == 201, credit.text
    again = client.post(
        f"/v1/tenants/{tenant_id}/credit",
        json={"amount_micros": 10_000_000},
        headers={**ADMIN, "Idempotency-Key": "topup-1"},
    )
    assert again.json()["hash"] == credit.json()["hash"]
    balance = client.get("/v1/balance", headers=headers).json()
    assert balance == {
        "tenant_id": tenant_id,
        "cash_micros": 10_000_000,
        "grants_micros": 0,
        "available_micros": 10_000_000,
    }
    created = client.post("/v1/rentals", json=H100, headers=headers)
    assert created.status_code == 201, created.text
    quote = created.json()["quote"]
    assert quote["tier"] == "on_demand" and quote["final_micros_per_hour"] > 0 and quote["minimum_s"] == 60


def test_a_stopped_rental_is_charged_once_and_the_ledger_verifies(client, tenant) -> None:
    tenant_id, headers = tenant("payer")
    client.post(
        f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 5_000_000, "grant": True}, headers=ADMIN
    )
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 50_000_000}, headers=ADMIN)
    rental_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
    placed = wait_for(client, rental_id, headers, "placed")
    assert placed["state"] == "placed"
    stopped = client.post(f"/v1/rentals/{rental_id}/stop", headers=headers).json()
    assert stopped["state"] == "stopped"
    billing = client.app.state.services.billing
    later = datetime.fromisoformat(stopped["created_at"]) + timedelta(hours=2)
    for _ in range(5):
        billing.meter()
        billing.meter(now=later)
    ledger = client.get("/v1/ledger", headers=headers).json()
    charges = [t for t in ledger if t["kind"] == "charge"]
    assert [t["key"] for t in charges] == [f"charge:{rental_id}:1"]
    charged = -sum(p["amount_micros"] for t in charges for p in t["postings"] if p["amount_micros"] < 0)
    assert charged == charge_micros(placed["price_micros_per_hour"], 60)  # stopped within the minute
    # the rental says what it was charged, read alone and in the list, as the ledger holds it
    assert client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["charged_micros"] == charged
    listed = {r["id"]: r for r in client.get("/v1/rentals", headers=headers).json()}
    assert listed[rental_id]["charged_micros"] == charged
    balance = client.get("/v1/balance", headers=headers).json()
    assert balance["grants_micros"] == max(0, 5_000_000 - charged)
    assert balance["available_micros"] == 55_000_000 - charged

    verified = client.get("/v1/ledger/verify", headers=headers).json()
    assert verified["ok"] and verified["problem_count"] == 0 and verified["problems"] == []
    admin_verified = client.get("/v1/ledger/verify", headers=ADMIN).json()
    assert admin_verified["ok"] and admin_verified["transactions"] == 3
    # a tenant's verification reads the whole ledger: one made in the last minute answers the next tenant's
    other_id, _ = tenant("other-payer")
    client.post(f"/v1/tenants/{other_id}/credit", json={"amount_micros": 1}, headers=ADMIN)
    assert client.get("/v1/ledger/verify", headers=headers).json()["transactions"] == 3
    assert client.get("/v1/ledger/verify", headers=ADMIN).json()["transactions"] == 4  # an admin's is fresh

    # the CLI's check: the tenant's own transactions, and the admin's whole journal
    journal = [to_domain(LedgerTransactionResponse.model_validate(t)) for t in ledger]
    assert check(journal, BalanceResponse.model_validate(balance), complete=False) == []
    everything = [
        to_domain(LedgerTransactionResponse.model_validate(t))
        for t in client.get("/v1/ledger", headers=ADMIN).json()
    ]
    assert check(everything, BalanceResponse.model_validate(balance), complete=True) == []
    unknown = client.get("/v1/ledger", params={"tenant": "ten_nope"}, headers=ADMIN)
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "no tenant ten_nope"
    tampered = list(journal)
    tampered[-1] = to_domain(
        LedgerTransactionResponse.model_validate({**ledger[-1], "memo": "nothing to see"})
    )
    assert any(
        "hash does not match" in p
        for p in check(tampered, BalanceResponse.model_validate(balance), complete=False)
    )


def test_creating_rentals_runs_no_meter_pass_and_a_stop_is_charged_promptly(client, tenant) -> None:
    """A create wakes the scheduler, not the meter: the live rentals' charges wait for the meter's timer (an
    hour here), so a burst of creates posts nothing for the others; a rental's end wakes the meter."""
    tenant_id, headers = tenant("busy")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 200_000_000}, headers=ADMIN)
    live_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
    assert wait_for(client, live_id, headers, "placed")["state"] == "placed"
    meter = client.app.state.services.meter
    passes = meter.runs
    for _ in range(3):
        assert client.post("/v1/rentals", json=H100, headers=headers).status_code == 201
    scheduler_cycles(client)
    assert meter.runs == passes
    assert charged(client, live_id, headers) == 0

    assert client.post(f"/v1/rentals/{live_id}/stop", headers=headers).json()["state"] == "stopped"
    deadline = time.monotonic() + WAIT_S
    while charged(client, live_id, headers) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert charged(client, live_id, headers) > 0  # its final charge, long before the meter's timer


def _transaction_count(client: TestClient) -> int:
    """How many transactions the whole ledger holds (an admin's verification reads it fresh)."""
    return client.get("/v1/ledger/verify", headers=ADMIN).json()["transactions"]


def test_a_stop_charges_only_the_ended_rental_and_the_timer_pass_charges_the_rest_once(database_url) -> None:
    """A rental's end wakes a meter pass over the ended rentals only: one charge for it, none for the live
    ones. The timer's pass then charges the live ones, and not the stopped one again."""
    clock = SteppedClock().clear_of_midnight()  # a charge run up over midnight is posted as one per day
    with app_client(database_url, clock, meter_interval_s=3600, prepaid=True) as client:
        tenant_id, headers = make_tenant(client, "many")
        client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 500_000_000}, headers=ADMIN)
        ids = [client.post("/v1/rentals", json=H100, headers=headers).json()["id"] for _ in range(3)]
        assert all(wait_for(client, i, headers, "placed")["state"] == "placed" for i in ids)
        stopped_id, live_ids = ids[0], ids[1:]
        clock.step_to(clock.now() + timedelta(minutes=5))  # all three owe five minutes
        before = _transaction_count(client)

        assert client.post(f"/v1/rentals/{stopped_id}/stop", headers=headers).json()["state"] == "stopped"
        deadline = time.monotonic() + WAIT_S
        while charged(client, stopped_id, headers) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        final_micros = charged(client, stopped_id, headers)
        assert final_micros > 0
        assert _transaction_count(client) == before + 1  # its charge only
        assert [charged(client, i, headers) for i in live_ids] == [0, 0]

        clock.step_to(clock.now() + timedelta(minutes=10))
        client.app.state.services.meter.work()  # the timer's pass
        assert all(charged(client, i, headers) > 0 for i in live_ids)
        assert charged(client, stopped_id, headers) == final_micros  # charged once, not again
        assert _transaction_count(client) == before + 1 + len(live_ids)


def test_verify_reads_one_snapshot_while_the_meter_posts_between_its_reads(
    client, tenant, monkeypatch
) -> None:
    """Audit T2: a meter pass commits a charge after verify has read the journal and before it reads the
    running balances and the postings' sums. Verify reads one snapshot, so it still answers ok (on
    PostgreSQL it said "recomputed X, stated Y" for every account the charge moved); the next one counts
    the charge. On SQLite the pass waits for verify's transaction to end."""
    tenant_id, headers = tenant("metered")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 50_000_000}, headers=ADMIN)
    rental_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
    placed = wait_for(client, rental_id, headers, "placed")
    placed_at = datetime.fromisoformat(next(e["at"] for e in placed["events"] if e["kind"] == "placed"))
    billing = client.app.state.services.billing
    if placed_at.hour == 23:  # the two passes below would cross midnight: each charge split in two per day
        placed_at += timedelta(hours=2)
    billing.meter(now=placed_at + timedelta(minutes=5))
    before = _transaction_count(client)
    passes: list[threading.Thread] = []
    read_journal = SqlLedger.transactions

    def journal_then_a_meter_pass(ledger: SqlLedger, owner: str | None = None) -> list:
        journal = read_journal(ledger, owner)
        if owner is None and not passes:  # verify's first read; a commit lands before its next ones
            passes.append(
                threading.Thread(target=billing.meter, kwargs={"now": placed_at + timedelta(minutes=9)})
            )
            passes[0].start()
            passes[0].join(timeout=2)  # committed on PostgreSQL; waiting on verify's lock on SQLite
        return journal

    monkeypatch.setattr(SqlLedger, "transactions", journal_then_a_meter_pass)
    verified = client.get("/v1/ledger/verify", headers=ADMIN).json()
    passes[0].join(timeout=WAIT_S)
    assert verified["problems"] == [] and verified["ok"], verified
    assert verified["transactions"] == before
    assert _transaction_count(client) == before + 1  # the charge that landed meanwhile


def test_billing_routes_are_isolated_between_tenants(client, tenant) -> None:
    alice_id, alice = tenant("alice")
    _, bob = tenant("bob")
    client.post(f"/v1/tenants/{alice_id}/credit", json={"amount_micros": 7_000_000}, headers=ADMIN)
    assert client.get(f"/v1/balance?tenant={alice_id}", headers=bob).status_code == 404
    assert client.get(f"/v1/balance?tenant={alice_id}", headers=ADMIN).json()["cash_micros"] == 7_000_000
    assert client.get(f"/v1/ledger?tenant={alice_id}", headers=bob).status_code == 404
    assert client.get("/v1/ledger", headers=bob).json() == []
    assert len(client.get("/v1/ledger", headers=alice).json()) == 1
    forbidden = client.post(f"/v1/tenants/{alice_id}/credit", json={"amount_micros": 1}, headers=bob)
    assert forbidden.status_code == 403
    assert client.get("/v1/balance").status_code == 401
    assert (
        client.post("/v1/tenants/ten_nobody/credit", json={"amount_micros": 1}, headers=ADMIN).status_code
        == 404
    )
    assert client.get("/v1/balance", headers=alice).json()["cash_micros"] == 7_000_000


def _keyed(client, name: str, role: str) -> tuple[str, dict[str, str]]:
    tenant_id = client.post("/v1/tenants", json={"name": name, "role": role}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    return tenant_id, {"Authorization": f"Bearer {secret}"}


def test_payouts_show_each_provider_its_payable_per_rental(client, tenant) -> None:
    tenant_id, headers = tenant("renter")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 50_000_000}, headers=ADMIN)
    _, lion = _keyed(client, "lion-city-gpu", "provider")
    _, other = _keyed(client, "someone-else", "provider")
    rental_id = client.post(
        "/v1/rentals",
        json={"gpu_model": "A100-40GB", "gpus": 1, "providers": ["lion-city-gpu"]},
        headers=headers,
    ).json()["id"]
    placed = wait_for(client, rental_id, headers, "placed")
    assert placed["state"] == "placed", placed
    stopped = client.post(f"/v1/rentals/{rental_id}/stop", headers=headers).json()
    client.app.state.services.billing.meter(
        now=datetime.fromisoformat(stopped["created_at"]) + timedelta(hours=1)
    )

    charged = charge_micros(placed["price_micros_per_hour"], 60)
    share = charged * (10_000 - 1500) // 10_000
    mine = client.get("/v1/payouts", headers=lion)
    assert mine.status_code == 200, mine.text
    assert mine.json() == [
        {
            "provider": "lion-city-gpu",
            "payable_micros": share,
            "lines": [{"ref": rental_id, "amount_micros": share, "transactions": 1}],
        }
    ]
    assert client.get("/v1/payouts", headers=other).json() == [
        {"provider": "someone-else", "payable_micros": 0, "lines": []}
    ]
    assert client.get("/v1/payouts?provider=lion-city-gpu", headers=other).status_code == 403
    assert client.get("/v1/payouts", headers=headers).status_code == 403
    assert client.get("/v1/payouts").status_code == 401
    everyone = client.get("/v1/payouts", headers=ADMIN).json()
    assert [p["provider"] for p in everyone] == ["lion-city-gpu"]
    one = client.get("/v1/payouts?provider=lion-city-gpu", headers=ADMIN).json()
    assert one == mine.json()
    missing = client.get("/v1/payouts", params={"provider": "nope"}, headers=ADMIN)  # a typo, not a zero row
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "provider", missing.text
    assert client.get("/v1/payouts?provider=platform", headers=ADMIN).status_code == 200  # the fleet's own
    ledger = client.get("/v1/ledger", headers=ADMIN).json()
    payable = sum(
        p["amount_micros"]
        for t in ledger
        for p in t["postings"]
        if p["account_kind"] == "provider_payable" and p["owner"] == "lion-city-gpu"
    )
    assert payable == share


def test_payouts_come_a_page_of_lines_at_a_time_with_a_link_to_the_next(client, tenant, monkeypatch) -> None:
    """`GET /v1/payouts` is bounded: at most `limit` lines (provider, rental) past the cursor `after`, each
    provider with its whole balance, a `Link` to the next page while more follow; the SDK and `suanli payouts`
    follow them and give each provider once with all its lines."""
    tenant_id, headers = tenant("many-rentals")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 500_000_000}, headers=ADMIN)
    on_lion = {"gpu_model": "A100-40GB", "gpus": 1, "providers": ["lion-city-gpu"]}
    ids = [
        client.post("/v1/rentals", json=body, headers=headers).json()["id"]
        for body in [on_lion] * 3 + [H100] * 2
    ]
    assert all(wait_for(client, i, headers, "placed")["state"] == "placed" for i in ids)
    for rental_id in ids:
        client.post(f"/v1/rentals/{rental_id}/stop", headers=headers)
    client.app.state.services.billing.meter(now=datetime.now(UTC) + timedelta(hours=1))

    whole = client.get("/v1/payouts", headers=ADMIN)
    assert whole.status_code == 200 and "link" not in whole.headers
    assert [(p["provider"], len(p["lines"])) for p in whole.json()] == [("lion-city-gpu", 3), ("platform", 2)]
    balances = {p["provider"]: p["payable_micros"] for p in whole.json()}
    assert balances == {p["provider"]: sum(x["amount_micros"] for x in p["lines"]) for p in whole.json()}

    pages, url = [], "/v1/payouts?limit=2"
    while url:
        answer = client.get(url, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        url = answer.links.get("next", {}).get("url")
    assert [[(p["provider"], len(p["lines"])) for p in page] for page in pages] == [
        [("lion-city-gpu", 2)],
        [("lion-city-gpu", 1), ("platform", 1)],
        [("platform", 1)],
    ]
    walked = [(p["provider"], x["ref"]) for page in pages for p in page for x in p["lines"]]
    assert walked == [(p["provider"], x["ref"]) for p in whole.json() for x in p["lines"]]
    assert all(p["payable_micros"] == balances[p["provider"]] for page in pages for p in page)
    cursor = "/".join(walked[1])
    assert (
        client.get("/v1/payouts", params={"after": cursor}, headers=ADMIN).json()[0]["lines"][0]["ref"]
        == walked[2][1]
    )

    for bad in ("0", "1001", "many"):
        refused = client.get("/v1/payouts", params={"limit": bad}, headers=ADMIN)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "limit", refused.text
    refused = client.get("/v1/payouts", params={"after": "no-cursor"}, headers=ADMIN)
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "after", refused.text

    monkeypatch.setattr(client_module, "PAYOUT_PAGE_LIMIT", 2)  # three pages for the SDK to follow
    with logged_in_as(client, ADMIN_KEY)() as sdk:
        assert [p.model_dump() for p in sdk.payouts()] == whole.json()
        assert [(p.provider, len(p.lines)) for p in sdk.payouts(limit=3)] == [("lion-city-gpu", 3)]
    monkeypatch.setattr(billing_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    shown = CliRunner().invoke(app, ["payouts", "--json"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == whole.json()


def test_a_rental_still_waiting_counts_its_minimum_against_the_next_ones_funds(client, tenant) -> None:
    """Prepaid, with cash for one 60-s minimum: a second rental asked while the first still waits was
    accepted (only rentals already placed counted), and both could run the balance below zero."""
    for name in [f"h100-{leaf}-{i:02d}" for leaf in "ab" for i in range(1, 5)]:
        assert client.post(f"/v1/nodes/{name}/drain", headers=ADMIN).status_code == 200  # H100s wait
    tenant_id, headers = tenant("one-minute")
    minimum = charge_micros(2_990_000, 60)
    credit = {"amount_micros": minimum + 10_000}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    first = client.post("/v1/rentals", json=H100, headers=headers)
    assert first.status_code == 201, first.text
    assert client.get(f"/v1/rentals/{first.json()['id']}", headers=headers).json()["state"] == "pending"
    second = client.post("/v1/rentals", json=H100, headers=headers)
    assert second.status_code == 402, second.text
    assert "owed by rentals waiting or started in the last minute" in second.json()["error"]["message"]
    client.post(f"/v1/rentals/{first.json()['id']}/stop", headers=headers)  # it never ran: nothing owed
    assert client.post("/v1/rentals", json=H100, headers=headers).status_code == 201


def test_creates_sent_at_once_with_cash_for_one_minimum_accept_one(client, tenant) -> None:
    """Each read the same balance and none counted the others: all were accepted (8 of 8 through three
    servers on PostgreSQL, the tenant then owing 7 minimums it never had)."""
    for name in [f"h100-{leaf}-{i:02d}" for leaf in "ab" for i in range(1, 5)]:
        assert client.post(f"/v1/nodes/{name}/drain", headers=ADMIN).status_code == 200
    tenant_id, headers = tenant("at-once")
    credit = {"amount_micros": charge_micros(2_990_000, 60) + 10_000}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    at_once, codes = threading.Barrier(6), []

    def create() -> None:
        at_once.wait()
        codes.append(client.post("/v1/rentals", json=H100, headers=headers).status_code)

    threads = [threading.Thread(target=create) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [201] + [402] * 5, codes


@pytest.mark.parametrize("after", [2**31, 2**63, 10**30])
def test_an_after_past_the_ledgers_seq_column_is_a_422_naming_after(client, tenant, after: int) -> None:
    """`seq` is a 32-bit column on PostgreSQL (64-bit on SQLite): a larger `after` failed the query, a plain
    500; the last seq it can hold is still an ordinary (empty) page."""
    _, headers = tenant("far")
    for caller in (headers, ADMIN):
        refused = client.get("/v1/ledger", params={"after": after}, headers=caller)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "after", refused.text
        assert str(LEDGER_SEQ_MAX) in refused.json()["error"]["message"], refused.text
        assert client.get("/v1/ledger", params={"after": LEDGER_SEQ_MAX}, headers=caller).json() == []


def test_the_ledger_comes_a_page_at_a_time_with_a_link_to_the_next(client, tenant, monkeypatch) -> None:
    """`GET /v1/ledger` is bounded: at most `limit` (100 by default, 1,000 at most) past `after`, a `Link`
    to the next page while more follow; the SDK (and so `suanli ledger ls`) follows them to the end."""
    tenant_id, headers = tenant("paged")
    for n in range(5):
        credit = {"amount_micros": 1_000_000 + n}
        client.post(
            f"/v1/tenants/{tenant_id}/credit", json=credit, headers={**ADMIN, "Idempotency-Key": f"p{n}"}
        )
    whole = client.get("/v1/ledger", headers=headers)
    assert whole.status_code == 200 and "link" not in whole.headers and len(whole.json()) == 5

    pages, url = [], "/v1/ledger?limit=2"
    while url:
        answer = client.get(url, headers=headers)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        url = answer.links.get("next", {}).get("url")
    assert [len(page) for page in pages] == [2, 2, 1]
    walked = [t for page in pages for t in page]
    assert walked == whole.json()
    assert [t["seq"] for t in walked] == sorted(t["seq"] for t in walked)
    after = client.get("/v1/ledger", params={"after": walked[2]["seq"]}, headers=headers).json()
    assert after == walked[3:]

    for bad in ("0", "1001", "many"):
        refused = client.get("/v1/ledger", params={"limit": bad}, headers=headers)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "limit", refused.text
    assert (
        client.get("/v1/ledger", params={"after": "-1"}, headers=headers).json()["error"]["field"] == "after"
    )

    monkeypatch.setattr(client_module, "LEDGER_PAGE_LIMIT", 2)  # three pages for the SDK to follow
    with logged_in_as(client, headers["Authorization"].removeprefix("Bearer "))() as sdk:
        assert [t.key for t in sdk.ledger()] == [t["key"] for t in walked]
        assert [t.key for t in sdk.ledger(after=walked[0]["seq"], limit=3)] == [t["key"] for t in walked[1:4]]
