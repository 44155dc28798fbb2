"""`GET /v1/invoices/{month}` a page of rental lines at a time (SQLite and PostgreSQL): at most `limit` (1,000
by default) past the line of the rental `after`, `line_count` and a `Link: <...>; rel="next"` while more
follow; the plan and SLA lines and the totals are the whole month's on every page. The CSV stays the whole
month. The SDK's `invoice()` (and so `suanli invoice`) follows the pages."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from fastapi.testclient import TestClient

import suanli.client.billing as billing_module
from conftest import ADMIN, app_client, logged_in_as, wait_for


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    """The meter runs when a test runs it."""
    with app_client(database_url, meter_interval_s=3600, prepaid=True) as test_client:
        yield test_client


def charged_rentals(
    client: TestClient, tenant, count: int, name: str = "inv-pages"
) -> tuple[dict[str, str], str, str]:
    """`count` H100 rentals placed, stopped and charged (the 60-s minimum) of a new tenant `name`: its
    headers, key and the month."""
    tenant_id, headers = tenant(name)
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 500_000_000}, headers=ADMIN)
    month = ""
    for _ in range(count):
        rental_id = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 1}, headers=headers).json()[
            "id"
        ]
        wait_for(client, rental_id, headers, "placed")
        stopped = client.post(f"/v1/rentals/{rental_id}/stop", headers=headers).json()
        month = datetime.fromisoformat(stopped["created_at"]).strftime("%Y-%m")
    client.app.state.services.billing.meter()
    return headers, headers["Authorization"].split()[1], month


def test_an_invoices_rental_lines_come_a_page_at_a_time(client: TestClient, tenant) -> None:
    """Before, every rental line of the month came in one answer (a tenant with 10,000 rentals got 10,000
    lines; `limit` was not there): now 5 lines come as pages of 2, 2 and 1 following the Link, each once,
    in the whole invoice's order, every page with the month's totals and line count."""
    headers, _, month = charged_rentals(client, tenant, 5)
    whole = client.get(f"/v1/invoices/{month}", headers=headers)
    assert whole.status_code == 200 and "link" not in whole.headers  # 5 of 1,000 at most: one page
    every = [line["ref"] for line in whole.json()["lines"]]
    assert len(every) == 5 and whole.json()["line_count"] == 5

    pages, url = [], f"/v1/invoices/{month}?limit=2"
    while url:
        answer = client.get(url, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["line_count"] == 5 and body["total_micros"] == whole.json()["total_micros"]
        assert body["total_energy_kwh"] == whole.json()["total_energy_kwh"]
        pages.append([line["ref"] for line in body["lines"]])
        url = answer.links.get("next", {}).get("url")
        assert url is None or "limit=2" in url
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [ref for page in pages for ref in page] == every
    last = client.get(f"/v1/invoices/{month}", params={"after": every[-2]}, headers=headers)
    assert [line["ref"] for line in last.json()["lines"]] == [every[-1]] and "link" not in last.headers


def test_a_bad_cursor_or_limit_is_refused_naming_it(client: TestClient, tenant) -> None:
    """A rental with no line in the month (unknown, or another tenant's), a limit out of 1..1,000, or paging
    asked of the CSV (the whole month): a 4xx naming the field."""
    headers, _, month = charged_rentals(client, tenant, 1)
    bob, _, _ = charged_rentals(client, tenant, 1, "bob-inv-pages")
    theirs = client.get(f"/v1/invoices/{month}", headers=bob).json()["lines"][0]["ref"]
    for after in ("rnt_no_such_rental", theirs):
        answer = client.get(f"/v1/invoices/{month}", params={"after": after}, headers=headers)
        assert answer.status_code == 400 and answer.json()["error"]["field"] == "after", answer.text
    for limit in ("0", "1001", "many"):
        answer = client.get(f"/v1/invoices/{month}", params={"limit": limit}, headers=headers)
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "limit", answer.text
    as_csv = client.get(f"/v1/invoices/{month}", params={"format": "csv", "limit": "2"}, headers=headers)
    assert as_csv.status_code == 400 and as_csv.json()["error"]["field"] == "limit", as_csv.text


def test_the_sdk_puts_the_pages_together(client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    headers, key, month = charged_rentals(client, tenant, 3)
    whole = client.get(f"/v1/invoices/{month}", headers=headers).json()
    monkeypatch.setattr(billing_module, "INVOICE_PAGE_LIMIT", 2)  # two pages for 3 lines
    with logged_in_as(client, key)() as sdk:
        invoice = sdk.invoice(month)
    assert [line.ref for line in invoice.lines] == [line["ref"] for line in whole["lines"]]
    assert invoice.total_micros == whole["total_micros"] == sum(line.amount_micros for line in invoice.lines)
