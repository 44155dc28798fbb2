"""Invoices through the real app: JSON and CSV, a bad month named, tenant isolation; and the CLI table."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import ADMIN, WAIT_S, app_client, wait_for
from suanli.cli import billing_commands
from suanli.cli.main import app
from suanli.wire.billing_schemas import InvoiceResponse


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    """Prepaid on (the other API tests run postpaid); the tests run the meter themselves."""
    with app_client(database_url, meter_interval_s=3600, prepaid=True) as test_client:
        yield test_client


H100 = {"gpu_model": "H100", "gpus": 1}


def rented_and_metered(client, tenant) -> tuple[str, dict[str, str], str, str]:
    tenant_id, headers = tenant("inv")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 50_000_000}, headers=ADMIN)
    rental_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
    wait_for(client, rental_id, headers, "placed")
    stopped = client.post(f"/v1/rentals/{rental_id}/stop", headers=headers).json()
    client.app.state.services.billing.meter()
    month = datetime.fromisoformat(stopped["created_at"]).strftime("%Y-%m")
    return tenant_id, headers, rental_id, month


def test_invoice_json_and_csv(client, tenant) -> None:
    tenant_id, headers, rental_id, month = rented_and_metered(client, tenant)
    response = client.get(f"/v1/invoices/{month}", headers=headers)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["tenant_id"] == tenant_id and body["month"] == month
    (line,) = body["lines"]
    assert line["ref"] == rental_id and line["amount_micros"] > 0
    assert line["energy_kwh"] is not None and line["co2_kg"] is not None
    assert line["energy_source"] == "tdp_estimate"  # no agent reported power
    charged = [t for t in client.get("/v1/ledger", headers=headers).json() if t["kind"] == "charge"]
    assert (
        body["total_micros"]
        == line["amount_micros"]
        == sum(p["amount_micros"] for t in charged for p in t["postings"] if p["amount_micros"] > 0)
    )
    assert body["plan_lines"] == [] and body["sla_credit_lines"] == []

    as_csv = client.get(f"/v1/invoices/{month}?format=csv", headers=headers)
    assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
    rows = as_csv.text.splitlines()
    assert rows[1].startswith(f"rental,{rental_id},")
    assert rows[-1].split(",")[6] == str(body["total_micros"])
    by_accept = client.get(f"/v1/invoices/{month}", headers={**headers, "Accept": "text/csv"})
    assert by_accept.text == as_csv.text

    previous = (datetime.strptime(month, "%Y-%m") - timedelta(days=1)).strftime("%Y-%m")
    assert client.get(f"/v1/invoices/{previous}", headers=headers).json()["lines"] == []


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "november", "2026-11-01"])
def test_a_bad_month_is_400_naming_the_field(client, tenant, month: str) -> None:
    _, headers = tenant("bad")
    response = client.get(f"/v1/invoices/{month}", headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == "month"


def test_invoices_are_tenant_scoped(client, tenant) -> None:
    alice_id, _alice, rental_id, month = rented_and_metered(client, tenant)
    _, bob = tenant("bob")
    assert client.get(f"/v1/invoices/{month}?tenant={alice_id}", headers=bob).status_code == 404
    assert client.get(f"/v1/invoices/{month}", headers=bob).json()["lines"] == []
    admin_view = client.get(f"/v1/invoices/{month}?tenant={alice_id}", headers=ADMIN).json()
    assert [line["ref"] for line in admin_view["lines"]] == [rental_id]
    assert client.get(f"/v1/invoices/{month}").status_code == 401


def test_cli_invoice_prints_a_table_with_a_total(client, tenant, monkeypatch) -> None:
    _, headers, rental_id, month = rented_and_metered(client, tenant)

    class Sdk:
        def invoice(self, month: str, tenant_id: str | None = None) -> InvoiceResponse:
            found = client.get(f"/v1/invoices/{month}", headers=headers)
            return InvoiceResponse.model_validate(found.json())

        def invoice_csv(self, month: str, tenant_id: str | None = None) -> str:
            return client.get(f"/v1/invoices/{month}?format=csv", headers=headers).text

    @contextmanager
    def logged_in() -> Iterator[Sdk]:
        yield Sdk()

    monkeypatch.setattr(billing_commands, "logged_in", logged_in)
    runner = CliRunner()
    shown = runner.invoke(app, ["invoice", month], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert f"invoice {month}" in shown.output and "total" in shown.output and rental_id[:8] in shown.output
    assert "per second while placed" in " ".join(shown.output.split())  # the notes say how amounts are made
    as_csv = runner.invoke(app, ["invoice", month, "--csv"])
    assert as_csv.exit_code == 0 and as_csv.output.startswith("section,ref")
    as_json = runner.invoke(app, ["invoice", month, "--json"])
    assert as_json.exit_code == 0 and '"total_micros"' in as_json.output


def test_a_resized_rentals_invoice_counts_its_gpu_seconds_at_each_size(client, tenant) -> None:
    """4 GPUs, then 2 from the resize on: the invoice line's GPU-seconds are 4 x the first stretch plus
    2 x the second (before, the final size counted for the whole life)."""
    from suanli.domain.billing.money import to_epoch_s

    tenant_id, headers = tenant("sized")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 50_000_000}, headers=ADMIN)
    rental_id = client.post("/v1/rentals", json={**H100, "gpus": 4}, headers=headers).json()["id"]
    wait_for(client, rental_id, headers, "placed")
    time.sleep(2.1)
    client.patch(f"/v1/rentals/{rental_id}", json={"gpus": 2}, headers=headers)
    deadline = time.monotonic() + WAIT_S
    while len(client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["allocation"][0]["slices"]) != 2:
        assert time.monotonic() < deadline, "the GPU change was not applied"
        time.sleep(0.02)
    time.sleep(2.1)
    stopped = client.post(f"/v1/rentals/{rental_id}/stop", headers=headers).json()
    moments = {e["kind"]: datetime.fromisoformat(e["at"]) for e in stopped["events"]}
    placed_s, resized_s = to_epoch_s(moments["placed"]), to_epoch_s(moments["resized"])
    # billed the whole seconds it held, counted from its placement
    stopped_s = placed_s + int((moments["stopped"] - moments["placed"]).total_seconds())
    assert resized_s - placed_s >= 2 and stopped_s - resized_s >= 1
    month = datetime.fromisoformat(stopped["created_at"]).strftime("%Y-%m")
    (line,) = client.get(f"/v1/invoices/{month}", headers=headers).json()["lines"]
    assert line["gpu_seconds"] == 4 * (resized_s - placed_s) + 2 * (stopped_s - resized_s)
    assert line["description"].split(" x ")[1].split()[0] == "2"  # its size now
