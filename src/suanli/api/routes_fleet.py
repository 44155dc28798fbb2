"""/v1/fleet (PUT TOML), /v1/fleet/maintenance, /v1/nodes, drain and undrain, /v1/offers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.wiring import Services
from suanli.app.errors import Invalid
from suanli.app.maintenance import MaintenanceService
from suanli.wire.schemas import (
    FleetResponse,
    MaintenanceCreateRequest,
    MaintenanceResponse,
    NodeResponse,
    OfferResponse,
)

router = APIRouter(prefix="/v1", tags=["fleet"], responses=ERROR_RESPONSES)
MAX_FLEET_BYTES = 16 * 1024 * 1024
TOML_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/toml": {"schema": {"type": "string"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


@router.put("/fleet", openapi_extra=TOML_BODY)
async def put_fleet(request: Request, caller: CallerDep, services: ServicesDep) -> FleetResponse:
    """Replace the fleet with a fleet TOML file (admin). Refused while live rentals sit on changed nodes."""
    raw = await request.body()
    if len(raw) > MAX_FLEET_BYTES:
        raise Invalid("the fleet file is larger than 16 MiB", field="body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("the fleet file must be UTF-8 text", field="body") from None
    fleet = await run_in_threadpool(services.fleet.put, caller, text)
    services.loop.signal()
    return FleetResponse(regions=len(fleet.regions), nodes=len(fleet.nodes), gpus=fleet.gpu_count)


def _maintenance(services: Services) -> MaintenanceService:
    assert services.maintenance is not None
    return services.maintenance


@router.post("/fleet/maintenance", status_code=201)
def schedule_maintenance(
    body: MaintenanceCreateRequest, caller: CallerDep, services: ServicesDep
) -> MaintenanceResponse:
    """Schedule a node's maintenance over [starts_at, ends_at) (admin): nothing is placed there inside it,
    its rentals get notice to end by the start. 409 naming the contracts it would leave short, unless
    `force` (then they are listed in `short_contracts`)."""
    scheduled = _maintenance(services).schedule(
        caller, body.node, body.starts_at, body.ends_at, body.reason, force=body.force
    )
    services.loop.signal()
    return mappers.maintenance(scheduled.window, scheduled.short_contracts)


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
    return [mappers.node(v) for v in services.fleet.nodes(caller)]


@router.post("/nodes/{name}/drain")
def drain(name: str, caller: CallerDep, services: ServicesDep) -> NodeResponse:
    """Cordon a node: rentals on it keep running, nothing new is placed there."""
    view = services.fleet.set_schedulable(caller, name, False)
    services.loop.signal()
    return mappers.node(view)


@router.post("/nodes/{name}/undrain")
def undrain(name: str, caller: CallerDep, services: ServicesDep) -> NodeResponse:
    view = services.fleet.set_schedulable(caller, name, True)
    services.loop.signal()
    return mappers.node(view)


@router.get("/offers")
def offers(
    caller: CallerDep,
    services: ServicesDep,
    q: Annotated[str, Query(max_length=1000, description="e.g. gpu=H100 count>=8 region=eu price<2.5")] = "",
) -> list[OfferResponse]:
    return [mappers.offer(o) for o in services.offers.search(q)]
