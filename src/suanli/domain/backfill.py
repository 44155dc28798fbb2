"""The backfill phase of a scheduling cycle (`queueing.admit`, phases 4 to 6): reserve the blocked head's
earliest start, let later requests start without delaying it, lend what would idle to requests that
checkpoint, or, in `Mode.CONSERVATIVE`, book every request at its earliest slot as Slurm's plan does.

`BackfillPhase` is a part of the cycle (`queueing._Cycle` derives from it), split off for size: it works on
the cycle's state (the snapshot, what is placed and pending so far, the free GPUs) through the cycle's own
placement trials (`try_place`, `_fit`, `gated`, `spot_held`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from suanli.domain.contracts import Pool, hold_pending
from suanli.domain.fair_share import FairShare
from suanli.domain.plan import NEVER_FITS, Pending, Placement, Reason
from suanli.domain.policies import Policy
from suanli.domain.queue_order import (
    BackfillOrder,
    Mode,
    QueueConfig,
    backfill_key,
    class_key,
    fair_merge,
    width_cost,
)
from suanli.domain.request import Request
from suanli.domain.reservation import Booking, earliest_slot, expected_end, reserve
from suanli.domain.running import Running
from suanli.domain.scheduler import place, trial_place
from suanli.domain.snapshot import Snapshot

if TYPE_CHECKING:
    from suanli.domain.queueing import Gates


class BackfillPhase:
    """Phases 4 to 6 of `_Cycle`: the head's reservation, backfill, borrowing, or the conservative plan.

    The cycle's state it reads and changes is declared here; the cycle's trials it calls (`try_place`,
    `_try_place`, `_fit`, `_failed_before`, `_off_limits`, `gated`, `spot_held`, `note_waiting`,
    `_hold_breached`, `_book`, `pool_share`, `_landing_pools`, `_gates`, `_why_waiting`) are `_Cycle`'s."""

    snapshot: Snapshot
    running: Sequence[Running]
    policy: Policy
    now: float
    config: QueueConfig
    fair: FairShare  # the tenants' decayed usage, as the walk's order read it
    gates: Gates
    placements: list[Placement]
    pending: list[Pending]
    head: str | None
    head_start_s: float | None
    victim_of: dict[str, tuple[Request, float]]  # a victim -> its preemptor, and when it takes its capacity
    last_head: str | None
    last_reserved: frozenset[str]
    reserved_nodes: set[str]
    bookings: list[Booking]
    started: list[Running]
    budget_held: list[Request]
    free_gpus: float

    def after_head(self, head: Request, rest: Sequence[Request]) -> None:
        """Reserve the head's earliest start, then backfill `rest` without delaying it."""
        self.head = head.id
        self.note_waiting(head)
        if self.config.mode is Mode.CONSERVATIVE:
            self._plan_conservative([head, *rest])
            return
        self.pending.append(Pending(head.id, Reason.NO_CAPACITY, "head of the queue; waiting for capacity"))
        if self.config.mode is Mode.STRICT:
            self._block(rest, "strict order: nothing passes the head")
            return
        rest = self._apart_from(head, rest)
        if not any(self._may_pass(r) or self._may_shrink(r) for r in rest):
            self._block(rest, "no declared duration: cannot backfill")
            return
        smallest = min(
            (self._least_start(r) for r in rest if self._may_pass(r) or self._may_shrink(r)), default=math.inf
        )
        if smallest > self.free_gpus + 1e-9:  # nothing could start now: skip the reservation
            for request in rest:
                if not (self.gated(request) or self.spot_held(request)):
                    self.pending.append(
                        Pending(request.id, Reason.NO_CAPACITY, "no free capacity")
                        if request.max_duration_s is not None
                        else blocked(request, "no declared duration: cannot backfill")
                    )
            return
        reservation = reserve(  # what this cycle placed runs from now: it ends at its declared duration too
            self.snapshot,
            head,
            self.timed_running(),
            self.policy,
            self.now,
            spare_free=self.config.spare_free,
            maintenance=self._maintenance_on_fleet(),
        )
        if reservation is None:  # nothing may delay a start no one can bound, but idle GPUs may be lent
            unbounded = "the head's start cannot be bounded (running rentals without a duration)"
            lenders = [r for r in rest if self.config.borrow_idle and r.checkpoints]
            self._block([r for r in rest if r not in lenders], unbounded)
            for request in lenders:
                if self.gated(request) or self.spot_held(request):
                    continue
                if not self._borrow(request, None):
                    self.pending.append(blocked(request, unbounded))
            return
        self.head_start_s, reserved = reservation
        reserved_nodes = {a.node for a in reserved.nodes}
        self.reserved_nodes = set(reserved_nodes)
        if head.id == self.last_head:  # nodes drained for it last cycle stay out of long backfill
            reserved_nodes |= self.last_reserved
        candidates = list(rest)
        if self.config.backfill_order is not BackfillOrder.QUEUE:
            order = self.config.backfill_order
            floor_s = self.config.backfill_floor_s

            def within(r: Request) -> tuple:
                width = width_cost(self.config, r, self.pool_share)
                key = backfill_key(r, self.now, order, width, floor_s, self.config.ratio_cost_cap_s)
                return (*key, class_key(r), r.submitted_at_s, r.id)  # a tie: the walk's order

            # tenants taking turns by fair share, as in the walk: the holes go to the tenant furthest below
            # its share, not to whoever's candidate ranks first across tenants (tiers are not ranked here:
            # spot yields where a higher tier waits, and ranking them cost spot without sparing on-demand)
            candidates = fair_merge(candidates, self.config, self.fair, self.running, within, by_class=False)
        would_delay = f"would delay the head's reserved start at {utc_text(self.head_start_s)}"
        delaying: list[Request] = []
        for request in candidates:
            if self.gated(request) or self.spot_held(request):
                continue
            if request.max_duration_s is None:
                if self._may_pass(request):
                    delaying.append(request)  # it may still borrow: it gives the GPUs back when asked
                else:
                    self.pending.append(blocked(request, "no declared duration: cannot backfill"))
                continue
            if self.free_gpus < 1e-9:
                self.pending.append(Pending(request.id, Reason.NO_CAPACITY, "no free GPU"))
                continue
            ends_in_time = self.now + request.max_duration_s <= self.head_start_s
            if ends_in_time:
                if self.config.fill_drain_first and self._place_within(request, reserved_nodes):
                    continue
                if not self.try_place(request, cordon=False):
                    self.pending.append(Pending(request.id, Reason.NO_CAPACITY, "no free capacity"))
            elif not self._place_avoiding(request, reserved_nodes):
                if self.config.borrow_idle and request.checkpoints:
                    delaying.append(request)
                else:
                    self.pending.append(blocked(request, would_delay))
        for request in delaying:  # the drain first, lent until the head can start; then what else is free
            if not (self._borrow(request, reserved_nodes) or self._borrow(request, None)):
                self.pending.append(blocked(request, would_delay))

    def _may_shrink(self, request: Request) -> bool:
        """Whether `request` may start smaller after backfill (phase 7), off the head's drained nodes."""
        return self.config.elastic_start and request.min_gpus is not None

    def _least_start(self, request: Request) -> float:
        """The fewest GPUs `request` could start on now: its least size when it may start smaller."""
        least = self.snapshot.least_gpus(request)
        return min(least, request.min_gpus) if self._may_shrink(request) and request.min_gpus else least

    def _may_pass(self, request: Request) -> bool:
        """Whether `request` may start ahead of a blocked head: it declares its duration (backfill), or it
        checkpoints and the queue lends idle GPUs (it gives them back when asked, whenever it would end)."""
        return request.max_duration_s is not None or (self.config.borrow_idle and request.checkpoints)

    def borrow_held(self) -> None:
        """Requests the long-job budget alone held back borrow what is free, if they checkpoint."""
        for request in self.budget_held:
            if request.checkpoints and self._borrow(request, None):
                self.pending = [p for p in self.pending if p.request_id != request.id]

    def timed_running(self) -> list[Running]:
        """What runs (and what this cycle started, from now) as a reservation or a booking may count on it
        freeing: a preemption victim's capacity is its preemptor's from its deadline, so it frees when the
        preemptor's declared run ends, never without one (a head reserved on a victim's GPUs was promised a
        start that the preemptor then took, and a backfill let in meanwhile delayed it by its whole run); a
        borrower taken back likewise, though lent GPUs otherwise count as free now."""
        timed = []
        for running in [*self.running, *self.started]:
            held = self.victim_of.get(running.request.id)
            if held is not None:
                preemptor, from_s = held
                declared = preemptor.max_duration_s
                run_s = None if declared is None else max(from_s, self.now) + declared - running.started_at_s
                request = replace(running.request, max_duration_s=run_s)
                running = replace(running, request=request, notice_deadline_s=None, borrowed=False)
            timed.append(running)
        return timed

    def _borrow(self, request: Request, nodes: set[str] | None) -> bool:
        """Place `request`, which checkpoints and would otherwise wait while GPUs idle, on `nodes` (None:
        any), borrowed: outside the long-job budget and free of the head's reservation, since whoever the
        walk reaches that does not fit takes it back with notice (`_reclaim_for`), and it resumes later."""
        if self.free_gpus < self.snapshot.least_gpus(request) - 1e-9 or self._off_limits(request):
            return False
        if nodes is None:
            return self._fit(request, (fit_key(request), "borrow"), borrowed=True)
        others = [name for name in self.snapshot.by_name if name not in nodes]
        with self.snapshot.cordoned(others):
            return self._fit(request, (fit_key(request), "borrow", frozenset(nodes)), borrowed=True)

    def _apart_from(self, head: Request, rest: Sequence[Request]) -> list[Request]:
        """Start, in order, what fits of `rest` in pools (model, region) the head can never use: it cannot
        delay the head's start, with or without a declared duration, so it is not behind it (as a job of
        another Slurm partition is not). What shares a pool with the head is returned, to backfill."""
        head_pools = self._landing_pools(head)
        behind = []
        for request in rest:
            if self._usable_pools(request) & head_pools:
                behind.append(request)
            elif not (
                self.gated(request) or self.spot_held(request) or self.try_place(request, cordon=False)
            ):
                self.pending.append(self._why_waiting(request))
        return behind

    def _usable_pools(self, request: Request) -> set[Pool]:
        """`_landing_pools` less those whose every node its gates keep it off (its quota full for a model):
        it could never land there now (an any-model request whose H100 quota was full waited behind an H100
        head with an A100 free)."""
        pools = self._landing_pools(request)
        _, off = self._gates(request)
        if not off:
            return pools
        open_pools = set()
        for state in self.snapshot.nodes:
            if state.name not in off:
                node_class = self.snapshot.classes[state.class_id]
                open_pools.add((node_class.model.name, node_class.region))
        return pools & open_pools

    def _plan_conservative(self, requests: Sequence[Request]) -> None:
        """Book each request in order at its earliest slot that delays no booking before it; start what can.

        Slurm's backfill: every request (up to `backfill_depth`) gets a start, found against the running
        rentals' declared ends and the whole nodes booked for the requests before it; one whose slot is now
        starts. A request whose slot lies past `backfill_window_s` gets no booking, so later ones may pass it.
        """
        # with what the walk placed this cycle, running from now; `ends` is kept in step with `timed` as the
        # cycle starts requests (the order among equal ends does not matter: a start releases them all)
        timed = sorted(
            (r for r in self.timed_running() if r.expected_end_s is not None),
            key=lambda r: expected_end(r, self.now),
        )
        ends = [expected_end(r, self.now) for r in timed]
        bookings = self.bookings
        horizon_s = self.now + self.config.backfill_window_s
        # capacity only shrinks as the cycle books and starts requests, so a request like an earlier one
        # (same shape, constraints and duration) starts no sooner: its scan starts where that one's ended
        earliest: dict[tuple, float] = {}
        never: dict[tuple, Pending | None] = {}  # why requests like one that got no slot never fit, if so
        planned = 0
        for request in requests:
            if self.gated(request) or self.spot_held(request):
                continue
            if planned >= self.config.backfill_depth:
                self.pending.append(Pending(request.id, Reason.NO_CAPACITY, "past the backfill depth"))
                continue
            if self.free_gpus < 1e-9 < len(bookings) and not self.config.book_when_full:
                self.pending.append(Pending(request.id, Reason.NO_CAPACITY, "no free GPU"))
                continue  # nothing more can start now, and this plan is not shown
            planned += 1
            like = (fit_key(request), request.max_duration_s)
            not_before_s = earliest.get(like, self.now)
            slot = None
            if not_before_s <= horizon_s:
                slot = earliest_slot(
                    self.snapshot,
                    request,
                    timed,
                    bookings,
                    self.policy,
                    self.now,
                    horizon_s,
                    not_before_s,
                    ends,
                    self._maintenance_on_fleet(),
                )
            if slot is None:
                if like not in never:
                    never[like] = self._never_fits(request)
                    earliest[like] = math.inf
                why = never[like]
                self.pending.append(unbooked(request) if why is None else replace(why, request_id=request.id))
                continue
            start_s, placement = slot.start_s, slot.placement
            earliest[like] = start_s
            if placement is not None:
                breached = self._hold_breached(request, placement)
                if breached is not None:
                    self.pending.append(hold_pending(request.id, breached))
                    continue
                for allocation in placement.nodes:
                    self.snapshot.occupy(allocation)
                self.placements.append(placement)
                self.free_gpus -= placement.gpus
                self._book(request, placement)
                started = Running(request, placement, self.now)
                self.started.append(started)
                if started.expected_end_s is not None:
                    end = expected_end(started, self.now)
                    at = bisect_right(ends, end)
                    ends.insert(at, end)
                    timed.insert(at, started)
                continue
            duration = request.max_duration_s if request.max_duration_s is not None else math.inf
            nodes = slot.nodes
            bookings.append(Booking(request.id, start_s, start_s + duration, nodes))
            if self.head_start_s is None:
                self.head, self.head_start_s, self.reserved_nodes = request.id, start_s, set(nodes)
            self.pending.append(
                Pending(request.id, Reason.NO_CAPACITY, f"booked to start by {utc_text(start_s)}")
            )

    def _maintenance_on_fleet(self) -> tuple[tuple[str, float, float], ...]:
        """The windows to come on nodes of this snapshot."""
        return tuple(w for w in self.gates.maintenance if w[0] in self.snapshot.by_name)

    def _never_fits(self, request: Request) -> Pending | None:
        """Why `request` fits nowhere even on an empty fleet, if it does not; the snapshot is unchanged."""
        outcome = place(self.snapshot, request, self.policy)
        if isinstance(outcome, Placement):
            self.snapshot.unplace(outcome)
            return None
        if outcome.reason in NEVER_FITS or self.snapshot.least_gpus(request) > self.snapshot.gpu_count:
            return outcome
        return None

    def _place_within(self, request: Request, nodes: set[str]) -> bool:
        """Place `request` on `nodes` only (the head's drained nodes, which only requests that end in time
        can use), leaving the others to requests that cannot end in time. A request with nodes off limits
        (maintenance ahead, a full quota) is left to `try_place`, which keeps it off those nodes."""
        if not nodes or self._off_limits(request):
            return False
        key = (fit_key(request), "within", frozenset(nodes))
        if self._failed_before(key):
            return False
        states = (self.snapshot.by_name[name] for name in nodes)
        free_milli = sum(s.free_milli for s in states if s.schedulable)
        if free_milli < self.snapshot.least_gpus(request) * 1000 - 1e-6:
            return False  # too few GPUs free there: skip cordoning the rest of the fleet for a trial
        others = [name for name in self.snapshot.by_name if name not in nodes]
        if request.node_count > 1 and self._spread_wider(request, others):
            return False
        with self.snapshot.cordoned(others):
            return self._try_place(request, key)

    def _spread_wider(self, request: Request, others: Sequence[str]) -> bool:
        """Whether the drain (the fleet less `others`) would hold a gang in a wider network subtree than the
        fleet offers it now: a gang goes to the smallest subtree first (a 2-node backfill went to one node of
        each of two leaves when one leaf had room for it)."""
        anywhere = trial_place(self.snapshot, request, self.policy)
        if anywhere is None:
            return False
        within = trial_place(self.snapshot, request, self.policy, cordon=others)
        return within is None or _depth(within.subtree) < _depth(anywhere.subtree)

    def _place_avoiding(self, request: Request, nodes: set[str]) -> bool:
        """`try_place` off `nodes` (the head's drained nodes, for a request that cannot end in time)."""
        if self._failed_before((fit_key(request), True)):
            return False
        with self.snapshot.cordoned(nodes):
            return self.try_place(request, cordon=True)

    def _block(self, rest: Sequence[Request], message: str) -> None:
        """`rest` waits behind the head for `message`; one a gate holds back (a quota, a spend cap, the spot
        floor) or spot yielding to a waiting higher tier is told that instead: passing the head would not
        start it."""
        self.pending.extend(blocked(r, message) for r in rest if not (self.gated(r) or self.spot_held(r)))


def _depth(subtree: str) -> int:
    """How deep a topology path lies (region/zone/pod/leaf: 4); deeper is a smaller subtree."""
    return len(subtree.split("/")) if subtree else 0


def utc_text(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def unbooked(request: Request) -> Pending:
    return Pending(request.id, Reason.NO_CAPACITY, "no start within the backfill window: not booked")


def blocked(request: Request, message: str) -> Pending:
    return Pending(request.id, Reason.BLOCKED_BY_HEAD, message)


def fit_key(request: Request) -> tuple:
    c = request.constraints
    return (
        request.shape,
        request.node_count,
        request.cpu_milli,
        request.memory_mib,
        request.selector,
        c.jurisdictions,
        c.regions,
        c.providers,
        tuple(sorted(c.labels.items())),
    )
