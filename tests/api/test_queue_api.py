"""The backfill queue through the real app (SQLite and PostgreSQL): the rental at the head of the queue shows
when capacity is reserved for it, in the API and in `suanli ls` / `suanli show`."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from typer.testing import CliRunner

from conftest import ADMIN, WAIT_S, app_client, logged_in_as, scheduler_cycles, wait_for
from suanli.api.wiring import SERVER_QUEUES
from suanli.cli import platform_commands
from suanli.cli.main import app

H200 = {"gpu_model": "H200-141GB", "gpus": 8}  # the example fleet's one H200 node


def _placed_at(body: dict) -> datetime:
    (placed,) = [e for e in body["events"] if e["kind"] == "placed"]
    return datetime.fromisoformat(placed["at"])


def _tenant(client, name: str = "q") -> tuple[dict, dict, Callable[..., str]]:
    """A funded tenant: its key, its auth headers, and a function that rents the H200 node for it."""
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    headers = {"Authorization": f"Bearer {secret['secret']}"}

    def rent(**body) -> str:
        response = client.post("/v1/rentals", json={**H200, **body}, headers=headers)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    return secret, headers, rent


def test_the_head_of_the_queue_shows_when_it_starts_at_the_latest(database_url: str, monkeypatch) -> None:
    """`first` holds the H200 node for at most 1 h; `second` waits at the head of the queue and shows
    first's placement + 1 h (as does the metrics gauge); `third`, behind it, shows nothing. When `first`
    stops, `second` is placed and no longer shows a start, and `third` heads the queue."""
    with app_client(database_url, queue="backfill") as client:
        secret, headers, rent = _tenant(client)

        first = rent(max_duration_s=3600)
        placed = wait_for(client, first, headers, "placed")
        assert placed["state"] == "placed" and placed["expected_start_at"] is None
        second = rent(max_duration_s=600)
        head = wait_for(client, second, headers, "placed", reason="no_capacity")
        assert head["pending_reason"] == "no_capacity"
        third = rent()  # no declared duration: never passes the head
        behind = wait_for(client, third, headers, "placed", reason="blocked_by_head")
        assert behind["pending_reason"] == "blocked_by_head" and behind["expected_start_at"] is None

        head = client.get(f"/v1/rentals/{second}", headers=headers).json()
        expected = datetime.fromisoformat(head["expected_start_at"])
        assert abs(expected - (_placed_at(placed) + timedelta(hours=1))) < timedelta(seconds=1)

        metrics = client.get("/metrics").text
        (line,) = [
            x for x in metrics.splitlines() if x.startswith("suanli_queue_head_start_timestamp_seconds")
        ]
        assert abs(float(line.split()[1]) - expected.timestamp()) < 1

        monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, secret["secret"]))
        runner, env = CliRunner(), {"COLUMNS": "200"}
        shown = runner.invoke(app, ["show", second], env=env)
        assert shown.exit_code == 0, shown.output
        assert f"pending: no_capacity, starts by {expected:%Y-%m-%d %H:%M} UTC" in shown.output
        listed = runner.invoke(app, ["ls"], env=env)
        assert listed.exit_code == 0 and f"starts by {expected:%Y-%m-%d %H:%M} UTC" in listed.output

        assert client.post(f"/v1/rentals/{first}/stop", headers=headers).status_code == 200
        started = wait_for(client, second, headers, "placed")
        assert started["state"] == "placed" and started["expected_start_at"] is None
        # `third` heads the queue now, reserved for when `second` ends at its declared 10 min
        deadline = _placed_at(started) + timedelta(minutes=10)
        shown = _with_expected_start(client, third, headers)["expected_start_at"]
        assert shown is not None and abs(datetime.fromisoformat(shown) - deadline) < timedelta(seconds=1)


def test_the_conservative_queue_shows_every_booked_start(database_url: str) -> None:
    """Under `SUANLI_QUEUE=conservative` every pending rental is booked: `second` for when `first` ends at
    its declared 1 h, `third` (no declared duration) for when `second` ends 10 min later; a short rental that
    could run now but would overlap `second`'s booking waits its turn. The server's queue books them all
    even while no GPU is free (a replay skips those bookings, which start nothing)."""
    assert SERVER_QUEUES["conservative"].book_when_full
    with app_client(database_url, queue="conservative") as client:
        _, headers, rent = _tenant(client)

        first = rent(max_duration_s=3600)
        placed = wait_for(client, first, headers, "placed")
        second, third = rent(max_duration_s=600), rent()
        for rental in (second, third):
            wait_for(client, rental, headers, "placed", reason="no_capacity")
        ends = _placed_at(placed) + timedelta(hours=1)
        for rental, start in ((second, ends), (third, ends + timedelta(minutes=10))):
            shown = _with_expected_start(client, rental, headers)
            assert shown["state"] == "pending" and shown["pending_reason"] == "no_capacity"
            assert abs(datetime.fromisoformat(shown["expected_start_at"]) - start) < timedelta(seconds=1)

        assert client.post(f"/v1/rentals/{first}/stop", headers=headers).status_code == 200
        started = wait_for(client, second, headers, "placed")
        assert started["state"] == "placed" and started["expected_start_at"] is None


def test_a_start_shown_moves_later_at_once_when_a_rental_ranked_ahead_arrives(database_url: str) -> None:
    """a's `second` is booked for when a's `first` ends; b, which holds nothing, asks for 30 s and ranks
    ahead of it by fair share: `second`'s shown start moves 30 s later at once (it says "starts by": written
    only on a move of a minute or more before, the earlier one stayed while the message said the later)."""
    with app_client(database_url, queue="conservative") as client:
        _, headers, rent = _tenant(client, "a")
        _, b_headers, b_rent = _tenant(client, "b")
        first = rent(max_duration_s=3600)
        ends = _placed_at(wait_for(client, first, headers, "placed")) + timedelta(hours=1)
        second = rent(max_duration_s=600)
        shown = _with_expected_start(client, second, headers)["expected_start_at"]
        assert abs(datetime.fromisoformat(shown) - ends) < timedelta(seconds=1)

        ahead = b_rent(max_duration_s=30)
        booked = _with_expected_start(client, ahead, b_headers)["expected_start_at"]
        assert abs(datetime.fromisoformat(booked) - ends) < timedelta(seconds=1)
        later = ends + timedelta(seconds=30)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            body = client.get(f"/v1/rentals/{second}", headers=headers).json()
            if abs(datetime.fromisoformat(body["expected_start_at"]) - later) < timedelta(seconds=1):
                break
            time.sleep(0.05)
        assert abs(datetime.fromisoformat(body["expected_start_at"]) - later) < timedelta(seconds=1), body
        assert f"booked to start by {later:%Y-%m-%d %H:%M:%S}" in body["pending_message"], body


def test_metrics_show_the_gpus_left_in_pieces_too_small_for_the_queue(database_url: str) -> None:
    """7 of the H200 node's 8 GPUs are rented; a 2-GPU H200 rental waits: its one free GPU is scattered
    (the other nodes' free GPUs are of other models, so no piece of anything the queue asks for)."""

    def scattered(client) -> float:
        lines = client.get("/metrics").text.splitlines()
        (line,) = [x for x in lines if x.startswith("suanli_gpus_scattered ")]
        return float(line.split()[1])

    with app_client(database_url) as client:
        _, headers, rent = _tenant(client)
        seven = rent(gpus=7)
        assert wait_for(client, seven, headers, "placed")["state"] == "placed"
        assert scattered(client) == 0.0
        pair = rent(gpus=2)
        assert wait_for(client, pair, headers, "placed", reason="no_capacity")["state"] == "pending"
        deadline = time.monotonic() + WAIT_S
        while scattered(client) != 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scattered(client) == 1.0


def _with_expected_start(client, rental_id: str, headers: dict[str, str]) -> dict:
    """The rental once it shows an expected start (or as it is after `WAIT_S`)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        body = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        if body["expected_start_at"] is not None or time.monotonic() > deadline:
            return body
        time.sleep(0.02)


def test_free_gpus_drained_for_a_blocked_head_are_not_counted_scattered(database_url: str) -> None:
    """Under backfill, 7 of the H200 node's 8 GPUs run to a time limit and a 2-GPU rental waits: its one
    free GPU is drained for that head, not a piece no one fits. The gauge counted it scattered whenever
    nothing else waited (the cycle then skips the reservation the leader works out for itself)."""

    def scattered(client) -> float:
        lines = client.get("/metrics").text.splitlines()
        (line,) = [x for x in lines if x.startswith("suanli_gpus_scattered ")]
        return float(line.split()[1])

    with app_client(database_url, queue="backfill") as client:
        _, headers, rent = _tenant(client)
        seven = rent(gpus=7, max_duration_s=3600)
        assert wait_for(client, seven, headers, "placed")["state"] == "placed"
        pair = rent(gpus=2)
        assert wait_for(client, pair, headers, "placed", reason="no_capacity")["state"] == "pending"
        assert _with_expected_start(client, pair, headers)["expected_start_at"] is not None
        scheduler_cycles(client)
        assert scattered(client) == 0.0
