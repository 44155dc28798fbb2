"""WebSockets for attached commands (`suanli exec -it RENTAL -- bash`): the tenant's client attaches at
`/v1/rentals/{id}/execs/{exec_id}/attach`, the node's agent at `/v1/agents/execs/{exec_id}/attach`, and the
server relays the frames between them. The server never connects to a node; both ends connect to it.

* Frames: binary both ways is the command's input (client to agent) and output (agent to client); a text
  frame from the client is a control message for the agent: `{"rows": R, "cols": C}` (the terminal's size)
  or `{"eof": true}` (no more input).
* Either end may come first, and each may reach another server process: the frames go through
  `attach_relay` (in memory on one process, through PostgreSQL's NOTIFY between several). An agent whose
  client has not come within `ATTACH_WAIT_S` is sent away (close code 4408), so the command does not wait
  for ever on input; a client whose command ends before its agent came (it failed to start) is told so
  (4410 with the reason). A command may also end before its client came (quicker than the client's
  connection): its agent's end then waits for the client (`LATE_CLIENT_S`) with the output.
* The client's key is checked again every `KEY_RECHECK_S` while it is attached: once it no longer
  authenticates (revoked, its tenant gone), the socket is closed with 4401 and the reason, so revoking a
  leaked key ends the shells and port forwards it opened within seconds, not at their timeout (up to 8 h).
* When either end goes, the other is closed: the agent then ends the command (its terminal hangs up), and
  the client reads its exit code from `GET .../execs/{id}`.
* Refusals close the socket at once with 4000 + the HTTP status the same request would get (4401, 4404,
  4409) and the message as the reason.
* A browser cannot set a WebSocket's headers, so its key may come as the subprotocol `bearer.KEY`, offered
  beside `suanli.v1`, which the server answers with (as Kubernetes takes a bearer token from a browser):
  the web console's terminal (`/ui/terminal.html`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from fastapi import APIRouter, WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from suanli.api.attach_relay import End, Pipe, Relay
from suanli.api.errors import STATUS
from suanli.app.errors import AppError, Conflict, Unauthorized
from suanli.app.execs import FINAL_STATES
from suanli.app.records import Caller

Asker = TypeVar("Asker")  # who attaches, as `check` found them: a tenant's caller, an agent's node

ATTACH_WAIT_S = 60.0  # how long an agent's end waits for its client
STATE_POLL_S = 1.0  # while a client waits for its agent, how often the command's state is read
LATE_AGENT_S = 2.0  # once the command has ended, how long a client still waits for its agent's output
KEY_RECHECK_S = 2.0  # how often an attached client's key is checked again (a revoked one is closed)
REASON_CHARS = 120  # a close reason fits in a control frame (123 bytes)
SUBPROTOCOL = "suanli.v1"  # what a browser offers with its key, and is answered with
KEY_SUBPROTOCOL = "bearer."  # a browser's key, as the subprotocol `bearer.KEY`

router = APIRouter()


def relay_of(websocket: WebSocket) -> Relay:
    return websocket.app.state.exec_relay


def _bearer(websocket: WebSocket) -> str | None:
    """The key in the Authorization header, else in a `bearer.KEY` subprotocol (a browser's)."""
    scheme, _, secret = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    offered = [p for p in _offered(websocket) if p.startswith(KEY_SUBPROTOCOL)]
    return offered[0].removeprefix(KEY_SUBPROTOCOL) or None if offered else None


def _offered(websocket: WebSocket) -> list[str]:
    return list(websocket.scope.get("subprotocols") or [])


async def _accept(websocket: WebSocket) -> None:
    """Accept, answering `suanli.v1` when it was offered (a browser drops a socket whose offer is not)."""
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in _offered(websocket) else None)


async def _admit(
    websocket: WebSocket, exec_id: str, end: End, check: Callable[[], Asker]
) -> tuple[Pipe, Asker] | None:
    """The command's pipe with this `end` attached and the socket accepted, with who asks, once `check`
    (who asks, and whether they may) passes; None when the socket was refused and closed."""
    try:
        asker = await run_in_threadpool(check)
    except AppError as error:
        await _refuse(websocket, error)
        return None
    pipe = relay_of(websocket).join(exec_id, end)
    if pipe is None:
        await _refuse(websocket, Conflict(f"command {exec_id} has its {end} attached already"))
        return None
    await _accept(websocket)
    return pipe, asker


async def _refuse(websocket: WebSocket, error: AppError) -> None:
    status = next((s for kind, s in STATUS.items() if isinstance(error, kind)), 400)
    await _accept(websocket)
    await websocket.close(code=4000 + status, reason=error.message[:REASON_CHARS])


@router.websocket("/v1/rentals/{rental_id}/execs/{exec_id}/attach")
async def attach_client(websocket: WebSocket, rental_id: str, exec_id: str) -> None:
    """The tenant's end of an attached command (created with `stdin`)."""
    services = websocket.app.state.services
    secret = _bearer(websocket)

    def check() -> Caller:
        caller = services.tenants.authenticate(secret)
        services.execs.attachable(caller, rental_id, exec_id)
        return caller

    if (admitted := await _admit(websocket, exec_id, "client", check)) is None:
        return
    pipe, caller = admitted
    relay = relay_of(websocket)

    async def ended_before_its_agent_came() -> None:
        while not pipe.came["agent"].is_set():
            found = await run_in_threadpool(services.execs.get, caller, rental_id, exec_id)
            if found.state in FINAL_STATES:
                with anyio.move_on_after(LATE_AGENT_S):  # through the bus, its `here` may be on its way
                    await pipe.came["agent"].wait()
                if pipe.came["agent"].is_set():
                    break
                reason = f"{found.state}: {found.message or 'it ended'}"
                await websocket.close(code=4410, reason=reason[:REASON_CHARS])
                return
            with anyio.move_on_after(STATE_POLL_S):
                await pipe.came["agent"].wait()
        await anyio.sleep_forever()  # the agent came: nothing more to watch

    async def key_revoked() -> None:
        """Return, closing with 4401, once the key it attached with no longer authenticates."""
        while True:
            await anyio.sleep(KEY_RECHECK_S)
            try:
                await run_in_threadpool(services.tenants.authenticate, secret)
            except Unauthorized as error:
                reason = f"{error.message}: the session it opened is closed"
                await websocket.close(code=4401, reason=reason[:REASON_CHARS])
                return

    try:
        await _pump(websocket, relay, exec_id, "client", ended_before_its_agent_came, key_revoked)
    finally:
        await relay.leave(exec_id, "client")


@router.websocket("/v1/agents/execs/{exec_id}/attach")
async def attach_agent(websocket: WebSocket, exec_id: str) -> None:
    """The node agent's end of an attached command on its node."""
    services = websocket.app.state.services

    def check() -> str:
        node = services.agents.authenticate(_bearer(websocket)).node
        services.execs.agent_attachable(node, exec_id)
        return node

    if (admitted := await _admit(websocket, exec_id, "agent", check)) is None:
        return
    pipe, _ = admitted
    relay = relay_of(websocket)
    sent_away = False

    async def no_client() -> None:
        nonlocal sent_away
        with anyio.move_on_after(ATTACH_WAIT_S):
            await pipe.came["client"].wait()
        if not pipe.came["client"].is_set():
            sent_away = True
            reason = f"no client attached within {ATTACH_WAIT_S:.0f} s"
            await websocket.close(code=4408, reason=reason)
            return
        await anyio.sleep_forever()

    try:
        await _pump(websocket, relay, exec_id, "agent", no_client)
    finally:  # a command quicker than its client's connection: its output waits for the client
        await relay.leave(exec_id, "agent", hold=not sent_away)


async def _pump(
    websocket: WebSocket, relay: Relay, exec_id: str, end: End, *watches: Callable[[], Awaitable[None]]
) -> None:
    """Send what comes to `end`'s inbox on `websocket`, put what it receives in its outbox, until either end
    goes (None in the inbox: the other end went) or one of `watches` returns (it closed the socket); the
    relay's `leave` then tells the other end."""
    pipe = relay.pipes[exec_id]
    inbox, outbox = pipe.queue(end), pipe.outbox[end]

    async def receive() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes")
                await outbox.put(data if data is not None else message.get("text") or "")

    async def send() -> None:
        while (item := await inbox.get()) is not None:
            if isinstance(item, bytes):
                await websocket.send_bytes(item)
            else:
                await websocket.send_text(item)
            relay.sent(exec_id, end, item)

    try:
        async with anyio.create_task_group() as group:
            for part in (receive, send, *watches):
                group.start_soon(_then_cancel, part, group.cancel_scope)
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(code=1000)


async def _then_cancel(part: Callable[[], Awaitable[None]], scope: anyio.CancelScope) -> None:
    await part()
    scope.cancel()
