"""How a `Client` talks to the server: one request sent (retried as `retries` says, bounded by a deadline)
and its answer read as a wire model or raised as an `ApiError`; a WebSocket opened; a path's segments escaped,
an idempotency key given, a page's `Link` followed. The calls themselves are in the modules by area."""

from __future__ import annotations

import time
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from suanli.client.calls import Call, Pager, idempotent
from suanli.client.errors import ApiError, ServerUnreachable
from suanli.client.exchange import (
    call_deadline,
    failure,
    http_options,
    read_answer,
    request_json,
    resending,
    unreachable,
    url_problem,
)
from suanli.client.retries import timeout_until

__all__ = ["DEFAULT_TIMEOUT_S", "Transport", "idempotent", "next_after", "segment", "url_problem"]

Result = TypeVar("Result")
DEFAULT_TIMEOUT_S = 30.0  # how long one request waits for each step of its answer (`Client(timeout_s=)`)


def segment(value: object) -> str:
    """An id or name as one path segment: escaped, so `a/../b` or `a?x=1` names nothing but itself."""
    text = str(value)
    if not text:
        raise ApiError(404, "not_found", "no such object: its id is empty")
    return quote(text, safe="")


def next_after(response: httpx.Response) -> str | None:
    """The cursor (`after`) of the page its `Link` rel="next" header names; None on the last page."""
    url = response.links.get("next", {}).get("url")
    return None if url is None else httpx.URL(url).params.get("after")


class Transport:
    """A session with one suanli server (see `Client`): its HTTP client, key and timeouts, and the sending
    and reading every call shares; the calls by area derive from it."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        call_timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        retries: int = 4,
    ) -> None:
        self._http = httpx.Client(**http_options(base_url, api_key, timeout_s), transport=transport)
        self._retries = retries
        self._call_timeout_s = call_timeout_s
        self._answered_as_suanli = False  # a reply in suanli's shape came: a later bare 5xx is its failure

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _ask(self, call: Call[Result], deadline: float | None = None) -> Result:
        """`call` sent (and retried) as it says, its answer read as it says; its retries end by
        `deadline` (`time.monotonic()`) when given."""
        return self._answered(call, deadline)[0]

    def _answered(self, call: Call[Result], deadline: float | None = None) -> tuple[Result, str | None]:
        """`call`'s answer and the cursor its `Link` rel="next" names (None: none)."""
        response = self._send(call.method, call.path, **call.sending(), deadline=deadline)
        answer = self._read(call.method, call.path, response, call.response_type, raw=call.raw)
        return answer, next_after(response)

    def _pages(self, pager: Pager[Result]) -> Result:
        """What `pager` returns once each call it yields is answered (a list fetched a page at a time)."""
        try:
            call = next(pager)
            while True:
                call = pager.send(self._answered(call))
        except StopIteration as done:
            return done.value

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        content: bytes | None = None,
        params: dict[str, str] | list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        retry: bool | None = None,
        merge_patch: bool = False,
        deadline: float | None = None,
    ) -> httpx.Response:
        """`_ask`'s request, sent (and retried) as it says; an error answer raised as an `ApiError`."""
        started = time.monotonic()
        deadline = call_deadline(started, self._call_timeout_s, deadline)
        json_body = request_json(body, merge_patch)

        def send() -> httpx.Response:
            timeout = timeout_until(self._http.timeout, deadline)
            return self._http.request(
                method, path, json=json_body, content=content, params=params, headers=headers, timeout=timeout
            )

        try:
            response = resending(method, retry, self._retries, deadline)(send)()
        except httpx.TransportError as error:
            raise unreachable(error, self._http.base_url, started) from None
        error, self._answered_as_suanli = failure(response, self._answered_as_suanli)
        if error is not None:
            raise error
        return response

    def _read(
        self, method: str, path: str, response: httpx.Response, response_type: Any, *, raw: bool = False
    ) -> Any:
        """A successful answer to `method path` read as `response_type` (its text when `raw`)."""
        answer, as_suanli = read_answer(method, path, response, response_type, raw=raw)
        self._answered_as_suanli |= as_suanli
        return answer

    def _websocket(self, path: str) -> ClientConnection:
        base = self._http.base_url
        scheme = "wss" if base.scheme == "https" else "ws"
        url = base.copy_with(scheme=scheme, raw_path=base.raw_path.rstrip(b"/") + path.encode())
        headers = {k: v for k, v in self._http.headers.items() if k.lower() == "authorization"}
        try:
            return connect(str(url), additional_headers=headers, open_timeout=self._http.timeout.connect)
        except InvalidStatus as error:
            status = error.response.status_code
            raise ApiError(
                status, "not_attached", f"the server did not open the WebSocket ({status})"
            ) from None
        except (OSError, TimeoutError, InvalidHandshake) as error:
            raise ServerUnreachable(f"cannot reach {base}: {error}") from None
