"""Capacity down: for contract admission (maintenance windows and nodes cordoned now), and the nodes the
leader keeps out of placements now because of a window (also what node and offer listings show)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from suanli.app.ports import UnitOfWork
from suanli.app.records import MaintenanceWindow
from suanli.domain.contracts import Maintenance
from suanli.domain.inventory import Fleet
from suanli.domain.preemption import PreemptionConfig


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


def notice_horizon_s(preemption: PreemptionConfig) -> float:
    """The longest notice any tier gets: how long before a window its node stops taking rentals."""
    return max([preemption.default_notice_s, *preemption.notice_s.values()])


def out_of_service(windows: Sequence[MaintenanceWindow], now: datetime, horizon_s: float) -> set[str]:
    """Nodes the leader treats as cordoned now: inside a window, or within `horizon_s` of its start (a
    rental placed there would get notice at once)."""
    return set(out_of_service_until(windows, now, horizon_s))


def out_of_service_until(
    windows: Sequence[MaintenanceWindow], now: datetime, horizon_s: float
) -> dict[str, datetime]:
    """`out_of_service`'s nodes, each with the latest end of the windows that keep it out now."""
    lead = timedelta(seconds=horizon_s)
    until: dict[str, datetime] = {}
    for window in windows:
        if window.starts_at - lead <= now < window.ends_at:
            until[window.node] = max(window.ends_at, until.get(window.node, window.ends_at))
    return until
