"""Every request of a tenant counts against `SUANLI_API_RATE` (all its keys together): past it, 429 with
Retry-After and nothing done; admins are not limited; the SDK (and so the CLI) waits the 429 out."""

from __future__ import annotations

import time

from conftest import ADMIN, AppTransport, app_client
from suanli.client.client import ApiError, Client
from suanli.wire.schemas import RentalCreateRequest

H100 = {"gpu_model": "H100-SXM-80GB", "gpus": 1, "command": ["sleep", "600"]}


def _tenant_key(client, name: str) -> str:
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    credit = {"amount_micros": 10**10}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    return client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]


def test_a_tenant_past_its_request_rate_gets_429_and_nothing_is_done(database_url: str) -> None:
    with app_client(database_url, api_rate="3/minute") as client:
        busy = {"Authorization": f"Bearer {_tenant_key(client, 'busy')}"}
        calm = {"Authorization": f"Bearer {_tenant_key(client, 'calm')}"}
        for _ in range(3):
            assert client.get("/v1/rentals", headers=busy).status_code == 200
        refused = client.post("/v1/rentals", json=H100, headers=busy)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "rate_limited" and "at most 3/minute" in error["message"], error
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert client.get("/v1/rentals", headers=ADMIN).json() == []  # the refused create made nothing
        assert client.get("/v1/rentals", headers=calm).status_code == 200  # each tenant counts its own
        for _ in range(5):  # the operator is not limited
            assert client.get("/v1/tenants", headers=ADMIN).status_code == 200
        assert client.get("/v1/rentals", headers={"Authorization": "Bearer sk_nobody"}).status_code == 401


def test_the_sdk_waits_out_a_429_and_sends_again(database_url: str) -> None:
    with app_client(database_url, api_rate="2/second") as client:
        key = _tenant_key(client, "patient")
        started = time.monotonic()
        with Client("http://testserver", key, transport=AppTransport(client)) as sdk:
            created = sdk.create_rental(RentalCreateRequest(**H100))  # not retried on errors, but on 429
            assert [sdk.rental(created.id).id for _ in range(3)] == [created.id] * 3
            assert len(sdk.rentals()) == 1  # one rental, however often it was sent
        assert time.monotonic() - started >= 1.9  # five requests at two a second: two waits
        with Client("http://testserver", key, transport=AppTransport(client), retries=1) as impatient:
            for _ in range(5):  # a loaded machine may take a second for three requests: then try again
                time.sleep(1.1)
                first = time.monotonic()
                impatient.rentals()
                impatient.rentals()
                try:
                    impatient.rentals()
                except ApiError as error:
                    assert error.status == 429 and error.code == "rate_limited"
                    break
                assert time.monotonic() - first >= 1.0, "a third request in a second passed without waiting"
            else:
                raise AssertionError("no three requests fitted in one second in five tries")


def test_the_openapi_document_says_which_operations_a_tenants_rate_limit_can_refuse(
    database_url: str,
) -> None:
    """429 was documented on the dry run alone; an agent's own requests are never limited."""
    with app_client(database_url) as client:
        paths = client.get("/openapi.json").json()["paths"]
    limited = [
        ("/v1/rentals", "post"),
        ("/v1/rentals", "get"),
        ("/v1/rentals/{rental_id}/logs", "get"),
        ("/v1/rentals/dry-run", "post"),
        ("/v1/balance", "get"),
    ]
    for path, method in limited:
        assert "429" in paths[path][method]["responses"], (path, method)
    for path in ("/v1/agents/heartbeat", "/v1/agents/register"):
        assert "429" not in paths[path]["post"]["responses"], path
