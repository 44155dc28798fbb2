"""Delivers webhooks (`app/webhooks.py`) on the leader, every `SUANLI_WEBHOOK_INTERVAL_S` (and again at once
after a full batch).

Each due webhook gets one batch per run, POSTed with its signature; a 2xx moves its cursor, anything else
(an error status, a timeout, no connection) records the failure and its backoff. Redirects are not
followed. Unless `private_ok`, a URL whose host resolves to a loopback, private, link-local or reserved
address is refused (a tenant must not make the server call into its own network); the check and the
request use the same resolution only up to DNS changes in between, which a resolver pinned per request
would close.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from urllib.parse import urlsplit

import httpx

from suanli.app.webhooks import BATCH, SIGNATURE_HEADER, WebhookService, payload, signature
from suanli.loops.leader_loop import LeaderLoop
from suanli.store.leader import Leadership

log = logging.getLogger(__name__)
TIMEOUT_S = 5.0
SETTLE_S = 5.0  # events are sent once the ids handed out this long ago are all committed (a watermark)


class WebhookLoop(LeaderLoop):
    name = "suanli-webhooks"

    def __init__(
        self, service: WebhookService, leadership: Leadership, period_s: float, *, private_ok: bool = False
    ) -> None:
        super().__init__(leadership, period_s)
        self.service, self.private_ok = service, private_ok
        self.http = httpx.Client(timeout=TIMEOUT_S, follow_redirects=False)
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
        for webhook, events in self.service.batches(through):
            body = payload(webhook, events)
            error = None if self.private_ok else refused_address(webhook.url)
            if error is None:
                headers = {
                    "Content-Type": "application/json",
                    SIGNATURE_HEADER: signature(webhook.secret, body),
                    "User-Agent": "suanli-webhooks",
                }
                try:
                    answer = self.http.post(webhook.url, content=body, headers=headers)
                    if not answer.is_success:
                        error = f"answered {answer.status_code}"
                except httpx.HTTPError as failure:
                    error = f"{type(failure).__name__}: {failure}"
            if error is None:
                self.service.delivered(webhook.id, events, through)
                more |= len(events) == BATCH
            else:
                retry_at = self.service.failed(webhook, error)
                log.info("webhook %s: %s; next try at %s", webhook.id, error, retry_at.isoformat())
        if more:
            self.signal()  # a full batch went out: the rest soon, not at the next period

    async def stop(self) -> None:
        await super().stop()
        self.http.close()


def refused_address(url: str) -> str | None:
    """Why the server will not call `url` (its host is or resolves to a non-public address), or None."""
    host = urlsplit(url).hostname or ""
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except OSError as error:
        return f"cannot resolve {host}: {error}"
    for address in sorted(found):
        ip = ipaddress.ip_address(address.split("%")[0])
        if not ip.is_global:
            return f"refused: {host} is a non-public address ({ip})"
    return None
