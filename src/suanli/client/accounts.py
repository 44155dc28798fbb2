"""Calls on who you are, tenants, their API keys and webhooks (what each sends: `account_requests`)."""

from __future__ import annotations

from collections.abc import Sequence

from suanli.client import account_requests as sent
from suanli.client.transport import Transport
from suanli.wire.schemas import KeyResponse, MeResponse, TenantResponse, WebhookResponse


class AccountCalls(Transport):
    """The calls on identity, tenants, API keys and webhooks."""

    def me(self) -> MeResponse:
        return self._ask(sent.me())

    def create_tenant(self, name: str, role: str = "tenant") -> TenantResponse:
        return self._ask(sent.create_tenant(name, role))

    def tenants(self) -> list[TenantResponse]:
        return self._ask(sent.tenants())

    def create_key(self, tenant_id: str, label: str = "") -> KeyResponse:
        return self._ask(sent.create_key(tenant_id, label))

    def keys(self, tenant_id: str) -> list[KeyResponse]:
        """The tenant's API keys (never their secrets), revoked ones included."""
        return self._ask(sent.keys(tenant_id))

    def revoke_key(self, tenant_id: str, key_id: str) -> KeyResponse:
        """Revoke a key; the server's answer is the key as revoked (its secret not shown)."""
        return self._ask(sent.revoke_key(tenant_id, key_id))

    def create_webhook(self, url: str, events: Sequence[str] = ()) -> WebhookResponse:
        """Your rentals' events from now on (of the kinds in `events`; none: all) go to `url`; the answer's
        `secret` (shown once) signs them."""
        return self._ask(sent.create_webhook(url, events))

    def webhooks(self) -> list[WebhookResponse]:
        return self._ask(sent.webhooks())

    def change_webhook(
        self, webhook_id: str, url: str | None = None, events: Sequence[str] | None = None
    ) -> WebhookResponse:
        """A new URL or event kinds (None: as is; `events=[]`: every kind) for one of your webhooks."""
        return self._ask(sent.change_webhook(webhook_id, url, events))

    def remove_webhook(self, webhook_id: str) -> WebhookResponse:
        return self._ask(sent.remove_webhook(webhook_id))
