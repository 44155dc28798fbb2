"""The cycle's apply step for capacity: a placement booked and priced, a trimmed victim's kept part booked,
live rentals resized in place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from suanli.app.booking import bookings_for
from suanli.app.list_prices import list_price
from suanli.app.ports import UnitOfWork
from suanli.app.records import Rental, RentalEvent
from suanli.app.rentals import per_node_gpus, time_limit_s
from suanli.app.resizing import Resizer
from suanli.app.spot_repricing import pool_utilization
from suanli.domain.capacity import FULL_MILLI
from suanli.domain.plan import NodeAllocation, Placement
from suanli.domain.promise_holds import hold_promise
from suanli.domain.rendezvous import free_master_port
from suanli.domain.request import Tier

if TYPE_CHECKING:
    from suanli.app.scheduling import Scheduler


class Placing:
    """Booking, pricing and resizing, a part of the `Scheduler` (its snapshot and pricer)."""

    def _apply_placement(
        self: Scheduler,
        uow: UnitOfWork,
        rental: Rental,
        placement: Placement,
        now: datetime,
        changed: bool = False,
    ) -> int:
        """Book `placement` for `rental` unless it was `changed` (stopped or resized) or left pending since it
        was read; 1 if booked."""
        assert self.snapshot is not None
        if changed:
            return self.live.unplace(placement)
        price, quoted = self._price(uow, rental, placement, now)
        limit_s = time_limit_s(rental, placement.gpus)
        time_limit_at = None if limit_s is None else now + timedelta(seconds=limit_s)
        borrowed = rental.id in self.lent
        port = free_master_port(rental.id, uow.rentals.master_ports_on([a.node for a in placement.nodes]))
        size = (len(placement.nodes), per_node_gpus(placement.nodes))
        if not uow.rentals.mark_placed(
            rental.id,
            now,
            price,
            quoted,
            time_limit_at=time_limit_at,
            borrowed=borrowed,
            master_port=port,
            size=size,
        ):
            return self.live.unplace(placement)
        rows = bookings_for(placement.nodes, self.live.node, uow.rentals.booked_slots)
        allocation_ids = uow.rentals.book(rental.id, placement.nodes, rows, at=now)
        nodes = ", ".join(a.node for a in placement.nodes)
        lent = "; borrowed: taken back with notice when a rental ahead of it needs them" if borrowed else ""
        uow.rentals.add_event(rental.id, RentalEvent(now, "placed", None, f"on {nodes}{lent}"))
        self.live.booked(rental.id, allocation_ids, placement.nodes)
        if self.spot_pricing is not None:
            self.spot_pricing.placed(rental)
        return 1

    def _price(
        self: Scheduler, uow: UnitOfWork, rental: Rental, placement: Placement, now: datetime
    ) -> tuple[int, dict | None]:
        """The rate `rental` pays on `placement` (on the snapshot now) and its quote: the pricer's (price
        book, spot price at the pool's utilization, plan, contract), else the list prices of its slices."""
        assert self.snapshot is not None
        if self.pricer is not None:
            placed = [self.live.pool_of_node(a.node) for a in placement.nodes]
            rental = held_spec(rental, placement)  # an elastic one started smaller pays for what it holds
            spot = Tier.parse(rental.spec.tier) is Tier.SPOT
            utilization = pool_utilization(self.snapshot, placed) if spot else {}
            quoted = self.pricer(uow, rental, placed, utilization, now)
            return int(quoted["final_micros_per_hour"]), quoted
        price = sum(
            piece.milli * list_price(self.live.node(a.node)[1], rental.spec.tier) // FULL_MILLI
            for a in placement.nodes
            for piece in a.slices
        )
        return price, None

    def _booker(
        self: Scheduler, uow: UnitOfWork, now: datetime
    ) -> Callable[[str, Sequence[NodeAllocation]], None]:
        """Books allocations already on the snapshot for a rental (a trimmed victim's kept part)."""

        def book(rental_id: str, nodes: Sequence[NodeAllocation]) -> None:
            rows = bookings_for(nodes, self.live.node, uow.rentals.booked_slots)
            self.live.booked(rental_id, uow.rentals.book(rental_id, nodes, rows, at=now, extend=True), nodes)

        return book

    def _resize(self: Scheduler, uow: UnitOfWork, now: datetime, promised: Sequence[Placement] = ()) -> int:
        """Live rentals resized in place, from what this cycle left free (`Resizer`), never from capacity
        promised to a preemptor (held on the snapshot while the resizer runs). How many changed."""
        if not self.resizing:
            return 0
        assert self.snapshot is not None and self.policy is not None
        holds = [part for promise in promised for part in hold_promise(self.snapshot, promise)]
        try:
            return self._resize_now(uow, now)
        finally:
            for give_back, _ in reversed(holds):
                give_back()

    def _resize_now(self: Scheduler, uow: UnitOfWork, now: datetime) -> int:
        assert self.snapshot is not None and self.policy is not None
        resizer = Resizer(
            self.snapshot,
            self.policy,
            self.limits,
            self.holding,
            self.contracts,
            self.live.held,
            self.live.owner,
            self.live.node,
            self.drain,
            self.spot_yields,
            self.maintenance,
        )
        return resizer.apply(uow, self.resizing, now)


def held_spec(rental: Rental, placement: Placement) -> Rental:
    """`rental` with its spec's GPUs per node as `placement` holds them (an elastic rental started on fewer
    than it asks for; its nodes are the placement's), for its price."""
    spec, first = rental.spec, placement.nodes[0] if placement.nodes else None
    if spec.min_gpus is None or first is None or spec.mig_profile or spec.share_milli is not None:
        return rental
    held = len(first.slices)
    return rental if held == spec.gpus else replace(rental, spec=replace(spec, gpus=held))
