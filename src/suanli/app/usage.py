"""What the meter charges a rental: its rate (or rate segments), its billable interval and its providers.

One reading for the meter, invoices and SLA credits: the whole seconds from the agent-reported start (else
`placed_at`) to its end (counted from the start, so never a second more than it held): a stop or failure at
its end event (a stop at most `STOP_CONFIRM_S` after it was asked, however long its agents take to confirm it;
one whose node went down while it was stopped at its last heartbeat), never past its time limit (placement +
declared max duration: the lag of the stop there is not billed), a preempted one at its notice deadline (a
preempting one too: known in advance), a lost one at its node's last heartbeat (the run's `ended_at`), a
re-queued one at its last run's end; a live one is open (the meter: to the latest heartbeat of the nodes of
its open runs when there is one, the usage confirmed so far: a node that goes silent is not charged past its
last heartbeat). A re-placed rental (`replaced`) is not billed for the time it waited in the queue: only its
runs (a live one with no open run: from its latest placement on), the gaps between them are billed nothing.
The 60-s minimum is charged when a rental ends by its tenant's or its workload's doing (`owes_minimum`), never
ahead: stopped (a stop, a time limit, an idle stop), or failed once its workload had started (an
agent-reported start: it ran and exited non-zero). One its host failed before the workload started (devices
it could not isolate, a GPU it lacks, an image its agent cannot run) and one the platform preempted or lost
before its first minute pay only the seconds they held (as GCP bills nothing for a Spot VM it stops in its
first minute).

Its provider is the provider of its first node; a rental whose nodes, over its life, belonged to several
providers (a gang across providers, a re-placed or grown rental) gets `holders` too, from its allocations'
booked and released times, and the meter splits the provider part among them (`held_by`). A rental with an
allocation booked before those times were recorded (migration 0016) pays its first node's provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from suanli.app.ports import UnitOfWork
from suanli.app.records import (
    END_STATES,
    LIVE_STATES,
    STOP_CONFIRM_S,
    BillableRental,
    HeldAllocation,
    MeterRental,
)
from suanli.domain.billing.meter import DEFAULT_MINIMUM_S, RentalUsage
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.provider_split import Held, Holders, holders_over_time, providers_of
from suanli.domain.quotas import BillingWindow

NO_PROVIDER = "platform"  # a node the fleet does not list (any more): its share is the platform's


def rental_usage(
    item: BillableRental | MeterRental,
    providers: dict[str, str],
    rates: Sequence[tuple[datetime, int]] = (),
    runs: Sequence[tuple[datetime, datetime | None]] = (),
    held: Sequence[HeldAllocation] = (),
) -> RentalUsage | None:
    """What the meter charges; `rates`: the rental's rate rows (a spot rental re-priced since its
    placement: the first row is the placement rate, each in force from its instant); `runs`: a re-placed
    rental's run spans (started, ended or None), whose gaps are not billed; `held`: the allocations of a
    rental that held several nodes (`RentalRepo.held_allocations`), whose providers share its charges."""
    found = item if isinstance(item, MeterRental) else metered(item)
    rate = found.price_micros_per_hour
    if rate is None:
        rate = found.quote_micros_per_hour
    changes: tuple[tuple[int, int], ...] = ()
    if rates:
        by_second = {to_epoch_s(at): changed for at, changed in rates}  # the last row in a second wins
        changes = tuple(sorted(by_second.items()))
        rate = changes[0][1]
    start = found.run_started_at or found.placed_at
    if rate is None or start is None:
        return None
    end = billable_end(found)
    started_s = to_epoch_s(start)
    # the whole seconds it held, counted from its start (not both ends cut to the clock's seconds, which
    # billed 85 s for 84.42 s held)
    ended_s = None if end is None else started_s + max(0, int((end - start).total_seconds()))
    return RentalUsage(
        found.id,
        found.tenant_id,
        providers.get(found.node, NO_PROVIDER),
        rate,
        started_s,
        ended_s,
        minimum_s=DEFAULT_MINIMUM_S if owes_minimum(found) else 0,
        rate_changes=changes,
        gaps=queue_gaps(found, runs) if runs else (),
        holders=held_by(held, providers) if held else (),
    )


def owes_minimum(found: MeterRental) -> bool:
    """Whether its tenant or its workload ended it, so it pays the 60-s minimum: stopped, or failed after its
    workload started; a failure before any start is its host's (the platform's), as a preemption or a loss."""
    return found.state == "stopped" or (found.state == "failed" and found.run_started_at is not None)


def billable_end(found: MeterRental) -> datetime | None:
    """The instant its billing ends (None while open): the rule in this module's docstring."""
    start = found.run_started_at or found.placed_at
    end: datetime | None = None
    if found.state == "preempted":
        end = found.notice_deadline or found.ended_at
    elif found.state == "preempting":  # its end is known in advance: billed to the notice deadline at most
        end = found.notice_deadline
    elif found.state == "lost":
        end = found.run_ended_at or found.ended_at
    elif found.state in END_STATES:
        end = found.ended_at or found.run_ended_at
        run_end, placed = found.run_ended_at, found.placed_at
        if found.state == "stopped" and run_end and placed and placed <= run_end:
            # being stopped when its node went down: billed to the last heartbeat, as a lost one
            end = _sooner(end, run_end)
    elif found.state == "pending":  # re-queued after a lost node: billed to its last run's end
        end = found.run_ended_at or start
    if found.state in LIVE_STATES and found.heartbeat_at is not None:  # to the usage its nodes confirmed
        end = _sooner(end, found.heartbeat_at)
    if found.state in ("stopping", "stopped") and found.stop_asked_at is not None:  # agents bounded
        end = _sooner(end, found.stop_asked_at + timedelta(seconds=STOP_CONFIRM_S))
    if found.time_limit_at is not None:  # stopped there: what its stop takes past it is not billed
        end = _sooner(end, found.time_limit_at)
    return end


@dataclass(frozen=True, slots=True)
class OpenSpend:
    """What some tenants' open rentals ran up that the ledger does not charge yet, and how far each is."""

    owed_micros: dict[str, int] = field(default_factory=dict)  # per tenant
    owed_since_micros: dict[int, dict[str, int]] = field(default_factory=dict)  # per period start, per tenant
    windows: dict[str, BillingWindow] = field(default_factory=dict)  # per rental


def open_spend(
    uow: UnitOfWork,
    tenant_ids: Sequence[str],
    now_s: int,
    through_seq: int,
    page: int = 2000,
    since_s: Sequence[int] = (),
) -> OpenSpend:
    """What `tenant_ids`' rentals have run up to `now_s`, read as the meter would charge them now (to their
    nodes' last heartbeat: a silent node's time may never be charged), that the ledger's transactions up to
    `through_seq` do not charge; and per rental how far that charges it and when its billing ends, if known,
    so a spend cap counts its rate between (the heartbeat's lag too) as committed, and nothing twice (a
    live rental is charged no minimum yet). For each of `since_s` (a day's or month's start), the part of it
    run up from then on (`owed_since_micros`): the meter posts the rest in the earlier period."""
    found = OpenSpend(owed_since_micros={start_s: {} for start_s in since_s})
    after = None
    while tenant_ids:
        items = uow.rentals.meter_page(after, page, tenants=tenant_ids)
        if not items:
            break
        ids = [item.id for item in items]
        posted = uow.ledger.posted_charges(ids, through_seq=through_seq)
        rates = uow.rentals.rate_changes(ids)
        runs = uow.rentals.run_spans([item.id for item in items if replaced(item)])
        for item in items:
            usage = rental_usage(item, {}, rates.get(item.id, ()), runs.get(item.id, ()))
            if usage is None:
                continue
            already = posted.get(item.id)
            delta = usage.charge_delta(0 if already is None else already.micros, now_s)
            if delta:
                found.owed_micros[item.tenant_id] = found.owed_micros.get(item.tenant_id, 0) + delta
                for start_s, owed in found.owed_since_micros.items():
                    part = usage.charge_delta_since(0 if already is None else already.micros, start_s, now_s)
                    owed[item.tenant_id] = owed.get(item.tenant_id, 0) + part
            bound = rental_usage(replace(item, heartbeat_at=None), {}, rates.get(item.id, ()))
            reached = now_s if usage.ended_s is None else min(now_s, usage.ended_s)
            ends_s = None if bound is None or bound.ended_s is None else float(bound.ended_s)
            charged_through_s = float(max(reached, usage.started_s + usage.minimum_s))
            found.windows[item.id] = BillingWindow(charged_through_s, ends_s)
        if len(items) < page:
            break
        after = items[-1].id
    return found


def _sooner(end: datetime | None, bound: datetime) -> datetime:
    """`bound`, or `end` when that comes first (None: no end yet)."""
    return bound if end is None else min(end, bound)


def held_by(held: Sequence[HeldAllocation], providers: dict[str, str]) -> Holders:
    """Who held the rental over time (GPU milli per provider), when its allocations span several providers
    and all of them have their times; else () (its first node's provider is paid). An allocation counts from
    the second it was booked in to the end of the second it was released in, so one held for less than a
    second (a gang stopped at once, billed its 60-s minimum) still counts."""
    if any(allocation.booked_at is None for allocation in held):
        return ()
    holders = holders_over_time(
        Held(
            providers.get(allocation.node, NO_PROVIDER),
            allocation.gpu_milli,
            to_epoch_s(allocation.booked_at),
            None if allocation.released_at is None else _second_after(allocation.released_at),
        )
        for allocation in held
        if allocation.booked_at is not None
    )
    return holders if len(providers_of(holders)) > 1 else ()


def _second_after(moment: datetime) -> int:
    """The whole epoch second at or after `moment` (the end of the second it falls in)."""
    return to_epoch_s(moment) + (1 if moment.microsecond else 0)


def replaced(item: MeterRental) -> bool:
    """Placed again after an earlier run started (re-queued): its runs must be read to bill their gaps."""
    return (
        item.placed_at is not None
        and item.run_started_at is not None
        and item.placed_at > item.run_started_at
    )


def queue_gaps(
    item: MeterRental, runs: Sequence[tuple[datetime, datetime | None]]
) -> tuple[tuple[int, int], ...]:
    """The holes between a re-placed rental's billed spans: its runs and, while it holds a placement with no
    open run, its latest placement on."""
    spans = [(to_epoch_s(start), None if end is None else to_epoch_s(end)) for start, end in runs]
    if item.placed_at is not None and item.state != "pending" and all(end is not None for _, end in spans):
        spans.append((to_epoch_s(item.placed_at), None))
    if not spans:
        return ()
    ordered = sorted(spans, key=lambda span: span[0])
    gaps: list[tuple[int, int]] = []
    covered = ordered[0][1]  # the end of the spans so far; None: open from there on
    for start, end in ordered[1:]:
        if covered is None:
            break
        if start > covered:
            gaps.append((covered, start))
        covered = None if end is None else max(covered, end)
    return tuple(gaps)


def metered(item: BillableRental) -> MeterRental:
    """The fields of a `BillableRental` the charge needs (the invoice reads whole rentals)."""
    rental = item.rental
    quoted = None
    if rental.price_micros_per_hour is None and rental.quote is not None:
        quoted = int(rental.quote["final_micros_per_hour"])  # type: ignore[call-overload]
    return MeterRental(
        rental.id,
        rental.tenant_id,
        rental.state,
        rental.price_micros_per_hour,
        quoted,
        rental.placed_at,
        rental.notice_deadline,
        item.node,
        item.run_started_at,
        item.run_ended_at,
        item.ended_at,
        stop_asked_at=item.stop_asked_at,
        time_limit_at=rental.time_limit_at,
    )
