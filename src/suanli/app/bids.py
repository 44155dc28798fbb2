"""A spot rental's bid, changed by its tenant (`PUT /v1/rentals/{id}/bid`, `suanli bid`).

Pending, the new bid orders it among spot and decides which pools' floors it meets. Live, its rate is capped
at the new bid from the leader's next re-pricing, and one under notice because the floor rose above its old
bid runs on once the bid reaches the floor again: the repricer withdraws the notice (`spot_repricing`). A
live rental's new bid may not be under the floor of its pool (it would pay less than the floor and stay:
a bid below the floor at placement is kept only because the rental was placed at it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from suanli.app.errors import Conflict, Invalid
from suanli.app.ports import UnitOfWork
from suanli.app.records import BELOW_FLOOR, END_STATES, LIVE_STATES, Rental, RentalEvent
from suanli.domain.billing.money import money_pair_text, money_text
from suanli.domain.inventory import Fleet
from suanli.domain.plan import NodeAllocation

BID_FIELD = "bid_micros_per_gpu_hour"


def change_bid(
    uow: UnitOfWork,
    rental: Rental,
    bid_micros: int,
    fleet: Fleet | None,
    floor_of: Callable[[str, str], int | None],
    now: datetime,
) -> bool:
    """Give `rental` (read locked) the bid `bid_micros` per GPU-hour, with an event; False when it already
    bids that. Refused: not spot, ended or being stopped, or live with the new bid under its pool's floor."""
    spec = rental.spec
    if spec.tier != "spot":
        raise Invalid(f"only a spot rental has a bid; {rental.id} is {spec.tier}", field=BID_FIELD)
    if rental.state in END_STATES or rental.state == "stopping":
        raise Conflict(f"rental {rental.id} is {rental.state}", field="state")
    if bid_micros <= 0:
        raise Invalid("a bid is more than 0", field=BID_FIELD)
    if spec.bid_micros_per_gpu_hour == bid_micros:
        return False
    allocation = uow.rentals.allocation(rental.id) if rental.state in LIVE_STATES else []
    if allocation and fleet is not None:
        nodes = {n.name: n for n in fleet.nodes}
        held = {a.node for a in allocation}
        pools = {(nodes[n].gpu_model, nodes[n].region) for n in held if n in nodes}
        floors = [f for pool in sorted(pools) if (f := floor_of(*pool)) is not None]
        if floors and bid_micros < max(floors):
            bid_text, floor_text = money_pair_text(bid_micros, max(floors))
            raise Invalid(
                f"bid {bid_text}/GPU-h is below the spot floor {floor_text}/GPU-h of the pool it runs in: a "
                "running spot rental bids at least the floor",
                field=BID_FIELD,
            )
    uow.rentals.update_spec(
        rental.id, replace(rental, spec=replace(spec, bid_micros_per_gpu_hour=bid_micros))
    )
    capped = _capped_now(uow, rental, allocation, bid_micros, now)
    before = (
        "none (the spot price)"
        if spec.bid_micros_per_gpu_hour is None
        else money_text(spec.bid_micros_per_gpu_hour)
    )
    message = f"bid changed from {before} to {money_text(bid_micros)} per GPU-hour"
    if rental.state == "preempting" and rental.preempted_by not in (None, BELOW_FLOOR):
        until = "" if rental.notice_deadline is None else f" until {rental.notice_deadline.isoformat()}"
        message += f"; it stays under notice{until} for the rental it was preempted for"
    if capped is not None:
        message += f"; its rate is now {money_text(capped)}/h, its bid for its GPUs"
    uow.rentals.add_event(rental.id, RentalEvent(now, "bid", None, message))
    return True


def _capped_now(
    uow: UnitOfWork, rental: Rental, allocation: Sequence[NodeAllocation], bid_micros: int, now: datetime
) -> int | None:
    """A live rental's rate brought down to its new bid for the GPUs it holds (`allocation`), from `now`,
    when it was above it (the repricer moves a rate only by 1% or more, and a bid is a cap, never exceeded);
    the new rate."""
    current, since = rental.price_micros_per_hour, rental.placed_at
    if not allocation or current is None or since is None:
        return None
    capped = round(bid_micros * sum(a.gpus for a in allocation))
    if capped >= current:
        return None
    uow.rentals.change_rate(rental.id, now, capped, since=since, previous=current)
    return capped
