"""The one query shape behind plan windows and contract coverage: rows whose start or end has come and not
been followed yet, and the guarded step that records it (stage 0: not started, 1: started, 2: ended)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, update
from sqlalchemy.orm import InstrumentedAttribute, Session


def due(
    stage: InstrumentedAttribute[int], starts_at: Any, ends_at: Any, now: datetime
) -> ColumnElement[bool]:
    """Rows whose start (stage 0) or end (stage 1) is at or before `now`: a partial index's rows (stage < 2),
    the open and future windows, never history."""
    return and_(stage < 2, or_(and_(stage == 0, starts_at <= now), ends_at <= now))


def advance(session: Session, row_id: Any, stage: InstrumentedAttribute[int], to: int) -> bool:
    """Record that the row's window was followed to `to`; False when it was there already (another pass did
    it first: that pass's caller must roll its work back)."""
    table = stage.class_
    done = session.execute(
        update(table)
        .where(table.id == row_id, stage < to)
        .values({stage.key: to})
        .execution_options(synchronize_session=False)
    )
    return bool(done.rowcount)
