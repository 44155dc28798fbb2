"""Spot re-pricing on the leader: live spot rentals pay their pool's spot price as it moves.

At the end of a cycle in which live spot rentals hold capacity (the leader keeps their ids in memory, so a
cycle without any costs nothing), each pool's utilization is computed once from the snapshot and every live
spot rental (placed, starting, running, preempting) not placed in this cycle is priced at it (`repricer`:
the price book's spot price, capped at its bid); a rate that moved by at least 1% (`rate_moved`) is recorded
as a rate change from now (`RentalRepo.change_rate`), which the meter charges. A spot rental whose bid fell
below its pool's floor (`floor_check`) gets a preemption notice, `preempted_by=BELOW_FLOOR`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from suanli.app.growth import held_request
from suanli.app.notices import withdraw
from suanli.app.ports import UnitOfWork, UnitOfWorkFactory
from suanli.app.records import BELOW_FLOOR, PREEMPTIBLE_STATES, Rental, RentalEvent
from suanli.app.rentals import to_request
from suanli.domain.billing.money import money_pair_text
from suanli.domain.billing.pricebook import rate_moved, utilization_milli
from suanli.domain.capacity import FULL_MILLI
from suanli.domain.catalog import GpuModel
from suanli.domain.plan import NodeAllocation
from suanli.domain.request import Shape, Tier
from suanli.domain.snapshot import Snapshot

REPRICED_STATES = ("placed", "starting", "running", "preempting")  # a spot rental that pays the spot price
Pool = tuple[GpuModel, str]  # (model, region) of a node
Utilization = Mapping[tuple[str, str], int]  # busy GPU milli per 1000 of each (model name, region) pool
# (unit of work, rental, (model, region) of each placed node, pool utilization milli, now) -> its quote
Pricer = Callable[[UnitOfWork, Rental, Sequence[Pool], Utilization, datetime], dict[str, Any]]
# (unit of work, live spot rentals and their nodes' (model, region), now) -> rental id: floor above its bid
FloorCheck = Callable[[UnitOfWork, Sequence[tuple[Rental, Sequence[Pool]]], datetime], dict[str, int]]
# (model, region) -> the spot floor per GPU-hour there now (None: no price), for admission
SpotFloors = Callable[[UnitOfWork, datetime], Callable[[str, str], int | None]]
# (unit of work, [(rental, shape, (model, region) of each of its nodes)], pool utilization milli, now)
# -> rental id: its spot rate per hour now
Repricer = Callable[
    [UnitOfWork, Sequence[tuple[Rental, Shape, Sequence[Pool]]], Utilization, datetime],
    dict[str, int],
]


def pool_utilization(snapshot: Snapshot, placed: Sequence[Pool]) -> dict[tuple[str, str], int]:
    """Busy GPU milli per 1000 of each (model, region) pool in `placed` (spot prices follow it)."""
    pools = {(model.name, region) for model, region in placed}
    return utilization_milli(
        (pool, len(state.gpus) * FULL_MILLI, sum(FULL_MILLI - entry[0] for entry in state.gpus))
        for state in snapshot.nodes
        if (pool := (state.node.gpu_model, state.node.region)) in pools
    )


class SpotRepricing:
    """Which live rentals are spot (each read once), and their re-pricing at the end of a cycle."""

    def __init__(self, repricer: Repricer, floor_check: FloorCheck | None, notice_s: float) -> None:
        self.repricer, self.floor_check, self.notice_s = repricer, floor_check, notice_s
        self.spot: set[str] = set()  # live rentals (holding allocations) at tier spot
        self.seen: set[str] = set()  # live rentals whose tier is known (spot or not)

    def forget_all(self) -> None:
        self.spot, self.seen = set(), set()

    def placed(self, rental: Rental) -> None:
        self.seen.add(rental.id)
        if Tier.parse(rental.spec.tier) is Tier.SPOT:
            self.spot.add(rental.id)

    def learn(self, uow: UnitOfWork, rental_ids: set[str]) -> None:
        """Note which of these live rentals are spot, reading only unknown ones."""
        unknown = rental_ids.difference(self.seen)
        if not unknown:
            return
        for rental in uow.rentals.by_ids(sorted(unknown)):
            if Tier.parse(rental.spec.tier) is Tier.SPOT:
                self.spot.add(rental.id)
        self.seen |= unknown

    def reprice(
        self,
        uow_factory: UnitOfWorkFactory,
        snapshot: Snapshot,
        held: Mapping[int, NodeAllocation],
        owner: Mapping[int, str],
        pool_of_node: Callable[[str], Pool],
        fresh: set[str],
        now: datetime,
    ) -> int:
        """Re-price the live spot rentals (`held`/`owner`: live allocation id -> what it holds / its
        rental; those in `fresh` were priced at placement in this cycle). Returns how many changed."""
        holders = set(owner.values())
        self.spot &= holders
        self.seen &= holders
        live = self.spot.difference(fresh)
        if not live:
            return 0
        nodes: dict[str, list[Pool]] = {}
        allocations: dict[str, list[NodeAllocation]] = {}
        ids: dict[str, set[int]] = {}
        for allocation_id in sorted(owner):
            rental_id = owner[allocation_id]
            if rental_id in live:
                nodes.setdefault(rental_id, []).append(pool_of_node(held[allocation_id].node))
                allocations.setdefault(rental_id, []).append(held[allocation_id])
                ids.setdefault(rental_id, set()).add(allocation_id)
        utilization = pool_utilization(snapshot, [pair for placed in nodes.values() for pair in placed])
        changed = 0
        with uow_factory() as uow:
            # a rental resized since the cycle read its allocations is priced by its resize; the next
            # cycle, which sees its new size, re-prices it
            still_held = uow.rentals.live_allocation_ids(sorted(nodes))
            rentals = [
                r
                for r in uow.rentals.by_ids(sorted(nodes))
                if r.state in REPRICED_STATES and ids[r.id] <= still_held
            ]
            running = [
                (r, held_request(to_request(r), allocations[r.id]).shape, nodes[r.id]) for r in rentals
            ]
            rates = self.repricer(uow, running, utilization, now)
            if self.floor_check is not None:
                changed += self._floor_notices(uow, rentals, nodes, now)
            for rental in rentals:
                rate, current, since = rates.get(rental.id), rental.price_micros_per_hour, rental.placed_at
                if rate is None or current is None or since is None or not rate_moved(current, rate):
                    continue
                uow.rentals.change_rate(rental.id, now, rate, since=since, previous=current)
                changed += 1
            if changed:
                uow.commit()
        return changed

    def _floor_notices(
        self, uow: UnitOfWork, rentals: Sequence[Rental], nodes: Mapping[str, list[Pool]], now: datetime
    ) -> int:
        """Give spot rentals whose bid fell below their pool's floor a notice (reason `below_floor`); at the
        deadline the cycle ends them like any victim (billed to the deadline), unless the floor falls back to
        their bid before it: the notice is then withdrawn. How many changed."""
        assert self.floor_check is not None
        leaving = [
            r
            for r in rentals
            if r.state == "preempting"
            and r.preempted_by == BELOW_FLOOR
            and r.notice_deadline is not None
            and r.notice_deadline > now
        ]
        leaving_ids = {r.id for r in leaving}
        candidates = [
            (r, nodes[r.id]) for r in rentals if r.state in PREEMPTIBLE_STATES or r.id in leaving_ids
        ]
        below = self.floor_check(uow, candidates, now) if candidates else {}
        deadline = now + timedelta(seconds=self.notice_s)
        given = 0
        for rental in leaving:  # the floor fell back to its bid before the deadline: it runs on
            if rental.id not in below:
                why = "the spot floor is no longer above its bid; it runs on"
                given += withdraw(uow, rental, now, why=why)
        for rental, _ in candidates:
            floor = below.get(rental.id)
            if floor is None or rental.id in leaving_ids:
                continue
            if uow.rentals.give_notice(rental.id, BELOW_FLOOR, deadline, expect=PREEMPTIBLE_STATES):
                bid = rental.spec.bid_micros_per_gpu_hour
                message = (
                    "bid {}/GPU-h is below the spot floor {}/GPU-h; ".format(
                        *money_pair_text(bid or 0, floor)
                    )
                    + f"notice until {deadline.isoformat()}"
                )
                uow.rentals.add_event(rental.id, RentalEvent(now, "preempting", "below_floor", message))
                given += 1
        return given
