"""`SqlMaintenance`: operators' scheduled maintenance windows of nodes."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from suanli.app.records import MaintenanceWindow
from suanli.store.rows import MaintenanceWindowRow


class SqlMaintenance:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, window: MaintenanceWindow) -> None:
        self.s.add(
            MaintenanceWindowRow(
                id=window.id,
                node=window.node,
                starts_at=window.starts_at,
                ends_at=window.ends_at,
                reason=window.reason,
                created_at=window.created_at,
            )
        )
        self.s.flush()

    def get(self, window_id: str) -> MaintenanceWindow | None:
        row = self.s.get(MaintenanceWindowRow, window_id)
        return None if row is None else _window(row)

    def remove(self, window_id: str) -> bool:
        done = self.s.execute(delete(MaintenanceWindowRow).where(MaintenanceWindowRow.id == window_id))
        return bool(done.rowcount)  # type: ignore[attr-defined]

    def list(self, ending_after: datetime | None = None) -> list[MaintenanceWindow]:
        """Windows by start (those that end after `ending_after` when given: the ones still to come or on)."""
        query = select(MaintenanceWindowRow).order_by(MaintenanceWindowRow.starts_at, MaintenanceWindowRow.id)
        if ending_after is not None:
            query = query.where(MaintenanceWindowRow.ends_at > ending_after)
        return [_window(row) for row in self.s.scalars(query)]


def _window(row: MaintenanceWindowRow) -> MaintenanceWindow:
    return MaintenanceWindow(row.id, row.node, row.starts_at, row.ends_at, row.reason, row.created_at)
