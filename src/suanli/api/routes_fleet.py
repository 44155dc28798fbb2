"""/v1/fleet (PUT TOML), /v1/fleet/maintenance, /v1/nodes, drain and undrain, /v1/offers."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.wiring import Services
from suanli.app.errors import Invalid
from suanli.app.maintenance import MaintenanceService
from suanli.app.tenants import require_admin
from suanli.wire.schemas import (
    ErrorResponse,
    FleetResponse,
    MaintenanceCreateRequest,
    MaintenanceResponse,
    NodeDrainResponse,
    NodeResponse,
    OfferResponse,
)

router = APIRouter(prefix="/v1", tags=["fleet"], responses=ERROR_RESPONSES)
MAX_FLEET_BYTES = 8 * 1024 * 1024
TOO_LARGE = f"the fleet file is larger than 8 MiB ({MAX_FLEET_BYTES} bytes)"
TOML_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/toml": {"schema": {"type": "string"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


@router.put("/fleet", openapi_extra=TOML_BODY, responses={413: {"model": ErrorResponse}})
async def put_fleet(
    request: Request, caller: CallerDep, services: ServicesDep, force: bool = False
) -> FleetResponse:
    """Replace the fleet with a fleet TOML file (admin). Refused while live rentals sit on changed nodes, and
    when signed contracts would be short of GPUs, or shorter, unless `force` (then they are listed in
    `short_contracts`, and in `shortfalls` with how short each is left)."""
    require_admin(caller)
    raw = await _fleet_body(request)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("the fleet file must be UTF-8 text", field="body") from None
    change = await run_in_threadpool(partial(services.fleet.put, caller, text, force=force))
    services.loop.signal()
    return mappers.fleet_put(change)


async def _fleet_body(request: Request) -> bytes:
    """The body, read only up to the limit: 413 on a declared or streamed size above it, so a caller
    cannot make the server buffer an unbounded body."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FLEET_BYTES:
        raise HTTPException(413, TOO_LARGE)
    chunks: list[bytes] = []
    size_bytes = 0
    async for chunk in request.stream():
        size_bytes += len(chunk)
        if size_bytes > MAX_FLEET_BYTES:
            raise HTTPException(413, TOO_LARGE)
        chunks.append(chunk)
    return b"".join(chunks)


def _maintenance(services: Services) -> MaintenanceService:
    assert services.maintenance is not None
    return services.maintenance


@router.post("/fleet/maintenance", status_code=201)
def schedule_maintenance(
    body: MaintenanceCreateRequest, caller: CallerDep, services: ServicesDep
) -> MaintenanceResponse:
    """Schedule a node's maintenance over [starts_at, ends_at) (admin): nothing is placed there inside it,
    its rentals get notice to end by the start. 409 naming the contracts it would leave short, unless
    `force` (then they are listed in `short_contracts`, and in `shortfalls` with how short each is left)."""
    scheduled = _maintenance(services).schedule(
        caller, body.node, body.starts_at, body.ends_at, body.reason, force=body.force
    )
    services.loop.signal()
    return mappers.maintenance(scheduled.window, scheduled.left_short)


@router.get("/fleet/maintenance")
def list_maintenance(
    caller: CallerDep, services: ServicesDep, include_past: bool = False
) -> list[MaintenanceResponse]:
    """Maintenance windows still to end (all with `include_past`), by start."""
    return [mappers.maintenance(w) for w in _maintenance(services).list(caller, include_past)]


@router.delete("/fleet/maintenance/{window_id}")
def cancel_maintenance(window_id: str, caller: CallerDep, services: ServicesDep) -> MaintenanceResponse:
    """Cancel a maintenance window (admin)."""
    window = _maintenance(services).cancel(caller, window_id)
    services.loop.signal()
    return mappers.maintenance(window)


@router.get("/nodes")
def list_nodes(caller: CallerDep, services: ServicesDep) -> list[NodeResponse]:
    """The fleet's nodes with their free capacity and whether they take new work."""
    return [mappers.node(v) for v in services.fleet.nodes(caller)]


@router.post("/nodes/{name}/drain")
def drain(name: str, caller: CallerDep, services: ServicesDep, force: bool = False) -> NodeDrainResponse:
    """Cordon a node (admin): rentals on it keep running, nothing new is placed there. 409 naming the signed
    contracts its pool would then be short for, unless `force` (then the answer lists them, with how short
    each is left: `short_contracts`, `shortfalls`)."""
    change = services.fleet.set_schedulable(caller, name, False, force=force)
    services.loop.signal()
    return mappers.drained(change)


@router.post("/nodes/{name}/undrain")
def undrain(name: str, caller: CallerDep, services: ServicesDep) -> NodeResponse:
    """Let a drained node take new work again (a maintenance window still keeps it out until its end)."""
    change = services.fleet.set_schedulable(caller, name, True)
    services.loop.signal()
    return mappers.node(change.view)


@router.get("/offers")
def offers(
    caller: CallerDep,
    services: ServicesDep,
    q: Annotated[str, Query(max_length=1000, description="e.g. gpu=H100 count>=8 region=eu price<2.5")] = "",
) -> list[OfferResponse]:
    """What can be rented now, per model, region and shape, with prices; filtered by the `q` query."""
    return [mappers.offer(o) for o in services.offers.search(q, caller.tenant.id)]
