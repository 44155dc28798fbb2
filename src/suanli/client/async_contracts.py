"""Calls on contracts for asyncio code: `ContractCalls`' awaited (what each sends: `contract_requests`)."""

from __future__ import annotations

from suanli.client import contract_requests as sent
from suanli.client.async_transport import AsyncTransport
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
)


class AsyncContractCalls(AsyncTransport):
    """The calls on contracts and contract offers, awaited (see `ContractCalls`)."""

    async def create_contract(
        self, request: ContractCreateRequest, idempotency_key: str | None = None
    ) -> ContractResponse:
        """Sign and prepay under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same contract rather than signing and charging twice."""
        return await self._ask(sent.create_contract(request, idempotency_key))

    async def quote_contract(self, request: ContractCreateRequest) -> ContractQuoteResponse:
        """What signing `request` would hold and prepay now; signs nothing."""
        return await self._ask(sent.quote_contract(request))

    async def offer_contract(self, request: ContractOfferRequest) -> ContractOfferResponse:
        """Admin: offer a tenant a contract at a negotiated price."""
        return await self._ask(sent.offer_contract(request))

    async def contract_offers(self) -> list[ContractOfferResponse]:
        return await self._ask(sent.contract_offers())

    async def accept_offer(self, offer_id: str) -> ContractResponse:
        """Sign an offered contract at its price; safe to retry (accepting again returns the same one)."""
        return await self._ask(sent.accept_offer(offer_id))

    async def decline_offer(self, offer_id: str) -> ContractOfferResponse:
        return await self._ask(sent.decline_offer(offer_id))

    async def contracts(self) -> list[ContractResponse]:
        return await self._ask(sent.contracts())

    async def transfer_contract(self, contract_id: str, to_tenant_id: str) -> ContractResponse:
        return await self._ask(sent.transfer_contract(contract_id, to_tenant_id))
