"""`Client`: typed calls to the REST API, with retries on connection failures for safe requests.

Errors:
    ClientError
     +-- ApiError            the server answered 4xx/5xx; `status`, `code`, `message`, `field`
     |   |                   (a 5xx the server failed with: `code` is its own, or `server_error` when the
     |   |                   answer is not in suanli's shape but the server answered as suanli before;
     |   |                   `http_error`: a reply that may not be suanli's at all)
     |   +-- InvalidArgument a method's argument its request model refuses, before anything is sent: the
     |                       422 `invalid` naming the field, as the server's; `validation`: pydantic's error
     +-- ServerUnreachable   no answer after retries (connection refused, timeout: `waited_s`)
     +-- RentalEnded         `wait` asked for a state the rental can no longer reach: it ended in another
     +-- RentalWaitTimeout   `wait`'s `timeout_s` passed first (also a built-in TimeoutError); `rental`: it
                             as last seen, `until`, `timeout_s`
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, ParamSpec, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from tenacity import (
    RetryCallState,
    retry,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    stop_before_delay,
    wait_exponential,
    wait_fixed,
)
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from suanli.wire.agent_schemas import (
    AgentRegisterRequest,
    AgentRegisterResponse,
    ExecReportRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinTokenCreateRequest,
    JoinTokenResponse,
    LogChunkRequest,
    LogChunkResponse,
    LogResponse,
    RentalGpuHistoryResponse,
    RentalGpuResponse,
    RentalRunResponse,
)
from suanli.wire.billing_schemas import (
    BalanceResponse,
    CreditRequest,
    InvoiceResponse,
    LedgerTransactionResponse,
    LedgerVerifyResponse,
    PayoutResponse,
    PriceEntryList,
    PriceEntryRequest,
    PriceEntryResponse,
    PriceResponse,
    SlaPostResponse,
    SlaResponse,
)
from suanli.wire.plan_schemas import (
    BudgetPatch,
    BudgetRequest,
    GrantResponse,
    LimitsPatch,
    LimitsRequest,
    LimitsResponse,
    PaymentTermsRequest,
    PaymentTermsResponse,
    PlanRequest,
    PlanResponse,
    RevenueReportRequest,
    RevenueReportResponse,
)
from suanli.wire.schemas import (
    ENDED_STATES,
    ContractCreateRequest,
    ContractOfferRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
    ContractTransferRequest,
    ExecCreateRequest,
    ExecResponse,
    FleetResponse,
    ForwardCreateRequest,
    KeyCreateRequest,
    KeyResponse,
    MaintenanceCreateRequest,
    MaintenanceResponse,
    MeResponse,
    NodeDrainResponse,
    NodeResponse,
    OfferResponse,
    RentalBidRequest,
    RentalCreateRequest,
    RentalDryRunResponse,
    RentalResizeRequest,
    RentalResponse,
    TenantCreateRequest,
    TenantResponse,
    WebhookChangeRequest,
    WebhookCreateRequest,
    WebhookResponse,
    problem_text,
)

T = TypeVar("T")
P = ParamSpec("P")
LEDGER_PAGE_LIMIT = 1000  # transactions per `GET /v1/ledger` page: the most the server sends in one
PAYOUT_PAGE_LIMIT = 1000  # lines per `GET /v1/payouts` page: the most the server sends in one
RENTALS_PAGE_LIMIT = 1000  # rentals per `GET /v1/rentals` page: the most the server sends in one


class BudgetChanges(TypedDict, total=False):
    """What `change_budget` may change; a budget given as None is removed."""

    daily_micros: int | None
    monthly_micros: int | None
    stop_running: bool


class LimitsChanges(TypedDict, total=False):
    """What `change_limits` may change; a quota or cap given as None is removed."""

    gpu_quota: dict[str, int | None]
    daily_cap_micros: int | None
    monthly_cap_micros: int | None
    fair_share_weight: float


DEFAULT_TIMEOUT_S = 30.0  # how long one request waits for each step of its answer (`Client(timeout_s=)`)
MIN_REQUEST_TIMEOUT_S = 0.1  # what a request bounded by a deadline (`wait`) gets at least, however near it is
MAX_RATE_WAIT_S = 30.0  # the longest a 429's Retry-After is waited out before sending again
# how long following a rental's output or waiting for its state goes on asking a server that does not answer
# (a restart, a new leader) before it gives up
RECONNECT_S = 120.0
BAD_RESPONSE = "bad_response"  # an ApiError's code when the server's answer cannot be read
NOT_OURS = "http_error"  # ... when the error reply is not in suanli's shape: perhaps not suanli at all
SERVER_ERROR = "server_error"  # ... when it is not, but the server answered as suanli before: it failed
# failures after which a safe request is sent again: its answer was lost, whether or not the server acted
LOST_ANSWER_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
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


class ServerUnreachable(ClientError):
    """The server did not answer; `waited_s`: how long the call waited for an answer that never came (None
    when the connection was refused or broken instead)."""

    def __init__(self, message: str, waited_s: float | None = None) -> None:
        self.waited_s = waited_s
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


def _checks_arguments(method: Callable[P, T]) -> Callable[P, T]:
    """A method that builds its request from plain arguments: a value the request's model refuses is an
    `InvalidArgument` naming the field (raised before anything is sent), not pydantic's ValidationError."""

    @functools.wraps(method)
    def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except ValidationError as error:
            raise InvalidArgument(error) from None

    return checked


def _idempotent(key: str | None) -> dict[str, str]:
    """The Idempotency-Key header for a create: `key`, or a fresh one for this call that its retries share."""
    return {"Idempotency-Key": key or str(uuid.uuid4())}


def _segment(value: object) -> str:
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


class Client:
    """A session with one suanli server, authenticated by an API key. `timeout_s` bounds each send of a
    request (each step of its answer); `call_timeout_s`, when given, bounds each call, its retries included:
    they share one deadline, so a call on a server that never answers ends by it."""

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

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- identity, tenants, keys -------------------------------------------------------------------

    def me(self) -> MeResponse:
        return self._call("GET", "/v1/me", MeResponse)

    @_checks_arguments
    def create_tenant(self, name: str, role: str = "tenant") -> TenantResponse:
        body = TenantCreateRequest(name=name, role=role)  # type: ignore[arg-type]
        return self._call("POST", "/v1/tenants", TenantResponse, body=body)

    def tenants(self) -> list[TenantResponse]:
        return self._call("GET", "/v1/tenants", list[TenantResponse])

    @_checks_arguments
    def create_key(self, tenant_id: str, label: str = "") -> KeyResponse:
        body = KeyCreateRequest(label=label)
        return self._call("POST", f"/v1/tenants/{_segment(tenant_id)}/keys", KeyResponse, body=body)

    def keys(self, tenant_id: str) -> list[KeyResponse]:
        """The tenant's API keys (never their secrets), revoked ones included."""
        return self._call("GET", f"/v1/tenants/{_segment(tenant_id)}/keys", list[KeyResponse])

    @_checks_arguments
    def create_webhook(self, url: str, events: Sequence[str] = ()) -> WebhookResponse:
        """Your rentals' events from now on (of the kinds in `events`; none: all) go to `url`; the answer's
        `secret` (shown once) signs them."""
        body = WebhookCreateRequest(url=url, events=list(events))
        return self._call("POST", "/v1/webhooks", WebhookResponse, body=body)

    def webhooks(self) -> list[WebhookResponse]:
        return self._call("GET", "/v1/webhooks", list[WebhookResponse])

    @_checks_arguments
    def change_webhook(
        self, webhook_id: str, url: str | None = None, events: Sequence[str] | None = None
    ) -> WebhookResponse:
        """A new URL or event kinds (None: as is; `events=[]`: every kind) for one of your webhooks."""
        body = WebhookChangeRequest(url=url, events=None if events is None else list(events))
        return self._call(
            "PATCH", f"/v1/webhooks/{_segment(webhook_id)}", WebhookResponse, body=body, retry=True
        )

    def remove_webhook(self, webhook_id: str) -> WebhookResponse:
        return self._call("DELETE", f"/v1/webhooks/{_segment(webhook_id)}", WebhookResponse, retry=True)

    def revoke_key(self, tenant_id: str, key_id: str) -> KeyResponse:
        """Revoke a key; the server's answer is the key as revoked (its secret not shown)."""
        return self._call("DELETE", f"/v1/tenants/{_segment(tenant_id)}/keys/{_segment(key_id)}", KeyResponse)

    # --- fleet -------------------------------------------------------------------------------------

    def put_fleet(self, toml_text: str, force: bool = False) -> FleetResponse:
        """Replace the fleet; refused (409) when signed contracts would be short of GPUs, unless `force`."""
        return self._call(
            "PUT",
            "/v1/fleet",
            FleetResponse,
            content=toml_text.encode(),
            headers={"Content-Type": "application/toml"},
            params={"force": "true"} if force else None,
        )

    def nodes(self) -> list[NodeResponse]:
        return self._call("GET", "/v1/nodes", list[NodeResponse])

    def drain(self, node: str, force: bool = False) -> NodeDrainResponse:
        """Cordon `node`; refused (409) when a signed contract would be short, unless `force` (then the answer
        lists the contracts left short, with how short)."""
        params = {"force": "true"} if force else None
        return self._call("POST", f"/v1/nodes/{_segment(node)}/drain", NodeDrainResponse, params=params)

    def undrain(self, node: str) -> NodeResponse:
        return self._call("POST", f"/v1/nodes/{_segment(node)}/undrain", NodeResponse)

    def schedule_maintenance(self, request: MaintenanceCreateRequest) -> MaintenanceResponse:
        return self._call("POST", "/v1/fleet/maintenance", MaintenanceResponse, body=request)

    def maintenance(self, include_past: bool = False) -> list[MaintenanceResponse]:
        params = {"include_past": "true"} if include_past else None
        return self._call("GET", "/v1/fleet/maintenance", list[MaintenanceResponse], params=params)

    def cancel_maintenance(self, window_id: str) -> MaintenanceResponse:
        return self._call("DELETE", f"/v1/fleet/maintenance/{_segment(window_id)}", MaintenanceResponse)

    def offers(self, query: str = "") -> list[OfferResponse]:
        return self._call("GET", "/v1/offers", list[OfferResponse], params={"q": query} if query else None)

    # --- rentals -----------------------------------------------------------------------------------

    def create_rental(
        self, request: RentalCreateRequest, idempotency_key: str | None = None
    ) -> RentalResponse:
        """Create a rental under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same rental rather than renting a second one."""
        return self._call(
            "POST",
            "/v1/rentals",
            RentalResponse,
            body=request,
            headers=_idempotent(idempotency_key),
            retry=True,
        )

    def dry_run_rental(self, request: RentalCreateRequest) -> RentalDryRunResponse:
        """What creating `request` now would do, creating nothing: where it would start and at what rate,
        whom it would preempt, or why it would wait."""
        return self._call("POST", "/v1/rentals/dry-run", RentalDryRunResponse, body=request, retry=True)

    def rentals(
        self,
        states: Iterable[str] = (),
        name: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[RentalResponse]:
        """Your rentals, newest first: every one, or the newest `limit`; only those in `states` (e.g.
        `{"pending", "running"}`) and of `name` when given (ending in `*`: those whose name starts with what
        is before it); past the rental `after` when given. Fetched a page at a time, following each page's
        `Link` rel="next" (past its last rental) while the server says more follow."""
        filters = [("state", state) for state in sorted(states)]
        if name is not None:
            filters.append(("name", name))
        found: list[RentalResponse] = []
        while limit is None or len(found) < limit:
            size = RENTALS_PAGE_LIMIT if limit is None else min(RENTALS_PAGE_LIMIT, limit - len(found))
            params = [*filters, ("limit", str(size)), *([("after", after)] if after else [])]
            response = self._send("GET", "/v1/rentals", params=params)
            page = self._read("GET", "/v1/rentals", response, list[RentalResponse])
            found.extend(page)
            after = _next_after(response)
            if after is None or not page:  # the last page (or an older server's only one)
                break
        return found

    def rental(self, rental_id: str) -> RentalResponse:
        return self._rental(rental_id)

    def _rental(self, rental_id: str, deadline: float | None = None) -> RentalResponse:
        """The rental, its request and retries bounded by `deadline` (`time.monotonic()`) when given."""
        return self._call("GET", f"/v1/rentals/{_segment(rental_id)}", RentalResponse, deadline=deadline)

    def stop(self, rental_id: str) -> RentalResponse:
        return self._call("POST", f"/v1/rentals/{_segment(rental_id)}/stop", RentalResponse, retry=True)

    @_checks_arguments
    def set_bid(self, rental_id: str, bid_micros_per_gpu_hour: int) -> RentalResponse:
        """A spot rental's new bid per GPU-hour (live: at least its pool's floor)."""
        body = RentalBidRequest(bid_micros_per_gpu_hour=bid_micros_per_gpu_hour)
        return self._call("PUT", f"/v1/rentals/{_segment(rental_id)}/bid", RentalResponse, body=body)

    @_checks_arguments
    def resize(self, rental_id: str, *, nodes: int | None = None, gpus: int | None = None) -> RentalResponse:
        body = RentalResizeRequest(nodes=nodes, gpus=gpus)
        return self._call("PATCH", f"/v1/rentals/{_segment(rental_id)}", RentalResponse, body=body)

    def logs(
        self, rental_id: str, offset: int = 0, node: str | None = None, tail: int | None = None
    ) -> LogResponse:
        """The rental's output from character `offset`, or its last `tail` characters (every node's, or
        `node`'s); follow with `next_offset` until `done`."""
        params = {"offset": str(offset)} | ({"node": node} if node is not None else {})
        if tail is not None:
            params["tail"] = str(tail)
        return self._call("GET", f"/v1/rentals/{_segment(rental_id)}/logs", LogResponse, params=params)

    def output(
        self,
        rental_id: str,
        *,
        follow: bool = True,
        node: str | None = None,
        poll_s: float = 1.0,
        on_wait: Callable[[], None] | None = None,
        offset: int = 0,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> Iterator[str]:
        """The rental's output (every node's, or `node`'s) from character `offset` (the start), in pieces as
        they come; with `follow`, until the rental has ended and all of it is read. `on_wait` runs each time
        nothing new has come, before the next poll. A follow rides out a server that does not answer for up
        to `reconnect_s` (a restart, a change of leader; `ride_out_restarts`), resuming where it was;
        `on_unreachable` is told when it starts to wait for it."""
        read = self.logs
        if follow:
            read = ride_out_restarts(reconnect_s, poll_s, on_unreachable=on_unreachable)(self.logs)
        while True:
            page = read(rental_id, offset, node)
            if page.data:
                yield page.data
            offset = page.next_offset
            if page.data and not page.done:
                continue
            if not follow or page.done:
                return
            if on_wait is not None:
                with contextlib.suppress(ServerUnreachable):  # the next poll waits for the server
                    on_wait()
            time.sleep(poll_s)

    def wait(
        self,
        rental_id: str,
        until: Collection[str] = ENDED_STATES,
        *,
        timeout_s: float | None = None,
        poll_s: float = 1.0,
        reconnect_s: float = RECONNECT_S,
        on_unreachable: Callable[[ServerUnreachable], None] | None = None,
    ) -> RentalResponse:
        """The rental once its state is one of `until` (default: it has ended); `RentalEnded` as soon as it
        has ended in another (it can never get there), `RentalWaitTimeout` when `timeout_s` passes first. A
        server that does not answer is waited for as `output` does (up to `reconnect_s`; `on_unreachable`
        told when it starts), never past `timeout_s`: the deadline bounds each request and retry too, so a
        server that does not answer by then is `ServerUnreachable`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            within_s = None if deadline is None else deadline - time.monotonic()
            ride_out = ride_out_restarts(reconnect_s, poll_s, within_s, on_unreachable)
            rental = ride_out(self._rental)(rental_id, deadline)
            if rental.state in until:
                return rental
            if rental.state in ENDED_STATES:
                raise RentalEnded(rental, until)
            if deadline is not None and time.monotonic() >= deadline:
                raise RentalWaitTimeout(rental, until, timeout_s)
            time.sleep(poll_s if deadline is None else max(min(poll_s, deadline - time.monotonic()), 0.0))

    def rental_runs(self, rental_id: str) -> list[RentalRunResponse]:
        return self._call("GET", f"/v1/rentals/{_segment(rental_id)}/runs", list[RentalRunResponse])

    def rental_gpus(self, rental_id: str) -> list[RentalGpuResponse]:
        """The GPUs the rental holds now, with their last utilization, memory and power readings."""
        return self._call("GET", f"/v1/rentals/{_segment(rental_id)}/gpus", list[RentalGpuResponse])

    def rental_gpu_history(self, rental_id: str, minutes: int = 60) -> list[RentalGpuHistoryResponse]:
        """The GPUs the rental held in the last `minutes` (running or ended), each with its readings by
        minute while it held them (kept a week)."""
        path = f"/v1/rentals/{_segment(rental_id)}/gpus/history"
        return self._call("GET", path, list[RentalGpuHistoryResponse], params={"minutes": minutes})

    @_checks_arguments
    def exec(
        self,
        rental_id: str,
        command: Sequence[str],
        *,
        node_rank: int = 0,
        timeout_s: int = 60,
        stdin: bool = False,
        tty: bool = False,
        separate_stderr: bool = False,
    ) -> ExecResponse:
        """Queue `command` to run inside the running rental (on its node of `node_rank`); see `wait_exec`.
        With `stdin` (and `tty`: on a terminal), attach to it with `attach_exec` to stream its input and
        output; `separate_stderr` (without `tty`) marks each output frame with its stream
        (`suanli.client.streams.output_stream`)."""
        body = ExecCreateRequest(
            command=list(command),
            node_rank=node_rank,
            timeout_s=timeout_s,
            stdin=stdin,
            tty=tty,
            separate_stderr=separate_stderr,
        )
        return self._call("POST", f"/v1/rentals/{_segment(rental_id)}/execs", ExecResponse, body=body)

    @_checks_arguments
    def forward(
        self, rental_id: str, port: int, *, node_rank: int = 0, timeout_s: int = 8 * 3600
    ) -> ExecResponse:
        """Queue a port forward to `port` of the running rental (on its node of `node_rank`); attach to it
        with `attach_exec` to carry TCP connections (see `suanli.cli.forward`)."""
        body = ForwardCreateRequest(port=port, node_rank=node_rank, timeout_s=timeout_s)
        return self._call("POST", f"/v1/rentals/{_segment(rental_id)}/forwards", ExecResponse, body=body)

    def attach_exec(self, rental_id: str, exec_id: str) -> ClientConnection:
        """A WebSocket to an attached command: send its input as binary frames (a text frame
        `{"rows": R, "cols": C}` sets its terminal's size, `{"eof": true}` ends its input); its output
        comes as binary frames until it ends. Then `wait_exec` gives its exit code. Close code 4000 + an
        HTTP status refuses (the reason says why); 4410: it ended before its node's agent came."""
        return self._websocket(f"/v1/rentals/{_segment(rental_id)}/execs/{_segment(exec_id)}/attach")

    def attach_agent_exec(self, exec_id: str) -> ClientConnection:
        """The node agent's end of an attached command (with the node key)."""
        return self._websocket(f"/v1/agents/execs/{_segment(exec_id)}/attach")

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

    def exec_status(self, rental_id: str, exec_id: str) -> ExecResponse:
        return self._call("GET", f"/v1/rentals/{_segment(rental_id)}/execs/{_segment(exec_id)}", ExecResponse)

    def execs(self, rental_id: str) -> list[ExecResponse]:
        """The rental's commands, newest first."""
        return self._call("GET", f"/v1/rentals/{_segment(rental_id)}/execs", list[ExecResponse])

    def wait_exec(
        self,
        rental_id: str,
        exec_id: str,
        *,
        poll_s: float = 0.5,
        on_output: Callable[[str, int], None] | None = None,
        within_s: float | None = None,
    ) -> ExecResponse:
        """The command once it has ended (exited, failed or lost): the server decides `lost` by its timeout,
        so this needs no deadline of its own; `within_s` gives one (TimeoutError past it). `on_output(text,
        skipped)`: what it printed since the last call, as it runs, after `skipped` characters the server
        no longer kept (0: none)."""
        deadline = None if within_s is None else time.monotonic() + within_s
        shown = 0
        while True:
            found = self.exec_status(rental_id, exec_id)
            if on_output is not None and found.output_chars > shown:
                start = found.output_chars - len(found.output)
                on_output(found.output[max(shown - start, 0) :], max(start - shown, 0))
                shown = found.output_chars
            if found.state in ("exited", "failed", "lost"):
                return found
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"command {exec_id} has not ended within {within_s:g} s")
            time.sleep(poll_s)

    # --- agents (join tokens with an operator key; the rest with the node key) ----------------------

    @_checks_arguments
    def create_join_token(self, node: str, ttl_s: float | None = None) -> JoinTokenResponse:
        body = JoinTokenCreateRequest(node=node, ttl_s=ttl_s)
        return self._call("POST", "/v1/join-tokens", JoinTokenResponse, body=body)

    @_checks_arguments
    def register_agent(self, token: str, inventory: dict[str, Any]) -> AgentRegisterResponse:
        body = AgentRegisterRequest(token=token, inventory=inventory)
        return self._call("POST", "/v1/agents/register", AgentRegisterResponse, body=body)

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Report workloads and telemetry; safe to retry (reports are states, not increments)."""
        return self._call("POST", "/v1/agents/heartbeat", HeartbeatResponse, body=request, retry=True)

    def report_exec(self, exec_id: str, report: ExecReportRequest) -> ExecResponse:
        """Say a command started or how it ended; safe to retry (a state it has already is a no-op)."""
        return self._call(
            "POST", f"/v1/agents/execs/{_segment(exec_id)}", ExecResponse, body=report, retry=True
        )

    @_checks_arguments
    def upload_log(self, rental_id: str, offset: int, data: bytes) -> LogChunkResponse:
        """Send one chunk read at byte `offset` of the rental's log; retried safely (the server dedups)."""
        body = LogChunkRequest(
            rental_id=rental_id,
            offset=offset,
            data=data.decode("utf-8", errors="replace"),
            size_bytes=len(data),
        )
        return self._call("POST", "/v1/agents/logs", LogChunkResponse, body=body, retry=True)

    # --- contracts ---------------------------------------------------------------------------------

    def create_contract(
        self, request: ContractCreateRequest, idempotency_key: str | None = None
    ) -> ContractResponse:
        """Sign and prepay under an idempotency key (a new one when none is given), so a retry after a lost
        answer returns the same contract rather than signing and charging twice."""
        return self._call(
            "POST",
            "/v1/contracts",
            ContractResponse,
            body=request,
            headers=_idempotent(idempotency_key),
            retry=True,
        )

    def quote_contract(self, request: ContractCreateRequest) -> ContractQuoteResponse:
        """What signing `request` would hold and prepay now; signs nothing."""
        return self._call("POST", "/v1/contracts/quote", ContractQuoteResponse, body=request)

    def offer_contract(self, request: ContractOfferRequest) -> ContractOfferResponse:
        """Admin: offer a tenant a contract at a negotiated price."""
        return self._call("POST", "/v1/contract-offers", ContractOfferResponse, body=request)

    def contract_offers(self) -> list[ContractOfferResponse]:
        return self._call("GET", "/v1/contract-offers", list[ContractOfferResponse])

    def accept_offer(self, offer_id: str) -> ContractResponse:
        """Sign an offered contract at its price; safe to retry (accepting again returns the same one)."""
        return self._call(
            "POST", f"/v1/contract-offers/{_segment(offer_id)}/accept", ContractResponse, retry=True
        )

    def decline_offer(self, offer_id: str) -> ContractOfferResponse:
        return self._call(
            "POST", f"/v1/contract-offers/{_segment(offer_id)}/decline", ContractOfferResponse, retry=True
        )

    def contracts(self) -> list[ContractResponse]:
        return self._call("GET", "/v1/contracts", list[ContractResponse])

    @_checks_arguments
    def transfer_contract(self, contract_id: str, to_tenant_id: str) -> ContractResponse:
        body = ContractTransferRequest(to_tenant_id=to_tenant_id)
        return self._call(
            "POST", f"/v1/contracts/{_segment(contract_id)}/transfer", ContractResponse, body=body
        )

    # --- billing ---------------------------------------------------------------------------------------

    def prices(self) -> list[PriceResponse]:
        return self._call("GET", "/v1/prices", list[PriceResponse])

    @_checks_arguments
    def set_prices(self, entries: list[PriceEntryRequest]) -> list[PriceEntryResponse]:
        """Admin: add price book entries (all or none); returns them as stored."""
        return self._call("PUT", "/v1/prices", list[PriceEntryResponse], body=PriceEntryList(entries))

    def balance(self, tenant_id: str | None = None) -> BalanceResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/balance", BalanceResponse, params=params)

    @_checks_arguments
    def credit(
        self,
        tenant_id: str,
        amount_micros: int,
        *,
        grant: bool = False,
        memo: str = "",
        key: str | None = None,
        expires_at: datetime | None = None,
    ) -> LedgerTransactionResponse:
        """Admin: top up (or grant, optionally expiring) a tenant; the Idempotency-Key makes a retry post
        nothing twice."""
        body = CreditRequest(amount_micros=amount_micros, grant=grant, memo=memo, expires_at=expires_at)
        return self._call(
            "POST",
            f"/v1/tenants/{_segment(tenant_id)}/credit",
            LedgerTransactionResponse,
            body=body,
            headers=_idempotent(key),
            retry=True,
        )

    def create_plan(self, tenant_id: str, request: PlanRequest) -> PlanResponse:
        """Admin: put a tenant on a membership (its fee is posted now) or a revenue-share plan."""
        return self._call("POST", f"/v1/tenants/{_segment(tenant_id)}/plans", PlanResponse, body=request)

    def plans(self, tenant_id: str | None = None) -> list[PlanResponse]:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/plans", list[PlanResponse], params=params)

    @_checks_arguments
    def report_revenue(
        self, month: str, revenue_micros: int, tenant_id: str | None = None
    ) -> RevenueReportResponse:
        """A revenue-share tenant's monthly revenue report (once per month; repeating it posts nothing)."""
        params = {"tenant": tenant_id} if tenant_id else None
        body = RevenueReportRequest(month=month, revenue_micros=revenue_micros)
        return self._call(
            "POST", "/v1/revenue-reports", RevenueReportResponse, body=body, params=params, retry=True
        )

    def grants(self, tenant_id: str | None = None) -> list[GrantResponse]:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/grants", list[GrantResponse], params=params)

    @_checks_arguments
    def set_payment_terms(
        self, tenant_id: str, mode: str, credit_limit_micros: int = 0
    ) -> PaymentTermsResponse:
        body = PaymentTermsRequest(mode=mode, credit_limit_micros=credit_limit_micros)  # type: ignore[arg-type]
        return self._call(
            "PUT",
            f"/v1/tenants/{_segment(tenant_id)}/payment-terms",
            PaymentTermsResponse,
            body=body,
            retry=True,
        )

    def payment_terms(self, tenant_id: str | None = None) -> PaymentTermsResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/payment-terms", PaymentTermsResponse, params=params)

    @_checks_arguments
    def set_limits(
        self,
        tenant_id: str,
        gpu_quota: dict[str, int],
        daily_cap_micros: int | None = None,
        monthly_cap_micros: int | None = None,
        fair_share_weight: float = 1.0,
    ) -> LimitsResponse:
        body = LimitsRequest(
            gpu_quota=gpu_quota,
            daily_cap_micros=daily_cap_micros,
            monthly_cap_micros=monthly_cap_micros,
            fair_share_weight=fair_share_weight,
        )
        return self._call(
            "PUT", f"/v1/tenants/{_segment(tenant_id)}/limits", LimitsResponse, body=body, retry=True
        )

    @_checks_arguments
    def change_limits(self, tenant_id: str, **changes: Unpack[LimitsChanges]) -> LimitsResponse:
        """Admin: change only the limits named (a quota or cap given as None is removed); the rest stay."""
        body = LimitsPatch(**changes)
        return self._call(
            "PATCH",
            f"/v1/tenants/{_segment(tenant_id)}/limits",
            LimitsResponse,
            body=body,
            retry=True,
            merge_patch=True,
        )

    @_checks_arguments
    def set_budget(
        self,
        daily_micros: int | None = None,
        monthly_micros: int | None = None,
        tenant_id: str | None = None,
        *,
        stop_running: bool = False,
    ) -> LimitsResponse:
        """Your own spend budget per UTC day and month (None: none); a rental past it waits (`spend_cap`),
        and with `stop_running` your running rentals stop once it is spent."""
        body = BudgetRequest(
            daily_micros=daily_micros, monthly_micros=monthly_micros, stop_running=stop_running
        )
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("PUT", "/v1/budget", LimitsResponse, body=body, params=params, retry=True)

    @_checks_arguments
    def change_budget(self, tenant_id: str | None = None, **changes: Unpack[BudgetChanges]) -> LimitsResponse:
        """Change only what is named of your own budget (one given as None is removed); the rest stays."""
        params = {"tenant": tenant_id} if tenant_id else None
        body = BudgetPatch(**changes)
        return self._call(
            "PATCH", "/v1/budget", LimitsResponse, body=body, params=params, retry=True, merge_patch=True
        )

    def limits(self, tenant_id: str | None = None) -> LimitsResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/limits", LimitsResponse, params=params)

    def ledger(
        self, tenant_id: str | None = None, after: int = 0, limit: int | None = None
    ) -> list[LedgerTransactionResponse]:
        """Your transactions in chain order past `seq` `after` (an admin: all, or one tenant's): every one,
        or the first `limit`. Fetched a page at a time, each after the last `seq` of the one before."""
        found: list[LedgerTransactionResponse] = []
        while limit is None or len(found) < limit:
            size = LEDGER_PAGE_LIMIT if limit is None else min(LEDGER_PAGE_LIMIT, limit - len(found))
            params = {"after": str(after), "limit": str(size), **({"tenant": tenant_id} if tenant_id else {})}
            page = self._call("GET", "/v1/ledger", list[LedgerTransactionResponse], params=params)
            found.extend(page)
            if len(page) < size or page[-1].seq is None:  # the last page (or an older server's whole ledger)
                break
            after = page[-1].seq
        return found

    def verify_ledger(self) -> LedgerVerifyResponse:
        return self._call("GET", "/v1/ledger/verify", LedgerVerifyResponse)

    def payouts(self, provider: str | None = None, limit: int | None = None) -> list[PayoutResponse]:
        """Provider payables per rental (a provider key its own; an admin all, or one provider): every line,
        or the first `limit`. Fetched a page at a time, each after the last line of the one before; a
        provider whose lines span pages comes back once, with all of them."""
        by_provider: dict[str, PayoutResponse] = {}
        after, count = None, 0
        while limit is None or count < limit:
            size = PAYOUT_PAGE_LIMIT if limit is None else min(PAYOUT_PAGE_LIMIT, limit - count)
            params = {"limit": str(size), **({"provider": provider} if provider else {})}
            page = self._call(
                "GET",
                "/v1/payouts",
                list[PayoutResponse],
                params={**params, **({"after": after} if after else {})},
            )
            for payout in page:
                found = by_provider.setdefault(payout.provider, payout.model_copy(update={"lines": []}))
                found.lines.extend(payout.lines)
            lines = [(p.provider, line.ref) for p in page for line in p.lines]
            count += len(lines)
            if len(lines) != size:  # the last page (or an older server's every line, however many)
                break
            after = "/".join(lines[-1])
        return list(by_provider.values())

    def invoice(self, month: str, tenant_id: str | None = None) -> InvoiceResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", f"/v1/invoices/{_segment(month)}", InvoiceResponse, params=params)

    def invoice_csv(self, month: str, tenant_id: str | None = None) -> str:
        """The invoice as CSV text."""
        params: dict[str, str] = {"format": "csv"}
        if tenant_id:
            params["tenant"] = tenant_id
        return self._call("GET", f"/v1/invoices/{_segment(month)}", str, params=params, raw=True)

    def sla(self, month: str, tenant_id: str | None = None) -> SlaResponse:
        """The month's availability of the caller's rentals, the outages that hit them and the credit owed."""
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", f"/v1/sla/{_segment(month)}", SlaResponse, params=params)

    def post_sla(self, month: str) -> SlaPostResponse:
        """Admin: post an ended month's SLA credits (each tenant's once, however often this is called)."""
        return self._call("POST", f"/v1/admin/sla/{_segment(month)}", SlaPostResponse)

    # --- plumbing ----------------------------------------------------------------------------------

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
            timeout = _timeout_until(self._http.timeout, deadline)
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
            error = _api_error(response, self._answered_as_suanli)
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


def _next_after(response: httpx.Response) -> str | None:
    """The cursor (`after`) of the page its `Link` rel="next" header names; None on the last page."""
    url = response.links.get("next", {}).get("url")
    return None if url is None else httpx.URL(url).params.get("after")


def _timeout_until(timeout: httpx.Timeout, deadline: float | None) -> httpx.Timeout:
    """The client's `timeout`, each of its phases cut to what is left before `deadline` (when given)."""
    if deadline is None:
        return timeout
    left_s = max(deadline - time.monotonic(), MIN_REQUEST_TIMEOUT_S)
    phases = {"connect": timeout.connect, "read": timeout.read, "write": timeout.write, "pool": timeout.pool}
    return httpx.Timeout(**{name: left_s if s is None else min(s, left_s) for name, s in phases.items()})


def _stop(attempts: int, within_s: float | None):
    """Stop after `attempts` sends, or (given `within_s`) before a retry that would start past it."""
    after_attempts = stop_after_attempt(max(attempts, 1))
    return after_attempts if within_s is None else after_attempts | stop_before_delay(max(within_s, 0.0))


def retry_on_connection_errors(attempts: int, within_s: float | None = None):
    """Retry a safe send whose answer did not come (a connection refused, reset or timed out, whether or not
    the server got it) or that a gateway in front answered with "try again" (502/503/504), with exponential
    backoff (0.2 s doubling, capped at 3 s), none that would start past `within_s`. The last failure is
    raised, or its reply returned."""
    return retry(
        retry=retry_if_exception_type(LOST_ANSWER_ERRORS) | retry_if_result(_gateway_failed),
        stop=_stop(attempts, within_s),
        wait=wait_exponential(multiplier=0.2, max=3.0),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome is not None else None,
    )


def ride_out_restarts(
    reconnect_s: float,
    poll_s: float,
    within_s: float | None = None,
    on_unreachable: Callable[[ServerUnreachable], None] | None = None,
):
    """Call again, every `poll_s`, a call that found the server not answering (`ServerUnreachable`, its own
    retries spent: a restart, a change of leader), for up to `reconnect_s` from its first try and none that
    would start past `within_s`; `on_unreachable` is told before the first wait. The last failure is raised.
    Following output and waiting for a rental's state share this rule."""

    def tell(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if on_unreachable is not None and state.attempt_number == 1 and isinstance(error, ServerUnreachable):
            on_unreachable(error)

    stop = stop_after_delay(max(reconnect_s, 0.0))
    return retry(
        retry=retry_if_exception_type(ServerUnreachable),
        stop=stop if within_s is None else stop | stop_before_delay(max(within_s, 0.0)),
        wait=wait_fixed(poll_s),
        before_sleep=tell,
        reraise=True,
    )


def _gateway_failed(response: httpx.Response) -> bool:
    return response.status_code in GATEWAY_RETRY_STATUSES


def retry_when_rate_limited(attempts: int, within_s: float | None = None):
    """Send again after a 429, once its Retry-After has passed (at most `MAX_RATE_WAIT_S` a time), unless that
    would be past `within_s`: the server did nothing with a limited request, so any method may be sent again.
    The last 429 is returned."""

    def retry_after(state: RetryCallState) -> float:
        response = state.outcome.result() if state.outcome is not None else None
        try:
            wait_s = float(response.headers.get("Retry-After", "1")) if response is not None else 1.0
        except ValueError:  # an HTTP date: not what this server sends
            wait_s = 1.0
        return min(max(wait_s, 0.0), MAX_RATE_WAIT_S)

    return retry(
        retry=retry_if_result(lambda response: response.status_code == 429),
        stop=_stop(attempts, within_s),
        wait=retry_after,
        retry_error_callback=lambda state: state.outcome.result() if state.outcome is not None else None,
    )


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
