"""The client's end of a port forward: what a local connection's user sees when the node refuses it."""

import json
import socket

from suanli.client.forward import Forwarder


def test_the_reason_a_connection_was_refused_is_told_before_the_connection_closes() -> None:
    """Whoever sees the local connection close (a browser, a test) can read why at once: the reason is
    reported while the connection is still open, then it is closed."""
    ours, theirs = socket.socketpair()
    seen_open_when_told: list[bool] = []

    def told(_: str) -> None:
        theirs.setblocking(False)
        try:
            theirs.recv(1)
            seen_open_when_told.append(False)  # end of stream: already closed
        except BlockingIOError:
            seen_open_when_told.append(True)

    with socket.create_server(("127.0.0.1", 0)) as listener, theirs:
        forwarder = Forwarder(None, listener, on_error=told)  # a control message needs no WebSocket
        forwarder.connections[1] = ours
        forwarder._control(json.dumps({"close": 1, "error": "cannot connect to port 9 on the node: refused"}))
        assert seen_open_when_told == [True]
        theirs.setblocking(True)
        assert theirs.recv(1) == b""  # then closed
        assert forwarder.connections == {}
