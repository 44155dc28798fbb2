"""One request and its answer as both transports (`Transport`, sync; `AsyncTransport`) see them, with no I/O:
the HTTP client's options, a call's deadline and retry rules, its JSON body, and how an answer is read (as a
wire model, or as the `ApiError` or `ServerUnreachable` it means). Each transport only sends; what a request
and its answer mean is decided here once, so the two clients cannot drift apart."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from suanli.client.errors import BAD_RESPONSE, NOT_OURS, SERVER_ERROR, ApiError, ServerUnreachable, api_error
from suanli.client.retries import retry_on_connection_errors, retry_when_rate_limited

F = TypeVar("F", bound=Callable[..., Any])


def http_options(base_url: str, api_key: str | None, timeout_s: float) -> dict[str, Any]:
    """The keyword arguments of the `httpx.Client` (or `AsyncClient`) for a session with the server at
    `base_url`, authenticated by `api_key`; a `base_url` that is not a server's URL is a ValueError naming it,
    so a typo reads as a typo, not as a server that does not answer."""
    if (problem := url_problem(base_url)) is not None:
        raise ValueError(f"base_url {base_url!r} {problem}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return {"base_url": base_url.rstrip("/"), "headers": headers, "timeout": timeout_s}


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


def call_deadline(started_s: float, call_timeout_s: float | None, deadline: float | None) -> float | None:
    """When a call that started at `started_s` (`time.monotonic()`) must end: the nearer of its own
    `deadline` and the client's `call_timeout_s` from its start; None when neither bounds it."""
    if call_timeout_s is None:
        return deadline
    own = started_s + call_timeout_s
    return own if deadline is None else min(deadline, own)


def request_json(body: BaseModel | None, merge_patch: bool = False) -> Any:
    """A request model as its JSON body: unset and None fields left out, but a merge patch sends what was
    given, nulls too (a null removes)."""
    if body is None:
        return None
    return body.model_dump(mode="json", exclude_unset=merge_patch, exclude_none=not merge_patch)


def resending(method: str, retry: bool | None, retries: int, deadline: float | None) -> Callable[[F], F]:
    """The retry rules around one call's send (sync or async: tenacity wraps either): a safe call (GET and
    HEAD, unless `retry` says) sent up to `retries` times after a lost answer or a gateway's 502/503/504, any
    call again after a 429, and none of it past `deadline`."""
    safe = method in ("GET", "HEAD") if retry is None else retry
    within_s = None if deadline is None else deadline - time.monotonic()
    on_lost_answers = retry_on_connection_errors(retries if safe else 1, within_s)
    on_rate_limits = retry_when_rate_limited(retries, within_s)
    return lambda send: on_rate_limits(on_lost_answers(send))


def unreachable(error: httpx.TransportError, base_url: httpx.URL, started_s: float) -> ServerUnreachable:
    """The `ServerUnreachable` a send that got no answer means: how long it waited when it timed out."""
    if isinstance(error, httpx.TimeoutException):
        waited_s = time.monotonic() - started_s
        message = f"{base_url}: no answer within {waited_s:.1f} s ({error})"
        return ServerUnreachable(message, waited_s=waited_s)
    return ServerUnreachable(f"{base_url}: {error}")


def failure(response: httpx.Response, answered_as_suanli: bool) -> tuple[ApiError | None, bool]:
    """The `ApiError` a 4xx/5xx reply means (None for a success), and whether the server has now answered
    as suanli (an error in suanli's shape says so; a later bare 5xx is then its failure, not a stranger's)."""
    if response.status_code < 400:
        return None, answered_as_suanli
    error = api_error(response, answered_as_suanli)
    return error, answered_as_suanli or error.code not in (NOT_OURS, SERVER_ERROR)


def read_answer(
    method: str, path: str, response: httpx.Response, response_type: Any, *, raw: bool = False
) -> tuple[Any, bool]:
    """A successful answer to `method path` read as `response_type` (its text when `raw`; None when no type
    or 204), and whether it was read as suanli's (a typed answer validated). Fields a newer server added are
    ignored, so a client keeps working after the server's upgrade; an answer that is not valid is the
    server's fault, a 502 `bad_response`."""
    if response_type is None or response.status_code == 204:
        return None, False
    if raw:
        return response.text, False
    try:
        return TypeAdapter(response_type).validate_python(response.json(), extra="ignore"), True
    except (ValidationError, ValueError) as error:
        message = f"the server's answer to {method} {path} is not valid: {error}"
        raise ApiError(502, BAD_RESPONSE, message) from None
