"""`suanli exec RENTAL -- CMD...`: run a command inside a running rental and print its output, as `kubectl
exec`; exit with the command's exit code. `-i` attaches this side's input, `-t` a terminal (`suanli exec -it
RENTAL -- bash` is a shell on the node). `suanli port-forward RENTAL 8888` reaches a port of the rental;
`suanli cp` copies files in and out of it."""

from __future__ import annotations

import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn
from typer.core import TyperCommand
from websockets.exceptions import ConnectionClosed

from suanli.cli.attach import ENDED_BEFORE_ITS_AGENT, relay
from suanli.cli.output import (
    EXIT_REFUSED,
    EXIT_USAGE,
    emit,
    error_text,
    errors,
    logged_in,
    table,
    usage_error,
)
from suanli.cli.rent_spec import SpecError, duration_s
from suanli.client import Client
from suanli.client.copy import CopyError, RemotePath, download, upload
from suanli.client.forward import Forwarder, Refused
from suanli.wire.schemas import ExecResponse

LOST = "the connection to the server was lost (it restarted, or the network went)"
FORWARD_END_WAIT_S = 30.0  # after a forward's socket closed, how long to wait for word of how it ended
START_WAIT_S = 120.0  # how long exec and port-forward wait for a placed rental to start running


def _print(text: str, skipped: int) -> None:
    """What the command printed since the last poll, on stdout; a gap the server did not keep, on stderr."""
    if skipped:
        sys.stdout.flush()
        note = f"({skipped:,} characters of its output came too fast to be kept; -i streams all of it)"
        errors.print(note, style="dim", highlight=False)
    sys.stdout.write(text)
    sys.stdout.flush()


class ExecCommand(TyperCommand):
    """`suanli exec`: an option it does not know is most likely the command's own (`exec R ls -la`), so the
    error says where the command goes."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes `args`
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException as error:  # Typer's own click: NoSuchOption names the option
            option = getattr(error, "option_name", None)
            if option is None or "--" in given:  # before a --: a typo of one of ours
                raise
            taking_values = {
                name
                for param in self.params
                if param.param_type_name == "option" and not getattr(param, "is_flag", False)
                for name in param.opts
            }
            split = _rental_index(given, taking_values)
            if split is None:
                raise
            ours, theirs = given[: split + 1], given[split + 1 :]
            if not any(word.startswith(option) for word in theirs):  # before the rental: one of ours
                raise
            error.message = (
                f"No such option: {option}. The command to run goes after --, with its options: "
                f"suanli exec {shlex.join([*ours, '--', *theirs])}"
            )
            raise


def _rental_index(args: list[str], value_options: set[str]) -> int | None:
    """Where the rental is: the first word that is not an option or an option's value (None: none is)."""
    skip = False
    for index, word in enumerate(args):
        if skip:
            skip = False
        elif word in value_options:
            skip = True
        elif not word.startswith("-"):
            return index
    return None


def exec_command(
    rental_id: Annotated[str, typer.Argument(metavar="RENTAL", help="A running rental of yours.")],
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --")] = None,
    node_rank: Annotated[
        int, typer.Option("--node-rank", min=0, help="Which of its nodes (0: the first; see `suanli show`).")
    ] = 0,
    timeout: Annotated[
        str | None,
        typer.Option(
            help="Kill it after this long: 30s, 5m, 1h. Default 60s and at most 1h; with -i, default 1h "
            "and at most 8h."
        ),
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
    comes (about once a second; stdout and stderr together, the last 64 Ki characters kept) and exits with
    its exit code. It starts at the node agent's next heartbeat. With -i its output streams whole, its
    stdout here on stdout and its stderr on stderr; with -it it is a terminal session: `suanli exec -it
    RENTAL -- bash`. It ends with the rental."""
    if not command:
        example = "-- bash" if stdin else "-- nvidia-smi"
        errors.print(
            error_text(
                f"give the command to run after --, e.g. suanli exec {'-it ' if tty else ''}RENTAL {example}"
            )
        )
        raise typer.Exit(EXIT_USAGE)
    if tty and not stdin:
        errors.print(error_text("--tty: a terminal needs --stdin too (-it)"))
        raise typer.Exit(EXIT_USAGE)
    timeout_s = _timeout(timeout or ("1h" if stdin else "60s"), 8 * 3600 if stdin else 3600, stdin)
    options = {"node_rank": "--node-rank", "timeout_s": "--timeout", "command": "COMMAND", "stdin": "--stdin"}
    with logged_in(options) as client:
        _wait_running(client, rental_id)
        apart = stdin and not tty  # stdout and stderr each to its own, as kubectl exec -i
        queued = client.exec(
            rental_id,
            command,
            node_rank=node_rank,
            timeout_s=timeout_s,
            stdin=stdin,
            tty=tty,
            separate_stderr=apart,
        )
        if stdin:
            terminal = tty and sys.stdin.isatty()
            if not terminal and tty:
                errors.print(
                    "(input is not a terminal: what it reads is sent as it comes)",
                    style="dim",
                    highlight=False,
                )
            try:
                with client.attach_exec(rental_id, queued.id) as socket:
                    stderr_fd = sys.stderr.fileno() if apart else None
                    relay(socket, sys.stdin.fileno(), sys.stdout.fileno(), terminal, stderr_fd)
            except Refused as refused:
                errors.print(error_text(str(refused)))
                if refused.code != ENDED_BEFORE_ITS_AGENT:
                    raise typer.Exit(EXIT_REFUSED) from None
            except ConnectionClosed:
                errors.print()  # off the remote prompt's line
                errors.print(error_text(LOST))  # its command is hung up on the node
                raise typer.Exit(EXIT_REFUSED) from None
        try:
            ended = client.wait_exec(rental_id, queued.id, on_output=None if stdin else _print)
        except KeyboardInterrupt:
            detached = f"{queued.id} runs on until it ends or its --timeout; `suanli execs {rental_id}`"
            errors.print(f"\n(detached: {detached})")
            raise typer.Exit(130) from None
    if ended.state == "exited" and ended.message.startswith("timed out"):
        errors.print(f"{chr(10) if stdin else ''}({ended.message})", style="dim", highlight=False)
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
    port-forward RENTAL 8888` and open http://127.0.0.1:8888 for its Jupyter (`:8888`: any free local
    port, printed; use that where the rental runs on this machine, as in `suanli demo`). Every connection
    goes through the server; it starts at the node agent's next heartbeat and runs until Ctrl-C, its
    --timeout or the rental's end."""
    local, remote = _ports(ports)
    timeout_s = _timeout(timeout, 8 * 3600, True)
    try:  # (create_server reports a name it cannot resolve as a failure to bind: resolve it first)
        socket.getaddrinfo(address, local, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise usage_error(f"--address: {address!r} is not an address here ({error.strerror})") from None
    try:
        listener = socket.create_server((address, local))
    except OSError as error:
        where = f"[{address}]:{local}" if ":" in address else f"{address}:{local}"
        raise usage_error(f"[LOCAL:]REMOTE: cannot listen on {where}: {error.strerror or error}") from None
    with (
        listener,
        logged_in({"port": "[LOCAL:]REMOTE", "node_rank": "--node-rank", "timeout_s": "--timeout"}) as client,
    ):
        _wait_running(client, rental_id)
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
        try:  # how it ended: its agent's report, or the server's `lost` (its rental ended)
            ended = client.wait_exec(rental_id, queued.id, poll_s=0.25, within_s=FORWARD_END_WAIT_S)
        except KeyboardInterrupt:
            return
        except TimeoutError:
            errors.print(error_text("the forward ended; its node's agent has not said why"))
            raise typer.Exit(EXIT_REFUSED) from None
    if ended.state == "exited" and ended.exit_code in (0, 124):  # stopped on the node, or its time ran out
        errors.print(f"the forward ended ({ended.message})", style="dim", highlight=False)
        return
    errors.print(error_text(f"the forward ended: {ended.message or ended.state}"))
    raise typer.Exit(EXIT_REFUSED)


def copy_command(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="A local path, or RENTAL:PATH.")],
    destination: Annotated[str, typer.Argument(metavar="DEST", help="RENTAL:PATH, or a local path.")],
    node_rank: Annotated[
        int, typer.Option("--node-rank", min=0, help="Which of its nodes (0: the first; see `suanli show`).")
    ] = 0,
    timeout: Annotated[str, typer.Option(help="Stop after this long (at most 8h).")] = "1h",
) -> None:
    """Copy a file or directory into or out of a running rental, as `kubectl cp`: `suanli cp ./data
    RENTAL:data` (a relative PATH is in its working directory), `suanli cp RENTAL:results .`; into a
    directory that exists, by its name. It runs `tar` beside the workload, as it runs (its user, its
    container), starting at the node agent's next heartbeat."""
    remote_source, remote_destination = RemotePath.parse(source), RemotePath.parse(destination)
    remote = remote_source or remote_destination
    if remote is None or (remote_source is not None and remote_destination is not None):
        raise usage_error("SOURCE DEST: one of them is RENTAL:PATH (in a rental), the other a local path")
    timeout_s = _timeout(timeout, 8 * 3600, True)
    with logged_in({"node_rank": "--node-rank", "timeout_s": "--timeout"}) as client:
        _wait_running(client, remote.rental_id)
        columns = (
            TextColumn("{task.description}"),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
        )
        failed = ""
        with Progress(*columns, console=errors, transient=True, disable=not errors.is_terminal) as progress:
            task = progress.add_task("sending" if remote_destination else "receiving", total=None)

            def moved(count: int) -> None:
                progress.update(task, completed=count)

            try:
                if remote is remote_destination:
                    upload(
                        client, Path(source), remote, node_rank=node_rank, timeout_s=timeout_s, on_bytes=moved
                    )
                else:
                    download(
                        client,
                        remote,
                        Path(destination),
                        node_rank=node_rank,
                        timeout_s=timeout_s,
                        on_bytes=moved,
                    )
            except (CopyError, Refused) as error:
                failed = str(error)
            except ConnectionClosed:
                failed = LOST
    if failed:  # after the progress line has gone
        errors.print(error_text(failed))
        raise typer.Exit(EXIT_REFUSED)


def _ports(text: str) -> tuple[int, int]:
    """`8888` -> (8888, 8888); `9000:8888` -> (9000, 8888); `:8888` or `0:8888` -> any free local port, as
    kubectl port-forward reads them."""
    local_text, colon, remote_text = text.rpartition(":")
    try:
        remote = int(remote_text)
        local = int(local_text) if local_text else (0 if colon else remote)
    except ValueError:
        raise usage_error(
            f"[LOCAL:]REMOTE: {text!r} is not a port or LOCAL:REMOTE, e.g. 8888, 9000:8888 or :8888"
        ) from None
    if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
        raise usage_error(f"[LOCAL:]REMOTE: {text!r}: a port is 1 to 65535 (local 0: any free port)")
    return local, remote


def _timeout(text: str, most_s: int, attached: bool) -> int:
    """`--timeout` in seconds, checked against the limit here so that the message says it in hours."""
    try:
        seconds = duration_s(text)
    except SpecError as error:
        raise usage_error(f"--timeout: {error}") from None
    if seconds > most_s:
        limit = f"at most {most_s // 3600}h" + ("" if attached else " (8h with -i)")
        raise usage_error(f"--timeout: {text!r} is too long: {limit}")
    return seconds


def _wait_running(client: Client, rental_id: str) -> None:
    """Wait for a rental that has its GPUs and is starting (placed, starting) to run, as `rent` then `exec`
    right away would find it; a rental in any other state is the server's to refuse."""
    deadline = time.monotonic() + START_WAIT_S
    said = False
    while (state := client.rental(rental_id).state) in ("placed", "starting") and time.monotonic() < deadline:
        if not said:
            errors.print(
                f"(waiting for {rental_id} to start running: it is {state})", style="dim", highlight=False
            )
            said = True
        time.sleep(1.0)


def execs_command(
    rental_id: Annotated[str, typer.Argument(metavar="RENTAL", help="A rental of yours.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")
    ] = False,
) -> None:
    """The rental's commands, shells and port forwards, newest first: what, where, state and exit code (at
    most 8 may be open at once)."""
    with logged_in() as client:
        found = client.execs(rental_id)
    emit(found, as_json, _execs_table)


def _execs_table(found: list[ExecResponse]):
    rows = [
        (
            e.id,
            _what(e),
            e.node,
            e.state,
            "" if e.exit_code is None else e.exit_code,
            f"{e.created_at:%Y-%m-%d %H:%M:%S}",
            "" if e.ended_at is None else f"{e.ended_at:%H:%M:%S}",
            e.message,
        )
        for e in found
    ]
    columns = ("id", "what", "node", "state", "exit", "asked (UTC)", "ended", "message")
    return table("Commands and port forwards", columns, rows)


def _what(found: ExecResponse) -> str:
    if found.port is not None:
        return f"port-forward :{found.port}"
    command = shlex.join(found.command)
    return f"{'-it' if found.tty else '-i'} {command}" if found.stdin else command
