"""Providers are paid for their own nodes' share through the real app (SQLite and PostgreSQL): a gang placed
across two providers' nodes, and a rental grown onto another provider's node, pay each provider its part,
and `GET /v1/payouts` shows each provider its own line for the rental."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

from conftest import ADMIN, WAIT_S, app_client, wait_for
from suanli.domain.billing.money import charge_micros, round_half_up, to_epoch_s

FLEET = (Path(__file__).resolve().parents[1] / "fleets" / "two_providers.toml").read_text()  # alpha, beta
PROVIDER_OF = {"h100-alpha-01": "alpha", "h100-beta-01": "beta"}
H100 = {"gpu_model": "H100-SXM-80GB", "gpus": 8}


def _two_provider_fleet(client) -> dict[str, str]:
    """The fleet of one alpha and one beta H100 node; a credited tenant's auth headers."""
    put = client.put("/v1/fleet", content=FLEET, headers={**ADMIN, "Content-Type": "application/toml"})
    assert put.status_code == 200, put.text
    tenant_id = client.post("/v1/tenants", json={"name": "renter"}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    credit = client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    assert credit.status_code == 201, credit.text
    return {"Authorization": f"Bearer {secret}"}


def _provider_key(client, name: str) -> dict[str, str]:
    tenant_id = client.post("/v1/tenants", json={"name": name, "role": "provider"}, headers=ADMIN).json()[
        "id"
    ]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    return {"Authorization": f"Bearer {secret}"}


def _lines(client, rental_id: str) -> dict[str, int]:
    """Each provider's payout line for the rental, from the admin's `GET /v1/payouts`."""
    payouts = client.get("/v1/payouts", headers=ADMIN).json()
    return {
        p["provider"]: line["amount_micros"]
        for p in payouts
        for line in p["lines"]
        if line["ref"] == rental_id
    }


def test_a_gang_across_two_providers_pays_each_its_half_and_each_sees_its_own_line(database_url) -> None:
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers = _two_provider_fleet(client)
        rental_id = client.post("/v1/rentals", json={**H100, "nodes": 2}, headers=headers).json()["id"]
        placed = wait_for(client, rental_id, headers, "placed")
        assert sorted(a["node"] for a in placed["allocation"]) == sorted(PROVIDER_OF)
        stopped = client.post(f"/v1/rentals/{rental_id}/stop", headers=headers).json()
        client.app.state.services.billing.meter(
            now=datetime.fromisoformat(stopped["created_at"]) + timedelta(hours=1)
        )
        ledger = client.get("/v1/ledger", headers=ADMIN).json()
        (charge,) = [t for t in ledger if t["kind"] == "charge" and t["ref"] == rental_id]
        charged = -sum(p["amount_micros"] for p in charge["postings"] if p["amount_micros"] < 0)
        assert charged >= charge_micros(placed["price_micros_per_hour"], 60)
        share = charged * 8500 // 10_000
        # half each, the odd micro to the first by name (it all went to the provider of its first node)
        assert _lines(client, rental_id) == {"alpha": (share + 1) // 2, "beta": share // 2}
        beta = client.get("/v1/payouts", headers=_provider_key(client, "beta")).json()
        assert beta == [
            {
                "provider": "beta",
                "payable_micros": share // 2,
                "lines": [{"ref": rental_id, "amount_micros": share // 2, "transactions": 1}],
            }
        ]
        assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"]
        # the operator's own nodes are `platform`'s: no provider tenant takes that name (it would see them)
        posing = client.post("/v1/tenants", json={"name": "Platform", "role": "provider"}, headers=ADMIN)
        assert posing.status_code == 400 and posing.json()["error"]["field"] == "name", posing.text


def test_a_rental_grown_onto_another_providers_node_pays_it_from_the_growth_on(database_url) -> None:
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers = _two_provider_fleet(client)
        rental_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
        placed = wait_for(client, rental_id, headers, "placed")
        (first,) = [PROVIDER_OF[a["node"]] for a in placed["allocation"]]
        time.sleep(1.1)  # grown a second or more after its placement: its first minute is the first node's
        grown = client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 2}, headers=headers)
        assert grown.status_code == 200, grown.text
        deadline = time.monotonic() + WAIT_S
        body = grown.json()
        while len(body["allocation"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
            body = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        assert len(body["allocation"]) == 2, body
        (placed_at, rate), (grown_at, grown_rate) = [
            (to_epoch_s(datetime.fromisoformat(c["from_at"])), c["rate_micros_per_hour"])
            for c in body["rate_changes"]
        ]
        later = datetime.fromisoformat(body["rate_changes"][1]["from_at"]) + timedelta(hours=1)
        client.app.state.services.billing.meter(now=later)

        def share(micros_seconds: int) -> int:
            return round_half_up(micros_seconds, 3600) * 8500 // 10_000

        before = share(rate * (grown_at - placed_at))  # on the first node only (running: no minimum yet)
        after = share(rate * (grown_at - placed_at) + grown_rate * (to_epoch_s(later) - grown_at)) - before
        second = "beta" if first == "alpha" else "alpha"
        halves = {"alpha": (after + 1) // 2, "beta": after // 2}  # the odd micro to the first by name
        assert _lines(client, rental_id) == {first: before + halves[first], second: halves[second]}
