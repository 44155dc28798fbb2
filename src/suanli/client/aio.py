"""`AsyncClient`: the SDK for asyncio code, over `httpx.AsyncClient`; today the rental lifecycle (create,
look at, list, stop, wait, follow output) and commands run in a rental (queue, look at, list, wait for one).
It is configured as `Client` is (URL, key, timeouts, retries, transport), sends and reads by the same rules
(`exchange`, `retries`, `rental_rules`) and raises the same errors."""

from __future__ import annotations

from suanli.client.async_execs import AsyncExecCalls
from suanli.client.async_rentals import AsyncRentalCalls
from suanli.client.rental_rules import RENTALS_PAGE_LIMIT

__all__ = ["RENTALS_PAGE_LIMIT", "AsyncClient"]


class AsyncClient(AsyncRentalCalls, AsyncExecCalls):
    """An asyncio session with one suanli server, authenticated by an API key: `async with AsyncClient(url,
    key) as cloud:`, then `await cloud.create_rental(...)`, `await cloud.wait(...)`, `async for piece in
    cloud.output(...)`. Many calls may be awaited at once (`asyncio.gather`). `timeout_s` bounds each send of
    a request, `call_timeout_s` (when given) each call with its retries, as `Client`'s do."""
