"""`suanli.app.gpu_history.GpuMinuteRepo`: GPU readings by minute, folded in with one upsert per heartbeat."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from suanli.app.gpu_history import GpuMinute, GpuSample
from suanli.domain.plan import NodeAllocation
from suanli.store.rental_rows import allocations_by_rental
from suanli.store.rows import AllocationRow, GpuMinuteRow

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
        pairs = allocations_by_rental(self.s, AllocationRow.rental_id == rental_id).get(rental_id, [])
        return [(allocation, row.booked_at, row.released_at) for row, allocation in pairs]


def _greatest(dialect: object, left: object, right: object) -> object:
    """The larger of two values (NULL only when both are): GREATEST on PostgreSQL, MAX(a, b) on SQLite."""
    return func.greatest(left, right) if dialect is postgresql else func.max(left, right)
