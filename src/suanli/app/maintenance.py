"""Scheduled maintenance: an operator takes a node out of service over [start, end) with a reason.

A window is refused (409, naming the contracts) when the contracts signed for the node's pool would add up to
more than its GPUs less those in maintenance at some instant of the window, unless forced (then the answer
names the contracts left short). Inside a window the leader places nothing on the node and lets it back
after (`app/scheduling.py`); before it, the node's rentals get notice to end by the start. Contract
admission counts the windows, and the nodes cordoned now (no return date: down for good, as far as
anyone knows), as down (`down_for_contracts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from suanli.app.downtime import down_for_contracts, notice_horizon_s
from suanli.app.errors import Conflict, Invalid, NotFound
from suanli.app.fleet import FleetCache
from suanli.app.ids import new_id, upcoming_window
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import PREEMPTIBLE_STATES, Caller, MaintenanceWindow, RentalEvent, domain_contract
from suanli.app.rentals import to_request
from suanli.app.tenants import require_admin, require_operator
from suanli.domain.contracts import ContractShortfall, contract_shortfalls, fleet_capacity
from suanli.domain.elastic_start import least_size
from suanli.domain.preemption import PreemptionConfig, kept_through_maintenance
from suanli.domain.request import Tier

MAX_REASON_CHARS = 500
MAINTENANCE = "maintenance"  # `preempted_by` of a rental given notice because its node goes into maintenance


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A window just scheduled, with the contracts it leaves short and by how much (forced only)."""

    window: MaintenanceWindow
    left_short: tuple[ContractShortfall, ...] = ()


class MaintenanceService:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, cache: FleetCache) -> None:
        self.uow, self.clock, self.cache = uow, clock, cache

    def schedule(
        self,
        caller: Caller,
        node: str,
        starts_at: datetime,
        ends_at: datetime,
        reason: str,
        *,
        force: bool = False,
    ) -> Scheduled:
        require_admin(caller)
        now = self.clock.now()
        starts_at, ends_at = upcoming_window(starts_at, ends_at, now)
        if len(reason) > MAX_REASON_CHARS:
            raise Invalid(f"at most {MAX_REASON_CHARS} characters", field="reason")
        window = MaintenanceWindow(new_id("mnt"), node, starts_at, ends_at, reason, now)
        with self.uow() as uow:
            _, fleet = self.cache.load(uow)
            if fleet is None or all(n.name != node for n in fleet.nodes):
                raise Invalid(f"no node {node!r} in the fleet", field="node")
            uow.contracts.lock_signing()  # a signing and a window take turns: neither misses the other
            down = down_for_contracts(uow, fleet, now, extra=[window])
            start_s, end_s = starts_at.timestamp(), ends_at.timestamp()
            signed = [domain_contract(c) for c in uow.contracts.list(None)]
            short = tuple(contract_shortfalls(signed, fleet_capacity(fleet), down, start_s, end_s))
            if short and not force:
                named = ", ".join(s.contract.id for s in short)
                raise Conflict(
                    f"maintenance of {node} over {starts_at:%Y-%m-%d %H:%M} to {ends_at:%Y-%m-%d %H:%M} UTC "
                    f"would leave contract(s) {named} short of GPUs; pass force (the CLI's "
                    "--force) to schedule it anyway",
                    field="node",
                )
            uow.maintenance.add(window)
            uow.commit()
        return Scheduled(window, short)

    def list(self, caller: Caller, include_past: bool = False) -> list[MaintenanceWindow]:
        require_operator(caller)
        with self.uow() as uow:
            return uow.maintenance.list(None if include_past else self.clock.now())

    def cancel(self, caller: Caller, window_id: str) -> MaintenanceWindow:
        require_admin(caller)
        with self.uow() as uow:
            window = uow.maintenance.get(window_id)
            if window is None or not uow.maintenance.remove(window_id):
                raise NotFound(f"no maintenance window {window_id}")
            uow.commit()
        return window


# --- on the leader: the cycle keeps nodes out of service inside their windows and gives notice before ------


def upcoming(windows: Sequence[MaintenanceWindow], now: datetime) -> tuple[tuple[str, float, float], ...]:
    """(node, start, end) of the windows still to start: what a rental's declared duration must end before,
    and what a booking planned later must not start inside."""
    return tuple(
        (w.node, w.starts_at.timestamp(), w.ends_at.timestamp()) for w in windows if w.starts_at > now
    )


def give_notices(
    uow: UnitOfWork,
    windows: Sequence[MaintenanceWindow],
    nodes_of: Mapping[str, set[str]],
    preemption: PreemptionConfig,
    now: datetime,
) -> int:
    """Give each live rental on a node whose window starts within its tier's notice period notice to end by
    the start (`preempted_by` maintenance; a window scheduled later than that: by now at the latest, as the
    operator asked); at the deadline the cycle ends it like any victim, billed to the deadline, but an
    elastic gang that keeps its least size on its other nodes is trimmed instead, as a preemption trims it.
    `nodes_of`: rental id -> the nodes it holds. How many got notice."""
    horizon = timedelta(seconds=notice_horizon_s(preemption))
    soon = [w for w in windows if w.starts_at - horizon <= now < w.ends_at]
    if not soon:
        return 0
    starts: dict[str, MaintenanceWindow] = {}
    for window in sorted(soon, key=lambda w: (w.starts_at, w.id)):
        starts.setdefault(window.node, window)
    hit = sorted(rental for rental, nodes in nodes_of.items() if nodes & starts.keys())
    given = 0
    for rental in uow.rentals.by_ids(hit):
        if rental.state not in PREEMPTIBLE_STATES or rental.preempted_by is not None:
            continue
        window = min((starts[n] for n in nodes_of[rental.id] if n in starts), key=lambda w: w.starts_at)
        notice = timedelta(seconds=preemption.notice_for(Tier.parse(rental.spec.tier)))
        if now < window.starts_at - notice:
            continue  # its tier's notice period has not begun
        deadline = max(window.starts_at, now)
        # an elastic gang gives back only its nodes going into maintenance, and runs on with the others
        allocation = uow.rentals.allocation(rental.id)
        keeps = kept_through_maintenance(allocation, least_size(to_request(rental)), starts.keys())
        if uow.rentals.give_notice(rental.id, MAINTENANCE, deadline, expect=PREEMPTIBLE_STATES, keeps=keeps):
            why = f" ({window.reason})" if window.reason else ""
            message = (
                f"node {window.node} goes into maintenance {window.id} at {window.starts_at.isoformat()}"
                f"{why}; notice until {deadline.isoformat()}"
            )
            if keeps is not None:
                going = sorted({a.node for a in allocation} - {a.node for a in keeps})
                message += f"; it then gives back {', '.join(going)} and runs on with its other nodes"
            uow.rentals.add_event(rental.id, RentalEvent(now, "preempting", "maintenance", message))
            given += 1
    return given
