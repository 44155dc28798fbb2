"""The SDK and the CLI in front of the real app (SQLite and PostgreSQL) when the network fails: a lost answer
to a create (a timeout or a reset) is retried with its Idempotency-Key (its own when the caller gives none)
and yields one rental or contract; safe requests ride out a reset and a gateway's 502/503/504; an unkeyed
POST is never sent twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import ADMIN, AppTransport, h100_contract, logged_in_as
from suanli.cli.main import app
from suanli.client import ApiError, Client, ServerUnreachable
from suanli.wire.schemas import ContractCreateRequest, RentalCreateRequest

SHORT = {"gpu_model": "L40S", "gpus": 0, "share_milli": 500, "command": ["sleep", "600"], "regions": []}


class LosesFirstAnswer(AppTransport):
    """The app behind a network that loses the answer once (`loss`: a reset, by default, or a timeout), after
    the app has handled the first request to `path` (by `method`): what it did is done."""

    def __init__(
        self, client: TestClient, method: str, path: str, loss: type[httpx.TransportError] = httpx.ReadError
    ) -> None:
        super().__init__(client)
        self.method, self.path, self.loss, self.sent = method, path, loss, []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = super().handle_request(request)
        self.sent.append((request.method, request.url.path, request.headers.get("Idempotency-Key")))
        if (request.method, request.url.path) == (self.method, self.path) and len(self.sent_to_path()) == 1:
            raise self.loss("Connection reset by peer", request=request)
        return answer

    def sent_to_path(self) -> list[tuple[str, str, str | None]]:
        return [sent for sent in self.sent if sent[:2] == (self.method, self.path)]


class GatewayFailsOnce(AppTransport):
    """The app behind a gateway that answers the first request with `status` itself, not passing it on."""

    def __init__(self, client: TestClient, status: int) -> None:
        super().__init__(client)
        self.status, self.failed = status, False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.failed:
            self.failed = True
            return httpx.Response(self.status, text="<html>Service Unavailable</html>", request=request)
        return super().handle_request(request)


def _key(headers: dict[str, str]) -> str:
    return headers["Authorization"].split()[1]


def _named(client: TestClient, headers: dict[str, str], name: str) -> list[dict]:
    return client.get("/v1/rentals", params={"name": name}, headers=headers).json()


def test_a_create_rental_whose_answer_timed_out_is_retried_with_a_key_of_its_own_and_makes_one_rental(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("unlucky")
    network = LosesFirstAnswer(client, "POST", "/v1/rentals", loss=httpx.ReadTimeout)
    with Client("http://testserver", _key(owner), transport=network) as sdk:
        rental = sdk.create_rental(RentalCreateRequest(**SHORT, name="lost-answer"))
    assert [r["id"] for r in _named(client, owner, "lost-answer")] == [rental.id]
    keys = [key for _, _, key in network.sent_to_path()]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys


def test_a_create_contract_whose_answer_timed_out_is_retried_with_a_key_of_its_own_and_signs_one(
    client: TestClient, tenant
) -> None:
    tenant_id, holder = tenant("signer")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    network = LosesFirstAnswer(client, "POST", "/v1/contracts", loss=httpx.ReadTimeout)
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    with Client("http://testserver", _key(holder), transport=network) as sdk:
        contract = sdk.create_contract(ContractCreateRequest(**h100_contract(start, 24)))
    assert [c["id"] for c in client.get("/v1/contracts", headers=holder).json()] == [contract.id]
    keys = [key for _, _, key in network.sent_to_path()]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys


def test_a_create_rental_whose_answer_is_lost_by_a_reset_is_retried_and_makes_one_rental(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("reset-create")
    network = LosesFirstAnswer(client, "POST", "/v1/rentals")
    with Client("http://testserver", _key(owner), transport=network) as sdk:
        rental = sdk.create_rental(RentalCreateRequest(**SHORT, name="reset-create"), idempotency_key="job-1")
    assert [r["id"] for r in _named(client, owner, "reset-create")] == [rental.id]


def test_the_cli_rent_whose_first_answer_is_lost_makes_one_rental_and_exits_0(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suanli.cli import platform_commands

    _, owner = tenant("cli-unlucky")
    network = LosesFirstAnswer(client, "POST", "/v1/rentals")
    monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, _key(owner), transport=network))
    done = CliRunner().invoke(app, ["rent", "L40S:0.5", "--name", "cli-lost", "--json", "--", "sleep", "600"])
    assert done.exit_code == 0, done.output
    assert len(_named(client, owner, "cli-lost")) == 1


def test_a_get_whose_connection_is_reset_is_sent_again(client: TestClient, tenant) -> None:
    _, owner = tenant("reset")
    with Client("http://testserver", _key(owner), transport=LosesFirstAnswer(client, "GET", "/v1/me")) as sdk:
        assert sdk.me().tenant.name == "reset"


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateways_failure_of_a_safe_request_is_sent_again(client: TestClient, tenant, status: int) -> None:
    _, owner = tenant("gateway")
    with Client("http://testserver", _key(owner), transport=GatewayFailsOnce(client, status)) as sdk:
        assert sdk.me().tenant.name == "gateway"


def test_an_unkeyed_post_whose_answer_is_lost_is_not_sent_again(client: TestClient, tenant) -> None:
    _, owner = tenant("unkeyed")
    network = LosesFirstAnswer(client, "POST", "/v1/webhooks")
    with Client("http://testserver", _key(owner), transport=network) as sdk, pytest.raises(ServerUnreachable):
        sdk.create_webhook("https://hooks.example.com/suanli")
    assert len(network.sent_to_path()) == 1


def test_a_gateways_failure_of_an_unkeyed_post_is_not_sent_again(client: TestClient, tenant) -> None:
    _, owner = tenant("unkeyed-gateway")
    network = GatewayFailsOnce(client, 503)
    with (
        Client("http://testserver", _key(owner), transport=network) as sdk,
        pytest.raises(ApiError) as refused,
    ):
        sdk.create_webhook("https://hooks.example.com/suanli")
    assert refused.value.status == 503
    assert client.get("/v1/webhooks", headers=owner).json() == []
