"""/v1/rentals (Idempotency-Key), dry run, stop, resize; /v1/contracts (Idempotency-Key), quote, transfer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from pydantic import AwareDatetime

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.paging import link_next
from suanli.app.rentals import LIST_LIMIT
from suanli.wire.schemas import (
    NAME_QUERY_PATTERN,
    ContractCreateRequest,
    ContractQuoteResponse,
    ContractResponse,
    ContractTransferRequest,
    RentalBidRequest,
    RentalCreateRequest,
    RentalDryRunResponse,
    RentalResizeRequest,
    RentalResponse,
    RentalState,
)

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


@router.post(
    "/rentals",
    status_code=status.HTTP_201_CREATED,
    tags=["rentals"],
    responses={
        200: {"model": RentalResponse, "description": "A retry: the rental its Idempotency-Key made."}
    },
)
def create_rental(
    body: RentalCreateRequest,
    caller: CallerDep,
    services: ServicesDep,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> RentalResponse:
    """Submit a rental; the same Idempotency-Key (same tenant, same body) returns the same rental (200)."""
    view, created = services.rentals.create(caller, mappers.spec(body), idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    return mappers.rental(view)


@router.post("/rentals/dry-run", tags=["rentals"])
def dry_run_rental(
    body: RentalCreateRequest, caller: CallerDep, services: ServicesDep
) -> RentalDryRunResponse:
    """What submitting this body would do now, creating nothing: where it would start (alone in the queue)
    and at what rate, whom it would preempt, or why it would wait."""
    return mappers.dry_run(services.rentals.dry_run(caller, mappers.spec(body)))


@router.get("/rentals", tags=["rentals"])
def list_rentals(
    request: Request,
    response: Response,
    caller: CallerDep,
    services: ServicesDep,
    state: Annotated[
        list[RentalState] | None,
        Query(description="Only rentals in these states (repeatable: `?state=pending&state=running`)."),
    ] = None,
    name: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=65,
            pattern=NAME_QUERY_PATTERN,
            description="Only rentals of this name, exactly, or, ending in `*`, starting with what is before "
            "it (`sweep-lr-*`).",
        ),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=40,
            description="Only rentals past this one in the list's order (older, or as old with a later id): "
            "the id of the last rental of the page before. One you cannot see is a 400 naming `after`.",
        ),
    ] = None,
    updated_after: Annotated[
        AwareDatetime | None,
        Query(
            description="Only rentals changed at or after this moment (ISO 8601 with its UTC offset, by the "
            "server's clock): their state, reason, allocation, price, charge, timeline or request. A change "
            "is stamped when its transaction writes it, so one committing as you read may carry a moment "
            "just before your read: ask from a minute before your last read (its `Date` header), as the "
            "console does. A value that is not such a moment is a 422 naming `updated_after`.",
        ),
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=LIST_LIMIT, description="At most this many (1,000 at most).")
    ] = LIST_LIMIT,
) -> list[RentalResponse]:
    """Your rentals, newest first (created_at, then id), a page at a time (an admin: everyone's): at most
    `limit` past `after`, only those in the states and of the name asked for, and changed since
    `updated_after` when given. When more follow, a `Link: <...>; rel="next"` header gives the next page's URL
    (`after` = this page's last rental); without it this is the last page. Rentals created meanwhile do not
    shift the pages that follow."""
    page = services.rentals.list(caller, state or (), name, limit, after, updated_after)
    if page.more:
        link_next(request, response, page.views[-1].rental.id, limit)
    return [mappers.rental(v) for v in page.views]


@router.get("/rentals/{rental_id}", tags=["rentals"])
def get_rental(rental_id: str, caller: CallerDep, services: ServicesDep) -> RentalResponse:
    """One of the caller's rentals: its request, state, allocation, price and timeline."""
    return mappers.rental(services.rentals.get(caller, rental_id))


@router.post("/rentals/{rental_id}/stop", tags=["rentals"])
def stop_rental(rental_id: str, caller: CallerDep, services: ServicesDep) -> RentalResponse:
    """Stop a rental: a pending one is cancelled, a live one's workload is ended and billing stops."""
    return mappers.rental(services.rentals.stop(caller, rental_id))


@router.patch("/rentals/{rental_id}", tags=["rentals"])
def resize_rental(
    rental_id: str, body: RentalResizeRequest, caller: CallerDep, services: ServicesDep
) -> RentalResponse:
    """Change a rental's nodes or GPUs per node: at once if pending or fewer nodes, else once it fits."""
    return mappers.rental(services.rentals.resize(caller, rental_id, body.nodes, body.gpus))


@router.put("/rentals/{rental_id}/bid", tags=["rentals"])
def set_bid(
    rental_id: str, body: RentalBidRequest, caller: CallerDep, services: ServicesDep
) -> RentalResponse:
    """A spot rental's new bid per GPU-hour; the scheduler re-prices and re-judges it next cycle."""
    return mappers.rental(services.rentals.set_bid(caller, rental_id, body.bid_micros_per_gpu_hour))


@router.post(
    "/contracts",
    status_code=status.HTTP_201_CREATED,
    tags=["contracts"],
    responses={
        200: {"model": ContractResponse, "description": "A retry: the contract its Idempotency-Key signed."}
    },
)
def create_contract(
    body: ContractCreateRequest,
    caller: CallerDep,
    services: ServicesDep,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> ContractResponse:
    """Sign a contract and prepay it; the same Idempotency-Key (same holder, same terms) returns the contract
    signed with it (200) and charges nothing more."""
    record, created = services.contracts.create(caller, mappers.contract_order(body), idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    return mappers.contract(record)


@router.post("/contracts/quote", tags=["contracts"])
def quote_contract(
    body: ContractCreateRequest, caller: CallerDep, services: ServicesDep
) -> ContractQuoteResponse:
    """What signing this contract would hold and prepay now, signing nothing. Refused as signing would be
    (an unknown model or region, a window already over, more than the fleet can honour); a price the
    holder cannot pay now is `payable: false`, not an error."""
    return mappers.contract_quote(services.contracts.quote(caller, mappers.contract_order(body)))


@router.get("/contracts", tags=["contracts"])
def list_contracts(caller: CallerDep, services: ServicesDep) -> list[ContractResponse]:
    """The contracts the caller holds (an admin: all), with their windows and what is left."""
    return [mappers.contract(c) for c in services.contracts.list(caller)]


@router.get("/contracts/{contract_id}", tags=["contracts"])
def get_contract(contract_id: str, caller: CallerDep, services: ServicesDep) -> ContractResponse:
    """One contract: its model, count, region, window, price and holder."""
    return mappers.contract(services.contracts.get(caller, contract_id))


@router.post("/contracts/{contract_id}/transfer", tags=["contracts"])
def transfer_contract(
    contract_id: str, body: ContractTransferRequest, caller: CallerDep, services: ServicesDep
) -> ContractResponse:
    """Hand a contract to another tenant; when the buyer pays the seller its remaining value, an admin key."""
    return mappers.contract(services.contracts.transfer(caller, contract_id, body.to_tenant_id))
