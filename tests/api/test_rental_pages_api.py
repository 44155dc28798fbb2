"""`GET /v1/rentals` a page at a time (SQLite and PostgreSQL): at most `limit` past the cursor `after` (the
last rental of the page before), a `Link: <...>; rel="next"` header while more follow; a cursor the caller
cannot see is refused naming `after`. The SDK's `rentals()` and `suanli ls` follow the pages."""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import suanli.client.client as client_module
from conftest import ADMIN, AppTransport, logged_in_as
from suanli.cli import platform_commands
from suanli.cli.main import app

BODY = {"gpu_model": "L40S", "gpus": 1, "command": ["true"], "name": "paged"}


def walk(client: TestClient, url: str, headers: dict[str, str]) -> list[list[str]]:
    """The ids of each page from `url` on, following the Link headers to the last page."""
    pages = []
    while url:
        answer = client.get(url, headers=headers)
        assert answer.status_code == 200, answer.text
        pages.append([r["id"] for r in answer.json()])
        url = answer.links.get("next", {}).get("url")
    return pages


def test_rentals_come_a_page_at_a_time_with_a_link_to_the_next(client: TestClient, tenant) -> None:
    """Past the newest 1,000 a rental could not be listed at all: no cursor. Now 7 rentals come as pages of
    3, 3 and 1 following the Link (its filters kept), each once, in the whole list's order; a rental made
    while paging does not shift the pages that follow."""
    _, alice = tenant("alice-pages")
    _, bob = tenant("bob-pages")
    made = [client.post("/v1/rentals", json=BODY, headers=alice).json()["id"] for _ in range(7)]
    theirs = client.post("/v1/rentals", json=BODY, headers=bob).json()["id"]

    whole = client.get("/v1/rentals", headers=alice)
    assert whole.status_code == 200 and "link" not in whole.headers  # all of them: no next page
    newest_first = [r["id"] for r in whole.json()]
    assert sorted(newest_first) == sorted(made)

    states = "&".join(f"state={s}" for s in ("pending", "placed", "starting", "running", "stopped"))
    filtered = client.get(f"/v1/rentals?limit=1&{states}", headers=alice).links["next"]["url"]
    assert states in filtered  # the next page keeps the filters of this one, each state
    first = client.get("/v1/rentals?limit=3&name=paged", headers=alice)
    link = first.links["next"]["url"]
    assert f"after={newest_first[2]}" in link and "limit=3" in link and "name=paged" in link
    newer = client.post("/v1/rentals", json=BODY, headers=alice).json()["id"]  # made while paging
    pages = [[r["id"] for r in first.json()], *walk(client, link, alice)]
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [i for page in pages for i in page] == newest_first  # each once, not `newer`, not bob's
    assert [r["id"] for r in client.get("/v1/rentals?limit=1", headers=alice).json()] == [newer]
    exactly = client.get(f"/v1/rentals?limit=1&after={newest_first[-2]}", headers=alice)
    assert [r["id"] for r in exactly.json()] == [newest_first[-1]] and "link" not in exactly.headers

    admins = [i for page in walk(client, "/v1/rentals?limit=2", ADMIN) for i in page]
    assert set(admins) == {*made, newer, theirs} and len(admins) == 9  # an admin: everyone's, each once
    after_bobs = client.get(f"/v1/rentals?after={theirs}", headers=ADMIN)
    assert after_bobs.status_code == 200  # an admin may page past any tenant's rental


def test_a_cursor_the_caller_cannot_see_is_refused_naming_after(client: TestClient, tenant) -> None:
    """An unknown id, another tenant's rental or a malformed one: a 4xx naming `after`, the same answer for
    another's as for none (it says nothing of another tenant's rentals)."""
    _, alice = tenant("alice-cursor")
    _, bob = tenant("bob-cursor")
    client.post("/v1/rentals", json=BODY, headers=alice)
    theirs = client.post("/v1/rentals", json=BODY, headers=bob).json()["id"]
    refused = {}
    for cursor in ("rnt_no_such_rental", theirs):
        answer = client.get("/v1/rentals", params={"after": cursor}, headers=alice)
        assert answer.status_code == 400 and answer.json()["error"]["field"] == "after", answer.text
        refused[cursor] = answer.json()["error"]["message"].replace(cursor, "ID")
    assert refused["rnt_no_such_rental"] == refused[theirs] == "no rental ID to list past"
    for bad in ("", "x" * 41):
        answer = client.get("/v1/rentals", params={"after": bad}, headers=alice)
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "after", answer.text
    for bad in ("0", "1001"):
        answer = client.get("/v1/rentals", params={"limit": bad}, headers=alice)
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "limit", answer.text


def test_the_openapi_document_describes_the_rentals_cursor(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/rentals"]["get"]
    after = next(p for p in operation["parameters"] if p["name"] == "after")
    assert "the last rental of the page before" in after["description"]
    assert 'rel="next"' in operation["description"]


class Recorded(httpx.BaseTransport):
    """The in-process app's transport, keeping the query of each `GET /v1/rentals` sent through it."""

    def __init__(self, client: TestClient) -> None:
        self.inner, self.queries = AppTransport(client), []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/rentals":
            self.queries.append(dict(request.url.params.multi_items()))
        return self.inner.handle_request(request)


def test_the_sdk_and_ls_follow_the_pages_past_the_first(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK asked once, for at most 1,000, and `suanli ls -n` stopped at 1,000: now both follow the Link
    from page to page (pages of 2 here) to every rental, or the newest `limit`."""
    _, alice = tenant("alice-sdk-pages")
    key = alice["Authorization"].split()[1]
    made = [client.post("/v1/rentals", json=BODY, headers=alice).json()["id"] for _ in range(5)]
    newest_first = [r["id"] for r in client.get("/v1/rentals", headers=alice).json()]
    assert sorted(newest_first) == sorted(made)
    monkeypatch.setattr(client_module, "RENTALS_PAGE_LIMIT", 2)  # three pages for 5 rentals

    recorded = Recorded(client)
    with logged_in_as(client, key, transport=recorded)() as sdk:
        assert [r.id for r in sdk.rentals()] == newest_first
        assert recorded.queries == [
            {"limit": "2"},
            {"limit": "2", "after": newest_first[1]},  # the Link's cursor: the page's last rental
            {"limit": "2", "after": newest_first[3]},
        ]
        recorded.queries.clear()
        assert [r.id for r in sdk.rentals(name="paged", limit=3)] == newest_first[:3]
        assert recorded.queries == [
            {"name": "paged", "limit": "2"},
            {"name": "paged", "limit": "1", "after": newest_first[1]},
        ]
        assert [r.id for r in sdk.rentals(after=newest_first[2])] == newest_first[3:]
        assert sdk.rentals({"failed"}) == []

    monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, key))
    runner, env = CliRunner(), {"COLUMNS": "200"}
    every = runner.invoke(app, ["ls", "--all", "--json"], env=env)
    assert every.exit_code == 0, every.output
    assert [r["id"] for r in json.loads(every.output)] == newest_first
    four = runner.invoke(app, ["ls", "-n", "4"], env=env)
    assert four.exit_code == 0 and "the newest 4 shown; --limit N or --all for more" in four.output
    assert all(i in four.output for i in newest_first[:4]) and newest_first[4] not in four.output
    beyond = runner.invoke(app, ["ls", "-n", "5000", "--json"], env=env)  # past the 1,000 of one page
    assert beyond.exit_code == 0, beyond.output
    assert [r["id"] for r in json.loads(beyond.output)] == newest_first
