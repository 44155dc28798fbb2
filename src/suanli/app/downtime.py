"""Capacity down: for contract admission (maintenance windows and nodes cordoned now), and the nodes the
leader keeps out of placements now because of a window (also what node and offer listings show)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta

from suanli.app.ports import UnitOfWork
from suanli.app.records import MaintenanceWindow
from suanli.domain.contracts import Maintenance
from suanli.domain.inventory import Fleet
from suanli.domain.plan import Pending, Reason
from suanli.domain.policies import Policy
from suanli.domain.preemption import PreemptionConfig
from suanli.domain.request import Request
from suanli.domain.scheduler import trial_place
from suanli.domain.snapshot import Snapshot


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


def maintenance_reasons(
    still: Sequence[Pending],
    requests: Mapping[str, Request],
    snapshot: Snapshot,
    policy: Policy,
    windows: Sequence[MaintenanceWindow],
    drained: Collection[str],
    horizon_s: float,
    now: datetime,
) -> list[Pending]:
    """`still`, with a request waiting for capacity that would fit now on nodes in (or about to enter)
    maintenance, or that declares a duration it would still run for when a node's window starts, waiting for
    `maintenance` instead, its message naming the nodes and their windows: "busy" would say rentals hold
    them. The snapshot is left as it was found."""
    if not any(p.reason is Reason.NO_CAPACITY for p in still):
        return list(still)
    if not windows:
        return _drain_reasons(still, requests, snapshot, policy, drained)
    until = out_of_service_until(windows, now, horizon_s)
    down = [n for n in until if n not in drained and n in snapshot.by_name]
    starts: dict[str, datetime] = {}  # each node's next window still ahead
    for window in windows:
        if window.starts_at > now and window.node not in until:
            starts[window.node] = min(window.starts_at, starts.get(window.node, window.starts_at))
    found = []
    with snapshot.uncordoned(down):
        for pending in still:
            request = requests.get(pending.request_id)
            if pending.reason is Reason.NO_CAPACITY and request is not None:
                pending = _maintenance_reason(pending, request, snapshot, policy, until, starts, now)
            found.append(pending)
    return found


def _drain_reasons(
    still: Sequence[Pending],
    requests: Mapping[str, Request],
    snapshot: Snapshot,
    policy: Policy,
    drained: Collection[str],
) -> list[Pending]:
    """`still`, a request waiting for capacity that would fit now on drained nodes saying so (its reason
    stays `no_capacity`: an operator, not rentals, holds the nodes, and no window says until when)."""
    nodes = [n for n in drained if n in snapshot.by_name]
    if not nodes:
        return list(still)
    found = []
    with snapshot.uncordoned(nodes):
        for pending in still:
            request = requests.get(pending.request_id)
            if pending.reason is Reason.NO_CAPACITY and request is not None:
                placement = trial_place(snapshot, request, policy)
                on = sorted({a.node for a in placement.nodes} & set(nodes)) if placement is not None else []
                if on:
                    message = f"it fits now only on nodes an operator drained: {', '.join(on)}"
                    pending = Pending(pending.request_id, Reason.NO_CAPACITY, message)
            found.append(pending)
    return found


def _maintenance_reason(
    pending: Pending,
    request: Request,
    snapshot: Snapshot,
    policy: Policy,
    until: Mapping[str, datetime],
    starts: Mapping[str, datetime],
    now: datetime,
) -> Pending:
    """`maintenance` for one request waiting for capacity, when windows (in force `until`, or ahead at
    `starts`) are what keeps it out; `pending` as it was otherwise."""
    placement = trial_place(snapshot, request, policy)
    nodes = sorted({a.node for a in placement.nodes}) if placement is not None else []
    inside = [n for n in nodes if n in until]
    end = now + timedelta(seconds=request.max_duration_s or 0)
    ahead = [n for n in nodes if n in starts and starts[n] < end]
    if inside:
        back = ", ".join(f"{n} until {until[n]:%Y-%m-%d %H:%M} UTC" for n in inside)
        return Pending(
            pending.request_id, Reason.MAINTENANCE, f"it fits now only on nodes in maintenance: {back}"
        )
    if ahead and request.max_duration_s is not None:
        at = ", ".join(f"{n} at {starts[n]:%Y-%m-%d %H:%M} UTC" for n in ahead)
        message = (
            f"it would still run, by its declared duration, when maintenance starts on {at}; "
            "it waits for nodes it can finish on"
        )
        return Pending(pending.request_id, Reason.MAINTENANCE, message)
    return pending
