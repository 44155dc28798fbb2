"""A failure inside the real app (SQLite and PostgreSQL) reads as the server's failure, in the API's error
shape and through the CLI, not as a URL that names some other service."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import AppTransport, logged_in_as
from suanli.client import ApiError, Client
from suanli.client.client import DEFAULT_TIMEOUT_S

DRY_RUN = {"gpu_model": "H100", "gpus": 1, "command": ["true"]}


def _failing_trial(_rental: object) -> object:
    raise ValueError("unknown policy 'Best_Fit'")  # what a bad SUANLI_POLICY once raised in every cycle


@pytest.fixture
def failing(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    """The same app, its dry runs failing with an error no handler expects, answered as a server answers
    (not raised into the test)."""
    monkeypatch.setattr(client.app.state.services.rentals, "trial", _failing_trial)
    return TestClient(client.app, raise_server_exceptions=False)


def test_an_unexpected_failure_is_a_500_in_the_apis_error_shape(failing: TestClient, tenant) -> None:
    _, headers = tenant("unlucky")
    response = failing.post("/v1/rentals/dry-run", json=DRY_RUN, headers=headers)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "internal_error"
    assert "POST /v1/rentals/dry-run" in error["message"] and "Best_Fit" not in error["message"]


def test_the_cli_says_the_server_failed_and_to_read_its_log(
    failing: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suanli.cli import platform_commands
    from suanli.cli.main import app

    _, headers = tenant("unlucky")
    key = headers["Authorization"].split()[1]
    monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(failing, key))
    done = CliRunner().invoke(app, ["rent", "H100:1", "--dry-run", "--", "true"], env={"COLUMNS": "200"})
    said = " ".join(done.output.split())
    assert done.exit_code == 5, said
    assert said.startswith("error: the server failed: an unexpected error while handling POST"), said
    assert said.endswith("[500 internal_error]; its log says why"), said
    assert "is it a suanli server?" not in said, said


class ProxyFailingDryRuns(AppTransport):
    """The app behind a proxy that answers dry runs itself with a text/plain 502 (as if the app were down)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/rentals/dry-run":
            return httpx.Response(502, text="Bad Gateway", request=request)
        return super().handle_request(request)


def test_a_5xx_not_in_suanlis_shape_from_a_server_that_answered_before_is_still_its_failure(
    client: TestClient, tenant
) -> None:
    from suanli.wire.schemas import RentalCreateRequest

    _, headers = tenant("proxied")
    key = headers["Authorization"].split()[1]
    with Client(
        "http://testserver", key, transport=ProxyFailingDryRuns(client), timeout_s=DEFAULT_TIMEOUT_S
    ) as sdk:
        with pytest.raises(ApiError) as first:  # nothing suanli's yet: it may be another service
            sdk.dry_run_rental(RentalCreateRequest(**DRY_RUN))
        assert first.value.code == "http_error" and "is it a suanli server?" in first.value.message
        sdk.me()
        with pytest.raises(ApiError) as failed:
            sdk.dry_run_rental(RentalCreateRequest(**DRY_RUN))
    assert failed.value.status == 502 and failed.value.code == "server_error", failed.value
    assert (
        "HTTP 502 Bad Gateway" in failed.value.message
        and "is it a suanli server?" not in failed.value.message
    )


class GatewayWithJsonErrors(AppTransport):
    """The app behind a gateway that answers `/v1/balance` itself with a 500 whose JSON `error` is not
    suanli's object (a gateway's text, or null)."""

    def __init__(self, client: TestClient, error: object) -> None:
        super().__init__(client)
        self.error = error

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/balance":
            return httpx.Response(500, json={"error": self.error}, request=request)
        return super().handle_request(request)


@pytest.mark.parametrize("error", ["upstream connect error", None, 7, ["a", "list"]], ids=repr)
def test_an_error_reply_whose_error_is_not_suanlis_object_is_an_api_error(
    client: TestClient, tenant, error: object
) -> None:
    """`{"error": "text"}` or `{"error": null}` (a gateway's, an ingress's) raised AttributeError from the
    SDK: it is the SDK's own error, `http_error` before the server answered as suanli, `server_error`
    after."""
    _, headers = tenant("gatewayed")
    key = headers["Authorization"].split()[1]
    with Client("http://testserver", key, transport=GatewayWithJsonErrors(client, error)) as sdk:
        with pytest.raises(ApiError) as first:
            sdk.balance()
        assert first.value.status == 500 and first.value.code == "http_error", first.value
        sdk.me()
        with pytest.raises(ApiError) as failed:
            sdk.balance()
        assert failed.value.code == "server_error", failed.value


def test_the_cli_says_a_gateways_json_error_is_the_servers_failure_with_exit_5(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suanli.cli import billing_commands
    from suanli.cli.main import app

    _, headers = tenant("gatewayed-cli")
    key = headers["Authorization"].split()[1]
    gateway = GatewayWithJsonErrors(client, "upstream connect error")
    monkeypatch.setattr(billing_commands, "logged_in", logged_in_as(client, key, transport=gateway))
    done = CliRunner().invoke(app, ["balance", "--json"], env={"COLUMNS": "200"})
    said = " ".join(done.output.split())
    assert done.exit_code == 5, said
    assert said.startswith("error: ") and "HTTP 500" in said and "upstream connect error" in said, said
