"""Rentals that checkpoint, through the real app (SQLite and PostgreSQL): preempted, one goes back to the
queue and is placed again rather than ending; under the backfill queue it borrows the GPUs a blocked head
drains, and the head takes them back with notice once it could start."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from test_preemption_api import BID, _events, _rent

from conftest import app_client, make_tenant, register_agent, wait_for
from suanli.domain.preemption import RESUME_S

NOTICE_S = 3.0


@pytest.fixture(params=["greedy", "backfill"])
def client(database_url: str, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    with app_client(database_url, preemption_notice_s=NOTICE_S, queue=request.param) as client:
        yield client


@pytest.fixture
def backfill_client(database_url: str) -> Iterator[TestClient]:
    with app_client(database_url, preemption_notice_s=NOTICE_S, queue="backfill") as client:
        yield client


def _saver(client: TestClient, headers: dict[str, str], **spec) -> str:
    """A spot rental that checkpoints, on a whole H200 node: the first an on-demand one preempts."""
    return _rent(
        client,
        headers,
        gpu_model="H200",
        gpus=8,
        tier="spot",
        bid_micros_per_gpu_hour=BID,
        checkpoints=True,
        **spec,
    )


def _at(body: dict, kind: str, nth: int = 0) -> datetime:
    return datetime.fromisoformat(_events(body, kind)[nth]["at"])


def test_a_preempted_rental_that_checkpoints_goes_back_to_the_queue_and_runs_again(client, tenant) -> None:
    """Placed again, it declares what is left of its max duration, and a resumption's allowance: its work
    until its deadline is saved (as the simulator resumes a checkpointed job)."""
    _, spot_tenant = tenant("saver")
    _, od_tenant = tenant("steady")
    spot = _saver(client, spot_tenant, max_duration_s=7200)
    first = wait_for(client, spot, spot_tenant, "placed")
    assert first["request"]["checkpoints"] is True and first["borrowed"] is False
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand", max_duration_s=3600)
    noticed = wait_for(client, spot, spot_tenant, "preempting")
    assert noticed["state"] == "preempting"
    saved_at = datetime.fromisoformat(noticed["notice_deadline"])  # its run ends there at the latest

    assert wait_for(client, od, od_tenant, "placed")["state"] == "placed"
    requeued = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert requeued["state"] == "pending" and requeued["allocation"] == []
    (event,) = _events(requeued, "requeued")
    assert event["reason"] == "preempted" and "resumes from its checkpoint" in event["message"]
    assert _events(requeued, "preempted") == []
    ran = min(saved_at, _at(requeued, "requeued")) - _at(requeued, "placed")
    assert requeued["time_left_s"] == pytest.approx(7200 - ran.total_seconds() + RESUME_S)

    assert client.post(f"/v1/rentals/{od}/stop", headers=od_tenant).status_code == 200
    again = wait_for(client, spot, spot_tenant, "placed")
    assert again["state"] == "placed" and again["allocation"][0]["node"] == "h200-01"
    assert len(_events(again, "placed")) == 2
    left = _at(again, "placed") + timedelta(seconds=7200) - min(saved_at, _at(again, "requeued"))
    limit = _at(again, "placed", 1) + left + timedelta(seconds=RESUME_S)
    assert datetime.fromisoformat(again["time_limit_at"]) == limit


def test_a_rental_that_does_not_checkpoint_still_ends_when_preempted(client, tenant) -> None:
    _, spot_tenant = tenant("plain")
    _, od_tenant = tenant("steady")
    spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
    wait_for(client, spot, spot_tenant, "placed")
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    wait_for(client, od, od_tenant, "placed")
    assert wait_for(client, spot, spot_tenant, "preempted")["state"] == "preempted"


def test_a_rental_that_checkpoints_borrows_a_drain_and_the_head_takes_it_back(
    backfill_client,
) -> None:
    """The eight H100 nodes: `busy` holds one for an hour, so a gang of all eight is the blocked head and
    the other seven drain for it. A rental that checkpoints and would run past the head's start borrows one
    of them; one that does not stays blocked. When `busy` stops, the head takes the borrowed node back with
    notice and starts; the borrower goes back to the queue."""
    client = backfill_client
    _, headers = make_tenant(client, "trainer")
    busy = _rent(client, headers, gpu_model="H100", gpus=8, max_duration_s=3600)
    wait_for(client, busy, headers, "placed")
    head = _rent(client, headers, gpu_model="H100", gpus=8, nodes=8, max_duration_s=3600)
    assert wait_for(client, head, headers, "placed", reason="no_capacity")["expected_start_at"] is not None
    plain = _rent(client, headers, gpu_model="H100", gpus=8, max_duration_s=7200)
    saver = _rent(client, headers, gpu_model="H100", gpus=8, max_duration_s=7200, checkpoints=True)

    lent = wait_for(client, saver, headers, "placed")
    assert lent["state"] == "placed" and lent["borrowed"] is True
    assert "borrowed" in _events(lent, "placed")[0]["message"]
    blocked = wait_for(client, plain, headers, "placed", reason="blocked_by_head")
    assert blocked["pending_reason"] == "blocked_by_head"
    assert client.get(f"/v1/rentals/{head}", headers=headers).json()["state"] == "pending"

    assert client.post(f"/v1/rentals/{busy}/stop", headers=headers).status_code == 200
    assert wait_for(client, saver, headers, "preempting")["state"] == "preempting"
    started = wait_for(client, head, headers, "placed")
    assert started["state"] == "placed" and len(started["allocation"]) == 8
    back = client.get(f"/v1/rentals/{saver}", headers=headers).json()
    assert back["state"] == "pending" and back["borrowed"] is False
    (event,) = _events(back, "requeued")
    assert "its borrowed GPUs were taken back" in event["message"]


def test_placed_again_on_its_node_it_runs_anew_there_and_late_word_of_its_first_run_changes_nothing(
    client, tenant
) -> None:
    """A rental that checkpoints, preempted on h200-01 and placed there again: its agent is told the new
    placement, the end of the first run it reports late leaves the rental placed, and the rental has a run
    per placement (the first ended, the second running)."""
    _, spot_tenant = tenant("saver")
    _, od_tenant = tenant("steady")
    spot = _saver(client, spot_tenant)
    node = wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"]
    agent = register_agent(client, node)

    def beat(state: str, placement: int) -> list[int]:
        report = {"rental_id": spot, "state": state, "placement": placement}
        answer = client.post("/v1/agents/heartbeat", json={"workloads": [report]}, headers=agent)
        assert answer.status_code == 200, answer.text
        return [a["placement"] for a in answer.json()["assignments"] if a["rental_id"] == spot]

    assert beat("running", 1) == [1]
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand", max_duration_s=3600)
    wait_for(client, spot, spot_tenant, "preempting")
    beat("stopped", 1)  # saved its checkpoint and left under notice
    wait_for(client, od, od_tenant, "placed")
    assert client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["state"] == "pending"
    assert client.post(f"/v1/rentals/{od}/stop", headers=od_tenant).status_code == 200
    assert wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"] == node

    assert beat("stopped", 1) == [2]  # the agent's word on its first run, before it saw the new placement
    assert client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["state"] == "placed"
    assert beat("running", 2) == [2]
    assert client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["state"] == "running"
    runs = client.get(f"/v1/rentals/{spot}/runs", headers=spot_tenant).json()
    assert [(r["node"], r["placement"], r["state"], r["ended_at"] is None) for r in runs] == [
        (node, 1, "stopped", False),
        (node, 2, "running", True),
    ]
