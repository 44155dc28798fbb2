"""The frames on an attached command's or a port forward's WebSocket (`/v1/.../execs/{id}/attach`), for
both ends that speak them: the client (SDK and CLI) and the node's agent.

* A text frame is a JSON control message: `{"rows", "cols"}`, `{"eof": true}` to an attached command;
  `{"open": N}`, `{"close": N}` (with `error`) for a port forward's connection N, and `{"close": N,
  "half": true}`: the sending side's end of connection N has sent all it will (a TCP half-close, passed on
  as a shutdown of the other side's writes; the connection closes once both directions have ended, as
  ssh -L does). An end that predates half-closes reads it as the close it used to send and get then.
* A port forward's binary frame is N in 4 bytes (big-endian), then that connection's bytes.
* An attached command's output frame, with `separate_stderr`, is `STDOUT` or `STDERR` (one byte), then the
  bytes of that stream, as Kubernetes' channel protocol marks them.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from typing import Any

FORWARD_HEADER = struct.Struct(">I")
END_OF_INPUT = json.dumps({"eof": True})  # to an attached command: no more input
READ_BYTES = 64 * 1024  # read from a pseudo-terminal or a connection at a time
STDOUT, STDERR = 1, 2  # an output frame's first byte with `separate_stderr`


def output_stream(frame: bytes) -> tuple[int, bytes] | None:
    """An output frame with `separate_stderr` as its stream (`STDOUT` or `STDERR`) and bytes; None when it
    is marked as neither."""
    if not frame or frame[0] not in (STDOUT, STDERR):
        return None
    return frame[0], frame[1:]


def control_message(text: str) -> dict[str, Any] | None:
    """A text frame's control message; None when it is not a JSON object."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def connection_number(value: object) -> int | None:
    """A port forward's connection number from a control message; None when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32:
        return value
    return None


def forward_frame(number: int, data: bytes) -> bytes:
    return FORWARD_HEADER.pack(number) + data


def forward_parts(frame: bytes) -> tuple[int, bytes] | None:
    """A port forward's binary frame as its connection number and bytes; None when it is too short."""
    if len(frame) < FORWARD_HEADER.size:
        return None
    (number,) = FORWARD_HEADER.unpack_from(frame)
    return number, frame[FORWARD_HEADER.size :]


def half_close_message(number: int) -> dict[str, object]:
    """Connection `number` has sent all it will this way (see the module's docstring)."""
    return {"close": number, "half": True}


class HalfCloses:
    """Half-closes of one end's forwarded `connections` (guarded by `lock`, both its owner's): which
    connections one direction of which has ended (`SENT`: ours reached its end and the other side is told;
    `RECEIVED`: the other side's did and ours was shut for writing); one closes once both have."""

    SENT, RECEIVED = "sent", "received"

    def __init__(self, connections: dict[int, socket.socket], lock: threading.Lock) -> None:
        self.connections, self.lock = connections, lock
        self.ended: dict[int, str] = {}

    def received(self, number: int) -> None:
        """The other side sent all it will on connection `number`: ours reads its end, and may answer."""
        with self.lock:
            connection = self.connections.get(number)
            done = connection is not None and self._both_ended(number, self.RECEIVED)
            if done:
                del self.connections[number]
        if connection is not None:
            (close_connection if done else shut_writes)(connection)

    def sent(self, number: int, connection: socket.socket) -> bool:
        """`connection` (number `number`) reached its end here: whether it is still this end's (the other
        side is to be told); closed once the other direction had ended too."""
        with self.lock:
            ours = self.connections.get(number) is connection
            done = ours and self._both_ended(number, self.SENT)
            if done:
                del self.connections[number]
        if done:
            close_connection(connection)
        return ours

    def forget(self, number: int) -> None:
        """Connection `number` closed outright (the caller holds the lock)."""
        self.ended.pop(number, None)

    def _both_ended(self, number: int, direction: str) -> bool:
        first = self.ended.setdefault(number, direction)
        if first == direction:
            return False
        del self.ended[number]
        return True


def shut_writes(connection: socket.socket) -> None:
    """Pass a half-close on: the other end of `connection` reads its end, and can still answer."""
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_WR)


def close_connection(connection: socket.socket) -> None:
    """End a forwarded connection both ways (the other side reads its end), whatever state it is in."""
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
    connection.close()
