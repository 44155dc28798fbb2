"""Spot rates that follow the pool, through the real app (SQLite and PostgreSQL): a spot rental placed in an
otherwise idle pool pays the spot price at its own share of the pool; once on-demand rentals fill most of the
pool a scheduler cycle re-prices it (a rate change from then, its price updated), and the meter charges the
exact sum of rate x seconds over the two segments, rounded once. A bid caps the new rate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import (
    ADMIN,
    WAIT_S,
    app_client,
    charged,
    logged_in_as,
    register_agent,
    scheduler_cycles,
    wait_for,
)
from suanli.cli import platform_commands
from suanli.cli.main import app
from suanli.domain.billing.money import money_text, round_half_up, to_epoch_s
from suanli.domain.billing.pricebook import spot_formula

ASCEND = "Ascend-910B"  # the example fleet's only Ascend node: a pool of 8 in cn-north


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    """Postpaid; the test runs the meter itself."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as test_client:
        yield test_client


def _prices(client: TestClient) -> tuple[int, int]:
    """(spot floor, on-demand list price) of the pool's model, per GPU-hour."""
    entries = {
        (p["tier"], p["kind"]): p["price_micros_per_gpu_hour"]
        for p in client.get("/v1/prices").json()
        if p["gpu_model"] == ASCEND and p["region"] == "*"
    }
    return entries[("spot", "spot_floor")], entries[("on_demand", "list")]


def _rate_changes(client: TestClient, rental_id: str, headers: dict[str, str], count: int) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        body = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        if len(body["rate_changes"]) >= count or time.monotonic() > deadline:
            return body
        time.sleep(0.02)


def _fill(client: TestClient, headers: dict[str, str]) -> None:
    filler = client.post("/v1/rentals", json={"gpu_model": ASCEND, "gpus": 6}, headers=headers).json()
    assert wait_for(client, filler["id"], headers, "placed")["state"] == "placed"


def test_a_running_spot_rental_pays_its_pools_current_spot_price(client, tenant) -> None:
    _, headers = tenant("spotter")
    floor, on_demand = _prices(client)
    spot = client.post("/v1/rentals", json={"gpu_model": ASCEND, "gpus": 1, "tier": "spot"}, headers=headers)
    assert spot.status_code == 201, spot.text
    rental_id = spot.json()["id"]
    placed = wait_for(client, rental_id, headers, "placed")
    idle_rate = spot_formula(floor, on_demand, 125)  # alone: 1 of the pool's 8 busy
    assert placed["price_micros_per_hour"] == idle_rate
    assert idle_rate - floor < (on_demand - floor) // 50  # within 2% of the way to on-demand: about the floor
    scheduler_cycles(client)  # the pool has not moved, so no rate change
    assert client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["rate_changes"] == []

    _fill(client, headers)  # on-demand takes 6 more: 7 of 8 busy
    body = _rate_changes(client, rental_id, headers, 2)
    busy_rate = spot_formula(floor, on_demand, 875)
    rates = [(datetime.fromisoformat(c["from_at"]), c["rate_micros_per_hour"]) for c in body["rate_changes"]]
    assert [rate for _, rate in rates] == [idle_rate, busy_rate]
    assert body["price_micros_per_hour"] == busy_rate
    assert body["quote"]["final_micros_per_hour"] == idle_rate  # the quote stays as placed
    scheduler_cycles(client)
    assert len(client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["rate_changes"]) == 2

    (placed_at, _), (changed_at, _) = rates
    billing = client.app.state.services.billing
    later = placed_at + timedelta(hours=2)
    billing.meter(now=later)
    billing.meter(now=later)  # re-running posts nothing
    start_s, change_s, later_s = to_epoch_s(placed_at), to_epoch_s(changed_at), to_epoch_s(later)
    expected = round_half_up(idle_rate * (change_s - start_s) + busy_rate * (later_s - change_s), 3600)
    assert charged(client, rental_id, headers) == expected


SPOT_ZERO_BID = {"gpus": 1, "tier": "spot", "bid_micros_per_gpu_hour": 0}


def test_a_bid_caps_the_rate_a_running_spot_rental_follows(client, tenant) -> None:
    _, headers = tenant("bidder")
    floor, on_demand = _prices(client)
    idle_rate, busy_rate = spot_formula(floor, on_demand, 125), spot_formula(floor, on_demand, 875)
    bid = (idle_rate + busy_rate) // 2
    spot = client.post(
        "/v1/rentals",
        json={"gpu_model": ASCEND, "gpus": 1, "tier": "spot", "bid_micros_per_gpu_hour": bid},
        headers=headers,
    ).json()
    assert wait_for(client, spot["id"], headers, "placed")["price_micros_per_hour"] == idle_rate
    _fill(client, headers)
    body = _rate_changes(client, spot["id"], headers, 2)
    assert [c["rate_micros_per_hour"] for c in body["rate_changes"]] == [idle_rate, bid]
    assert body["price_micros_per_hour"] == bid < busy_rate
    admin_view = client.get(f"/v1/rentals/{spot['id']}", headers=ADMIN).json()
    assert admin_view["rate_changes"] == body["rate_changes"]


def test_a_spot_rental_whose_bid_falls_below_a_raised_floor_gets_notice_and_ends(database_url) -> None:
    """An admin raises the spot floor above a running rental's bid: the next cycle gives it notice
    (`below_floor`), and at the deadline it is preempted and billed to the deadline."""
    with app_client(
        database_url, meter_interval_s=3600, prepaid=False, preemption_notice_by_tier_s={"spot": 0.3}
    ) as client:
        headers, floor, spot = _spot_above_floor(client)
        raised = client.put(
            "/v1/prices",
            json=[
                {
                    "gpu_model": ASCEND,
                    "tier": "spot",
                    "price_micros_per_gpu_hour": floor + 5000,
                    "effective_from": (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat(),
                }
            ],
            headers=ADMIN,
        )
        assert raised.status_code == 200, raised.text
        ended = wait_for(client, spot["id"], headers, "preempted")
        assert ended["state"] == "preempted", ended["state"]
        notice = [e for e in ended["events"] if e["kind"] == "preempting"]
        assert (
            notice and notice[0]["reason"] == "below_floor" and "below the spot floor" in notice[0]["message"]
        )
        assert "its bid was below the spot floor" in ended["events"][-1]["message"]
        assert ended["notice_deadline"] is not None


def test_a_spot_bid_below_the_floor_waits_and_the_dry_run_says_so(database_url) -> None:
    """A bid below every pool's floor is never placed (it would run at its bid): it waits with
    `bid_below_floor`, and the dry run gives the same answer; at the floor it runs."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        _, headers = _tenant(client)
        floor, _ = _prices(client)
        low = {"gpu_model": ASCEND, "gpus": 1, "tier": "spot", "bid_micros_per_gpu_hour": floor - 1}
        trial = client.post("/v1/rentals/dry-run", json=low, headers=headers).json()
        assert trial["pending_reason"] == "bid_below_floor" and not trial["starts_now"], trial
        assert f"/GPU-h is below the spot floor {money_text(floor)}" in trial["message"]
        held = client.post("/v1/rentals", json=low, headers=headers).json()
        waiting = wait_for(client, held["id"], headers, "placed", reason="bid_below_floor")
        assert waiting["state"] == "pending" and waiting["pending_reason"] == "bid_below_floor", waiting
        at_floor = client.post(
            "/v1/rentals", json={**low, "bid_micros_per_gpu_hour": floor}, headers=headers
        ).json()
        assert wait_for(client, at_floor["id"], headers, "placed")["state"] == "placed"
        assert client.get(f"/v1/rentals/{held['id']}", headers=headers).json()["state"] == "pending"


def test_a_spot_bid_is_placed_only_in_a_pool_whose_floor_it_meets(database_url) -> None:
    """A bid at the Ascend pool's floor, below the H100 pool's, for any 8 GPUs in cn-north: while the Ascend
    node is taken it waits (`bid_below_floor`) rather than run on H100s at less than their floor, and it
    starts on the Ascend node once that frees. It was placed on an H100 node, at its bid, and never given
    notice, since its bid had not fallen below a raised floor."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        _, headers = _tenant(client)
        floor, _ = _prices(client)
        filler = client.post("/v1/rentals", json={"gpu_model": ASCEND, "gpus": 8}, headers=headers).json()
        assert wait_for(client, filler["id"], headers, "placed")["state"] == "placed"
        body = {"gpus": 8, "tier": "spot", "bid_micros_per_gpu_hour": floor, "regions": ["cn-north"]}
        spot = client.post("/v1/rentals", json=body, headers=headers).json()
        waiting = wait_for(client, spot["id"], headers, "placed", reason="bid_below_floor")
        assert waiting["state"] == "pending", waiting
        said = [e["message"] for e in waiting["events"] if e["reason"] == "bid_below_floor"]
        assert said and "of the pools with room now" in said[-1], waiting["events"]
        assert client.post(f"/v1/rentals/{filler['id']}/stop", headers=headers).status_code == 200
        placed = wait_for(client, spot["id"], headers, "placed")
        assert [a["node"] for a in placed["allocation"]] == ["ascend-01"], placed


def _tenant(client: TestClient) -> tuple[str, dict[str, str]]:
    tenant_id = client.post("/v1/tenants", json={"name": "bidder"}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    return tenant_id, {"Authorization": f"Bearer {secret}"}


def _spot_above_floor(client: TestClient) -> tuple[dict[str, str], int, dict]:
    """A new tenant's spot rental of one Ascend GPU bidding just above the spot floor, placed: the tenant's
    headers, the floor, the rental."""
    _, headers = _tenant(client)
    floor, _ = _prices(client)
    spot = {"gpu_model": ASCEND, "gpus": 1, "tier": "spot", "bid_micros_per_gpu_hour": floor + 1000}
    rental = client.post("/v1/rentals", json=spot, headers=headers).json()
    assert wait_for(client, rental["id"], headers, "placed")["state"] == "placed"
    return headers, floor, rental


def _set_floor(client: TestClient, price_micros: int, in_s: float) -> None:
    entry = {"gpu_model": ASCEND, "tier": "spot", "price_micros_per_gpu_hour": price_micros}
    entry["effective_from"] = (datetime.now(UTC) + timedelta(seconds=in_s)).isoformat()
    assert client.put("/v1/prices", json=[entry], headers=ADMIN).status_code == 200


def _events(client: TestClient, rental_id: str, headers: dict[str, str]) -> list[dict]:
    return client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["events"]


def _two_bidders(
    client: TestClient, headers: dict[str, str], low_bid: int, high_bid: int
) -> tuple[dict, dict]:
    """Two spot rentals of 4 GPUs that fill the Ascend node, bidding `low_bid` and `high_bid`, placed."""
    spot = {"gpu_model": ASCEND, "gpus": 4, "tier": "spot"}
    placed = []
    for bid in (low_bid, high_bid):
        posted = client.post("/v1/rentals", json=spot | {"bid_micros_per_gpu_hour": bid}, headers=headers)
        placed.append(wait_for(client, posted.json()["id"], headers, "placed"))
    assert [r["state"] for r in placed] == ["placed", "placed"]
    return placed[0], placed[1]


def test_a_preemptor_takes_what_a_rental_leaving_for_the_floor_frees_and_evicts_no_one_else(
    database_url,
) -> None:
    """Two spot rentals fill the Ascend node, one bidding under a raised floor (notice for 3 s), one above
    it. An on-demand rental that arrives meanwhile is promised what the leaving one frees at its deadline:
    the other is never given notice (it was evicted too, for nothing, and its GPUs left idle)."""
    with app_client(
        database_url, meter_interval_s=3600, prepaid=False, preemption_notice_by_tier_s={"spot": 3}
    ) as client:
        _, headers = _tenant(client)
        floor, _ = _prices(client)
        low, high = _two_bidders(client, headers, floor + 1000, floor + 9000)
        _set_floor(client, floor + 5000, in_s=1.5)
        assert wait_for(client, low["id"], headers, "preempting")["preempted_by"] == "below_floor"
        asked = client.post("/v1/rentals", json={"gpu_model": ASCEND, "gpus": 4}, headers=headers).json()
        placed = wait_for(client, asked["id"], headers, "placed")
        assert placed["state"] == "placed"
        assert placed["allocation"][0]["slices"] == low["allocation"][0]["slices"]  # the GPUs it freed
        ended = client.get(f"/v1/rentals/{low['id']}", headers=headers).json()
        assert ended["state"] == "preempted"
        assert any("leaving for the spot floor" in e["message"] for e in ended["events"])
        kept = client.get(f"/v1/rentals/{high['id']}", headers=headers).json()
        assert kept["state"] == "placed" and not [e for e in kept["events"] if e["kind"] == "preempting"]


def test_a_floor_notice_is_withdrawn_when_the_floor_falls_back_to_the_bid_before_the_deadline(
    database_url,
) -> None:
    """The floor rises above a spot rental's bid (notice for 8 s; prices take effect in whole seconds), then
    falls back below it before the deadline: the notice is withdrawn, the rental runs on, and the event says
    why."""
    with app_client(
        database_url, meter_interval_s=3600, prepaid=False, preemption_notice_by_tier_s={"spot": 8}
    ) as client:
        headers, floor, rental = _spot_above_floor(client)
        _set_floor(client, floor + 5000, in_s=1.5)
        noticed = wait_for(client, rental["id"], headers, "preempting")
        assert noticed["state"] == "preempting"
        agent = register_agent(client, noticed["allocation"][0]["node"])
        beat = {"workloads": [{"rental_id": rental["id"], "state": "running"}]}
        (told,) = client.post("/v1/agents/heartbeat", json=beat, headers=agent).json()["assignments"]
        assert told["notice_cause"] == "spot_floor"  # a workload can tell a raised floor from a higher tier
        _set_floor(client, floor, in_s=1.5)
        back = wait_for(client, rental["id"], headers, "placed")
        assert back["state"] == "placed" and back["notice_deadline"] is None
        assert "the spot floor is no longer above its bid" in back["events"][-1]["message"]
        time.sleep(8)
        scheduler_cycles(client)
        assert client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()["state"] == "placed"


def test_a_tenant_raises_its_spot_bid_and_a_notice_for_the_floor_is_withdrawn(
    database_url, monkeypatch
) -> None:
    """`PUT /v1/rentals/{id}/bid` (`suanli bid`): the floor rises above a running spot rental's bid and it
    gets notice; its tenant raises the bid to meet the floor and it runs on. A bid on an on-demand rental,
    a running one's bid lowered under the floor, or a bid of 0, is refused naming the field; nothing
    changes."""
    with app_client(
        database_url, meter_interval_s=3600, prepaid=False, preemption_notice_by_tier_s={"spot": 8}
    ) as client:
        headers, floor, rental = _spot_above_floor(client)
        url = f"/v1/rentals/{rental['id']}/bid"
        under = client.put(url, json={"bid_micros_per_gpu_hour": floor - 1}, headers=headers)
        assert under.status_code == 400 and under.json()["error"]["field"] == "bid_micros_per_gpu_hour"
        assert "below the spot floor" in under.json()["error"]["message"]
        steady = client.post("/v1/rentals", json={"gpu_model": ASCEND, "gpus": 1}, headers=headers).json()
        refused = client.put(
            f"/v1/rentals/{steady['id']}/bid", json={"bid_micros_per_gpu_hour": 5}, headers=headers
        )
        assert refused.status_code == 400 and "only a spot rental" in refused.json()["error"]["message"]
        for zero in (
            client.put(url, json={"bid_micros_per_gpu_hour": 0}, headers=headers),
            client.post("/v1/rentals", json={**SPOT_ZERO_BID, "gpu_model": ASCEND}, headers=headers),
        ):  # a bid of 0 never meets a floor: refused on a new rental too, not left waiting for ever
            assert zero.status_code == 422 and zero.json()["error"]["field"] == "bid_micros_per_gpu_hour"
        _set_floor(client, floor + 5000, in_s=1.5)
        assert wait_for(client, rental["id"], headers, "preempting")["state"] == "preempting"
        key = headers["Authorization"][7:]
        monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, key))
        price = f"{(floor + 6000) / 1e6:.6f}"
        said = CliRunner().invoke(app, ["bid", rental["id"], price, "--json"])
        assert said.exit_code == 0, said.output
        back = wait_for(client, rental["id"], headers, "placed")
        assert back["state"] == "placed" and back["request"]["bid_micros_per_gpu_hour"] == floor + 6000
        kinds = [e["kind"] for e in back["events"]]
        assert "bid" in kinds and "the spot floor is no longer above its bid" in back["events"][-1]["message"]


def test_a_floor_leaver_whose_preemptor_leaves_goes_back_to_its_floor_notice_and_a_lowered_bid_caps_the_rate(
    database_url,
) -> None:
    """A rental leaving for the floor was taken by an on-demand preemptor, which is then stopped: it goes back
    to its floor notice with its deadline kept (it was withdrawn, then noticed anew with a later deadline its
    agent never heard of). A running rental whose bid is lowered under its rate pays the bid from then on
    (the repricer moves rates by 1% or more, and left it above the bid)."""
    with app_client(
        database_url, meter_interval_s=3600, prepaid=False, preemption_notice_by_tier_s={"spot": 30}
    ) as client:
        _, headers = _tenant(client)
        floor, _ = _prices(client)
        low, high = _two_bidders(client, headers, floor + 1000, floor + 90_000)
        lowered = client.put(
            f"/v1/rentals/{high['id']}/bid", json={"bid_micros_per_gpu_hour": floor + 2000}, headers=headers
        ).json()
        assert lowered["price_micros_per_hour"] <= 4 * (floor + 2000) < high["price_micros_per_hour"]
        _set_floor(client, floor + 1500, in_s=1.5)
        noticed = wait_for(client, low["id"], headers, "preempting")
        asked = client.post("/v1/rentals", json={"gpu_model": ASCEND, "gpus": 4}, headers=headers).json()
        taken = wait_for(client, asked["id"], headers, "placed", reason="preempting")
        assert taken["pending_reason"] == "preempting"
        assert client.post(f"/v1/rentals/{asked['id']}/stop", headers=headers).status_code == 200
        scheduler_cycles(client)
        back = client.get(f"/v1/rentals/{low['id']}", headers=headers).json()
        assert back["state"] == "preempting" and back["preempted_by"] == "below_floor"
        assert back["notice_deadline"] == noticed["notice_deadline"]
        assert "it still leaves for the spot floor" in back["events"][-1]["message"]
