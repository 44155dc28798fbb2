"""For a webhook's receiver: check that a delivery came from the server, recently, and read its events.

from suanli.client.webhooks import verify, events
if not verify(SECRET, request.body, request.headers["X-Suanli-Signature"]):
    return 401
for event in events(request.body):  # oldest first; at least once: skip an id seen already
    ...
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

SIGNATURE_HEADER = "X-Suanli-Signature"
TOLERANCE_S = 300  # a delivery signed further than this from the receiver's clock is refused (a replay)


def verify(
    secret: str,
    body: bytes,
    header: str | None,
    *,
    tolerance_s: float = TOLERANCE_S,
    now_s: float | None = None,
) -> bool:
    """Whether `header` (X-Suanli-Signature: `t=<unix s>,sha256=<hex>`) is the HMAC-SHA256 of `<t>.` and the
    body under the webhook's secret, compared in constant time, with `t` within `tolerance_s` of now (a
    captured delivery replayed later is refused); the raw body as received, before any JSON parsing."""
    fields = dict(part.partition("=")[::2] for part in (header or "").split(","))
    sent_at, digest = fields.get("t", ""), fields.get("sha256", "")
    if not sent_at.isdigit() or not digest:
        return False
    now_s = time.time() if now_s is None else now_s
    if abs(now_s - int(sent_at)) > tolerance_s:
        return False
    expected = hmac.new(secret.encode(), f"{sent_at}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(digest, expected)


def events(body: bytes) -> list[dict[str, Any]]:
    """The delivery's events, oldest first: `id` (dedup by it), `rental_id`, `at`, `kind`, `reason`,
    `message`."""
    return list(json.loads(body)["events"])
