"""`SqlWebhooks`: tenants' webhooks and where each one's delivery stands."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from suanli.app.records import RentalEvent, SentEvent, Webhook
from suanli.store.rows import RentalEventRow, RentalRow, WebhookRow


class SqlWebhooks:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, webhook: Webhook) -> None:
        self.s.add(
            WebhookRow(
                id=webhook.id,
                tenant_id=webhook.tenant_id,
                url=webhook.url,
                secret=webhook.secret,
                created_at=webhook.created_at,
                after_event_id=webhook.after_event_id,
                failures=webhook.failures,
                event_kinds=",".join(webhook.event_kinds) or None,
            )
        )
        self.s.flush()

    def get(self, webhook_id: str) -> Webhook | None:
        row = self.s.get(WebhookRow, webhook_id)
        return None if row is None else _webhook(row)

    def list(self, tenant_id: str | None) -> list[Webhook]:
        query = select(WebhookRow).order_by(WebhookRow.created_at, WebhookRow.id)
        if tenant_id is not None:
            query = query.where(WebhookRow.tenant_id == tenant_id)
        return [_webhook(r) for r in self.s.scalars(query)]

    def remove(self, webhook_id: str) -> None:
        self.s.execute(delete(WebhookRow).where(WebhookRow.id == webhook_id))

    def change(self, webhook_id: str, url: str, event_kinds: tuple[str, ...]) -> None:
        self.s.execute(
            update(WebhookRow)
            .where(WebhookRow.id == webhook_id)
            .values(url=url, event_kinds=",".join(event_kinds) or None)
        )

    def due(self, now: datetime) -> list[Webhook]:
        query = (
            select(WebhookRow)
            .where(or_(WebhookRow.retry_at.is_(None), WebhookRow.retry_at <= now))
            .order_by(WebhookRow.id)
        )
        return [_webhook(r) for r in self.s.scalars(query)]

    def last_event_id(self) -> int:
        return int(self.s.scalar(select(func.max(RentalEventRow.id))) or 0)

    def events_after(
        self, tenant_id: str, after_id: int, through_id: int, limit: int, kinds: tuple[str, ...] = ()
    ) -> list[SentEvent]:
        query = (
            select(RentalEventRow)
            .join(RentalRow, RentalRow.id == RentalEventRow.rental_id)
            .where(
                RentalRow.tenant_id == tenant_id,
                RentalEventRow.id > after_id,
                RentalEventRow.id <= through_id,
            )
            .order_by(RentalEventRow.id)
            .limit(limit)
        )
        if kinds:
            query = query.where(RentalEventRow.kind.in_(kinds))
        return [
            SentEvent(r.id, r.rental_id, RentalEvent(r.at, r.kind, r.reason, r.message))
            for r in self.s.scalars(query)
        ]

    def delivered(self, webhook_id: str, through_event_id: int, now: datetime) -> None:
        self.s.execute(
            update(WebhookRow)
            .where(WebhookRow.id == webhook_id, WebhookRow.after_event_id < through_event_id)
            .values(
                after_event_id=through_event_id, failures=0, retry_at=None, last_error=None, delivered_at=now
            )
        )

    def skip_to(self, webhook_id: str, through_event_id: int) -> None:
        """Move the cursor past events it does not get (other tenants', kinds it filters out)."""
        self.s.execute(
            update(WebhookRow)
            .where(WebhookRow.id == webhook_id, WebhookRow.after_event_id < through_event_id)
            .values(after_event_id=through_event_id)
        )

    def failed(self, webhook_id: str, error: str, retry_at: datetime) -> None:
        self.s.execute(
            update(WebhookRow)
            .where(WebhookRow.id == webhook_id)
            .values(failures=WebhookRow.failures + 1, retry_at=retry_at, last_error=error[:500])
        )


def _webhook(row: WebhookRow) -> Webhook:
    return Webhook(
        row.id,
        row.tenant_id,
        row.url,
        row.secret,
        row.created_at,
        row.after_event_id,
        row.failures,
        row.retry_at,
        row.last_error,
        row.delivered_at,
        tuple(row.event_kinds.split(",")) if row.event_kinds else (),
    )
