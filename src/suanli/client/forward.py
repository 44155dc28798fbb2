"""The client's end of a port forward (`suanli port-forward RENTAL 8888`, or the SDK's `forward` and
`attach_exec`): a local listening socket whose every accepted connection is carried to the rental's port
over one WebSocket, as `kubectl port-forward` does: `{"open": N}` opens connection N at the node's agent,
binary frames of N and its bytes (`streams`) carry it both ways, `{"close": N, "half": true}` passes a
half-close on (a client that shuts its writes still reads the reply), and `{"close": N}` from either side
ends it (with `error` when the agent could not connect)."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
from collections.abc import Callable

from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.sync.client import ClientConnection

from suanli.client.streams import (
    READ_BYTES,
    HalfCloses,
    close_connection,
    connection_number,
    control_message,
    forward_frame,
    forward_parts,
    half_close_message,
)

REFUSED = 4000  # close codes from 4000: the server's refusal, 4000 + the HTTP status


class Refused(Exception):
    """The server closed the socket with a refusal (`code` 4000 + status, or 4410: it ended before its
    node's agent came); the message is its reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason or f"closed with code {code}")
        self.code = code


class Forwarder:
    """Accepts on `listener` and carries each connection over `ws` until the socket closes."""

    def __init__(
        self, ws: ClientConnection, listener: socket.socket, on_error: Callable[[str], None]
    ) -> None:
        self.ws, self.listener, self.on_error = ws, listener, on_error
        self.connections: dict[int, socket.socket] = {}
        self.lock = threading.Lock()
        self.numbers = itertools.count(1)
        self.half = HalfCloses(self.connections, self.lock)

    def run(self) -> None:
        """Forward until the server closes the socket (the forward's time ran out, or it was refused)."""
        threading.Thread(target=self._accept, daemon=True).start()
        try:
            for message in self.ws:
                if isinstance(message, bytes):
                    self._to_local(message)
                else:
                    self._control(message)
        except ConnectionClosedOK:
            pass
        except ConnectionClosed as closed:
            if closed.rcvd is not None and closed.rcvd.code >= REFUSED:
                raise Refused(closed.rcvd.code, closed.rcvd.reason) from None
            raise
        finally:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.lock:
            left = list(self.connections.values())
            self.connections.clear()
        for connection in left:
            close_connection(connection)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # the listener was closed
                return
            number = next(self.numbers)
            with self.lock:
                self.connections[number] = connection
            try:
                self.ws.send(json.dumps({"open": number}))
            except ConnectionClosed:
                close_connection(connection)
                return
            threading.Thread(target=self._from_local, args=(number, connection), daemon=True).start()

    def _from_local(self, number: int, connection: socket.socket) -> None:
        try:
            while data := connection.recv(READ_BYTES):
                self.ws.send(forward_frame(number, data))
        except (OSError, ConnectionClosed):
            self._end(number, connection)
            return
        if self.half.sent(number, connection):  # the port reads its end and may still answer
            with contextlib.suppress(ConnectionClosed):
                self.ws.send(json.dumps(half_close_message(number)))

    def _end(self, number: int, connection: socket.socket) -> None:
        """Connection `number` failed here: closed, and the agent told, unless it closed it first."""
        with self.lock:
            ours = self.connections.pop(number, None) is connection
            self.half.forget(number)
        close_connection(connection)
        if ours:
            with contextlib.suppress(ConnectionClosed):
                self.ws.send(json.dumps({"close": number}))

    def _to_local(self, frame: bytes) -> None:
        if (parts := forward_parts(frame)) is None:
            return
        number, data = parts
        with self.lock:
            connection = self.connections.get(number)
        if connection is not None:
            try:
                connection.sendall(data)
            except OSError:
                self._end(number, connection)

    def _control(self, text: str) -> None:
        control = control_message(text)
        if control is None:
            return
        if (number := connection_number(control.get("close"))) is None:
            return
        if control.get("half") is True:  # the rental's port sent all it will: the local end reads its end
            self.half.received(number)
            return
        if control.get("error"):  # told before the close, so whoever sees the close can read why
            self.on_error(str(control["error"]))
        with self.lock:
            connection = self.connections.pop(number, None)
            self.half.forget(number)
        if connection is not None:
            close_connection(connection)
