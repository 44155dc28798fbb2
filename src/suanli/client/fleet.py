"""Calls on the fleet: its nodes (drain, undrain), maintenance windows and the offers for rent (what each
sends: `fleet_requests`)."""

from __future__ import annotations

from suanli.client import fleet_requests as sent
from suanli.client.transport import Transport
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
        return self._ask(sent.put_fleet(toml_text, force))

    def nodes(self) -> list[NodeResponse]:
        return self._ask(sent.nodes())

    def drain(self, node: str, force: bool = False) -> NodeDrainResponse:
        """Cordon `node`; refused (409) when a signed contract would be short, unless `force` (then the answer
        lists the contracts left short, with how short)."""
        return self._ask(sent.drain(node, force))

    def undrain(self, node: str) -> NodeResponse:
        return self._ask(sent.undrain(node))

    def schedule_maintenance(self, request: MaintenanceCreateRequest) -> MaintenanceResponse:
        return self._ask(sent.schedule_maintenance(request))

    def maintenance(self, include_past: bool = False) -> list[MaintenanceResponse]:
        return self._ask(sent.maintenance(include_past))

    def cancel_maintenance(self, window_id: str) -> MaintenanceResponse:
        return self._ask(sent.cancel_maintenance(window_id))

    def offers(self, query: str = "") -> list[OfferResponse]:
        return self._ask(sent.offers(query))
