"""What the calls on contracts and contract offers send (see `calls`), for `ContractCalls` and
`AsyncContractCalls`; an argument its request model refuses is an `InvalidArgument`."""

from __future__ import annotations

from suanli.client.calls import Call, created
from suanli.client.errors import checks_arguments
from suanli.client.transport import segment
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
    ContractTransferRequest,
)


def create_contract(request: ContractCreateRequest, idempotency_key: str | None) -> Call[ContractResponse]:
    return created("/v1/contracts", ContractResponse, request, idempotency_key)


def quote_contract(request: ContractCreateRequest) -> Call[ContractQuoteResponse]:
    return Call("POST", "/v1/contracts/quote", ContractQuoteResponse, body=request)


def offer_contract(request: ContractOfferRequest) -> Call[ContractOfferResponse]:
    return Call("POST", "/v1/contract-offers", ContractOfferResponse, body=request)


def contract_offers() -> Call[list[ContractOfferResponse]]:
    return Call("GET", "/v1/contract-offers", list[ContractOfferResponse])


def accept_offer(offer_id: str) -> Call[ContractResponse]:
    return Call("POST", f"/v1/contract-offers/{segment(offer_id)}/accept", ContractResponse, retry=True)


def decline_offer(offer_id: str) -> Call[ContractOfferResponse]:
    path = f"/v1/contract-offers/{segment(offer_id)}/decline"
    return Call("POST", path, ContractOfferResponse, retry=True)


def contracts() -> Call[list[ContractResponse]]:
    return Call("GET", "/v1/contracts", list[ContractResponse])


@checks_arguments
def transfer_contract(contract_id: str, to_tenant_id: str) -> Call[ContractResponse]:
    body = ContractTransferRequest(to_tenant_id=to_tenant_id)
    return Call("POST", f"/v1/contracts/{segment(contract_id)}/transfer", ContractResponse, body=body)
