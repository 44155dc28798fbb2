"""Calls on one rental: create, stop, bid, resize, its output (followed through server restarts), waiting for
its state, its runs and GPUs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator

from suanli.client import rental_requests as sent
from suanli.client.errors import ServerUnreachable
from suanli.client.rental_rules import Next, after_output_page, wait_pause_s
from suanli.client.retries import RECONNECT_S, SERVER_AWAY_ERRORS, ride_out_restarts
from suanli.client.transport import Transport
from suanli.wire.agent_schemas import (
    LogResponse,
    RentalGpuHistoryResponse,
    RentalGpuResponse,
    RentalRunResponse,
)
from suanli.wire.schemas import ENDED_STATES, RentalCreateRequest, RentalDryRunResponse, RentalResponse


class RentalCalls(Transport):
    """The calls on rentals (their list, fetched in pages, is `Client.rentals`; what each sends:
    `rental_requests`)."""

    def create_rental(
        self, request: RentalCreateRequest, idempotency_key: str | None = None
    ) -> RentalResponse:
        """Create a rental under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same rental rather than renting a second one."""
        return self._ask(sent.create_rental(request, idempotency_key))

    def dry_run_rental(self, request: RentalCreateRequest) -> RentalDryRunResponse:
        """What creating `request` now would do, creating nothing: where it would start and at what rate,
        whom it would preempt, or why it would wait."""
        return self._ask(sent.dry_run_rental(request))

    def rental(self, rental_id: str) -> RentalResponse:
        return self._ask(sent.rental(rental_id))

    def _rental(self, rental_id: str, deadline: float | None = None) -> RentalResponse:
        """The rental, its request and retries bounded by `deadline` (`time.monotonic()`) when given."""
        return self._ask(sent.rental(rental_id), deadline)

    def stop(self, rental_id: str) -> RentalResponse:
        return self._ask(sent.stop(rental_id))

    def set_bid(self, rental_id: str, bid_micros_per_gpu_hour: int) -> RentalResponse:
        """A spot rental's new bid per GPU-hour (live: at least its pool's floor)."""
        return self._ask(sent.set_bid(rental_id, bid_micros_per_gpu_hour))

    def resize(self, rental_id: str, *, nodes: int | None = None, gpus: int | None = None) -> RentalResponse:
        return self._ask(sent.resize(rental_id, nodes, gpus))

    def logs(
        self, rental_id: str, offset: int = 0, node: str | None = None, tail: int | None = None
    ) -> LogResponse:
        """The rental's output from character `offset`, or its last `tail` characters (every node's, or
        `node`'s); follow with `next_offset` until `done`."""
        return self._ask(sent.logs(rental_id, offset, node, tail))

    def output(
        self,
        rental_id: str,
        *,
        follow: bool = True,
        node: str | None = None,
        poll_s: float = 1.0,
        on_wait: Callable[[], None] | None = None,
        offset: int = 0,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> Iterator[str]:
        """The rental's output (every node's, or `node`'s) from character `offset` (the start), in pieces as
        they come; with `follow`, until the rental has ended and all of it is read. `on_wait` runs each time
        nothing new has come, before the next poll. A follow rides out a server that does not answer, or a
        gateway in front of it that answers 502/503/504 for it, for up to `reconnect_s` (a restart, a change
        of leader; `ride_out_restarts`), resuming where it was; `on_unreachable` is told when it starts to
        wait for it."""
        read = self.logs
        if follow:
            read = ride_out_restarts(reconnect_s, poll_s, on_unreachable=on_unreachable)(self.logs)
        while True:
            page = read(rental_id, offset, node)
            if page.data:
                yield page.data
            offset = page.next_offset
            step = after_output_page(page, follow)
            if step is Next.STOP:
                return
            if step is Next.READ:
                continue
            if on_wait is not None:
                with contextlib.suppress(*SERVER_AWAY_ERRORS):  # the next poll waits for the server
                    on_wait()
            time.sleep(poll_s)

    def wait(
        self,
        rental_id: str,
        until: Collection[str] = ENDED_STATES,
        *,
        timeout_s: float | None = None,
        poll_s: float = 1.0,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> RentalResponse:
        """The rental once its state is one of `until` (default: it has ended); `RentalEnded` as soon as it
        has ended in another (it can never get there), `RentalWaitTimeout` when `timeout_s` passes first. A
        server that does not answer (or a gateway's 502/503/504 for it) is waited for as `output` does (up
        to `reconnect_s`; `on_unreachable` told when it starts), never past `timeout_s`: the deadline bounds
        each request and retry too, so a server still away by then is `ServerUnreachable`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            within_s = None if deadline is None else deadline - time.monotonic()
            ride_out = ride_out_restarts(reconnect_s, poll_s, within_s, on_unreachable)
            rental = ride_out(self._rental)(rental_id, deadline)
            left_s = None if deadline is None else deadline - time.monotonic()
            pause_s = wait_pause_s(rental, until, poll_s, left_s, timeout_s)
            if pause_s is None:
                return rental
            time.sleep(pause_s)

    def rental_runs(self, rental_id: str) -> list[RentalRunResponse]:
        return self._ask(sent.rental_runs(rental_id))

    def rental_gpus(self, rental_id: str) -> list[RentalGpuResponse]:
        """The GPUs the rental holds now, with their last utilization, memory and power readings."""
        return self._ask(sent.rental_gpus(rental_id))

    def rental_gpu_history(self, rental_id: str, minutes: int = 60) -> list[RentalGpuHistoryResponse]:
        """The GPUs the rental held in the last `minutes` (running or ended), each with its readings by
        minute while it held them (kept a week)."""
        return self._ask(sent.rental_gpu_history(rental_id, minutes))
