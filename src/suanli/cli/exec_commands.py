"""`suanli exec RENTAL -- CMD...`: run a command inside a running rental and print its output, as `kubectl
exec` without a terminal; exit with the command's exit code."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from suanli.cli.output import EXIT_REFUSED, EXIT_USAGE, error_text, errors, logged_in
from suanli.cli.rent_spec import SpecError, duration_s


def _print(text: str, skipped: int) -> None:
    """What the command printed since the last poll, on stdout; a gap the server did not keep, on stderr."""
    if skipped:
        sys.stdout.flush()
        errors.print(error_text(f"({skipped} characters of its output were not kept)"))
    sys.stdout.write(text)
    sys.stdout.flush()


def exec_command(
    rental_id: Annotated[str, typer.Argument(metavar="RENTAL", help="A running rental of yours.")],
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --")] = None,
    node_rank: Annotated[
        int, typer.Option("--node-rank", min=0, help="Which of its nodes (0: the first; see `suanli show`).")
    ] = 0,
    timeout: Annotated[str, typer.Option(help="Kill it after this long: 30s, 5m, 1h (at most 1h).")] = "60s",
) -> None:
    """Run a command inside a running rental, on one of its nodes, as its workload runs: its user, GPUs,
    environment and working directory (its container, for an image). Prints the command's output as it
    comes (about once a second) and exits with its exit code. It starts at the node agent's next heartbeat."""
    if not command:
        errors.print(error_text("give the command to run after --, e.g. suanli exec RENTAL -- nvidia-smi"))
        raise typer.Exit(EXIT_USAGE)
    try:
        timeout_s = duration_s(timeout)
    except SpecError as error:
        errors.print(error_text(f"--timeout: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    with logged_in({"node_rank": "--node-rank", "timeout_s": "--timeout", "command": "COMMAND"}) as client:
        queued = client.exec(rental_id, command, node_rank=node_rank, timeout_s=timeout_s)
        ended = client.wait_exec(rental_id, queued.id, on_output=_print)
    if ended.state == "exited" and ended.exit_code is not None:
        raise typer.Exit(ended.exit_code if 0 <= ended.exit_code <= 255 else EXIT_REFUSED)
    errors.print(error_text(f"{ended.state} on {ended.node}: {ended.message or 'no exit code'}"))
    raise typer.Exit(EXIT_REFUSED)
