"""How a `Client` talks to the server: one request sent (retried as `retries` says, bounded by a deadline)
and its answer read as a wire model or raised as an `ApiError`; a WebSocket opened; a path's segments escaped,
an idempotency key given, a page's `Link` followed. The calls themselves are in the modules by area."""

from __future__ import annotations

import time
import uuid
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from suanli.client.errors import BAD_RESPONSE, NOT_OURS, SERVER_ERROR, ApiError, ServerUnreachable, api_error
from suanli.client.retries import retry_on_connection_errors, retry_when_rate_limited, timeout_until

Answer = TypeVar("Answer", bound=BaseModel)
DEFAULT_TIMEOUT_S = 30.0  # how long one request waits for each step of its answer (`Client(timeout_s=)`)


def idempotent(key: str | None) -> dict[str, str]:
    """The Idempotency-Key header for a create: `key`, or a fresh one for this call that its retries share."""
    return {"Idempotency-Key": key or str(uuid.uuid4())}


def segment(value: object) -> str:
    """An id or name as one path segment: escaped, so `a/../b` or `a?x=1` names nothing but itself."""
    text = str(value)
    if not text:
        raise ApiError(404, "not_found", "no such object: its id is empty")
    return quote(text, safe="")


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a server's base URL (`http://host:port`), or None: a typo then reads as a typo,
    not as a server that does not answer."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        return f"is not a URL ({error})"
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return "is not a server URL; expected http://HOST:PORT or https://HOST"
    return None


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
        if (problem := url_problem(base_url)) is not None:
            raise ValueError(f"base_url {base_url!r} {problem}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )
        self._retries = retries
        self._call_timeout_s = call_timeout_s
        self._answered_as_suanli = False  # a reply in suanli's shape came: a later bare 5xx is its failure

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        response_type: Any,
        *,
        body: BaseModel | None = None,
        content: bytes | None = None,
        params: dict[str, str] | list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        retry: bool | None = None,
        raw: bool = False,
        merge_patch: bool = False,
        deadline: float | None = None,
    ) -> Any:
        """Send a request (again, when `safe`, after a lost answer or a gateway's 502/503/504; any after a
        429) and read its answer as `response_type`; with a `deadline` (`time.monotonic()`), each send's
        timeout and the retries end by it, as they do by the client's `call_timeout_s` (the nearer)."""
        response = self._send(
            method,
            path,
            body=body,
            content=content,
            params=params,
            headers=headers,
            retry=retry,
            merge_patch=merge_patch,
            deadline=deadline,
        )
        return self._read(method, path, response, response_type, raw=raw)

    def _create(self, path: str, response_type: type[Answer], request: BaseModel, key: str | None) -> Answer:
        """POST `request` to `path` under an Idempotency-Key (`key`, or a fresh one its retries share), so
        it is retried as a safe request: a resend after a lost answer returns what the first made."""
        return self._call("POST", path, response_type, body=request, headers=idempotent(key), retry=True)

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
        """`_call`'s request, sent (and retried) as it says; an error answer raised as an `ApiError`."""
        started = time.monotonic()
        if self._call_timeout_s is not None:
            own = started + self._call_timeout_s
            deadline = own if deadline is None else min(deadline, own)
        safe = method in ("GET", "HEAD") if retry is None else retry
        json_body = None
        if body is not None:  # a merge patch sends what was given, nulls too (null removes)
            json_body = body.model_dump(mode="json", exclude_unset=merge_patch, exclude_none=not merge_patch)

        def send() -> httpx.Response:
            timeout = timeout_until(self._http.timeout, deadline)
            return self._http.request(
                method, path, json=json_body, content=content, params=params, headers=headers, timeout=timeout
            )

        attempts = self._retries if safe else 1
        within_s = None if deadline is None else deadline - time.monotonic()
        on_lost_answers = retry_on_connection_errors(attempts, within_s)
        sender = retry_when_rate_limited(self._retries, within_s)(on_lost_answers(send))
        try:
            response = sender()
        except httpx.TimeoutException as error:
            waited_s = time.monotonic() - started
            message = f"{self._http.base_url}: no answer within {waited_s:.1f} s ({error})"
            raise ServerUnreachable(message, waited_s=waited_s) from None
        except httpx.TransportError as error:
            raise ServerUnreachable(f"{self._http.base_url}: {error}") from None
        if response.status_code >= 400:
            error = api_error(response, self._answered_as_suanli)
            self._answered_as_suanli |= error.code not in (NOT_OURS, SERVER_ERROR)
            raise error
        return response

    def _read(
        self, method: str, path: str, response: httpx.Response, response_type: Any, *, raw: bool = False
    ) -> Any:
        """A successful answer to `method path` read as `response_type` (its text when `raw`)."""
        if response_type is None or response.status_code == 204:
            return None
        if raw:
            return response.text
        try:  # fields a newer server added are ignored: this client keeps working after the server's upgrade
            answer = TypeAdapter(response_type).validate_python(response.json(), extra="ignore")
            self._answered_as_suanli = True
            return answer
        except (ValidationError, ValueError) as error:  # not a request's fault: the server's answer
            message = f"the server's answer to {method} {path} is not valid: {error}"
            raise ApiError(502, BAD_RESPONSE, message) from None

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
