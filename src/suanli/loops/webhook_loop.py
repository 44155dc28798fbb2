"""Delivers webhooks (`app/webhooks.py`) on the leader, every `SUANLI_WEBHOOK_INTERVAL_S` (and again at once
after a full batch).

Each due webhook gets one batch per run, POSTed with its signature; a 2xx moves its cursor, anything else
(an error status, a timeout, no connection, any error the send raised) records that webhook's failure and
its backoff, and the pass goes on with the others. Redirects are not
followed. Unless `private_ok`, a URL whose host resolves to a loopback, private, link-local or reserved
address is refused (a tenant must not make the server call into its own network). The check is made where
the connection is opened, on the one resolution the socket then connects to (`PinnedBackend`), so a DNS
answer that changes between a check and a request (DNS rebinding) cannot slip a private address through;
TLS still verifies the certificate against the URL's host name.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpcore
import httpx

from suanli.app.webhooks import BATCH, SIGNATURE_HEADER, WebhookService, payload, signature
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)
TIMEOUT_S = 5.0
PARALLEL_SENDS = 16  # webhooks sent to at once in a pass
SETTLE_S = 5.0  # events are sent once the ids handed out this long ago are all committed (a watermark)


class WebhookLoop(LeaderLoop):
    name = "suanli-webhooks"

    def __init__(
        self, service: WebhookService, leadership: Leadership, period_s: float, *, private_ok: bool = False
    ) -> None:
        super().__init__(leadership, period_s)
        self.service, self.private_ok = service, private_ok
        transport = httpx.HTTPTransport() if private_ok else PinnedTransport()
        limits = httpx.Limits(max_connections=PARALLEL_SENDS)
        self.http = httpx.Client(
            timeout=TIMEOUT_S, follow_redirects=False, transport=transport, limits=limits
        )
        # a pass's deliveries go out side by side: a slow or silent receiver holds its own webhook, not the
        # others' (three answering after 4.5 s each held every tenant's next events for 16 s)
        self.senders = ThreadPoolExecutor(PARALLEL_SENDS, thread_name_prefix="suanli-webhook-send")
        self.seen: list[tuple[float, int]] = []  # (monotonic time, the newest event id then), oldest first

    def settled_through(self) -> int | None:
        """The newest event id seen at least `SETTLE_S` ago (None: none yet): every lower id is committed."""
        now = time.monotonic()
        self.seen.append((now, self.service.last_event_id()))
        old = [i for i, (at, _) in enumerate(self.seen) if now - at >= SETTLE_S]
        if not old:
            return None
        del self.seen[: old[-1]]  # the newest settled mark stays first
        return self.seen[0][1]

    def work(self) -> None:
        through = self.settled_through()
        if through is None:
            return
        more = False
        batches = list(self.service.batches(through))
        for (webhook, events), error in zip(batches, self.senders.map(self._send, batches), strict=True):
            if error is None:
                self.service.delivered(webhook.id, events, through)
                more |= len(events) == BATCH
            else:
                retry_at = self.service.failed(webhook, error)
                log.info("webhook %s: %s; next try at %s", webhook.id, error, retry_at.isoformat())
        if more:
            self.signal()  # a full batch went out: the rest soon, not at the next period

    def _send(self, batch: tuple[Any, Sequence[Any]]) -> str | None:
        """POST one webhook's batch; None when it answered 2xx, else why not."""
        webhook, events = batch
        body = payload(webhook, events)
        sent_at_s = int(time.time())  # the wall clock a receiver compares with, not the business clock
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(webhook.secret, body, sent_at_s),
            "User-Agent": "suanli-webhooks",
        }
        try:
            answer = self.http.post(webhook.url, content=body, headers=headers)
        except httpx.HTTPError as failure:
            cause = failure.__cause__  # httpx re-raises the pool's errors from them
            return str(cause) if isinstance(cause, Refused) else f"{type(failure).__name__}: {failure}"
        except Exception as failure:  # one tenant's webhook fails alone: a raise here aborted every pass
            log.warning("webhook %s: send raised", webhook.id, exc_info=True)
            return f"{type(failure).__name__}: {failure}"
        return None if answer.is_success else f"answered {answer.status_code}"

    async def stop(self) -> None:
        await super().stop()
        self.senders.shutdown(wait=True)
        self.http.close()


def parse_url(url: str) -> httpx.URL:
    """`url` as the sender will send to it; ValueError if httpx cannot (control characters, a host name
    that is not valid IDNA), so registration refuses what the sender would raise on."""
    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018 - decodes an "xn--" label, as sending does (idna.IDNAError on a bad one)
        return parsed
    except httpx.InvalidURL as error:  # idna's errors are ValueErrors already
        raise ValueError(str(error)) from None


Resolver = Callable[[str, int], Iterable[str]]  # (host, port) -> its addresses
Allowed = Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], bool]


class Refused(httpcore.ConnectError):
    """The server will not connect to this host: it resolves to an address outside what is allowed."""


def resolve(host: str, port: int) -> list[str]:
    """`host`'s addresses (once; the caller connects to these, not to a second lookup)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(info[4][0] for info in infos))


def public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global


def checked_addresses(
    host: str, port: int, resolver: Resolver = resolve, allowed: Allowed = public
) -> list[str]:
    """`host`'s addresses, each allowed; `Refused` (naming the host and address) if any is not, or if the
    host does not resolve. Every address must pass: the caller may connect to any of them."""
    try:
        found = list(resolver(host, port))
    except OSError as error:
        raise Refused(f"cannot resolve {host}: {error}") from error
    if not found:
        raise Refused(f"cannot resolve {host}: no address")
    for address in found:
        ip = ipaddress.ip_address(address.split("%")[0])
        if not allowed(ip):
            raise Refused(f"refused: {host} is a non-public address ({ip})")
    return found


class PinnedBackend(httpcore.SyncBackend):
    """Opens TCP connections only to a host's checked addresses, resolved once per connection: the address
    checked is the address connected to. TLS is started by the pool afterwards with the URL's host name, so
    the certificate is verified against the name, not the address."""

    def __init__(self, resolver: Resolver = resolve, allowed: Allowed = public) -> None:
        self.resolver, self.allowed = resolver, allowed

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in checked_addresses(host, port, self.resolver, self.allowed):
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error  # the next address, as a resolver's happy path would
        assert failure is not None
        raise failure


class PinnedTransport(httpx.HTTPTransport):
    """httpx's transport over a pool whose connections go through `PinnedBackend` (TLS verified with `verify`,
    by default the system's CAs). Env proxies are not used: a transport given to a client turns them off."""

    def __init__(
        self, resolver: Resolver = resolve, allowed: Allowed = public, verify: ssl.SSLContext | bool = True
    ) -> None:
        super().__init__(verify=verify)
        # httpx takes no network backend; its pool does (with httpx's default limits, as its own pool has)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=PinnedBackend(resolver, allowed),
        )
