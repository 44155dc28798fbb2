"""Calls on contracts: quote, sign (idempotently), offers, transfers (what each sends:
`contract_requests`)."""

from __future__ import annotations

from suanli.client import contract_requests as sent
from suanli.client.transport import Transport
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
)


class ContractCalls(Transport):
    """The calls on contracts and contract offers."""

    def create_contract(
        self, request: ContractCreateRequest, idempotency_key: str | None = None
    ) -> ContractResponse:
        """Sign and prepay under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same contract rather than signing and charging twice."""
        return self._ask(sent.create_contract(request, idempotency_key))

    def quote_contract(self, request: ContractCreateRequest) -> ContractQuoteResponse:
        """What signing `request` would hold and prepay now; signs nothing."""
        return self._ask(sent.quote_contract(request))

    def offer_contract(self, request: ContractOfferRequest) -> ContractOfferResponse:
        """Admin: offer a tenant a contract at a negotiated price."""
        return self._ask(sent.offer_contract(request))

    def contract_offers(self) -> list[ContractOfferResponse]:
        return self._ask(sent.contract_offers())

    def accept_offer(self, offer_id: str) -> ContractResponse:
        """Sign an offered contract at its price; safe to retry (accepting again returns the same one)."""
        return self._ask(sent.accept_offer(offer_id))

    def decline_offer(self, offer_id: str) -> ContractOfferResponse:
        return self._ask(sent.decline_offer(offer_id))

    def contracts(self) -> list[ContractResponse]:
        return self._ask(sent.contracts())

    def transfer_contract(self, contract_id: str, to_tenant_id: str) -> ContractResponse:
        return self._ask(sent.transfer_contract(contract_id, to_tenant_id))
