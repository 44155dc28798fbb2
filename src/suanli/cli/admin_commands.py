"""Operator commands (`suanli admin ...`, an admin key): tenants and keys, the fleet, nodes, MIG layouts,
drains and join tokens. Billing, plans, maintenance and SLA commands join `admin_app` in `main`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from suanli.cli.contract_commands import with_shortfalls
from suanli.cli.output import EXIT_USAGE, emit, error_text, errors, logged_in, table
from suanli.wire.agent_schemas import JoinTokenResponse
from suanli.wire.schemas import FleetResponse, NodeDrainResponse, NodeResponse

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]

admin_app = typer.Typer(help="Operator commands (admin key).", no_args_is_help=True)


@admin_app.command("tenant-create")
def admin_tenant_create(
    name: str,
    role: Annotated[str, typer.Option(help="tenant, provider or admin.")] = "tenant",
    as_json: JsonFlag = False,
) -> None:
    """Create a tenant and its first API key (shown once)."""
    with logged_in({"name": "NAME", "role": "--role"}) as client:
        tenant = client.create_tenant(name, role)
        key = client.create_key(tenant.id, "first key")
    if as_json:
        typer.echo(key.model_dump_json(indent=2))
    else:
        typer.echo(f"tenant {tenant.id} ({tenant.name}, {tenant.role}); key (shown once): {key.secret}")


@admin_app.command("tenants")
def admin_tenants(as_json: JsonFlag = False) -> None:
    """Every tenant: id, name, role and when it was made."""
    with logged_in() as client:
        found = client.tenants()
    emit(
        found,
        as_json,
        lambda tenants: table(
            "tenants",
            ["id", "name", "role", "created (UTC)"],
            [(t.id, t.name, t.role, f"{t.created_at:%Y-%m-%d %H:%M}") for t in tenants],
        ),
    )


@admin_app.command("key-create")
def admin_key_create(tenant_id: str, label: str = "", as_json: JsonFlag = False) -> None:
    """Create another API key for a tenant (shown once)."""
    with logged_in() as client:
        key = client.create_key(tenant_id, label)
    typer.echo(key.model_dump_json(indent=2) if as_json else f"key {key.id} (shown once): {key.secret}")


@admin_app.command("key-revoke")
def admin_key_revoke(tenant_id: str, key_id: str, as_json: JsonFlag = False) -> None:
    """Revoke an API key; it stops working at once."""
    with logged_in() as client:
        revoked = client.revoke_key(tenant_id, key_id)
    emit(revoked, as_json, lambda key: Text(f"revoked {key.id}"))


@admin_app.command("fleet-put")
def admin_fleet_put(
    path: Path,
    force: Annotated[
        bool,
        typer.Option("--force", help="Put it even if a signed contract is then short of GPUs (or shorter)."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Replace the fleet with a fleet TOML file (see examples/fleet.toml); forced, it lists the contracts it
    left short."""
    try:
        text = path.read_text()
    except OSError as error:
        errors.print(error_text(f"{path}: {error.strerror}"))
        raise typer.Exit(EXIT_USAGE) from None
    with logged_in() as client:
        fleet = client.put_fleet(text, force=force)
    emit(fleet, as_json, _fleet_put_view)


def _fleet_put_view(fleet: FleetResponse):
    """The new fleet's size, and after a forced put the contracts it left short, with how short."""
    done = Text(f"fleet: {fleet.regions} regions, {fleet.nodes} nodes, {fleet.gpus} GPUs")
    return with_shortfalls(done, fleet.short_contracts, fleet.shortfalls)


@admin_app.command("nodes")
def admin_nodes(as_json: JsonFlag = False) -> None:
    """Every node with its free capacity and whether it takes new work."""
    with logged_in() as client:
        found = client.nodes()
    emit(found, as_json, _nodes_table)


@admin_app.command("mig")
def admin_mig(
    node: Annotated[str | None, typer.Argument(help="Only this node.")] = None, as_json: JsonFlag = False
) -> None:
    """Each MIG GPU's instances as the scheduler lays them out: as its host reported them, or as declared."""
    with logged_in() as client:
        found = [n for n in client.nodes() if n.gpu_mode == "mig" and node in (None, n.name)]
    if node is not None and not found:
        errors.print(error_text(f"node: {node} is not a MIG node of the fleet"))
        raise typer.Exit(EXIT_USAGE)
    emit(found, as_json, _mig_table)


@admin_app.command("drain")
def admin_drain(
    node: str,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Drain even if a signed contract is then short of GPUs (they are listed)."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Stop placing new work on a node (running rentals stay); refused if a contract would be short."""
    with logged_in({"node": "NODE"}) as client:  # a refusal names the argument, not the wire field
        drained = client.drain(node, force=force)
    emit(drained, as_json, _drained_view)


@admin_app.command("undrain")
def admin_undrain(node: str, as_json: JsonFlag = False) -> None:
    """Let a drained node take new work again."""
    with logged_in() as client:
        shown = client.undrain(node)
    emit(shown, as_json, _undrained_view)


def _undrained_view(shown: NodeResponse) -> Text:
    """The node undrained, and the maintenance window that still keeps it out of placements, if any."""
    if shown.maintenance_until is None:
        return Text(f"undrained {shown.name}")
    until = shown.maintenance_until.strftime("%Y-%m-%d %H:%M UTC")  # its drain is lifted, its window is not
    return Text(f"undrained {shown.name}; it stays out of placements for its maintenance until {until}")


@admin_app.command("join-token")
def admin_join_token(node: str, as_json: JsonFlag = False) -> None:
    """A single-use token with which the agent on NODE registers (`suanli agent --token ...`), valid for the
    server's SUANLI_JOIN_TOKEN_TTL_S (1 h by default)."""
    with logged_in() as client:
        token = client.create_join_token(node)
    typer.echo(token.model_dump_json(indent=2) if as_json else _join_token_line(token))


def _join_token_line(token: JoinTokenResponse) -> str:
    """The token with its node and expiry (a token made for a batch of hosts may run out before one starts),
    on one line however narrow the terminal, for copying."""
    expires = f"{token.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    return f"join token for {token.node} (single use, expires {expires}): {token.token}"


def _nodes_table(found: list[NodeResponse]):
    rows = [
        (
            n.name,
            n.region,
            n.gpu_model,
            n.gpu_count,
            n.gpu_mode,
            f"{n.free_gpu_milli / 1000:g}",
            _schedulable(n),
            n.topology,
        )
        for n in found
    ]
    return table(
        "Nodes", ("name", "region", "model", "GPUs", "mode", "free", "schedulable", "topology"), rows
    )


def _drained_view(drained: NodeDrainResponse):
    """`drained NODE`, and after a forced drain the contracts it left short, with how short."""
    return with_shortfalls(Text(f"drained {drained.name}"), drained.short_contracts, drained.shortfalls)


def _schedulable(node: NodeResponse) -> str:
    """yes; maintenance until its window's end; cordoned while its host's GPUs are not the fleet's, saying
    how; or drained (an operator's drain, or down)."""
    if node.gpu_mismatch is not None:
        return f"no: {node.gpu_mismatch}"
    if node.maintenance_until is not None:
        return f"maintenance until {node.maintenance_until:%m-%d %H:%M}"
    return "yes" if node.schedulable else "drained"


def _mig_table(found: list[NodeResponse]):
    rows = []
    for n in found:
        for index in range(n.gpu_count):
            instances = " ".join(
                f"{i.profile}@{i.start_slot}" + (" (busy)" if i.busy else "")
                for i in n.mig_instances
                if i.gpu_index == index
            )
            rows.append((n.name, index, instances or "none", "host" if index in n.mig_host_gpus else "fleet"))
    return table("MIG instances", ("node", "GPU", "instances (profile@start)", "layout from"), rows)
