"""MIG rentals through the real app (SQLite and PostgreSQL) on a fleet of one carved A100: the last idle
instance is rented even though less than one whole GPU is free in the fleet, under both server queues."""

from __future__ import annotations

import pytest

from conftest import ADMIN, app_client, wait_for

ONE_A100 = """
[regions.eu-west]
jurisdiction = "EU"
grid_gco2_per_kwh = 380
pue = 1.25

[[nodes]]
name = "mig-only"
topology = "eu-west/z1/pod-a/leaf-01"
cpu_milli = 64000
memory_mib = 262144
gpus = { model = "A100-80GB", count = 1, mode = "mig", mig_layout = ["4g.40gb", "2g.20gb", "1g.10gb"] }
"""


@pytest.mark.parametrize("queue", ["greedy", "backfill"])
def test_the_last_instance_of_a_nearly_full_mig_gpu_is_rented(database_url: str, queue: str) -> None:
    """With the 4g.40gb and the 2g.20gb rented, a seventh of the fleet's one GPU is free: the 1g.10gb asked
    next is placed on the idle instance (it used to count as a whole GPU: under greedy the cycle failed)."""
    with app_client(database_url, queue=queue) as client:
        loaded = client.put(
            "/v1/fleet", content=ONE_A100, headers={**ADMIN, "Content-Type": "application/toml"}
        )
        assert loaded.status_code == 200, loaded.text
        tenant_id = client.post("/v1/tenants", json={"name": "carver"}, headers=ADMIN).json()["id"]
        key = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
        credit = {"amount_micros": 10**12}
        assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
        headers = {"Authorization": f"Bearer {key['secret']}"}
        placed = {}
        for profile in ("4g.40gb", "2g.20gb", "1g.10gb"):
            body = {"gpu_model": "A100-80GB", "mig_profile": profile}
            created = client.post("/v1/rentals", json=body, headers=headers)
            assert created.status_code == 201, created.text
            rental = wait_for(client, created.json()["id"], headers, "placed")
            assert rental["state"] == "placed", rental
            (allocation,) = rental["allocation"]
            placed[profile] = allocation
        assert {a["node"] for a in placed.values()} == {"mig-only"}
