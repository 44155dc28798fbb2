"""Capacity down for contract admission: scheduled maintenance windows and nodes cordoned now."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from suanli.app.ports import UnitOfWork
from suanli.app.records import MaintenanceWindow
from suanli.domain.contracts import Maintenance
from suanli.domain.inventory import Fleet


def down_for_contracts(
    uow: UnitOfWork, fleet: Fleet, now: datetime, extra: Sequence[MaintenanceWindow] = ()
) -> list[Maintenance]:
    """What contract admission counts as down: every maintenance window still to end (and `extra`, one
    being scheduled), and each node cordoned now from now on with no end (capacity down with no return date
    is not sold); a cordoned node's windows are inside its cordon, not counted twice."""
    nodes = {node.name: node for node in fleet.nodes}
    cordoned = uow.fleet.cordoned() & nodes.keys()
    windows = [w for w in (*uow.maintenance.list(now), *extra) if w.node in nodes]
    down = [window_down(fleet, w) for w in windows if w.node not in cordoned]
    for name in sorted(cordoned):
        node = nodes[name]
        if node.gpu_count:
            start_s = min([now.timestamp(), *(w.starts_at.timestamp() for w in windows if w.node == name)])
            down.append(Maintenance(name, node.gpu_model, node.region, node.gpu_count, start_s, math.inf))
    return down


def window_down(fleet: Fleet, window: MaintenanceWindow) -> Maintenance:
    """A window as the domain counts it: the node's GPUs of its model and region, down over the window."""
    node = next(n for n in fleet.nodes if n.name == window.node)
    return Maintenance(
        node.name,
        node.gpu_model,
        node.region,
        node.gpu_count,
        window.starts_at.timestamp(),
        window.ends_at.timestamp(),
    )
