"""The SDK in front of the real app (SQLite and PostgreSQL) when the network fails: a lost answer to a create
is retried with its Idempotency-Key (its own when the caller gives none) and yields one rental or contract."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from fastapi.testclient import TestClient

from conftest import ADMIN, AppTransport, h100_contract
from suanli.client import Client
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
