"""/v1/webhooks: a tenant's URLs that get its rentals' events (`app/webhooks.py`)."""

from __future__ import annotations

from fastapi import APIRouter, status

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.app.webhooks import WebhookService
from suanli.wire.schemas import WebhookChangeRequest, WebhookCreateRequest, WebhookResponse

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


def _service(services: ServicesDep) -> WebhookService:
    assert services.webhooks is not None
    return services.webhooks


@router.post("/webhooks", tags=["webhooks"], status_code=status.HTTP_201_CREATED)
def create_webhook(body: WebhookCreateRequest, caller: CallerDep, services: ServicesDep) -> WebhookResponse:
    """Your rentals' events from now on (those of the kinds in `events`, or all) go to `url`; the answer
    holds the signing secret, once."""
    webhook = _service(services).create(caller, body.url, body.events)
    return mappers.webhook(webhook, secret=webhook.secret)


@router.get("/webhooks", tags=["webhooks"])
def list_webhooks(caller: CallerDep, services: ServicesDep) -> list[WebhookResponse]:
    """Your webhooks and how their deliveries stand."""
    return [mappers.webhook(w) for w in _service(services).list(caller)]


@router.patch("/webhooks/{webhook_id}", tags=["webhooks"])
def change_webhook(
    webhook_id: str, body: WebhookChangeRequest, caller: CallerDep, services: ServicesDep
) -> WebhookResponse:
    """Send to a new URL, or other event kinds, from where its deliveries stand (the secret stays)."""
    return mappers.webhook(_service(services).change(caller, webhook_id, body.url, body.events))


@router.delete("/webhooks/{webhook_id}", tags=["webhooks"])
def remove_webhook(webhook_id: str, caller: CallerDep, services: ServicesDep) -> WebhookResponse:
    """Stop sending to it."""
    return mappers.webhook(_service(services).remove(caller, webhook_id))
