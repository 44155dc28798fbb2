"""A server-wide request body limit, as ASGI middleware: a body over it is answered 413 before the app reads
it, so no caller (authenticated or not) can make the server buffer and parse an unbounded body.

The declared `Content-Length` is checked before the app runs; a body sent without one (chunked) is counted
as the app reads it, and the read that crosses the limit ends the request with 413. Routes may be given a
larger limit of their own (the fleet file)."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from suanli.api.errors import error_response

Route = tuple[str, str]  # (method, path)


class BodyTooLarge(HTTPException):
    """The body crossed its limit while the app read it (raised from `receive`, rendered as 413)."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(413, too_large_message(limit_bytes))


def too_large_message(limit_bytes: int) -> str:
    """What a refused caller reads: the limit, in MiB where it is a whole number of them, and in bytes."""
    mib, rest = divmod(limit_bytes, 1024 * 1024)
    shown = f"{mib} MiB ({limit_bytes} bytes)" if mib and not rest else f"{limit_bytes} bytes"
    return f"the request body is larger than {shown}, the most this server reads"


class LimitBodySize:
    """413 for a request whose body is over `max_bytes` (or its route's own limit in `route_limits_bytes`)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, route_limits_bytes: Mapping[Route, int] | None = None
    ) -> None:
        self.app, self.max_bytes = app, max_bytes
        self.route_limits_bytes = dict(route_limits_bytes or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit_bytes = self.route_limits_bytes.get((scope["method"], scope["path"]), self.max_bytes)
        declared = _content_length(scope)
        if declared is not None and declared > limit_bytes:
            await _refuse(limit_bytes, scope, receive, send)
            return
        received_bytes, started = 0, False

        async def counted_receive() -> Message:
            nonlocal received_bytes
            message = await receive()
            if message["type"] == "http.request":
                received_bytes += len(message.get("body", b""))
                if received_bytes > limit_bytes:
                    raise BodyTooLarge(limit_bytes)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge:  # the app's handlers render it; this is for a reader outside them
            if started:
                raise
            await _refuse(limit_bytes, scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    """The declared body size; None when there is no (readable) Content-Length."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _refuse(limit_bytes: int, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(413, "too_large", too_large_message(limit_bytes))(scope, receive, send)
