"""`Client`: typed calls to the REST API, with retries on connection failures for safe requests.

The calls are grouped by area (`accounts`, `fleet`, `rentals`, `execs`, `agents`, `contracts`, `billing`),
over `transport` (sending, reading, paging, idempotency keys), `retries` (retry and deadline rules) and
`errors` (the SDK's error types and how an error answer is read); this module puts them together, with the
lists fetched a page at a time, and still exports every name it did before they were split out.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from suanli.client.accounts import AccountCalls
from suanli.client.agents import AgentCalls
from suanli.client.billing import BillingCalls, BudgetChanges, LimitsChanges
from suanli.client.contracts import ContractCalls
from suanli.client.errors import (
    BAD_RESPONSE,
    NOT_OURS,
    SERVER_ERROR,
    ApiError,
    ClientError,
    ExecWaitTimeout,
    GatewayError,
    InvalidArgument,
    RentalEnded,
    RentalWaitTimeout,
    ServerUnreachable,
)
from suanli.client.execs import ExecCalls
from suanli.client.fleet import FleetCalls
from suanli.client.rental_rules import RENTALS_PAGE_LIMIT, rental_filters, rentals_page_query
from suanli.client.rentals import RentalCalls
from suanli.client.retries import (
    GATEWAY_RETRY_STATUSES,
    LOST_ANSWER_ERRORS,
    MAX_RATE_WAIT_S,
    MIN_REQUEST_TIMEOUT_S,
    RECONNECT_S,
    retry_on_connection_errors,
    retry_when_rate_limited,
    ride_out_restarts,
)
from suanli.client.transport import DEFAULT_TIMEOUT_S, next_after, url_problem
from suanli.wire.billing_schemas import LedgerTransactionResponse, PayoutResponse
from suanli.wire.schemas import RentalResponse

__all__ = [
    "BAD_RESPONSE",
    "DEFAULT_TIMEOUT_S",
    "GATEWAY_RETRY_STATUSES",
    "LEDGER_PAGE_LIMIT",
    "LOST_ANSWER_ERRORS",
    "MAX_RATE_WAIT_S",
    "MIN_REQUEST_TIMEOUT_S",
    "NOT_OURS",
    "PAYOUT_PAGE_LIMIT",
    "RECONNECT_S",
    "RENTALS_PAGE_LIMIT",
    "SERVER_ERROR",
    "ApiError",
    "BudgetChanges",
    "Client",
    "ClientError",
    "ExecWaitTimeout",
    "GatewayError",
    "InvalidArgument",
    "LimitsChanges",
    "RentalEnded",
    "RentalWaitTimeout",
    "ServerUnreachable",
    "retry_on_connection_errors",
    "retry_when_rate_limited",
    "ride_out_restarts",
    "url_problem",
]

LEDGER_PAGE_LIMIT = 1000  # transactions per `GET /v1/ledger` page: the most the server sends in one
PAYOUT_PAGE_LIMIT = 1000  # lines per `GET /v1/payouts` page: the most the server sends in one


class Client(AccountCalls, FleetCalls, RentalCalls, ExecCalls, AgentCalls, ContractCalls, BillingCalls):
    """A session with one suanli server, authenticated by an API key. `timeout_s` bounds each send of a
    request (each step of its answer); `call_timeout_s`, when given, bounds each call, its retries included:
    they share one deadline, so a call on a server that never answers ends by it."""

    def rentals(
        self,
        states: Iterable[str] = (),
        name: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        updated_after: datetime | None = None,
    ) -> list[RentalResponse]:
        """Your rentals, newest first: every one, or the newest `limit`; only those in `states` (e.g.
        `{"pending", "running"}`) and of `name` when given (ending in `*`: those whose name starts with what
        is before it), and changed at or after `updated_after` (timezone-aware; the server's clock) when
        given; past the rental `after` when given. Fetched a page at a time, following each page's
        `Link` rel="next" (past its last rental) while the server says more follow."""
        filters = rental_filters(states, name, updated_after)
        found: list[RentalResponse] = []
        while params := rentals_page_query(filters, limit, len(found), after, RENTALS_PAGE_LIMIT):
            response = self._send("GET", "/v1/rentals", params=params)
            page = self._read("GET", "/v1/rentals", response, list[RentalResponse])
            found.extend(page)
            after = next_after(response)
            if after is None or not page:  # the last page (or an older server's only one)
                break
        return found

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
