"""`suanli.app.gpu_history.GpuMinuteRepo`: GPU readings by minute, folded in with one upsert per heartbeat."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from suanli.app.gpu_history import GpuMinute, GpuSample
from suanli.domain.plan import NodeAllocation, Slice
from suanli.store.rows import AllocationRow, GpuMinuteRow, SliceRow

_MINUTES = GpuMinuteRow.__table__


class SqlGpuMinutes:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, node: str, minute: datetime, samples: Sequence[GpuSample]) -> None:
        dialect = postgresql if self.s.get_bind().dialect.name == "postgresql" else sqlite
        statement = dialect.insert(_MINUTES)
        new = statement.excluded
        statement = statement.on_conflict_do_update(
            index_elements=[_MINUTES.c.node, _MINUTES.c.gpu_index, _MINUTES.c.minute],
            set_={
                "utilization_sum": _MINUTES.c.utilization_sum + new.utilization_sum,
                "utilization_count": _MINUTES.c.utilization_count + new.utilization_count,
                "memory_max_mib": _greatest(
                    dialect,
                    func.coalesce(_MINUTES.c.memory_max_mib, new.memory_max_mib),
                    func.coalesce(new.memory_max_mib, _MINUTES.c.memory_max_mib),
                ),
                "power_sum_w": _MINUTES.c.power_sum_w + new.power_sum_w,
                "power_count": _MINUTES.c.power_count + new.power_count,
            },
        )
        rows = [
            {
                "node": node,
                "gpu_index": sample.index,
                "minute": minute,
                "utilization_sum": sample.utilization_pct or 0.0,
                "utilization_count": int(sample.utilization_pct is not None),
                "memory_max_mib": sample.memory_used_mib,
                "power_sum_w": sample.power_w or 0.0,
                "power_count": int(sample.power_w is not None),
            }
            for sample in sorted(samples, key=lambda s: s.index)
        ]
        self.s.execute(statement, rows)

    def prune(self, node: str, before: datetime) -> None:
        self.s.execute(delete(GpuMinuteRow).where(GpuMinuteRow.node == node, GpuMinuteRow.minute < before))

    def read(
        self, node: str, gpu_indices: Sequence[int], since: datetime, until: datetime
    ) -> list[GpuMinute]:
        if not gpu_indices:
            return []
        query = (
            select(GpuMinuteRow)
            .where(
                GpuMinuteRow.node == node,
                GpuMinuteRow.gpu_index.in_(list(gpu_indices)),
                GpuMinuteRow.minute >= since,
                GpuMinuteRow.minute <= until,
            )
            .order_by(GpuMinuteRow.gpu_index, GpuMinuteRow.minute)
        )
        return [
            GpuMinute(
                row.gpu_index,
                row.minute,
                row.utilization_sum / row.utilization_count if row.utilization_count else None,
                row.memory_max_mib,
                row.power_sum_w / row.power_count if row.power_count else None,
            )
            for row in self.s.scalars(query)
        ]

    def spans(self, rental_id: str) -> list[tuple[NodeAllocation, datetime | None, datetime | None]]:
        rows = self.s.execute(
            select(AllocationRow, SliceRow)
            .outerjoin(SliceRow, SliceRow.allocation_id == AllocationRow.id)
            .where(AllocationRow.rental_id == rental_id)
            .order_by(AllocationRow.ordinal, AllocationRow.id, SliceRow.ordinal)
        ).all()
        grouped: dict[int, tuple[AllocationRow, list[Slice]]] = {}
        for allocation, piece in rows:
            entry = grouped.setdefault(allocation.id, (allocation, []))
            if piece is not None:
                entry[1].append(
                    Slice(piece.gpu_index, piece.milli, piece.memory_mib, piece.mig_profile, piece.mig_start)
                )
        return [
            (NodeAllocation(a.node, a.cpu_milli, a.memory_mib, tuple(s)), a.booked_at, a.released_at)
            for a, s in grouped.values()
        ]


def _greatest(dialect: object, left: object, right: object) -> object:
    """The larger of two values (NULL only when both are): GREATEST on PostgreSQL, MAX(a, b) on SQLite."""
    return func.greatest(left, right) if dialect is postgresql else func.max(left, right)
