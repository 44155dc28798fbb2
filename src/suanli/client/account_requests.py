"""What the calls on identity, tenants, API keys and webhooks send (see `calls`): one function a call, for
`AccountCalls` and `AsyncAccountCalls`; an argument its request model refuses is an `InvalidArgument`."""

from __future__ import annotations

from collections.abc import Sequence

from suanli.client.calls import Call
from suanli.client.errors import checks_arguments
from suanli.client.transport import segment
from suanli.wire.schemas import (
    KeyCreateRequest,
    KeyResponse,
    MeResponse,
    TenantCreateRequest,
    TenantResponse,
    WebhookChangeRequest,
    WebhookCreateRequest,
    WebhookResponse,
)


def me() -> Call[MeResponse]:
    return Call("GET", "/v1/me", MeResponse)


@checks_arguments
def create_tenant(name: str, role: str) -> Call[TenantResponse]:
    body = TenantCreateRequest(name=name, role=role)  # type: ignore[arg-type]
    return Call("POST", "/v1/tenants", TenantResponse, body=body)


def tenants() -> Call[list[TenantResponse]]:
    return Call("GET", "/v1/tenants", list[TenantResponse])


@checks_arguments
def create_key(tenant_id: str, label: str) -> Call[KeyResponse]:
    body = KeyCreateRequest(label=label)
    return Call("POST", f"/v1/tenants/{segment(tenant_id)}/keys", KeyResponse, body=body)


def keys(tenant_id: str) -> Call[list[KeyResponse]]:
    return Call("GET", f"/v1/tenants/{segment(tenant_id)}/keys", list[KeyResponse])


def revoke_key(tenant_id: str, key_id: str) -> Call[KeyResponse]:
    return Call("DELETE", f"/v1/tenants/{segment(tenant_id)}/keys/{segment(key_id)}", KeyResponse)


@checks_arguments
def create_webhook(url: str, events: Sequence[str]) -> Call[WebhookResponse]:
    body = WebhookCreateRequest(url=url, events=list(events))
    return Call("POST", "/v1/webhooks", WebhookResponse, body=body)


def webhooks() -> Call[list[WebhookResponse]]:
    return Call("GET", "/v1/webhooks", list[WebhookResponse])


@checks_arguments
def change_webhook(webhook_id: str, url: str | None, events: Sequence[str] | None) -> Call[WebhookResponse]:
    body = WebhookChangeRequest(url=url, events=None if events is None else list(events))
    return Call("PATCH", f"/v1/webhooks/{segment(webhook_id)}", WebhookResponse, body=body, retry=True)


def remove_webhook(webhook_id: str) -> Call[WebhookResponse]:
    return Call("DELETE", f"/v1/webhooks/{segment(webhook_id)}", WebhookResponse, retry=True)
