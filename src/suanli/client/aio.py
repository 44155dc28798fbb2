"""`AsyncClient`: the SDK for asyncio code, over `httpx.AsyncClient`: every plain request-and-answer call of
`Client` (accounts, tenants, keys and webhooks; the fleet, nodes, maintenance and offers; rentals and their
output, waits, runs and GPUs; commands run in a rental; contracts; prices, balances, credits, plans, limits,
budgets, invoices, SLAs, the ledger and payouts), awaited. It is configured as `Client` is (URL, key,
timeouts, retries, transport), sends what the same `*_requests` modules say, reads by the same rules
(`exchange`, `retries`, `rental_rules`, `billing_pages`) and raises the same errors.

Left out, the sync client's only: the streams (`attach_exec`, `forward`, and `suanli.client.copy`, each over
a WebSocket) and the node agent's own calls (`register_agent`, `heartbeat`, `report_exec`, `upload_log`,
`attach_agent_exec`: the agent runs sync) and `create_join_token`, an operator's step before an agent runs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from suanli.client.async_accounts import AsyncAccountCalls
from suanli.client.async_billing import AsyncBillingCalls
from suanli.client.async_contracts import AsyncContractCalls
from suanli.client.async_execs import AsyncExecCalls
from suanli.client.async_fleet import AsyncFleetCalls
from suanli.client.async_rentals import AsyncRentalCalls
from suanli.client.billing_pages import LEDGER_PAGE_LIMIT, PAYOUT_PAGE_LIMIT, ledger_pages, payout_pages
from suanli.client.rental_rules import RENTALS_PAGE_LIMIT, rentals_pages
from suanli.wire.billing_schemas import LedgerTransactionResponse, PayoutResponse
from suanli.wire.schemas import RentalResponse

__all__ = ["LEDGER_PAGE_LIMIT", "PAYOUT_PAGE_LIMIT", "RENTALS_PAGE_LIMIT", "AsyncClient"]


class AsyncClient(
    AsyncAccountCalls,
    AsyncFleetCalls,
    AsyncRentalCalls,
    AsyncExecCalls,
    AsyncContractCalls,
    AsyncBillingCalls,
):
    """An asyncio session with one suanli server, authenticated by an API key: `async with AsyncClient(url,
    key) as cloud:`, then `await cloud.create_rental(...)`, `await cloud.wait(...)`, `async for piece in
    cloud.output(...)`. Many calls may be awaited at once (`asyncio.gather`). `timeout_s` bounds each send of
    a request, `call_timeout_s` (when given) each call with its retries, as `Client`'s do."""

    async def rentals(
        self,
        states: Iterable[str] = (),
        name: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        updated_after: datetime | None = None,
    ) -> list[RentalResponse]:
        """Your rentals, newest first, as `Client.rentals`: every one or the newest `limit`, of `states` and
        `name` and changed at or after `updated_after` when given, past `after`; fetched a page at a time,
        following each page's `Link` rel="next"."""
        return await self._pages(rentals_pages(states, name, limit, after, updated_after, RENTALS_PAGE_LIMIT))

    async def ledger(
        self, tenant_id: str | None = None, after: int = 0, limit: int | None = None
    ) -> list[LedgerTransactionResponse]:
        """Your transactions in chain order past `seq` `after`, as `Client.ledger`: every one or the first
        `limit`, a page at a time."""
        return await self._pages(ledger_pages(tenant_id, after, limit, LEDGER_PAGE_LIMIT))

    async def payouts(self, provider: str | None = None, limit: int | None = None) -> list[PayoutResponse]:
        """Provider payables per rental, as `Client.payouts`: every line or the first `limit`, a page at a
        time, each provider once."""
        return await self._pages(payout_pages(provider, limit, PAYOUT_PAGE_LIMIT))
