"""`suanli webhooks`: URLs that get your rentals' events as they happen, signed (`app/webhooks.py`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from suanli.cli.output import EXIT_USAGE, emit, error_text, errors, logged_in, table

webhooks_app = typer.Typer(help="Your webhooks: your rentals' events POSTed to a URL.", no_args_is_help=True)
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


@webhooks_app.command("add")
def webhooks_add(
    url: str,
    event: Annotated[
        list[str] | None,
        typer.Option(
            help="Only events of this kind, e.g. stopped, failed, preempting (repeatable); default: all."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Send your rentals' events from now on to URL, signed (the secret is printed once, here)."""
    with logged_in({"url": "URL", "events": "--event"}) as client:
        webhook = client.create_webhook(url, event or ())
    if as_json:
        typer.echo(webhook.model_dump_json(indent=2))
    else:
        kinds = f" ({', '.join(webhook.events)})" if webhook.events else ""
        typer.echo(
            f"webhook {webhook.id} -> {webhook.url}{kinds}; signing secret (shown once): {webhook.secret}"
        )


@webhooks_app.command("ls")
def webhooks_ls(as_json: JsonFlag = False) -> None:
    """Your webhooks and how their deliveries stand."""
    with logged_in() as client:
        found = client.webhooks()
    rows = [
        (
            w.id,
            w.url,
            ", ".join(w.events) or "all",
            "" if w.delivered_at is None else f"{w.delivered_at:%Y-%m-%d %H:%M:%S}",
            w.failures,
            w.last_error or "",
        )
        for w in found
    ]
    columns = ("id", "url", "events", "last delivered (UTC)", "failures", "last error")
    emit(found, as_json, lambda _: table("webhooks", columns, rows))


@webhooks_app.command("set")
def webhooks_set(
    webhook_id: str,
    url: Annotated[str | None, typer.Option(help="Send to this URL from now on.")] = None,
    event: Annotated[
        list[str] | None, typer.Option(help="Only events of this kind from now on (repeatable).")
    ] = None,
    all_events: Annotated[
        bool, typer.Option("--all-events", help="Every kind of event from now on.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Change a webhook's URL or event kinds; its secret stays, and delivery goes on from where it stood."""
    if event and all_events:
        errors.print(error_text("--event and --all-events: give one or the other"))
        raise typer.Exit(EXIT_USAGE)
    kinds = [] if all_events else event
    with logged_in({"url": "--url", "events": "--event"}) as client:
        webhook = client.change_webhook(webhook_id, url, kinds)
    if as_json:
        typer.echo(webhook.model_dump_json(indent=2))
    else:
        typer.echo(f"webhook {webhook.id} -> {webhook.url} ({', '.join(webhook.events) or 'all events'})")


@webhooks_app.command("rm")
def webhooks_rm(webhook_id: str, as_json: JsonFlag = False) -> None:
    """Stop sending to a webhook."""
    with logged_in() as client:
        removed = client.remove_webhook(webhook_id)
    emit(removed, as_json, lambda hook: Text(f"removed {hook.id}"))
