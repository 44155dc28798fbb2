"""The leader's in-place resizes of live whole-GPU rentals, applied in its cycle after admission from what
the cycle left free (a resized rental does not jump ahead of pending rentals).

* A new GPU count per node comes first: fewer are given back at once (`elastic.shrink`); more are taken only
  where every node of the rental has them free, all or nothing (`elastic.grow`), except that an elastic
  rental (`min_gpus`) takes as many of them as are free and grows again as more free. The rental's
  allocations are replaced by new rows, so its agents see new slices and restart the workload with them.
* Then more nodes, nearest its own (`elastic.grow`), of its new per-node shape: a gang never mixes sizes. All
  of them at once, or for an elastic gang as many as fit.
* A growth fits within its tenant's limits and leaves what contracts hold for others (`app/growth.py`); while
  it cannot, the rental keeps what it holds and an event says why, once. The rate follows its GPUs
  (`follow_size`).
* A growth keeps off the nodes drained for a rigid blocked head (every booking's nodes, under the
  conservative queue) unless the rental ends before that start, as a backfill would: capacity freed for a
  waiting rental's promised start is not given to a running one. Spot does not grow while a higher tier
  waits for capacity (the queue's `spot_yields`): it would be preempted for it a moment later.
* The rental's row is held (`lock=True`) and a rental whose live allocations are not the ones the leader
  decided on (a resize or an end committed meanwhile) is left to the next cycle, which starts from them.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from suanli.app.booking import bookings_for
from suanli.app.growth import Held, held_for_contracts, held_request, within_limits
from suanli.app.ports import UnitOfWork
from suanli.app.records import PREEMPTIBLE_STATES, Rental, RentalEvent
from suanli.app.rentals import added_price, follow_size, limit_at_speed, per_node_gpus
from suanli.domain.catalog import GpuModel
from suanli.domain.contracts import Contract
from suanli.domain.elastic import grow, shrink
from suanli.domain.elastic_start import Drain, full_gpus, yields_here
from suanli.domain.inventory import Node
from suanli.domain.plan import NodeAllocation, Pending, Placement, Reason
from suanli.domain.policies import Policy
from suanli.domain.quotas import Limits
from suanli.domain.request import Request, Tier, WholeGpus
from suanli.domain.running import Running
from suanli.domain.snapshot import Snapshot


@dataclass
class Resizer:
    """One cycle's resizes on the leader's snapshot; `held` and `owner` (live allocation id -> what it holds,
    whose it is) are the leader's and are kept in step with what is booked."""

    snapshot: Snapshot
    policy: Policy
    limits: Limits | None
    holding: list[Held]  # every rental as large as it is now; grows as this cycle's resizes apply
    contracts: Sequence[Contract]
    held: MutableMapping[int, NodeAllocation]
    owner: MutableMapping[int, str]
    node: Callable[[str], tuple[Node, GpuModel]]
    drain: Drain | None = None  # waiting rentals' planned starts, which a growth keeps off
    # the pools where a higher tier waits for capacity: spot does not grow there (it would be taken back)
    spot_yields: frozenset[tuple[str, str]] = frozenset()
    # maintenance windows to come, (node, start, end): a growth keeps off a node whose window starts before
    # the rental's declared end, as its placement did (`Gates.maintenance`)
    maintenance: Sequence[tuple[str, float, float]] = ()

    def apply(self, uow: UnitOfWork, resizing: Sequence[Running], now: datetime) -> int:
        """Resize each of `resizing` (as large as it is now) towards its spec; how many changed."""
        wanted = {r.request.id for r in resizing}
        decided_on: dict[str, set[int]] = {}
        for allocation_id, owner in self.owner.items():
            if owner in wanted:
                decided_on.setdefault(owner, set()).add(allocation_id)
        changed = 0
        # the oldest rental first (as `grow_toward_size` grows the simulator's jobs) when several want the
        # same free GPUs
        for running in sorted(resizing, key=lambda r: (r.started_at_s, r.request.id)):
            rental = uow.rentals.get(running.request.id, lock=True)
            if rental is None or rental.state not in PREEMPTIBLE_STATES:
                continue
            allocation_ids = decided_on.get(rental.id, set())
            if uow.rentals.live_allocation_ids_of(rental.id) != allocation_ids:
                continue  # resized or ended since this cycle began: the next one starts from the database
            held = running.request
            if isinstance(held.shape, WholeGpus) and rental.spec.gpus != held.shape.count:
                outcome = self._change_gpus(uow, rental, running, allocation_ids, now)
                if isinstance(outcome, Pending):
                    what = f"to have {rental.spec.gpus} GPUs per node (has {held.shape.count})"
                    _waiting(uow, rental, what, outcome, now)
                    continue
                running, changed = outcome, changed + 1
                rental = uow.rentals.get(rental.id) or rental  # at its new rate
            changed += self._add_nodes(uow, rental, running, now)
        return changed

    def _add_nodes(self, uow: UnitOfWork, rental: Rental, running: Running, now: datetime) -> int:
        have = len(running.placement.nodes)
        extra = rental.spec.nodes - have
        if extra <= 0:
            return 0
        per_node = per_node_gpus(running.placement.nodes)
        outcome: Placement | Pending | None = None
        for step in _steps(rental, extra):  # an elastic gang takes as many of the nodes as fit
            more = replace(running.request, id=f"{rental.id}+nodes", node_count=step)
            price = added_price(uow, rental, (have, per_node), (have + step, per_node), now)
            outcome = self._grow(rental, running, more, price, now, extra_nodes=step)
            if isinstance(outcome, Placement):
                break
        assert outcome is not None
        if isinstance(outcome, Pending):
            _waiting(uow, rental, f"to grow by {extra} nodes (has {have})", outcome, now)
            return 0
        self._book(uow, rental.id, outcome.nodes, now)
        follow_size(uow, rental, (have, per_node), (have + len(outcome.nodes), per_node), now)
        nodes = ", ".join(a.node for a in outcome.nodes)
        uow.rentals.add_event(rental.id, RentalEvent(now, "grown", None, f"onto {nodes}"))
        return 1

    def _change_gpus(
        self, uow: UnitOfWork, rental: Rental, running: Running, allocation_ids: set[int], now: datetime
    ) -> Running | Pending:
        """`running` (holding `allocation_ids`) with its spec's GPU count on each of its nodes, or why it
        cannot have them yet."""
        held, wanted = running.request, rental.spec.gpus
        assert isinstance(held.shape, WholeGpus)
        have = held.shape.count
        stretch_until = None
        if wanted < have:
            kept, _ = shrink(self.snapshot, running.placement, fewer_gpus_per_node=have - wanted)
            nodes = kept.nodes
            # the tenant's own shrink: its limit stretches, but never past a start planned on its nodes
            # that it ended before (it was let start, or grow, ahead of it on that promise)
            own = {a.node for a in nodes}
            planned_s = None if self.drain is None else self.drain.next_start(own, running.expected_end_s)
            if planned_s is not None:
                stretch_until = datetime.fromtimestamp(planned_s, UTC)
        else:
            nodes_held = len(running.placement.nodes)
            outcome: Placement | Pending | None = None
            for step in _steps(rental, wanted - have):  # an elastic rental takes as many as are free
                more = replace(held, id=f"{rental.id}+gpus", shape=WholeGpus(step))
                price = added_price(uow, rental, (nodes_held, have), (nodes_held, have + step), now)
                outcome = self._grow(rental, running, more, price, now, extra_gpus_per_node=step)
                if isinstance(outcome, Placement):
                    wanted = have + step
                    break
            assert outcome is not None
            if isinstance(outcome, Pending):
                return outcome
            added = {a.node: a for a in outcome.nodes}
            nodes = tuple(replace(a, slices=a.slices + added[a.node].slices) for a in running.placement.nodes)
        uow.rentals.release(rental.id, at=now)
        for allocation_id in allocation_ids:
            del self.held[allocation_id], self.owner[allocation_id]
        self._book(uow, rental.id, nodes, now)
        capped = follow_size(uow, rental, (len(nodes), have), (len(nodes), wanted), now, stretch_until)
        restarts = "" if rental.placed_at == now else "; its workload restarts"  # (placed in this cycle)
        message = f"now {wanted} GPUs on each of its {len(nodes)} nodes (was {have}){restarts}"
        if capped and stretch_until is not None:
            message += (
                f"; its time limit stretches no later than {stretch_until:%Y-%m-%d %H:%M:%S} UTC, when "
                "another rental is planned to start on its node"
            )
        uow.rentals.add_event(rental.id, RentalEvent(now, "resized", None, message))
        placement = Placement(rental.id, nodes, running.placement.subtree)
        return replace(running, request=held_request(held, nodes), placement=placement)

    def _grow(
        self, rental: Rental, running: Running, more: Request, price: int, now: datetime, **extra: int
    ) -> Placement | Pending:
        """The part `more` (at `price` per hour) added to `running` on the snapshot (`elastic.grow` with
        `extra`), within its tenant's limits and without taking what contracts hold for others; it counts
        for the next growth in this cycle too."""
        if running.request.tier is Tier.SPOT and yields_here(
            self.spot_yields, self.snapshot, running.placement
        ):
            return Pending(rental.id, Reason.NO_CAPACITY, "a higher tier is waiting for capacity")
        now_s = now.timestamp()
        end_s = running.expected_end_s
        drained = frozenset() if self.drain is None else self.drain.keep_off(end_s)
        windowed = {n for n, start_s, _ in self.maintenance if end_s is not None and now_s < start_s < end_s}
        avoid = drained | windowed
        moved_end_s = None  # an elastic rental's limit moves with its speed: sooner once grown (follow_size)
        elastic = rental.spec.min_gpus is not None and rental.time_limit_at is not None
        if elastic and end_s is not None and end_s > now_s:
            was, will = running.placement.gpus, running.placement.gpus + full_gpus(more)
            moved_end_s = min(limit_at_speed(rental, now, was, will).timestamp(), end_s)
        with self.snapshot.cordoned(avoid):
            limited = within_limits(
                self.limits, self.holding, more, price, now_s, self.snapshot, running.placement, moved_end_s
            )
            outcome = limited or grow(self.snapshot, running.request, running.placement, self.policy, **extra)
        own = {a.node for a in running.placement.nodes}
        if (
            limited is None
            and isinstance(outcome, Pending)
            and own & drained
            and not own & windowed
            and running.request.node_count == 1
        ):
            free = sum(self.snapshot.by_name[node].free_milli for node in own) / 1000
            if free >= extra.get("extra_gpus_per_node", 0) > 0:  # they are free, but planned for another
                return Pending(
                    rental.id,
                    Reason.BLOCKED_BY_HEAD,
                    f"the free GPUs on {', '.join(sorted(own))} are kept for a rental planned to start there "
                    "before this one would end",
                )
        if isinstance(outcome, Placement):
            why = held_for_contracts(
                self.snapshot, self.holding, self.contracts, rental, outcome, more, now_s
            )
            if why is not None:
                return why
            self.holding.append(Held(more, None, outcome, price_micros_per_hour=price))
        return outcome

    def _book(self, uow: UnitOfWork, rental_id: str, nodes: Sequence[NodeAllocation], now: datetime) -> None:
        rows = bookings_for(nodes, self.node, uow.rentals.booked_slots)
        allocation_ids = uow.rentals.book(rental_id, nodes, rows, at=now, extend=True)
        self.held.update(zip(allocation_ids, nodes, strict=True))
        self.owner.update((i, rental_id) for i in allocation_ids)


def _steps(rental: Rental, missing: int) -> range:
    """The growths to try, largest first: all that is missing, or for an elastic rental (`min_gpus`: it
    runs on fewer than it asks) any part of it, so it grows as capacity frees, as the simulator's jobs do."""
    return range(missing, 0, -1) if rental.spec.min_gpus is not None else range(missing, missing - 1, -1)


SIZE_EVENTS = frozenset({"placed", "resized", "grown", "requeued"})  # after one, a wait is said anew


def _waiting(uow: UnitOfWork, rental: Rental, what: str, why: Pending, now: datetime) -> None:
    """Say once why the rental cannot change yet: again only when the change or the reason's kind does, not
    when the figures in its message move (a spend cap's money moves every cycle), nor when other events
    came since (its workload started), until its size changes."""
    said = f"waiting {what}: "
    last = None
    for event in reversed(uow.rentals.events(rental.id)):
        if event.kind == "growing":
            last = event
            break
        if event.kind in SIZE_EVENTS:
            break
    same = last is not None and last.reason == why.reason
    if not (same and last.message.startswith(said)):
        uow.rentals.add_event(rental.id, RentalEvent(now, "growing", why.reason, said + why.message))
