"""The SDK's errors against the real app (SQLite and PostgreSQL): every documented one is importable from
`suanli.client` and is a `ClientError`; a method's argument its request model refuses is refused before
anything is sent, as the SDK's error naming the field (as the server's 422 would), not pydantic's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import suanli.client as sdk_package
from conftest import AppTransport, running_share
from suanli.client import Client

DOCUMENTED_ERRORS = (
    "ClientError",
    "ApiError",
    "ServerUnreachable",
    "RentalEnded",
    "RentalWaitTimeout",
    "ExecWaitTimeout",
    "InvalidArgument",
)


def test_the_documented_errors_are_exported_and_share_one_base() -> None:
    exported = {name: getattr(sdk_package, name, None) for name in DOCUMENTED_ERRORS}
    assert all(exported.values()), exported
    assert all(issubclass(error, exported["ClientError"]) for error in exported.values())
    assert set(DOCUMENTED_ERRORS) <= set(sdk_package.__all__)


class CountingTransport(AppTransport):
    """The in-process app, counting what reaches it."""

    def __init__(self, client: TestClient) -> None:
        super().__init__(client)
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


BAD_ARGUMENTS: list[tuple[str, Callable[[Client, str], Any], str]] = [
    ("set_bid", lambda sdk, rental: sdk.set_bid(rental, -1), "bid_micros_per_gpu_hour"),
    ("resize", lambda sdk, rental: sdk.resize(rental, nodes=0), "nodes"),
    ("exec", lambda sdk, rental: sdk.exec(rental, ["ls"], timeout_s=0), "timeout_s"),
    ("set_budget", lambda sdk, rental: sdk.set_budget(daily_micros=-1), "daily_micros"),
]


@pytest.mark.parametrize(("method", "call", "field"), BAD_ARGUMENTS, ids=[case[0] for case in BAD_ARGUMENTS])
def test_an_argument_the_request_model_refuses_is_the_sdks_error_naming_the_field(
    client: TestClient, tenant, method: str, call: Callable[[Client, str], Any], field: str
) -> None:
    _, owner = tenant(f"careless-{method.replace('_', '-')}")
    rental_id, _ = running_share(client, owner)
    counting = CountingTransport(client)
    sdk = Client("http://testserver", owner["Authorization"].split()[1], transport=counting)
    with sdk, pytest.raises(sdk_package.ClientError) as refused:
        call(sdk, rental_id)
    error = refused.value
    assert isinstance(error, sdk_package.InvalidArgument) and isinstance(error, sdk_package.ApiError)
    assert (error.status, error.code, error.field) == (422, "invalid", field), error
    assert field in str(error) and counting.sent == 0
