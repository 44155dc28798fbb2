"""Calls on the fleet: its nodes (drain, undrain), maintenance windows and the offers for rent."""

from __future__ import annotations

from suanli.client.transport import Transport, segment
from suanli.wire.schemas import (
    FleetResponse,
    MaintenanceCreateRequest,
    MaintenanceResponse,
    NodeDrainResponse,
    NodeResponse,
    OfferResponse,
)


class FleetCalls(Transport):
    """The calls on the fleet, its nodes, maintenance and offers."""

    def put_fleet(self, toml_text: str, force: bool = False) -> FleetResponse:
        """Replace the fleet; refused (409) when signed contracts would be short of GPUs, unless `force`."""
        return self._call(
            "PUT",
            "/v1/fleet",
            FleetResponse,
            content=toml_text.encode(),
            headers={"Content-Type": "application/toml"},
            params={"force": "true"} if force else None,
        )

    def nodes(self) -> list[NodeResponse]:
        return self._call("GET", "/v1/nodes", list[NodeResponse])

    def drain(self, node: str, force: bool = False) -> NodeDrainResponse:
        """Cordon `node`; refused (409) when a signed contract would be short, unless `force` (then the answer
        lists the contracts left short, with how short)."""
        params = {"force": "true"} if force else None
        return self._call("POST", f"/v1/nodes/{segment(node)}/drain", NodeDrainResponse, params=params)

    def undrain(self, node: str) -> NodeResponse:
        return self._call("POST", f"/v1/nodes/{segment(node)}/undrain", NodeResponse)

    def schedule_maintenance(self, request: MaintenanceCreateRequest) -> MaintenanceResponse:
        return self._call("POST", "/v1/fleet/maintenance", MaintenanceResponse, body=request)

    def maintenance(self, include_past: bool = False) -> list[MaintenanceResponse]:
        params = {"include_past": "true"} if include_past else None
        return self._call("GET", "/v1/fleet/maintenance", list[MaintenanceResponse], params=params)

    def cancel_maintenance(self, window_id: str) -> MaintenanceResponse:
        return self._call("DELETE", f"/v1/fleet/maintenance/{segment(window_id)}", MaintenanceResponse)

    def offers(self, query: str = "") -> list[OfferResponse]:
        return self._call("GET", "/v1/offers", list[OfferResponse], params={"q": query} if query else None)
