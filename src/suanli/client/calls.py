"""What a call sends, apart from how it is sent, for both clients: a `Call` (method, path, body or content,
query, headers, whether it is retried, how its answer is read), built by each area's `*_requests` module and
sent by `Client` (`Transport._ask`) or awaited by `AsyncClient` (`AsyncTransport._ask`); and a `Pager`, a
generator that yields the calls of a list fetched in pages, is sent each page's answer and returns the list.
So each call's request is written once, and only the sending is sync or awaited."""

from __future__ import annotations

import uuid
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

Answer = TypeVar("Answer")
Query = dict[str, str] | list[tuple[str, str]]
Page = tuple[Any, str | None]  # a page's answer and its `Link` rel="next" cursor (None: the last page)
Pager = Generator["Call[Any]", Page, Answer]


@dataclass(frozen=True)
class Call(Generic[Answer]):
    """One request and how its answer is read: `response_type` (a wire model, a list of one, or `str` with
    `raw`: the text) is what the call returns; `retry` as `Transport._send` takes it."""

    method: str
    path: str
    response_type: Any
    body: BaseModel | None = None
    content: bytes | None = None
    params: Query | None = None
    headers: dict[str, str] | None = None
    retry: bool | None = None
    raw: bool = False
    merge_patch: bool = False

    def sending(self) -> dict[str, Any]:
        """The keyword arguments the transports' `_send` takes for this call."""
        return {
            "body": self.body,
            "content": self.content,
            "params": self.params,
            "headers": self.headers,
            "retry": self.retry,
            "merge_patch": self.merge_patch,
        }


def idempotent(key: str | None) -> dict[str, str]:
    """The Idempotency-Key header for a create: `key`, or a fresh one for this call that its retries share."""
    return {"Idempotency-Key": key or str(uuid.uuid4())}


def created(path: str, response_type: type[Answer], request: BaseModel, key: str | None) -> Call[Answer]:
    """POST `request` to `path` under an Idempotency-Key (`key`, or a fresh one its retries share), so it is
    retried as a safe request: a resend after a lost answer returns what the first made."""
    return Call("POST", path, response_type, body=request, headers=idempotent(key), retry=True)


def tenant_query(tenant_id: str | None) -> dict[str, str] | None:
    """The `tenant` query of an admin's call on one tenant (None: the caller's own)."""
    return {"tenant": tenant_id} if tenant_id else None
