"""`suanli agent` (run the node agent), `suanli logs RENTAL [-f]` and `suanli demo` (the whole platform)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated

import platformdirs
import typer
from rich.text import Text

from suanli.agent.executor_choice import DEFAULT_UIDS, ExecutorKind, choose_executor, describe
from suanli.agent.executors import ProcessExecutor
from suanli.agent.probe import DeclaredProbe, GpuProbe, NvmlProbe
from suanli.agent.proc_visibility import host_command_lines_visible
from suanli.agent.runner import AgentError, AgentRunner
from suanli.cli.demo import run_demo
from suanli.cli.follow import print_output, why_silent
from suanli.cli.output import EXIT_USAGE, error_text, errors, logged_in
from suanli.domain.errors import SuanliError

ROOT_WORK_DIR = Path("/var/lib/suanli/agent")


def default_work_dir() -> Path:
    """Root's is /var/lib/suanli/agent, which workloads run as other uids can pass through (a root agent
    registered before under root's data dir keeps it, with its node key); anyone else's, their data dir."""
    own = Path(platformdirs.user_data_dir("suanli", appauthor=False)) / "agent"
    if os.geteuid() != 0 or ((own / "agent.json").exists() and not (ROOT_WORK_DIR / "agent.json").exists()):
        return own
    return ROOT_WORK_DIR


def agent(
    server: Annotated[
        list[str],
        typer.Option(
            metavar="URL",
            help="Server URL, e.g. http://127.0.0.1:8080. Repeat it for each server of a platform on one "
            "database: the agent moves to the next when one cannot be reached.",
        ),
    ],
    token: Annotated[
        str | None,
        typer.Option(envvar="SUANLI_JOIN_TOKEN", help="Join token (jt_...); not needed once registered."),
    ] = None,
    declared: Annotated[
        Path | None, typer.Option(help="Fleet TOML: declare this host's GPUs instead of asking NVML.")
    ] = None,
    node: Annotated[str | None, typer.Option(help="Node name in --declared (default: host name).")] = None,
    work_dir: Annotated[
        Path | None,
        typer.Option(
            help="Node key, workloads and logs (default: /var/lib/suanli/agent for root, else your data dir)."
        ),
    ] = None,
    interval: Annotated[
        float | None, typer.Option(min=0.05, help="Heartbeat interval, s (default: the server's).")
    ] = None,
    grace: Annotated[
        float,
        typer.Option(
            min=0,
            help="SIGTERM -> SIGKILL grace when stopping, s (at most one heartbeat interval for a stop the "
            "server asks for: no heartbeat goes out meanwhile).",
        ),
    ] = 5.0,
    stop_workloads_on_exit: Annotated[
        bool, typer.Option(help="Stop every workload when the agent exits (default: leave them running).")
    ] = False,
    advertise_host: Annotated[
        str | None,
        typer.Option(
            help="Host name or address the other nodes of a multi-node rental reach this one by "
            "(SUANLI_NODES, SUANLI_MASTER_ADDR); sent when registering (default: the host name)."
        ),
    ] = None,
    executor: Annotated[
        ExecutorKind,
        typer.Option(
            case_sensitive=False,
            help="process: workloads run as host processes (a rental with an image fails here); container: "
            "in containers through docker or podman (a rental without an image runs in the catalogue's "
            "newest pytorch); auto: container when a runtime is on PATH, else process.",
        ),
    ] = ExecutorKind.PROCESS,
    runtime: Annotated[
        str | None,
        typer.Option(help="Container runtime: docker or podman (default: the first on PATH, docker first)."),
    ] = None,
    run_as: Annotated[
        str | None,
        typer.Option(
            help="Run host-process workloads as this local user (the agent must be root), so that they "
            "cannot read the agent's node key or other rentals' files (they share that user's uid: see "
            "--run-as-uids)."
        ),
    ] = None,
    run_as_uids: Annotated[
        str | None,
        typer.Option(
            metavar="FIRST-LAST",
            help="Run each rental's host-process workload as a uid of its own from this range, with no "
            "account behind it (the agent must be root; the range must hold no user of the host, e.g. "
            "61000-61999), so that workloads can neither read the agent's node key nor see, signal or "
            f"read the environment of one another. A root agent does so by default, from {DEFAULT_UIDS}, "
            "where its work dir can be reached by other uids; 'none' runs them as the agent's user.",
        ),
    ] = None,
) -> None:
    """Run the node agent: register, heartbeat, run the rentals placed on this host, ship their logs."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    probe: GpuProbe
    try:
        probe = (
            DeclaredProbe.from_file(declared, node or socket.gethostname())
            if declared is not None
            else NvmlProbe()
        )
        directory = work_dir or default_work_dir()
        chosen = choose_executor(executor, directory, runtime, run_as, run_as_uids)
        logging.getLogger(__name__).info("workloads run with %s", describe(chosen))
        if isinstance(chosen, ProcessExecutor) and host_command_lines_visible():
            logging.getLogger(__name__).warning(
                "host processes of different rentals can read each other's command lines (/proc is mounted "
                "without hidepid=invisible): pass secrets in env, or use --executor container"
            )
        runner = AgentRunner(
            server,
            probe,
            directory,
            join_token=token,
            executor=chosen,
            interval_s=interval,
            grace_s=grace,
            stop_workloads_on_exit=stop_workloads_on_exit,
            advertise_host=advertise_host,
            expected_node=(node or socket.gethostname()) if declared is not None else None,
        )
    except SuanliError as error:
        errors.print(error_text(str(error)))
        raise typer.Exit(EXIT_USAGE) from None
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        runner.run(stopping)
    except AgentError as error:
        errors.print(error_text(str(error)))
        raise typer.Exit(EXIT_USAGE) from None


def logs(
    rental_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow until the rental ends.")] = False,
    node: Annotated[
        str | None, typer.Option(help="Only this node's output (of a multi-node rental; see `suanli show`).")
    ] = None,
    tail: Annotated[
        int | None, typer.Option(min=0, help="Only the last N lines (of up to 1 MiB), then follow with -f.")
    ] = None,
) -> None:
    """A rental's output (stdout and stderr of its workload; of every node, as it came, or of one)."""
    with logged_in({"node": "--node"}) as client:
        printed = print_output(client, rental_id, follow, node=node, tail_lines=tail)
        if not printed and tail is None and (why := why_silent(client, rental_id)):
            errors.print(Text(why))


def demo(
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port of the server.")] = 8080,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Database, agents, logs (default: <data dir>/demo; reset each run)."),
    ] = None,
    fleet: Annotated[Path | None, typer.Option(help="Fleet TOML (default: examples/fleet.toml).")] = None,
) -> None:
    """The whole platform here: server, one agent per node, a demo tenant logged in. Ctrl-C stops."""
    raise typer.Exit(run_demo(port, data_dir, fleet))
