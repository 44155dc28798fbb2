"""How an `AsyncClient` talks to the server: `Transport`'s sending over `httpx.AsyncClient`, awaited. What a
request and its answer mean (options, deadline, retry rules, body, errors, reading) is `exchange`'s, shared
with the sync transport; this module only sends."""

from __future__ import annotations

import time
from typing import Any, Self

import httpx
from pydantic import BaseModel

from suanli.client.exchange import (
    call_deadline,
    failure,
    http_options,
    read_answer,
    request_json,
    resending,
    unreachable,
)
from suanli.client.retries import timeout_until
from suanli.client.transport import DEFAULT_TIMEOUT_S, idempotent


class AsyncTransport:
    """An asyncio session with one suanli server (see `AsyncClient`): its `httpx.AsyncClient`, key and
    timeouts, the same as `Transport`'s; many calls may be awaited on it at once."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        call_timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        retries: int = 4,
    ) -> None:
        self._http = httpx.AsyncClient(**http_options(base_url, api_key, timeout_s), transport=transport)
        self._retries = retries
        self._call_timeout_s = call_timeout_s
        self._answered_as_suanli = False  # a reply in suanli's shape came: a later bare 5xx is its failure

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, response_type: Any, **request: Any) -> Any:
        """`Transport._call`, awaited: the request (`_send`'s arguments) sent and retried by the same rules,
        its answer read as `response_type`."""
        response = await self._send(method, path, **request)
        return self._read(method, path, response, response_type)

    async def _create(self, path: str, response_type: Any, request: BaseModel, key: str | None) -> Any:
        """`Transport._create`, awaited: POST `request` under an Idempotency-Key (`key`, or a fresh one its
        retries share), retried as a safe request."""
        return await self._call(
            "POST", path, response_type, body=request, headers=idempotent(key), retry=True
        )

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: dict[str, str] | list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        retry: bool | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """`_call`'s request, sent (and retried) as `Transport._send`'s; an error answer raised."""
        started = time.monotonic()
        deadline = call_deadline(started, self._call_timeout_s, deadline)
        json_body = request_json(body)

        async def send() -> httpx.Response:
            timeout = timeout_until(self._http.timeout, deadline)
            return await self._http.request(
                method, path, json=json_body, params=params, headers=headers, timeout=timeout
            )

        try:
            response = await resending(method, retry, self._retries, deadline)(send)()
        except httpx.TransportError as error:
            raise unreachable(error, self._http.base_url, started) from None
        error, self._answered_as_suanli = failure(response, self._answered_as_suanli)
        if error is not None:
            raise error
        return response

    def _read(self, method: str, path: str, response: httpx.Response, response_type: Any) -> Any:
        """A successful answer to `method path` read as `response_type` (`exchange.read_answer`)."""
        answer, as_suanli = read_answer(method, path, response, response_type)
        self._answered_as_suanli |= as_suanli
        return answer
