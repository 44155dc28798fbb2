"""`GET /v1/rentals?updated_after=` (SQLite and PostgreSQL): only the rentals changed at or after a moment,
so a client that shows many (the console) reads again only what changed, not every page it shows. A bad
moment is refused naming `updated_after`; the SDK's `rentals(updated_after=)` sends it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from fastapi.testclient import TestClient

from conftest import ADMIN, logged_in_as, make_tenant, meter_pass_at, replayed, scheduler_cycles, wait_for

BODY = {"gpu_model": "L40S", "gpus": 1, "command": ["true"], "name": "changes"}


def ids(answer) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [r["id"] for r in answer.json()]


def test_only_the_rentals_changed_since_a_moment_come(client: TestClient, tenant) -> None:
    """Before, the filter was not there and every rental came (4 of 4): a refresh re-read all it showed. Now
    an older rental stopped after the moment comes alone, in its new state; paging keeps the filter; an
    admin sees another tenant's change too."""
    _, alice = tenant("alice-changes")
    _, bob = tenant("bob-changes")
    made = [client.post("/v1/rentals", json=BODY, headers=alice).json()["id"] for _ in range(4)]
    theirs = client.post("/v1/rentals", json=BODY, headers=bob).json()["id"]
    for rental_id in made:
        wait_for(client, rental_id, alice, "placed")
    scheduler_cycles(client)  # nothing more happens to them by itself: no agent runs them
    before = {r["id"]: r for r in client.get("/v1/rentals", headers=alice).json()}
    assert set(before) == set(made) and all(r["state"] == "placed" for r in before.values())

    moment = datetime.now(UTC)
    assert ids(client.get("/v1/rentals", params={"updated_after": moment.isoformat()}, headers=alice)) == []
    older = made[1]  # not the newest: on an older page of a table of many
    assert client.post(f"/v1/rentals/{older}/stop", headers=alice).status_code == 200
    client.post(f"/v1/rentals/{theirs}/stop", headers=bob)

    changed = client.get("/v1/rentals", params={"updated_after": moment.isoformat()}, headers=alice)
    assert ids(changed) == [older] and changed.json()[0]["state"] == "stopped"
    assert "link" not in changed.headers
    in_tokyo = moment.astimezone(timezone(timedelta(hours=9))).isoformat()  # the same moment
    assert ids(client.get("/v1/rentals", params={"updated_after": in_tokyo}, headers=alice)) == [older]
    later = (moment + timedelta(hours=1)).isoformat()
    assert ids(client.get("/v1/rentals", params={"updated_after": later}, headers=alice)) == []
    earlier = (moment - timedelta(hours=1)).isoformat()
    first = client.get("/v1/rentals", params={"updated_after": earlier, "limit": 2}, headers=alice)
    assert len(ids(first)) == 2 and "updated_after=" in first.links["next"]["url"]  # the Link keeps it
    rest = ids(client.get(first.links["next"]["url"], headers=alice))
    assert sorted(ids(first) + rest) == sorted(made)  # every one changed within the hour, each once
    everyone = client.get("/v1/rentals", params={"updated_after": moment.isoformat()}, headers=ADMIN)
    assert set(ids(everyone)) == {older, theirs}
    untouched = {r["id"]: r for r in client.get("/v1/rentals", headers=alice).json() if r["id"] != older}
    assert untouched == {k: v for k, v in before.items() if k != older}  # those left out did not change


def test_a_charge_the_meter_posts_is_a_change(database_url: str) -> None:
    """What a rental was charged is shown with it, but a charge is a ledger row, not a change of the rental's
    row: the meter stamps the rentals it charged (in `rental_charge_stamps`), so a refresh reads their new
    amount. A live rental's first charge stamps it, later ones at most every `CHARGE_RESTAMP_S` (each stamp is
    a write, for every live rental on every meter pass), and its final one always (billing closed)."""
    start = datetime(2026, 11, 10, 12, tzinfo=UTC)
    with replayed(database_url, start) as (client, clock):
        tenant_id, headers = make_tenant(client, "charged-changes")
        credit = {"amount_micros": 1_000_000_000}
        assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
        rental = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 1}, headers=headers).json()
        wait_for(client, rental["id"], headers, "placed")
        scheduler_cycles(client)
        moment = {"updated_after": datetime.now(UTC).isoformat()}
        assert ids(client.get("/v1/rentals", params=moment, headers=headers)) == []
        meter_pass_at(client, clock, start + timedelta(minutes=15))
        changed = client.get("/v1/rentals", params=moment, headers=headers)
        assert ids(changed) == [rental["id"]] and changed.json()[0]["charged_micros"] > 0
        first_charge = changed.json()[0]["charged_micros"]

        moment = {"updated_after": datetime.now(UTC).isoformat()}
        meter_pass_at(client, clock, start + timedelta(minutes=30))  # within CHARGE_RESTAMP_S of the stamp
        assert ids(client.get("/v1/rentals", params=moment, headers=headers)) == []
        shown = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
        assert shown["charged_micros"] > first_charge  # charged, only not stamped again yet

        assert client.post(f"/v1/rentals/{rental['id']}/stop", headers=headers).status_code == 200
        seen = client.get("/v1/rentals", params=moment, headers=headers).json()  # the stop stamped it
        assert [(r["id"], r["state"]) for r in seen] == [(rental["id"], "stopped")]
        moment = {"updated_after": datetime.now(UTC).isoformat()}
        meter_pass_at(client, clock, start + timedelta(minutes=45))  # a final charge closes its billing
        final = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()["charged_micros"]
        later = client.get("/v1/rentals", params=moment, headers=headers).json()
        # a refresh after the stop showed its charge then; any change since comes with the next
        assert final == seen[0]["charged_micros"] or [r["charged_micros"] for r in later] == [final]


def test_a_bad_moment_is_refused_naming_updated_after(client: TestClient, tenant) -> None:
    """Not a moment, or one without its UTC offset (whose clock?): a 422 naming the field."""
    _, alice = tenant("alice-bad-moment")
    for bad in ("yesterday", "2026-12-07T10:00:00", "", "2026-13-01T00:00:00Z"):
        answer = client.get("/v1/rentals", params={"updated_after": bad}, headers=alice)
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["error"]["field"] == "updated_after", answer.text


def test_the_sdk_asks_for_what_changed(client: TestClient, tenant) -> None:
    _, alice = tenant("alice-sdk-changes")
    key = alice["Authorization"].split()[1]
    made = [client.post("/v1/rentals", json=BODY, headers=alice).json()["id"] for _ in range(2)]
    for rental_id in made:
        wait_for(client, rental_id, alice, "placed")
    scheduler_cycles(client)
    moment = datetime.now(UTC)
    client.post(f"/v1/rentals/{made[0]}/stop", headers=alice)
    with logged_in_as(client, key)() as sdk:
        assert [r.id for r in sdk.rentals(updated_after=moment)] == [made[0]]
        assert {r.id for r in sdk.rentals(updated_after=moment - timedelta(hours=1))} == set(made)


def test_the_openapi_document_describes_updated_after(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/rentals"]["get"]
    updated_after = next(p for p in operation["parameters"] if p["name"] == "updated_after")
    assert "changed at or after this moment" in updated_after["description"]
