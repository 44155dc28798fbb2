"""Calls on the fleet for asyncio code: `FleetCalls`' awaited (what each sends: `fleet_requests`)."""

from __future__ import annotations

from suanli.client import fleet_requests as sent
from suanli.client.async_transport import AsyncTransport
from suanli.wire.schemas import (
    FleetResponse,
    MaintenanceCreateRequest,
    MaintenanceResponse,
    NodeDrainResponse,
    NodeResponse,
    OfferResponse,
)


class AsyncFleetCalls(AsyncTransport):
    """The calls on the fleet, its nodes, maintenance and offers, awaited (see `FleetCalls`)."""

    async def put_fleet(self, toml_text: str, force: bool = False) -> FleetResponse:
        """Replace the fleet; refused (409) when signed contracts would be short of GPUs, unless `force`."""
        return await self._ask(sent.put_fleet(toml_text, force))

    async def nodes(self) -> list[NodeResponse]:
        return await self._ask(sent.nodes())

    async def drain(self, node: str, force: bool = False) -> NodeDrainResponse:
        """Cordon `node`; refused (409) when a signed contract would be short, unless `force` (then the answer
        lists the contracts left short, with how short)."""
        return await self._ask(sent.drain(node, force))

    async def undrain(self, node: str) -> NodeResponse:
        return await self._ask(sent.undrain(node))

    async def schedule_maintenance(self, request: MaintenanceCreateRequest) -> MaintenanceResponse:
        return await self._ask(sent.schedule_maintenance(request))

    async def maintenance(self, include_past: bool = False) -> list[MaintenanceResponse]:
        return await self._ask(sent.maintenance(include_past))

    async def cancel_maintenance(self, window_id: str) -> MaintenanceResponse:
        return await self._ask(sent.cancel_maintenance(window_id))

    async def offers(self, query: str = "") -> list[OfferResponse]:
        return await self._ask(sent.offers(query))
