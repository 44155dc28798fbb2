"""One scheduling cycle over time: order the queue, place what fits, preempt for higher tiers, backfill.

`admit(snapshot, queue, running, policy, now, config) -> CycleDecision` is pure apart from the snapshot,
which comes back with the decision's placements applied (as `schedule` does); preemption and reservation
trials are undone. Phases (4 to 6 are `backfill.BackfillPhase`):
1. promises: a request whose victims have all left takes the capacity it was promised, before anyone else;
   while they have notice, what is free of its promise is held for it (no one else starts there);
2. order (`queue_order.py`, with the settings `QueueConfig`): strict arrival order (`Order.FIFO`) or tier,
   spot bid, weighted fair share, then age or response ratio (`Order.PRIORITY`);
3. walk: place requests in order until one cannot fit; a higher tier that cannot fit may preempt lower tiers
   (with notice) and then stops blocking; the first request that neither fits nor preempts is the head
   (`Mode.GREEDY`, a cloud's on-demand: there is no head; the walk places whatever fits, and the cycle ends);
4. reserve: the head's earliest start, found by releasing running rentals in the order of their expected ends
   (start + declared duration; one already past it, at the next instant) on the snapshot until the head fits;
   the nodes it would take are reserved;
5. backfill (`Mode.BACKFILL`): a later request with a declared duration may start now if it ends before the
   head's reserved start, or if it fits without touching the reserved nodes; then it cannot delay the head.
   Candidates are tried in queue order (EASY as published) or by `BackfillOrder` (shortest, response ratio).
   Requests without a duration never pass a blocked head; in `Mode.STRICT` nothing passes it.
   `Mode.CONSERVATIVE` (Slurm's backfill plugin) books every request in order instead, each at its earliest
   slot against the bookings before it (`earliest_slot`), so a later request never delays an earlier one.
Gates (`Gates`, optional) hold requests back without letting them block anyone: a spot bid below its pool's
floor (Reason.BID_BELOW_FLOOR; running spot below the floor gets notice), tenant quotas and spend caps
(Reason.QUOTA, Reason.SPEND_CAP), and capacity held for open contracts (Reason.CONTRACT_HOLD). A contract
holder's requests up to its count are promoted to `reserved` before ordering; spot may borrow held capacity.
With `QueueConfig.long_job_s`, requests declared longer than it keep within the long-job node budget
(`long_jobs.py`) wherever they are placed; one held back by the budget alone waits and blocks nobody.
6. borrow (`QueueConfig.borrow_idle`): a request that checkpoints (`Request.checkpoints`) and would wait
   while GPUs idle (backfill refused it, as it would delay the head or declares no duration; or the long-job
   budget held it back)
   starts on them anyway, the head's drained nodes first, as borrowed (`CycleDecision.borrowed`): it counts
   as ending now in the head's reservation and not in the budget, and the first request of the walk that
   does not fit takes borrowed GPUs back with notice (`choose_victims(reclaim=True)`; never the other way:
   a request that reclaimed is not borrowed, so no cycle). The drain a wide head waits for is then filled by
   work that resumes elsewhere, not left idle for want of short jobs that end in time.
7. elastic starts (`QueueConfig.elastic_start`): a request that declares `min_gpus` and still waits starts,
   in order, at the largest smaller size that fits what is left (fewer GPUs on one node, fewer whole nodes
   of a gang; `elastic_start.py`): the head anywhere; the others off a rigid head's reserved nodes unless
   they end before its start (so a head that cannot start smaller is never delayed), and under
   `Mode.CONSERVATIVE` off every booking they would outlast (so every booking holds). Like a borrowed start
   it is outside the long-job budget. The caller grows it toward its size after admission as capacity
   frees (`grow_toward_size`; off a rigid head's drain unless it ends first), so a wide request runs on what
   is free instead of waiting for a drain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from suanli.domain.backfill import BackfillPhase, fit_key
from suanli.domain.contracts import (
    Contract,
    Holds,
    Pool,
    available_for_holds,
    breached_pool,
    hold_pending,
    open_holds,
    pool_gpus,
    pools_of,
    upcoming_held,
)
from suanli.domain.elastic_start import Drain, smaller_sizes
from suanli.domain.fair_share import FairShare
from suanli.domain.long_jobs import LongJobBudget, Room
from suanli.domain.plan import NEVER_FITS, Pending, Placement, Reason
from suanli.domain.policies import Policy
from suanli.domain.preemption import (
    Eviction,
    Preemption,
    PreemptionConfig,
    below_floor,
    choose_victims,
    running_floor,
)
from suanli.domain.promise_holds import hold_promise
from suanli.domain.queue_order import (
    Mode,
    QueueConfig,
    keep_head_first,
    oldest_wide,
    order_requests,
)
from suanli.domain.quotas import Ledger, Limits
from suanli.domain.request import Request, Tier
from suanli.domain.reservation import Booking, reserve
from suanli.domain.running import SPOT_FLOOR, Running
from suanli.domain.scheduler import floor_gate, landed, nominate, place, quota_gate
from suanli.domain.snapshot import Snapshot
from suanli.domain.victim_search import fits_without


@dataclass(frozen=True, slots=True)
class Gates:
    """What may hold a request back besides capacity: tenant limits, open contracts, spot floors."""

    limits: Limits | None = None
    contracts: Sequence[Contract] = ()
    # the spot floor per GPU-hour of a (model, region) pool: a spot bid below it is not placed there
    spot_floor: Callable[[str, str], int | None] | None = None
    # running spot whose bid is below a floor of its pools gets notice in the cycle (`floor_evictions`); the
    # server gives it itself, only to bids that fell below a floor raised since their placement
    evict_below_floor: bool = True
    # (node, start, end) of maintenance windows to come: a request that declares its duration is not placed
    # (nor promised a preemptor's placement, nor booked by the conservative queue) on a node whose window
    # would start before it ends; a booking does not start on a node inside its window either
    maintenance: Sequence[tuple[str, float, float]] = ()


@dataclass(frozen=True, slots=True)
class CycleDecision:
    placements: tuple[Placement, ...] = ()
    pending: tuple[Pending, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    head: str | None = None
    head_start_s: float | None = None  # the blocked head's reserved earliest start (None: unknown)
    order: tuple[str, ...] = ()
    floor_evictions: tuple[Eviction, ...] = ()  # running spot below the floor: notice now, killed at deadline
    promoted: tuple[str, ...] = ()  # requests admitted as `reserved` under an open contract
    reserved_nodes: tuple[str, ...] = ()  # where the blocked head's reservation lies (when one was made)
    bookings: tuple[Booking, ...] = ()  # Mode.CONSERVATIVE: every planned start, in queue order
    borrowed: tuple[str, ...] = ()  # placed on borrowed GPUs (`QueueConfig.borrow_idle`): mark them so
    # with `spot_yields`, the pools where a higher tier waits for capacity: spot neither starts nor grows
    # there (`grow_toward_size`), and may elsewhere
    spot_yields: frozenset[Pool] = frozenset()


def admit(
    snapshot: Snapshot,
    queue: Iterable[Request],
    running: Sequence[Running],
    policy: Policy,
    now: float,
    config: QueueConfig = QueueConfig(),
    fair: FairShare | None = None,
    promised: Collection[str] | Mapping[str, Placement | None] = (),
    gates: Gates | None = None,
    last_head: str | None = None,
    last_reserved: Collection[str] = (),
) -> CycleDecision:
    """Decide one cycle; `promised` names requests holding a preemption promise (a mapping to each one's
    `Preemption.promised`, or None, also says where), `last_head` the previous cycle's blocked head
    (kept at the front of its class when `config.keep_head`). See the module doc."""
    cycle = _Cycle(snapshot, running, policy, now, config, gates or Gates())
    cycle.fair = fair or FairShare()
    if config.keep_head and last_head is not None:
        cycle.last_head, cycle.last_reserved = last_head, frozenset(last_reserved)
    ordered = order_requests(cycle.promote(queue), config, cycle.fair, running, now, cycle.pool_share)
    if config.wide_first_share:
        wide = oldest_wide(ordered, cycle.wide_first)
        if wide is not None:
            ordered = keep_head_first(ordered, wide.id)
    if config.keep_head and last_head is not None:
        ordered = keep_head_first(ordered, last_head)
    waiting_on_victims = (
        {r.preempted_by for r in running if r.preempted_by is not None} if promised else set()
    )
    if math.isfinite(config.long_job_s):
        cycle.long_jobs = LongJobBudget(snapshot, config.long_job_s, ordered, running)
    first = [r for r in ordered if r.id in promised]
    rest = [r for r in ordered if r.id not in promised]
    promises: dict[str, Placement | None] = {}
    noticed: list[Request] = []  # preemptors whose victims still have notice
    try:
        for request in first:  # the GPUs promised to a preemptor are held for it, for the whole cycle
            promises[request.id] = cycle.promise_of(request, promised, request.id in waiting_on_victims)
            cycle.hold(request.id, promises[request.id])
            if request.id in waiting_on_victims:
                for victim in running:
                    if victim.preempted_by == request.id and victim.keeps is None:
                        cycle.victim_of[victim.request.id] = (request, victim.notice_deadline_s or now)
        for request in first:  # 1. promises
            if cycle.gated(request):
                cycle.unhold(request.id)
            elif request.id in waiting_on_victims:
                cycle.pending.append(Pending(request.id, Reason.PREEMPTING, "victims have notice"))
                cycle.note_waiting(request)
                noticed.append(request)
            elif not cycle.place_promised(request):
                rest.insert(0, request)
        head_index = cycle.walk(rest)  # 3. walk
        if head_index is not None:
            cycle.after_head(rest[head_index], rest[head_index + 1 :])  # 4, 5
        if config.borrow_idle:  # 6. what the long-job budget held back borrows what is still free
            cycle.borrow_held()
        if config.elastic_start and config.mode is not Mode.STRICT:  # 7. what waits starts smaller, if it can
            cycle.start_smaller_waiting(rest)
        for request in noticed:  # 8. a preemptor starts on what is still free: its victims keep their GPUs
            cycle.place_without_victims(request, promises[request.id])
    finally:
        cycle.release_holds()
    return CycleDecision(
        tuple(cycle.placements),
        tuple(cycle.pending),
        tuple(cycle.preemptions),
        cycle.head,
        cycle.head_start_s,
        tuple(r.id for r in ordered),
        cycle.floor_evictions,
        tuple(sorted(cycle.claims)),
        tuple(sorted(cycle.reserved_nodes)),
        tuple(cycle.bookings),
        tuple(cycle.borrowed),
        frozenset(cycle.contested) if config.spot_yields else frozenset(),
    )


def pool_share(snapshot: Snapshot, request: Request) -> float:
    """The share of the GPUs it could ever be placed on (its model, region, residency) that `request` takes:
    0..1, and 1 when it fits nowhere (static for the fleet: cached by what decides it)."""
    key = ("pool_share", fit_key(request))
    share = snapshot.nomination_cache.get(key)
    if share is None:
        classes, _ = nominate(snapshot, request)
        pool = sum(snapshot.class_gpus[i] for i in classes)
        share = min(snapshot.least_gpus(request) / pool, 1.0) if pool else 1.0
        snapshot.nomination_cache[key] = share
    return share


class _Cycle(BackfillPhase):
    """Working state of one `admit` call: what was decided so far and the free GPUs left."""

    def __init__(
        self,
        snapshot: Snapshot,
        running: Sequence[Running],
        policy: Policy,
        now: float,
        config: QueueConfig,
        gates: Gates,
    ) -> None:
        self.snapshot, self.running, self.policy, self.now, self.config = (
            snapshot,
            running,
            policy,
            now,
            config,
        )
        self.fair = FairShare()  # `admit` sets the cycle's
        self.placements: list[Placement] = []
        self.pending: list[Pending] = []
        self.preemptions: list[Preemption] = []
        self.head: str | None = None
        self.head_start_s: float | None = None
        self.last_head: str | None = None
        self.last_reserved: frozenset[str] = frozenset()
        self.reserved_nodes: set[str] = set()
        self.bookings: list[Booking] = []
        self.started: list[Running] = []  # this cycle's placements, as running from now
        self.borrowed: list[str] = []  # of them, those borrowed (`_borrow`): taken back with notice
        self.budget_held: list[Request] = []  # held back by the long-job budget alone
        self.contested: set[Pool] = set()  # where a non-spot request waits for capacity (preempting, blocked)
        self.yield_off: dict[str, frozenset[str]] = {}  # a spot request -> the contested nodes it keeps off
        self.landing: dict[object, set[Pool]] = {}  # fit key -> the pools such a request could land in
        self.free_gpus = snapshot.gpu_count - snapshot.allocated_milli() / 1000
        # (fit key, cordoned) that did not fit, and why: capacity only shrinks, so not in this cycle either
        self.failed: dict[tuple, Pending] = {}
        self.chosen_victims: set[str] = set()
        # victim id -> (its preemptor, when the preemptor gets its capacity): what a victim frees is its
        # preemptor's from then, not free for a head's reservation or a booking (`timed_running`)
        self.victim_of: dict[str, tuple[Request, float]] = {}
        self.shares: dict[str, float] = {}  # request id -> its pool share (`pool_share`)
        # preemptor -> what is held for it (`hold`): how to give each part back, and its GPUs
        self.promise_holds: dict[str, list[tuple[Callable[[], None], float]]] = {}
        # (fit key, tier) no set of victims makes room for: victims and capacity only shrink in a cycle
        self.no_victims: set[tuple] = set()
        self.frees_in_time: set[str] = set()  # higher tiers that wait for time limits, not preempting
        self.lowest_tier: float | None = None  # of what runs and is not under notice (worked out when asked)
        self.gates = gates
        self.floor_evictions: tuple[Eviction, ...] = ()
        if gates.spot_floor is not None and gates.evict_below_floor:
            notice = config.preemption or PreemptionConfig()
            floor_of = partial(running_floor, snapshot, gates.spot_floor)
            self.floor_evictions = below_floor(running, floor_of, now, notice)
            self.chosen_victims.update(e.request_id for e in self.floor_evictions)
        self.ledger: Ledger | None = None
        if gates.limits is not None:
            held = ((landed(snapshot, r.request, r.placement), r.started_at_s) for r in running)
            self.ledger = gates.limits.ledger(held, now)
        # request id -> nodes its gates keep it off: its quota's full models, pools whose floor beats its bid
        self.gate_off: dict[str, frozenset[str]] = {}
        self.holds: Holds | None = None
        self.claims: dict[str, Contract] = {}  # promoted: they can only land in their contract's pool
        self.tentative: Holds | None = None  # the holds with every promoted request's claim booked up front
        self.placed_claims: dict[str, Contract] = {}  # requests that claim a contract where they were placed
        # a holder's requests larger than what is left of its contract where placed: (contract, GPUs covered)
        self.placed_parts: dict[str, tuple[Contract, float]] = {}
        self.available: dict[Pool, float] = {}  # per held pool: free GPUs plus spot a holder may preempt
        self.long_jobs: LongJobBudget | None = None  # with `config.long_job_s`, once the queue is known
        if gates.contracts:
            self._open_holds()

    def _open_holds(self) -> None:
        pool_of = pools_of(self.snapshot)
        holding = [(r.request, r.placement.nodes) for r in self.running]
        self.holds = open_holds(self.gates.contracts, self.now, holding, pool_of)
        spot = (r.placement for r in self.running if r.request.tier is Tier.SPOT and r.preempted_by is None)
        self.available = available_for_holds(self.snapshot, pool_of, spot)

    def promote(self, queue: Iterable[Request]) -> list[Request]:
        """Requests as the cycle sees them: a contract holder's, up to its count, become `reserved`."""
        queue = list(queue)
        if self.holds is None or not self.holds.contracts:
            return queue
        tentative = Holds(self.holds.contracts, dict(self.holds.claimed), self.holds.pool_of_node)
        self.tentative = tentative
        promoted = {}
        for request in sorted(queue, key=lambda r: (r.submitted_at_s, r.id)):
            gpus = self.snapshot.least_gpus(request)  # a MIG slice at its part of a GPU
            pools = self._landing_pools(request)
            claimed, contract = tentative.claim(request, pools, gpus)
            if contract is None and len(pools) > 1:
                claimed, contract = tentative.claim_in_own_pool(request, pools, gpus)
            if contract is not None:
                tentative.book(contract, gpus)
                promoted[request.id] = claimed
                self.claims[request.id] = contract
        return [promoted.get(r.id, r) for r in queue]

    def pool_share(self, request: Request) -> float:
        """`pool_share`, once per request in the cycle (the walk's order and backfill's both ask)."""
        share = self.shares.get(request.id)
        if share is None:
            share = self.shares[request.id] = pool_share(self.snapshot, request)
        return share

    def wide_first(self, request: Request) -> bool:
        """Whether `request` goes first when it is the oldest such (`oldest_wide`): it needs whole nodes (a
        gang, or every GPU of the largest node it could land on) and takes at most the config's share."""
        if request.node_count == 1:
            classes, _ = nominate(self.snapshot, request)
            largest = max((self.snapshot.classes[i].gpu_count for i in classes), default=0)
            if not 0 < largest <= request.gpus_per_node:
                return False
        return self.pool_share(request) <= self.config.wide_first_share

    def _landing_pools(self, request: Request) -> set[Pool]:
        """Every (model, region) the request could ever be placed in: for a gang, only the pools with as
        many nodes that could host it (a gang never leaves its region; one too wide for a region held back
        what waited there behind it, on nodes it could never use)."""
        key = fit_key(request)
        if key not in self.landing:
            classes, _ = nominate(self.snapshot, request)
            pools = {(self.snapshot.classes[i].model.name, self.snapshot.classes[i].region) for i in classes}
            if request.node_count > 1:  # a gang's nodes are all of one model: count them per pool
                hosts: dict[Pool, int] = {}
                for state in self.snapshot.nodes:
                    if state.class_id in classes:
                        pool = (self.snapshot.classes[state.class_id].model.name, state.node.region)
                        hosts[pool] = hosts.get(pool, 0) + 1
                pools = {pool for pool in pools if hosts.get(pool, 0) >= request.node_count}
            self.landing[key] = pools
        return self.landing[key]

    def gated(self, request: Request) -> bool:
        """True when a gate holds `request` back (its pending reason is recorded); it blocks nobody."""
        held, self.gate_off[request.id] = self._gates(request)
        if held is not None:
            self.pending.append(held)
            return True
        return False

    def _gates(self, request: Request) -> tuple[Pending | None, frozenset[str]]:
        """Why a gate (the spot floor, the tenant's limits) holds `request` back, and the nodes they keep it
        off; nothing is recorded."""
        held: Pending | None = None
        off: frozenset[str] = frozenset()
        if self.gates.spot_floor is not None:
            held, off = floor_gate(self.snapshot, request, self.policy, self.gates.spot_floor)
        if held is None and self.ledger is not None:
            held, quota_off = quota_gate(self.snapshot, self.ledger, request, self.policy)
            off |= quota_off
        return held, off

    def _hold_breached(self, request: Request, placement: Placement) -> Pool | None:
        """The pool whose contract hold this placement would eat into, if any (claims and spot never do); a
        holder's request placed in its open contract's pool claims it there (`_book` books the claim)."""
        if self.holds is None or request.tier is Tier.SPOT or request.id in self.claims:
            return None
        if self.tentative is not None:
            pools = pool_gpus(placement, self.holds.pool_of_node).keys()
            _, contract = self.tentative.claim(request, pools, placement.gpus)
            if contract is not None:
                self.placed_claims[request.id] = contract
                return None
            self.placed_parts.pop(request.id, None)  # of an earlier trial, elsewhere
            if (part := self.tentative.partial(request, pools, placement.gpus)) is not None:
                self.placed_parts[request.id] = part
        return breached_pool(self.holds, self.available, placement, request.tenant, self._ahead(request))

    def _ahead(self, request: Request) -> dict[Pool, float]:
        """What contracts opening while `request` would still run hold (`upcoming_held`): those opening
        before its declared end, or, without one, within the notice it would get, as for maintenance."""
        if not self.gates.contracts:
            return {}
        duration = request.max_duration_s
        if duration is None:
            config = self.config.preemption
            duration = 0.0 if config is None else config.notice_for(request.tier)
        return upcoming_held(self.gates.contracts, self.now, self.now + duration, request.tenant)

    def _book(self, request: Request, placement: Placement) -> None:
        if self.ledger is not None:
            self.ledger.take(landed(self.snapshot, request, placement))
        if self.holds is not None:
            contract = self.claims.get(request.id)
            if contract is None:
                contract = self.placed_claims.get(request.id)
                if contract is not None and self.tentative is not None:
                    self.tentative.book(contract, placement.gpus)  # a promoted one was booked there already
            if contract is not None:
                self.holds.book(contract, placement.gpus)
            elif (part := self.placed_parts.get(request.id)) is not None:  # larger than what was left
                self.holds.book(*part)
                if self.tentative is not None:
                    self.tentative.book(*part)
            if request.tier is not Tier.SPOT:
                for pool, gpus in pool_gpus(placement, self.holds.pool_of_node).items():
                    self.available[pool] = self.available.get(pool, 0.0) - gpus

    def try_place(self, request: Request, cordon: bool) -> bool:
        """Place `request` if it fits now, off the nodes whose maintenance starts before its declared end; on
        failure record nothing (the caller gives the reason)."""
        avoid = self._off_limits(request)
        if not avoid:
            return self._try_place(request, (fit_key(request), cordon))
        with self.snapshot.cordoned(avoid):
            return self._try_place(request, (fit_key(request), cordon, avoid))

    def _off_limits(self, request: Request, lead_s: float = 0.0) -> frozenset[str]:
        """Nodes `request` must keep off: those whose maintenance starts while it would still run (by its
        declared duration) if it started `lead_s` from now (a preemptor starts when its victims' notice
        ends), and those its gates keep it off (`quota_gate`'s full models, `floor_gate`'s dear pools)."""
        gate_off = self.gate_off.get(request.id, frozenset()) | self.yield_off.get(request.id, frozenset())
        if request.max_duration_s is None or not self.gates.maintenance:
            return gate_off
        end_s = self.now + lead_s + request.max_duration_s
        return gate_off | frozenset(
            node
            for node, start_s, _ in self.gates.maintenance
            if self.now < start_s < end_s and node in self.snapshot.by_name
        )

    def _long_job_room(self, request: Request) -> Room | None:
        """Where a long request may go under the long-job node budget (`long_jobs.py`); None: anywhere."""
        return None if self.long_jobs is None else self.long_jobs.room(request, self.started)

    def _try_place(self, request: Request, key: tuple) -> bool:
        """`_fit` within the long-job node budget: on the nodes long requests hold first."""
        room = self._long_job_room(request)
        if room is None:
            return self._fit(request, key)
        if room.may_fit_held(self.snapshot, request):  # try the nodes long requests hold first
            with self.snapshot.cordoned(room.pool_nodes - room.held):
                if self._fit(request, (*key, "long-held", len(room.held))):
                    return True
        return room.may_spread(request) and self._fit(request, key)

    def _over_long_budget(self, request: Request) -> bool:
        """True when the long-job node budget alone holds `request` back (recorded); it blocks nobody."""
        room = self._long_job_room(request)
        if room is None or room.may_spread(request):
            return False
        self.pending.append(Pending(request.id, Reason.NO_CAPACITY, room.reason()))
        return True

    def _failed_before(self, key: tuple) -> bool:
        """Whether a request of `key`'s kind (`key[0]` its `fit_key`) already failed this cycle, on these
        terms or anywhere: capacity only shrinks in a cycle, so it would fail again."""
        return key in self.failed or (key[0], False) in self.failed

    def _fit(self, request: Request, key: tuple, borrowed: bool = False) -> bool:
        if self._failed_before(key):
            return False
        least = self.snapshot.least_gpus(request)
        if least > self.free_gpus + 1e-9:
            if least <= self.snapshot.gpu_count:
                return False  # may fit once capacity frees up
            outcome = place(self.snapshot, request, self.policy)  # bigger than the fleet: says which filter
            assert not isinstance(outcome, Placement)
            self.pending.append(outcome)
            return True  # decided: it never fits, and it does not block anyone
        outcome = place(self.snapshot, request, self.policy)
        if isinstance(outcome, Placement):
            breached = self._hold_breached(request, outcome)
            if breached is not None:
                self.snapshot.unplace(outcome)
                self.pending.append(hold_pending(request.id, breached))
                return True  # decided: held capacity is not for it, and it blocks nobody
            self.placements.append(outcome)
            self.started.append(Running(request, outcome, self.now, borrowed=borrowed))
            if borrowed:
                self.borrowed.append(request.id)
            elif self.long_jobs is not None:
                self.long_jobs.placed(request, outcome)
            self.free_gpus -= outcome.gpus
            self._book(request, outcome)
            return True
        if outcome.reason in NEVER_FITS:
            self.pending.append(outcome)
            return True  # decided: it waits for ever, and it does not block anyone
        self.failed[key] = outcome
        return False

    def promise_of(
        self, preemptor: Request, promised: Collection[str] | Mapping[str, Placement | None], waiting: bool
    ) -> Placement | None:
        """Where `preemptor` was promised capacity: as the caller kept it (`Preemption.promised`), or else,
        while its victims are under notice, where it would go once they have left."""
        kept = promised.get(preemptor.id) if isinstance(promised, Mapping) else None
        if kept is not None or not waiting:
            return kept
        victims = [r for r in self.running if r.preempted_by == preemptor.id]
        return fits_without(self.snapshot, preemptor, victims, self.policy)

    def hold(self, owner: str, promise: Placement | None) -> None:
        """Take what is free now of `owner`'s promise for the rest of the cycle (`hold_promise`), so no one
        else starts there: when its victims leave, the capacity it was promised (theirs and this) is all
        there, and no more victims get notice."""
        parts = hold_promise(self.snapshot, promise)
        self.promise_holds.setdefault(owner, []).extend(parts)
        self.free_gpus -= sum(gpus for _, gpus in parts)

    def unhold(self, owner: str) -> None:
        for give_back, gpus in reversed(self.promise_holds.pop(owner, [])):
            give_back()
            self.free_gpus += gpus

    def release_holds(self) -> None:
        for owner in list(self.promise_holds):
            self.unhold(owner)

    def place_promised(self, request: Request) -> bool:
        """A preemptor whose victims have left starts first, on the GPUs held for it or on free ones."""
        self.unhold(request.id)
        failed = dict(self.failed)  # what did not fit with its GPUs held may fit now
        try:
            return self.try_place(request, cordon=False)
        finally:
            self.failed = failed

    def place_without_victims(self, request: Request, promise: Placement | None) -> bool:
        """A preemptor whose victims still have notice starts now if what the cycle left free fits it, off
        the head's reserved and the booked nodes (capacity freed elsewhere meanwhile, which no one else
        took), so no victim is killed for capacity its preemptor would not use; else what is free of its
        promise is held for it again. (It waited out the notice, then often started on the capacity that
        had freed, its victims' nodes left idle.) Last in the cycle: a request behind it that fits what
        freed starts there first, rather than wait for the victims' notice. Its tenant's limits are checked
        again: the walk may have booked what they left (its victims count until they leave)."""
        if self._gates(request)[0] is not None:
            return False  # it waits for its victims, its promise still held
        self.unhold(request.id)
        failed = dict(self.failed)
        avoid = set(self.reserved_nodes).union(*(b.nodes for b in self.bookings))
        placed = len(self.placements)
        try:
            with self.snapshot.cordoned(avoid):
                self.try_place(request, cordon=False)
        finally:
            self.failed = failed
        if len(self.placements) > placed:
            self.pending = [p for p in self.pending if p.request_id != request.id]
            return True
        self.pending = [  # only what it waits for: a trial's own reason is not it
            p for p in self.pending if p.request_id != request.id or p.reason is Reason.PREEMPTING
        ]
        self.hold(request.id, promise)
        return False

    def note_waiting(self, request: Request) -> None:
        if request.tier is not Tier.SPOT:
            self.contested |= self._landing_pools(request)

    def spot_held(self, request: Request) -> bool:
        """With `spot_yields`: a spot request keeps off the pools where a higher tier waits for capacity,
        and is held when it can land nowhere else.

        Capacity that frees up there belongs to the waiting higher tier (it would preempt the spot job a
        moment later): starting spot on it only makes a preemption cycle. A pool no one of a higher tier
        waits for is spot's as before. The reason is recorded; it blocks nobody.
        """
        if not (self.config.spot_yields and self.contested and request.tier is Tier.SPOT):
            return False
        contested = self._landing_pools(request) & self.contested
        if not contested:
            return False
        if contested != self._landing_pools(request):  # it may start in the others
            self.yield_off[request.id] = frozenset(
                s.name for s in self.snapshot.nodes if (s.node.gpu_model, s.node.region) in contested
            )
            return False
        where = ", ".join(f"{model} in {region}" for model, region in sorted(contested))
        message = f"a higher tier is waiting for capacity ({where})"
        self.pending.append(Pending(request.id, Reason.NO_CAPACITY, message))
        return True

    def walk(self, ordered: Sequence[Request]) -> int | None:
        """Place in order; return the index of the head (first request that neither fits nor preempts)."""
        for index, request in enumerate(ordered):
            if self.gated(request) or self.spot_held(request) or self.try_place(request, cordon=False):
                continue
            if self._over_long_budget(request):
                self.budget_held.append(request)
                continue  # no preemption either: the capacity it would free is not for it
            if self._preempt_for(request) or self._reclaim_for(request):
                self.note_waiting(request)
                continue
            if self.config.mode is Mode.GREEDY:
                self.pending.append(self._why_waiting(request))
                continue
            return index
        return None

    def start_smaller_waiting(self, ordered: Sequence[Request]) -> None:
        """Each elastic request of `ordered` that did not start, in order, at the largest size that fits;
        off a rigid blocked head's reserved nodes unless it ends before the head's start (as a backfill
        would), so a head that cannot start smaller is never delayed by it. An elastic head that does not
        fit even at its least size may be: it starts small as soon as its least size frees."""
        started = {p.request_id for p in self.placements}
        head = next((r for r in ordered if r.id == self.head), None)
        # an elastic head gave up its guarantee; under the conservative queue the bookings are what is kept
        # (`_start_smaller`), and a request with no booking holds nothing back, as in the plan itself
        guard = head is not None and head.min_gpus is None and self.config.mode is not Mode.CONSERVATIVE
        if guard and not self.reserved_nodes:
            return  # no reservation was made (nothing else could start whole): what it drains is unknown
        for request in ordered:
            if request.min_gpus is None or request.id in started or self.free_gpus < 1 - 1e-9:
                continue
            if request.id in self.promise_holds:
                continue  # it preempted for its full size this cycle: it takes that at the deadline
            limited = self.gated(request)  # at its full size: a smaller one may be within the limits
            if self.spot_held(request) or not self._start_smaller(request, guard, gate_each=limited):
                continue
            self.pending = [p for p in self.pending if p.request_id != request.id]
            self.bookings[:] = [b for b in self.bookings if b.request_id != request.id]  # it started
            if self.head == request.id:
                self.head, self.head_start_s, self.reserved_nodes = None, None, set()

    def _start_smaller(self, request: Request, guard_head: bool = True, gate_each: bool = False) -> bool:
        """Place an elastic `request` at the largest size below its own that fits now (`smaller_sizes`),
        off nodes whose maintenance comes before its end and off the head's reserved nodes when it would
        outlast the head's start (under the conservative queue, off every booking it would outlast); like a
        borrowed start, outside the long-job budget (it fills what the cycle left free, and it grows toward
        its size rather than spreading). `gate_each`: its full size is past a limit (a quota, a spend cap),
        so each size must pass the gates itself."""
        placed = len(self.placements)
        for smaller in smaller_sizes(request):
            if gate_each:
                held, self.gate_off[smaller.id] = self._gates(smaller)
                if held is not None:
                    continue
            avoid = self._off_limits(smaller)
            declared = smaller.max_duration_s
            end_s = None if declared is None else self.now + declared
            others = tuple((b.nodes, b.start_s) for b in self.bookings if b.request_id != request.id)
            if others:  # the conservative queue: every booking is a promised start
                avoid = avoid | Drain(others).keep_off(end_s)
            elif guard_head and self.head is not None and self.head != request.id and self.reserved_nodes:
                avoid = avoid | Drain.for_head(self.reserved_nodes, self.head_start_s).keep_off(end_s)
            with self.snapshot.cordoned(avoid):
                self._fit(smaller, (fit_key(smaller), "elastic", avoid))
            if len(self.placements) > placed:
                return True
        return False

    def _why_waiting(self, request: Request) -> Pending:
        """Why `request`, which did not fit, waits: what `place` said for one like it in this cycle, or says
        now (it did not try when fewer GPUs were free than the request needs: it cannot place it either), off
        the nodes whose maintenance starts before its declared end, as `try_place` tried it."""
        if request.id in self.frees_in_time:
            message = (
                "capacity frees within a notice period as rentals reach their time limits: no preemption"
            )
            return Pending(request.id, Reason.NO_CAPACITY, message)
        avoid = self._off_limits(request)
        key = (fit_key(request), False, avoid) if avoid else (fit_key(request), False)
        failed = self.failed.get(key)
        if failed is not None:
            return Pending(request.id, failed.reason, failed.message)
        with self.snapshot.cordoned(avoid):
            outcome = place(self.snapshot, request, self.policy)
        assert not isinstance(outcome, Placement)
        self.failed[key] = outcome
        return outcome

    def _preempt_for(self, request: Request) -> bool:
        config = self.config.preemption
        if config is None or request.tier is Tier.SPOT:
            return False
        claiming = frozenset() if self.holds is None else self.holds.claiming  # reserved while open
        if self.lowest_tier is None:
            free = (r.request.tier for r in self.running if r.preempted_by in (None, SPOT_FLOOR))
            self.lowest_tier = min(free, default=math.inf)
        if request.tier <= self.lowest_tier:
            return False  # nothing running is of a lower tier
        lead_s = max(config.notice_for(tier) for tier in Tier if tier < request.tier)
        avoid = self._off_limits(request, lead_s)  # the promise must outlast no window's start
        key = (fit_key(request), request.tier, avoid)
        if key in self.no_victims:
            return False
        eligible = [
            r
            for r in self.running
            if r.request.id not in self.chosen_victims and r.request.id not in claiming
        ]
        with self.snapshot.cordoned(avoid):
            decision = choose_victims(self.snapshot, request, eligible, self.policy, self.now, config)
        if decision is None:
            self.no_victims.add(key)
            return False
        if self._frees_in_time(request, decision):
            return False
        return self._give_notice(request, decision)

    def _frees_in_time(self, request: Request, decision: Preemption) -> bool:
        """Whether `request` starts by its victims' deadline without them, as running rentals reach their
        time limits: the victims would lose their run for nothing, and it would start no sooner. A floor
        notice is not an end to wait for (a raised bid withdraws it); victims that all leave for the floor
        lose nothing, and taking what they free makes the promise firm."""
        leaving = {r.request.id for r in self.running if r.preempted_by == SPOT_FLOOR}
        if all(v.request_id in leaving for v in decision.victims):
            return False
        timed = [
            replace(r, preempted_by=None, notice_deadline_s=None) if r.request.id in leaving else r
            for r in self.timed_running()
        ]
        reservation = reserve(
            self.snapshot,
            request,
            timed,
            self.policy,
            self.now,
            maintenance=self._maintenance_on_fleet(),
        )
        if reservation is None or reservation[0] > decision.deadline_s:
            return False
        self.frees_in_time.add(request.id)
        self.note_waiting(request)
        if self.config.mode is Mode.GREEDY:  # what is free of it now is its own this cycle, as a promise
            self.hold(request.id, reservation[1])
        return True

    def _reclaim_for(self, request: Request) -> bool:
        """With `borrow_idle`: `request`, which does not fit, takes back with notice what requests behind it
        borrowed (`_borrow`), when that makes room for it (as Kueue reclaims a cohort's lent quota)."""
        if not self.config.borrow_idle:
            return False
        lent = [r for r in self.running if r.borrowed and r.request.id not in self.chosen_victims]
        if not lent:
            return False
        config = self.config.preemption or PreemptionConfig()
        lead_s = max(config.notice_for(r.request.tier) for r in lent)
        with self.snapshot.cordoned(self._off_limits(request, lead_s)):
            decision = choose_victims(
                self.snapshot, request, lent, self.policy, self.now, config, reclaim=True
            )
        return decision is not None and self._give_notice(request, decision)

    def _give_notice(self, request: Request, decision: Preemption) -> bool:
        breached = self._hold_breached(request, decision.promised)
        if breached is not None:
            self.pending.append(hold_pending(request.id, breached))
            return True
        self.preemptions.append(decision)
        self._book(request, decision.promised)
        self.hold(request.id, decision.promised)
        self.chosen_victims.update(v.request_id for v in decision.victims)
        for victim in decision.victims:
            if victim.keeps is None:
                self.victim_of[victim.request_id] = (request, victim.deadline_s)
        deadline = decision.deadline_s
        self.pending.append(
            Pending(
                request.id, Reason.PREEMPTING, f"{len(decision.victims)} victims; capacity at {deadline:.0f}"
            )
        )
        return True
