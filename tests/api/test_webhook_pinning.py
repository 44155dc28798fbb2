"""Webhook connections go to the address that was checked: one resolution per connection (no DNS rebinding
between a check and the request), TLS verified against the URL's name. Real sockets on loopback; the names
resolve through a resolver the test passes (the machine's DNS knows none of them)."""

from __future__ import annotations

import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import trustme

from suanli.loops.webhook_loop import PinnedTransport, Refused


class Hook:
    """A loopback endpoint answering 204 and keeping each request's Host header; TLS with `tls`."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.hosts: list[str] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a second request may reuse the connection

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                hook.hosts.append(self.headers["Host"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Resolver:
    """Answers each name from a table and counts the lookups (a DNS answer the test controls)."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers, self.lookups = answers, []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.answers:
            raise OSError(f"no such name {host}")
        return self.answers[host]


def loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_loopback  # the test's "public": the only network it may reach


@pytest.fixture
def hook() -> Iterator[Hook]:
    found = Hook()
    yield found
    found.close()


def _client(resolver: Resolver, verify: ssl.SSLContext | bool = True) -> httpx.Client:
    transport = PinnedTransport(resolver, loopback, verify=verify)
    return httpx.Client(timeout=5.0, follow_redirects=False, transport=transport)


def test_the_request_goes_to_the_checked_address_under_the_urls_own_name(hook: Hook) -> None:
    resolver = Resolver({"hooks.test": ["127.0.0.1"]})
    with _client(resolver) as client:
        for _ in range(2):
            assert client.post(f"http://hooks.test:{hook.port}/x", content=b"{}").status_code == 204
    assert hook.hosts == [f"hooks.test:{hook.port}"] * 2  # the name, not the address, in Host
    assert resolver.lookups == ["hooks.test"]  # one connection, kept alive: resolved once


def test_an_answer_with_any_address_outside_the_allowed_is_refused_before_connecting(hook: Hook) -> None:
    resolver = Resolver({"rebind.test": ["127.0.0.1", "10.9.8.7"], "empty.test": []})
    with _client(resolver) as client:
        for url, says in (
            ("rebind.test", "refused: rebind.test is a non-public address (10.9.8.7)"),
            ("empty.test", "cannot resolve empty.test: no address"),
            ("unknown.test", "cannot resolve unknown.test: no such name unknown.test"),
        ):
            with pytest.raises(httpx.ConnectError) as raised:
                client.post(f"http://{url}:{hook.port}/x", content=b"{}")
            assert isinstance(raised.value.__cause__, Refused) and str(raised.value) == says
    assert hook.hosts == []  # nothing reached it


def test_tls_verifies_the_certificate_against_the_name_not_the_pinned_address() -> None:
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("hooks.test").configure_cert(server_tls)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    secure = Hook(server_tls)
    try:
        resolver = Resolver({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
        with _client(resolver, verify=trusted) as client:
            assert client.post(f"https://hooks.test:{secure.port}/x", content=b"{}").status_code == 204
            with pytest.raises(httpx.ConnectError, match="certificate"):
                client.post(f"https://other.test:{secure.port}/x", content=b"{}")  # same address, other name
        with _client(resolver) as client, pytest.raises(httpx.ConnectError, match="certificate"):
            client.post(f"https://hooks.test:{secure.port}/x", content=b"{}")  # the system's CAs: not ours
    finally:
        secure.close()
    assert secure.hosts == [f"hooks.test:{secure.port}"]
