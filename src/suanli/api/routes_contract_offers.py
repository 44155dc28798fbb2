"""/v1/contract-offers: an admin offers a tenant a contract at a negotiated price; the tenant accepts (the
contract is signed at that price) or declines."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.wiring import Services
from suanli.app.contract_offers import ContractOffers
from suanli.wire.schemas import ContractOfferRequest, ContractOfferResponse, ContractResponse

router = APIRouter(prefix="/v1", tags=["contracts"], responses=ERROR_RESPONSES)


def _offers(services: Services) -> ContractOffers:
    assert services.contract_offers is not None
    return services.contract_offers


@router.post("/contract-offers", status_code=status.HTTP_201_CREATED)
def make_offer(body: ContractOfferRequest, caller: CallerDep, services: ServicesDep) -> ContractOfferResponse:
    """Admin: offer the tenant this contract at `price_micros`; refused as signing it now would be (an
    unknown model or region, a window already over, more than the fleet can honour). It holds no capacity."""
    offer = _offers(services).offer(caller, mappers.contract_order(body), body.price_micros, body.expires_at)
    return mappers.contract_offer(offer)


@router.get("/contract-offers")
def list_offers(caller: CallerDep, services: ServicesDep) -> list[ContractOfferResponse]:
    """Your offers (an admin's: every tenant's): open, accepted, declined or expired."""
    return [mappers.contract_offer(o) for o in _offers(services).list(caller)]


@router.post(
    "/contract-offers/{offer_id}/accept",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": ContractResponse, "description": "Accepted again: the contract it signed."}},
)
def accept_offer(
    offer_id: str, caller: CallerDep, services: ServicesDep, response: Response
) -> ContractResponse:
    """Sign the offered contract at the offered price, paid from your cash (201); accepting it again returns
    that contract (200) and charges nothing more."""
    record, created = _offers(services).accept(caller, offer_id)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return mappers.contract(record)


@router.post("/contract-offers/{offer_id}/decline")
def decline_offer(offer_id: str, caller: CallerDep, services: ServicesDep) -> ContractOfferResponse:
    """Decline an open offer (an admin withdraws it)."""
    return mappers.contract_offer(_offers(services).decline(caller, offer_id))
