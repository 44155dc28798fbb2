"""Webhooks through the real app and its delivery loop, to a receiver on loopback (SQLite and PostgreSQL):
signed, in order, at least once across a failure, only the tenant's own rentals' events."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ADMIN, app_client, wait_for
from suanli.app.errors import Invalid
from suanli.app.webhooks import backoff_s, check_url
from suanli.loops.webhook_loop import Refused, checked_addresses


class Receiver:
    """An HTTP endpoint that fails its first `failing` requests with 500 and keeps every body it got."""

    def __init__(self, failing: int, delay_s: float = 0.0) -> None:
        self.failing, self.got = failing, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                time.sleep(delay_s)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append((self.headers["X-Suanli-Signature"], body))
                status = 500 if len(receiver.got) <= receiver.failing else 204
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict]:
        """Every event of the deliveries it answered 2xx, in the order they came."""
        return [e for _, body in self.got[self.failing :] for e in json.loads(body)["events"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(failing=1)
    yield found
    found.close()


@pytest.fixture
def picky() -> Iterator[Receiver]:
    found = Receiver(failing=0)
    yield found
    found.close()


def _tenant(client, name: str) -> dict[str, str]:
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    return {"Authorization": f"Bearer {secret}"}


def test_a_tenants_rental_events_reach_its_webhook_signed_in_order_and_again_after_a_failure(
    database_url: str, receiver: Receiver, picky: Receiver
) -> None:
    # the backoff after the first failure is FIRST_RETRY_S; the loop runs every 0.1 s here
    with app_client(database_url, webhook_private_ok=True, webhook_interval_s=0.1) as client:
        owner, other = _tenant(client, "owner"), _tenant(client, "other")
        made = client.post("/v1/webhooks", json={"url": receiver.url}, headers=owner)
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
        assert secret.startswith("whsec_") and made.json()["events"] == []
        only = {"url": picky.url, "events": ["stopped", "placed", "stopped"]}
        filtered = client.post("/v1/webhooks", json=only, headers=owner)
        assert filtered.status_code == 201 and filtered.json()["events"] == ["placed", "stopped"]
        body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
        rental = client.post("/v1/rentals", json=body, headers=owner).json()
        theirs = client.post("/v1/rentals", json=body, headers=other).json()
        wait_for(client, rental["id"], owner, "placed")
        wait_for(client, theirs["id"], other, "placed")
        client.post(f"/v1/rentals/{rental['id']}/stop", headers=owner)

        deadline = time.monotonic() + backoff_s(1) + 20
        delivered: list[dict] = []
        while time.monotonic() < deadline:
            delivered = [e for _, b in receiver.got[1:] for e in json.loads(b)["events"]]
            if any(e["kind"] == "stopped" for e in delivered):
                break
            time.sleep(0.1)
        failed_try = json.loads(receiver.got[0][1])["events"]
        assert [e["id"] for e in delivered[: len(failed_try)]] == [e["id"] for e in failed_try]  # sent again
        assert [e["kind"] for e in delivered] == ["created", "placed", "stopped"]
        wait_until = time.monotonic() + 10  # the filtered one gets only its kinds, of the same events
        while time.monotonic() < wait_until and len(picky.events()) < 2:
            time.sleep(0.1)
        assert [(e["id"], e["kind"]) for e in picky.events()] == [
            (e["id"], e["kind"]) for e in delivered if e["kind"] != "created"
        ]
        assert {e["rental_id"] for e in delivered} == {rental["id"]}  # never another tenant's
        ids = [e["id"] for e in delivered]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        for sent, raw in receiver.got:  # each try signed with the moment it was sent
            sent_at, _, digest = sent.removeprefix("t=").partition(",sha256=")
            assert abs(int(sent_at) - time.time()) < 60
            signed = f"{sent_at}.".encode() + raw
            assert hmac.compare_digest(digest, hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest())
        assert len({sent for sent, _ in receiver.got}) == len(receiver.got)  # a retry is signed anew

        shown, shown_filtered = client.get("/v1/webhooks", headers=owner).json()
        assert shown_filtered["events"] == ["placed", "stopped"]
        assert client.delete(f"/v1/webhooks/{shown_filtered['id']}", headers=owner).status_code == 200
        assert shown["secret"] is None and shown["failures"] == 0 and shown["delivered_at"] is not None
        assert client.get("/v1/webhooks", headers=other).json() == []
        assert client.delete(f"/v1/webhooks/{shown['id']}", headers=other).status_code == 404
        assert client.delete(f"/v1/webhooks/{shown['id']}", headers=owner).status_code == 200
        assert client.get("/v1/webhooks", headers=owner).json() == []


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "https://",
        "https://user:pw@example.com/x",
        "not a url",
        "http://[::1",  # a 500 before
        "http://example.com:99999/x",
    ],
    ids=str,
)
def test_a_webhook_url_that_cannot_be_one_is_refused_naming_it(client, tenant, url: str) -> None:
    _, headers = tenant("hooked")
    refused = client.post("/v1/webhooks", json={"url": url}, headers=headers)
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "url", refused.text
    with pytest.raises(Invalid):
        check_url(url)


def test_an_unknown_event_kind_is_refused_naming_it_and_the_kinds(client, tenant) -> None:
    _, headers = tenant("hooked")
    body = {"url": "https://example.com/hook", "events": ["stopped", "finished"]}
    refused = client.post("/v1/webhooks", json=body, headers=headers)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == "events" and "'finished'" in error["message"]
    assert "preempting" in error["message"]  # the kinds it takes
    assert client.get("/v1/webhooks", headers=headers).json() == []  # nothing made


def test_a_webhook_to_the_servers_own_network_is_refused_unless_allowed() -> None:
    for host in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "localhost"):
        with pytest.raises(Refused, match=r"^refused: "):
            checked_addresses(host, 80)
    assert checked_addresses("8.8.8.8", 443) == ["8.8.8.8"]
    assert backoff_s(1) == 5.0 and backoff_s(3) == 20.0 and backoff_s(30) == 600.0


def test_the_loop_sends_only_events_whose_lower_ids_are_all_committed(monkeypatch) -> None:
    """The watermark: the newest event id seen `SETTLE_S` ago, not the newest now (a lower id can still be
    in an open transaction)."""
    from suanli.loops import webhook_loop

    clock, newest = [100.0], [7]

    class Ids:
        def last_event_id(self) -> int:
            return newest[0]

    monkeypatch.setattr(webhook_loop.time, "monotonic", lambda: clock[0])
    loop = webhook_loop.WebhookLoop(Ids(), None, 1.0)  # type: ignore[arg-type]
    assert loop.settled_through() is None  # nothing seen long enough ago yet
    clock[0], newest[0] = 103.0, 9
    assert loop.settled_through() is None
    clock[0], newest[0] = 105.0, 12
    assert loop.settled_through() == 7  # seen at 100
    clock[0], newest[0] = 108.5, 15
    assert loop.settled_through() == 9  # seen at 103; 12 (at 105) is not settled yet
    loop.http.close()


def test_slow_receivers_hold_their_own_webhook_not_the_others(monkeypatch) -> None:
    """A pass posted to each webhook in turn (5 s timeout each): three receivers answering after 1 s held a
    fast one's delivery 3 s; side by side it waits for the slowest, about 1 s."""
    from suanli.loops import webhook_loop

    slow = [Receiver(failing=0, delay_s=1.0) for _ in range(3)]
    fast = Receiver(failing=0)
    got: dict[str, float] = {}
    started = time.monotonic()

    class Batches:
        def last_event_id(self) -> int:
            return 1

        def batches(self, through: int):
            hooks = [*slow, fast]
            return [(Hook(f"wh_{i}", r.url, "whsec_x"), [{"id": 1}]) for i, r in enumerate(hooks)]

        def delivered(self, webhook_id: str, events, through: int) -> None:
            got[webhook_id] = time.monotonic() - started

        def failed(self, webhook, error: str):
            raise AssertionError(f"{webhook.id}: {error}")

    class Hook:
        def __init__(self, id: str, url: str, secret: str) -> None:
            self.id, self.url, self.secret = id, url, secret

    monkeypatch.setattr(webhook_loop, "payload", lambda webhook, events: b"{}")
    loop = webhook_loop.WebhookLoop(Batches(), None, 1.0, private_ok=True)  # type: ignore[arg-type]
    monkeypatch.setattr(loop, "settled_through", lambda: 1)
    try:
        loop.work()
        assert set(got) == {"wh_0", "wh_1", "wh_2", "wh_3"} and fast.got
        assert time.monotonic() - started < 2.5, got  # not 3 s and more, one slow receiver after another
    finally:
        loop.senders.shutdown()
        loop.http.close()
        for receiver in [*slow, fast]:
            receiver.close()


def test_a_filtered_webhook_moves_past_events_it_does_not_get(database_url: str, monkeypatch) -> None:
    """Its cursor does not stay behind a long run of other kinds (each pass would read them all again);
    a delivery short of a full batch moves it to the watermark it was read under."""
    from suanli.app import webhooks

    monkeypatch.setattr(webhooks, "SKIP_GAP", 2)
    with app_client(database_url, webhook_private_ok=True, webhook_interval_s=3600) as client:
        owner = _tenant(client, "owner")
        service = client.app.state.services.webhooks
        only_failures = {"url": "http://127.0.0.1:9/x", "events": ["failed"]}
        made = client.post("/v1/webhooks", json=only_failures, headers=owner)
        body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
        rental = client.post("/v1/rentals", json=body, headers=owner).json()
        wait_for(client, rental["id"], owner, "placed")
        through = service.last_event_id()
        assert service.batches(through) == []  # created, placed: none it gets
        with service.uow() as uow:
            assert uow.webhooks.get(made.json()["id"]).after_event_id == through


def test_a_webhook_changes_its_kinds_and_url_keeping_its_secret_and_cursor(
    database_url: str, picky: Receiver
) -> None:
    with app_client(database_url, webhook_private_ok=True, webhook_interval_s=0.1) as client:
        owner, other = _tenant(client, "owner"), _tenant(client, "other")
        made = client.post("/v1/webhooks", json={"url": "https://example.com/x"}, headers=owner).json()
        path = f"/v1/webhooks/{made['id']}"
        assert client.patch(path, json={"events": ["stopped"]}, headers=other).status_code == 404
        refused = client.patch(path, json={"events": ["stoped"]}, headers=owner)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "events"
        bad_url = client.patch(path, json={"url": "ftp://example.com/x"}, headers=owner)
        assert bad_url.status_code == 400 and bad_url.json()["error"]["field"] == "url"
        changed = client.patch(path, json={"url": picky.url, "events": ["stopped"]}, headers=owner)
        assert changed.status_code == 200, changed.text
        assert changed.json()["url"] == picky.url and changed.json()["events"] == ["stopped"]
        assert changed.json()["secret"] is None
        body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
        rental = client.post("/v1/rentals", json=body, headers=owner).json()
        wait_for(client, rental["id"], owner, "placed")
        client.post(f"/v1/rentals/{rental['id']}/stop", headers=owner)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not picky.events():
            time.sleep(0.1)
        assert [(e["rental_id"], e["kind"]) for e in picky.events()] == [(rental["id"], "stopped")]
        every = client.patch(path, json={"events": []}, headers=owner).json()  # back to every kind
        assert every["events"] == [] and every["url"] == picky.url


UNSENDABLE_URLS = [
    "http://127.0.0.1:9/hook\r\nX: 1",  # header injection: urlsplit drops the CR LF, httpx refuses it
    "https://example.com/a\tb",
    "https://example.com/a\x7fb",
    "https://\u2603.example/hook",  # not a valid IDNA host name
    "https://xn--zz.example/hook",  # not a valid A-label
]


@pytest.mark.parametrize("url", UNSENDABLE_URLS, ids=ascii)
def test_a_webhook_url_the_sender_cannot_send_to_is_refused_naming_it(client, tenant, url: str) -> None:
    """These passed `urlsplit` and were stored (201), then raised in the sender on every pass."""
    _, headers = tenant("hooked")
    refused = client.post("/v1/webhooks", json={"url": url}, headers=headers)
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "url", refused.text
    made = client.post("/v1/webhooks", json={"url": "https://example.com/hook"}, headers=headers).json()
    patched = client.patch(f"/v1/webhooks/{made['id']}", json={"url": url}, headers=headers)
    assert patched.status_code == 400 and patched.json()["error"]["field"] == "url", patched.text
    assert [w["url"] for w in client.get("/v1/webhooks", headers=headers).json()] == [made["url"]]


def test_a_webhook_that_cannot_be_sent_fails_alone_and_others_are_delivered_once(
    database_url: str, picky: Receiver
) -> None:
    """A stored URL the sender raises on (one kept from before the check) aborted every pass: other
    tenants' webhooks got the same events again each pass and were never marked delivered."""
    with app_client(database_url, webhook_private_ok=True, webhook_interval_s=0.1) as client:
        careless, other = _tenant(client, "careless"), _tenant(client, "other")
        service = client.app.state.services.webhooks
        bad = client.post("/v1/webhooks", json={"url": "https://example.com/x"}, headers=careless).json()
        with service.uow() as uow:
            uow.webhooks.change(bad["id"], UNSENDABLE_URLS[0], ())
            uow.commit()
        good = [client.post("/v1/webhooks", json={"url": picky.url}, headers=other).json() for _ in range(3)]
        body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
        for headers in (careless, other):
            rental = client.post("/v1/rentals", json=body, headers=headers).json()
            wait_for(client, rental["id"], headers, "placed")

        def sent() -> list[tuple[str, int, str]]:
            """(webhook, event id, kind) of every event the receiver got, in the order it came."""
            deliveries = [json.loads(raw) for _, raw in picky.got]
            return [(d["webhook_id"], e["id"], e["kind"]) for d in deliveries for e in d["events"]]

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(kind == "placed" for *_, kind in sent()) < len(good):
            time.sleep(0.1)
        time.sleep(1.0)  # passes enough to send each batch again if it were not marked delivered
        assert len(set(sent())) == len(sent()), sent()  # no event twice to a webhook
        assert sorted((hook, kind) for hook, _, kind in sent()) == sorted(
            (w["id"], kind) for w in good for kind in ("created", "placed")
        )
        shown = {w["id"]: w for w in client.get("/v1/webhooks", headers=other).json()}
        assert all(w["delivered_at"] is not None and w["failures"] == 0 for w in shown.values())
        (failing,) = client.get("/v1/webhooks", headers=careless).json()
        assert failing["failures"] >= 1 and failing["retry_at"] is not None
        assert "InvalidURL" in failing["last_error"], failing
