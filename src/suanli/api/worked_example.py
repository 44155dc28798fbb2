"""The README's billing example, run for real on the whole server stack with a replay clock.

A tenant with a membership and a hackathon grant rents 2x H100 on demand for 90 minutes and one spot A100
slice (MIG 3g.40gb) that another tenant's on-demand rental preempts with 30 s notice; the meter runs and
the month's invoice is printed as `suanli invoice` prints it. Run: `python -m suanli.api.worked_example`.
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from rich.console import Console

from suanli.api.app import create_app
from suanli.cli.billing_commands import _balance_table, _invoice_table
from suanli.config import Settings
from suanli.wire.billing_schemas import BalanceResponse, InvoiceResponse

ADMIN_KEY = "sk_admin_worked_example"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
UNIT = 1_000_000  # micros per currency unit

FLEET = """
[regions.cn-north]
jurisdiction = "CN"
grid_gco2_per_kwh = 581
pue = 1.3

[regions.eu-west]
jurisdiction = "EU"
grid_gco2_per_kwh = 380
pue = 1.25

[[nodes]]
name = "h100-01"
topology = "cn-north/z1/pod-a/leaf-01"
cpu_milli = 224000
memory_mib = 2097152
gpus = { model = "H100-SXM-80GB", count = 8, mode = "whole" }

[[nodes]]
name = "a100-mig-01"
topology = "eu-west/z1/pod-a/leaf-01"
cpu_milli = 64000
memory_mib = 262144
gpus = { model = "A100-80GB", count = 1, mode = "mig", mig_layout = [] }
"""


class ReplayClock:
    """A clock the example moves forward by hand (the server's loops read it from their threads)."""

    def __init__(self, start: datetime) -> None:
        self._now, self._lock = start, threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._now += delta


def _ok(response: Any, status: int = 200) -> dict:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url}: {response.text}")
    return response.json()


def _advance(client: TestClient, clock: ReplayClock, delta: timedelta) -> None:
    """Move the replayed time on, then wait until a scheduler run that began before the move has ended and a
    whole run after it has: a run reads the time once, and one that read it before a 5-minute move but saw a
    rental created after it would date that rental's preemption notice 5 minutes in the past."""
    loop = client.app.state.services.loop
    runs = loop.runs
    clock.advance(delta)
    deadline = time.monotonic() + 20
    while loop.runs < runs + 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the scheduler did not run after the clock moved")
        loop.signal()
        time.sleep(0.01)


def _wait(client: TestClient, headers: dict[str, str], rental_id: str, state: str) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        body = _ok(client.get(f"/v1/rentals/{rental_id}", headers=headers))
        if body["state"] == state:
            return body
        client.app.state.services.loop.signal()
        time.sleep(0.05)
    raise RuntimeError(f"rental {rental_id} did not reach {state}: {body['state']}")


def _tenant(client: TestClient, name: str) -> tuple[str, dict[str, str]]:
    tenant_id = _ok(client.post("/v1/tenants", json={"name": name}, headers=ADMIN), 201)["id"]
    key = _ok(client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "example"}, headers=ADMIN), 201)
    return tenant_id, {"Authorization": f"Bearer {key['secret']}"}


def run(database_url: str) -> tuple[InvoiceResponse, BalanceResponse, dict]:
    """Replay the story; returns acme's November invoice, its balance and the ledger check."""
    clock = ReplayClock(START)
    settings = Settings(
        database_url=database_url,
        bootstrap_admin_key=ADMIN_KEY,
        scheduler_interval_s=0.05,
        meter_interval_s=3600,
        prepaid=True,
        preemption_notice_by_tier_s={"spot": 30},
    )
    with TestClient(create_app(settings, clock)) as client:
        services = client.app.state.services
        services.meter.after = ()  # the example runs each money step itself, at the replayed time
        _ok(client.put("/v1/fleet", content=FLEET, headers={**ADMIN, "Content-Type": "application/toml"}))
        acme, headers = _tenant(client, "acme")
        beta, beta_headers = _tenant(client, "beta")
        for tenant_id in (acme, beta):
            _ok(
                client.post(
                    f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 1000 * UNIT}, headers=ADMIN
                ),
                201,
            )
        _ok(
            client.post(
                f"/v1/tenants/{acme}/credit",
                json={
                    "amount_micros": 5 * UNIT,
                    "grant": True,
                    "memo": "hackathon credits",
                    "expires_at": (START + timedelta(days=28)).isoformat(),
                },
                headers=ADMIN,
            ),
            201,
        )
        _ok(
            client.post(
                f"/v1/tenants/{acme}/plans",
                json={"kind": "membership", "discount_bp": 1000, "fee_micros": 120 * UNIT},
                headers=ADMIN,
            ),
            201,
        )
        training = _ok(
            client.post("/v1/rentals", json={"gpu_model": "H100-SXM-80GB", "gpus": 2}, headers=headers), 201
        )
        _wait(client, headers, training["id"], "placed")
        _advance(client, clock, timedelta(minutes=5))
        slice_request = {
            "gpu_model": "A100-80GB",
            "mig_profile": "3g.40gb",
            "tier": "spot",
            "bid_micros_per_gpu_hour": 1_500_000,
        }
        spot = _ok(client.post("/v1/rentals", json=slice_request, headers=headers), 201)
        _wait(client, headers, spot["id"], "placed")
        _advance(client, clock, timedelta(minutes=85))
        _ok(client.post(f"/v1/rentals/{training['id']}/stop", headers=headers))
        _advance(client, clock, timedelta(minutes=5))
        whole = {"gpu_model": "A100-80GB", "mig_profile": "7g.80gb"}
        preemptor = _ok(client.post("/v1/rentals", json=whole, headers=beta_headers), 201)
        _wait(client, headers, spot["id"], "preempting")
        _advance(client, clock, timedelta(seconds=30))
        _wait(client, headers, spot["id"], "preempted")
        _wait(client, beta_headers, preemptor["id"], "placed")
        _advance(client, clock, timedelta(minutes=5))
        services.billing.meter()
        invoice = InvoiceResponse.model_validate(_ok(client.get("/v1/invoices/2026-11", headers=headers)))
        balance = BalanceResponse.model_validate(_ok(client.get("/v1/balance", headers=headers)))
        verified = _ok(client.get("/v1/ledger/verify", headers=ADMIN))
    return invoice, balance, verified


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        invoice, balance, verified = run(f"sqlite:///{Path(folder) / 'example.db'}")
    console = Console(width=140)
    console.print(_invoice_table(invoice))
    console.print(_balance_table(balance))
    # not the count of transactions: how many charges the meter posts depends on when its passes ran
    console.print(f"ledger verifies (every transaction sums to zero, the hash chain holds): {verified['ok']}")


if __name__ == "__main__":
    main()
