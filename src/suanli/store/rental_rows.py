"""Rental rows to records and back: the spec and promise JSON columns, allocations with their slices, and
aware UTC moments."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli.app.records import Rental, RentalSpec
from suanli.domain.plan import NodeAllocation, Slice
from suanli.store.rows import AllocationRow, RentalRow, SliceRow


def spec_json(spec: RentalSpec) -> dict[str, Any]:
    """The spec as the `spec` column holds it; its image has a column of its own (0017)."""
    data = asdict(spec)
    del data["image"]
    for name in ("regions", "jurisdictions", "providers", "command"):
        data[name] = list(data[name])
    data["labels"], data["env"] = dict(spec.labels), dict(spec.env)
    return data


def rental_from_row(row: RentalRow) -> Rental:
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
        None if row.promise is None else tuple(allocation_from_json(a) for a in row.promise),
        row.time_limit_at,
        row.last_busy_at,
        bool(row.borrowed),
        int(row.placements or 0),
        None if row.notice_keeps is None else tuple(allocation_from_json(a) for a in row.notice_keeps),
        row.time_left_s,
        row.pending_message,
        row.uncapped_limit_at,
        row.master_port,
    )


def allocations_by_rental(
    session: Session, condition: Any
) -> dict[str, list[tuple[AllocationRow, NodeAllocation]]]:
    """The allocation rows `condition` selects, each with what it holds (its slices), per rental in their
    order: one query for the rows and their slices together."""
    rows = session.execute(
        select(AllocationRow, SliceRow)
        .outerjoin(SliceRow, SliceRow.allocation_id == AllocationRow.id)
        .where(condition)
        .order_by(AllocationRow.rental_id, AllocationRow.ordinal, AllocationRow.id, SliceRow.ordinal)
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
            (a, NodeAllocation(a.node, a.cpu_milli, a.memory_mib, tuple(slices)))
            for a, slices in by_id.values()
        ]
        for rental_id, by_id in grouped.items()
    }


def allocation_json(allocation: NodeAllocation) -> dict[str, Any]:
    """A placement's node part as JSON (`rentals.promise`): its fields and its slices' fields."""
    return asdict(allocation)


def allocation_from_json(data: dict[str, Any]) -> NodeAllocation:
    slices = tuple(Slice(**piece) for piece in data["slices"])
    return NodeAllocation(data["node"], data["cpu_milli"], data["memory_mib"], slices)


def utc_moment(moment: datetime | None) -> datetime | None:
    """Aggregates (min, max) bypass the column type on SQLite: make them aware UTC."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
