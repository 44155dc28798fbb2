"""/v1/prices (GET anyone, PUT admin), /v1/balance, /v1/tenants/{id}/credit (admin), /v1/ledger,
/v1/ledger/verify, /v1/payouts (providers, admins), /v1/invoices/{yyyy-mm} (JSON or CSV)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request, status
from fastapi.responses import Response

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.paging import link_next
from suanli.api.wiring import Services
from suanli.app.billing import (
    LEDGER_PAGE,
    LEDGER_PAGE_LIMIT,
    LEDGER_SEQ_MAX,
    PAYOUT_PAGE,
    PAYOUT_PAGE_LIMIT,
    BillingService,
)
from suanli.app.errors import Invalid
from suanli.app.invoices import LINES_LIMIT
from suanli.app.records import PriceEntry
from suanli.domain.billing.invoice import Invoice, InvoiceLine, invoice_csv
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.pricebook import ListPrice, MigPrice
from suanli.wire.billing_schemas import (
    BalanceResponse,
    CreditRequest,
    InvoiceDiscountResponse,
    InvoiceLineResponse,
    InvoiceResponse,
    InvoiceSegmentResponse,
    LedgerTransactionResponse,
    LedgerVerifyResponse,
    PayoutLineResponse,
    PayoutResponse,
    PriceEntryRequest,
    PriceEntryResponse,
    PriceResponse,
)
from suanli.wire.schemas import PAYOUT_CURSOR_PATTERN

router = APIRouter(prefix="/v1", tags=["billing"], responses=ERROR_RESPONSES)
TenantQuery = Annotated[str | None, Query(max_length=40, description="Admins: another tenant.")]


def _billing(services: Services) -> BillingService:
    assert services.billing is not None
    return services.billing


@router.get("/prices")
def list_prices(services: ServicesDep) -> list[PriceResponse]:
    """The price book: list prices per GPU-hour in micros (on-demand, reserved), explicit MIG instance
    prices and spot floors; each entry in force now, and those taking effect later."""
    result = []
    for entry in _billing(services).prices():
        profile = None
        if isinstance(entry, ListPrice):
            tier, kind, price = entry.tier.label, "list", entry.price_micros_per_gpu_hour
        elif isinstance(entry, MigPrice):
            tier, kind, price = entry.tier.label, "mig", entry.price_micros_per_hour
            profile = entry.profile
        else:
            tier, kind, price = "spot", "spot_floor", entry.floor_micros_per_gpu_hour
        result.append(
            PriceResponse(
                gpu_model=entry.model,
                region=entry.region,
                tier=tier,  # type: ignore[arg-type]
                kind=kind,  # type: ignore[arg-type]
                price_micros_per_gpu_hour=price,
                effective_from_s=entry.effective_from_s,
                source=entry.source,
                mig_profile=profile,
            )
        )
    return result


@router.put("/prices")
def put_prices(
    body: Annotated[list[PriceEntryRequest], Body(min_length=1, max_length=500)],
    caller: CallerDep,
    services: ServicesDep,
) -> list[PriceEntryResponse]:
    """Admin: add price book entries (all or none), each in force from its effective_from (now when not
    given, or a future instant; never in the past, so quotes already given stay valid)."""
    entries = [
        PriceEntry(
            gpu_model=e.gpu_model,
            region=e.region,
            tier=e.tier,
            price_micros_per_gpu_hour=e.price_micros_per_gpu_hour,
            effective_from=e.effective_from,
            source=e.source,
            mig_profile=e.mig_profile,
        )
        for e in body
    ]
    return [price_entry_response(e) for e in _billing(services).set_prices(caller, entries)]


def price_entry_response(entry: PriceEntry) -> PriceEntryResponse:
    assert entry.id is not None and entry.effective_from is not None and entry.created_at is not None
    return PriceEntryResponse(
        id=entry.id,
        gpu_model=entry.gpu_model,
        region=entry.region,
        tier=entry.tier,  # type: ignore[arg-type]
        mig_profile=entry.mig_profile,
        price_micros_per_gpu_hour=entry.price_micros_per_gpu_hour,
        effective_from=entry.effective_from,
        effective_from_s=to_epoch_s(entry.effective_from),
        source=entry.source,
        created_at=entry.created_at,
    )


@router.get("/balance")
def get_balance(caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None) -> BalanceResponse:
    """The caller's cash and grant balances (an admin: any tenant's, with `tenant`)."""
    balance = _billing(services).balance(caller, tenant)
    return BalanceResponse(
        tenant_id=balance.tenant_id,
        cash_micros=balance.cash_micros,
        grants_micros=balance.grants_micros,
        available_micros=balance.available_micros,
    )


@router.post("/tenants/{tenant_id}/credit", status_code=status.HTTP_201_CREATED)
def credit_tenant(
    tenant_id: str,
    body: CreditRequest,
    caller: CallerDep,
    services: ServicesDep,
    idempotency_key: Annotated[str | None, Header(max_length=120)] = None,
) -> LedgerTransactionResponse:
    """Admin: a top-up or a grant, posted as one balanced transaction (idempotent per Idempotency-Key)."""
    tx = _billing(services).credit(
        caller, tenant_id, body.amount_micros, body.grant, idempotency_key, body.memo, body.expires_at
    )
    return mappers.transaction(tx)


@router.get("/ledger")
def get_ledger(
    request: Request,
    response: Response,
    caller: CallerDep,
    services: ServicesDep,
    tenant: TenantQuery = None,
    after: Annotated[
        int,
        Query(
            ge=0,
            le=LEDGER_SEQ_MAX,
            description="Only transactions past this `seq` (the last one of the page before).",
        ),
    ] = 0,
    limit: Annotated[
        int, Query(ge=1, le=LEDGER_PAGE_LIMIT, description="At most this many (1,000 at most).")
    ] = LEDGER_PAGE,
) -> list[LedgerTransactionResponse]:
    """The caller's transactions in chain order (`seq`, oldest first), a page at a time (an admin: all of
    them, or one tenant's): at most `limit` past `after`. When more follow, a `Link: <...>; rel="next"`
    header gives the next page's URL (`after` = this page's last `seq`); without it this is the last page."""
    page = _billing(services).journal(caller, tenant, after, limit)
    if page.more:
        link_next(request, response, page.entries[-1][0], limit)
    return [mappers.transaction(tx, seq) for seq, tx in page.entries]


@router.get("/ledger/verify")
def verify_ledger(caller: CallerDep, services: ServicesDep) -> LedgerVerifyResponse:
    """Recompute the whole hash chain and every balance on the server."""
    result, count = _billing(services).verify(caller)
    return LedgerVerifyResponse(
        ok=result.ok,
        transactions=count,
        head_hash=result.head_hash,
        problems=list(result.problems) if caller.is_admin else [],
        problem_count=len(result.problems),
    )


@router.get("/payouts")
def get_payouts(
    request: Request,
    response: Response,
    caller: CallerDep,
    services: ServicesDep,
    provider: Annotated[str | None, Query(max_length=80, description="Admins: one provider.")] = None,
    after: Annotated[
        str | None,
        Query(
            max_length=300,
            pattern=PAYOUT_CURSOR_PATTERN,
            description="Only lines past this cursor, `provider/rental` (the last line of the page before).",
        ),
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=PAYOUT_PAGE_LIMIT, description="At most this many lines (1,000 at most).")
    ] = PAYOUT_PAGE,
) -> list[PayoutResponse]:
    """Provider payables from the ledger, per rental, a page at a time: at most `limit` lines in (provider,
    rental) order past `after`, each provider with its whole balance (a provider key its own; an admin all, or
    ?provider=). When more follow, a `Link: <...>; rel="next"` header gives the next page's URL; without it
    this is the last page."""
    page = _billing(services).payouts(caller, provider, after, limit)
    if page.next_after is not None:
        link_next(request, response, page.next_after, limit)
    return [
        PayoutResponse(
            provider=p.provider,
            payable_micros=p.payable_micros,
            lines=[
                PayoutLineResponse(ref=x.ref, amount_micros=x.amount_micros, transactions=x.transactions)
                for x in p.lines
            ],
        )
        for p in page.payouts
    ]


@router.get(
    "/invoices/{month}",
    response_model=InvoiceResponse,
    responses={200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with ?format=csv"}},
)
def get_invoice(
    month: Annotated[str, Path(description="yyyy-mm (UTC)")],
    request: Request,
    caller: CallerDep,
    services: ServicesDep,
    response: Response,
    tenant: TenantQuery = None,
    format: Annotated[Literal["json", "csv"] | None, Query(description="csv or json")] = None,
    after: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=40,
            description="JSON: only the rental lines past this rental's line (the `ref` of the last line of "
            "the page before). A rental with no line in the month is a 400 naming `after`.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        Query(ge=1, le=LINES_LIMIT, description="JSON: at most this many rental lines (1,000 at most)."),
    ] = None,
) -> Response | InvoiceResponse:
    """The caller's invoice for a UTC month (an admin: ?tenant=); CSV with ?format=csv or Accept: text/csv.
    JSON: its rental lines a page at a time (`limit`, 1,000 by default, past `after`), in the invoice's order
    (started, then rental id), with `line_count` and a `Link: <...>; rel="next"` header while more follow;
    the plan and SLA credit lines and the totals are the whole month's on every page. CSV: the whole
    month (`after` and `limit` are refused)."""
    assert services.invoices is not None
    wants_csv = format == "csv" or (format is None and "text/csv" in request.headers.get("accept", ""))
    if wants_csv:
        if after is not None or limit is not None:
            field = "after" if after is not None else "limit"
            raise Invalid("a CSV invoice is the whole month: page the JSON one", field=field)
        invoice = services.invoices.invoice(caller, month, tenant)
        filename = f"invoice-{invoice.tenant_id}-{invoice.month}.csv"
        return Response(
            invoice_csv(invoice),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )
    page_size = LINES_LIMIT if limit is None else limit
    page = services.invoices.invoice_page(caller, month, tenant, after, page_size)
    if page.more:
        link_next(request, response, page.lines[-1].ref, page_size)
    return invoice_response(page.invoice, page.lines)


def invoice_response(invoice: Invoice, lines: Sequence[InvoiceLine] | None = None) -> InvoiceResponse:
    """`invoice` on the wire, with `lines` (a page) as its rental lines when given, else all of them."""

    def line(x: InvoiceLine) -> InvoiceLineResponse:
        return InvoiceLineResponse(
            kind=x.kind,  # type: ignore[arg-type]
            ref=x.ref,
            description=x.description,
            gpu_seconds=x.gpu_seconds,
            rate_micros_per_hour=x.rate_micros_per_hour,
            discounts=[InvoiceDiscountResponse(label=k, micros_per_hour=v) for k, v in x.discounts],
            amount_micros=x.amount_micros,
            energy_kwh=x.energy_kwh,
            co2_kg=x.co2_kg,
            energy_source=x.energy_source,  # type: ignore[arg-type]
            segments=[
                InvoiceSegmentResponse(
                    from_at=datetime.fromtimestamp(g.from_s, UTC),
                    to_at=datetime.fromtimestamp(g.to_s, UTC),
                    rate_micros_per_hour=g.rate_micros_per_hour,
                    discounts=[InvoiceDiscountResponse(label=k, micros_per_hour=v) for k, v in g.discounts],
                )
                for g in x.segments
            ],
        )

    return InvoiceResponse(
        tenant_id=invoice.tenant_id,
        month=str(invoice.month),
        lines=[line(x) for x in (invoice.lines if lines is None else lines)],
        line_count=len(invoice.lines),
        plan_lines=[line(x) for x in invoice.plan_lines],
        sla_credit_lines=[line(x) for x in invoice.sla_credit_lines],
        total_micros=invoice.total_micros,
        total_energy_kwh=invoice.total_energy_kwh,
        total_co2_kg=invoice.total_co2_kg,
        notes=list(invoice.notes),
    )
