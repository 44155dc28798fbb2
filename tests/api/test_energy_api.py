"""Measured energy through the real app: an agent heartbeats GPU power for a running rental (a whole GPU and
a share of one), the runs accumulate joules per beat (a slice's share of its GPU; a beat without a reading
for the rental's GPU, or after a gap over 3 heartbeat intervals, measures nothing), and the invoice uses the
measured average power while it covers at least half the billable time, else TDP x 0.7."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from conftest import FixedClock, app_client, register_agent, wait_for

INTERVAL_S = 600.0
L40S_TDP_W = 350
PUE = 1.35  # ap-southeast, where examples/fleet.toml puts the L40S nodes
GRID = 412.0


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with app_client(
        database_url,
        meter_interval_s=3600,
        agent_heartbeat_interval_s=INTERVAL_S,
        agent_missed_heartbeats=10,
    ) as test_client:
        yield test_client


def _line(client: TestClient, headers: dict[str, str], month: str, rental_id: str) -> dict:
    body = client.get(f"/v1/invoices/{month}", headers=headers).json()
    (line,) = [x for x in body["lines"] if x["ref"] == rental_id]
    return line


@pytest.mark.parametrize(("shape", "fraction"), [({"gpus": 1}, 1.0), ({"gpus": 0, "share_milli": 500}, 0.5)])
def test_heartbeat_power_makes_the_invoice_energy_measured(
    client: TestClient, tenant, shape: dict, fraction: float
) -> None:
    _, owner = tenant("watts")
    body = {"gpu_model": "L40S", **shape, "command": ["sleep", "9"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    placed = wait_for(client, rental["id"], owner, "placed")
    (allocation,) = placed["allocation"]
    (held,) = allocation["slices"]
    headers = register_agent(client, allocation["node"])
    services = client.app.state.services  # type: ignore[attr-defined]
    agents, invoices = services.agents, services.invoices
    # mid-month, in the past: the reaper (real start time) never marks the node down meanwhile
    earlier = datetime.now(UTC) - timedelta(days=40)
    t0 = datetime(earlier.year, earlier.month, 10, tzinfo=UTC)
    month = t0.strftime("%Y-%m")

    def beat(at_s: float, watts: float | None, workloads: list | None = None) -> None:
        agents.clock = FixedClock(t0 + timedelta(seconds=at_s))
        telemetry = [
            {"index": i, "utilization_pct": 90, "power_w": watts if i == held["gpu_index"] else 999.0}
            for i in range(4)
        ]
        report = {"workloads": workloads or [], "telemetry": telemetry}
        answer = client.post("/v1/agents/heartbeat", json=report, headers=headers)
        assert answer.status_code == 200, answer.text

    beat(0, 100.0, [{"rental_id": rental["id"], "state": "running"}])  # starts it: nothing measured
    invoices.clock = FixedClock(t0 + timedelta(seconds=600))
    assert _line(client, owner, month, rental["id"])["energy_source"] == "tdp_estimate"  # no readings yet
    beat(600, 100.0)  # 600 s at 100 W
    beat(1200, None)  # no reading for the rental's GPU: not measured
    beat(1500, 160.0)  # 300 s at 160 W
    energy_j = (100.0 * 600 + 160.0 * 300) * fraction
    assert invoices.energy.measured([rental["id"]]) == {rental["id"]: (energy_j, 900.0, 900.0 * fraction)}

    seconds = 1737  # 900 measured of 1737 billable: over half
    invoices.clock = FixedClock(t0 + timedelta(seconds=seconds))
    line = _line(client, owner, month, rental["id"])
    per_gpu = energy_j / 900.0 / fraction  # 120 W per GPU
    kwh = per_gpu * fraction * (seconds / 3600) * PUE / 1000
    assert line["energy_source"] == "measured"
    assert line["energy_kwh"] == round(kwh, 3) == round(120.0 * fraction * seconds / 3600 * PUE / 1000, 3)
    assert line["co2_kg"] == round(kwh * GRID / 1000, 3)
    as_csv = client.get(f"/v1/invoices/{month}?format=csv", headers=owner).text
    assert f"{round(kwh, 3)},{round(kwh * GRID / 1000, 3)},measured" in as_csv

    beat(1500 + 3 * INTERVAL_S + 1, 160.0)  # after a gap over 3 intervals: not measured
    assert invoices.energy.measured([rental["id"]]) == {rental["id"]: (energy_j, 900.0, 900.0 * fraction)}
    seconds = int(1500 + 3 * INTERVAL_S + 1)  # 900 of 3301 s: under half, back to the TDP estimate
    invoices.clock = FixedClock(t0 + timedelta(seconds=seconds))
    line = _line(client, owner, month, rental["id"])
    estimate = L40S_TDP_W * 0.7 * fraction * (seconds / 3600) * PUE / 1000
    assert line["energy_source"] == "tdp_estimate" and line["energy_kwh"] == round(estimate, 3)
