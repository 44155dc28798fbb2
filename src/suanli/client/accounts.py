"""Calls on who you are, tenants, their API keys and webhooks."""

from __future__ import annotations

from collections.abc import Sequence

from suanli.client.errors import checks_arguments
from suanli.client.transport import Transport, segment
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


class AccountCalls(Transport):
    """The calls on identity, tenants, API keys and webhooks."""

    def me(self) -> MeResponse:
        return self._call("GET", "/v1/me", MeResponse)

    @checks_arguments
    def create_tenant(self, name: str, role: str = "tenant") -> TenantResponse:
        body = TenantCreateRequest(name=name, role=role)  # type: ignore[arg-type]
        return self._call("POST", "/v1/tenants", TenantResponse, body=body)

    def tenants(self) -> list[TenantResponse]:
        return self._call("GET", "/v1/tenants", list[TenantResponse])

    @checks_arguments
    def create_key(self, tenant_id: str, label: str = "") -> KeyResponse:
        body = KeyCreateRequest(label=label)
        return self._call("POST", f"/v1/tenants/{segment(tenant_id)}/keys", KeyResponse, body=body)

    def keys(self, tenant_id: str) -> list[KeyResponse]:
        """The tenant's API keys (never their secrets), revoked ones included."""
        return self._call("GET", f"/v1/tenants/{segment(tenant_id)}/keys", list[KeyResponse])

    def revoke_key(self, tenant_id: str, key_id: str) -> KeyResponse:
        """Revoke a key; the server's answer is the key as revoked (its secret not shown)."""
        return self._call("DELETE", f"/v1/tenants/{segment(tenant_id)}/keys/{segment(key_id)}", KeyResponse)

    @checks_arguments
    def create_webhook(self, url: str, events: Sequence[str] = ()) -> WebhookResponse:
        """Your rentals' events from now on (of the kinds in `events`; none: all) go to `url`; the answer's
        `secret` (shown once) signs them."""
        body = WebhookCreateRequest(url=url, events=list(events))
        return self._call("POST", "/v1/webhooks", WebhookResponse, body=body)

    def webhooks(self) -> list[WebhookResponse]:
        return self._call("GET", "/v1/webhooks", list[WebhookResponse])

    @checks_arguments
    def change_webhook(
        self, webhook_id: str, url: str | None = None, events: Sequence[str] | None = None
    ) -> WebhookResponse:
        """A new URL or event kinds (None: as is; `events=[]`: every kind) for one of your webhooks."""
        body = WebhookChangeRequest(url=url, events=None if events is None else list(events))
        return self._call(
            "PATCH", f"/v1/webhooks/{segment(webhook_id)}", WebhookResponse, body=body, retry=True
        )

    def remove_webhook(self, webhook_id: str) -> WebhookResponse:
        return self._call("DELETE", f"/v1/webhooks/{segment(webhook_id)}", WebhookResponse, retry=True)
