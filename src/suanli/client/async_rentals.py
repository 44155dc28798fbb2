"""The rental lifecycle for asyncio code: create (under an idempotency key), look at, list (following the
pages), stop, wait for a state (riding out a restarting server), and follow output as an async iterator. The
same calls as `RentalCalls`, deciding by the same rules (`rental_rules`, `retries`): only the waiting is
awaited, so many rentals can be driven at once from one event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from datetime import datetime

from suanli.client.async_transport import AsyncTransport
from suanli.client.errors import ServerUnreachable
from suanli.client.rental_rules import (
    RENTALS_PAGE_LIMIT,
    Next,
    after_output_page,
    rental_filters,
    rentals_page_query,
    wait_pause_s,
)
from suanli.client.retries import RECONNECT_S, ride_out_restarts
from suanli.client.transport import next_after, segment
from suanli.wire.agent_schemas import LogResponse
from suanli.wire.schemas import ENDED_STATES, RentalCreateRequest, RentalResponse


class AsyncRentalCalls(AsyncTransport):
    """The calls on rentals, awaited (see `RentalCalls` for each one's meaning)."""

    async def create_rental(
        self, request: RentalCreateRequest, idempotency_key: str | None = None
    ) -> RentalResponse:
        """Create a rental under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same rental rather than renting a second one."""
        return await self._create("/v1/rentals", RentalResponse, request, idempotency_key)

    async def rental(self, rental_id: str) -> RentalResponse:
        return await self._rental(rental_id)

    async def _rental(self, rental_id: str, deadline: float | None = None) -> RentalResponse:
        """The rental, its request and retries bounded by `deadline` (`time.monotonic()`) when given."""
        return await self._call("GET", f"/v1/rentals/{segment(rental_id)}", RentalResponse, deadline=deadline)

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
        filters = rental_filters(states, name, updated_after)
        found: list[RentalResponse] = []
        while params := rentals_page_query(filters, limit, len(found), after, RENTALS_PAGE_LIMIT):
            response = await self._send("GET", "/v1/rentals", params=params)
            page = self._read("GET", "/v1/rentals", response, list[RentalResponse])
            found.extend(page)
            after = next_after(response)
            if after is None or not page:  # the last page (or an older server's only one)
                break
        return found

    async def stop(self, rental_id: str) -> RentalResponse:
        return await self._call("POST", f"/v1/rentals/{segment(rental_id)}/stop", RentalResponse, retry=True)

    async def logs(
        self, rental_id: str, offset: int = 0, node: str | None = None, tail: int | None = None
    ) -> LogResponse:
        """The rental's output from character `offset`, or its last `tail` characters (every node's, or
        `node`'s); follow with `next_offset` until `done`."""
        params = {"offset": str(offset)} | ({"node": node} if node is not None else {})
        if tail is not None:
            params["tail"] = str(tail)
        return await self._call("GET", f"/v1/rentals/{segment(rental_id)}/logs", LogResponse, params=params)

    async def output(
        self,
        rental_id: str,
        *,
        follow: bool = True,
        node: str | None = None,
        poll_s: float = 1.0,
        offset: int = 0,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> AsyncIterator[str]:
        """The rental's output as `Client.output` gives it, in pieces as they come (`async for`); with
        `follow`, until the rental has ended and all of it is read, riding out a server that does not answer
        for up to `reconnect_s` (`on_unreachable` told when it starts to wait for it)."""
        read = self.logs
        if follow:
            read = ride_out_restarts(reconnect_s, poll_s, on_unreachable=on_unreachable)(self.logs)
        while True:
            page = await read(rental_id, offset, node)
            if page.data:
                yield page.data
            offset = page.next_offset
            step = after_output_page(page, follow)
            if step is Next.STOP:
                return
            if step is Next.POLL:
                await asyncio.sleep(poll_s)

    async def wait(
        self,
        rental_id: str,
        until: Collection[str] = ENDED_STATES,
        *,
        timeout_s: float | None = None,
        poll_s: float = 1.0,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> RentalResponse:
        """The rental once its state is one of `until` (default: it has ended), as `Client.wait`:
        `RentalEnded` as soon as it has ended in another, `RentalWaitTimeout` when `timeout_s` passes first
        (its requests bounded by it too); a server that does not answer is waited for up to `reconnect_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            within_s = None if deadline is None else deadline - time.monotonic()
            ride_out = ride_out_restarts(reconnect_s, poll_s, within_s, on_unreachable)
            rental = await ride_out(self._rental)(rental_id, deadline)
            left_s = None if deadline is None else deadline - time.monotonic()
            pause_s = wait_pause_s(rental, until, poll_s, left_s, timeout_s)
            if pause_s is None:
                return rental
            await asyncio.sleep(pause_s)
