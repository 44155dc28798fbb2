"""For a webhook's receiver: check that a delivery came from the server, and read its events.

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
from typing import Any

SIGNATURE_HEADER = "X-Suanli-Signature"


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """Whether `header` (X-Suanli-Signature) is the body's HMAC-SHA256 under the webhook's secret, compared
    in constant time; the raw body as received, before any JSON parsing."""
    if not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(header.removeprefix("sha256="), expected)


def events(body: bytes) -> list[dict[str, Any]]:
    """The delivery's events, oldest first: `id` (dedup by it), `rental_id`, `at`, `kind`, `reason`,
    `message`."""
    return list(json.loads(body)["events"])
