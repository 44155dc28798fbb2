"""`suanli admin maintenance add/ls/rm`: schedule, list and cancel nodes' maintenance windows (admin key)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.text import Text

from suanli.cli.contract_commands import with_shortfalls
from suanli.cli.output import emit, logged_in, moment_option, table, valid_input
from suanli.wire.schemas import MaintenanceCreateRequest, MaintenanceResponse

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]
MAINTENANCE_OPTIONS = {"node": "NODE", "starts_at": "--from", "ends_at": "--until", "reason": "--reason"}

maintenance_app = typer.Typer(
    help="Nodes' maintenance windows: nothing placed there inside one, rentals told to end by its start.",
    no_args_is_help=True,
)


@maintenance_app.command("add")
def maintenance_add(
    node: str,
    starts_at: Annotated[
        datetime,
        typer.Option(
            "--from", parser=moment_option, metavar="TIME", help="Window start: now, +2h, 2026-12-01T02:00."
        ),
    ],
    ends_at: Annotated[
        datetime,
        typer.Option(
            "--until", parser=moment_option, metavar="TIME", help="Window end (exclusive): +4h, or a time."
        ),
    ],
    reason: Annotated[str, typer.Option(help="Why, shown to the rentals given notice.")] = "",
    force: Annotated[
        bool, typer.Option("--force", help="Schedule it even if it leaves contracts short (they are named).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Take NODE out of service over [from, until); refused when it would leave a contract short."""
    with valid_input(MAINTENANCE_OPTIONS):
        request = MaintenanceCreateRequest(
            node=node, starts_at=starts_at, ends_at=ends_at, reason=reason, force=force
        )
    with logged_in(MAINTENANCE_OPTIONS) as client:  # the server's refusals name the option, not the field
        window = client.schedule_maintenance(request)
    emit(window, as_json, lambda w: with_shortfalls(_windows_table([w]), w.short_contracts, w.shortfalls))


@maintenance_app.command("ls")
def maintenance_ls(
    include_past: Annotated[bool, typer.Option("--all", help="Also the windows that have ended.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Maintenance windows still to end (all with --all), by start."""
    with logged_in() as client:
        found = client.maintenance(include_past)
    emit(found, as_json, _windows_table)


@maintenance_app.command("rm")
def maintenance_rm(window_id: str, as_json: JsonFlag = False) -> None:
    """Cancel a maintenance window."""
    with logged_in() as client:
        cancelled = client.cancel_maintenance(window_id)
    emit(cancelled, as_json, lambda window: Text(f"cancelled {window.id}"))


def _windows_table(found: list[MaintenanceResponse]):
    rows = [
        (w.id, w.node, f"{w.starts_at:%Y-%m-%d %H:%M}", f"{w.ends_at:%Y-%m-%d %H:%M}", w.reason)
        for w in found
    ]
    return table("Maintenance", ("id", "node", "from", "until", "reason"), rows)
