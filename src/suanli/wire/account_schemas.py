"""Request and response bodies of tenants, their API keys, who you are, and webhooks."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from suanli.wire.base import TENANT_NAME_PATTERN, RequestModel, WireModel

Role = Literal["admin", "provider", "tenant"]


class TenantCreateRequest(RequestModel):
    name: str = Field(min_length=1, max_length=100, pattern=TENANT_NAME_PATTERN)
    role: Role = "tenant"


class TenantResponse(WireModel):
    id: str
    name: str
    role: Role
    created_at: datetime


class KeyCreateRequest(RequestModel):
    label: str = Field(default="", max_length=100)


class KeyResponse(WireModel):
    id: str
    tenant_id: str
    label: str
    created_at: datetime
    revoked: bool
    secret: str | None = Field(default=None, description="The key itself: shown once, at creation.")


class MeResponse(WireModel):
    tenant: TenantResponse
    key_id: str


class WebhookCreateRequest(RequestModel):
    url: str = Field(
        min_length=1,
        max_length=2000,
        description="http(s) URL that gets your rentals' events as they happen, POSTed as JSON "
        "(`{webhook_id, events: [{id, rental_id, at, kind, reason, message}]}`, oldest first, at least once: "
        'dedup by `id`), signed in `X-Suanli-Signature: t=<unix s>,sha256=<HMAC-SHA256 of "<t>." + body '
        "under the secret>` (refuse a `t` more than 5 min from your clock: a replay).",
    )
    events: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="The event kinds it gets (created, placed, running, restarted, stopped, failed, "
        "preempting, preempted, lost, requeued, ...); empty: every kind.",
    )


class WebhookChangeRequest(RequestModel):
    url: str | None = Field(
        default=None, min_length=1, max_length=2000, description="A new URL (None: as is)."
    )
    events: list[str] | None = Field(
        default=None, max_length=20, description="New event kinds ([]: every kind; None: as they are)."
    )


class WebhookResponse(WireModel):
    id: str
    url: str
    created_at: datetime
    failures: int = Field(description="Deliveries failed in a row (0: the last one went through).")
    retry_at: datetime | None = Field(default=None, description="After a failure: the next try.")
    last_error: str | None = None
    delivered_at: datetime | None = Field(default=None, description="The last delivery that went through.")
    secret: str | None = Field(default=None, description="The signing secret: shown once, at creation.")
    events: list[str] = Field(default_factory=list, description="The event kinds it gets; empty: every kind.")
