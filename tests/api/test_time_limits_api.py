"""A rental's declared max duration is its time limit: the leader stops it there, through the real app."""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi.testclient import TestClient

from conftest import register_agent, wait_for


def test_a_rental_is_stopped_at_its_max_duration_running_or_not_yet_started(
    client: TestClient, tenant
) -> None:
    """A running one is asked to stop (its agent is told, then it ends `stopped`); one placed whose agent
    never started it is stopped and released at once; both say why on the event. One without a max
    duration has no time limit and runs on."""
    _, owner = tenant("owner")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["sleep", "600"], "max_duration_s": 2}
    running = client.post("/v1/rentals", json=body, headers=owner).json()
    unlimited = client.post("/v1/rentals", json={**body, "max_duration_s": None}, headers=owner).json()
    placed = wait_for(client, running["id"], owner, "placed")
    placed_at = datetime.fromisoformat(next(e["at"] for e in placed["events"] if e["kind"] == "placed"))
    assert datetime.fromisoformat(placed["time_limit_at"]) == placed_at + timedelta(seconds=2)
    assert wait_for(client, unlimited["id"], owner, "placed")["time_limit_at"] is None
    agent = register_agent(client, placed["allocation"][0]["node"])
    report = {"workloads": [{"rental_id": running["id"], "state": "running"}]}
    assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200

    stopping = wait_for(client, running["id"], owner, "stopping")
    assert stopping["state"] == "stopping", stopping
    event = stopping["events"][-1]
    assert (event["kind"], event["reason"]) == ("stopping", "time_limit")
    assert event["message"] == "stop requested at its max duration (2 s since placement)"
    assert datetime.fromisoformat(event["at"]) >= placed_at + timedelta(seconds=2)
    beat = client.post("/v1/agents/heartbeat", json={}, headers=agent).json()
    assert {a["rental_id"]: a["action"] for a in beat["assignments"]}[running["id"]] == "stop"
    ended = {"workloads": [{"rental_id": running["id"], "state": "stopped", "exit_code": 143}]}
    client.post("/v1/agents/heartbeat", json=ended, headers=agent)
    done = client.get(f"/v1/rentals/{running['id']}", headers=owner).json()
    assert done["state"] == "stopped" and done["time_limit_at"] is None

    never_started = client.post("/v1/rentals", json=body, headers=owner).json()
    stopped = wait_for(client, never_started["id"], owner, "stopped")
    assert stopped["state"] == "stopped" and stopped["allocation"] == []
    assert (stopped["events"][-1]["reason"], stopped["events"][-1]["message"]) == (
        "time_limit",
        "stopped at its max duration (2 s since placement)",
    )
    assert client.get(f"/v1/rentals/{unlimited['id']}", headers=owner).json()["state"] == "placed"
