"""Billing commands: prices, balance, ledger (list, verify), payouts, invoice, admin credit and prices."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from pydantic import BaseModel, Field, ValidationError
from rich.console import Group, RenderableType
from rich.text import Text

from suanli.cli.output import (
    EXIT_USAGE,
    console,
    emit,
    error_text,
    errors,
    logged_in,
    micros,
    micros_option,
    moment_option,
    month_argument,
    table,
)
from suanli.domain.billing.ledger import (
    AccountId,
    AccountKind,
    Posting,
    Transaction,
    TxKind,
    chain_hash,
    verify,
)
from suanli.wire.billing_schemas import (
    BalanceResponse,
    InvoiceResponse,
    LedgerTransactionResponse,
    LedgerVerifyResponse,
    PayoutResponse,
    PriceEntryRequest,
    PriceEntryResponse,
    PriceResponse,
    SlaResponse,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]
TenantOption = Annotated[str | None, typer.Option("--tenant", help="Admins: another tenant.")]
ledger_app = typer.Typer(help="Your ledger: transactions and their verification.", no_args_is_help=True)
admin_prices_app = typer.Typer(help="The price book (admin key).", no_args_is_help=True)


def prices(
    gpu: Annotated[
        str | None, typer.Option(help="Only models whose name holds this, e.g. H100 (any case).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The price book: per GPU-hour list prices, MIG instance prices and spot floors, with when each applies
    from."""
    with logged_in() as client:
        found = client.prices()
    if gpu is not None:
        found = [p for p in found if gpu.casefold() in p.gpu_model.casefold()]
    emit(found, as_json, _prices_table)


def balance(tenant: TenantOption = None, as_json: JsonFlag = False) -> None:
    """Your cash and grant balances (grants are spent first)."""
    with logged_in() as client:
        found = client.balance(tenant)
    emit(found, as_json, _balance_table)


@ledger_app.command("ls")
def ledger_ls(
    tenant: TenantOption = None,
    after: Annotated[
        int, typer.Option("--after", min=0, help="Only those past this seq (the last one shown before).")
    ] = 0,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="Show at most this many.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Your transactions in chain order (all of them, fetched a page at a time; or `-n` past `--after`)."""
    with logged_in() as client:
        found = client.ledger(tenant, after, limit)
    emit(found, as_json, _ledger_table)


class LedgerVerification(BaseModel):
    """`ledger verify`'s finding, for `--json`: the journal checked here and the server's own check."""

    verified: bool
    transactions: int
    head_hash: str | None
    problems: list[str] = Field(description="What the check here found wrong (empty when it verifies).")
    server: LedgerVerifyResponse


@ledger_app.command("verify")
def ledger_verify(as_json: JsonFlag = False) -> None:
    """Fetch the journal and recompute its hashes and balances here (the domain `verify`).

    An admin gets the whole journal: the chain is checked link by link and every balance recomputed. A
    tenant gets its own transactions (the chain runs through other tenants' too): each one's hash and balance
    are checked here, its cash and grant balances recomputed and compared with the server's, and the server's
    check of the whole chain is shown.
    """
    with logged_in() as client:
        me = client.me()
        journal = [to_domain(tx) for tx in client.ledger()]
        stated = client.balance()
        server = client.verify_ledger()
    problems = check(journal, stated, complete=me.tenant.role == "admin")
    found = LedgerVerification(
        verified=not problems and server.ok,
        transactions=len(journal),
        head_hash=journal[-1].hash if journal else None,
        problems=problems,
        server=server,
    )
    if as_json:
        typer.echo(found.model_dump_json(indent=2))
    else:
        _print_verification(found)
    if not found.verified:
        raise typer.Exit(1)


def _print_verification(found: LedgerVerification) -> None:
    """The check for people: what was fetched, the server's word, each problem on stderr, the verdict."""
    typer.echo(f"{found.transactions} transactions fetched; head {found.head_hash or '-'}")
    server = found.server
    typer.echo(f"server check of the whole chain: {'ok' if server.ok else 'FAILED'} ({server.head_hash})")
    for problem in found.problems:
        typer.echo(f"problem: {problem}", err=True)
    if found.verified:
        typer.echo("ledger verified: hashes, balances and the stated balance agree")


def check(journal: list[Transaction], stated: BalanceResponse, *, complete: bool) -> list[str]:
    """Problems found in a fetched journal (empty when it verifies)."""
    if complete:
        problems = list(verify(journal).problems)
    else:
        problems = []
        for tx in journal:
            if chain_hash(tx.prev_hash, tx) != tx.hash:
                problems.append(f"transaction {tx.key!r}: hash does not match its contents")
            if sum(p.amount_micros for p in tx.postings) != 0:
                problems.append(f"transaction {tx.key!r}: postings do not sum to 0")
    owner = stated.tenant_id
    cash = sum(
        p.amount_micros for t in journal for p in t.postings if p.account == AccountId.tenant_cash(owner)
    )
    grants = sum(
        p.amount_micros for t in journal for p in t.postings if p.account == AccountId.tenant_grants(owner)
    )
    if (cash, grants) != (stated.cash_micros, stated.grants_micros):
        problems.append(
            f"balance of {owner}: recomputed cash {cash}, grants {grants}; "
            f"stated cash {stated.cash_micros}, grants {stated.grants_micros}"
        )
    return problems


def to_domain(tx: LedgerTransactionResponse) -> Transaction:
    """A fetched transaction as a domain value, unchecked: `verify` reports what is wrong."""
    result = object.__new__(Transaction)
    postings = tuple(
        Posting(AccountId(AccountKind(p.account_kind), p.owner), p.amount_micros) for p in tx.postings
    )
    fields = {
        "key": tx.key,
        "kind": TxKind(tx.kind),
        "at_s": tx.at_s,
        "postings": postings,
        "ref": tx.ref,
        "memo": tx.memo,
        "prev_hash": tx.prev_hash,
        "hash": tx.hash,
    }
    for name, value in fields.items():
        object.__setattr__(result, name, value)
    return result


def payouts(
    provider: Annotated[str | None, typer.Option("--provider", help="Admins: one provider.")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="Show at most this many rental lines.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Provider payables from the ledger: the balance and the rentals whose charges built it (every line,
    fetched a page at a time; or the first `-n`)."""
    with logged_in() as client:
        found = client.payouts(provider, limit)
    emit(found, as_json, _payouts_table)


def _payouts_table(found: list[PayoutResponse]):
    rows = [
        (p.provider, line.ref, str(line.transactions), micros(line.amount_micros))
        for p in found
        for line in p.lines
    ]
    rows += [(p.provider, "total", "", micros(p.payable_micros)) for p in found]
    return table("provider payables", ["provider", "rental", "charges", "payable"], rows)


def invoice(
    month: Annotated[
        str | None,
        typer.Argument(
            help="The month, yyyy-mm (UTC), e.g. 2026-11; default: this month.", callback=month_argument
        ),
    ] = None,
    tenant: TenantOption = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the server's CSV.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Your invoice for a month: a line per rental (GPU-seconds, rate, amount, energy, CO2) and the total."""
    month = month or f"{datetime.now(UTC):%Y-%m}"
    with logged_in() as client:
        if as_csv:
            typer.echo(client.invoice_csv(month, tenant), nl=False)
            return
        found = client.invoice(month, tenant)
    emit(found, as_json, _invoice_table)


def admin_credit(
    tenant_id: str,
    amount: Annotated[str, typer.Argument(help="Currency units, e.g. 1000 or 12.5 (exact to 6 decimals).")],
    grant: Annotated[
        bool, typer.Option("--grant", help="A grant (spent before cash) instead of a top-up.")
    ] = False,
    memo: str = "",
    expires: Annotated[
        datetime | None,
        typer.Option(
            "--expires",
            parser=moment_option,
            metavar="TIME",
            help="A grant's expiry: +30d, or ISO 8601 (UTC if no zone).",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Top up a tenant's cash (or give it a grant, optionally expiring): one balanced ledger transaction."""
    amount_micros = micros_option(amount, "AMOUNT")
    expires_at = expires
    if expires is not None and not grant:
        errors.print(error_text("--expires: only a grant (--grant) expires"))
        raise typer.Exit(EXIT_USAGE)
    with logged_in({"amount_micros": "AMOUNT", "memo": "--memo", "expires_at": "--expires"}) as client:
        tx = client.credit(tenant_id, amount_micros, grant=grant, memo=memo, expires_at=expires_at)
    if as_json:
        typer.echo(tx.model_dump_json(indent=2))
    else:
        typer.echo(f"{tx.kind} of {micros(amount_micros)} to {tenant_id}: {tx.key} ({tx.hash[:16]})")


@admin_prices_app.command("set")
def admin_prices_set(
    model: Annotated[str, typer.Option("--model", help="A catalogue model, e.g. H100-SXM-80GB.")],
    tier: Annotated[str, typer.Option("--tier", help="on_demand, reserved, or spot (the spot floor).")],
    price: Annotated[
        str | None,
        typer.Option(
            "--price", help="Units per GPU-hour, e.g. 2.99 (with --mig-profile: per instance-hour)."
        ),
    ] = None,
    price_micros: Annotated[
        int | None, typer.Option("--price-micros", help="The same in micros (1 unit = 1,000,000).")
    ] = None,
    region: Annotated[str, typer.Option("--region", help="A fleet region, or * for any.")] = "*",
    mig_profile: Annotated[
        str | None, typer.Option("--mig-profile", help="Price one MIG instance explicitly, e.g. 3g.40gb.")
    ] = None,
    effective_from: Annotated[
        datetime | None,
        typer.Option(
            "--from",
            parser=moment_option,
            metavar="TIME",
            help="When it takes effect: now, +1d, or ISO 8601 (UTC if no zone); default now.",
        ),
    ] = None,
    source: Annotated[str, typer.Option("--source", help="Where the price comes from.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Add a price book entry, in force from --from (now by default; never in the past)."""
    if (price is None) == (price_micros is None):
        errors.print(error_text("--price: give the price, as --price 2.99 or --price-micros 2990000"))
        raise typer.Exit(EXIT_USAGE)
    if price is not None:
        price_micros = micros_option(price, "--price")
    try:
        entry = PriceEntryRequest(
            gpu_model=model,
            region=region,
            tier=tier,  # type: ignore[arg-type]
            mig_profile=mig_profile,
            price_micros_per_gpu_hour=price_micros,
            effective_from=effective_from,
            source=source,
        )
    except ValueError as error:
        errors.print(error_text(_option_error(error, price is not None)))
        raise typer.Exit(EXIT_USAGE) from None
    with logged_in() as client:
        stored = client.set_prices([entry])
    emit(stored, as_json, _entries_table)


def _option_error(error: ValueError, price_given: bool) -> str:
    options = {
        "gpu_model": "--model",
        "tier": "--tier",
        "price_micros_per_gpu_hour": "--price" if price_given else "--price-micros",
        "region": "--region",
        "mig_profile": "--mig-profile",
        "source": "--source",
    }
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        return f"{options.get(name, name)}: {first['msg']}"
    return f"--from: {error}"


def _entries_table(found: list[PriceEntryResponse]):
    rows = [
        (
            str(e.id),
            e.gpu_model,
            e.tier,
            e.mig_profile or "-",
            e.region,
            micros(e.price_micros_per_gpu_hour),
            e.effective_from.isoformat(),
            e.source,
        )
        for e in found
    ]
    columns = ["id", "model", "tier", "MIG", "region", "price", "from", "source"]
    return table("price entries stored", columns, rows)


def _prices_table(found: list[PriceResponse]):
    rows = [
        (
            p.gpu_model,
            p.tier,
            p.kind if p.mig_profile is None else f"{p.kind} {p.mig_profile}",
            p.region,
            micros(p.price_micros_per_gpu_hour),
            _applies_from(p.effective_from_s),
            p.source,
        )
        for p in found
    ]
    columns = ["model", "tier", "kind", "region", "price", "from (UTC)", "source"]
    return table("prices per GPU-hour", columns, rows)


def _applies_from(effective_from_s: int) -> str:
    """`always` for an entry in force from the epoch (the catalogue's), else its UTC minute."""
    if effective_from_s <= 0:
        return "always"
    return datetime.fromtimestamp(effective_from_s, UTC).strftime("%Y-%m-%d %H:%M")


def _balance_table(found: BalanceResponse):
    rows = [
        (
            found.tenant_id,
            micros(found.cash_micros),
            micros(found.grants_micros),
            micros(found.available_micros),
        )
    ]
    return table("balance", ["tenant", "cash", "grants", "available"], rows)


def _ledger_table(found: list[LedgerTransactionResponse]):
    rows = [
        (
            "" if t.seq is None else str(t.seq),
            t.key,
            t.kind,
            t.ref,
            "; ".join(f"{p.account_kind}:{p.owner} {micros(p.amount_micros)}" for p in t.postings),
            t.hash[:12],
        )
        for t in found
    ]
    return table("ledger", ["seq", "key", "kind", "ref", "postings", "hash"], rows)


def _invoice_table(found: InvoiceResponse):
    def energy(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    rows = [
        (
            line.kind,
            line.ref,
            line.description,
            f"{line.gpu_seconds:g}",
            micros(line.rate_micros_per_hour),
            "; ".join(f"{d.label} {micros(d.micros_per_hour)}" for d in line.discounts) or "-",
            micros(line.amount_micros),
            energy(line.energy_kwh) + (" (measured)" if line.energy_source == "measured" else ""),
            energy(line.co2_kg),
        )
        for line in [*found.lines, *found.plan_lines, *found.sla_credit_lines]
    ]
    gpu_seconds = sum(line.gpu_seconds for line in [*found.lines, *found.plan_lines, *found.sla_credit_lines])
    rows.append(
        (
            "total",
            "",
            "",
            f"{round(gpu_seconds, 3):g}",
            "",
            "",
            micros(found.total_micros),
            energy(found.total_energy_kwh),
            energy(found.total_co2_kg),
        )
    )
    columns = ["section", "ref", "description", "GPU-s", "rate/h", "discounts/h", "amount", "kWh", "CO2 kg"]
    rendered = table(f"invoice {found.month} for {found.tenant_id}", columns, rows)
    rendered.caption, rendered.caption_justify = "\n".join(found.notes), "left"  # how the figures are made
    return rendered


def sla(
    month: Annotated[
        str | None,
        typer.Argument(help="The month, yyyy-mm (UTC); default: this month.", callback=month_argument),
    ] = None,
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Your rentals' availability in a month, the node outages that hit them, and the credit they earn
    (posted once the month has ended)."""
    month = month or f"{datetime.now(UTC):%Y-%m}"
    with logged_in() as client:
        found = client.sla(month, tenant)
    emit(found, as_json, _sla_report)


def admin_sla(
    month: Annotated[str, typer.Argument(help="An ended month, yyyy-mm (UTC).", callback=month_argument)],
    as_json: JsonFlag = False,
) -> None:
    """Post an ended month's SLA credits to every tenant an outage hit (each once, however often it runs)."""
    with logged_in() as client:
        done = client.post_sla(month)
    if as_json:
        typer.echo(done.model_dump_json(indent=2))
        return
    rows = [
        (s.tenant_id, f"{s.availability_percent}%", f"{s.credit_bp / 100:g}%", micros(s.posted_micros))
        for s in done.tenants
    ]
    console.print(table(f"SLA credits {done.month}", ["tenant", "availability", "credit", "posted"], rows))
    typer.echo(f"{done.posted} credit(s) newly posted")


def _sla_report(found: SlaResponse) -> RenderableType:
    state = "posted" if found.posted_key else "ended, not yet posted" if found.ended else "month not over"
    summary = (
        f"{found.month}: availability {found.availability_percent}% "
        f"({found.down_seconds:,} of {found.rental_seconds:,} rental-seconds down); "
        f"credit {found.credit_bp / 100:g}% of {micros(found.affected_micros)} affected = "
        f"{micros(found.credit_micros)} ({state})"
    )
    if not found.outages:
        return Text(summary)
    rows = [
        (
            o.node,
            f"{o.started_at:%Y-%m-%d %H:%M:%S}",
            "-" if o.ended_at is None else f"{o.ended_at:%Y-%m-%d %H:%M:%S}",
            o.cause,
        )
        for o in found.outages
    ]
    return Group(Text(summary), table("outages (UTC)", ["node", "from", "until", "cause"], rows))
