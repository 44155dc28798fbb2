"""The 60-s minimum of a failed rental, through the real app (SQLite and PostgreSQL): a workload that started
and failed pays it; one its host failed before it started (the agent could not isolate its devices) does not,
as the platform's failure is not the tenant's doing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from conftest import FixedClock, charged, register_agent, wait_for
from suanli.domain.billing.money import charge_micros

L40S = {"gpu_model": "L40S", "gpus": 1, "command": ["python", "train.py"]}


def _placed_with_agent(client: TestClient, owner: dict[str, str]) -> tuple[str, datetime, dict[str, str]]:
    """A placed L40S rental: its id, when it was placed, and the headers of its node's hand-driven agent."""
    rental_id = client.post("/v1/rentals", json=L40S, headers=owner).json()["id"]
    placed = wait_for(client, rental_id, owner, "placed")
    placed_at = datetime.fromisoformat([e for e in placed["events"] if e["kind"] == "placed"][-1]["at"])
    return rental_id, placed_at, register_agent(client, placed["allocation"][0]["node"])


def _charged_after_meter(client: TestClient, rental_id: str, owner: dict[str, str]) -> tuple[int, int]:
    """What the meter charged the ended rental, and its rate."""
    client.app.state.services.billing.meter(now=datetime.now(UTC) + timedelta(minutes=5))  # type: ignore[attr-defined]
    rate = client.get(f"/v1/rentals/{rental_id}", headers=owner).json()["price_micros_per_hour"]
    return charged(client, rental_id, owner), rate


def _report(client: TestClient, node_headers: dict[str, str], at: datetime, workload: dict) -> None:
    """The agent's heartbeat at `at`, reporting `workload`."""
    client.app.state.services.agents.clock = FixedClock(at)  # type: ignore[attr-defined]
    answer = client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=node_headers)
    assert answer.status_code == 200, answer.text


def test_a_rental_its_host_failed_before_the_workload_started_pays_no_minimum(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("unlucky")
    rental_id, placed_at, node_headers = _placed_with_agent(client, owner)
    cannot_start = "no variable is known to limit which biren devices a workload sees"
    failed = {"rental_id": rental_id, "state": "failed", "message": cannot_start}  # no ran_s: it never ran
    _report(client, node_headers, placed_at + timedelta(seconds=2), failed)
    assert wait_for(client, rental_id, owner, "failed")["state"] == "failed"
    paid, rate = _charged_after_meter(client, rental_id, owner)
    assert paid == charge_micros(rate, 2)  # the seconds it held, no minimum


def test_a_workload_that_started_and_failed_after_5_s_pays_the_minimum(client: TestClient, tenant) -> None:
    _, owner = tenant("buggy")
    rental_id, placed_at, node_headers = _placed_with_agent(client, owner)
    started_at = placed_at + timedelta(seconds=1)
    _report(client, node_headers, started_at, {"rental_id": rental_id, "state": "running"})
    crashed = {"rental_id": rental_id, "state": "failed", "exit_code": 1, "ran_s": 5}
    _report(client, node_headers, started_at + timedelta(seconds=5), crashed)
    assert wait_for(client, rental_id, owner, "failed")["state"] == "failed"
    paid, rate = _charged_after_meter(client, rental_id, owner)
    assert paid == charge_micros(rate, 60)
