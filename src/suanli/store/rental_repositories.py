"""The rentals repository: rentals, their events, allocations, runs and rates, and the meter's reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import JSON, BigInteger, case, delete, func, insert, literal, select, type_coerce, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.app.errors import BookingConflict, Duplicate
from suanli.app.records import (
    END_STATES,
    LIVE_STATES,
    BillableRental,
    Booking,
    HeldAllocation,
    MeterRental,
    Rental,
    RentalEvent,
    RentalSpec,
)
from suanli.domain.plan import NodeAllocation, Slice
from suanli.store.ledger_repositories import one_of
from suanli.store.rows import (
    AgentNodeRow,
    AllocationRow,
    BookingRow,
    RentalEventRow,
    RentalRateRow,
    RentalRow,
    RentalRunRow,
    RentalSizeRow,
    SliceRow,
    UtcDateTime,
)


class SqlRentals:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, rental: Rental) -> None:
        self.s.add(
            RentalRow(
                id=rental.id,
                tenant_id=rental.tenant_id,
                state=rental.state,
                spec=_spec_json(rental.spec),
                image=rental.spec.image,
                created_at=rental.created_at,
                pending_reason=rental.pending_reason,
                price_micros_per_hour=rental.price_micros_per_hour,
                quote=None if rental.quote is None else dict(rental.quote),
                idempotency_key=rental.idempotency_key,
                fingerprint=rental.fingerprint,
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
        return None if row is None else _rental(row)

    def by_idempotency_key(self, tenant_id: str, key: str) -> Rental | None:
        row = self.s.scalar(
            select(RentalRow).where(RentalRow.tenant_id == tenant_id, RentalRow.idempotency_key == key)
        )
        return None if row is None else _rental(row)

    def list(self, tenant_id: str | None, limit: int) -> list[Rental]:
        query = select(RentalRow).order_by(RentalRow.created_at.desc(), RentalRow.id).limit(limit)
        if tenant_id is not None:
            query = query.where(RentalRow.tenant_id == tenant_id)
        return [_rental(r) for r in self.s.scalars(query)]

    def pending(self) -> list[Rental]:
        query = (
            select(RentalRow).where(RentalRow.state == "pending").order_by(RentalRow.created_at, RentalRow.id)
        )
        return [_rental(r) for r in self.s.scalars(query)]

    def preempting(self) -> list[Rental]:
        query = select(RentalRow).where(RentalRow.state == "preempting").order_by(RentalRow.id)
        return [_rental(r) for r in self.s.scalars(query)]

    def by_ids(self, rental_ids: Sequence[str], *, lock: bool = False) -> list[Rental]:
        ids = sorted(set(rental_ids))
        found: list[Rental] = []
        for start in range(0, len(ids), 1000):
            query = select(RentalRow).where(RentalRow.id.in_(ids[start : start + 1000]))
            if lock:
                query = query.with_for_update().execution_options(populate_existing=True)
            found.extend(_rental(r) for r in self.s.scalars(query))
        return found

    def give_notice(
        self, rental_id: str, preemptor: str, deadline: datetime, *, expect: Sequence[str]
    ) -> bool:
        result = self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state.in_(list(expect)))
            .values(state="preempting", preempted_by=preemptor, notice_deadline=deadline)
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

    def set_state(self, rental_id: str, state: str, *, expect: Sequence[str], reason: str | None) -> bool:
        result = self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state.in_(list(expect)))
            .values(
                state=state,
                pending_reason=None if reason is None else str(reason),
                **(
                    {}
                    if state in ("preempting", "preempted")
                    else {"preempted_by": None, "notice_deadline": None}
                ),
                **(
                    {}
                    if state == "pending"
                    else {"expected_start_at": None, "reserved_nodes": None, "promise": None}
                ),
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

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

    def set_promise(self, rental_id: str, promise: Sequence[NodeAllocation] | None) -> None:
        """Record (or clear) where a pending preemptor was promised capacity; one no longer pending is left
        alone."""
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id, RentalRow.state == "pending")
            .values(promise=None if promise is None else [_allocation_json(a) for a in promise])
        )

    def update_spec(self, rental_id: str, rental: Rental) -> None:
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id)
            .values(spec=_spec_json(rental.spec), image=rental.spec.image)
        )

    def mark_placed(
        self, rental_id: str, at: datetime, price_micros_per_hour: int, quote: dict[str, Any] | None = None
    ) -> bool:
        """A pending rental becomes placed at `at`, at its price (and quote), in one statement; False, and
        nothing changed, when it is no longer pending (stopped or changed since it was read)."""
        values: dict[str, Any] = {
            "state": "placed",
            "pending_reason": None,
            "preempted_by": None,
            "notice_deadline": None,
            "expected_start_at": None,
            "reserved_nodes": None,
            "promise": None,
            "placed_at": at,
            "price_micros_per_hour": price_micros_per_hour,
        }
        if quote is not None:
            values["quote"] = quote
        result = self.s.execute(
            update(RentalRow).where(RentalRow.id == rental_id, RentalRow.state == "pending").values(**values)
        )
        if not result.rowcount:  # type: ignore[attr-defined]
            return False
        self._rate_from_placement(rental_id, at, price_micros_per_hour)
        return True

    def _rate_from_placement(self, rental_id: str, at: datetime, rate: int) -> None:
        """A re-placed rental with a rate history (spot re-pricing) pays its new price from `at`: one more
        rate row, else the meter would go on billing the last rate of its earlier placement."""
        rates = RentalRateRow.__table__
        has_rows = select(rates.c.id).where(rates.c.rental_id == rental_id, rates.c.from_at < at).exists()
        self.s.execute(
            insert(rates).from_select(
                ["rental_id", "from_at", "rate_micros_per_hour"],
                select(literal(rental_id), literal(at, UtcDateTime()), literal(rate, BigInteger())).where(
                    has_rows
                ),
            )
        )

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

    def events(self, rental_id: str) -> list[RentalEvent]:
        rows = self.s.scalars(
            select(RentalEventRow).where(RentalEventRow.rental_id == rental_id).order_by(RentalEventRow.id)
        )
        return [RentalEvent(r.at, r.kind, r.reason, r.message) for r in rows]

    def allocation(self, rental_id: str) -> list[NodeAllocation]:
        return self._allocations(AllocationRow.rental_id == rental_id).get(rental_id, [])

    def live_allocations(self) -> dict[str, list[NodeAllocation]]:
        return self._allocations(None)

    def live_allocations_on(self, nodes: Sequence[str]) -> dict[str, list[NodeAllocation]]:
        return self._allocations(one_of(self.s, AllocationRow.node, nodes)) if nodes else {}

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
        rows = self.s.execute(
            select(AllocationRow, SliceRow)
            .outerjoin(SliceRow, SliceRow.allocation_id == AllocationRow.id)
            .where(condition)
            .order_by(AllocationRow.rental_id, AllocationRow.ordinal, SliceRow.ordinal)
        ).all()
        grouped: dict[str, dict[int, tuple[AllocationRow, list[Slice]]]] = {}
        for allocation, piece in rows:
            entry = grouped.setdefault(allocation.rental_id, {}).setdefault(allocation.id, (allocation, []))
            if piece is not None:
                entry[1].append(
                    Slice(piece.gpu_index, piece.milli, piece.memory_mib, piece.mig_profile, piece.mig_start)
                )
        return {
            rental_id: [
                NodeAllocation(a.node, a.cpu_milli, a.memory_mib, tuple(s)) for a, s in by_id.values()
            ]
            for rental_id, by_id in grouped.items()
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
        return [ids[node_allocation.node] for node_allocation in allocation]

    def billable(self) -> list[BillableRental]:
        """Every rental that holds or held an allocation, with its reported run times and end event, in id
        order, read in one statement (each rental's first node, runs and end event from correlated
        subqueries on their rental_id indexes)."""
        rentals = RentalRow.__table__
        query = (
            select(*(c for c in rentals.c if c.name != "billing_closed_at"), *_billing_facts())
            .where(rentals.c.placed_at.is_not(None))
            .order_by(rentals.c.id)
        )
        return [
            BillableRental(
                _rental(cast(RentalRow, row)),
                row.first_node or "",
                _utc(row.run_started_at),
                _utc(row.run_ended_at),
                _utc(row.end_event_at),
            )
            for row in self.s.execute(query)
        ]

    def meter_page(
        self, after: str | None, limit: int, ids: Sequence[str] | None = None
    ) -> list[MeterRental]:
        """Up to `limit` rentals still open for billing (placed, not `close_billing`d), in id order after
        `after`; only `ids` when given. One statement on the partial index `ix_rentals_meter_open` (0006)."""
        rentals = RentalRow.__table__
        quote = type_coerce(case((rentals.c.price_micros_per_hour.is_(None), rentals.c.quote)), JSON)
        query = (
            select(
                rentals.c.id,
                rentals.c.tenant_id,
                rentals.c.state,
                rentals.c.price_micros_per_hour,
                quote.label("quote"),
                rentals.c.placed_at,
                rentals.c.notice_deadline,
                *_billing_facts(),
                _confirmed_until(),
            )
            .where(rentals.c.placed_at.is_not(None), rentals.c.billing_closed_at.is_(None))
            .order_by(rentals.c.id)
            .limit(limit)
        )
        if after is not None:
            query = query.where(rentals.c.id > after)
        if ids is not None:
            query = query.where(one_of(self.s, rentals.c.id, ids))
        return [
            MeterRental(
                row.id,
                row.tenant_id,
                row.state,
                row.price_micros_per_hour,
                None if row.quote is None else int(row.quote["final_micros_per_hour"]),
                row.placed_at,
                row.notice_deadline,
                row.first_node or "",
                _utc(row.run_started_at),
                _utc(row.run_ended_at),
                _utc(row.end_event_at),
                _utc(row.heartbeat_at),
            )
            for row in self.s.execute(query)
        ]

    def close_billing(self, rental_ids: Sequence[str], at: datetime) -> None:
        """Mark ended rentals whose final charge is posted: the meter does not read them again."""
        if rental_ids:
            self.s.execute(
                update(RentalRow)
                .where(one_of(self.s, RentalRow.id, rental_ids), RentalRow.state.in_(END_STATES))
                .values(billing_closed_at=at)
                .execution_options(synchronize_session=False)
            )

    def change_rate(
        self,
        rental_id: str,
        at: datetime,
        rate_micros_per_hour: int,
        *,
        since: datetime,
        previous: int,
        quote: dict[str, Any] | None = None,
    ) -> None:
        """From `at` on the rental pays `rate_micros_per_hour` (a row in `rental_rates`, and its price, and
        its quote when given: a resize). Its first change also records the rate it paid before, `previous`
        from `since` (its placement), so its rows are its whole rate history; a change at an instant that
        already has one replaces it."""
        rate = "rate_micros_per_hour"
        self._put_history(
            RentalRateRow.__table__, rental_id, at, {rate: rate_micros_per_hour}, since, {rate: previous}
        )
        self.s.execute(
            update(RentalRow)
            .where(RentalRow.id == rental_id)
            .values(price_micros_per_hour=rate_micros_per_hour, **({} if quote is None else {"quote": quote}))
            .execution_options(synchronize_session=False)
        )

    def record_size(
        self,
        rental_id: str,
        at: datetime,
        size: tuple[int, float],
        *,
        since: datetime,
        previous: tuple[int, float],
    ) -> None:
        """From `at` on the rental is `size` (nodes, GPUs per node), in `rental_sizes`, as `change_rate`
        records rates (its first resize also records `previous` from `since`)."""
        now, before = ({"nodes": n, "gpus_per_node": g} for n, g in (size, previous))
        self._put_history(RentalSizeRow.__table__, rental_id, at, now, since, before)

    def _put_history(
        self,
        table: Any,
        rental_id: str,
        at: datetime,
        values: dict[str, Any],
        since: datetime,
        previous: dict[str, Any],
    ) -> None:
        """A row of a per-rental history (`rental_id`, `from_at`, `values`) from `at` on; the rental's first
        row also records `previous` from `since`. A row at an instant that already has one is replaced."""
        found = dict(
            self.s.execute(select(table.c.from_at, table.c.id).where(table.c.rental_id == rental_id)).all()
        )
        wanted = [(at, values)]
        if not found and since < at:
            wanted.insert(0, (since, previous))
        known = {_utc(moment): row_id for moment, row_id in found.items()}
        for moment, row in wanted:
            row_id = known.get(_utc(moment))
            if row_id is None:
                self.s.execute(insert(table).values(rental_id=rental_id, from_at=moment, **row))
            else:
                self.s.execute(update(table).where(table.c.id == row_id).values(**row))

    def placed_sizes(self, rental_ids: Sequence[str]) -> dict[str, tuple[int, float]]:
        """(nodes, GPUs per node) each of `rental_ids` was booked at its latest placement (its allocations
        from the last one numbered 0, released or not; GPUs from the first node's slices)."""
        if not rental_ids:
            return {}
        query = (
            select(AllocationRow.rental_id, AllocationRow.id, AllocationRow.ordinal, SliceRow.milli)
            .outerjoin(SliceRow, SliceRow.allocation_id == AllocationRow.id)
            .where(one_of(self.s, AllocationRow.rental_id, rental_ids))
            .order_by(AllocationRow.rental_id, AllocationRow.id)
        )
        placed: dict[
            str, dict[int, int]
        ] = {}  # rental -> allocation id -> GPU milli, of its latest placement
        for rental_id, allocation_id, ordinal, milli in self.s.execute(query):
            if ordinal == 0 and allocation_id not in placed.get(rental_id, {}):
                placed[rental_id] = {}  # a new placement starts
            held = placed.setdefault(rental_id, {})
            held[allocation_id] = held.get(allocation_id, 0) + (milli or 0)
        return {
            rental_id: (len(held), next(iter(held.values())) / 1000)
            for rental_id, held in placed.items()
            if held
        }

    def sizes(self, rental_ids: Sequence[str]) -> dict[str, list[tuple[datetime, int, float]]]:
        """Size rows (from, nodes, GPUs per node) per resized rental of `rental_ids`, sorted by `from_at`."""
        if not rental_ids:
            return {}
        sizes = RentalSizeRow.__table__
        query = (
            select(sizes.c.rental_id, sizes.c.from_at, sizes.c.nodes, sizes.c.gpus_per_node)
            .where(one_of(self.s, sizes.c.rental_id, rental_ids))
            .order_by(sizes.c.rental_id, sizes.c.from_at)
        )
        found: dict[str, list[tuple[datetime, int, float]]] = {}
        for rental_id, moment, nodes, per_node in self.s.execute(query):
            found.setdefault(rental_id, []).append((_utc(moment) or moment, int(nodes), float(per_node)))
        return found

    def run_spans(self, rental_ids: Sequence[str]) -> dict[str, list[tuple[datetime, datetime | None]]]:
        """(started, ended or None while open) of each reported run of `rental_ids` (re-placed rentals: the
        meter leaves out the time between their runs)."""
        if not rental_ids:
            return {}
        runs = RentalRunRow.__table__
        query = select(runs.c.rental_id, runs.c.started_at, runs.c.ended_at).where(
            one_of(self.s, runs.c.rental_id, rental_ids), runs.c.started_at.is_not(None)
        )
        found: dict[str, list[tuple[datetime, datetime | None]]] = {}
        for rental_id, started, ended in self.s.execute(query):
            found.setdefault(rental_id, []).append((_utc(started) or started, _utc(ended)))
        return found

    def rate_changes(
        self, rental_ids: Sequence[str] | None = None, *, first: str = "", last: str = ""
    ) -> dict[str, list[tuple[datetime, int]]]:
        """Rate rows per rental, sorted by `from_at`: of `rental_ids`, or of the ids in [first, last] (a
        meter batch: one range scan of the rental_id index; most rentals have none)."""
        rates = RentalRateRow.__table__
        query = select(rates.c.rental_id, rates.c.from_at, rates.c.rate_micros_per_hour).order_by(
            rates.c.rental_id, rates.c.from_at
        )
        if rental_ids is not None:
            if not rental_ids:
                return {}
            query = query.where(one_of(self.s, rates.c.rental_id, rental_ids))
        else:
            query = query.where(rates.c.rental_id >= first, rates.c.rental_id <= last)
        found: dict[str, list[tuple[datetime, int]]] = {}
        for rental_id, moment, rate in self.s.execute(query):
            found.setdefault(rental_id, []).append((_utc(moment) or moment, int(rate)))
        return found

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

    def held_allocations(self, *, first: str, last: str) -> dict[str, list[HeldAllocation]]:
        """The allocations, with their GPU milli and times, of the rentals with ids in [first, last] (a meter
        batch: one range scan of the rental_id index) that held more than one node; a rental on one node
        only is left out (it has one provider)."""
        allocations = AllocationRow.__table__
        query = select(
            allocations.c.rental_id,
            allocations.c.id,
            allocations.c.node,
            allocations.c.booked_at,
            allocations.c.released_at,
        ).where(allocations.c.rental_id >= first, allocations.c.rental_id <= last)
        spans: dict[str, list[tuple[int, str, datetime | None, datetime | None]]] = {}
        for rental_id, allocation_id, node, booked, released in self.s.execute(query):
            spans.setdefault(rental_id, []).append((allocation_id, node, _utc(booked), _utc(released)))
        several = {rental_id: held for rental_id, held in spans.items() if len({s[1] for s in held}) > 1}
        if not several:
            return {}
        ids = [span[0] for held in several.values() for span in held]
        milli: dict[int, int] = {}
        for start in range(0, len(ids), 1000):
            query_milli = (
                select(SliceRow.allocation_id, func.sum(SliceRow.milli))
                .where(SliceRow.allocation_id.in_(ids[start : start + 1000]))
                .group_by(SliceRow.allocation_id)
            )
            milli.update((int(a), int(m or 0)) for a, m in self.s.execute(query_milli))
        return {
            rental_id: [
                HeldAllocation(node, milli.get(allocation_id, 0), booked, released)
                for allocation_id, node, booked, released in sorted(held)
            ]
            for rental_id, held in several.items()
        }


def _spec_json(spec: RentalSpec) -> dict[str, Any]:
    """The spec as the `spec` column holds it; its image has a column of its own (0017)."""
    data = asdict(spec)
    del data["image"]
    for name in ("regions", "jurisdictions", "providers", "command"):
        data[name] = list(data[name])
    data["labels"], data["env"] = dict(spec.labels), dict(spec.env)
    return data


def _billing_facts() -> tuple[Any, ...]:
    """Per rental (correlated with `rentals`): its first node, earliest reported run start, latest reported
    run end and the time of its end event."""
    rental_id = RentalRow.__table__.c.id
    first_node = (  # the earliest allocation's node, on the (rental_id, id) index (0006)
        select(AllocationRow.node)
        .where(AllocationRow.rental_id == rental_id)
        .order_by(AllocationRow.id)
        .limit(1)
        .scalar_subquery()
    )
    run_started = (
        select(func.min(RentalRunRow.started_at)).where(RentalRunRow.rental_id == rental_id).scalar_subquery()
    )
    run_ended = select(func.max(RentalRunRow.ended_at)).where(RentalRunRow.rental_id == rental_id)
    ended = select(func.max(RentalEventRow.at)).where(
        RentalEventRow.rental_id == rental_id, RentalEventRow.kind.in_(END_STATES)
    )
    return (
        first_node.label("first_node"),
        run_started.label("run_started_at"),
        run_ended.scalar_subquery().label("run_ended_at"),
        ended.scalar_subquery().label("end_event_at"),
    )


def _confirmed_until() -> Any:
    """Per rental (correlated with `rentals`): the latest heartbeat of the nodes of its open runs, the usage
    confirmed so far (the meter charges a live rental to there, not past a node that went silent)."""
    query = (
        select(func.max(AgentNodeRow.last_heartbeat_at))
        .join(RentalRunRow, RentalRunRow.node == AgentNodeRow.node)
        .where(RentalRunRow.rental_id == RentalRow.__table__.c.id, RentalRunRow.ended_at.is_(None))
    )
    return query.scalar_subquery().label("heartbeat_at")


def _rental(row: RentalRow) -> Rental:
    data = dict(row.spec)
    for name in ("regions", "jurisdictions", "providers", "command"):
        data[name] = tuple(data.get(name, ()))
    data["image"] = row.image
    return Rental(
        row.id,
        row.tenant_id,
        row.state,
        RentalSpec(**data),
        row.created_at,
        row.pending_reason,
        row.price_micros_per_hour,
        row.idempotency_key,
        row.fingerprint,
        row.placed_at,
        row.preempted_by,
        row.notice_deadline,
        row.quote,
        row.expected_start_at,
        tuple(row.reserved_nodes or ()),
        None if row.promise is None else tuple(_allocation_from_json(a) for a in row.promise),
    )


def _allocation_json(allocation: NodeAllocation) -> dict[str, Any]:
    """A placement's node part as JSON (`rentals.promise`): its fields and its slices' fields."""
    return asdict(allocation)


def _allocation_from_json(data: dict[str, Any]) -> NodeAllocation:
    slices = tuple(Slice(**piece) for piece in data["slices"])
    return NodeAllocation(data["node"], data["cpu_milli"], data["memory_mib"], slices)


def _utc(moment: datetime | None) -> datetime | None:
    """Aggregates (min, max) bypass the column type on SQLite: make them aware UTC."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
