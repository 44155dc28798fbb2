"""Commands run inside a rental, for asyncio code: queue one, look at it, list them, and wait for one to end
(printing its output as it comes, riding out a restarting server). The same calls as `ExecCalls`, sending what
`exec_requests` says and deciding by the same rules (`rental_rules`, `retries`); attaching (a WebSocket) and
port forwards are the sync client's only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from suanli.client import exec_requests as sent
from suanli.client.async_transport import AsyncTransport
from suanli.client.errors import ServerUnreachable
from suanli.client.rental_rules import exec_output_since, exec_wait_pause_s
from suanli.client.retries import RECONNECT_S, ride_out_restarts
from suanli.wire.schemas import ExecResponse


class AsyncExecCalls(AsyncTransport):
    """The calls on a rental's commands, awaited (see `ExecCalls` for each one's meaning)."""

    async def exec(
        self,
        rental_id: str,
        command: Sequence[str],
        *,
        node_rank: int = 0,
        timeout_s: int = 60,
        separate_stderr: bool = False,
    ) -> ExecResponse:
        """Queue `command` to run inside the running rental (on its node of `node_rank`); see `wait_exec`."""
        call = sent.exec_command(rental_id, command, node_rank, timeout_s, False, False, separate_stderr)
        return await self._ask(call)

    async def exec_status(self, rental_id: str, exec_id: str) -> ExecResponse:
        return await self._ask(sent.exec_status(rental_id, exec_id))

    async def _exec_status(self, rental_id: str, exec_id: str, deadline: float | None = None) -> ExecResponse:
        """The command, its request and retries bounded by `deadline` (`time.monotonic()`) when given."""
        return await self._ask(sent.exec_status(rental_id, exec_id), deadline)

    async def execs(self, rental_id: str) -> list[ExecResponse]:
        """The rental's commands, newest first."""
        return await self._ask(sent.execs(rental_id))

    async def wait_exec(
        self,
        rental_id: str,
        exec_id: str,
        *,
        poll_s: float = 0.5,
        on_output: Callable[[str, int], None] | None = None,
        within_s: float | None = None,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> ExecResponse:
        """The command once it has ended (exited, failed or lost), as `Client.wait_exec`: `ExecWaitTimeout`
        past `within_s`; `on_output(text, skipped)` as it prints; a server that does not answer (or a
        gateway's 502/503/504 for it) waited for up to `reconnect_s`, never past `within_s`."""
        deadline = None if within_s is None else time.monotonic() + within_s
        shown = 0
        while True:
            left_s = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ride_out = ride_out_restarts(reconnect_s, poll_s, left_s, on_unreachable)
            found = await ride_out(self._exec_status)(rental_id, exec_id, deadline)
            printed = exec_output_since(found, shown)
            if on_output is not None and printed is not None:
                on_output(*printed)
                shown = found.output_chars
            left_s = None if deadline is None else deadline - time.monotonic()
            pause_s = exec_wait_pause_s(found, poll_s, left_s, within_s)
            if pause_s is None:
                return found
            await asyncio.sleep(pause_s)
