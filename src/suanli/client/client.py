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
from suanli.client.billing_pages import LEDGER_PAGE_LIMIT, PAYOUT_PAGE_LIMIT, ledger_pages, payout_pages
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
from suanli.client.rental_rules import RENTALS_PAGE_LIMIT, rentals_pages
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
from suanli.client.transport import DEFAULT_TIMEOUT_S, url_problem
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
        return self._pages(rentals_pages(states, name, limit, after, updated_after, RENTALS_PAGE_LIMIT))

    def ledger(
        self, tenant_id: str | None = None, after: int = 0, limit: int | None = None
    ) -> list[LedgerTransactionResponse]:
        """Your transactions in chain order past `seq` `after` (an admin: all, or one tenant's): every one,
        or the first `limit`. Fetched a page at a time, each after the last `seq` of the one before."""
        return self._pages(ledger_pages(tenant_id, after, limit, LEDGER_PAGE_LIMIT))

    def payouts(self, provider: str | None = None, limit: int | None = None) -> list[PayoutResponse]:
        """Provider payables per rental (a provider key its own; an admin all, or one provider): every line,
        or the first `limit`. Fetched a page at a time, each after the last line of the one before; a
        provider whose lines span pages comes back once, with all of them."""
        return self._pages(payout_pages(provider, limit, PAYOUT_PAGE_LIMIT))
