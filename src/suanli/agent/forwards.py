"""The agent's end of a port forward (`suanli port-forward RENTAL 8888`): for each connection the client
opens (`{"open": N}`), a TCP connection to the rental's port on this node, carried over the server's
WebSocket in binary frames that start with N (4 bytes, big-endian). `{"close": N, "half": true}` from
either side passes a half-close on (the other side's writes are shut, its reads go on); `{"close": N}`
from either side ends connection N; one the agent cannot open is closed with the reason (`error`). The
session ends when the socket does (the client stopped forwarding, or its time ran out), and every
connection with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from suanli.client import ApiError, Client, ServerUnreachable
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

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 256  # open at once in one forward


class ForwardSession:
    """One port forward's connections, relayed on threads of their own."""

    def __init__(
        self, client: Client, exec_id: str, rental_id: str, host: str, port: int, timeout_s: float
    ) -> None:
        self.client, self.exec_id, self.rental_id, self.host, self.port = (
            client,
            exec_id,
            rental_id,
            host,
            port,
        )
        self.timeout_at = time.monotonic() + timeout_s  # monotonic: the forward is stopped then
        self.ws: ClientConnection | None = None
        self.stopping = threading.Event()
        self.connections: dict[int, socket.socket] = {}
        self.lock = threading.Lock()
        self.half = HalfCloses(self.connections, self.lock)
        self.done = threading.Event()  # the session has ended
        self.opened = 0  # connections opened to the port
        self.refused = 0  # connections the port refused
        self.timed_out = False  # stopped at its timeout
        self.rental_ended = False  # stopped because its rental no longer runs on this node

    def stop(self) -> None:
        """End the forward (its rental ended, or its time ran out): its socket and connections close."""
        self.stopping.set()
        ws = self.ws
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()

    def stop_if_due(self) -> None:
        """Stop the forward once its --timeout has passed (noted, for its end report)."""
        if not self.done.is_set() and time.monotonic() >= self.timeout_at:
            self.timed_out = True
            self.stop()

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"forward-{self.exec_id}", daemon=True).start()

    def _run(self) -> None:
        try:
            ws = self.client.attach_agent_exec(self.exec_id)
        except (ApiError, ServerUnreachable) as error:
            log.warning("forward %s: cannot attach to the server (%s)", self.exec_id, error)
            self.done.set()
            return
        self.ws = ws
        if self.stopping.is_set():  # stopped while it attached
            ws.close()
        try:
            for message in ws:
                if isinstance(message, bytes):
                    self._to_port(ws, message)
                else:
                    self._control(ws, message)
        except ConnectionClosed:
            pass
        finally:
            with self.lock:
                left = list(self.connections.values())
                self.connections.clear()
            for connection in left:
                close_connection(connection)
            with contextlib.suppress(Exception):
                ws.close()
            self.done.set()

    def _control(self, ws: ClientConnection, text: str) -> None:
        control = control_message(text)
        if control is None:
            return
        if (number := connection_number(control.get("open", control.get("close")))) is None:
            return
        if "close" in control and control.get("half") is True:  # the client sent all: the port reads its end
            self.half.received(number)
            return
        if "open" in control:
            self._open(ws, number)
        else:
            with self.lock:
                connection = self.connections.pop(number, None)
                self.half.forget(number)
            if connection is not None:
                close_connection(connection)

    def _open(self, ws: ClientConnection, number: int) -> None:
        with self.lock:
            full = len(self.connections) >= MAX_CONNECTIONS
        if full:
            _send(ws, {"close": number, "error": f"at most {MAX_CONNECTIONS} connections at once"})
            return
        try:
            connection = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as error:
            reason = error.strerror or str(error)
            with self.lock:
                self.refused += 1
            _send(ws, {"close": number, "error": f"cannot connect to port {self.port} on the node: {reason}"})
            return
        connection.settimeout(None)
        with self.lock:
            self.connections[number] = connection
            self.opened += 1
        threading.Thread(target=self._from_port, args=(ws, number, connection), daemon=True).start()

    def _to_port(self, ws: ClientConnection, frame: bytes) -> None:
        if (parts := forward_parts(frame)) is None:
            return
        number, data = parts
        with self.lock:
            connection = self.connections.get(number)
        if connection is None:
            return
        try:
            connection.sendall(data)
        except OSError:
            self._gone(ws, number, connection)

    def _from_port(self, ws: ClientConnection, number: int, connection: socket.socket) -> None:
        """What the port sends on connection `number`, to the client, until it has sent all (the client is
        told, and may still send) or either side closes it."""
        try:
            while data := connection.recv(READ_BYTES):
                ws.send(forward_frame(number, data))
        except (OSError, ConnectionClosed):
            self._gone(ws, number, connection)
            return
        if self.half.sent(number, connection):
            _send(ws, half_close_message(number))

    def _gone(self, ws: ClientConnection, number: int, connection: socket.socket) -> None:
        """Connection `number` failed here: the client is told, unless it closed it first."""
        with self.lock:
            ours = self.connections.pop(number, None) is connection
            self.half.forget(number)
        close_connection(connection)
        if ours:
            _send(ws, {"close": number})


def _send(ws: ClientConnection, control: dict[str, object]) -> None:
    with contextlib.suppress(ConnectionClosed):
        ws.send(json.dumps(control))
