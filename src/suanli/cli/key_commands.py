"""`suanli keys`: a tenant's own API keys (one per script or machine, revoked when it leaks or leaves)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from suanli.cli.output import EXIT_USAGE, emit, error_text, errors, logged_in, table

keys_app = typer.Typer(help="Your API keys: list, create (shown once), revoke.", no_args_is_help=True)
TenantOption = Annotated[
    str | None, typer.Option("--tenant", help="Another tenant's keys (an operator's key); default: yours.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


@keys_app.command("ls")
def keys_ls(tenant: TenantOption = None, as_json: JsonFlag = False) -> None:
    """The keys, the one in use marked; secrets are never shown again."""
    with logged_in() as client:
        me = client.me()
        found = client.keys(tenant or me.tenant.id)
    rows = [
        (
            k.id + (" (this one)" if k.id == me.key_id else ""),
            k.label,
            f"{k.created_at:%Y-%m-%d %H:%M}",
            "revoked" if k.revoked else "active",
        )
        for k in found
    ]
    emit(found, as_json, lambda _: table("API keys", ("id", "label", "created (UTC)", "state"), rows))


@keys_app.command("create")
def keys_create(
    label: Annotated[str, typer.Option(help="What it is for, e.g. ci or laptop.")] = "",
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
) -> None:
    """A new key; its secret is printed once, here."""
    with logged_in({"label": "--label"}) as client:
        key = client.create_key(tenant or client.me().tenant.id, label)
    if as_json:
        typer.echo(key.model_dump_json(indent=2))
    else:
        typer.echo(f"key {key.id} (shown once, keep it secret): {key.secret}")


@keys_app.command("revoke")
def keys_revoke(
    key_id: str,
    tenant: TenantOption = None,
    force: Annotated[bool, typer.Option(help="Revoke even the key this CLI is logged in with.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Revoke a key: it stops working at once."""
    with logged_in() as client:
        me = client.me()
        if key_id == me.key_id and not force:
            errors.print(
                error_text(
                    f"{key_id} is the key this CLI is logged in with: revoking it logs you out for good "
                    "unless you have another (`suanli keys create` first); --force to revoke it anyway"
                )
            )
            raise typer.Exit(EXIT_USAGE)
        revoked = client.revoke_key(tenant or me.tenant.id, key_id)
    emit(revoked, as_json, lambda key: Text(f"revoked {key.id}"))
