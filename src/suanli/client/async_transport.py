"""How an `AsyncClient` talks to the server: `Transport`'s sending over `httpx.AsyncClient`, awaited. What a
request and its answer mean (options, deadline, retry rules, body, errors, reading) is `exchange`'s, and what
each call sends is a `calls.Call`, both shared with the sync transport; this module only sends."""

from __future__ import annotations

import time
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel

from suanli.client.calls import Call, Pager
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
from suanli.client.transport import DEFAULT_TIMEOUT_S, next_after

Result = TypeVar("Result")


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

    async def _ask(self, call: Call[Result], deadline: float | None = None) -> Result:
        """`Transport._ask`, awaited: `call` sent (and retried) as it says, its answer read as it says; its
        retries end by `deadline` (`time.monotonic()`) when given."""
        return (await self._answered(call, deadline))[0]

    async def _answered(self, call: Call[Result], deadline: float | None = None) -> tuple[Result, str | None]:
        """`call`'s answer and the cursor its `Link` rel="next" names (None: none)."""
        response = await self._send(call.method, call.path, **call.sending(), deadline=deadline)
        answer = self._read(call.method, call.path, response, call.response_type, raw=call.raw)
        return answer, next_after(response)

    async def _pages(self, pager: Pager[Result]) -> Result:
        """`Transport._pages`, awaited: what `pager` returns once each call it yields is answered."""
        try:
            call = next(pager)
            while True:
                call = pager.send(await self._answered(call))
        except StopIteration as done:
            return done.value

    async def _send(
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
        """`_ask`'s request, sent (and retried) as `Transport._send`'s; an error answer raised."""
        started = time.monotonic()
        deadline = call_deadline(started, self._call_timeout_s, deadline)
        json_body = request_json(body, merge_patch)

        async def send() -> httpx.Response:
            timeout = timeout_until(self._http.timeout, deadline)
            return await self._http.request(
                method, path, json=json_body, content=content, params=params, headers=headers, timeout=timeout
            )

        try:
            response = await resending(method, retry, self._retries, deadline)(send)()
        except httpx.TransportError as error:
            raise unreachable(error, self._http.base_url, started) from None
        error, self._answered_as_suanli = failure(response, self._answered_as_suanli)
        if error is not None:
            raise error
        return response

    def _read(
        self, method: str, path: str, response: httpx.Response, response_type: Any, *, raw: bool = False
    ) -> Any:
        """A successful answer to `method path` read as `response_type` (its text when `raw`;
        `exchange.read_answer`)."""
        answer, as_suanli = read_answer(method, path, response, response_type, raw=raw)
        self._answered_as_suanli |= as_suanli
        return answer
