"""Calls on contracts: quote, sign (idempotently), offers, transfers."""

from __future__ import annotations

from suanli.client.errors import checks_arguments
from suanli.client.transport import Transport, segment
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
    ContractTransferRequest,
)


class ContractCalls(Transport):
    """The calls on contracts and contract offers."""

    def create_contract(
        self, request: ContractCreateRequest, idempotency_key: str | None = None
    ) -> ContractResponse:
        """Sign and prepay under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same contract rather than signing and charging twice."""
        return self._create("/v1/contracts", ContractResponse, request, idempotency_key)

    def quote_contract(self, request: ContractCreateRequest) -> ContractQuoteResponse:
        """What signing `request` would hold and prepay now; signs nothing."""
        return self._call("POST", "/v1/contracts/quote", ContractQuoteResponse, body=request)

    def offer_contract(self, request: ContractOfferRequest) -> ContractOfferResponse:
        """Admin: offer a tenant a contract at a negotiated price."""
        return self._call("POST", "/v1/contract-offers", ContractOfferResponse, body=request)

    def contract_offers(self) -> list[ContractOfferResponse]:
        return self._call("GET", "/v1/contract-offers", list[ContractOfferResponse])

    def accept_offer(self, offer_id: str) -> ContractResponse:
        """Sign an offered contract at its price; safe to retry (accepting again returns the same one)."""
        return self._call(
            "POST", f"/v1/contract-offers/{segment(offer_id)}/accept", ContractResponse, retry=True
        )

    def decline_offer(self, offer_id: str) -> ContractOfferResponse:
        return self._call(
            "POST", f"/v1/contract-offers/{segment(offer_id)}/decline", ContractOfferResponse, retry=True
        )

    def contracts(self) -> list[ContractResponse]:
        return self._call("GET", "/v1/contracts", list[ContractResponse])

    @checks_arguments
    def transfer_contract(self, contract_id: str, to_tenant_id: str) -> ContractResponse:
        body = ContractTransferRequest(to_tenant_id=to_tenant_id)
        return self._call(
            "POST", f"/v1/contracts/{segment(contract_id)}/transfer", ContractResponse, body=body
        )
