"""Preemption with notice through the real app (SQLite and PostgreSQL): a higher tier that cannot fit gives
the cheapest lower-tier victims notice, waits with reason `preempting`, and takes their capacity at the
deadline; no victim is noticed twice, a spot rental never preempts, a gang victim is evicted whole. Under
both server queues: greedy (the default) and backfill (the domain's `admit`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from conftest import ADMIN, FLEET, app_client, register_agent, scheduler_cycles, wait_for
from suanli.api.app import create_app
from suanli.config import Settings

NOTICE_S = 3.0  # long enough to see `preempting` on a loaded machine (1.5 s was missed once under load)
PATIENT_NOTICE_S = 10.0  # to stop the preemptor inside the notice: 3 s ran out once under CI's load
BID = 50_000_000  # micros per GPU-hour: above any spot floor (a bid below it waits, never runs)


@pytest.fixture(params=["greedy", "backfill"])
def client(database_url: str, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """The app under each server queue (`SUANLI_QUEUE`): preemption behaves the same in both."""
    with _app(database_url, request.param, NOTICE_S) as client:
        yield client


@pytest.fixture(params=["greedy", "backfill"])
def patient_client(database_url: str, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """As `client`, with spot notice long enough for a test to act inside it on a loaded machine."""
    with _app(database_url, request.param, PATIENT_NOTICE_S) as client:
        yield client


@contextmanager
def _app(database_url: str, queue: str, spot_notice_s: float) -> Iterator[TestClient]:
    settings = Settings(
        database_url=database_url,
        bootstrap_admin_key="sk_admin_bootstrap_for_tests",
        scheduler_interval_s=0.05,
        preemption_notice_s=60,
        preemption_notice_by_tier_s={"spot": spot_notice_s},
        queue=queue,
        api_rate="",  # the tests poll every 20 ms
    )
    with TestClient(create_app(settings)) as client:
        response = client.put(
            "/v1/fleet", content=FLEET, headers={**ADMIN, "Content-Type": "application/toml"}
        )
        assert response.status_code == 200, response.text
        yield client


def _keyed(client: TestClient, name: str) -> dict[str, str]:
    """A new tenant's auth headers (the `tenant` fixture makes them on `client`, not on another app)."""
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    return {"Authorization": f"Bearer {secret}"}


def _rent(client: TestClient, headers: dict[str, str], **body) -> str:
    response = client.post("/v1/rentals", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _events(body: dict, kind: str) -> list[dict]:
    return [e for e in body["events"] if e["kind"] == kind]


def test_on_demand_preempts_spot_with_notice_and_takes_the_node_at_the_deadline(client, tenant) -> None:
    _, spot_tenant = tenant("spotty")
    _, od_tenant = tenant("steady")
    spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
    assert wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"] == "h200-01"
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")

    waiting = wait_for(client, od, od_tenant, "placed", reason="preempting")
    assert waiting["state"] == "pending" and waiting["pending_reason"] == "preempting"
    victim = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    # the victim's tenant learns the tier, not the other tenant's rental id; an operator sees the id
    assert victim["state"] == "preempting" and victim["preempted_by"] == "another_tenant"
    assert client.get(f"/v1/rentals/{spot}", headers=ADMIN).json()["preempted_by"] == od
    (notice,) = _events(victim, "preempting")
    deadline = datetime.fromisoformat(victim["notice_deadline"])
    assert "preempted by a rental of another tenant (on_demand), notice until" in notice["message"]
    assert od not in str(victim)
    preemptor_view = client.get(f"/v1/rentals/{od}", headers=od_tenant).json()
    assert spot not in str(preemptor_view)
    assert any("preempting a rental of another tenant" in e["message"] for e in preemptor_view["events"])
    noticed_at = datetime.fromisoformat(notice["at"])
    assert abs((deadline - noticed_at).total_seconds() - NOTICE_S) < 0.01
    # a spot rental never preempts; a second on-demand finds no other victim and does not notice it again
    late_spot = _rent(
        client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID + 8
    )
    other_od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    assert wait_for(client, other_od, od_tenant, "placed", reason="no_capacity")["pending_reason"] == (
        "no_capacity"
    )

    placed = wait_for(client, od, od_tenant, "placed")
    assert placed["state"] == "placed" and placed["allocation"][0]["node"] == "h200-01"
    ended = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert ended["state"] == "preempted" and ended["allocation"] == []
    (preempted,) = _events(ended, "preempted")
    assert datetime.fromisoformat(preempted["at"]) >= deadline
    assert "capacity given to the higher-tier rental that preempted it" in preempted["message"]
    assert od not in str(ended)
    assert len(_events(ended, "preempting")) == 1
    # equal tier never preempts, lower tier never preempts: the placed on-demand rental stays; the spot
    # rental yields to the waiting on-demand one, under either queue (under backfill it was told that it
    # could not backfill without a duration, though one would not have started it)
    for rental_id, headers, reason in (
        (late_spot, spot_tenant, "no_capacity"),
        (other_od, od_tenant, "no_capacity"),
    ):
        body = wait_for(client, rental_id, headers, "placed", reason=reason)
        assert body["state"] == "pending" and body["pending_reason"] == reason
    assert client.get(f"/v1/rentals/{od}", headers=od_tenant).json()["state"] == "placed"
    assert len([e for e in placed["events"] if e["reason"] == "preempting"]) == 1


def test_a_gang_victim_is_evicted_whole(client, tenant) -> None:
    _, spot_tenant = tenant("spotty")
    _, od_tenant = tenant("steady")
    gang = _rent(client, spot_tenant, gpu_model="A100-40GB", gpus=4, nodes=2, tier="spot")
    gang_nodes = {a["node"] for a in wait_for(client, gang, spot_tenant, "placed")["allocation"]}
    assert gang_nodes == {"a100-40g-01", "a100-40g-02"}
    od = _rent(client, od_tenant, gpu_model="A100-40GB", gpus=4, tier="on_demand")
    assert wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    victim = client.get(f"/v1/rentals/{gang}", headers=spot_tenant).json()
    assert victim["state"] == "preempting" and {a["node"] for a in victim["allocation"]} == gang_nodes

    placed = wait_for(client, od, od_tenant, "placed")
    assert placed["state"] == "placed" and placed["allocation"][0]["node"] in gang_nodes
    ended = client.get(f"/v1/rentals/{gang}", headers=spot_tenant).json()
    assert ended["state"] == "preempted" and ended["allocation"] == []
    # the other node of the gang is free: a second on-demand rental starts at once, nobody is preempted
    second = _rent(client, od_tenant, gpu_model="A100-40GB", gpus=4, tier="on_demand")
    assert wait_for(client, second, od_tenant, "placed")["state"] == "placed"


def test_the_free_gpus_promised_to_a_preemptor_wait_for_it_through_the_notice(client, tenant) -> None:
    """Spot holds 6 of h200-01's 8 GPUs; an 8-GPU on-demand rental is promised the node: the 2 free GPUs as
    well as the victim's. A 1-GPU rental arriving during the notice waits rather than take one of them, so the
    preemptor starts at the deadline on the whole node and nobody else is preempted."""
    _, spot_tenant = tenant("spotty")
    _, od_tenant = tenant("steady")
    spot = _rent(client, spot_tenant, gpu_model="H200", gpus=6, tier="spot", bid_micros_per_gpu_hour=BID)
    assert wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"] == "h200-01"
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    assert wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    small = _rent(client, od_tenant, gpu_model="H200", gpus=1, tier="on_demand")
    assert wait_for(client, small, od_tenant, "placed", reason="no_capacity")["state"] == "pending"

    placed = wait_for(client, od, od_tenant, "placed")
    assert placed["state"] == "placed" and len(placed["allocation"][0]["slices"]) == 8, (
        placed,
        client.get(f"/v1/rentals/{small}", headers=od_tenant).json(),
    )
    assert client.get(f"/v1/rentals/{small}", headers=od_tenant).json()["state"] == "pending"
    assert client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["state"] == "preempted"


def test_a_tenant_sees_which_of_its_own_rentals_preempted_its_spot_rental(patient_client) -> None:
    """Read inside the notice: the patient notice, since 3 s ran out under CI's load before the read."""
    client = patient_client
    own = _keyed(client, "both")
    spot = _rent(client, own, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
    wait_for(client, spot, own, "placed")
    od = _rent(client, own, gpu_model="H200", gpus=8, tier="on_demand")
    wait_for(client, od, own, "placed", reason="preempting")
    victim = client.get(f"/v1/rentals/{spot}", headers=own).json()
    assert victim["state"] == "preempting" and victim["preempted_by"] == od
    (notice,) = _events(victim, "preempting")
    assert f"preempted by {od} (on_demand), notice until" in notice["message"]
    preemptor = client.get(f"/v1/rentals/{od}", headers=own).json()
    assert any(f"preempting {spot};" in e["message"] for e in preemptor["events"])
    wait_for(client, od, own, "placed")
    (preempted,) = _events(client.get(f"/v1/rentals/{spot}", headers=own).json(), "preempted")
    assert f"capacity given to {od}" in preempted["message"]


def test_a_notice_is_withdrawn_when_the_preemptor_is_stopped_before_the_deadline(patient_client) -> None:
    """Nobody needs the capacity any more: the victim goes back to the state it had, its deadline cleared,
    with an event that says why, and is still there once the old deadline has passed."""
    client = patient_client
    spot_tenant, od_tenant = _keyed(client, "spotty"), _keyed(client, "steady")
    spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
    assert wait_for(client, spot, spot_tenant, "placed")["state"] == "placed"
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    assert wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    victim = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert victim["state"] == "preempting"
    deadline = datetime.fromisoformat(victim["notice_deadline"])
    assert client.post(f"/v1/rentals/{od}/stop", headers=od_tenant).json()["state"] == "stopped"

    back = wait_for(client, spot, spot_tenant, "placed")
    assert back["state"] == "placed", back
    assert back["preempted_by"] is None and back["notice_deadline"] is None
    (withdrawn,) = [e for e in back["events"] if e["reason"] == "notice_withdrawn"]
    assert withdrawn["kind"] == "placed" and "stopped before the deadline" in withdrawn["message"]
    assert datetime.fromisoformat(withdrawn["at"]) < deadline
    while datetime.now(deadline.tzinfo) < deadline:
        time.sleep(0.1)
    scheduler_cycles(client)
    after = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert after["state"] == "placed" and after["allocation"][0]["node"] == "h200-01"
    # a later preemptor gives it a fresh notice, as to any running rental
    again = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    assert wait_for(client, again, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    assert client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["state"] == "preempting"


def test_a_preemptor_waiting_on_notice_shows_its_victims_deadline_as_its_expected_start(
    patient_client,
) -> None:
    """Its start is known: when its victims leave, by their deadline at the latest. It showed none (only a
    backfill head's or a booking's start was shown); the field clears once it is placed."""
    client = patient_client
    spot_tenant, od_tenant = _keyed(client, "spotted"), _keyed(client, "waiting")
    spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
    assert wait_for(client, spot, spot_tenant, "placed")["state"] == "placed"
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    assert wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    deadline = datetime.fromisoformat(
        client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["notice_deadline"]
    )
    scheduler_cycles(client, 1)
    waiting = client.get(f"/v1/rentals/{od}", headers=od_tenant).json()
    assert waiting["state"] == "pending" and waiting["expected_start_at"] is not None, waiting
    assert abs(datetime.fromisoformat(waiting["expected_start_at"]) - deadline) < timedelta(seconds=1), (
        waiting
    )
    placed = wait_for(client, od, od_tenant, "placed")
    assert placed["state"] == "placed" and placed["expected_start_at"] is None, placed


@pytest.mark.parametrize(
    ("notices", "message"),
    [
        ({"spot": -60}, "the notice for spot must be above 0 seconds"),
        ({"spot": 0}, "the notice for spot must be above 0 seconds"),
        ({"sopt": 30}, "unknown tier 'sopt'"),
    ],
)
def test_a_per_tier_notice_names_a_known_tier_and_some_seconds(notices, message):
    """A negative notice gave victims a deadline already past (killed without notice); a misspelt tier was
    accepted and then failed the server's start with a raw error."""
    with pytest.raises(ValidationError, match=message):
        Settings(database_url="sqlite://", preemption_notice_by_tier_s=notices)
    assert Settings(database_url="sqlite://", preemption_notice_by_tier_s={"On-Demand": 120})


@pytest.mark.parametrize("checkpoints", [False, True])
def test_a_victim_stopped_under_notice_ends_now_and_its_preemptor_takes_its_gpus(database_url, checkpoints):
    """Its tenant's stop ends it at once (`stopped`, never back in the queue even if it checkpoints), and the
    preemptor starts then, not at the deadline. The stop was answered 200 and ignored: the victim ran, and
    was billed, to its deadline, and the preemptor waited for it."""
    with _app(database_url, "greedy", spot_notice_s=600) as client:
        spot_tenant, od_tenant = _keyed(client, "spotty"), _keyed(client, "steady")
        body = {"gpu_model": "H200", "gpus": 8, "tier": "spot", "bid_micros_per_gpu_hour": BID}
        spot = _rent(client, spot_tenant, **body, checkpoints=checkpoints)
        assert wait_for(client, spot, spot_tenant, "placed")["state"] == "placed"
        od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
        assert (
            wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
        )
        victim = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
        deadline = datetime.fromisoformat(victim["notice_deadline"])
        assert victim["state"] == "preempting"

        stopped = client.post(f"/v1/rentals/{spot}/stop", headers=spot_tenant)
        assert stopped.status_code == 200, stopped.text
        placed = wait_for(client, od, od_tenant, "placed")
        assert placed["state"] == "placed" and placed["allocation"][0]["node"] == "h200-01"
        assert datetime.fromisoformat(_events(placed, "placed")[-1]["at"]) < deadline
        ended = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
        assert ended["state"] == "stopped" and ended["allocation"] == [], ended
        assert [e["reason"] for e in ended["events"] if e["kind"] == "stopping"] == ["stopped_under_notice"]
        assert not _events(ended, "requeued")
        assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


def test_the_preemptor_starts_at_its_victims_deadline_not_at_the_next_timer(database_url: str) -> None:
    """The leader's loop wakes at the next notice deadline: with a 60-s interval and nothing else to wake
    it, the preemptor was placed up to an interval after its victim's deadline, its GPUs idle meanwhile."""
    with app_client(database_url, preemption_notice_by_tier_s={"spot": 2.0}) as client:
        client.app.state.services.loop.interval_s = 60.0
        spot_tenant, od_tenant = _keyed(client, "spotty"), _keyed(client, "steady")
        spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
        assert wait_for(client, spot, spot_tenant, "placed")["state"] == "placed"
        od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
        assert (
            wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
        )
        deadline = datetime.fromisoformat(
            client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()["notice_deadline"]
        )
        placed = wait_for(client, od, od_tenant, "placed")
        assert placed["state"] == "placed"
        late_s = (datetime.fromisoformat(_events(placed, "placed")[-1]["at"]) - deadline).total_seconds()
        assert 0 <= late_s < 10, late_s  # a loaded machine may be slow, but not an interval slow


def test_a_victim_that_ends_its_workload_under_notice_is_said_to_have_left(database_url: str):
    """Its final event said "left" whenever the cycle ran after its deadline, which it always does; it says
    so now only when its agent reported the workload ended before the deadline."""
    with app_client(database_url, preemption_notice_by_tier_s={"spot": 600.0}) as client:
        spot_tenant, od_tenant = _keyed(client, "spotty"), _keyed(client, "steady")
        spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
        node = wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"]
        agent = register_agent(client, node)
        beat = {"workloads": [{"rental_id": spot, "state": "running"}]}
        assert client.post("/v1/agents/heartbeat", json=beat, headers=agent).status_code == 200
        od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
        assert wait_for(client, od, od_tenant, "placed", reason="preempting")["state"] == "pending"
        beat = {"workloads": [{"rental_id": spot, "state": "running"}]}
        (told,) = client.post("/v1/agents/heartbeat", json=beat, headers=agent).json()["assignments"]
        assert told["notice_deadline"] is not None and told["notice_cause"] == "higher_tier"  # the file's
        beat = {"workloads": [{"rental_id": spot, "state": "failed", "exit_code": 143}]}  # it saved, exited
        assert client.post("/v1/agents/heartbeat", json=beat, headers=agent).status_code == 200
        assert wait_for(client, od, od_tenant, "placed")["state"] == "placed"
        ended = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
        (last,) = _events(ended, "preempted")
        assert ended["state"] == "preempted" and last["message"].startswith("left;"), last
    # killed at its deadline (no agent here to say otherwise), on H100s: the H200 node's agent fell silent
    with app_client(database_url, preemption_notice_by_tier_s={"spot": 1.0}) as client:
        spot_tenant, od_tenant = _keyed(client, "spotty-2"), _keyed(client, "steady-2")
        spot = _rent(
            client,
            spot_tenant,
            gpu_model="H100-SXM-80GB",
            nodes=8,
            gpus=8,
            tier="spot",
            bid_micros_per_gpu_hour=BID,
        )
        assert wait_for(client, spot, spot_tenant, "placed")["state"] == "placed"
        od = _rent(client, od_tenant, gpu_model="H100-SXM-80GB", nodes=8, gpus=8, tier="on_demand")
        assert wait_for(client, od, od_tenant, "placed")["state"] == "placed"
        ended = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
        (last,) = _events(ended, "preempted")
        assert last["message"].startswith("notice deadline reached;"), last


def test_a_preemptor_starts_on_capacity_freed_before_the_deadline_and_its_victim_runs_on(
    patient_client,
) -> None:
    """Both A100 nodes busy, spot on one: an on-demand rental preempts the spot one. Before the deadline the
    other node frees (its rental stopped): the preemptor starts there, and the spot rental's notice is
    withdrawn (it waited out the notice, then started on the freed node, the spot rental killed for
    nothing)."""
    client = patient_client
    spot_tenant, od_tenant = _keyed(client, "spot-kept"), _keyed(client, "od-elsewhere")
    a100 = {"gpu_model": "A100-40GB", "gpus": 4, "regions": ["ap-southeast"]}
    first = _rent(client, od_tenant, **a100, tier="on_demand")
    assert wait_for(client, first, od_tenant, "placed")["state"] == "placed"
    spot = _rent(client, spot_tenant, **a100, tier="spot", bid_micros_per_gpu_hour=BID)
    spot_node = wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"]
    od = _rent(client, od_tenant, **a100, tier="on_demand")
    assert wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    assert client.post(f"/v1/rentals/{first}/stop", headers=od_tenant).json()["state"] == "stopped"
    placed = wait_for(client, od, od_tenant, "placed")
    assert placed["state"] == "placed" and placed["allocation"][0]["node"] != spot_node, placed
    back = wait_for(client, spot, spot_tenant, "placed")
    assert back["state"] == "placed" and back["notice_deadline"] is None, back
    (withdrawn,) = [e for e in back["events"] if e["reason"] == "notice_withdrawn"]
    assert "started on capacity that freed elsewhere" in withdrawn["message"], withdrawn


def test_a_victims_notice_is_withdrawn_when_an_operator_drains_its_node(patient_client) -> None:
    """Spot on the only H200 node has notice for an on-demand rental; the operator drains the node. The
    preemptor can never be placed there, yet the spot rental was killed at its deadline; its notice is
    withdrawn and it runs on (a drain keeps what runs), and the preemptor waits for capacity."""
    client = patient_client
    spot_tenant, od_tenant = _keyed(client, "spot-drained"), _keyed(client, "od-drained")
    spot = _rent(client, spot_tenant, gpu_model="H200", gpus=8, tier="spot", bid_micros_per_gpu_hour=BID)
    assert wait_for(client, spot, spot_tenant, "placed")["allocation"][0]["node"] == "h200-01"
    od = _rent(client, od_tenant, gpu_model="H200", gpus=8, tier="on_demand")
    assert wait_for(client, od, od_tenant, "placed", reason="preempting")["pending_reason"] == "preempting"
    assert client.post("/v1/nodes/h200-01/drain", headers=ADMIN).status_code == 200
    back = wait_for(client, spot, spot_tenant, "placed")
    assert back["state"] == "placed" and back["notice_deadline"] is None, back
    (withdrawn,) = [e for e in back["events"] if e["reason"] == "notice_withdrawn"]
    assert "its node was drained" in withdrawn["message"], withdrawn
    scheduler_cycles(client)  # the withdrawal commits before the cycle gives the preemptor its new reason
    waiting = client.get(f"/v1/rentals/{od}", headers=od_tenant).json()
    assert waiting["state"] == "pending" and waiting["pending_reason"] != "preempting", waiting
