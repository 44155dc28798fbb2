"""Webhooks: a tenant names a URL, and its rentals' events (placed, running, restarted, stopping, stopped,
failed, preempted, ...) are POSTed there as they happen, so a pipeline learns a job ended without polling.

Guarantees:

* At least once, in order: each webhook keeps the id of the last event delivered (`after_event_id`); a batch
  (the next events, oldest first, at most `BATCH`) is sent again until a 2xx answer, then the cursor moves
  past it in one update. A receiver dedups by each event's `id`. A new webhook gets only events after it.
  Ids are handed out before their transactions commit, so on PostgreSQL a lower id can become visible after
  a higher one: the loop sends only events up to the newest id it saw `SETTLE_S` ago (a watermark), so an
  event is skipped only if its transaction stayed open that long after its insert.
* Signed, with the moment it was sent: `X-Suanli-Signature: t=<unix s>,sha256=<hex>`, the HMAC-SHA256 of
  `<t>.` and the body under the webhook's own secret (shown once, at creation), so a receiver can tell the
  server's deliveries from anyone's and refuse one replayed later (the SDK's `verify`: over 5 min from its
  clock; Stripe's scheme). Each try is signed again when it is sent.
* A URL is checked at registration by the sender's own parser (`url_parser`), so what is stored can be
  sent: control characters and host names that are not valid IDNA are refused naming `url`.
* A failure (no answer, a non-2xx, anything the send raised) waits `backoff_s(failures)` before the next
  try (5 s doubling, at most 10 min); it never blocks another webhook.
The HTTP itself is the shell's (`loops/webhook_loop.py`); this module decides what to send and records how
it went.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from suanli.app.errors import Invalid, NotFound
from suanli.app.ids import new_id
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import EVENT_KINDS, Caller, SentEvent, Webhook

BATCH = 100  # events in one delivery at most
MAX_WEBHOOKS = 10  # per tenant
MAX_URL_CHARS = 2000
FIRST_RETRY_S, LAST_RETRY_S = 5.0, 600.0
SIGNATURE_HEADER = "X-Suanli-Signature"
SKIP_GAP = 1000  # events it does not get that a webhook's cursor lags by before it is moved past them
UrlParser = Callable[[str], object]  # the sender's URL parser: raises ValueError on one it cannot send to


def no_parser(url: str) -> None:
    """A parser that takes every URL: for callers that only check the shape (the sender's is wired in)."""


def check_url(url: str, parse: UrlParser = no_parser) -> str:
    """The URL, if a webhook can be sent to it: http or https, a host, no user or password in it, and
    taken by `parse` (the sender's parser: `urlsplit` silently drops CR, LF and TAB and checks no IDNA)."""
    if len(url) > MAX_URL_CHARS:
        raise Invalid(f"a webhook URL is at most {MAX_URL_CHARS} characters", field="url")
    try:
        parse(url)
    except ValueError as error:
        raise Invalid(f"not a URL the server can send to ({error}): {url!r}", field="url") from None
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port  # each raises ValueError on a malformed one ("http://[::1")
    except ValueError as error:
        raise Invalid(f"not a URL ({error}): {url!r}", field="url") from None
    if parts.scheme not in ("http", "https") or not host:
        raise Invalid(f"not an http(s) URL with a host: {url!r}", field="url")
    if parts.username or parts.password:
        raise Invalid("a webhook URL carries no user or password; the signature authenticates", field="url")
    return url


def check_event_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds a webhook is to get, each one of `EVENT_KINDS`, once, in that order; () for every kind."""
    unknown = sorted(set(kinds) - set(EVENT_KINDS))
    if unknown:
        raise Invalid(
            f"unknown event kind {', '.join(map(repr, unknown))}; use {', '.join(EVENT_KINDS)}",
            field="events",
        )
    return tuple(kind for kind in EVENT_KINDS if kind in kinds)


def backoff_s(failures: int) -> float:
    """The wait before the next try after `failures` failures in a row: 5 s, 10 s, ... at most 10 min."""
    return min(FIRST_RETRY_S * 2 ** max(failures - 1, 0), LAST_RETRY_S)


def payload(webhook: Webhook, events: Sequence[SentEvent]) -> bytes:
    """The JSON body of one delivery: the webhook and its events, oldest first."""
    body = {
        "webhook_id": webhook.id,
        "events": [
            {
                "id": sent.id,
                "rental_id": sent.rental_id,
                "at": sent.event.at.isoformat(),
                "kind": sent.event.kind,
                "reason": sent.event.reason,
                "message": sent.event.message,
            }
            for sent in events
        ],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def signature(secret: str, body: bytes, sent_at_s: int) -> str:
    """`t=<sent_at_s>,sha256=<hex>`: what `X-Suanli-Signature` carries; the time is signed with the body, so
    a delivery replayed later is refused however it was captured."""
    signed = f"{sent_at_s}.".encode() + body
    return f"t={sent_at_s},sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


class WebhookService:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, url_parser: UrlParser) -> None:
        self.uow, self.clock, self.url_parser = uow, clock, url_parser

    def create(self, caller: Caller, url: str, event_kinds: Sequence[str] = ()) -> Webhook:
        """A webhook for the caller's rentals from now on, for the events of `event_kinds` (none: every
        kind); its secret is in the answer, and only there."""
        check_url(url, self.url_parser)
        kinds = check_event_kinds(event_kinds)
        with self.uow() as uow:
            if len(uow.webhooks.list(caller.tenant.id)) >= MAX_WEBHOOKS:
                raise Invalid(f"a tenant has at most {MAX_WEBHOOKS} webhooks; remove one first", field="url")
            webhook = Webhook(
                new_id("whk"),
                caller.tenant.id,
                url,
                "whsec_" + secrets.token_urlsafe(32),
                self.clock.now(),
                uow.webhooks.last_event_id(),
                event_kinds=kinds,
            )
            uow.webhooks.add(webhook)
            uow.commit()
        return webhook

    def list(self, caller: Caller) -> list[Webhook]:
        with self.uow() as uow:
            return uow.webhooks.list(caller.tenant.id)

    def change(
        self, caller: Caller, webhook_id: str, url: str | None, event_kinds: Sequence[str] | None
    ) -> Webhook:
        """A new URL or event kinds (None: as they are; no kinds: every kind); the secret and the cursor
        stay, so delivery goes on from where it was, to the new URL, of the new kinds."""
        kinds = None if event_kinds is None else check_event_kinds(event_kinds)
        if url is not None:
            check_url(url, self.url_parser)
        with self.uow() as uow:
            webhook = self._owned(uow, caller, webhook_id)
            changed = replace(
                webhook,
                url=webhook.url if url is None else url,
                event_kinds=webhook.event_kinds if kinds is None else kinds,
            )
            uow.webhooks.change(webhook_id, changed.url, changed.event_kinds)
            uow.commit()
        return changed

    def remove(self, caller: Caller, webhook_id: str) -> Webhook:
        with self.uow() as uow:
            webhook = self._owned(uow, caller, webhook_id)
            uow.webhooks.remove(webhook_id)
            uow.commit()
        return webhook

    @staticmethod
    def _owned(uow: UnitOfWork, caller: Caller, webhook_id: str) -> Webhook:
        webhook = uow.webhooks.get(webhook_id)
        if webhook is None or webhook.tenant_id != caller.tenant.id:
            raise NotFound(f"no webhook {webhook_id}")
        return webhook

    def last_event_id(self) -> int:
        """The newest rental event's id now: read again a while later, every id up to it is committed."""
        with self.uow() as uow:
            return uow.webhooks.last_event_id()

    def batches(self, through_event_id: int) -> list[tuple[Webhook, list[SentEvent]]]:
        """What each webhook due now is to be sent next, of the events up to `through_event_id` (those
        with nothing new are left out; one that lags by `SKIP_GAP` events it does not get moves past them)."""
        now = self.clock.now()
        with self.uow() as uow:
            found, skipped = [], False
            for webhook in uow.webhooks.due(now):
                after = webhook.after_event_id
                events = uow.webhooks.events_after(
                    webhook.tenant_id, after, through_event_id, BATCH, webhook.event_kinds
                )
                if events:
                    found.append((webhook, events))
                elif through_event_id - after >= SKIP_GAP:
                    uow.webhooks.skip_to(webhook.id, through_event_id)
                    skipped = True
            if skipped:  # a pass with nothing to skip writes nothing
                uow.commit()
            return found

    def delivered(self, webhook_id: str, events: Sequence[SentEvent], through_event_id: int) -> None:
        """`events` reached the webhook; a batch short of `BATCH` held every event it gets up to
        `through_event_id` (the watermark it was read under), so the cursor moves there."""
        last = max(sent.id for sent in events)
        with self.uow() as uow:
            uow.webhooks.delivered(
                webhook_id, through_event_id if len(events) < BATCH else last, self.clock.now()
            )
            uow.commit()

    def failed(self, webhook: Webhook, error: str) -> datetime:
        """Record a failed delivery; when the webhook will be tried again."""
        retry_at = self.clock.now() + timedelta(seconds=backoff_s(webhook.failures + 1))
        with self.uow() as uow:
            uow.webhooks.failed(webhook.id, error, retry_at)
            uow.commit()
        return retry_at
