"""Calls on commands and port forwards run inside a rental: queue, attach (a WebSocket), watch, wait."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from websockets.sync.client import ClientConnection

from suanli.client import exec_requests as sent
from suanli.client.errors import ServerUnreachable
from suanli.client.rental_rules import exec_output_since, exec_wait_pause_s
from suanli.client.retries import RECONNECT_S, ride_out_restarts
from suanli.client.transport import Transport, segment
from suanli.wire.schemas import ExecResponse


class ExecCalls(Transport):
    """The calls on a rental's commands and port forwards."""

    def exec(
        self,
        rental_id: str,
        command: Sequence[str],
        *,
        node_rank: int = 0,
        timeout_s: int = 60,
        stdin: bool = False,
        tty: bool = False,
        separate_stderr: bool = False,
    ) -> ExecResponse:
        """Queue `command` to run inside the running rental (on its node of `node_rank`); see `wait_exec`.
        With `stdin` (and `tty`: on a terminal), attach to it with `attach_exec` to stream its input and
        output; `separate_stderr` (without `tty`) marks each output frame with its stream
        (`suanli.client.streams.output_stream`)."""
        return self._ask(
            sent.exec_command(rental_id, command, node_rank, timeout_s, stdin, tty, separate_stderr)
        )

    def forward(
        self, rental_id: str, port: int, *, node_rank: int = 0, timeout_s: int = 8 * 3600
    ) -> ExecResponse:
        """Queue a port forward to `port` of the running rental (on its node of `node_rank`); attach to it
        with `attach_exec` to carry TCP connections (see `suanli.cli.forward`)."""
        return self._ask(sent.forward(rental_id, port, node_rank, timeout_s))

    def attach_exec(self, rental_id: str, exec_id: str) -> ClientConnection:
        """A WebSocket to an attached command: send its input as binary frames (a text frame
        `{"rows": R, "cols": C}` sets its terminal's size, `{"eof": true}` ends its input); its output
        comes as binary frames until it ends. Then `wait_exec` gives its exit code. Close code 4000 + an
        HTTP status refuses (the reason says why); 4410: it ended before its node's agent came."""
        return self._websocket(f"/v1/rentals/{segment(rental_id)}/execs/{segment(exec_id)}/attach")

    def attach_agent_exec(self, exec_id: str) -> ClientConnection:
        """The node agent's end of an attached command (with the node key)."""
        return self._websocket(f"/v1/agents/execs/{segment(exec_id)}/attach")

    def exec_status(self, rental_id: str, exec_id: str) -> ExecResponse:
        return self._ask(sent.exec_status(rental_id, exec_id))

    def _exec_status(self, rental_id: str, exec_id: str, deadline: float | None = None) -> ExecResponse:
        """The command, its request and retries bounded by `deadline` (`time.monotonic()`) when given."""
        return self._ask(sent.exec_status(rental_id, exec_id), deadline)

    def execs(self, rental_id: str) -> list[ExecResponse]:
        """The rental's commands, newest first."""
        return self._ask(sent.execs(rental_id))

    def wait_exec(
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
        """The command once it has ended (exited, failed or lost): the server decides `lost` by its timeout,
        so this needs no deadline of its own; `within_s` gives one (`ExecWaitTimeout` past it).
        `on_output(text, skipped)`: what it printed since the last call, as it runs, after `skipped`
        characters the server no longer kept (0: none). A server that does not answer, or a gateway's
        502/503/504 for it, is waited for as `wait` does (up to `reconnect_s`, never past `within_s`)."""
        deadline = None if within_s is None else time.monotonic() + within_s
        shown = 0
        while True:
            left_s = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ride_out = ride_out_restarts(reconnect_s, poll_s, left_s, on_unreachable)
            found = ride_out(self._exec_status)(rental_id, exec_id, deadline)
            printed = exec_output_since(found, shown)
            if on_output is not None and printed is not None:
                on_output(*printed)
                shown = found.output_chars
            pause_s = exec_wait_pause_s(
                found, poll_s, None if deadline is None else deadline - time.monotonic(), within_s
            )
            if pause_s is None:
                return found
            time.sleep(pause_s)
