"""The rentals repository: rentals, their events, allocations, runs and rates, and the meter's reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, case, delete, func, literal, or_, select, text, union, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.app.errors import BookingConflict, Duplicate
from suanli.app.records import LIVE_STATES, Booking, Rental, RentalEvent
from suanli.domain.plan import NodeAllocation, Slice
from suanli.store.ledger_repositories import one_of
from suanli.store.pg_text import text_array
from suanli.store.rental_money import RentalMoneyReads, quote_discounts
from suanli.store.rental_rows import (
    allocation_json,
    allocations_by_rental,
    rental_from_row,
    spec_json,
    utc_moment,
)
from suanli.store.rows import (
    AllocationRow,
    BookingRow,
    RentalChargeStampRow,
    RentalEventRow,
    RentalRateRow,
    RentalRow,
    RentalRunRow,
    RentalSizeRow,
    SliceRow,
    UtcDateTime,
)

_PG_STAMP_CHARGED = text(
    "INSERT INTO rental_charge_stamps (rental_id, tenant_id, stamped_at) "
    "SELECT rental_id, tenant_id, :now "
    "FROM unnest(CAST(:rentals AS varchar[]), CAST(:tenants AS varchar[])) AS stamp(rental_id, tenant_id) "
    "ON CONFLICT (rental_id) DO UPDATE SET stamped_at = excluded.stamped_at "
    "WHERE rental_charge_stamps.stamped_at < :stale"
)


class SqlRentals(RentalMoneyReads):
    """Rentals, their events, allocations and bookings (the meter's reads and rate history: the base)."""

    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, rental: Rental) -> None:
        self.s.add(
            RentalRow(
                id=rental.id,
                tenant_id=rental.tenant_id,
                state=rental.state,
                spec=spec_json(rental.spec),
                image=rental.spec.image,
                name=rental.spec.name,
                created_at=rental.created_at,
                pending_reason=rental.pending_reason,
                pending_message=rental.pending_message,
                price_micros_per_hour=rental.price_micros_per_hour,
                quote=None if rental.quote is None else dict(rental.quote),
                idempotency_key=rental.idempotency_key,
                fingerprint=rental.fingerprint,
                updated_at=datetime.now(UTC),  # new: a change since any moment before it
            )
        )
        try:
            self.s.flush()
        except IntegrityError as error:
            raise Duplicate("idempotency key already used", field="Idempotency-Key") from error

    def get(self, rental_id: str, *, lock: bool = False) -> Rental | None:
        if lock:
            row = self.s.get(RentalRow, rental_id, with_for_update=True, populate_existing=True)
        else:
            row = self.s.get(RentalRow, rental_id)
        return None if row is None else rental_from_row(row)

    def by_idempotency_key(self, tenant_id: str, key: str) -> Rental | None:
        row = self.s.scalar(
            select(RentalRow).where(RentalRow.tenant_id == tenant_id, RentalRow.idempotency_key == key)
        )
        return None if row is None else rental_from_row(row)

    def list(
        self,
        tenant_id: str | None,
        limit: int,
        states: Sequence[str] = (),
        name: str | None = None,
        after: str | None = None,
        updated_after: datetime | None = None,
    ) -> list[Rental]:
        """Newest first (created_at desc, then id), the first `limit` past the rental `after` in that order:
        a keyset on (created_at, id), so each rental comes on one page however many share a created_at, and
        rentals created meanwhile (newer) do not shift the pages that follow. With `updated_after`, only
        those whose `updated_at` is at or after it (the few changed since: an index range on it)."""
        query = select(RentalRow).order_by(RentalRow.created_at.desc(), RentalRow.id).limit(limit)
        if after is not None:  # its created_at read in SQL, as stored: no round trip through Python
            at = select(RentalRow.created_at).where(RentalRow.id == after).scalar_subquery()
            query = query.where(
                RentalRow.created_at <= at,
                or_(RentalRow.created_at < at, RentalRow.id > after),
            )
        if updated_after is not None:  # by id, the tenant's in the subquery: else SQLite scans all its newest
            query = query.where(RentalRow.id.in_(_changed_since(updated_after, tenant_id)))
        elif tenant_id is not None:
            query = query.where(RentalRow.tenant_id == tenant_id)
        if states:
            query = query.where(RentalRow.state.in_(list(states)))
        if name is not None and name.endswith("*"):  # a prefix; `_` in it is not a LIKE wildcard
            query = query.where(RentalRow.name.startswith(name[:-1], autoescape=True))
        elif name is not None:
            query = query.where(RentalRow.name == name)
        return [rental_from_row(r) for r in self.s.scalars(query)]

    def pending_count(self) -> int:
        return self.s.scalar(select(func.count(RentalRow.id)).where(RentalRow.state == "pending")) or 0

    def pending(self) -> list[Rental]:
        query = (
            select(RentalRow).where(RentalRow.state == "pending").order_by(RentalRow.created_at, RentalRow.id)
        )
        return [rental_from_row(r) for r in self.s.scalars(query)]

    def overdue(self, now: datetime, limit: int = 500) -> list[Rental]:
        query = (
            select(RentalRow)
            .where(
                RentalRow.time_limit_at <= now,
                or_(
                    RentalRow.state.in_(("placed", "starting", "running")),
                    # under notice with its deadline still to come: its time limit comes first
                    and_(RentalRow.state == "preempting", RentalRow.notice_deadline > now),
                ),
            )
            .order_by(RentalRow.time_limit_at, RentalRow.id)
            .limit(limit)
        )
        return [rental_from_row(r) for r in self.s.scalars(query)]

    def preempting(self) -> list[Rental]:
        query = select(RentalRow).where(RentalRow.state == "preempting").order_by(RentalRow.id)
        return [rental_from_row(r) for r in self.s.scalars(query)]

    def by_ids(self, rental_ids: Sequence[str], *, lock: bool = False) -> list[Rental]:
        ids = sorted(set(rental_ids))
        found: list[Rental] = []
        for start in range(0, len(ids), 1000):
            query = select(RentalRow).where(RentalRow.id.in_(ids[start : start + 1000]))
            if lock:
                query = query.with_for_update().execution_options(populate_existing=True)
            found.extend(rental_from_row(r) for r in self.s.scalars(query))
        return found

    def give_notice(
        self,
        rental_id: str,
        preemptor: str,
        deadline: datetime,
        *,
        expect: Sequence[str],
        keeps: Sequence[NodeAllocation] | None = None,
    ) -> bool:
        kept = None if keeps is None else [allocation_json(a) for a in keeps]
        result = self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state.in_(list(expect)))
            .values(state="preempting", preempted_by=preemptor, notice_deadline=deadline, notice_keeps=kept)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def advance_deadline(self, rental_id: str, deadline: datetime) -> None:
        self.s.execute(
            update(RentalRow)
            .where(
                RentalRow.id == rental_id,
                RentalRow.state == "preempting",
                RentalRow.notice_deadline > deadline,
            )
            .values(notice_deadline=deadline)
        )

    def live_by_tenant(self, tenant_id: str | None = None) -> dict[str, list[str]]:
        """Tenant -> ids of its live rentals (placed through preempting), by one indexed read; one tenant's
        when named."""
        result: dict[str, list[str]] = {}
        query = select(RentalRow.tenant_id, RentalRow.id).where(RentalRow.state.in_(LIVE_STATES))
        if tenant_id is not None:
            query = query.where(RentalRow.tenant_id == tenant_id)
        for tenant_id, rental_id in self.s.execute(query.order_by(RentalRow.id)):
            result.setdefault(tenant_id, []).append(rental_id)
        return result

    def live_ids(self) -> set[str]:
        return set(self.s.scalars(select(AllocationRow.rental_id).where(AllocationRow.released.is_(False))))

    def set_state(
        self,
        rental_id: str,
        state: str,
        *,
        expect: Sequence[str],
        reason: str | None,
        message: str | None = None,
    ) -> bool:
        result = self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state.in_(list(expect)))
            .values(
                state=state,
                pending_reason=None if reason is None else str(reason),
                pending_message=message,
                **(
                    {}
                    if state in ("preempting", "preempted")
                    else {"preempted_by": None, "notice_deadline": None, "notice_keeps": None}
                ),
                **(
                    {"borrowed": False}  # a pending rental holds nothing, so borrows nothing
                    if state == "pending"
                    else {"expected_start_at": None, "reserved_nodes": None, "promise": None}
                ),
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def set_pending_message(self, rental_id: str, message: str) -> None:
        """Rewrite a pending rental's message (its reason stays); a rental no longer pending is left alone."""
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state == "pending")
            .values(pending_message=message)
        )

    def set_time_limit(self, rental_id: str, at: datetime, uncapped_at: datetime | None = None) -> None:
        """Move a live rental's time limit to `at` (one with none keeps none), `uncapped_at` where it would
        be without a cap (None: not capped)."""
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.time_limit_at.is_not(None))
            .values(time_limit_at=at, uncapped_limit_at=uncapped_at)
        )

    def set_time_left(self, rental_id: str, seconds: float) -> None:
        """What is left of its max duration (a checkpoint's); not shown by the API, so `updated_at` stays."""
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id)
            .values(time_left_s=seconds, updated_at=RentalRow.updated_at)
        )

    def touch(self, rental_ids: Sequence[str]) -> None:
        """Stamp `updated_at` on rentals changed outside their row (an event, an allocation), so a list asked
        for what changed since a moment gives them."""
        if rental_ids:
            self.s.execute(
                update(RentalRow)
                .where(one_of(self.s, RentalRow.id, rental_ids))
                .values(updated_at=datetime.now(UTC))
                .execution_options(synchronize_session=False)
            )

    def stamp_charged(self, charged: Sequence[tuple[str, str]], unless_within_s: float) -> None:
        """Stamp `charged` (rental id, tenant id) as changed now for a charge: a rental's first stamp always,
        a later one only once the last is `unless_within_s` old; in `rental_charge_stamps` (0055), one upsert
        (on PostgreSQL with one array parameter per column), so a charge never rewrites the rental's row."""
        if not charged:
            return
        now = datetime.now(UTC)
        stale = now - timedelta(seconds=unless_within_s)
        pairs = sorted(set(charged))
        if self.s.get_bind().dialect.name == "postgresql":
            self.s.execute(
                _PG_STAMP_CHARGED,
                {
                    "rentals": text_array([rental_id for rental_id, _ in pairs]),
                    "tenants": text_array([tenant_id for _, tenant_id in pairs]),
                    "now": now,
                    "stale": stale,
                },
            )
            return
        stamps = RentalChargeStampRow.__table__
        statement = sqlite.insert(stamps)
        statement = statement.on_conflict_do_update(
            index_elements=[stamps.c.rental_id],
            set_={"stamped_at": statement.excluded.stamped_at},
            where=stamps.c.stamped_at < stale,
        )
        rows = [{"rental_id": rental, "tenant_id": tenant, "stamped_at": now} for rental, tenant in pairs]
        self.s.execute(statement, rows)

    def set_expected_start(
        self, rental_id: str, at: datetime | None, reserved_nodes: Sequence[str] = ()
    ) -> None:
        """Record (or clear) a pending rental's reserved start and the nodes drained for it; a rental no
        longer pending is left alone."""
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state == "pending")
            .values(expected_start_at=at, reserved_nodes=sorted(reserved_nodes) or None)
        )

    def mark_busy(self, rental_id: str, at: datetime) -> None:
        """Its GPUs were read busy at `at` (idle stop); an earlier reading never moves it back. Not a change
        the API shows: `updated_at` stays (each heartbeat would otherwise make every busy rental changed)."""
        self.s.execute(
            update(RentalRow)
            .where(
                RentalRow.id == rental_id,
                (RentalRow.last_busy_at.is_(None)) | (RentalRow.last_busy_at < at),
            )
            .values(last_busy_at=at, updated_at=RentalRow.updated_at)
        )

    def set_promise(self, rental_id: str, promise: Sequence[NodeAllocation] | None) -> None:
        """Record (or clear) where a pending preemptor was promised capacity; one no longer pending is left
        alone."""
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state == "pending")
            .values(promise=None if promise is None else [allocation_json(a) for a in promise])
        )

    def update_spec(self, rental_id: str, rental: Rental) -> None:
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id)
            .values(spec=spec_json(rental.spec), image=rental.spec.image, name=rental.spec.name)
        )

    def mark_placed(
        self,
        rental_id: str,
        at: datetime,
        price_micros_per_hour: int,
        quote: dict[str, Any] | None = None,
        *,
        time_limit_at: datetime | None = None,
        borrowed: bool = False,
        master_port: int | None = None,
        size: tuple[int, float] | None = None,
    ) -> bool:
        """A pending rental becomes placed at `at`, at its price (and quote), to be stopped at `time_limit_at`
        (None: never), on lent GPUs when `borrowed`, with its rendezvous port, in one statement; False, and
        nothing changed, when it is no longer pending (stopped or changed since it was read). Placed again
        (preempted and re-queued, or re-queued off a lost node), its rate and its `size` (nodes, GPUs per
        node) go into its histories from `at`, its earlier placement's from that one's start."""
        before = self.s.execute(
            select(RentalRow.placed_at, RentalRow.price_micros_per_hour, RentalRow.quote).where(
                RentalRow.id == rental_id
            )
        ).one_or_none()
        placed_before = self.placed_sizes([rental_id]).get(rental_id) if before and before[0] else None
        values: dict[str, Any] = {
            "state": "placed",
            "pending_reason": None,
            "pending_message": None,
            "preempted_by": None,
            "notice_deadline": None,
            "expected_start_at": None,
            "reserved_nodes": None,
            "promise": None,
            "placed_at": at,
            "price_micros_per_hour": price_micros_per_hour,
            "time_limit_at": time_limit_at,
            "uncapped_limit_at": None,
            "borrowed": borrowed,
            "placements": RentalRow.placements + 1,
            "master_port": master_port,
        }
        if quote is not None:
            values["quote"] = quote
        result = self.s.execute(
            update(RentalRow).where(RentalRow.id == rental_id, RentalRow.state == "pending").values(**values)
        )
        if not result.rowcount:  # type: ignore[attr-defined]
            return False
        if before is not None and before[0] is not None:
            self._histories_from_placement(
                rental_id, at, (price_micros_per_hour, quote), size, before, placed_before
            )
        return True

    def rate_owing_minimums(self, tenant_id: str, since: datetime) -> int:
        """The summed rates (micros per hour) of `tenant_id`'s live rentals placed at or after `since`, and
        of its pending ones at their quotes' final rates (each will owe its minimum if placed and stopped)."""
        query = select(func.coalesce(func.sum(RentalRow.price_micros_per_hour), 0)).where(
            RentalRow.tenant_id == tenant_id,
            RentalRow.state.in_(LIVE_STATES),
            RentalRow.placed_at >= since,
        )
        waiting = select(RentalRow.quote).where(
            RentalRow.tenant_id == tenant_id, RentalRow.state == "pending"
        )
        quoted = sum(
            int((quote or {}).get("final_micros_per_hour") or 0) for quote in self.s.scalars(waiting)
        )
        return int(self.s.scalar(query) or 0) + quoted

    def master_ports_on(self, nodes: Sequence[str]) -> set[int]:
        """The rendezvous ports of the live rentals holding GPUs on any of `nodes`."""
        query = (
            select(RentalRow.master_port)
            .join(AllocationRow, AllocationRow.rental_id == RentalRow.id)
            .where(
                AllocationRow.node.in_(list(nodes)),
                AllocationRow.released.is_(False),
                RentalRow.master_port.is_not(None),
            )
            .distinct()
        )
        return {int(port) for port in self.s.scalars(query)}

    def _histories_from_placement(
        self,
        rental_id: str,
        at: datetime,
        rate: tuple[int, dict[str, Any] | None],
        size: tuple[int, float] | None,
        before: Any,
        placed_before: tuple[int, float] | None,
    ) -> None:
        """A re-placed rental pays its new price (`rate`: with its quote, if new), and is its new size, from
        `at`: a row in each history (its first rows the earlier placement's rate and size from that one's
        start), else the meter billed its earlier runs at the new rate and a resize priced its new size
        against the first placement's."""
        placed_at, earlier_rate, earlier_quote = utc_moment(before[0]) or before[0], before[1], before[2]
        rates, sizes = RentalRateRow.__table__, RentalSizeRow.__table__
        key, (price, quote) = "rate_micros_per_hour", rate
        now_row = {key: price, "discounts": quote_discounts(quote or earlier_quote)}
        earlier_row = {key: earlier_rate or price, "discounts": quote_discounts(earlier_quote)}
        self._put_history(rates, rental_id, at, now_row, placed_at, earlier_row)
        if size is not None and placed_before is not None:
            now, earlier = ({"nodes": n, "gpus_per_node": g} for n, g in (size, placed_before))
            self._put_history(sizes, rental_id, at, now, placed_at, earlier)

    def add_event(self, rental_id: str, event: RentalEvent) -> None:
        self.s.add(
            RentalEventRow(
                rental_id=rental_id,
                at=event.at,
                kind=event.kind,
                reason=None if event.reason is None else str(event.reason),
                message=event.message,
            )
        )
        self.touch([rental_id])

    def events(self, rental_id: str) -> list[RentalEvent]:
        rows = self.s.scalars(
            select(RentalEventRow).where(RentalEventRow.rental_id == rental_id).order_by(RentalEventRow.id)
        )
        return [RentalEvent(r.at, r.kind, r.reason, r.message) for r in rows]

    def events_of(self, rental_ids: Sequence[str]) -> dict[str, list[RentalEvent]]:
        if not rental_ids:
            return {}
        which = one_of(self.s, RentalEventRow.rental_id, rental_ids)
        found: dict[str, list[RentalEvent]] = {}
        for r in self.s.scalars(select(RentalEventRow).where(which).order_by(RentalEventRow.id)):
            found.setdefault(r.rental_id, []).append(RentalEvent(r.at, r.kind, r.reason, r.message))
        return found

    def allocation(self, rental_id: str) -> list[NodeAllocation]:
        return self._allocations(AllocationRow.rental_id == rental_id).get(rental_id, [])

    def live_allocations(self) -> dict[str, list[NodeAllocation]]:
        return self._allocations(None)

    def live_allocations_on(self, nodes: Sequence[str]) -> dict[str, list[NodeAllocation]]:
        return self._allocations(one_of(self.s, AllocationRow.node, nodes)) if nodes else {}

    def live_allocations_of(self, rental_ids: Sequence[str]) -> dict[str, list[NodeAllocation]]:
        return self._allocations(one_of(self.s, AllocationRow.rental_id, rental_ids)) if rental_ids else {}

    def live_allocation_ids(self, rental_ids: Sequence[str] | None = None) -> set[int]:
        query = select(AllocationRow.id).where(AllocationRow.released.is_(False))
        if rental_ids is not None:
            query = query.where(one_of(self.s, AllocationRow.rental_id, rental_ids))
        return set(self.s.scalars(query))

    def live_allocation_ids_of(self, rental_id: str) -> set[int]:
        query = select(AllocationRow.id).where(
            AllocationRow.rental_id == rental_id, AllocationRow.released.is_(False)
        )
        return set(self.s.scalars(query))

    def allocations_by_id(self, ids: Sequence[int]) -> dict[int, tuple[str, NodeAllocation]]:
        found: dict[int, tuple[str, NodeAllocation]] = {}
        for start in range(0, len(ids), 1000):
            chunk = list(ids[start : start + 1000])
            rows = self.s.execute(
                select(AllocationRow, SliceRow)
                .outerjoin(SliceRow, SliceRow.allocation_id == AllocationRow.id)
                .where(AllocationRow.id.in_(chunk), AllocationRow.released.is_(False))
                .order_by(AllocationRow.id, SliceRow.ordinal)
            ).all()
            pieces: dict[int, tuple[AllocationRow, list[Slice]]] = {}
            for allocation, piece in rows:
                entry = pieces.setdefault(allocation.id, (allocation, []))
                if piece is not None:
                    entry[1].append(
                        Slice(
                            piece.gpu_index, piece.milli, piece.memory_mib, piece.mig_profile, piece.mig_start
                        )
                    )
            for allocation_id, (a, slices) in pieces.items():
                found[allocation_id] = (
                    a.rental_id,
                    NodeAllocation(a.node, a.cpu_milli, a.memory_mib, tuple(slices)),
                )
        return found

    def allocations_stamp(self) -> tuple[int, int]:
        newest = self.s.scalar(select(func.max(AllocationRow.id)))
        live = self.s.scalar(select(func.count(AllocationRow.id)).where(AllocationRow.released.is_(False)))
        return int(newest or 0), int(live or 0)

    def busy_by_gpu(self) -> dict[tuple[str, int], tuple[int, int]]:
        rows = self.s.execute(
            select(
                AllocationRow.node,
                SliceRow.gpu_index,
                func.sum(SliceRow.milli),
                func.sum(SliceRow.memory_mib),
            )
            .join(SliceRow, SliceRow.allocation_id == AllocationRow.id)
            .where(AllocationRow.released.is_(False))
            .group_by(AllocationRow.node, SliceRow.gpu_index)
        )
        return {(node, index): (int(milli or 0), int(mib or 0)) for node, index, milli, mib in rows}

    def _allocations(self, where: Any) -> dict[str, list[NodeAllocation]]:
        condition = AllocationRow.released.is_(False)
        if where is not None:
            condition = condition & where
        return {
            rental_id: [allocation for _, allocation in pairs]
            for rental_id, pairs in allocations_by_rental(self.s, condition).items()
        }

    def booked_slots(self, node: str, gpu_index: int) -> set[int]:
        query = select(BookingRow.slot).where(BookingRow.node == node, BookingRow.gpu_index == gpu_index)
        return set(self.s.scalars(query))

    def book(
        self,
        rental_id: str,
        allocation: Sequence[NodeAllocation],
        bookings: Sequence[Booking],
        *,
        at: datetime,
        extend: bool = False,
    ) -> list[int]:
        """Record a placement's allocations (held from `at`) and slice bookings; with `extend`, nodes added to
        a rental that holds some already (numbered after them)."""
        ids: dict[str, int] = {}
        first = 0
        if extend:
            last = self.s.scalar(
                select(func.max(AllocationRow.ordinal)).where(AllocationRow.rental_id == rental_id)
            )
            first = 0 if last is None else last + 1
        for ordinal, node_allocation in enumerate(allocation, start=first):
            row = AllocationRow(
                rental_id=rental_id,
                ordinal=ordinal,
                node=node_allocation.node,
                cpu_milli=node_allocation.cpu_milli,
                memory_mib=node_allocation.memory_mib,
                released=False,
                booked_at=at,
            )
            self.s.add(row)
            self.s.flush()
            ids[node_allocation.node] = row.id
            self.s.add_all(
                SliceRow(
                    allocation_id=row.id,
                    ordinal=i,
                    gpu_index=p.gpu_index,
                    milli=p.milli,
                    memory_mib=p.memory_mib,
                    mig_profile=p.mig_profile,
                    mig_start=p.mig_start,
                )
                for i, p in enumerate(node_allocation.slices)
            )
        self.s.add_all(
            BookingRow(
                node=b.node,
                gpu_index=b.gpu_index,
                slot=b.slot,
                rental_id=rental_id,
                allocation_id=ids[b.node],
            )
            for b in bookings
        )
        try:
            self.s.flush()
        except IntegrityError as error:
            raise BookingConflict(f"a slice of rental {rental_id} is already booked") from error
        self.touch([rental_id])
        return [ids[node_allocation.node] for node_allocation in allocation]

    def end_runs(self, rental_id: str, at: datetime, state: str) -> int:
        """End the rental's runs still open (in `state`, at `at`, or at their start if that is later): a
        re-queued or lost rental's runs end when the platform ends them, whether its agents said so yet or
        not; how many."""
        runs = RentalRunRow.__table__
        moment = literal(at, UtcDateTime())
        ended = self.s.execute(
            update(runs)
            .where(runs.c.rental_id == rental_id, runs.c.ended_at.is_(None))
            .values(ended_at=case((runs.c.started_at > moment, runs.c.started_at), else_=moment), state=state)
        )
        return int(ended.rowcount or 0)  # type: ignore[attr-defined]

    def release(self, rental_id: str, nodes: Sequence[str] | None = None, *, at: datetime) -> None:
        """Give back the rental's allocations (on `nodes` only, when given) from `at` on."""
        bookings = delete(BookingRow).where(BookingRow.rental_id == rental_id)
        allocations = update(AllocationRow).where(
            AllocationRow.rental_id == rental_id, AllocationRow.released.is_(False)
        )
        if nodes is not None:
            bookings = bookings.where(BookingRow.node.in_(list(nodes)))
            allocations = allocations.where(AllocationRow.node.in_(list(nodes)))
        self.s.execute(bookings)
        self.s.execute(allocations.values(released=True, released_at=at))
        self.touch([rental_id])


def _changed_since(moment: datetime, tenant_id: str | None) -> Any:
    """The ids of the rentals (a tenant's, or every tenant's) changed at or after `moment`: stamped on their
    row (0054's indexes) or for a charge (0055's), each an index range."""
    on_row: Select[tuple[str]] = select(RentalRow.id).where(RentalRow.updated_at >= moment)
    charged: Select[tuple[str]] = select(RentalChargeStampRow.rental_id).where(
        RentalChargeStampRow.stamped_at >= moment
    )
    if tenant_id is not None:
        on_row = on_row.where(RentalRow.tenant_id == tenant_id)
        charged = charged.where(RentalChargeStampRow.tenant_id == tenant_id)
    return union(on_row, charged)
