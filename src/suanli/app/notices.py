"""Preemption notices: given to a decision's victims (`give_notice`), ended at the deadline or when the victim
leaves (`end_victim`: `preempted`, or back in the queue for one that checkpoints, `requeue_victim`), or
withdrawn when the preemptor has left, so their victims run on (a spot floor's, when the floor falls back to
its bid before the deadline: `spot_repricing`). A victim its tenant stops under notice ends
then (`stop_in` brings its deadline to the stop; `stop_victim`: `stopped`, whole, never back in the queue),
and its preemptor takes what was promised at once. An elastic victim preempted in part (a trim:
`Eviction.keeps`, stored as `Rental.notice_keeps`) gives back at its deadline only what its preemptor was
promised of it and runs on with the rest (`trim_victim`), as on a resize (a one-node rental's workload
restarts on its fewer GPUs; a gang's nodes given up end theirs), and the leader grows it back toward its size
as GPUs free.

A victim under notice is killed at its deadline for the rental it was preempted for. When that rental is
stopped before the deadline, or starts on capacity that freed elsewhere meanwhile (`place_without_victims`:
it no longer waits), nobody needs the capacity: the notice is withdrawn and
the victim goes back to the state it had (`state_before_notice`), its deadline cleared; its agent deletes
the notice file and no longer kills it. A trim's notice is withdrawn so even past its deadline (its workload
was neither signalled nor killed). Notices for maintenance stand, and a spot floor's while the floor stays
above the bid: their cause has not left.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from suanli.app.coverage import pass_on_coverage
from suanli.app.maintenance import MAINTENANCE
from suanli.app.ports import UnitOfWork
from suanli.app.records import BELOW_FLOOR, PREEMPTIBLE_STATES, Rental, RentalEvent
from suanli.app.rentals import LEFT_UNDER_NOTICE, STOP_UNDER_NOTICE, TIME_LIMIT, follow_size, per_node_gpus
from suanli.domain.plan import NodeAllocation, Reason
from suanli.domain.preemption import RESUME_S, Preemption
from suanli.domain.request import Tier

WITHDRAWN = "notice_withdrawn"  # the reason of the event that records a withdrawn notice


def notice_cause(victim: Rental) -> str:
    """Why `victim` is under notice, as its agent tells the workload (the notice file's `cause`)."""
    if victim.preempted_by == BELOW_FLOOR:
        return "spot_floor"
    if victim.preempted_by == MAINTENANCE:
        return "maintenance"
    return "reclaimed" if victim.borrowed else "higher_tier"


def noticed_for_a_rental(victim: Rental) -> bool:
    """Whether `victim`'s notice is for a preemptor rental (not the spot floor's, nor maintenance's)."""
    return victim.preempted_by not in (None, BELOW_FLOOR, MAINTENANCE)


def abandoned(preempting: Sequence[Rental], waiting: Collection[str], now: datetime) -> list[Rental]:
    """Victims whose notice runs on past `now` for a preemptor that no longer waits (not in `waiting`); a
    trim's past its deadline too (its workload was neither signalled nor killed: nothing is lost by keeping
    all it holds)."""
    return [
        victim
        for victim in preempting
        if noticed_for_a_rental(victim)
        and victim.preempted_by not in waiting
        and victim.notice_deadline is not None
        and (victim.notice_deadline > now or victim.notice_keeps is not None)
    ]


def outranked_no_more(
    preempting: Sequence[Rental],
    pending: Mapping[str, Rental],
    reserved_for: Callable[[Rental, Rental], bool],
) -> list[Rental]:
    """Victims whose preemptor still waits but no longer outranks them: it was `reserved` by an open
    contract of its tenant (`reserved_for(preemptor, victim)`: one covers the victim's pool now) that has
    since ended or been transferred, and is of the victim's tier or lower without it. Preemption takes only
    strictly lower tiers, at the deadline as when the notice was given; a borrower is taken back by its
    own tier (it was lent idle GPUs on that understanding), so it is not judged."""
    outranked = []
    for victim in preempting:
        preemptor = pending.get(victim.preempted_by or "")
        if preemptor is None or victim.borrowed:
            continue
        tier = Tier.RESERVED if reserved_for(preemptor, victim) else Tier.parse(preemptor.spec.tier)
        if tier <= Tier.parse(victim.spec.tier):
            outranked.append(victim)
    return outranked


def state_before_notice(events: Sequence[RentalEvent]) -> str:
    """The state a rental had when it got its last notice, from its events; `running` when none says."""
    state, before = "running", None
    for event in events:
        if event.kind == "preempting":
            before = state
        elif event.kind in PREEMPTIBLE_STATES:  # placed, or its agent's reports (a withdrawal's too)
            state = event.kind
    return before or state


STARTED_ELSEWHERE = (  # why a notice is withdrawn whose preemptor started on capacity that freed meanwhile
    "the rental it was preempted for started on capacity that freed elsewhere; it keeps all its GPUs"
)
OUTRANKED_NO_MORE = (  # why a notice is withdrawn whose preemptor still waits (`outranked_no_more`)
    "the rental it was preempted for no longer outranks it (the contract that made it reserved ended or "
    "moved to another tenant); it keeps all its GPUs"
)


def withdraw(uow: UnitOfWork, victim: Rental, now: datetime, why: str | None = None) -> bool:
    """Withdraw `victim`'s notice (in `uow`); False when it is no longer under notice. `why`: the cause in
    words, when it is not that its preemptor left (`OUTRANKED_NO_MORE`, the spot floor fell back).
    A victim taken while it was leaving for the spot floor goes back to that notice, its deadline kept (the
    repricer withdraws it too if its bid meets the floor by then)."""
    events = uow.rentals.events(victim.id)
    if victim.preempted_by != BELOW_FLOOR and _taken_while_leaving(events):
        deadline = victim.notice_deadline
        if deadline is None or not uow.rentals.give_notice(
            victim.id, BELOW_FLOOR, deadline, expect=("preempting",)
        ):
            return False
        message = (
            "no longer taken by a higher-tier rental; it still leaves for the spot floor at "
            f"{deadline.isoformat()}"
        )
        uow.rentals.add_event(victim.id, RentalEvent(now, "preempting", "below_floor", message))
        return True
    state = state_before_notice(events)
    if not uow.rentals.set_state(victim.id, state, expect=("preempting",), reason=None):
        return False
    message = "notice withdrawn: the rental it was preempted for was stopped before the deadline"
    if victim.notice_deadline is not None and victim.notice_deadline <= now:  # a trim's, past its deadline
        message = "notice withdrawn: the rental it was preempted for no longer waits; it keeps all its GPUs"
    if why is not None:
        message = f"notice withdrawn: {why}"
    uow.rentals.add_event(victim.id, RentalEvent(now, state, WITHDRAWN, message))
    return True


def _taken_while_leaving(events: Sequence[RentalEvent]) -> bool:
    """Whether the rental's notice was given on top of a notice for the spot floor that still stood (it was
    taken as a free victim while leaving for the floor)."""
    notices = 0
    for event in reversed(events):
        if event.reason == WITHDRAWN:
            return False
        if event.kind == "preempting":
            notices += 1
            if notices == 2:
                return event.reason == "below_floor"
    return False


def give_notice(
    uow: UnitOfWork, preemptor: Rental, decision: Preemption, now: datetime, reserved: bool = False
) -> int:
    """Give `decision`'s victims notice for `preemptor`, which waits `preempting` on its promised
    placement; how many victims got it (none when the preemptor changed since it was read). `reserved`: the
    preemptor is a contract's claim, reserved whatever tier it asked for."""
    tier = "reserved" if reserved else preemptor.spec.tier
    if not uow.rentals.set_state(preemptor.id, "pending", expect=("pending",), reason=Reason.PREEMPTING):
        return 0  # stopped (or changed) since it was read: no one is preempted for it
    rows = uow.rentals.by_ids([v.request_id for v in decision.victims])
    tenant_of = {r.id: r.tenant_id for r in rows}
    # already leaving for the spot floor: what it frees at its deadline is promised to the preemptor
    leaving = {r.id for r in rows if r.state == "preempting" and r.preempted_by == BELOW_FLOOR}
    given = []
    for victim in decision.victims:
        deadline = datetime.fromtimestamp(victim.deadline_s, UTC)
        keeps = None if victim.keeps is None else victim.keeps.nodes
        expect = ("preempting",) if victim.request_id in leaving else PREEMPTIBLE_STATES
        if uow.rentals.give_notice(victim.request_id, preemptor.id, deadline, expect=expect, keeps=keeps):
            given.append((victim.request_id, tenant_of.get(victim.request_id, "")))
            by = named_for(tenant_of.get(victim.request_id, ""), [(preemptor.id, preemptor.tenant_id)])
            message = f"preempted by {by} ({tier}), notice until {deadline.isoformat()}"
            if victim.request_id in leaving:
                message = (
                    f"leaving for the spot floor at {deadline.isoformat()}: what it frees then is promised "
                    f"to {by} ({tier})"
                )
            elif victim.keeps is not None:
                message = (
                    f"preempted in part by {by} ({tier}): gives back {victim.gpus:g} GPUs at "
                    f"{deadline.isoformat()} and runs on with {victim.keeps.gpus:g}"
                )
            uow.rentals.add_event(victim.request_id, RentalEvent(now, "preempting", "preempted", message))
    until = datetime.fromtimestamp(decision.deadline_s, UTC).isoformat()
    uow.rentals.set_promise(preemptor.id, decision.promised.nodes)
    message = f"preempting {named_for(preemptor.tenant_id, given)}; capacity promised by {until}"
    uow.rentals.set_pending_message(preemptor.id, message)
    uow.rentals.add_event(preemptor.id, RentalEvent(now, "pending", Reason.PREEMPTING, message))
    return len(given)


def stop_asked(events: Sequence[RentalEvent]) -> bool:
    """Whether a stop was asked since the rental's last notice (`stop_in` brought its deadline to then)."""
    return _since_notice(events, "stopping", (STOP_UNDER_NOTICE, TIME_LIMIT))


def _since_notice(events: Sequence[RentalEvent], kind: str, reasons: Collection[str]) -> bool:
    """Whether an event of `kind` with one of `reasons` came after the rental's last notice."""
    for event in reversed(events):
        if event.kind == kind and event.reason in reasons:
            return True
        if event.kind == "preempting" and event.reason == "preempted":  # the notice
            return False
    return False


def _how_it_ended(uow: UnitOfWork, victim: Rental) -> str:
    """ "left" when its workload ended before its deadline, as its agent reported, else the deadline's."""
    left = _since_notice(uow.rentals.events(victim.id), "preempting", (LEFT_UNDER_NOTICE,))
    return "left" if left else "notice deadline reached"


def stop_victim(uow: UnitOfWork, victim: Rental, now: datetime) -> int:
    """A victim whose tenant stopped it under notice: `stopped` (never back in the queue, whole even if it
    was to be trimmed), billed to now, its capacity free for its preemptor; 1 if it ended here."""
    if not uow.rentals.set_state(victim.id, "stopped", expect=("preempting",), reason=None):
        return 0
    uow.rentals.release(victim.id, at=now)
    pass_on_coverage(uow, victim, now)
    uow.rentals.end_runs(victim.id, _run_ended_at(victim, now), "stopped")
    message = "stopped under notice; what it held goes to the rental that preempted it"
    uow.rentals.add_event(victim.id, RentalEvent(now, "stopped", None, message))
    return 1


def end_victim(uow: UnitOfWork, victim: Rental, now: datetime, same_tenant: bool) -> int:
    """A victim whose deadline came or who left: `preempted`, its capacity free for its preemptor (one that
    checkpoints goes back to the queue instead); 1 if it ended here."""
    if victim.spec.checkpoints:
        return requeue_victim(uow, victim, now)
    if not uow.rentals.set_state(victim.id, "preempted", expect=("preempting",), reason=None):
        return 0
    uow.rentals.release(victim.id, at=now)
    pass_on_coverage(uow, victim, now)
    how = _how_it_ended(uow, victim)
    if victim.preempted_by == BELOW_FLOOR:
        message = f"{how}; its bid was below the spot floor"
    elif victim.preempted_by == MAINTENANCE:
        message = f"{how}; its node went into maintenance"
    else:
        given_to = victim.preempted_by if same_tenant else "the higher-tier rental that preempted it"
        message = f"{how}; capacity given to {given_to}"
    uow.rentals.add_event(victim.id, RentalEvent(now, "preempted", "preempted", message))
    return 1


def trim_victim(
    uow: UnitOfWork,
    victim: Rental,
    now: datetime,
    book: Callable[[str, Sequence[NodeAllocation]], None],
) -> int:
    """A victim preempted in part, at its deadline: it gives back what it does not keep and runs on with
    `notice_keeps` (booked anew by `book`: its agents follow, as on a resize), in the state it had, re-priced
    for its new size; 1 if trimmed here."""
    keeps = victim.notice_keeps
    assert keeps is not None
    held = uow.rentals.allocation(victim.id)
    state = state_before_notice(uow.rentals.events(victim.id))
    if not uow.rentals.set_state(victim.id, state, expect=("preempting",), reason=None):
        return 0
    uow.rentals.release(victim.id, at=now)
    book(victim.id, keeps)
    follow_size(uow, victim, (len(held), per_node_gpus(held)), (len(keeps), per_node_gpus(keeps)), now)
    gave = sum(a.gpus for a in held) - sum(a.gpus for a in keeps)
    why = ""
    if victim.preempted_by == MAINTENANCE:
        going = sorted({a.node for a in held} - {a.node for a in keeps})
        why = f" ({', '.join(going)} went into maintenance)"
    message = (
        f"gave back {gave:g} GPUs at its notice deadline{why}; runs on with {victim.kept_gpus} and grows "
        "back as GPUs free"
    )
    uow.rentals.add_event(victim.id, RentalEvent(now, "resized", "preempted", message))
    return 1


def requeue_victim(uow: UnitOfWork, victim: Rental, now: datetime) -> int:
    """A victim that checkpoints saved its state under notice: it goes back to the queue (its place by
    age kept) and resumes when placed again, rather than ending; its run ends here."""
    if not uow.rentals.set_state(victim.id, "pending", expect=("preempting",), reason=None):
        return 0
    left_s = time_left_s(victim, uow.rentals.allocation(victim.id), now)
    if left_s is not None:
        uow.rentals.set_time_left(victim.id, left_s)
    uow.rentals.release(victim.id, at=now)
    pass_on_coverage(uow, victim, now)
    # billed to here: a run its agent has not said ended yet ends now (at its deadline at the latest)
    uow.rentals.end_runs(victim.id, _run_ended_at(victim, now), "stopped")
    how = _how_it_ended(uow, victim)
    what = "its borrowed GPUs were taken back" if victim.borrowed else "preempted"
    message = f"{how}; {what}: back in the queue, it resumes from its checkpoint when placed again"
    uow.rentals.add_event(victim.id, RentalEvent(now, "requeued", "preempted", message))
    return 1


def requeued(victim: Rental, held: Sequence[NodeAllocation], now: datetime) -> Rental:
    """A checkpointing `victim` due now as `requeue_victim` puts it back in the queue: pending, its place by
    age kept, declaring what is left of its duration; so the cycle that ends its run may place it again (as
    the simulator queues a preempted job before the cycle at its deadline)."""
    left_s = time_left_s(victim, held, now)
    return replace(
        victim,
        state="pending",
        preempted_by=None,
        notice_deadline=None,
        borrowed=False,
        time_left_s=victim.time_left_s if left_s is None else left_s,
    )


def time_left_s(victim: Rental, held: Sequence[NodeAllocation], now: datetime) -> float | None:
    """What is left of a checkpointing `victim`'s max duration once it saved its work as its run ended (by
    `now`, at its deadline at the latest): the time to its time limit there, in full-size seconds (it held
    `held`), plus a resumption's `RESUME_S`, as the simulator resumes a checkpointed job (None: it has no
    time limit)."""
    if victim.time_limit_at is None:
        return None
    saved_at = _run_ended_at(victim, now)
    full = victim.spec.gpus * victim.spec.nodes
    speed = 1.0 if full <= 0 or not held else min(sum(a.gpus for a in held) / full, 1.0)
    left_s = (victim.time_limit_at - saved_at).total_seconds() * speed
    return max(left_s, 1.0) + RESUME_S


def _run_ended_at(victim: Rental, now: datetime) -> datetime:
    """When a victim's run ended, seen `now`: then, or at its notice deadline if that came first."""
    deadline = victim.notice_deadline
    return now if deadline is None else min(now, deadline)


def named_for(viewer_tenant: str, rentals: Sequence[tuple[str, str]]) -> str:
    """(rental id, tenant) pairs as `viewer_tenant` may read them: its own rentals by id, another tenant's
    only as "a higher-tier rental of another tenant" (or a count), so no tenant learns another's ids."""
    own = [rental_id for rental_id, tenant in rentals if tenant == viewer_tenant]
    others = len(rentals) - len(own)
    if others == 1:
        own.append("a rental of another tenant")
    elif others:
        own.append(f"{others} rentals of other tenants")
    return ", ".join(own) or "nothing"
