"""The rentals repository's money side: what the meter reads (billable rentals, pages of them with their
confirmed usage), rate and size history, run spans and held allocations (`SqlRentals` extends it)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from suanli.app.records import END_STATES, BillableRental, HeldAllocation, MeterRental
from suanli.store.ledger_repositories import one_of
from suanli.store.meter_page import billing_facts, meter_page
from suanli.store.rental_rows import rental_from_row, utc_moment
from suanli.store.rows import (
    AllocationRow,
    RentalRateRow,
    RentalRow,
    RentalRunRow,
    RentalSizeRow,
    SliceRow,
)


class RentalMoneyReads:
    """The meter's reads and the rental rate and size history, on the session `s`."""

    s: Session

    def billable(self) -> list[BillableRental]:
        """Every rental that holds or held an allocation, with its reported run times and end event, in id
        order, read in one statement (each rental's first node, runs and end event from correlated
        subqueries on their rental_id indexes)."""
        rentals = RentalRow.__table__
        query = (
            select(*(c for c in rentals.c if c.name != "billing_closed_at"), *billing_facts())
            .where(rentals.c.placed_at.is_not(None))
            .order_by(rentals.c.id)
        )
        return [
            BillableRental(
                rental_from_row(cast(RentalRow, row)),
                row.first_node or "",
                utc_moment(row.run_started_at),
                utc_moment(row.run_ended_at),
                utc_moment(row.end_event_at),
                utc_moment(row.stop_asked_at),
            )
            for row in self.s.execute(query)
        ]

    def meter_page(
        self,
        after: str | None,
        limit: int,
        ids: Sequence[str] | None = None,
        *,
        tenants: Sequence[str] | None = None,
        ended_only: bool = False,
    ) -> list[MeterRental]:
        """Up to `limit` rentals still open for billing (placed, not `close_billing`d), in id order after
        `after`; only `ids`, or only `tenants`' rentals, or only those that ended (`ended_only`: their final
        charge is due), when given. One statement on the partial index `ix_rentals_meter_open` (0006); its
        facts per rental on PostgreSQL from three LATERAL subqueries (`store.meter_page`).

        On PostgreSQL it first turns JIT compilation off for the rest of the transaction (the meter's batch):
        the page's per-row subqueries push the estimated cost past `jit_above_cost` once the tables hold
        ~100,000 rentals, and compiling the plan took longer than running it, on every page (6.6 s of the
        meter's 16 s of page reads over three passes of 100,000 rentals)."""
        return meter_page(self.s, after, limit, ids, tenants, ended_only)

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
        its quote when given: a resize, a plan's or a contract's window). Its first change also records the
        rate it paid before, `previous` from `since` (its placement), so its rows are its whole rate history;
        a change at an instant that already has one replaces it. Each row keeps the plan discounts of the
        quote that priced it (`quote`, else the rental's; the previous row: the rental's quote before)."""
        rate = "rate_micros_per_hour"
        before = self.s.scalar(select(RentalRow.quote).where(RentalRow.id == rental_id))
        now_row = {rate: rate_micros_per_hour, "discounts": quote_discounts(quote or before)}
        before_row = {rate: previous, "discounts": quote_discounts(before)}
        self._put_history(RentalRateRow.__table__, rental_id, at, now_row, since, before_row)
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
        known = {utc_moment(moment): row_id for moment, row_id in found.items()}
        for moment, row in wanted:
            row_id = known.get(utc_moment(moment))
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
            found.setdefault(rental_id, []).append(
                (utc_moment(moment) or moment, int(nodes), float(per_node))
            )
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
            found.setdefault(rental_id, []).append((utc_moment(started) or started, utc_moment(ended)))
        return found

    def rate_discounts(
        self, rental_ids: Sequence[str]
    ) -> dict[str, list[tuple[datetime, int, list[tuple[str, int]] | None]]]:
        """Rate rows per rental of `rental_ids` with the plan discounts (label, micros per hour) that priced
        each (None: a row from before migration 0052), sorted by `from_at`."""
        if not rental_ids:
            return {}
        rates = RentalRateRow.__table__
        query = (
            select(rates.c.rental_id, rates.c.from_at, rates.c.rate_micros_per_hour, rates.c.discounts)
            .where(one_of(self.s, rates.c.rental_id, rental_ids))
            .order_by(rates.c.rental_id, rates.c.from_at)
        )
        found: dict[str, list[tuple[datetime, int, list[tuple[str, int]] | None]]] = {}
        for rental_id, moment, rate, discounts in self.s.execute(query):
            named = (
                None
                if discounts is None
                else [(str(d["label"]), int(d["micros_per_hour"])) for d in discounts]
            )
            found.setdefault(rental_id, []).append((utc_moment(moment) or moment, int(rate), named))
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
            found.setdefault(rental_id, []).append((utc_moment(moment) or moment, int(rate)))
        return found

    def held_allocations(
        self, *, first: str, last: str, only: Collection[str] | None = None
    ) -> dict[str, list[HeldAllocation]]:
        """The allocations, with their GPU milli and times, of the rentals with ids in [first, last] (a meter
        batch: one range scan of the rental_id index; `only`: of these ids alone) that held more than one
        node; a rental on one node only is left out (it has one provider, one region), in the statement: the
        range is grouped by rental there and only the rows of those that held several nodes come back (not
        a meter batch's 2,000 rows, nearly all of one node, sorted out here)."""
        allocations = AllocationRow.__table__
        in_range = (allocations.c.rental_id >= first, allocations.c.rental_id <= last)
        several_nodes = (
            select(allocations.c.rental_id)
            .where(*in_range)
            .group_by(allocations.c.rental_id)
            .having(func.count(func.distinct(allocations.c.node)) > 1)
        )
        query = select(
            allocations.c.rental_id,
            allocations.c.id,
            allocations.c.node,
            allocations.c.booked_at,
            allocations.c.released_at,
        ).where(*in_range, allocations.c.rental_id.in_(several_nodes))
        spans: dict[str, list[tuple[int, str, datetime | None, datetime | None]]] = {}
        for rental_id, allocation_id, node, booked, released in self.s.execute(query):
            if only is not None and rental_id not in only:
                continue
            spans.setdefault(rental_id, []).append(
                (allocation_id, node, utc_moment(booked), utc_moment(released))
            )
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


def quote_discounts(quote: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A quote's plan discounts as a rate row keeps them: [{label, micros_per_hour}] (none: [])."""
    return [
        {"label": str(d["label"]), "micros_per_hour": int(d["micros_per_hour"])}
        for d in (quote or {}).get("discounts") or []
    ]
