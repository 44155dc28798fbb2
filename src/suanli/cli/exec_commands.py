"""`suanli exec RENTAL -- CMD...`: run a command inside a running rental and print its output, as `kubectl
exec`; exit with the command's exit code. `-i` attaches this side's input, `-t` a terminal (`suanli exec -it
RENTAL -- bash` is a shell on the node). `suanli port-forward RENTAL 8888` reaches a port of the rental."""

from __future__ import annotations

import socket
import sys
from typing import Annotated

import typer
from websockets.exceptions import ConnectionClosed

from suanli.cli.attach import ENDED_BEFORE_ITS_AGENT, relay
from suanli.cli.output import EXIT_REFUSED, EXIT_USAGE, error_text, errors, logged_in, usage_error
from suanli.cli.rent_spec import SpecError, duration_s
from suanli.client.forward import Forwarder, Refused

LOST = "the connection to the server was lost (it restarted, or the network went)"


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
    timeout: Annotated[
        str | None,
        typer.Option(help="Kill it after this long: 30s, 5m, 1h (default 60s, at most 1h; attached 1h, 8h)."),
    ] = None,
    stdin: Annotated[
        bool, typer.Option("--stdin", "-i", help="Attach: send this side's input to it, its output live.")
    ] = False,
    tty: Annotated[
        bool,
        typer.Option("--tty", "-t", help="With -i, on a terminal: -it for a shell (every key goes to it)."),
    ] = False,
) -> None:
    """Run a command inside a running rental, on one of its nodes, as its workload runs: its user, GPUs,
    environment and working directory (its container, for an image). Prints the command's output as it
    comes (about once a second) and exits with its exit code. It starts at the node agent's next heartbeat.
    With -it it is a terminal session: `suanli exec -it RENTAL -- bash`."""
    if not command:
        errors.print(error_text("give the command to run after --, e.g. suanli exec RENTAL -- nvidia-smi"))
        raise typer.Exit(EXIT_USAGE)
    if tty and not stdin:
        errors.print(error_text("--tty: a terminal needs --stdin too (-it)"))
        raise typer.Exit(EXIT_USAGE)
    try:
        timeout_s = duration_s(timeout or ("1h" if stdin else "60s"))
    except SpecError as error:
        errors.print(error_text(f"--timeout: {error}"))
        raise typer.Exit(EXIT_USAGE) from None
    options = {"node_rank": "--node-rank", "timeout_s": "--timeout", "command": "COMMAND", "stdin": "--stdin"}
    with logged_in(options) as client:
        queued = client.exec(
            rental_id, command, node_rank=node_rank, timeout_s=timeout_s, stdin=stdin, tty=tty
        )
        if stdin:
            terminal = tty and sys.stdin.isatty()
            if not terminal and tty:
                errors.print(error_text("(input is not a terminal: its keys are sent as they are read)"))
            try:
                with client.attach_exec(rental_id, queued.id) as socket:
                    relay(socket, sys.stdin.fileno(), sys.stdout.fileno(), terminal)
            except Refused as refused:
                errors.print(error_text(str(refused)))
                if refused.code != ENDED_BEFORE_ITS_AGENT:
                    raise typer.Exit(EXIT_REFUSED) from None
            except ConnectionClosed:
                errors.print()  # off the remote prompt's line
                errors.print(error_text(LOST))  # its command is hung up on the node
                raise typer.Exit(EXIT_REFUSED) from None
        ended = client.wait_exec(rental_id, queued.id, on_output=None if stdin else _print)
    if ended.state == "exited" and ended.exit_code is not None:
        raise typer.Exit(ended.exit_code if 0 <= ended.exit_code <= 255 else EXIT_REFUSED)
    errors.print(error_text(f"{ended.state} on {ended.node}: {ended.message or 'no exit code'}"))
    raise typer.Exit(EXIT_REFUSED)


def port_forward_command(
    rental_id: Annotated[str, typer.Argument(metavar="RENTAL", help="A running rental of yours.")],
    ports: Annotated[
        str,
        typer.Argument(
            metavar="[LOCAL:]REMOTE",
            help="The rental's port, and the local one (default the same; 0: any free).",
        ),
    ],
    node_rank: Annotated[
        int, typer.Option("--node-rank", min=0, help="Which of its nodes (0: the first; see `suanli show`).")
    ] = 0,
    address: Annotated[str, typer.Option("--address", help="The local address to listen on.")] = "127.0.0.1",
    timeout: Annotated[str, typer.Option(help="Stop forwarding after this long (at most 8h).")] = "8h",
) -> None:
    """Forward a local port to a port of a running rental, as `kubectl port-forward` does: `suanli
    port-forward RENTAL 8888` and open http://127.0.0.1:8888 for its Jupyter. Every connection goes through
    the server; it starts at the node agent's next heartbeat and runs until Ctrl-C or its timeout."""
    local, remote = _ports(ports)
    try:
        timeout_s = duration_s(timeout)
    except SpecError as error:
        raise usage_error(f"--timeout: {error}") from None
    try:
        listener = socket.create_server((address, local))
    except OSError as error:
        raise usage_error(
            f"[LOCAL:]REMOTE: cannot listen on {address}:{local}: {error.strerror or error}"
        ) from None
    with (
        listener,
        logged_in({"port": "[LOCAL:]REMOTE", "node_rank": "--node-rank", "timeout_s": "--timeout"}) as client,
    ):
        queued = client.forward(rental_id, remote, node_rank=node_rank, timeout_s=timeout_s)
        bound = listener.getsockname()[1]
        errors.print(f"Forwarding from {address}:{bound} -> port {remote} of {rental_id} (Ctrl-C stops)")
        try:
            with client.attach_exec(rental_id, queued.id) as ws:
                Forwarder(ws, listener, on_error=lambda message: errors.print(error_text(message))).run()
        except KeyboardInterrupt:
            return
        except Refused as refused:
            errors.print(error_text(str(refused)))
            raise typer.Exit(EXIT_REFUSED) from None
        except ConnectionClosed:
            errors.print(error_text(LOST))
            raise typer.Exit(EXIT_REFUSED) from None
    errors.print("the forward ended (its time ran out, or the rental ended)")


def _ports(text: str) -> tuple[int, int]:
    """`8888` -> (8888, 8888); `9000:8888` -> (9000, 8888); `0:8888` -> any free local port."""
    local_text, _, remote_text = text.rpartition(":")
    try:
        remote = int(remote_text)
        local = int(local_text) if local_text else remote
    except ValueError:
        raise usage_error(
            f"[LOCAL:]REMOTE: {text!r} is not a port or LOCAL:REMOTE, e.g. 8888 or 9000:8888"
        ) from None
    if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
        raise usage_error(f"[LOCAL:]REMOTE: {text!r}: a port is 1 to 65535 (local 0: any free port)")
    return local, remote
