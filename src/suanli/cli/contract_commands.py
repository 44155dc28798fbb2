"""`suanli contracts`: compute futures. Quote, sign, list and transfer contracts; an admin offers one to a
tenant at a negotiated price, and the tenant accepts or declines it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from suanli.cli.output import (
    emit,
    logged_in,
    micros,
    micros_option,
    moment_option,
    table,
    valid_input,
)
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferRequest,
    ContractOfferResponse,
    ContractQuoteResponse,
    ContractResponse,
    ContractShortfallResponse,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]
# request fields -> the options that set them, for messages about bad values
CONTRACT_OPTIONS = {
    "gpu_model": "--gpu",
    "starts_at": "--from",
    "ends_at": "--until",
    "count": "--count",
    "region": "--region",
    "tenant_id": "--tenant",
}


contracts_app = typer.Typer(
    help="Compute futures: capacity held for a window at a locked price.", no_args_is_help=True
)


ContractWindow = tuple[str, int, str, datetime, datetime, str | None]


def _contract_request(window: ContractWindow) -> ContractCreateRequest:
    gpu_model, count, region, starts_at, ends_at, tenant = window
    with valid_input(CONTRACT_OPTIONS):
        return ContractCreateRequest(
            gpu_model=gpu_model,
            count=count,
            region=region,
            starts_at=starts_at,
            ends_at=ends_at,
            tenant_id=tenant,
        )


GpuOption = Annotated[str, typer.Option("--gpu", help="GPU model, e.g. H100-SXM-80GB.")]
CountOption = Annotated[int, typer.Option(min=1)]
RegionOption = Annotated[str, typer.Option()]
FromOption = Annotated[
    datetime,
    typer.Option(
        "--from", parser=moment_option, metavar="TIME", help="Window start: now, +2h, 2026-12-01T00:00 (UTC)."
    ),
]
UntilOption = Annotated[
    datetime,
    typer.Option(
        "--until", parser=moment_option, metavar="TIME", help="Window end (exclusive): +30d, 2027-01-01."
    ),
]
TenantOption = Annotated[str | None, typer.Option(help="Admins: sign for this tenant id.")]


@contracts_app.command("quote")
def contracts_quote(
    gpu_model: GpuOption,
    count: CountOption,
    region: RegionOption,
    starts_at: FromOption,
    ends_at: UntilOption,
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Price a contract and check the fleet can honour it, without signing: what `create` would prepay."""
    request = _contract_request((gpu_model, count, region, starts_at, ends_at, tenant))
    with logged_in(CONTRACT_OPTIONS) as client:
        quote = client.quote_contract(request)
    emit(quote, as_json, _quote_text)


@contracts_app.command("create")
def contracts_create(
    gpu_model: GpuOption,
    count: CountOption,
    region: RegionOption,
    starts_at: FromOption,
    ends_at: UntilOption,
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Sign a contract for GPUs of one model in one region over [from, until), prepaying its price."""
    request = _contract_request((gpu_model, count, region, starts_at, ends_at, tenant))
    with logged_in(CONTRACT_OPTIONS) as client:
        contract = client.create_contract(request, f"cli-{uuid.uuid4()}")
    emit(contract, as_json, lambda c: _contracts_table([c]))


@contracts_app.command("ls")
def contracts_ls(as_json: JsonFlag = False) -> None:
    """Your contracts (all of them, for an admin)."""
    with logged_in() as client:
        found = client.contracts()
    emit(found, as_json, _contracts_table)


@contracts_app.command("transfer")
def contracts_transfer(contract_id: str, to_tenant: str, as_json: JsonFlag = False) -> None:
    """Hand a contract (and what is left of it) to another tenant; one the buyer pays for: admin key."""
    with logged_in() as client:
        contract = client.transfer_contract(contract_id, to_tenant)
    emit(contract, as_json, lambda c: _contracts_table([c]))


@contracts_app.command("offer")
def contracts_offer(
    tenant: Annotated[str, typer.Option(help="The tenant the offer is for.")],
    gpu_model: GpuOption,
    count: CountOption,
    region: RegionOption,
    starts_at: FromOption,
    ends_at: UntilOption,
    price: Annotated[str, typer.Option(help="The whole contract's prepaid price, e.g. 1200.50.")],
    expires: Annotated[
        datetime | None,
        typer.Option(
            parser=moment_option,
            metavar="TIME",
            help="Open until then: +3d, 2026-12-10 (UTC); default a week.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Admin: offer TENANT a contract at a negotiated price; it holds no capacity until accepted."""
    price_micros = micros_option(price, "--price")
    with valid_input({**CONTRACT_OPTIONS, "price_micros": "--price", "expires_at": "--expires"}):
        request = ContractOfferRequest(
            tenant_id=tenant,
            gpu_model=gpu_model,
            count=count,
            region=region,
            starts_at=starts_at,
            ends_at=ends_at,
            price_micros=price_micros,
            expires_at=expires,
        )
    with logged_in({**CONTRACT_OPTIONS, "price_micros": "--price", "expires_at": "--expires"}) as client:
        offer = client.offer_contract(request)
    emit(offer, as_json, lambda o: _offers_table([o]))


@contracts_app.command("offers")
def contracts_offers(as_json: JsonFlag = False) -> None:
    """Contracts offered to you (every tenant's, for an admin): open, accepted, declined or expired."""
    with logged_in() as client:
        found = client.contract_offers()
    emit(found, as_json, _offers_table)


@contracts_app.command("accept")
def contracts_accept(offer_id: str, as_json: JsonFlag = False) -> None:
    """Sign an offered contract at its price, paid from your cash; accepting again changes nothing."""
    with logged_in() as client:
        contract = client.accept_offer(offer_id)
    emit(contract, as_json, lambda c: _contracts_table([c]))


@contracts_app.command("decline")
def contracts_decline(offer_id: str, as_json: JsonFlag = False) -> None:
    """Decline an open offer (an admin withdraws it)."""
    with logged_in() as client:
        offer = client.decline_offer(offer_id)
    emit(offer, as_json, lambda o: _offers_table([o]))


def _quote_text(quote: ContractQuoteResponse) -> Text:
    """One line a person reads before signing: the window, the GPU-hours and the prepaid price."""
    gpu_hours = quote.count * (quote.ends_at - quote.starts_at).total_seconds() / 3600
    window = f"{quote.starts_at:%Y-%m-%d %H:%M} to {quote.ends_at:%Y-%m-%d %H:%M} UTC"
    price = f"{micros(quote.price_micros_per_gpu_hour)} per GPU-h = {micros(quote.price_micros)}"
    text = f"{quote.count} x {quote.gpu_model} in {quote.region}, {window}: {gpu_hours:g} GPU-h at {price}"
    text += ", prepaid at signing"
    if not quote.payable:
        text += f"\n{quote.tenant_id} cannot pay that now: top up first"
    return Text(text)


def _contracts_table(found: list[ContractResponse]):
    rows = [
        (
            c.id,
            c.tenant_id,
            c.gpu_model,
            c.count,
            c.region,
            f"{c.starts_at:%Y-%m-%d %H:%M}",
            f"{c.ends_at:%Y-%m-%d %H:%M}",
            micros(c.price_micros),
        )
        for c in found
    ]
    columns = ("id", "tenant", "model", "count", "region", "from", "until", "prepaid")
    return table("Contracts", columns, rows)


def with_shortfalls(
    done: RenderableType, short_contracts: list[str], found: list[ContractShortfallResponse]
) -> RenderableType:
    """`done`, and after a forced drain, window or fleet the contracts it left short, with how short."""
    if not found:
        return done
    forced = Text(f"forced: contracts left short of GPUs: {', '.join(short_contracts)}")
    return Group(done, forced, shortfalls_table(found))


def shortfalls_table(found: list[ContractShortfallResponse]):
    """The contracts a forced drain or maintenance window left short: holder, pool and window, and the GPUs
    held, the pool's contracted and in service when it is shortest, and the difference."""
    rows = [
        (
            s.contract_id,
            s.tenant_id,
            s.gpu_model,
            s.region,
            f"{s.starts_at:%Y-%m-%d %H:%M} to {s.ends_at:%Y-%m-%d %H:%M}",
            s.count,
            s.contracted_gpus,
            s.in_service_gpus,
            s.short_gpus,
            f"{s.short_at:%Y-%m-%d %H:%M}",
        )
        for s in found
    ]
    columns = (
        "contract", "holder", "model", "region", "window (UTC)", "held",
        "pool contracted", "pool in service", "pool short by", "at (UTC)",
    )  # fmt: skip
    return table("Contracts left short of GPUs", columns, rows)


def _offers_table(found: list[ContractOfferResponse]):
    rows = [
        (
            o.id,
            o.tenant_id,
            f"{o.count} x {o.gpu_model}",
            o.region,
            f"{o.starts_at:%Y-%m-%d %H:%M}",
            f"{o.ends_at:%Y-%m-%d %H:%M}",
            micros(o.price_micros),
            f"{o.expires_at:%Y-%m-%d %H:%M}",
            o.state,
            o.contract_id,
        )
        for o in found
    ]
    columns = ("id", "tenant", "GPUs", "region", "from", "until", "price", "open until", "state", "contract")
    return table("Contract offers", columns, rows)
