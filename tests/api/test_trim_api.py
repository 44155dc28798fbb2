"""Trims through the real app (SQLite and PostgreSQL, greedy and backfill queues): an elastic spot rental
(`min_gpus`) that on-demand preempts gives back, at its deadline, only the GPUs on-demand needs and runs on
with the rest, priced for them; its agent is told so (the notice file, no kill) and it grows back when
on-demand stops; one whose workload ends under notice ends as a running one would, and on-demand starts then.
A rigid rental in its place would be evicted whole (`test_preemption_api`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from test_elastic_api import _until
from test_preemption_api import (  # noqa: F401  (the fixtures)
    BID,
    NOTICE_S,
    _events,
    _keyed,
    _rent,
    client,
    patient_client,
)

from conftest import register_agent, wait_for


def _gpus(body: dict) -> set[tuple[str, int]]:
    return {(a["node"], s["gpu_index"]) for a in body["allocation"] for s in a["slices"]}


def test_an_elastic_spot_rental_gives_on_demand_only_what_it_needs_and_runs_on(
    client,  # noqa: F811  (the imported fixture)
    tenant,
) -> None:
    _, spot_tenant = tenant("elastic-spot")
    _, od_tenant = tenant("steady")
    node = register_agent(client, "h200-01")
    spot = _rent(
        client, spot_tenant, gpu_model="H200", gpus=8, min_gpus=2, tier="spot", bid_micros_per_gpu_hour=BID
    )
    whole = wait_for(client, spot, spot_tenant, "placed")
    assert len(_gpus(whole)) == 8
    full_rate = whole["price_micros_per_hour"]
    od = _rent(client, od_tenant, gpu_model="H200", gpus=4, tier="on_demand")

    wait_for(client, od, od_tenant, "placed", reason="preempting")
    victim = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert victim["state"] == "preempting" and victim["notice_keeps_gpus"] == 4
    (notice,) = _events(victim, "preempting")
    assert (
        "preempted in part by a rental of another tenant (on_demand): gives back 4 GPUs at"
        in (notice["message"])
    )
    assert "runs on with 4" in notice["message"]
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node).json()
    (told,) = [a for a in beat["assignments"] if a["rental_id"] == spot]
    assert told["notice_keeps_gpus"] == 4 and told["notice_deadline"] is not None  # no kill: a trim
    deadline = datetime.fromisoformat(victim["notice_deadline"])
    assert abs((deadline - datetime.fromisoformat(notice["at"])).total_seconds() - NOTICE_S) < 0.01

    placed = wait_for(client, od, od_tenant, "placed")
    assert placed["state"] == "placed" and len(_gpus(placed)) == 4
    trimmed = client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert trimmed["state"] == "placed" and trimmed["preempted_by"] is None
    assert trimmed["notice_keeps_gpus"] is None and trimmed["notice_deadline"] is None
    assert len(_gpus(trimmed)) == 4 and not _gpus(trimmed) & _gpus(placed)
    assert _gpus(trimmed) | _gpus(placed) == _gpus(whole)
    assert trimmed["price_micros_per_hour"] == full_rate // 2  # it pays for the 4 it holds
    (resized,) = _events(trimmed, "resized")
    assert datetime.fromisoformat(resized["at"]) >= deadline
    assert "gave back 4 GPUs at its notice deadline; runs on with 4" in resized["message"]
    assert od not in str(trimmed)
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node).json()
    (told,) = [a for a in beat["assignments"] if a["rental_id"] == spot]
    assert told["notice_deadline"] is None and told["notice_keeps_gpus"] is None
    assert len(told["slices"]) == 4

    assert client.post(f"/v1/rentals/{od}/stop", headers=od_tenant).status_code == 200
    grown = _until(client, spot, spot_tenant, lambda b: len(_gpus(b)) == 8)
    assert len(_gpus(grown)) == 8 and grown["price_micros_per_hour"] == full_rate


def test_a_trimmed_rental_whose_workload_ends_under_notice_ends_and_on_demand_starts_then(
    patient_client,  # noqa: F811  (the imported fixture)
) -> None:
    spot_tenant = _keyed(patient_client, "elastic-spot")
    od_tenant = _keyed(patient_client, "steady")
    node = register_agent(patient_client, "h200-01")
    spot = _rent(
        patient_client,
        spot_tenant,
        gpu_model="H200",
        gpus=8,
        min_gpus=2,
        tier="spot",
        bid_micros_per_gpu_hour=BID,
    )
    wait_for(patient_client, spot, spot_tenant, "placed")
    running = {"workloads": [{"rental_id": spot, "state": "running"}]}
    assert patient_client.post("/v1/agents/heartbeat", json=running, headers=node).status_code == 200
    od = _rent(patient_client, od_tenant, gpu_model="H200", gpus=4, tier="on_demand")
    wait_for(patient_client, od, od_tenant, "placed", reason="preempting")
    noticed = patient_client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert noticed["state"] == "preempting" and noticed["notice_keeps_gpus"] == 4

    done = {"workloads": [{"rental_id": spot, "state": "succeeded", "exit_code": 0}]}
    assert patient_client.post("/v1/agents/heartbeat", json=done, headers=node).status_code == 200
    ended = patient_client.get(f"/v1/rentals/{spot}", headers=spot_tenant).json()
    assert ended["state"] == "stopped" and ended["allocation"] == []  # not trimmed and restarted
    placed = wait_for(patient_client, od, od_tenant, "placed")
    assert placed["state"] == "placed"
    assert datetime.fromisoformat(placed["events"][-1]["at"]) < datetime.fromisoformat(
        noticed["notice_deadline"]
    )  # it did not wait for the deadline


def test_a_trim_whose_preemptor_no_longer_waits_is_withdrawn_even_past_its_deadline() -> None:
    """An eviction's notice stands once its deadline has passed (its workload was told to stop); a trim's
    is withdrawn whenever its preemptor no longer waits, since its workload was told nothing to stop for."""
    from datetime import UTC, timedelta

    from suanli.app.notices import abandoned
    from suanli.app.records import Rental, RentalSpec
    from suanli.domain.plan import NodeAllocation

    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    evicted = Rental(
        "rnt_evicted", "ten_1", "preempting", RentalSpec(gpus=8), now, preempted_by="rnt_od",
        notice_deadline=now - timedelta(seconds=1),
    )  # fmt: skip
    trimmed = replace(evicted, id="rnt_trimmed", notice_keeps=(NodeAllocation("h200-01", 0, 0, ()),))
    assert abandoned([evicted, trimmed], waiting=set(), now=now) == [trimmed]
    assert abandoned([evicted, trimmed], waiting={"rnt_od"}, now=now) == []
    early = replace(evicted, notice_deadline=now + timedelta(seconds=1))
    assert abandoned([early], waiting=set(), now=now) == [early]
