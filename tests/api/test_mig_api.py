"""MIG rentals through the real app (SQLite and PostgreSQL) on a fleet of one carved A100: the last idle
instance is rented even though less than one whole GPU is free in the fleet, under both server queues."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, WAIT_S, app_client, register_agent, wait_for

ONE_A100 = (Path(__file__).resolve().parents[1] / "fleets" / "one_a100_mig.toml").read_text()  # mig-only


@pytest.mark.parametrize("queue", ["greedy", "backfill"])
def test_the_last_instance_of_a_nearly_full_mig_gpu_is_rented(database_url: str, queue: str) -> None:
    """With the 4g.40gb and the 2g.20gb rented, a seventh of the fleet's one GPU is free: the 1g.10gb asked
    next is placed on the idle instance (it used to count as a whole GPU: under greedy the cycle failed)."""
    with app_client(database_url, queue=queue) as client:
        headers = _carver(client)
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


def _carver(client) -> dict[str, str]:
    """ONE_A100 loaded and a tenant with credit; its headers."""
    loaded = client.put("/v1/fleet", content=ONE_A100, headers={**ADMIN, "Content-Type": "application/toml"})
    assert loaded.status_code == 200, loaded.text
    tenant_id = client.post("/v1/tenants", json={"name": "carver"}, headers=ADMIN).json()["id"]
    key = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    return {"Authorization": f"Bearer {key['secret']}"}


def _layout(*instances: tuple[int, str] | tuple[int, str, bool]) -> dict:
    """A heartbeat reporting `instances` ((start, profile) or (start, profile, busy)) on GPU 0."""
    reported = [
        {"start_slot": i[0], "profile": i[1], "busy": i[2] if len(i) > 2 else False} for i in instances
    ]
    return {"mig_layouts": [{"index": 0, "instances": reported}]}


def _reporting(client, *instances: tuple[int, str]) -> dict[str, str]:
    """An agent registered for the A100 that has reported `instances` on its GPU; its headers."""
    node = register_agent(client, "mig-only")
    beat = client.post("/v1/agents/heartbeat", json=_layout(*instances), headers=node)
    assert beat.status_code == 200, beat.text
    return node


def _rent_slice(client, headers: dict[str, str], profile: str) -> dict:
    created = client.post(
        "/v1/rentals", json={"gpu_model": "A100-80GB", "mig_profile": profile}, headers=headers
    )
    assert created.status_code == 201, created.text
    rental = wait_for(client, created.json()["id"], headers, "placed")
    assert rental["state"] == "placed", rental
    ((piece,),) = [a["slices"] for a in rental["allocation"]]
    return piece


def test_mig_slices_go_to_the_instances_the_host_reports(database_url: str) -> None:
    """The fleet declares 4g@0, 2g@4, 1g@6; the host was carved by hand into 1g@0 and 3g@4 and its agent
    says so: a 1g.10gb goes to the host's 1g at slot 0 and a 3g.40gb to its 3g at slot 4, where the
    declared layout would have put the 1g at slot 6 and had no 3g to reuse. A 2g made by hand later is
    rented next, and the last slot after it."""
    with app_client(database_url, queue="backfill") as client:
        tenant, node = _carver(client), _reporting(client, (0, "1g.10gb"), (4, "3g.40gb"))
        assert _rent_slice(client, tenant, "1g.10gb")["mig_start"] == 0
        assert _rent_slice(client, tenant, "3g.40gb")["mig_start"] == 4
        # a 2g made by hand at slot 2 meanwhile: the snapshot is laid out again, the rented instances busy
        now = _layout((0, "1g.10gb"), (2, "2g.20gb"), (4, "3g.40gb"))
        assert client.post("/v1/agents/heartbeat", json=now, headers=node).status_code == 200
        assert _rent_slice(client, tenant, "2g.20gb")["mig_start"] == 2
        assert _rent_slice(client, tenant, "1g.10gb")["mig_start"] == 1  # the one slot left, made anew


def test_an_instance_something_else_uses_is_left_alone_and_a_rented_one_stays_the_rental_s(
    database_url: str,
) -> None:
    """The host reports its 1g at slot 0 busy (processes no rental was given) and an idle 3g at 4: a 1g.10gb
    is made in slots 1-3 instead. A later report calling that rented instance busy too (sent before the
    agent heard of the rental) leaves it the rental's: the next 1g.10gb goes to another free slot, a
    3g.40gb reuses the 3g, and the nodes list shows the slot-0 instance busy."""
    with app_client(database_url, queue="greedy") as client:
        tenant, node = _carver(client), _reporting(client, (0, "1g.10gb", True), (4, "3g.40gb"))
        first = _rent_slice(client, tenant, "1g.10gb")["mig_start"]
        assert first in (1, 2, 3)
        lagging = _layout((0, "1g.10gb", True), (first, "1g.10gb", True), (4, "3g.40gb"))
        assert client.post("/v1/agents/heartbeat", json=lagging, headers=node).status_code == 200
        second = _rent_slice(client, tenant, "1g.10gb")["mig_start"]
        assert second in {1, 2, 3} - {first}
        assert _rent_slice(client, tenant, "3g.40gb")["mig_start"] == 4
        (listed,) = client.get("/v1/nodes", headers=ADMIN).json()
        instances = [(i["start_slot"], i["profile"], i["busy"]) for i in listed["mig_instances"]]
        rented = [(first, "1g.10gb", True), (second, "1g.10gb", True)]
        assert instances == sorted([(0, "1g.10gb", True), *rented, (4, "3g.40gb", True)])


def test_a_layout_nvidia_forbids_is_left_out_and_the_declared_one_stands(database_url: str) -> None:
    """An overlapping report (a 4g at 0 and a 2g at 2) cannot be a host's: the scheduler keeps the fleet's
    layout for that GPU, so the 1g.10gb reuses the declared 1g at slot 6."""
    with app_client(database_url, queue="greedy") as client:
        tenant = _carver(client)
        _reporting(client, (0, "4g.40gb"), (2, "2g.20gb"))
        assert _rent_slice(client, tenant, "1g.10gb")["mig_start"] == 6


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(_layout((8, "1g.10gb")), "start_slot", id="start-past-the-last-slot"),
        pytest.param(_layout((0, "")), "profile", id="empty-profile"),
        pytest.param(
            {"mig_layouts": [{"index": 0, "instances": []}, {"index": 0, "instances": []}]},
            "one layout per GPU index",
            id="one-gpu-twice",
        ),
        pytest.param({"mig_layouts": [{"index": -1, "instances": []}]}, "index", id="negative-index"),
    ],
)
def test_a_malformed_mig_report_is_refused_naming_the_field(
    database_url: str, body: dict, field: str
) -> None:
    with app_client(database_url) as client:
        _carver(client)
        node = register_agent(client, "mig-only")
        refused = client.post("/v1/agents/heartbeat", json=body, headers=node)
        assert refused.status_code == 422 and field in refused.text, refused.text


def test_metrics_count_mig_instances_by_profile_idle_or_busy(database_url: str) -> None:
    """The declared 4g@0, 2g@4, 1g@6 are idle; a 2g.20gb rental makes its instance busy; then the host
    reports five 1g instances made by hand around the rented 2g: five idle 1g, the 2g still busy."""

    def gauge(client) -> dict[tuple[str, str], float]:
        families = text_string_to_metric_families(client.get("/metrics").text)
        return {
            (s.labels["profile"], s.labels["state"]): s.value
            for family in families
            if family.name == "suanli_mig_instances"
            for s in family.samples
            if s.value
        }

    def shows(client, expected: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
        deadline = time.monotonic() + WAIT_S
        while (seen := gauge(client)) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return seen

    with app_client(database_url, queue="greedy") as client:
        tenant = _carver(client)
        declared = {("4g.40gb", "idle"): 1, ("2g.20gb", "idle"): 1, ("1g.10gb", "idle"): 1}
        assert shows(client, declared) == declared
        assert _rent_slice(client, tenant, "2g.20gb")["mig_start"] == 4
        rented = {("4g.40gb", "idle"): 1, ("2g.20gb", "busy"): 1, ("1g.10gb", "idle"): 1}
        assert shows(client, rented) == rented
        by_hand = [(start, "1g.10gb") for start in (0, 1, 2, 3, 6)]
        _reporting(client, *by_hand, (4, "2g.20gb"))
        host = {("1g.10gb", "idle"): 5, ("2g.20gb", "busy"): 1}
        assert shows(client, host) == host


def _mig_offers(client, headers: dict[str, str], query: str) -> dict[str, dict]:
    """The offers matching `query` that have a MIG profile, by profile."""
    found = client.get("/v1/offers", params={"q": query}, headers=headers)
    assert found.status_code == 200, found.text
    return {o["mig_profile"]: o for o in found.json() if o["mig_profile"] is not None}


def _free_instances(client, headers: dict[str, str], query: str) -> dict[str, int]:
    return {profile: o["free_gpus"] for profile, o in _mig_offers(client, headers, query).items()}


def test_offers_count_the_instances_of_each_profile_that_could_run_now(database_url: str) -> None:
    """The declared 4g@0, 2g@4, 1g@6 are idle, so any profile may repartition them: seven 1g.10gb, two
    3g.40gb, one 7g.80gb, each priced at its share of the GPU's compute. Once a 3g.40gb is rented (at slot
    4), slots 0-3 are what is left: four 1g.10gb, one 3g.40gb, no 7g.80gb."""
    with app_client(database_url, queue="greedy") as client:
        tenant = _carver(client)
        idle = _mig_offers(client, tenant, "gpu=A100-80GB tier=on_demand")
        counts = {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
        assert {profile: o["free_gpus"] for profile, o in idle.items()} == counts
        assert list(idle) == list(counts)  # smaller profiles first
        three = idle["3g.40gb"]
        assert (three["max_gpus_per_node"], three["nodes_with_free_gpus"]) == (2, 1)
        assert three["price_micros_per_gpu_hour"] == 1_790_000
        assert three["unit_price_micros_per_hour"] == 767_143  # 1.79 x 3/7, rounded half up
        assert idle["7g.80gb"]["unit_price_micros_per_hour"] == 1_790_000

        assert _rent_slice(client, tenant, "3g.40gb")["mig_start"] == 4
        left = {"1g.10gb": 4, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 1, "4g.40gb": 1}
        assert _free_instances(client, tenant, "gpu=A100-80GB tier=on_demand") == left
        spot = _mig_offers(client, tenant, "profile=3g.40gb tier=spot")
        assert list(spot) == ["3g.40gb"] and spot["3g.40gb"]["tier"] == "spot"
        assert _mig_offers(client, tenant, "profile=whole") == {}
        cheap = _mig_offers(client, tenant, "tier=on_demand price<0.3")
        assert set(cheap) == {"1g.10gb", "1g.20gb"}  # 1.79 / 7 = 0.2557 an hour


def test_offers_leave_out_what_the_host_runs_and_price_an_explicit_mig_entry(database_url: str) -> None:
    """The host reports its 1g at slot 0 running processes no rental was given: slots 1-7 are what may be
    offered (six 1g.10gb, one 3g.40gb, no 4g or 7g). An operator's explicit 1g.10gb price is that row's."""
    with app_client(database_url, queue="greedy") as client:
        tenant = _carver(client)
        _reporting(client, (0, "1g.10gb", True), (4, "3g.40gb"))
        offered = {"1g.10gb": 6, "1g.20gb": 3, "2g.20gb": 2, "3g.40gb": 1}
        assert _free_instances(client, tenant, "tier=on_demand") == offered
        entry = {
            "gpu_model": "A100-80GB",
            "tier": "on_demand",
            "mig_profile": "1g.10gb",
            "price_micros_per_gpu_hour": 300_000,
        }
        assert client.put("/v1/prices", json=[entry], headers=ADMIN).status_code == 200
        priced = _mig_offers(client, tenant, "tier=on_demand")
        assert priced["1g.10gb"]["unit_price_micros_per_hour"] == 300_000
        assert priced["1g.20gb"]["unit_price_micros_per_hour"] == 255_714  # the share rule still
