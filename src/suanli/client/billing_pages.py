"""The money lists fetched a page at a time, for both clients: an invoice's rental lines, the ledger and the
payouts, each a `Pager` (see `calls`) that yields the next page's call, is sent its answer, and returns the
whole list; each page's size is the caller's (`page_limit`: the most the server sends in one)."""

from __future__ import annotations

from suanli.client.calls import Call, Pager, tenant_query
from suanli.client.transport import segment
from suanli.wire.billing_schemas import (
    InvoiceLineResponse,
    InvoiceResponse,
    LedgerTransactionResponse,
    PayoutResponse,
)

INVOICE_PAGE_LIMIT = 1000  # rental lines asked for a page of an invoice: the most the server gives
LEDGER_PAGE_LIMIT = 1000  # transactions per `GET /v1/ledger` page: the most the server sends in one
PAYOUT_PAGE_LIMIT = 1000  # lines per `GET /v1/payouts` page: the most the server sends in one


def invoice_pages(month: str, tenant_id: str | None, page_limit: int) -> Pager[InvoiceResponse]:
    """The month's invoice with every rental line: its pages followed by their `Link` rel="next" and the
    lines put together; the totals, plan and SLA lines are the last page's."""
    path = f"/v1/invoices/{segment(month)}"
    params = {"limit": str(page_limit), **(tenant_query(tenant_id) or {})}
    lines: list[InvoiceLineResponse] = []
    after: str | None = None
    while True:
        page, after = yield Call(
            "GET", path, InvoiceResponse, params={**params, **({"after": after} if after else {})}
        )
        lines.extend(page.lines)
        if after is None or not page.lines:  # the last page (or an older server's only one)
            return page.model_copy(update={"lines": lines})


def ledger_pages(
    tenant_id: str | None, after: int, limit: int | None, page_limit: int
) -> Pager[list[LedgerTransactionResponse]]:
    """Transactions in chain order past `seq` `after`: every one, or the first `limit`; each page after the
    last `seq` of the one before."""
    found: list[LedgerTransactionResponse] = []
    while limit is None or len(found) < limit:
        size = page_limit if limit is None else min(page_limit, limit - len(found))
        params = {"after": str(after), "limit": str(size), **(tenant_query(tenant_id) or {})}
        page, _ = yield Call("GET", "/v1/ledger", list[LedgerTransactionResponse], params=params)
        found.extend(page)
        if len(page) < size or page[-1].seq is None:  # the last page (or an older server's whole ledger)
            break
        after = page[-1].seq
    return found


def payout_pages(provider: str | None, limit: int | None, page_limit: int) -> Pager[list[PayoutResponse]]:
    """Provider payables per rental: every line, or the first `limit`; each page after the last line of the
    one before, and a provider whose lines span pages returned once, with all of them."""
    by_provider: dict[str, PayoutResponse] = {}
    after, count = None, 0
    while limit is None or count < limit:
        size = page_limit if limit is None else min(page_limit, limit - count)
        params = {"limit": str(size), **({"provider": provider} if provider else {})}
        query = {**params, **({"after": after} if after else {})}
        page, _ = yield Call("GET", "/v1/payouts", list[PayoutResponse], params=query)
        for payout in page:
            found = by_provider.setdefault(payout.provider, payout.model_copy(update={"lines": []}))
            found.lines.extend(payout.lines)
        lines = [(p.provider, line.ref) for p in page for line in p.lines]
        count += len(lines)
        if len(lines) != size:  # the last page (or an older server's every line, however many)
            break
        after = "/".join(lines[-1])
    return list(by_provider.values())
