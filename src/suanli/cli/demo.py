"""`suanli demo`: the server on SQLite, one agent process per node of a fleet file, a demo tenant logged in.

Every process the demo starts runs in its own session (process group), so shutdown is ordered: agents first
(each stops its workloads and ships their last output), then the server; anything still alive after its grace
is SIGKILLed, and as a last net every workload process group recorded under the data dir is killed. The data
dir is reset at start: each demo begins with an empty database.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import platformdirs
from rich.console import Console
from rich.panel import Panel

from suanli.agent.executors import group_alive
from suanli.agent.probe import DeclaredProbe
from suanli.cli import profile
from suanli.cli.output import error_text
from suanli.client.client import Client, ClientError
from suanli.domain.inventory import GpuMode
from suanli.sim.fleet_files import read_fleet

DEMO_CREDIT_MICROS = 1_000 * 1_000_000  # the demo tenant's prepaid credit (1,000 units)

SHOW_DEVICES = "\"import os; print(os.environ['CUDA_VISIBLE_DEVICES'])\""
HEARTBEAT_S = 2.0
AGENT_GRACE_S = 3.0
ROOT_WORK_ROOT = Path("/var/lib/suanli/demo")
EXIT_FAILED = 1
console = Console()


def run_demo(port: int, data_dir: Path | None, fleet_path: Path | None) -> int:
    """Run until SIGINT or SIGTERM (or the server dies); the exit code."""
    data_dir = (data_dir or Path(platformdirs.user_data_dir("suanli", appauthor=False)) / "demo").resolve()
    fleet_path = (fleet_path or _default_fleet()).resolve()
    if not fleet_path.is_file():
        console.print(error_text(f"no fleet file at {fleet_path}; pass --fleet FILE"))
        return EXIT_FAILED
    if not _port_free(port):
        console.print(error_text(f"port {port} is taken; pass --port P"))
        return EXIT_FAILED
    _reset(data_dir)
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    url = f"http://127.0.0.1:{port}"
    admin_key = f"sk_{secrets.token_urlsafe(24)}"
    server: subprocess.Popen[bytes] | None = None
    agents: list[subprocess.Popen[bytes]] = []
    try:
        with console.status("starting the server"):
            server = _start_server(data_dir, port, admin_key)
            if not _wait_healthy(url, server, stopping):
                console.print(error_text(f"the server did not start; see {data_dir / 'server.log'}"))
                return EXIT_FAILED
        fleet = read_fleet(fleet_path)
        with Client(url, admin_key) as admin, console.status(f"starting {len(fleet.nodes)} agents"):
            admin.put_fleet(fleet_path.read_text())
            tenant = admin.create_tenant("demo")
            tenant_key = admin.create_key(tenant.id, "demo").secret or ""
            admin.credit(tenant.id, DEMO_CREDIT_MICROS, memo="demo credit")
            for node in fleet.nodes:
                DeclaredProbe(node)  # fails here, not in 20 agent logs, when a node cannot be declared
                token = admin.create_join_token(node.name).token
                agents.append(_start_agent(data_dir, url, fleet_path, node.name, token))
        saved = profile.save(profile.Profile(url, tenant_key))
        carved = [node.name for node in fleet.nodes if node.gpu_mode is GpuMode.MIG]
        operator = f"admin mig {carved[0]}" if carved else "admin nodes"
        panel, commands = _banner(url, tenant_key, admin_key, saved, len(agents), data_dir, operator)
        console.print(panel)
        for line in commands:  # never wrapped: they are meant to be copied
            console.print(line, soft_wrap=True, markup=False, highlight=False)
        while not stopping.is_set():
            if server.poll() is not None:
                console.print(f"[red]the server exited[/red]; see {data_dir / 'server.log'}")
                return EXIT_FAILED
            stopping.wait(0.5)
        return 0
    except ClientError as error:
        console.print(error_text(str(error)))
        return EXIT_FAILED
    finally:
        with console.status("stopping agents, workloads and the server"):
            _stop_all(agents, AGENT_GRACE_S + 5)
            _kill_workloads(data_dir)
            if server is not None:
                _stop_all([server], 10)
        console.print("demo stopped; no process left running")


def _default_fleet() -> Path:
    for base in (Path.cwd(), *Path(__file__).resolve().parents):
        candidate = base / "examples" / "fleet.toml"
        if candidate.is_file():
            return candidate
    return Path("examples/fleet.toml")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _work_root(data_dir: Path) -> Path:
    """Where the agents keep their rentals: under the data dir, or, for root (whose data dir other uids
    cannot pass through), under /var/lib/suanli/demo, so that each rental runs as a uid of its own there as
    well (`suanli agent`'s default for root)."""
    if os.geteuid() != 0:
        return data_dir / "agents"
    return ROOT_WORK_ROOT / hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]


def _reset(data_dir: Path) -> None:
    _kill_workloads(data_dir)  # a demo killed with SIGKILL may have left workloads behind
    for name in ("suanli.db", "suanli.db-wal", "suanli.db-shm"):
        (data_dir / name).unlink(missing_ok=True)
    for directory in {data_dir / "agents", _work_root(data_dir)}:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)


def _suanli() -> list[str]:
    return [sys.executable, "-m", "suanli.cli.main"]


def _start_server(data_dir: Path, port: int, admin_key: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SUANLI_DATABASE_URL": f"sqlite:///{data_dir / 'suanli.db'}",
        "SUANLI_BOOTSTRAP_ADMIN_KEY": admin_key,
        "SUANLI_SCHEDULER_INTERVAL_S": "1",
        "SUANLI_AGENT_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
        # everything runs on this machine: a webhook to a receiver here (127.0.0.1) is what one tries
        "SUANLI_WEBHOOK_PRIVATE_OK": "1",
    }
    with (data_dir / "server.log").open("ab") as log:
        return subprocess.Popen(
            [*_suanli(), "server", "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_healthy(url: str, server: subprocess.Popen[bytes], stopping: threading.Event) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not stopping.is_set() and server.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    return False


def _start_agent(data_dir: Path, url: str, fleet: Path, node: str, token: str) -> subprocess.Popen[bytes]:
    args = [*_suanli(), "agent", "--server", url, "--declared", str(fleet), "--node", node]
    args += ["--work-dir", str(_work_root(data_dir) / node), "--grace", str(AGENT_GRACE_S)]
    # every node of the demo is this host: a multi-node rental's ranks reach rank 0 here (SUANLI_MASTER_ADDR),
    # not at a node name no resolver knows
    args += ["--stop-workloads-on-exit", "--advertise-host", "127.0.0.1"]
    with (data_dir / "agents" / f"{node}.log").open("ab") as log:
        return subprocess.Popen(
            args,
            env={**os.environ, "SUANLI_JOIN_TOKEN": token},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop_all(processes: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM every process group, wait up to `grace_s`, SIGKILL what is left."""
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def _kill_workloads(data_dir: Path) -> None:
    for record in _work_root(data_dir).glob("*/rentals/*/workload.json"):
        try:
            pgid = int(json.loads(record.read_text())["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _banner(
    url: str, key: str, admin_key: str, saved: Path, agents: int, data_dir: Path, operator: str
) -> tuple[Panel, list[str]]:
    """The box (addresses, keys, where things are) and the commands to try, `operator` (an admin command)
    among them."""
    prog = " ".join(shlex.quote(part) for part in _program())
    lines = [
        f"[bold]server[/bold]      {url}   (API docs: {url}/docs)",
        f"[bold]console[/bold]     {url}/ui/   (tenant key; the admin key opens the operators' pages)",
        f"[bold]tenant key[/bold]  {key}",
        f"[bold]admin key[/bold]   {admin_key}   (this demo's operator; SUANLI_API_KEY=... for one command)",
        f"[bold]credit[/bold]      {DEMO_CREDIT_MICROS // 1_000_000:,} units (prepaid; `suanli balance`)",
        f"[bold]agents[/bold]      {agents}, one per node of the fleet; logs in {data_dir / 'agents'}",
        f"[bold]CLI[/bold]         logged in as tenant 'demo' (profile: {saved})",
    ]
    commands = [
        "Try, in another terminal (Ctrl-C here stops everything):",
        f"  {prog} offers",
        f"  {prog} rent -f L40S:0.5 -- python3 -c {SHOW_DEVICES}   # waits, prints its output",
        f"  {prog} ls; {prog} logs <rental id>",
        f"  {prog} rent H100:1 -- sleep infinity; {prog} exec -it <rental id> -- bash   # a shell beside it",
        f"  SUANLI_API_KEY={admin_key} {prog} {operator}   # as the operator",
    ]
    return Panel("\n".join(lines), title="suanli demo", expand=False), commands


def _program() -> list[str]:
    """How the user can call this CLI from the current directory."""
    on_path = shutil.which("suanli")
    argv0 = Path(sys.argv[0])
    if argv0.name == "suanli":
        if on_path and Path(on_path).resolve() == argv0.resolve():
            return ["suanli"]
        return [str(argv0)]
    return ["suanli"] if on_path else [sys.executable, "-m", "suanli.cli.main"]
