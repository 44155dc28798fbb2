"""Elastic starts through the real app (SQLite and PostgreSQL): a rental that declares `min_gpus` and does
not fit whole starts on the GPUs that are free, pays for what it holds, and the leader grows it to its size
when more free; one without a least size waits. Under every server queue; under backfill, not past a rigid
head it could delay, and under the conservative queue off every booking it would outlast."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from test_elastic_api import _tenant, _until

from conftest import ADMIN, SteppedClock, app_client, register_agent, scheduler_cycles, wait_for

H100 = {"gpu_model": "H100-SXM-80GB"}


def _fill_all_but_four(client, headers: dict) -> str:
    """Seven of the eight H100 nodes taken whole, and four GPUs of the eighth: the 4-GPU rental's id."""
    for _ in range(7):
        taken = client.post("/v1/rentals", json={**H100, "gpus": 8}, headers=headers)
        assert taken.status_code == 201, taken.text
        wait_for(client, taken.json()["id"], headers, "placed")
    four = client.post("/v1/rentals", json={**H100, "gpus": 4}, headers=headers)
    assert four.status_code == 201, four.text
    assert wait_for(client, four.json()["id"], headers, "placed")["state"] == "placed"
    return four.json()["id"]


@pytest.mark.parametrize("queue", ["greedy", "backfill", "conservative"])
def test_an_elastic_rental_starts_on_what_is_free_pays_for_it_and_grows_when_more_frees(
    database_url: str, queue: str
) -> None:
    with app_client(database_url, queue=queue, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-start")
        four = _fill_all_but_four(client, headers)
        four_rate = client.get(f"/v1/rentals/{four}", headers=headers).json()["price_micros_per_hour"]
        rigid = client.post("/v1/rentals", json={**H100, "gpus": 8}, headers=headers).json()["id"]
        created = client.post("/v1/rentals", json={**H100, "gpus": 8, "min_gpus": 4}, headers=headers)
        assert created.status_code == 201, created.text
        elastic = created.json()["id"]
        if queue == "backfill":  # behind a rigid head whose start is unbounded (running rentals declare no
            scheduler_cycles(client)  # duration), nothing passes, not even smaller: EASY's rule
            assert client.get(f"/v1/rentals/{elastic}", headers=headers).json()["state"] == "pending"
            assert client.post(f"/v1/rentals/{rigid}/stop", headers=headers).status_code == 200
        body = wait_for(client, elastic, headers, "placed")
        assert body["state"] == "placed"
        (allocation,) = body["allocation"]
        assert len(allocation["slices"]) == 4  # the four free GPUs of the eighth node
        waiting = _until(client, elastic, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        (said,) = [e["message"] for e in waiting["events"] if e["kind"] == "growing"]  # what it still wants
        assert said == f"waiting to have 8 GPUs per node (has 4): node {allocation['node']} has no GPU free"
        assert body["price_micros_per_hour"] == four_rate  # it pays for the four it holds
        if queue != "backfill":  # the rigid one waits for a whole node (conservative: unbooked, as nothing
            # running declares when it ends, so it holds nothing back), the elastic one did not
            assert client.get(f"/v1/rentals/{rigid}", headers=headers).json()["state"] == "pending"

        stopped = client.post(f"/v1/rentals/{four}/stop", headers=headers)
        assert stopped.status_code == 200, stopped.text
        grown = _until(
            client, elastic, headers, lambda b: sum(len(a["slices"]) for a in b["allocation"]) == 8
        )
        assert sum(len(a["slices"]) for a in grown["allocation"]) == 8, grown
        assert grown["price_micros_per_hour"] == 2 * four_rate
        assert any(e["kind"] == "resized" for e in grown["events"]), grown["events"]


def test_an_elastic_rentals_time_limit_is_for_its_full_size_and_moves_with_its_speed(
    database_url: str,
) -> None:
    """An elastic rental declares its max duration for its full size, as the simulator runs it: started on
    half its GPUs it is stopped twice as late, and grown to its size at `t` what is left runs twice as
    fast (a rigid rental's limit is its max duration after placement: test_time_limits_api.py)."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-limit")
        four = _fill_all_but_four(client, headers)
        created = client.post(
            "/v1/rentals", json={**H100, "gpus": 8, "min_gpus": 4, "max_duration_s": 3600}, headers=headers
        )
        assert created.status_code == 201, created.text
        elastic = created.json()["id"]
        body = wait_for(client, elastic, headers, "placed")
        placed_at = datetime.fromisoformat(next(e["at"] for e in body["events"] if e["kind"] == "placed"))
        assert datetime.fromisoformat(body["time_limit_at"]) == placed_at + timedelta(hours=2)

        assert client.post(f"/v1/rentals/{four}/stop", headers=headers).status_code == 200
        grown = _until(
            client, elastic, headers, lambda b: sum(len(a["slices"]) for a in b["allocation"]) == 8
        )
        grown_at = datetime.fromisoformat(next(e["at"] for e in grown["events"] if e["kind"] == "resized"))
        left = placed_at + timedelta(hours=2) - grown_at
        assert datetime.fromisoformat(grown["time_limit_at"]) == grown_at + left / 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"gpus": 8, "min_gpus": 9}, "at most the 8 GPUs it asks for"),
        (
            {"gpus": 0, "mig_profile": "1g.10gb", "min_gpus": 1},
            "only a rental of whole GPUs can start smaller",
        ),
        ({"gpus": 8, "min_gpus": 0}, "greater than or equal to 1"),
    ],
)
def test_a_least_size_a_rental_cannot_have_is_refused_naming_the_field(
    database_url: str, body: dict, message: str
) -> None:
    with app_client(database_url) as client:
        headers, _ = _tenant(client, "elastic-bad")
        refused = client.post("/v1/rentals", json={**H100, **body}, headers=headers)
        assert refused.status_code in (400, 422), refused.text  # the wire (422) or the service (400)
        assert "min_gpus" in refused.text and message in refused.text


def _renter(client, headers: dict):
    """Rent H100s with `body` and wait for the rental to reach `state` (placed, by default)."""

    def rent(body: dict, state: str = "placed") -> dict:
        created = client.post("/v1/rentals", json={**H100, **body}, headers=headers)
        assert created.status_code == 201, created.text
        return wait_for(client, created.json()["id"], headers, state)

    return rent


def _nodes_of(body: dict) -> set[str]:
    return {a["node"] for a in body["allocation"]}


@pytest.mark.parametrize(("gang_s", "grows"), [(36_000, False), (1_800, True)])
@pytest.mark.parametrize("queue", ["backfill", "conservative"])
def test_a_growth_keeps_off_a_waiting_rentals_planned_start_unless_it_ends_before_it(
    database_url: str, queue: str, gang_s: int, grows: bool
) -> None:
    """Five H100 nodes busy for 10 h, one for 1 h, and a gang asking three nodes on the last two: an
    elastic one that started smaller (backfill), or a rigid one resized to three (conservative, which starts
    nothing smaller). A rigid two-node rental waits; when one of the 10-h nodes frees, it is reserved (or
    booked) on that node and the 1-h one from 1 h on. The gang, which would run past that start, does not
    grow onto the free node (that would delay it, as a backfill may not); declared to end first, it does."""
    with app_client(database_url, queue=queue, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-drain")

        rent = _renter(client, headers)

        long_ids = [rent({"gpus": 8, "max_duration_s": 36_000})["id"] for _ in range(5)]
        old = rent({"gpus": 8, "max_duration_s": 3600})
        if queue == "backfill":
            gang = rent({"gpus": 8, "nodes": 3, "min_gpus": 16, "max_duration_s": gang_s})
        else:
            gang = rent({"gpus": 8, "nodes": 2, "max_duration_s": gang_s})
            resized = client.patch(f"/v1/rentals/{gang['id']}", json={"nodes": 3}, headers=headers)
            assert resized.status_code == 200, resized.text
        assert len(gang["allocation"]) == 2  # the two whole nodes left
        head = rent({"gpus": 8, "nodes": 2, "max_duration_s": 3600}, state="pending")
        assert head["state"] == "pending"
        freed = client.get(f"/v1/rentals/{long_ids[0]}", headers=headers).json()
        assert client.post(f"/v1/rentals/{long_ids[0]}/stop", headers=headers).status_code == 200
        free_node = _nodes_of(freed)
        if grows:
            grown = _until(client, gang["id"], headers, lambda b: len(b["allocation"]) == 3)
            assert _nodes_of(grown) == _nodes_of(gang) | free_node
            return
        scheduler_cycles(client)
        held = client.get(f"/v1/rentals/{gang['id']}", headers=headers).json()
        assert _nodes_of(held) == _nodes_of(gang)  # it did not take the head's drained node
        head = client.get(f"/v1/rentals/{head['id']}", headers=headers).json()
        expected = datetime.fromisoformat(head["expected_start_at"])
        assert head["state"] == "pending" and expected < datetime.now(UTC) + timedelta(hours=1, minutes=1)
        assert client.post(f"/v1/rentals/{old['id']}/stop", headers=headers).status_code == 200
        started = wait_for(client, head["id"], headers, "placed")
        assert _nodes_of(started) == free_node | _nodes_of(old)


def test_under_the_conservative_queue_a_growth_keeps_off_every_booking_it_would_outlast(
    database_url: str,
) -> None:
    """As above, with two rentals waiting: a three-node one booked when the gang ends (5.5 h), and a
    two-node one booked at 1 h on the free node and the 1-h one, between them. The gang ends no later than
    the first's start but after the second's, so it may not grow: every booking is a promise."""
    with app_client(database_url, queue="conservative", meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-bookings")

        rent = _renter(client, headers)

        long_ids = [rent({"gpus": 8, "max_duration_s": 36_000})["id"] for _ in range(5)]
        old = rent({"gpus": 8, "max_duration_s": 3600})
        gang = rent({"gpus": 8, "nodes": 2, "max_duration_s": 20_000})
        resized = client.patch(f"/v1/rentals/{gang['id']}", json={"nodes": 3}, headers=headers)
        assert resized.status_code == 200, resized.text
        first = rent({"gpus": 8, "nodes": 3, "max_duration_s": 3600}, state="pending")
        second = rent({"gpus": 8, "nodes": 2, "max_duration_s": 3600}, state="pending")
        freed = client.get(f"/v1/rentals/{long_ids[0]}", headers=headers).json()
        assert client.post(f"/v1/rentals/{long_ids[0]}/stop", headers=headers).status_code == 200
        scheduler_cycles(client)
        held = client.get(f"/v1/rentals/{gang['id']}", headers=headers).json()
        assert _nodes_of(held) == _nodes_of(gang)  # the free node is booked for the second from 1 h
        booked = client.get(f"/v1/rentals/{second['id']}", headers=headers).json()
        expected = datetime.fromisoformat(booked["expected_start_at"])
        assert expected < datetime.now(UTC) + timedelta(hours=1, minutes=1)
        assert client.get(f"/v1/rentals/{first['id']}", headers=headers).json()["state"] == "pending"
        assert client.post(f"/v1/rentals/{old['id']}/stop", headers=headers).status_code == 200
        started = wait_for(client, second["id"], headers, "placed")
        assert _nodes_of(started) == _nodes_of(freed) | _nodes_of(old)


def _slices(body: dict) -> int:
    return sum(len(a["slices"]) for a in body["allocation"])


def test_an_elastic_rental_grows_by_what_frees_and_a_rigid_resize_waits_for_all_of_it(database_url: str):
    """Seven H100 nodes taken whole, two 2-GPU rentals on the eighth. An elastic 8-GPU rental (least 4)
    starts on its other 4 and takes 2 more as soon as one of the 2-GPU rentals stops, then the last 2: it
    grows as capacity frees, as in the simulator. A rigid 4-GPU rental asked to be 8 takes nothing until all
    4 it lacks are free on its node."""
    with app_client(database_url, queue="backfill", meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-steps")

        rent = _renter(client, headers)

        for _ in range(7):
            rent({"gpus": 8})
        first, second = rent({"gpus": 2}), rent({"gpus": 2})
        elastic = rent({"gpus": 8, "min_gpus": 4})
        assert _slices(elastic) == 4
        rate = elastic["price_micros_per_hour"]
        assert client.post(f"/v1/rentals/{first['id']}/stop", headers=headers).status_code == 200
        grown = _until(client, elastic["id"], headers, lambda b: _slices(b) == 6)
        assert _slices(grown) == 6 and grown["price_micros_per_hour"] == rate * 6 // 4
        assert client.post(f"/v1/rentals/{second['id']}/stop", headers=headers).status_code == 200
        whole = _until(client, elastic["id"], headers, lambda b: _slices(b) == 8)
        assert _slices(whole) == 8 and whole["price_micros_per_hour"] == rate * 2

        assert client.post(f"/v1/rentals/{elastic['id']}/stop", headers=headers).status_code == 200
        rigid, third = rent({"gpus": 4}), rent({"gpus": 2})
        asked = client.patch(f"/v1/rentals/{rigid['id']}", json={"gpus": 8}, headers=headers)
        assert asked.status_code == 200, asked.text
        scheduler_cycles(client)
        waiting = client.get(f"/v1/rentals/{rigid['id']}", headers=headers).json()
        assert _slices(waiting) == 4  # 2 are free on its node, not the 4 it lacks
        assert any(e["kind"] == "growing" for e in waiting["events"]), waiting["events"]
        assert client.post(f"/v1/rentals/{third['id']}/stop", headers=headers).status_code == 200
        assert _slices(_until(client, rigid["id"], headers, lambda b: _slices(b) == 8)) == 8


def test_an_elastic_rental_shrinks_below_its_least_size_which_falls_with_it(database_url: str):
    """A resize is the tenant's own choice of size: an elastic rental asked to be smaller than its
    `min_gpus` becomes that size (its least size with it), as a rigid one does. It was refused with a
    message about `min_gpus`, a field the resize does not take."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-shrink")
        elastic = _renter(client, headers)({"gpus": 8, "min_gpus": 4})
        assert _slices(elastic) == 8
        shrunk = client.patch(f"/v1/rentals/{elastic['id']}", json={"gpus": 2}, headers=headers)
        assert shrunk.status_code == 200, shrunk.text
        assert shrunk.json()["request"]["gpus"] == 2 and shrunk.json()["request"]["min_gpus"] == 2
        body = _until(client, elastic["id"], headers, lambda b: _slices(b) == 2)
        assert _slices(body) == 2
        grown = client.patch(f"/v1/rentals/{elastic['id']}", json={"gpus": 6}, headers=headers)
        assert grown.status_code == 200, grown.text
        assert grown.json()["request"]["min_gpus"] == 2  # growing leaves its least size as it is
        none = client.patch(f"/v1/rentals/{elastic['id']}", json={"gpus": 0}, headers=headers)
        assert none.status_code == 400 and none.json()["error"]["field"] == "gpus", none.text
        assert "keeps at least one GPU per node; stop it instead" in none.json()["error"]["message"]


def test_an_elastic_rental_past_a_limit_at_its_size_starts_within_it(database_url: str):
    """A GPU quota or a daily spend cap that its full size would pass: it starts at the largest size the
    limit allows, priced and counted as large as it is, and is not refused at creation when its least size
    fits the quota. It waited (the cap), or was refused with a 400 (a quota below its size alone)."""
    clock = SteppedClock().clear_of_midnight()  # its cap counts the hours left today
    with app_client(database_url, clock, meter_interval_s=3600, prepaid=False) as client:
        headers, tenant_id = _tenant(client, "elastic-limits")
        quota = {"gpu_quota": {"*": 3}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        elastic = _renter(client, headers)({"gpus": 8, "min_gpus": 1})
        assert _slices(elastic) == 3
        assert client.post(f"/v1/rentals/{elastic['id']}/stop", headers=headers).status_code == 200

        rate = elastic["price_micros_per_hour"] // 3  # per GPU
        now = clock.now()
        hours_left = (
            now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now
        ) / timedelta(hours=1)
        cap = {
            "gpu_quota": {},
            "daily_cap_micros": int(rate * hours_left * 2.5 + rate / 20),
        }  # + the stop's 60 s
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=cap, headers=ADMIN).status_code == 200
        capped = _renter(client, headers)({"gpus": 8, "min_gpus": 1})
        assert _slices(capped) == 2 and capped["price_micros_per_hour"] == 2 * rate


@pytest.mark.parametrize("queue", ["backfill", "conservative"])
def test_a_tenants_shrink_stretches_its_time_limit_no_later_than_a_start_planned_on_its_node(
    database_url: str, queue: str
) -> None:
    """Seven H100 nodes busy for 10 h; on the eighth a rigid 4-GPU rental for 1 h and an elastic one (least
    1 GPU) for 20 min. A whole-node rental waits for the eighth node, at 1 h. The elastic one's tenant
    shrinks it to 1 GPU: its limit, for its work at full size, would stretch to 80 min and delay that start;
    it stretches to the start and no further, and the waiting rental's expected start does not move. Grown
    back to 4 GPUs at once, the work the cap cut is given back: its limit is back at about 20 min (it was
    reckoned from the capped limit, a quarter of the hour to the start: 15 min, a quarter of its work
    lost)."""
    with app_client(database_url, queue=queue, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "shrink-limit")
        rent = _renter(client, headers)
        for _ in range(7):
            rent({"gpus": 8, "max_duration_s": 36_000})
        rent({"gpus": 4, "max_duration_s": 3600})
        elastic = rent({"gpus": 4, "min_gpus": 1, "max_duration_s": 1200})
        waiting = rent({"gpus": 8, "max_duration_s": 3600}, state="pending")
        waiting = _until(client, waiting["id"], headers, lambda b: b["expected_start_at"] is not None)
        planned = datetime.fromisoformat(waiting["expected_start_at"])
        shrunk = client.patch(f"/v1/rentals/{elastic['id']}", json={"gpus": 1}, headers=headers)
        assert shrunk.status_code == 200, shrunk.text
        done = _until(client, elastic["id"], headers, lambda b: len(b["allocation"][0]["slices"]) == 1)
        limit = datetime.fromisoformat(done["time_limit_at"])
        assert abs((limit - planned).total_seconds()) < 1  # stretched to the planned start, not 80 min
        assert any("stretches no later than" in e["message"] for e in done["events"])
        scheduler_cycles(client)
        after = client.get(f"/v1/rentals/{waiting['id']}", headers=headers).json()
        assert datetime.fromisoformat(after["expected_start_at"]) == planned
        first_limit = datetime.fromisoformat(elastic["time_limit_at"])
        grown = client.patch(f"/v1/rentals/{elastic['id']}", json={"gpus": 4}, headers=headers)
        assert grown.status_code == 200, grown.text
        back = _until(client, elastic["id"], headers, lambda b: len(b["allocation"][0]["slices"]) == 4)
        assert len(back["allocation"][0]["slices"]) == 4, [e["message"] for e in back["events"]]
        limit = datetime.fromisoformat(back["time_limit_at"])
        assert abs((limit - first_limit).total_seconds()) < 10, (limit, first_limit)


@pytest.mark.parametrize("queue", ["backfill", "conservative"])
def test_a_gangs_node_count_shrink_stretches_its_time_limit_no_later_than_a_start_planned_on_its_nodes(
    database_url: str, queue: str
) -> None:
    """Five H100 nodes busy for 10 h, a sixth for 1 h, and an elastic gang of two (one node at least) for
    40 min on the last two. A rigid three-node rental waits for those three, at 1 h. The gang's tenant drops
    a node (applied by the API at once, not by the leader): its limit, for its work at full size, would
    stretch to 80 min and delay that start; it stretches to the recorded start (less the minute by which a
    recorded start may lag the plan) and no further, and the waiting rental's expected start does not move."""
    with app_client(database_url, queue=queue, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "gang-shrink-limit")
        rent = _renter(client, headers)
        for _ in range(5):
            rent({"gpus": 8, "max_duration_s": 36_000})
        rent({"gpus": 8, "max_duration_s": 3600})
        gang = rent({"gpus": 8, "nodes": 2, "min_gpus": 8, "max_duration_s": 2400})
        waiting = rent({"gpus": 8, "nodes": 3, "max_duration_s": 3600}, state="pending")
        waiting = _until(client, waiting["id"], headers, lambda b: b["expected_start_at"] is not None)
        planned = datetime.fromisoformat(waiting["expected_start_at"])
        shrunk = client.patch(f"/v1/rentals/{gang['id']}", json={"nodes": 1}, headers=headers)
        assert shrunk.status_code == 200, shrunk.text
        done = shrunk.json()
        assert len(done["allocation"]) == 1
        limit = datetime.fromisoformat(done["time_limit_at"])
        assert planned - timedelta(seconds=61) < limit <= planned - timedelta(seconds=59)  # not 80 min
        assert any("stretches no later than" in e["message"] for e in done["events"])
        scheduler_cycles(client)
        after = client.get(f"/v1/rentals/{waiting['id']}", headers=headers).json()
        assert datetime.fromisoformat(after["expected_start_at"]) == planned
        first_limit = datetime.fromisoformat(gang["time_limit_at"])
        grown = client.patch(f"/v1/rentals/{gang['id']}", json={"nodes": 2}, headers=headers)
        assert grown.status_code == 200, grown.text
        back = _until(client, gang["id"], headers, lambda b: len(b["allocation"]) == 2)
        assert len(back["allocation"]) == 2, [e["message"] for e in back["events"]]
        limit = datetime.fromisoformat(back["time_limit_at"])
        assert abs((limit - first_limit).total_seconds()) < 10, (limit, first_limit)  # the work given back


def test_an_elastic_gang_does_not_grow_onto_a_node_whose_maintenance_starts_before_it_ends(
    database_url: str,
) -> None:
    """Six H100 nodes busy; an elastic gang of three (two at least, declared 1 h) starts on the other two.
    A window on a busy node starts in 10 minutes: when that node frees the gang does not grow onto it (it
    grew, and the whole gang was then preempted for the window), and it grows onto the next node freed."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-window")
        rent = _renter(client, headers)
        busy = [rent({"gpus": 8, "max_duration_s": 36_000}) for _ in range(6)]
        gang = rent({"gpus": 8, "nodes": 3, "min_gpus": 16, "max_duration_s": 3600})
        assert len(gang["allocation"]) == 2
        windowed, other = busy[0], busy[1]
        (node,) = _nodes_of(windowed)
        start = datetime.now(UTC) + timedelta(minutes=10)
        window = {"node": node, "starts_at": start.isoformat(), "reason": "firmware"}
        window["ends_at"] = (start + timedelta(hours=1)).isoformat()
        assert client.post("/v1/fleet/maintenance", json=window, headers=ADMIN).status_code == 201
        assert client.post(f"/v1/rentals/{windowed['id']}/stop", headers=headers).status_code == 200
        _until(client, windowed["id"], headers, lambda b: b["state"] == "stopped")
        scheduler_cycles(client)
        held = client.get(f"/v1/rentals/{gang['id']}", headers=headers).json()
        assert _nodes_of(held) == _nodes_of(gang)  # not onto the node going into maintenance
        assert client.post(f"/v1/rentals/{other['id']}/stop", headers=headers).status_code == 200
        grown = _until(client, gang["id"], headers, lambda b: len(b["allocation"]) == 3)
        assert _nodes_of(grown) == _nodes_of(gang) | _nodes_of(other)


def test_a_dry_run_of_an_elastic_rental_that_would_start_smaller_quotes_its_stretched_limit(
    database_url: str,
) -> None:
    """4 of 8 GPUs free: a dry run of 8 GPUs down to 4 for an hour would start on 4 at their rate, stopped two
    hours later (its hour is for its full size), so at most 2 h at that rate, what the full size costs in
    1 h; it said 1 h at the smaller rate, half of it."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-dry-run")
        _fill_all_but_four(client, headers)
        body = {**H100, "gpus": 8, "min_gpus": 4, "max_duration_s": 3600}
        answer = client.post("/v1/rentals/dry-run", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        dry = answer.json()
        assert len(dry["nodes"]) == 1 and dry["price_micros_per_hour"] is not None, dry
        assert dry["max_cost_micros"] == 2 * dry["price_micros_per_hour"], dry


def test_a_rental_waiting_to_grow_says_why_once_though_its_workload_starts_meanwhile(
    database_url: str,
) -> None:
    """Started on 4 of its 8 GPUs, it says once why it waits to grow; its workload starting (a `running`
    event after that one) did not make the next cycle say it again, as it did on every smaller start."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic-once")
        _fill_all_but_four(client, headers)
        spec = {**H100, "gpus": 8, "min_gpus": 4, "command": ["sleep", "600"]}
        elastic = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        body = wait_for(client, elastic, headers, "placed")
        _until(client, elastic, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        agent = register_agent(client, body["allocation"][0]["node"])
        report = {"workloads": [{"rental_id": elastic, "state": "running"}]}
        assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200
        scheduler_cycles(client)
        scheduler_cycles(client)
        kinds = [e["kind"] for e in client.get(f"/v1/rentals/{elastic}", headers=headers).json()["events"]]
        assert "running" in kinds and kinds.count("growing") == 1, kinds
