"""`SqlOutages`: node outages (SLA evidence) and the nodes rentals held, for `suanli.app.sla`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.sla import Outage
from suanli.store.rows import AllocationRow, OutageRow


class SqlOutages:
    def __init__(self, session: Session) -> None:
        self.s = session

    def open(self, node: str, started_at: datetime, cause: str) -> int:
        """Open an outage of `node` from `started_at`; a node already down keeps its open outage."""
        found = self._open_rows(node)
        if found:
            return found[0].id
        row = OutageRow(node=node, started_at=started_at, ended_at=None, cause=cause[:200])
        self.s.add(row)
        self.s.flush()
        return row.id

    def close(self, node: str, ended_at: datetime) -> list[int]:
        """Close the node's open outages at `ended_at` (never before they started); their ids."""
        closed = []
        for row in self._open_rows(node):
            row.ended_at = max(ended_at, row.started_at)
            closed.append(row.id)
        self.s.flush()
        return closed

    def overlapping(self, start: datetime, end: datetime) -> list[Outage]:
        """Outages that overlap `[start, end)` (open ones included), by id."""
        query = (
            select(OutageRow)
            .where(OutageRow.started_at < end, or_(OutageRow.ended_at.is_(None), OutageRow.ended_at > start))
            .order_by(OutageRow.id)
        )
        return [_outage(row) for row in self.s.scalars(query)]

    def nodes_of(self, rental_ids: Sequence[str]) -> dict[str, frozenset[str]]:
        """Every node each rental held an allocation on (released ones included)."""
        found: dict[str, set[str]] = {}
        for start in range(0, len(rental_ids), 1000):
            chunk = list(rental_ids[start : start + 1000])
            query = select(AllocationRow.rental_id, AllocationRow.node).where(
                AllocationRow.rental_id.in_(chunk)
            )
            for rental_id, node in self.s.execute(query):
                found.setdefault(rental_id, set()).add(node)
        return {rental_id: frozenset(nodes) for rental_id, nodes in found.items()}

    def _open_rows(self, node: str) -> list[OutageRow]:
        query = (
            select(OutageRow)
            .where(OutageRow.node == node, OutageRow.ended_at.is_(None))
            .order_by(OutageRow.id)
        )
        return list(self.s.scalars(query))


def _outage(row: OutageRow) -> Outage:
    return Outage(
        row.id,
        row.node,
        to_epoch_s(row.started_at),
        None if row.ended_at is None else to_epoch_s(row.ended_at),
        row.cause,
    )
