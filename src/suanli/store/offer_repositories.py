"""`SqlContractOffers`: contracts offered to one tenant at a negotiated price, and what became of them."""

from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from suanli.app.records import ContractOffer
from suanli.store.rows import ContractOfferRow

_FIELDS = tuple(f.name for f in fields(ContractOffer))


class SqlContractOffers:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, offer: ContractOffer) -> None:
        self.s.add(ContractOfferRow(**asdict(offer)))
        self.s.flush()

    def get(self, offer_id: str, *, lock: bool = False) -> ContractOffer | None:
        """The offer; `lock`: its row held until the transaction ends (PostgreSQL: FOR UPDATE, read as
        committed by whoever held it before), so two acceptances take turns."""
        row = self.s.get(ContractOfferRow, offer_id, with_for_update=lock, populate_existing=lock)
        return None if row is None else _offer(row)

    def list(self, tenant_id: str | None) -> list[ContractOffer]:
        query = select(ContractOfferRow).order_by(ContractOfferRow.created_at, ContractOfferRow.id)
        if tenant_id is not None:
            query = query.where(ContractOfferRow.tenant_id == tenant_id)
        return [_offer(row) for row in self.s.scalars(query)]

    def decide(self, offer_id: str, state: str, contract_id: str | None, decided_at: datetime) -> None:
        self.s.execute(
            update(ContractOfferRow)
            .where(ContractOfferRow.id == offer_id)
            .values(state=state, contract_id=contract_id, decided_at=decided_at)
            .execution_options(synchronize_session=False)
        )


def _offer(row: ContractOfferRow) -> ContractOffer:
    return ContractOffer(**{name: getattr(row, name) for name in _FIELDS})
