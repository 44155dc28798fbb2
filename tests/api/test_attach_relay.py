"""The relay of attached commands between two server processes on PostgreSQL: two relays, each with its
own engine and listener, stand for two worker processes; the client's end is held by one, the agent's by
the other. Frames go both ways in order, a frame too large for one notification arrives whole (sent in
pieces), each end learns the other came, and one end going closes the other after what it sent; an agent
that went before its client came leaves its output for it; a reader that does not keep up holds its sender
back (no frame dropped, no end closed)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from suanli.api.attach_relay import BUS_QUEUE_FRAMES, WINDOW_PIECES, Relay
from suanli.store.attach_bus import PIECE_BYTES, AttachBus, Joiner, decode, encode
from suanli.store.db import make_engine


async def _read(queue: asyncio.Queue, count_bytes: int) -> bytes:
    """Binary frames from `queue` until `count_bytes` have come."""
    got = b""
    while len(got) < count_bytes:
        frame = await asyncio.wait_for(queue.get(), 10)
        assert isinstance(frame, bytes), frame
        got += frame
    return got


def _between_two_processes(database_url: str, scenario: Callable[[Relay, Relay], Awaitable[None]]) -> None:
    """Run `scenario(client_side, agent_side)`: two relays, each with an engine and a listener of its own."""
    engines = [make_engine(database_url) for _ in range(2)]

    async def run() -> None:
        client_side, agent_side = Relay(AttachBus(engines[0])), Relay(AttachBus(engines[1]))
        client_side.start()
        agent_side.start()
        try:
            await scenario(client_side, agent_side)
        finally:
            client_side.stop()
            agent_side.stop()

    try:
        asyncio.run(run())
    finally:
        for engine in engines:
            engine.dispose()


def test_a_frame_sent_in_pieces_is_joined_again_with_its_boundaries() -> None:
    """A port forward's frame starts with its connection number, an output frame with its stream: pieces
    handed on as frames of their own would lose them."""
    joiner = Joiner()
    for size in (0, 1, PIECE_BYTES, PIECE_BYTES + 1, 3 * PIECE_BYTES + 7):
        frame = bytes([2]) + bytes(range(256)) * (size // 256) + bytes(size % 256)
        message = {"exec": "exe_1", "to": "client", "kind": "frame", "data": frame}
        pieces = [decode(payload) for payload in encode(message)]
        joined = [whole for piece in pieces if piece is not None and (whole := joiner.add(piece)) is not None]
        assert joined == [message]
    text = {"exec": "exe_1", "to": "agent", "kind": "frame", "data": '{"eof": true}'}
    assert joiner.add(decode(next(encode(text)))) == text


def test_frames_cross_between_two_processes_through_postgresql(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        engine = make_engine(database_url)
        assert not Relay(AttachBus(engine)).bus  # one process: frames stay in memory
        engine.dispose()
        return

    async def scenario(client_side: Relay, agent_side: Relay) -> None:
        client = client_side.join("exe_1", "client")
        assert client is not None
        typed = b"typed before the agent came\r"
        client.outbox["client"].put_nowait(typed)
        agent = agent_side.join("exe_1", "agent")
        assert agent is not None
        await asyncio.wait_for(agent.came["client"].wait(), 10)
        await asyncio.wait_for(client.came["agent"].wait(), 10)
        assert await _read(agent.queue("agent"), len(typed)) == typed
        client.outbox["client"].put_nowait('{"rows": 40, "cols": 120}')
        assert await asyncio.wait_for(agent.queue("agent").get(), 10) == '{"rows": 40, "cols": 120}'
        big = bytes(range(256)) * (PIECE_BYTES // 100)  # several notifications' worth
        agent.outbox["agent"].put_nowait(big)
        agent.outbox["agent"].put_nowait(b"$ ")
        assert await asyncio.wait_for(client.queue("client").get(), 10) == big  # whole: one frame
        assert await asyncio.wait_for(client.queue("client").get(), 10) == b"$ "
        await agent_side.leave("exe_1", "agent")  # the command ended
        assert await asyncio.wait_for(client.queue("client").get(), 10) is None
        await client_side.leave("exe_1", "client")
        assert client_side.pipes == {} and agent_side.pipes == {}

    _between_two_processes(database_url, scenario)


def test_a_slow_reader_holds_its_sender_back_through_postgresql(database_url: str) -> None:
    """More frames than an inbox may hold, written while the client reads none, all arrive in order once it
    reads: the agent's forwarder stops a window ahead, and its outbox, full, holds the writer back (as the
    agent's WebSocket would be)."""
    if database_url.startswith("sqlite"):
        return  # one process: the in-memory queues are bounded (`test_exec_attach`)

    async def scenario(client_side: Relay, agent_side: Relay) -> None:
        client, agent = client_side.join("exe_2", "client"), agent_side.join("exe_2", "agent")
        assert client is not None and agent is not None
        await asyncio.wait_for(client.came["agent"].wait(), 10)
        frames = [f"line {n:05d}\n".encode() for n in range(BUS_QUEUE_FRAMES + 200)]

        async def write() -> None:
            for frame in frames:
                await agent.outbox["agent"].put(frame)

        writer = asyncio.ensure_future(write())
        for _ in range(200):  # until the window is spent
            if agent.ahead("agent") >= WINDOW_PIECES:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        assert agent.ahead("agent") == WINDOW_PIECES
        assert not writer.done()
        assert client.queue("client").qsize() <= WINDOW_PIECES
        got = []
        while len(got) < len(frames):
            frame = await asyncio.wait_for(client.queue("client").get(), 10)
            assert frame is not None, f"the client's end was closed after {len(got)} frames"
            got.append(frame)
            client_side.sent("exe_2", "client", frame)  # as its WebSocket would, having sent it on
        assert got == frames
        await asyncio.wait_for(writer, 10)
        await agent_side.leave("exe_2", "agent")
        assert await asyncio.wait_for(client.queue("client").get(), 10) is None
        await client_side.leave("exe_2", "client")

    _between_two_processes(database_url, scenario)


def test_an_agent_that_went_before_its_client_came_leaves_its_output_for_it(database_url: str) -> None:
    """A command quicker than its client's connection: the agent's end, held by one process, went with the
    whole archive sent; the client's end, attached later to the other process, still gets all of it."""
    if database_url.startswith("sqlite"):
        return  # one process: `test_exec_attach_api`

    async def scenario(client_side: Relay, agent_side: Relay) -> None:
        agent = agent_side.join("exe_3", "agent")
        assert agent is not None
        archive = [b"first block ", b"last block"]
        for block in archive:
            agent.outbox["agent"].put_nowait(block)
        leaving = asyncio.ensure_future(agent_side.leave("exe_3", "agent", hold=True))
        await asyncio.sleep(0.5)
        assert not leaving.done()  # it waits for the client
        client = client_side.join("exe_3", "client")
        assert client is not None
        assert [await asyncio.wait_for(client.queue("client").get(), 10) for _ in archive] == archive
        assert await asyncio.wait_for(client.queue("client").get(), 10) is None
        await asyncio.wait_for(leaving, 10)
        await client_side.leave("exe_3", "client")
        assert client_side.pipes == {} and agent_side.pipes == {}

    _between_two_processes(database_url, scenario)
