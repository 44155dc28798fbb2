"""Every error as `{"error": {"code", "message", "field"}}`: app errors, validation errors, unknown routes,
and the server's own failures (500 `internal_error`, logged with their traceback)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from suanli.app.errors import (
    AppError,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    PaymentRequired,
    RateLimited,
    Unauthorized,
)
from suanli.wire.schemas import ErrorDetail, ErrorResponse, problem_text

STATUS = {
    Invalid: 400,
    Unauthorized: 401,
    PaymentRequired: 402,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    RateLimited: 429,
}
HTTP_CODES = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}
# what an agent's or an operator's request may be answered with
AGENT_ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 402, 403, 404, 409, 422)
}
# and a tenant's: each of its keys' requests count against SUANLI_API_RATE (`deps.caller`)
RATE_LIMITED: dict[int | str, dict[str, object]] = {
    429: {
        "model": ErrorResponse,
        "description": "The tenant passed SUANLI_API_RATE: try again after the Retry-After header's seconds.",
    },
}
INTERNAL_ERROR = "internal_error"  # the code of a 500: the server failed, its log says why
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {**AGENT_ERROR_RESPONSES, **RATE_LIMITED}


def error_response(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(code=code, message=message, field=field))
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


class RefuseNulInUrl:
    """400 for a URL whose path or query holds a NUL (`%00`): no id or name has one, and PostgreSQL cannot
    even compare text with it (a look-up would fail as a 500, not a 404)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and ("\x00" in scope["path"] or b"%00" in scope["query_string"]):
            message = "the URL holds a NUL character (%00), which no id, name or value has"
            await error_response(400, "invalid", message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_middleware(RefuseNulInUrl)

    @app.exception_handler(AppError)
    async def _app_error(_: Request, error: AppError) -> JSONResponse:
        status = next((s for kind, s in STATUS.items() if isinstance(error, kind)), 400)
        headers = {"Retry-After": str(error.retry_after_s)} if isinstance(error, RateLimited) else None
        return error_response(status, error.code, error.message, error.field, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
        location = [str(part) for part in first.get("loc", ())]
        if first.get("type") == "json_invalid":  # its place is a character offset, not a field
            at = f" at character {location[1]}" if len(location) > 1 else ""
            message = (
                f"the request body is not valid JSON{at}: {first.get('ctx', {}).get('error', 'invalid')}"
            )
            return error_response(422, "invalid", f"body: {message}", "body")
        if location and location[0] in ("body", "query", "path", "header"):
            location = location[1:]
        field = ".".join(location) or None
        message = problem_text(first)
        return error_response(422, "invalid", f"{field}: {message}" if field else message, field)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, error: HTTPException) -> JSONResponse:
        return error_response(
            error.status_code, HTTP_CODES.get(error.status_code, "error"), str(error.detail)
        )

    @app.exception_handler(Exception)
    async def _failed(request: Request, _: Exception) -> JSONResponse:
        """A failure no handler expects, in the API's shape so a client knows its server failed; Starlette
        logs the traceback after this answer. The cause stays in the log: it may name internals."""
        message = f"an unexpected error while handling {request.method} {request.url.path}"
        return error_response(500, INTERNAL_ERROR, message)
