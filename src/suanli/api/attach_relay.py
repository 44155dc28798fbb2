"""The relay between the two ends of attached commands (`exec_attach`): in memory when the server is one
process (SQLite), through PostgreSQL's NOTIFY (`AttachBus`) otherwise, so the tenant's client and the
node's agent may reach different server processes.

Each end held here has an inbox (what its WebSocket is to send) and an outbox (what it received). In memory
an end's outbox is the other end's inbox: a bounded queue that holds a fast sender back. Through the bus a
forwarder publishes the outbox, once the other end is known to be there, and the listener puts what comes
for an end held here in its inbox; an end says `hello` when it attaches, the other end answers `here`, and
`bye` when it goes. An inbox fed by the bus cannot hold its sender back: past `BUS_QUEUE_FRAMES` (a reader
far slower than the command prints) the end is closed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import anyio
from starlette.concurrency import run_in_threadpool

from suanli.store.attach_bus import AttachBus, Message

End = Literal["client", "agent"]
Frame = bytes | str | None  # None: the other end went
QUEUE_FRAMES = (
    32  # in memory: frames one end may send before the other reads them (a flood's ^C waits on them)
)
BUS_QUEUE_FRAMES = 4096  # through the bus: frames waiting for a slow reader before its end is closed
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

    def queue(self, end: End) -> asyncio.Queue[Frame]:
        if end not in self.inbox:
            self.inbox[end] = asyncio.Queue(QUEUE_FRAMES if self.bounded else 0)
        return self.inbox[end]


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
            pipe.outbox[end] = asyncio.Queue()
            pipe.forwarders[end] = asyncio.ensure_future(self._forward(exec_id, pipe, end))
        return pipe

    async def leave(self, exec_id: str, end: End) -> None:
        """`end` went: the other end is told (through the bus, after what it sent before)."""
        pipe = self.pipes.get(exec_id)
        if pipe is None or end not in pipe.ends:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT_S):
            await pipe.outbox[end].put(None)
            forwarder = pipe.forwarders.get(end)
            if forwarder is not None and pipe.came[other(end)].is_set():
                await asyncio.shield(forwarder)  # it flushes what the end sent, then says bye
            elif forwarder is not None:  # nobody to flush to
                forwarder.cancel()
                await self._publish({"exec": exec_id, "to": other(end), "kind": "bye"})
        pipe.ends.discard(end)
        if not pipe.ends:
            del self.pipes[exec_id]

    # --- through the bus ---------------------------------------------------------------------------------

    async def _publish(self, message: Message) -> None:
        assert self.bus is not None
        await run_in_threadpool(self.bus.publish, message)

    async def _forward(self, exec_id: str, pipe: Pipe, end: End) -> None:
        """Say `end` came, then publish what it sends once the other end is there; `bye` when it goes."""
        await self._publish({"exec": exec_id, "to": other(end), "kind": "hello"})
        outbox = pipe.outbox[end]
        item = await outbox.get()
        if item is not None:
            await pipe.came[other(end)].wait()
        while item is not None:
            await self._publish({"exec": exec_id, "to": other(end), "kind": "frame", "data": item})
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
            here = {"exec": message["exec"], "to": sender, "kind": "here"}
            answer = asyncio.ensure_future(self._publish(here))
            self.answers.add(answer)
            answer.add_done_callback(self.answers.discard)
        elif kind == "here":
            pipe.came[sender].set()
        elif kind == "bye":
            pipe.queue(to).put_nowait(None)
        elif kind == "frame":
            inbox = pipe.queue(to)
            inbox.put_nowait(message.get("data") or b"")
            if inbox.qsize() > BUS_QUEUE_FRAMES:
                inbox.put_nowait(None)  # its reader is far behind: its end is closed
