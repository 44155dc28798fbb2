"""Calls on who you are, tenants, their API keys and webhooks, for asyncio code: `AccountCalls`' awaited (what
each sends: `account_requests`)."""

from __future__ import annotations

from collections.abc import Sequence

from suanli.client import account_requests as sent
from suanli.client.async_transport import AsyncTransport
from suanli.wire.schemas import KeyResponse, MeResponse, TenantResponse, WebhookResponse


class AsyncAccountCalls(AsyncTransport):
    """The calls on identity, tenants, API keys and webhooks, awaited (see `AccountCalls`)."""

    async def me(self) -> MeResponse:
        return await self._ask(sent.me())

    async def create_tenant(self, name: str, role: str = "tenant") -> TenantResponse:
        return await self._ask(sent.create_tenant(name, role))

    async def tenants(self) -> list[TenantResponse]:
        return await self._ask(sent.tenants())

    async def create_key(self, tenant_id: str, label: str = "") -> KeyResponse:
        return await self._ask(sent.create_key(tenant_id, label))

    async def keys(self, tenant_id: str) -> list[KeyResponse]:
        """The tenant's API keys (never their secrets), revoked ones included."""
        return await self._ask(sent.keys(tenant_id))

    async def revoke_key(self, tenant_id: str, key_id: str) -> KeyResponse:
        """Revoke a key; the server's answer is the key as revoked (its secret not shown)."""
        return await self._ask(sent.revoke_key(tenant_id, key_id))

    async def create_webhook(self, url: str, events: Sequence[str] = ()) -> WebhookResponse:
        """Your rentals' events from now on (of the kinds in `events`; none: all) go to `url`; the answer's
        `secret` (shown once) signs them."""
        return await self._ask(sent.create_webhook(url, events))

    async def webhooks(self) -> list[WebhookResponse]:
        return await self._ask(sent.webhooks())

    async def change_webhook(
        self, webhook_id: str, url: str | None = None, events: Sequence[str] | None = None
    ) -> WebhookResponse:
        """A new URL or event kinds (None: as is; `events=[]`: every kind) for one of your webhooks."""
        return await self._ask(sent.change_webhook(webhook_id, url, events))

    async def remove_webhook(self, webhook_id: str) -> WebhookResponse:
        return await self._ask(sent.remove_webhook(webhook_id))
