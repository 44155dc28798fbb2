"""The SDK's errors, how an error answer (or a refused argument) is read as one, and what each means.

Errors:
    ClientError
     +-- ApiError            the server answered 4xx/5xx; `status`, `code`, `message`, `field`
     |   |                   (a 5xx the server failed with: `code` is its own, or `server_error` when the
     |   |                   answer is not in suanli's shape but the server answered as suanli before;
     |   |                   `http_error`: a reply that may not be suanli's at all)
     |   +-- InvalidArgument a method's argument its request model refuses, before anything is sent: the
     |   |                   422 `invalid` naming the field, as the server's; `validation`: pydantic's error
     |   +-- GatewayError    a 502/503/504 after retries: a gateway in front (nginx, a load balancer) says
     |                       the server is away for now; `retry_after_s`, `answered`
     +-- ServerUnreachable   no answer after retries (connection refused, timeout: `waited_s`), or, for
     |                       `wait` and following `output`, a gateway's 502/503/504 until they gave up
     |                       (`last_status`)
     +-- RentalEnded         `wait` asked for a state the rental can no longer reach: it ended in another
     +-- RentalWaitTimeout   `wait`'s `timeout_s` passed first (also a built-in TimeoutError); `rental`: it
     |                       as last seen, `until`, `timeout_s`
     +-- ExecWaitTimeout     `wait_exec`'s `within_s` passed before the command ended (also a built-in
                             TimeoutError); `exec`: it as last seen, `within_s`
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, ParamSpec, TypeVar

import httpx
from pydantic import ValidationError

from suanli.wire.schemas import ExecResponse, RentalResponse, problem_text

T = TypeVar("T")
P = ParamSpec("P")
BAD_RESPONSE = "bad_response"  # an ApiError's code when the server's answer cannot be read
NOT_OURS = "http_error"  # ... when the error reply is not in suanli's shape: perhaps not suanli at all
SERVER_ERROR = "server_error"  # ... when it is not, but the server answered as suanli before: it failed
GATEWAY_RETRY_STATUSES = frozenset({502, 503, 504})  # a proxy's "the server is away, try again"


class ClientError(Exception):
    """Base of the SDK's errors."""


class ApiError(ClientError):
    """The server refused or failed a request."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        self.status, self.code, self.message, self.field = status, code, message, field
        where = f" (field {field})" if field else ""
        super().__init__(f"{status} {code}: {message}{where}")


class InvalidArgument(ApiError):
    """A method's argument its request model refuses, refused before anything is sent, as the server's 422
    `invalid` naming the field; `validation` is pydantic's account of every problem."""

    def __init__(self, validation: ValidationError) -> None:
        self.validation = validation
        first = validation.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        message = problem_text(first)
        super().__init__(422, "invalid", f"{field}: {message}" if field else message, field)


class GatewayError(ApiError):
    """A 502, 503 or 504: a gateway in front of the server (or the server) cannot answer for now, as while
    the server behind it restarts; `retry_after_s`: when its Retry-After says to ask again (None: it gave
    none), `answered`: one line saying what answered what, with the status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        *,
        retry_after_s: float | None = None,
        answered: str = "",
    ) -> None:
        self.retry_after_s, self.answered = retry_after_s, answered or f"HTTP {status}"
        super().__init__(status, code, message, field)


class ServerUnreachable(ClientError):
    """The server did not answer; `waited_s`: how long the call waited for an answer that never came (None
    when the connection was refused or broken instead); `last_status`: the gateway's 502/503/504 when one
    answered in its place (`wait`, following `output`), else None."""

    def __init__(self, message: str, waited_s: float | None = None, last_status: int | None = None) -> None:
        self.waited_s, self.last_status = waited_s, last_status
        super().__init__(message)


class RentalEnded(ClientError):
    """A rental waited for ended in a state not asked for, which it never leaves; `rental`: it as it ended."""

    def __init__(self, rental: RentalResponse, until: Collection[str]) -> None:
        self.rental = rental
        last = rental.events[-1].message if rental.events and rental.events[-1].message else ""
        asked = " or ".join(sorted(until))
        super().__init__(f"{rental.id} ended {rental.state}, not {asked}" + (f" ({last})" if last else ""))


class RentalWaitTimeout(ClientError, TimeoutError):
    """A rental waited for was not in a state asked for (`until`) when `timeout_s` passed; `rental`: it as
    last seen. Also a built-in TimeoutError, so `except TimeoutError` catches it as before."""

    def __init__(self, rental: RentalResponse, until: Collection[str], timeout_s: float) -> None:
        self.rental, self.until, self.timeout_s = rental, set(until), timeout_s
        asked = " or ".join(sorted(until))
        super().__init__(f"{rental.id} is {rental.state} after {timeout_s:g} s, not {asked}")


class ExecWaitTimeout(ClientError, TimeoutError):
    """A command waited for had not ended (exited, failed or lost) when `within_s` passed; `exec`: it as last
    seen. Also a built-in TimeoutError, so `except TimeoutError` catches it as before."""

    def __init__(self, exec: ExecResponse, within_s: float) -> None:
        self.exec, self.within_s = exec, within_s
        super().__init__(f"command {exec.id} is {exec.state} after {within_s:g} s, not ended")


def checks_arguments(method: Callable[P, T]) -> Callable[P, T]:
    """A method that builds its request from plain arguments: a value the request's model refuses is an
    `InvalidArgument` naming the field (raised before anything is sent), not pydantic's ValidationError."""

    @functools.wraps(method)
    def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except ValidationError as error:
            raise InvalidArgument(error) from None

    return checked


def api_error(response: httpx.Response, answered_as_suanli: bool) -> ApiError:
    """The error a 4xx/5xx reply means (as `_api_error` reads it); a `GatewayError` for a 502/503/504, with
    its Retry-After."""
    error = _api_error(response, answered_as_suanli)
    if response.status_code not in GATEWAY_RETRY_STATUSES:
        return error
    retry_after_s = _retry_after_s(response.headers.get("Retry-After"))
    return GatewayError(
        error.status,
        error.code,
        error.message,
        error.field,
        retry_after_s=retry_after_s,
        answered=_what_answered(response),
    )


def _retry_after_s(value: str | None) -> float | None:
    """A Retry-After header's wait in seconds (given in seconds or as an HTTP date); None: none or unread."""
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max((parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return None


def _api_error(response: httpx.Response, answered_as_suanli: bool) -> ApiError:
    """The error a 4xx/5xx reply means: suanli's own (its JSON shape), the server's failure (a bare 5xx from a
    server that answered as suanli before: a crash, a proxy in front of it), or a reply that may not be
    suanli's at all (`NOT_OURS`, with the hint to check the URL). Suanli's shape is `{"error": {...}}`; a
    gateway's `{"error": "text"}` or `{"error": null}` is not it."""
    detail = _error_object(response)
    if detail is not None:
        return ApiError(
            response.status_code, detail.get("code", "error"), detail.get("message", ""), detail.get("field")
        )
    if answered_as_suanli and response.status_code >= 500:
        return ApiError(response.status_code, SERVER_ERROR, _what_answered(response))
    return ApiError(
        response.status_code,
        NOT_OURS,
        f"{_what_answered(response)}; is it a suanli server? "
        "(check the URL given to `suanli login`, or SUANLI_URL)",
    )


def _error_object(response: httpx.Response) -> dict[str, Any] | None:
    """The object under `error` in a JSON reply, or None when the reply has none (not JSON, no `error`, or
    an `error` that is text, null or a list)."""
    try:
        detail = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return detail if isinstance(detail, dict) else None


def _what_answered(response: httpx.Response) -> str:
    """One line for an error reply not in suanli's shape (a proxy's page, another server on the port, a
    crash): what answered, not its HTML."""
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    where = f"{response.request.url.scheme}://{response.request.url.netloc.decode()}"
    said = " ".join(response.text.split())[:120] if kind in ("text/plain", "application/json") else ""
    return (
        f"{where} answered {response.request.method} {response.request.url.path} with HTTP "
        f"{response.status_code} {response.reason_phrase} ({kind}{': ' + said if said else ''})"
    )
