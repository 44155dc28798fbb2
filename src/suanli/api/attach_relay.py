"""The relay between the two ends of attached commands (`exec_attach`): in memory when the server is one
process (SQLite), through PostgreSQL's NOTIFY (`AttachBus`) otherwise, so the tenant's client and the
node's agent may reach different server processes.

Each end held here has an inbox (what its WebSocket is to send) and an outbox (what it received), both
bounded, so a fast sender is held back by a slow reader (a `suanli cp` to a slow disk, a terminal scrolled
back) and nothing is dropped. In memory an end's outbox is the other end's inbox. Through the bus a
forwarder publishes the outbox, once the other end is known to be there, and the listener puts what comes
for an end held here in its inbox; an end says `hello` when it attaches, the other end answers `here`, and
`bye` when it goes. A notification cannot hold its sender back, so the bus has credit-based flow control
(as HTTP/2's windows): the forwarder publishes at most `WINDOW_PIECES` notifications ahead of those the
other end has sent on to its WebSocket, which it acknowledges (`ack`, a running count) every
`ACK_EVERY_PIECES`. An inbox past `BUS_QUEUE_FRAMES` (a sender that ignores the window) is closed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import anyio
from starlette.concurrency import run_in_threadpool

from suanli.app.execs import LATE_CLIENT_S
from suanli.store.attach_bus import AttachBus, Message, piece_count

End = Literal["client", "agent"]
Frame = bytes | str | None  # None: the other end went
QUEUE_FRAMES = (
    32  # in memory: frames one end may send before the other reads them (a flood's ^C waits on them)
)
BUS_QUEUE_FRAMES = 4096  # through the bus: frames waiting for a slow reader before its end is closed
WINDOW_PIECES = 256  # notifications a forwarder may publish ahead of the other end's acknowledgements
ACK_EVERY_PIECES = 64  # notifications an end sends on to its WebSocket between two acknowledgements
CLOSE_WAIT_S = 30.0  # how long a leaving end waits to tell the other (and, through the bus, to flush)


def other(end: End) -> End:
    return "agent" if end == "client" else "client"


@dataclass
class Pipe:
    """One attached command's ends held in this process, their queues, and which ends have come."""

    bounded: bool
    inbox: dict[End, asyncio.Queue[Frame]] = field(default_factory=dict)
    came: dict[End, asyncio.Event] = field(
        default_factory=lambda: {"client": asyncio.Event(), "agent": asyncio.Event()}
    )
    ends: set[End] = field(default_factory=set)
    outbox: dict[End, asyncio.Queue[Frame]] = field(default_factory=dict)
    forwarders: dict[End, asyncio.Task[None]] = field(default_factory=dict)
    # through the bus: an end's notifications published and acknowledged by the other end, which woke its
    # forwarder; notifications it has sent on to its WebSocket, and the count it last acknowledged
    published: dict[End, int] = field(default_factory=lambda: {"client": 0, "agent": 0})
    acknowledged: dict[End, int] = field(default_factory=lambda: {"client": 0, "agent": 0})
    credit: dict[End, asyncio.Event] = field(
        default_factory=lambda: {"client": asyncio.Event(), "agent": asyncio.Event()}
    )
    delivered: dict[End, int] = field(default_factory=lambda: {"client": 0, "agent": 0})
    delivered_acknowledged: dict[End, int] = field(default_factory=lambda: {"client": 0, "agent": 0})
    went: set[End] = field(default_factory=set)  # ends that said `bye`: nobody to wait for credit from

    def queue(self, end: End) -> asyncio.Queue[Frame]:
        if end not in self.inbox:
            self.inbox[end] = asyncio.Queue(QUEUE_FRAMES if self.bounded else 0)
        return self.inbox[end]

    def ahead(self, end: End) -> int:
        """Notifications `end` published that the other end has not yet acknowledged."""
        return self.published[end] - self.acknowledged[end]


class Relay:
    """The pipes of the attached commands whose ends this process holds, by exec id."""

    def __init__(self, bus: AttachBus | None = None) -> None:
        self.pipes: dict[str, Pipe] = {}
        self.bus = bus if bus is not None and bus.enabled else None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.answers: set[asyncio.Task[None]] = set()  # `here`s being sent (a task needs a reference)

    def start(self) -> None:
        """Listen to the bus (in the running event loop's process)."""
        if self.bus is not None:
            self.loop = asyncio.get_running_loop()
            self.bus.listen(self._from_bus)

    def stop(self) -> None:
        if self.bus is not None:
            self.bus.stop()

    def join(self, exec_id: str, end: End) -> Pipe | None:
        """The command's pipe with `end` attached here; None when this process holds that end already."""
        pipe = self.pipes.setdefault(exec_id, Pipe(bounded=self.bus is None))
        if end in pipe.ends:
            return None
        pipe.ends.add(end)
        if self.bus is None:
            pipe.came[end].set()
            pipe.outbox[end] = pipe.queue(other(end))
        else:
            pipe.outbox[end] = asyncio.Queue(QUEUE_FRAMES)
            pipe.forwarders[end] = asyncio.ensure_future(self._forward(exec_id, pipe, end))
        return pipe

    def sent(self, exec_id: str, end: End, frame: bytes | str) -> None:
        """`end`'s WebSocket took `frame` from its inbox; through the bus, acknowledged (in notifications, as
        its sender counts them) every so often."""
        pipe = self.pipes.get(exec_id)
        if pipe is None or self.bus is None:
            return
        pipe.delivered[end] += piece_count(frame)
        if pipe.delivered[end] - pipe.delivered_acknowledged[end] >= ACK_EVERY_PIECES:
            pipe.delivered_acknowledged[end] = pipe.delivered[end]
            ack = {"exec": exec_id, "to": other(end), "kind": "ack", "count": pipe.delivered[end]}
            self._publish_soon(ack)

    async def leave(self, exec_id: str, end: End, *, hold: bool = False) -> None:
        """`end` went: the other end is told (through the bus, after what it sent before). With `hold`, an
        end that goes before the other came (an agent whose command ended before its client connected)
        first waits up to `LATE_CLIENT_S` for it, so what it sent is not lost."""
        pipe = self.pipes.get(exec_id)
        if pipe is None or end not in pipe.ends:
            return
        if hold:
            with anyio.CancelScope(shield=True), anyio.move_on_after(LATE_CLIENT_S):
                await pipe.came[other(end)].wait()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT_S):
            forwarder = pipe.forwarders.get(end)
            if forwarder is not None and not pipe.came[other(end)].is_set():  # nobody to flush to
                forwarder.cancel()
                await self._publish({"exec": exec_id, "to": other(end), "kind": "bye"})
            else:
                await pipe.outbox[end].put(None)
                if forwarder is not None:
                    await asyncio.shield(forwarder)  # it flushes what the end sent, then says bye
        pipe.ends.discard(end)
        if not pipe.ends:
            del self.pipes[exec_id]

    # --- through the bus ---------------------------------------------------------------------------------

    async def _publish(self, message: Message) -> None:
        assert self.bus is not None
        await run_in_threadpool(self.bus.publish, message)

    def _publish_soon(self, message: Message) -> None:
        """Publish without waiting (a reply: `here`, `ack`); the task is kept until it is done."""
        task = asyncio.ensure_future(self._publish(message))
        self.answers.add(task)
        task.add_done_callback(self.answers.discard)

    async def _forward(self, exec_id: str, pipe: Pipe, end: End) -> None:
        """Say `end` came, then publish what it sends once the other end is there; `bye` when it goes."""
        await self._publish({"exec": exec_id, "to": other(end), "kind": "hello"})
        outbox = pipe.outbox[end]
        item = await outbox.get()
        if item is not None:
            await pipe.came[other(end)].wait()
        while item is not None:
            while pipe.ahead(end) >= WINDOW_PIECES and other(end) not in pipe.went:
                pipe.credit[end].clear()
                await pipe.credit[end].wait()
            await self._publish({"exec": exec_id, "to": other(end), "kind": "frame", "data": item})
            pipe.published[end] += piece_count(item)
            item = await outbox.get()
        await self._publish({"exec": exec_id, "to": other(end), "kind": "bye"})

    def _from_bus(self, message: Message) -> None:
        """The listener's thread: hand the message to the event loop."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._deliver, message)

    def _deliver(self, message: Message) -> None:
        pipe = self.pipes.get(str(message.get("exec")))
        to = message.get("to")
        if pipe is None or to not in pipe.ends:
            return
        sender = other(to)
        kind = message.get("kind")
        if kind == "hello":
            pipe.came[sender].set()
            self._publish_soon({"exec": message["exec"], "to": sender, "kind": "here"})
        elif kind == "here":
            pipe.came[sender].set()
        elif kind == "ack":
            count = message.get("count")
            if isinstance(count, int) and count > pipe.acknowledged[to]:
                pipe.acknowledged[to] = count
                pipe.credit[to].set()
        elif kind == "bye":
            pipe.went.add(sender)
            pipe.credit[to].set()
            pipe.queue(to).put_nowait(None)
        elif kind == "frame":
            inbox = pipe.queue(to)
            inbox.put_nowait(message.get("data") or b"")
            if inbox.qsize() > BUS_QUEUE_FRAMES:
                inbox.put_nowait(None)  # its reader is far behind: its end is closed
