"""The fleet: replace it from TOML (admin), list nodes with their free capacity, drain and undrain.

The TOML is stored as given; the parsed `Fleet` is cached per stored version. Replacing the fleet is refused
while a live rental sits on a node the new file removes or changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from threading import Lock

from suanli.app.downtime import out_of_service_until
from suanli.app.errors import Conflict, Invalid, NotFound
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import Caller
from suanli.app.tenants import require_admin, require_operator
from suanli.domain.catalog import Catalog
from suanli.domain.errors import SuanliError
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.inventory import Fleet, Node

MILLI_PER_GPU = 1000


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as listed: schedulable unless drained or kept out by a maintenance window (until its end)."""

    node: Node
    schedulable: bool
    free_gpu_milli: int
    maintenance_until: datetime | None = None


class FleetCache:
    """Parsed fleets by stored version, so readers parse the TOML once per change."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = Lock()
        self._version = -1
        self._fleet: Fleet | None = None

    def load(self, uow: UnitOfWork) -> tuple[int, Fleet | None]:
        """The newest stored fleet; reads only its version number unless that changed."""
        version = uow.fleet.current_version()
        if version is None:
            return 0, None
        with self._lock:
            if version == self._version:
                return self._version, self._fleet
        document = uow.fleet.current()
        if document is None:
            return 0, None
        with self._lock:
            if document.version != self._version:
                self._fleet = parse_fleet(document.toml, source="stored fleet", catalog=self.catalog)
                self._version = document.version
            return self._version, self._fleet


class FleetService:
    def __init__(
        self, uow: UnitOfWorkFactory, clock: Clock, cache: FleetCache, notice_horizon_s: float = 0.0
    ) -> None:
        """`notice_horizon_s`: how long before a window the leader stops placing on its node."""
        self.uow, self.clock, self.cache = uow, clock, cache
        self.notice_horizon_s = notice_horizon_s

    def put(self, caller: Caller, toml: str) -> Fleet:
        require_admin(caller)
        try:
            fleet = parse_fleet(toml, source="fleet", catalog=self.cache.catalog)
        except SuanliError as error:
            raise Invalid(str(error), field=getattr(error, "field", None) or "body") from error
        with self.uow() as uow:
            _, old = self.cache.load(uow)
            if old is not None:
                new_nodes = {node.name: node for node in fleet.nodes}
                old_nodes = {node.name: node for node in old.nodes}
                for allocations in uow.rentals.live_allocations().values():
                    for allocation in allocations:
                        name = allocation.node
                        if new_nodes.get(name) != old_nodes.get(name):
                            raise Conflict(
                                f"node {name} has live rentals; the new fleet removes or changes it",
                                field="body",
                            )
            uow.fleet.put(toml, [node.name for node in fleet.nodes], self.clock.now())
            uow.commit()
        return fleet

    def nodes(self, caller: Caller) -> list[NodeView]:
        require_operator(caller)
        with self.uow() as uow:
            _, fleet = self.cache.load(uow)
            if fleet is None:
                return []
            cordoned = uow.fleet.cordoned()
            now = self.clock.now()
            maintenance = out_of_service_until(uow.maintenance.list(now), now, self.notice_horizon_s)
            used: dict[str, int] = {}
            for allocations in uow.rentals.live_allocations().values():
                for allocation in allocations:
                    used[allocation.node] = used.get(allocation.node, 0) + sum(
                        s.milli for s in allocation.slices
                    )
        return [
            NodeView(
                node,
                node.name not in cordoned and node.name not in maintenance,
                node.gpu_count * MILLI_PER_GPU - used.get(node.name, 0),
                maintenance.get(node.name),
            )
            for node in fleet.nodes
        ]

    def set_schedulable(self, caller: Caller, node_name: str, schedulable: bool) -> NodeView:
        require_admin(caller)
        with self.uow() as uow:
            if not uow.fleet.set_schedulable(node_name, schedulable):
                raise NotFound(f"no node {node_name}")
            uow.commit()
        return next(view for view in self.nodes(caller) if view.node.name == node_name)
