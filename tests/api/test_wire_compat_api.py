"""A server one release newer than its agents, CLI and SDK: answers with fields they do not know are read (the
unknown fields ignored), while what the server receives stays strict."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import ADMIN, SHARE, AppTransport, register_agent, wait_for
from suanli.cli import platform_commands
from suanli.cli.main import app
from suanli.cli.output import api_errors
from suanli.client import Client
from suanli.wire.agent_schemas import HeartbeatRequest, WorkloadReportBody
from suanli.wire.schemas import RentalCreateRequest

ADDED = "added_in_a_later_release"
NESTED_MODELS = ("request", "assignments", "allocation")  # fields that hold models, not free maps


def _newer(body: Any) -> Any:
    """`body` as a later release would answer it: a field more in each object and in the models it holds."""
    if isinstance(body, list):
        return [_newer(item) for item in body]
    if not isinstance(body, dict):
        return body
    nested = {key: _newer(body[key]) for key in NESTED_MODELS if isinstance(body.get(key), dict | list)}
    return {**body, **nested, ADDED: {"new": True}}


class NewerServerTransport(AppTransport):
    """The in-process app, its JSON answers given a field this release does not have."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = super().handle_request(request)
        if not answer.headers.get("content-type", "").startswith("application/json"):
            return answer
        headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() != "content-length"]
        return httpx.Response(
            answer.status_code, headers=headers, json=_newer(answer.json()), request=request
        )


def newer_sdk(client: TestClient, key: str) -> Client:
    return Client("http://testserver", key, transport=NewerServerTransport(client))


def test_the_sdk_reads_the_answers_of_a_newer_server(client: TestClient, tenant) -> None:
    _, owner = tenant("sdk-compat")
    with newer_sdk(client, owner["Authorization"].split()[1]) as sdk:
        created = sdk.create_rental(RentalCreateRequest(**SHARE))
        assert sdk.rental(created.id).id == created.id
        assert [rental.id for rental in sdk.rentals()] == [created.id]
        assert sdk.balance() is not None


def test_the_cli_rents_once_from_a_newer_server_and_says_so(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, owner = tenant("cli-compat")

    @contextmanager
    def logged_in(options: Mapping[str, str] | None = None) -> Iterator[Client]:
        with api_errors(options), newer_sdk(client, owner["Authorization"].split()[1]) as sdk:
            yield sdk

    monkeypatch.setattr(platform_commands, "logged_in", logged_in)
    done = CliRunner().invoke(app, ["rent", "L40S:0.5"], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    listed = CliRunner().invoke(app, ["ls"], env={"COLUMNS": "300"})
    assert listed.exit_code == 0, listed.output
    assert len(client.get("/v1/rentals", headers=owner).json()) == 1


def test_an_agent_reads_the_assignments_of_a_newer_server(client: TestClient, tenant) -> None:
    _, owner = tenant("agent-compat")
    rental_id = client.post("/v1/rentals", json=SHARE, headers=owner).json()["id"]
    node = wait_for(client, rental_id, owner, "placed")["allocation"][0]["node"]
    node_key = register_agent(client, node)["Authorization"].split()[1]
    with newer_sdk(client, node_key) as agent_client:
        answer = agent_client.heartbeat(HeartbeatRequest())
        assert [assignment.rental_id for assignment in answer.assignments] == [rental_id]
        running = WorkloadReportBody(rental_id=rental_id, state="running")
        agent_client.heartbeat(HeartbeatRequest(workloads=[running]))
    assert client.get(f"/v1/rentals/{rental_id}", headers=owner).json()["state"] == "running"


def test_the_server_still_refuses_a_request_with_a_field_it_does_not_know(client: TestClient) -> None:
    answer = client.post("/v1/tenants", json={"name": "strict", ADDED: 1}, headers=ADMIN)
    assert answer.status_code in (400, 422), answer.text
    assert ADDED in answer.text
