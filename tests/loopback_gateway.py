"""A reverse proxy on loopback, as nginx or a load balancer in front of the server: it forwards each request
to the server behind it, or, while `away` (the server behind it restarting), answers 503 as nginx does, with
a Retry-After when `retry_after` is set. For tests of how the SDK rides out such a gateway."""

from __future__ import annotations

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

import httpx

AWAY_PAGE = b"<html><head><title>503 Service Temporarily Unavailable</title></head><body>nginx</body></html>"
HOP_BY_HOP = frozenset({"connection", "content-length", "content-encoding", "host", "transfer-encoding"})


def _ports() -> list[int]:
    """Where a test server may listen: the range `SUANLI_TEST_PORTS` names (`19850-19899`: a machine shared
    by several runs gives each its own), else any free port (0)."""
    span = os.environ.get("SUANLI_TEST_PORTS", "")
    if not span:
        return [0]
    first, last = (int(part) for part in span.split("-"))
    return list(range(first, last + 1))


def free_port() -> int:
    """A port nothing listens on now, for a test server: in `SUANLI_TEST_PORTS` when set."""
    for port in _ports():
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free port in SUANLI_TEST_PORTS={os.environ.get('SUANLI_TEST_PORTS')}")


class Gateway:
    """The proxy, serving on a thread while open; `upstream` None: nothing behind it, so always away. `asked`:
    when each request came (`time.monotonic()`)."""

    def __init__(self, upstream: str | None) -> None:
        self.upstream = upstream
        self.away = upstream is None
        self.retry_after: str | None = None
        self.asked: list[float] = []
        self._server = self._listen()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _listen(self) -> ThreadingHTTPServer:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:
                gateway._answer(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        for port in _ports():
            try:
                return ThreadingHTTPServer(("127.0.0.1", port), Handler)
            except OSError:
                continue
        raise OSError(f"no free port in SUANLI_TEST_PORTS={os.environ.get('SUANLI_TEST_PORTS')}")

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.asked.append(time.monotonic())
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        if self.away or self.upstream is None:
            handler.send_response(503)
            handler.send_header("Content-Type", "text/html")
            if self.retry_after is not None:
                handler.send_header("Retry-After", self.retry_after)
            handler.send_header("Content-Length", str(len(AWAY_PAGE)))
            handler.end_headers()
            handler.wfile.write(AWAY_PAGE)
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        answer = httpx.request(
            handler.command, self.upstream + handler.path, headers=headers, content=body, timeout=30
        )
        handler.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in HOP_BY_HOP:
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(answer.content)))
        handler.end_headers()
        handler.wfile.write(answer.content)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
