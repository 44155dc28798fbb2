"""What the calls on the fleet, its nodes, maintenance and offers send (see `calls`), for `FleetCalls` and
`AsyncFleetCalls`."""

from __future__ import annotations

from suanli.client.calls import Call
from suanli.client.transport import segment
from suanli.wire.schemas import (
    FleetResponse,
    MaintenanceCreateRequest,
    MaintenanceResponse,
    NodeDrainResponse,
    NodeResponse,
    OfferResponse,
)


def forced(force: bool) -> dict[str, str] | None:
    """The query that overrides a refusal (409) for want of contracted GPUs."""
    return {"force": "true"} if force else None


def put_fleet(toml_text: str, force: bool) -> Call[FleetResponse]:
    headers = {"Content-Type": "application/toml"}
    return Call(
        "PUT", "/v1/fleet", FleetResponse, content=toml_text.encode(), headers=headers, params=forced(force)
    )


def nodes() -> Call[list[NodeResponse]]:
    return Call("GET", "/v1/nodes", list[NodeResponse])


def drain(node: str, force: bool) -> Call[NodeDrainResponse]:
    return Call("POST", f"/v1/nodes/{segment(node)}/drain", NodeDrainResponse, params=forced(force))


def undrain(node: str) -> Call[NodeResponse]:
    return Call("POST", f"/v1/nodes/{segment(node)}/undrain", NodeResponse)


def schedule_maintenance(request: MaintenanceCreateRequest) -> Call[MaintenanceResponse]:
    return Call("POST", "/v1/fleet/maintenance", MaintenanceResponse, body=request)


def maintenance(include_past: bool) -> Call[list[MaintenanceResponse]]:
    params = {"include_past": "true"} if include_past else None
    return Call("GET", "/v1/fleet/maintenance", list[MaintenanceResponse], params=params)


def cancel_maintenance(window_id: str) -> Call[MaintenanceResponse]:
    return Call("DELETE", f"/v1/fleet/maintenance/{segment(window_id)}", MaintenanceResponse)


def offers(query: str) -> Call[list[OfferResponse]]:
    return Call("GET", "/v1/offers", list[OfferResponse], params={"q": query} if query else None)
