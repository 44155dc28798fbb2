"""The rental lifecycle for asyncio code: create (under an idempotency key), dry run, look at, stop, bid,
resize, wait for a state (riding out a restarting server), follow output as an async iterator, its runs and
GPUs. The same calls as `RentalCalls`, sending what `rental_requests` says and deciding by the same rules
(`rental_rules`, `retries`): only the waiting is awaited, so many rentals can be driven at once from one event
loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection

from suanli.client import rental_requests as sent
from suanli.client.async_transport import AsyncTransport
from suanli.client.errors import ServerUnreachable
from suanli.client.rental_rules import Next, after_output_page, wait_pause_s
from suanli.client.retries import RECONNECT_S, ride_out_restarts
from suanli.wire.agent_schemas import (
    LogResponse,
    RentalGpuHistoryResponse,
    RentalGpuResponse,
    RentalRunResponse,
)
from suanli.wire.schemas import ENDED_STATES, RentalCreateRequest, RentalDryRunResponse, RentalResponse


class AsyncRentalCalls(AsyncTransport):
    """The calls on rentals, awaited (see `RentalCalls` for each one's meaning; their list, fetched in pages,
    is `AsyncClient.rentals`)."""

    async def create_rental(
        self, request: RentalCreateRequest, idempotency_key: str | None = None
    ) -> RentalResponse:
        """Create a rental under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same rental rather than renting a second one."""
        return await self._ask(sent.create_rental(request, idempotency_key))

    async def dry_run_rental(self, request: RentalCreateRequest) -> RentalDryRunResponse:
        return await self._ask(sent.dry_run_rental(request))

    async def rental(self, rental_id: str) -> RentalResponse:
        return await self._ask(sent.rental(rental_id))

    async def _rental(self, rental_id: str, deadline: float | None = None) -> RentalResponse:
        """The rental, its request and retries bounded by `deadline` (`time.monotonic()`) when given."""
        return await self._ask(sent.rental(rental_id), deadline)

    async def stop(self, rental_id: str) -> RentalResponse:
        return await self._ask(sent.stop(rental_id))

    async def set_bid(self, rental_id: str, bid_micros_per_gpu_hour: int) -> RentalResponse:
        return await self._ask(sent.set_bid(rental_id, bid_micros_per_gpu_hour))

    async def resize(
        self, rental_id: str, *, nodes: int | None = None, gpus: int | None = None
    ) -> RentalResponse:
        return await self._ask(sent.resize(rental_id, nodes, gpus))

    async def logs(
        self, rental_id: str, offset: int = 0, node: str | None = None, tail: int | None = None
    ) -> LogResponse:
        """The rental's output from character `offset`, or its last `tail` characters (every node's, or
        `node`'s); follow with `next_offset` until `done`."""
        return await self._ask(sent.logs(rental_id, offset, node, tail))

    async def rental_runs(self, rental_id: str) -> list[RentalRunResponse]:
        return await self._ask(sent.rental_runs(rental_id))

    async def rental_gpus(self, rental_id: str) -> list[RentalGpuResponse]:
        return await self._ask(sent.rental_gpus(rental_id))

    async def rental_gpu_history(self, rental_id: str, minutes: int = 60) -> list[RentalGpuHistoryResponse]:
        return await self._ask(sent.rental_gpu_history(rental_id, minutes))

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
