"""The price book repository: admins' price entries, append-only (a later entry of a key supersedes the
earlier one from its `effective_from` on; nothing is updated or deleted, so quotes already given stay
explainable). `stamp()` is (count, max id): it changes whenever an entry is added."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from suanli.app.records import PriceEntry
from suanli.store.rows import PriceEntryRow


class SqlPrices:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, entry: PriceEntry) -> PriceEntry:
        if entry.effective_from is None:
            raise ValueError("a stored price entry needs its effective_from")
        row = PriceEntryRow(
            gpu_model=entry.gpu_model,
            region=entry.region,
            tier=entry.tier,
            mig_profile=entry.mig_profile,
            price_micros_per_gpu_hour=entry.price_micros_per_gpu_hour,
            effective_from=entry.effective_from,
            source=entry.source,
            created_at=entry.created_at or datetime.now(UTC),
        )
        self.s.add(row)
        self.s.flush()
        return _entry(row)

    def list(self) -> list[PriceEntry]:
        return [_entry(row) for row in self.s.scalars(select(PriceEntryRow).order_by(PriceEntryRow.id))]

    def stamp(self) -> tuple[int, int]:
        count, top = self.s.execute(select(func.count(PriceEntryRow.id), func.max(PriceEntryRow.id))).one()
        return int(count or 0), int(top or 0)


def _entry(row: PriceEntryRow) -> PriceEntry:
    return PriceEntry(
        gpu_model=row.gpu_model,
        region=row.region,
        tier=row.tier,
        price_micros_per_gpu_hour=row.price_micros_per_gpu_hour,
        effective_from=row.effective_from,
        source=row.source,
        mig_profile=row.mig_profile,
        id=row.id,
        created_at=row.created_at,
    )
