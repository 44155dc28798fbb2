"""WebSockets for attached commands (`suanli exec -it RENTAL -- bash`): the tenant's client attaches at
`/v1/rentals/{id}/execs/{exec_id}/attach`, the node's agent at `/v1/agents/execs/{exec_id}/attach`, and the
server relays the frames between them. The server never connects to a node; both ends connect to it.

* Frames: binary both ways is the command's input (client to agent) and output (agent to client); a text
  frame from the client is a control message for the agent: `{"rows": R, "cols": C}` (the terminal's size)
  or `{"eof": true}` (no more input).
* Either end may come first; what it sends meanwhile waits in a bounded queue (`QUEUE_FRAMES`), which then
  holds the sender back. An agent whose client has not come within `ATTACH_WAIT_S` is sent away (close code
  4408), so the command does not wait for ever on input; a client whose command ends before its agent came
  (it failed to start) is told so (4410 with the reason).
* When either end goes, the other is closed: the agent then ends the command (its terminal hangs up), and
  the client reads its exit code from `GET .../execs/{id}`.
* Refusals close the socket at once with 4000 + the HTTP status the same request would get (4401, 4404,
  4409) and the message as the reason.

The relay lives in the server process, so both ends must reach the same one: the embedded server and a
single-process server do; `suanli server --workers N` (N > 1) refuses attached commands at creation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from fastapi import APIRouter, WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from suanli.api.errors import STATUS
from suanli.app.errors import AppError, Conflict
from suanli.app.execs import FINAL_STATES

ATTACH_WAIT_S = 60.0  # how long an agent's end waits for its client
STATE_POLL_S = 1.0  # while a client waits for its agent, how often the command's state is read
QUEUE_FRAMES = 256  # frames one end may send before the other reads them
CLOSE_WAIT_S = 30.0  # how long a leaving end waits for room to tell the other
REASON_CHARS = 120  # a close reason fits in a control frame (123 bytes)

router = APIRouter()


@dataclass
class Pipe:
    """The two queues of one attached command, and which ends are attached."""

    to_agent: asyncio.Queue[bytes | str | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_FRAMES))
    to_client: asyncio.Queue[bytes | str | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_FRAMES))
    client_came: asyncio.Event = field(default_factory=asyncio.Event)
    agent_came: asyncio.Event = field(default_factory=asyncio.Event)
    ends: set[str] = field(default_factory=set)


class Relay:
    """The pipes of this process's attached commands, by exec id."""

    def __init__(self) -> None:
        self.pipes: dict[str, Pipe] = {}

    def join(self, exec_id: str, end: str) -> Pipe | None:
        """The command's pipe with `end` (client or agent) attached; None when that end already is."""
        pipe = self.pipes.setdefault(exec_id, Pipe())
        if end in pipe.ends:
            return None
        pipe.ends.add(end)
        (pipe.client_came if end == "client" else pipe.agent_came).set()
        return pipe

    def leave(self, exec_id: str, end: str) -> None:
        pipe = self.pipes.get(exec_id)
        if pipe is None:
            return
        pipe.ends.discard(end)
        if not pipe.ends:
            del self.pipes[exec_id]


def relay_of(websocket: WebSocket) -> Relay:
    state = websocket.app.state
    if not hasattr(state, "exec_relay"):
        state.exec_relay = Relay()
    return state.exec_relay


def _bearer(websocket: WebSocket) -> str | None:
    scheme, _, secret = websocket.headers.get("authorization", "").partition(" ")
    return secret.strip() or None if scheme.lower() == "bearer" else None


async def _refuse(websocket: WebSocket, error: AppError) -> None:
    status = next((s for kind, s in STATUS.items() if isinstance(error, kind)), 400)
    await websocket.accept()
    await websocket.close(code=4000 + status, reason=error.message[:REASON_CHARS])


@router.websocket("/v1/rentals/{rental_id}/execs/{exec_id}/attach")
async def attach_client(websocket: WebSocket, rental_id: str, exec_id: str) -> None:
    """The tenant's end of an attached command (created with `stdin`)."""
    services = websocket.app.state.services
    try:
        caller = await run_in_threadpool(services.tenants.authenticate, _bearer(websocket))
        await run_in_threadpool(services.execs.attachable, caller, rental_id, exec_id)
    except AppError as error:
        await _refuse(websocket, error)
        return
    relay = relay_of(websocket)
    pipe = relay.join(exec_id, "client")
    if pipe is None:
        await _refuse(websocket, Conflict(f"a client is attached to command {exec_id} already"))
        return
    await websocket.accept()

    async def ended_before_its_agent_came() -> None:
        while not pipe.agent_came.is_set():
            found = await run_in_threadpool(services.execs.get, caller, rental_id, exec_id)
            if found.state in FINAL_STATES:
                reason = f"{found.state}: {found.message or 'it ended'}"
                await websocket.close(code=4410, reason=reason[:REASON_CHARS])
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pipe.agent_came.wait(), STATE_POLL_S)
        await asyncio.Event().wait()  # the agent came: nothing more to watch

    try:
        await _pump(websocket, inbox=pipe.to_client, outbox=pipe.to_agent, watch=ended_before_its_agent_came)
    finally:
        relay.leave(exec_id, "client")


@router.websocket("/v1/agents/execs/{exec_id}/attach")
async def attach_agent(websocket: WebSocket, exec_id: str) -> None:
    """The node agent's end of an attached command on its node."""
    services = websocket.app.state.services
    try:
        node = await run_in_threadpool(services.agents.authenticate, _bearer(websocket))
        await run_in_threadpool(services.execs.agent_attachable, node.node, exec_id)
    except AppError as error:
        await _refuse(websocket, error)
        return
    relay = relay_of(websocket)
    pipe = relay.join(exec_id, "agent")
    if pipe is None:
        await _refuse(websocket, Conflict(f"an agent is attached to command {exec_id} already"))
        return
    await websocket.accept()

    async def no_client() -> None:
        with anyio.move_on_after(ATTACH_WAIT_S):
            await pipe.client_came.wait()
        if not pipe.client_came.is_set():
            reason = f"no client attached within {ATTACH_WAIT_S:.0f} s"
            await websocket.close(code=4408, reason=reason)
            return
        await anyio.sleep_forever()

    try:
        await _pump(websocket, inbox=pipe.to_agent, outbox=pipe.to_client, watch=no_client)
    finally:
        relay.leave(exec_id, "agent")


async def _pump(
    websocket: WebSocket,
    *,
    inbox: asyncio.Queue[bytes | str | None],
    outbox: asyncio.Queue[bytes | str | None],
    watch: Callable[[], Awaitable[None]],
) -> None:
    """Send what comes to `inbox` on `websocket`, put what it receives in `outbox`, until either end goes
    (None in a queue: its end went) or `watch` returns (it closed the socket)."""

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

    try:
        async with anyio.create_task_group() as group:
            for part in (receive, send, watch):
                group.start_soon(_then_cancel, part, group.cancel_scope)
    finally:
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_WAIT_S):  # the other end closes once it has read what came first
                await outbox.put(None)
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close(code=1000)


async def _then_cancel(part: Callable[[], Awaitable[None]], scope: anyio.CancelScope) -> None:
    await part()
    scope.cancel()
