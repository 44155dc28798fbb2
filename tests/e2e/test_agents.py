"""End to end with real processes on loopback: a server on SQLite and three `suanli agent` processes with
declared probes. Heartbeats every 0.3 s, a node is down after 6 missed ones (1.8 s: with 3, an agent
starved of CPU on a loaded machine was once marked down while alive)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from loopback_gateway import Gateway, free_port
from suanli.agent.executors import group_alive
from suanli.agent.probe import declared_gpu_uuid
from suanli.cli.output import micros
from suanli.client import Client
from suanli.wire.schemas import RentalCreateRequest

SUANLI = [sys.executable, "-m", "suanli.cli.main"]
ADMIN_KEY = "sk_e2e_agents_admin_0123456789"
NODES = ("gpu-01", "gpu-02", "gpu-03")
FLEET = """
[regions.lab]
jurisdiction = "EU"
grid_gco2_per_kwh = 380
pue = 1.25

[[nodes]]
name = "gpu-{i}"
count_nodes = 3
topology = "lab/z1/pod-a/leaf-01"
cpu_milli = 64000
memory_mib = 262144
gpus = { model = "H100-SXM-80GB", count = 2, mode = "whole" }
"""
HEARTBEAT_S = 0.3
MISSED_HEARTBEATS = 6
DOWN_AFTER_S = HEARTBEAT_S * MISSED_HEARTBEATS
NOTICE_S = 3.0
# a spot workload that traps SIGTERM, says whether the notice file was there, and keeps running until killed
TRAPS_SIGTERM = """
import os, signal, time
def term(*_):
    print(f"TERM notice={os.path.exists(os.environ['SUANLI_NOTICE_FILE'])} at={time.time()}", flush=True)
signal.signal(signal.SIGTERM, term)
print("started", flush=True)
while True:
    print(f"alive at={time.time()}", flush=True)
    time.sleep(0.1)
"""

# a workload that checkpoints: it counts from what it saved, and saves its count when told to stop (SIGTERM)
SAVES_ON_SIGTERM = """
import os, pathlib, signal, sys, time
saved = pathlib.Path(os.environ["STATE_DIR"]) / os.environ["SUANLI_RENTAL_ID"]
count = int(saved.read_text()) if saved.exists() else 0
print(f"counting from {count}", flush=True)
def save(*_):
    saved.write_text(str(count))
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
while True:
    count += 1
    time.sleep(0.05)
"""


def host(node: str) -> str:
    """The host name each test agent advertises for its node."""
    return f"{node}.lab.test"


@dataclass
class Platform:
    tmp: Path
    port: int
    url: str
    server: subprocess.Popen[bytes] | None = None
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    tenant_key: str = ""
    missed_heartbeats: int = MISSED_HEARTBEATS  # before a node is marked down
    agent_args: tuple[str, ...] = ()  # more `suanli agent` options, e.g. the executor
    agent_path: str | None = None  # the agents' PATH (default: this process's)
    database_url: str | None = None  # the server's (default: SQLite in `tmp`)
    server_args: tuple[str, ...] = ()  # more `suanli server` options, e.g. `--workers 2`

    def start_server(self) -> None:
        env = {
            **os.environ,
            "SUANLI_DATABASE_URL": self.database_url or f"sqlite:///{self.tmp / 'suanli.db'}",
            "SUANLI_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
            "SUANLI_SCHEDULER_INTERVAL_S": "0.2",
            "SUANLI_AGENT_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "SUANLI_AGENT_MISSED_HEARTBEATS": str(self.missed_heartbeats),
            "SUANLI_PREEMPTION_NOTICE_S": str(NOTICE_S),
        }
        with (self.tmp / "server.log").open("ab") as log:
            self.server = subprocess.Popen(
                [*SUANLI, "server", "--port", str(self.port), *self.server_args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(lambda: _healthy(self.url), 30, f"server: {(self.tmp / 'server.log').read_text()[-2000:]}")

    def stop_server(self) -> None:
        assert self.server is not None
        self.server.terminate()
        self.server.wait(timeout=15)

    def start_agent(self, node: str, token: str) -> None:
        args = [*SUANLI, "agent", "--server", self.url, "--declared", str(self.tmp / "fleet.toml")]
        args += ["--node", node, "--work-dir", str(self.tmp / "agents" / node), "--grace", "1"]
        args += ["--advertise-host", host(node), *self.agent_args]
        env = {**os.environ, "SUANLI_JOIN_TOKEN": token}
        if self.agent_path is not None:
            env["PATH"] = self.agent_path
        with (self.tmp / f"agent-{node}.log").open("ab") as log:
            self.agents[node] = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)

    def tenant(self) -> Client:
        return Client(self.url, self.tenant_key)


@contextmanager
def running_platform(
    tmp_path: Path,
    fleet: str,
    nodes: Sequence[str],
    missed_heartbeats: int = MISSED_HEARTBEATS,
    agent_args: Sequence[str] = (),
    agent_path: str | None = None,
    database_url: str | None = None,
    server_args: Sequence[str] = (),
) -> Iterator[Platform]:
    """A server with `fleet` loaded (on `database_url`, with `server_args`), a tenant, and an agent for each
    of `nodes` (with `agent_args`, on `agent_path`); all stopped afterwards."""
    port = _free_port()
    (tmp_path / "fleet.toml").write_text(fleet)
    p = Platform(
        tmp_path,
        port,
        f"http://127.0.0.1:{port}",
        missed_heartbeats=missed_heartbeats,
        agent_args=tuple(agent_args),
        agent_path=agent_path,
        database_url=database_url,
        server_args=tuple(server_args),
    )
    p.start_server()
    try:
        with Client(p.url, ADMIN_KEY) as admin:
            admin.put_fleet(fleet)
            tenant = admin.create_tenant("lab")
            p.tenant_key = admin.create_key(tenant.id).secret or ""
            for node in nodes:
                p.start_agent(node, admin.create_join_token(node).token)
        wait_until(
            lambda: all((tmp_path / "agents" / n / "agent.json").exists() for n in nodes), 30, "agents"
        )
        yield p
    finally:
        for agent in p.agents.values():
            agent.kill()
            agent.wait()
        _kill_workloads(tmp_path)
        if p.server is not None and p.server.poll() is None:
            p.stop_server()


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_platform(tmp_path, FLEET, NODES) as p:
        yield p


def test_a_command_sees_exactly_its_devices_and_its_output_is_in_the_logs(platform: Platform) -> None:
    code = "import os; print('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'])"
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=2, command=[sys.executable, "-c", code]))
        done = api.wait(rental.id, timeout_s=15, poll_s=0.1)  # the SDK waits until it has ended
        assert done.state == "stopped"
        assert any(e.kind == "stopped" and "exit code 0" in e.message for e in done.events)
        (run,) = api.rental_runs(rental.id)
        assert run.state == "succeeded" and run.exit_code == 0
        expected = ",".join(declared_gpu_uuid(run.node, i) for i in range(2))
        wait_until(lambda: "CVD=" in api.logs(rental.id).data, 5, "logs")
        page = api.logs(rental.id)
        assert page.data.strip() == f"CVD={expected}" and page.done
        assert "".join(api.output(rental.id, poll_s=0.1)) == page.data  # the SDK's whole output, ended


def test_rent_follow_prints_the_output_and_exits_with_the_workloads_code(platform: Platform) -> None:
    """`suanli rent -f`, the real CLI against the real server and agents: the rental's states on stderr
    while it waits, its output on stdout as it comes, and the workload's exit code as the CLI's."""
    env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
    env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
    code = "import os, time; print('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(1)"

    def rent_follow(*command: str) -> subprocess.CompletedProcess[str]:
        args = [*SUANLI, "rent", "-f", "H100-SXM-80GB:1", "--", *command]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)

    ok = rent_follow(sys.executable, "-c", code)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("CVD=GPU-"), ok.stdout
    states = [line.split(": ")[1].split(" ")[0] for line in ok.stderr.splitlines()]
    assert states[0] == "pending" and states[-1] == "stopped", ok.stderr
    assert "workload succeeded with exit code 0" in ok.stderr.splitlines()[-1]
    rental_id = ok.stderr.split(":")[0]
    follow_logs = [*SUANLI, "logs", rental_id, "-f"]
    logs = subprocess.run(follow_logs, env=env, capture_output=True, text=True, timeout=30)
    assert logs.returncode == 0 and logs.stdout == ok.stdout, logs.stdout + logs.stderr

    failed = rent_follow("sh", "-c", "echo before; exit 3")
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert failed.stdout == "before\n"
    assert "failed" in failed.stderr.splitlines()[-1] and "exit code 3" in failed.stderr

    # a program that is nowhere on the PATH: said so (the workload's uid may not search every directory, so
    # exec can say "Permission denied"), and `logs` of a rental that ended silent says how it ended
    typo = rent_follow("pyhton3", "-c", "print(1)")
    assert typo.returncode == 127 and typo.stdout == "", typo.stdout + typo.stderr  # as a shell's
    assert "cannot start 'pyhton3': not found in PATH" in " ".join(typo.stderr.split()), typo.stderr
    silent = subprocess.run(
        [*SUANLI, "logs", typo.stderr.split(":")[0]], env=env, capture_output=True, text=True, timeout=30
    )
    assert silent.returncode == 0 and silent.stdout == "", silent.stdout + silent.stderr
    assert ": failed, no output (on " in silent.stderr and "not found in PATH" in silent.stderr, silent.stderr

    # a request no node could ever run (3 GPUs on 2-GPU nodes) is refused with what to ask instead
    args = [*SUANLI, "rent", "-f", "H100-SXM-80GB:3", "--", "true"]
    refused = subprocess.run(args, env={**env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=30)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and refused.stdout == "", refused.stdout + refused.stderr
    assert "SPEC (GPUs): no matching node has 3 GPUs (at most 2 on one node): ask for 2" in said, said

    # Ctrl-C detaches: the CLI exits 130 and the rental goes on
    args = [*SUANLI, "rent", "-f", "H100-SXM-80GB:1", "--", "sh", "-c", "echo up; sleep 60"]
    attached = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert attached.stdout is not None and attached.stdout.readline() == "up\n"
    attached.send_signal(signal.SIGINT)
    _, stderr = attached.communicate(timeout=15)
    assert attached.returncode == 130 and "detached: " in stderr, stderr
    with platform.tenant() as api:
        assert api.rental(stderr.split(":")[0]).state == "running"


def test_exec_runs_a_command_inside_a_running_rental_with_its_devices_and_directory(
    platform: Platform,
) -> None:
    """`suanli exec`, the real CLI, server and agent: the command runs as the workload's user and sees the
    rental's GPUs and working directory (where its workload wrote its uid), its output comes back as it is
    printed and the CLI exits with its code; one past its timeout is killed (124); one on an ended rental is
    refused."""
    env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
    env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
    with platform.tenant() as api:
        rental = api.create_rental(
            RentalCreateRequest(
                gpu_model="H100-SXM-80GB", gpus=1, command=["sh", "-c", "id -u > marker; sleep 120"]
            )
        )
        running = wait_for_state(api, rental.id, "running")

        def exec_(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
            argv = [*SUANLI, "exec", rental.id, *args]
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)

        code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.getuid(), open('marker').read())"
        shown = exec_("--", sys.executable, "-c", code + "; raise SystemExit(3)")
        assert shown.returncode == 3, shown.stdout + shown.stderr
        visible, uid, workload_uid = shown.stdout.split()
        where = running.allocation[0]
        assert visible == declared_gpu_uuid(where.node, where.slices[0].gpu_index)
        assert uid == workload_uid  # as the workload's user (a root agent's: the rental's own uid)
        slow = exec_("--timeout", "1s", "--", "sleep", "30")
        assert slow.returncode == 124, slow.stdout + slow.stderr
        missing = exec_("--", "no-such-program-here")
        assert missing.returncode == 127, missing.stdout + missing.stderr
        # its output as it comes: the first line is printed while the command still sleeps
        argv = [*SUANLI, "exec", rental.id, "--", "sh", "-c", "echo first; sleep 8; echo second"]
        with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as streaming:
            assert streaming.stdout is not None
            assert streaming.stdout.readline() == "first\n"
            first_at = time.monotonic()
            assert streaming.stdout.read() == "second\n" and streaming.wait(timeout=60) == 0
            assert time.monotonic() - first_at > 2, "printed only once the command had ended"
        assert [e.state for e in api.execs(rental.id)] == ["exited"] * 4
        api.stop(rental.id)
        wait_for_state(api, rental.id, "stopped")
        # a rental with no command holds its GPUs and runs nothing: a command still runs in it
        held = api.create_rental(RentalCreateRequest(gpu_model="H100-SXM-80GB", gpus=1))
        wait_for_state(api, held.id, "running")
        inside = subprocess.run(
            [*SUANLI, "exec", held.id, "--", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"; pwd'],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert inside.returncode == 0, inside.stdout + inside.stderr
        devices, workdir = inside.stdout.split()
        assert devices.startswith("GPU-") and workdir.endswith("/work"), inside.stdout
        api.stop(held.id)
    ended = exec_("--", "true")
    assert ended.returncode == 1 and "running rental only" in " ".join(ended.stderr.split()), ended.stderr


def test_a_workload_past_its_max_duration_is_stopped_and_rent_follow_exits_124(platform: Platform) -> None:
    """`--max-duration 2` on a workload that would run a minute: the leader stops it at its time limit, the
    agent sends SIGTERM (the workload says so), and `rent -f` exits 124, as timeout(1) does."""
    env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
    env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
    script = "trap 'echo got TERM; exit 143' TERM; echo $WHAT; for i in $(seq 600); do sleep 0.1; done"
    args = [*SUANLI, "rent", "-f", "H100-SXM-80GB:1", "--max-duration", "2s", "-e", "WHAT=started"]
    args += ["--name", "limited"]
    args += ["--", "sh", "-c", script]
    began = time.monotonic()
    followed = subprocess.run(args, env={**env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=60)
    assert followed.returncode == 124, followed.stdout + followed.stderr
    assert followed.stdout.startswith("started\n") and "got TERM\n" in followed.stdout, followed.stdout
    assert time.monotonic() - began < 30
    end = followed.stderr.splitlines()[-1]
    assert ": stopped (time_limit: stop requested at its max duration (2 s since placement); on " in end, end
    with platform.tenant() as api:
        rental = api.rental(followed.stderr.split(":")[0])
        assert rental.state == "stopped" and rental.request.env == {"WHAT": "started"}
        assert any(e.reason == "time_limit" for e in rental.events), rental.events

    # bad input is named: by the CLI before asking, by the server for a variable the platform sets
    for extra, said in (
        (["--max-duration", "soon"], "--max-duration: not a duration: 'soon'"),
        (["-e", "WHAT"], "--env: not NAME=VALUE: 'WHAT'"),
        (["-e", "CUDA_VISIBLE_DEVICES=0"], "--env: environment variable CUDA_VISIBLE_DEVICES is set by the"),
    ):
        refused = subprocess.run(
            [*SUANLI, "rent", "H100-SXM-80GB:1", *extra, "--", "true"],
            env={**env, "COLUMNS": "300"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert refused.returncode != 0 and said in refused.stderr, refused.stderr

    # `ls` by state: the stopped rental is among the stopped ones, not among the live ones
    def listed(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SUANLI, "ls", *options], env=env, capture_output=True, text=True, timeout=30)

    stopped_id = rental.id
    names = {r["id"]: r["request"]["name"] for r in json.loads(listed("--state", "stopped", "--json").stdout)}
    assert names[stopped_id] == "limited"
    assert "limited" in listed("--state", "stopped").stdout  # the table's name column
    assert [r["id"] for r in json.loads(listed("--name", "limited", "--json").stdout)] == [stopped_id]
    assert json.loads(listed("--name", "limited", "--live", "--json").stdout) == []
    assert stopped_id not in {r["id"] for r in json.loads(listed("--live", "--json").stdout)}
    unknown = listed("--state", "sleeping")
    assert unknown.returncode == 2 and "--state 'sleeping': use one of pending, placed" in unknown.stderr

    # a sweep by its names' prefix: listed, then stopped together
    def cli(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*SUANLI, *words], env={**env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=30
        )

    sweep = [
        cli("rent", "H100-SXM-80GB:1", "--name", f"sweep_a-{i}", "--json", "--", "sleep", "600")
        for i in (1, 2)
    ]
    started = {json.loads(made.stdout)["id"] for made in sweep}
    assert {r["id"] for r in json.loads(listed("--name", "sweep_a-*", "--json").stdout)} == started
    assert json.loads(listed("--name", "sweepXa-*", "--json").stdout) == []  # `_` is itself, not a wildcard
    ended = cli("stop", "--name", "sweep_a-*", "--json")
    assert ended.returncode == 0, ended.stderr
    assert {r["id"] for r in json.loads(ended.stdout)} == started
    assert all(r["state"] in ("stopping", "stopped") for r in json.loads(ended.stdout))
    again = cli(
        "rerun", sorted(started)[0], "--name", "sweep_b-1", "--json"
    )  # the same request, a new rental
    assert again.returncode == 0, again.stderr
    rerun = json.loads(again.stdout)
    assert rerun["id"] not in started and rerun["request"]["name"] == "sweep_b-1"
    assert rerun["request"]["command"] == ["sleep", "600"] and rerun["request"]["gpus"] == 1
    assert cli("stop", rerun["id"]).returncode == 0
    bad_name = cli("rerun", rerun["id"], "--name", "sweep b")
    assert bad_name.returncode == 2 and "--name: use letters, digits" in bad_name.stderr, bad_name.stderr
    unknown_id = cli("rerun", "rnt_nope")
    assert unknown_id.returncode != 0 and "no rental rnt_nope" in unknown_id.stderr
    none_left = cli("stop", "--name", "sweep_a-*")
    assert none_left.returncode == 0 and "no live rental named sweep_a-*" in none_left.stderr
    neither = cli("stop")
    assert neither.returncode == 2 and "give rental ids or --name" in neither.stderr


def test_a_two_node_rental_runs_until_its_last_rank_finishes(platform: Platform) -> None:
    """Rank 0 exits at once, rank 1 works 2 s more: the rental runs until rank 1 is done too, and its output
    is all there (rank 1 used to be killed when rank 0's success ended the rental)."""
    script = 'if [ "$SUANLI_NODE_RANK" = 1 ]; then sleep 2; echo rank 1 finished; else echo rank 0 done; fi'
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=2, nodes=2, command=["sh", "-c", script]))
        wait_for_state(api, rental.id, "running")
        with pytest.raises(TimeoutError, match=r"is running after 0\.3 s"):
            api.wait(rental.id, timeout_s=0.3, poll_s=0.1)  # rank 1 works on
        done = wait_for_state(api, rental.id, "stopped")
        runs = api.rental_runs(rental.id)
        assert [(r.state, r.exit_code) for r in runs] == [("succeeded", 0), ("succeeded", 0)]
        assert all(r.started_at is not None and r.started_at <= r.ended_at for r in runs), runs
        assert done.events[-1].kind == "stopped"
        wait_until(lambda: "rank 1 finished" in api.logs(rental.id).data, 5, "rank 1's output")
        assert sorted(api.logs(rental.id).data.splitlines()) == ["rank 0 done", "rank 1 finished"]
        by_node = {run.node: api.logs(rental.id, node=run.node).data for run in runs}  # each rank on its own
        assert sorted(by_node.values()) == ["rank 0 done\n", "rank 1 finished\n"]
        node, text = next(iter(by_node.items()))
        env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
        env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
        cli = subprocess.run(
            [*SUANLI, "logs", rental.id, "--node", node], env=env, capture_output=True, text=True, timeout=30
        )
        assert cli.returncode == 0 and cli.stdout == text, cli.stderr
        last = subprocess.run(
            [*SUANLI, "logs", rental.id, "--tail", "1"], env=env, capture_output=True, text=True, timeout=30
        )
        assert last.returncode == 0 and last.stdout == api.logs(rental.id).data.splitlines(True)[-1], last


def test_a_one_node_rental_that_fails_is_restarted_by_its_agent_with_an_event(platform: Platform) -> None:
    """Under on-failure on one node, the agent restarts the failed workload itself; the server hears of it
    at the next heartbeat and records a `restarted` event with the failure's exit code, which `rent -f`
    prints; the second run succeeds."""
    script = 'echo "run $SUANLI_RESTART_COUNT"; [ "$SUANLI_RESTART_COUNT" = 1 ] || exit 4'
    env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
    env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
    args = [*SUANLI, "rent", "-f", "H100-SXM-80GB:1", "--restart", "on-failure", "--max-restarts", "2"]
    args += ["--", "sh", "-c", script]
    followed = subprocess.run(args, env={**env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=90)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert followed.stdout == "run 0\nrun 1\n", followed.stdout
    told = [line for line in followed.stderr.splitlines() if ": restarted (" in line]
    assert len(told) == 1, followed.stderr
    assert "workload failed with exit code 4; restarted it there (1/2)" in told[0], followed.stderr
    with platform.tenant() as api:
        rental_id = followed.stderr.split(":")[0]
        assert [r.restarts for r in api.rental_runs(rental_id)] == [1]


def test_a_rank_that_fails_restarts_the_two_node_rental_on_both_nodes(platform: Platform) -> None:
    """Under on-failure, rank 1 failing on the first run restarts both ranks (rank 0, still running, is
    stopped and started again), each seeing the restart count; the second run succeeds on both, and
    `rent -f` says so and exits 0."""
    script = (
        'echo "rank $SUANLI_NODE_RANK run $SUANLI_RESTART_COUNT"; '
        'if [ "$SUANLI_RESTART_COUNT" = 0 ]; then '
        'if [ "$SUANLI_NODE_RANK" = 1 ]; then sleep 1; exit 3; fi; sleep 60; fi'
    )
    env = {**os.environ, "SUANLI_URL": platform.url, "SUANLI_API_KEY": platform.tenant_key}
    env["SUANLI_CONFIG_DIR"] = str(platform.tmp / "cli")
    args = [*SUANLI, "rent", "-f", "H100-SXM-80GB:2", "--nodes", "2", "--restart", "on-failure"]
    args += ["--max-restarts", "2", "--", "sh", "-c", script]
    followed = subprocess.run(args, env={**env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=90)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    told = [line for line in followed.stderr.splitlines() if ": restarted (" in line]
    assert len(told) == 1 and "workload failed with exit code 3" in told[0], followed.stderr
    assert "restarting it on all 2 nodes (1/2)" in told[0], followed.stderr
    rental_id = followed.stderr.split(":")[0]
    with platform.tenant() as api:
        done = api.rental(rental_id)
        assert done.state == "stopped" and [e.kind for e in done.events].count("restarted") == 1
        assert [(r.state, r.exit_code) for r in api.rental_runs(rental_id)] == [("succeeded", 0)] * 2
        for rank, node in enumerate(a.node for a in done.allocation):
            expected = f"rank {rank} run 0\nrank {rank} run 1\n"
            wait_until(
                lambda node=node, expected=expected: api.logs(rental_id, node=node).data == expected, 5, node
            )
        # an ended rental is metered soon after it ends; it then says what it was charged
        wait_until(lambda: api.rental(rental_id).charged_micros > 0, 15, "the meter's charge")
        charged = api.rental(rental_id).charged_micros
    wide = {**env, "COLUMNS": "200"}
    shown = subprocess.run([*SUANLI, "show", rental_id], env=wide, capture_output=True, text=True, timeout=30)
    header = shown.stdout.splitlines()[0]
    assert f"charged {micros(charged)}" in header and "so far" not in header, header
    runs = shown.stdout[shown.stdout.index("runs") :]  # each node's run, after the timeline
    assert all(f"{a.node} │ succeeded │ 0" in runs for a in done.allocation), shown.stdout


def test_the_readmes_sdk_example_runs_as_written(
    platform: Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's SDK snippet, against this platform (its URL, key and a command that exists here)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("The Python SDK is the same API", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    address, command = '"http://127.0.0.1:8080", "sk_..."', '["python", "eval.py"]'
    assert address in snippet and command in snippet
    snippet = snippet.replace(address, f"{platform.url!r}, {platform.tenant_key!r}")
    snippet = snippet.replace(command, f"[{sys.executable!r}, '-c', 'print(6 * 7)']")
    exec(compile(snippet, "README.md", "exec"), {})
    assert capsys.readouterr().out == "42\nstopped\n"


def test_a_killed_agent_is_marked_down_and_its_rentals_end_lost_or_are_placed_again(
    platform: Platform,
) -> None:
    with platform.tenant() as api:
        lost = api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "300"]))
        again = api.create_rental(
            RentalCreateRequest(gpus=1, command=["sleep", "300"], restart="on-failure", max_restarts=1)
        )
        first = {r: wait_for_state(api, r, "running").allocation[0].node for r in (lost.id, again.id)}
        victims = set(first.values())
        killed_at = time.monotonic()
        for node in victims:
            platform.agents[node].send_signal(signal.SIGKILL)
        ended = wait_for_state(api, lost.id, "lost", timeout_s=10)
        # the missed heartbeats, the reaper's next tick (half an interval), and slack for a loaded machine
        assert time.monotonic() - killed_at < DOWN_AFTER_S + 3
        (run,) = api.rental_runs(lost.id)
        assert run.state == "lost" and run.ended_at is not None and run.ended_at == run.last_heartbeat_at
        assert any(e.kind == "lost" and "billing ends there" in e.message for e in ended.events)

        replaced = wait_for_state(api, again.id, "running", timeout_s=15)
        assert replaced.allocation[0].node not in victims
        assert any(e.kind == "requeued" for e in replaced.events)


def test_a_restarted_server_does_not_lose_a_running_rental(platform: Platform) -> None:
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "300"]))
        node = wait_for_state(api, rental.id, "running").allocation[0].node
    pgid = json.loads((platform.tmp / "agents" / node / "rentals" / rental.id / "workload.json").read_text())[
        "pgid"
    ]
    platform.stop_server()
    time.sleep(2 * DOWN_AFTER_S)  # agents retry with backoff meanwhile
    platform.start_server()
    time.sleep(DOWN_AFTER_S + 1)  # past the down timeout: the agent must have reconnected
    with platform.tenant() as api:
        assert api.rental(rental.id).state == "running"
        stopping = api.stop(rental.id)
        assert stopping.state == "stopping"
        wait_for_state(api, rental.id, "stopped")
    wait_until(lambda: not _alive(pgid), 5, "workload stopped")


def test_waiting_for_a_rental_rides_out_a_restart_of_the_server(platform: Platform) -> None:
    """`wait()` raised ServerUnreachable once one poll's retries (~1.4 s) found the server down, though the
    rental lived on across the restart; it now asks again for up to its reconnect time, as following
    output does, and returns the rental as it ended."""
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "300"]))
        wait_for_state(api, rental.id, "running")
    told: list[Exception] = []
    with platform.tenant() as waiter, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(waiter.wait, rental.id, timeout_s=90, poll_s=0.1, on_unreachable=told.append)
        time.sleep(0.5)
        platform.stop_server()
        time.sleep(4)  # down for longer than one request's retries
        assert not waiting.done(), waiting.exception()
        platform.start_server()
        with platform.tenant() as api:
            assert api.stop(rental.id).state == "stopping"
        assert waiting.result(timeout=60).state == "stopped"
    assert len(told) == 1, told  # told once when it began to wait for the server


def test_waiting_and_following_output_ride_out_a_gateway_answering_503(platform: Platform) -> None:
    """Behind nginx or a load balancer a restart of the server is no refused connection but the gateway's
    503 for as long as it is away: `wait()` and following `output()` raised it (an ApiError) once one
    poll's retries (~1.4 s) were spent. They now ask again (after its Retry-After), as they do a server
    that does not answer, and go on once the gateway forwards again: the rental as it ended, all its
    output once."""
    code = "import time\nfor i in range(30):\n    print(f'line {i}', flush=True)\n    time.sleep(0.25)"
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=[sys.executable, "-c", code]))
        wait_for_state(api, rental.id, "running")
    told_waiting: list[Exception] = []
    told_following: list[Exception] = []
    with (
        Gateway(platform.url) as gateway,
        Client(gateway.url, platform.tenant_key) as waiter,
        Client(gateway.url, platform.tenant_key) as follower,
        ThreadPoolExecutor(2) as pool,
    ):
        waiting = pool.submit(
            waiter.wait, rental.id, timeout_s=90, poll_s=0.1, on_unreachable=told_waiting.append
        )
        pieces = follower.output(rental.id, poll_s=0.1, on_unreachable=told_following.append)
        following = pool.submit(lambda: "".join(pieces))
        time.sleep(0.5)
        gateway.retry_after, gateway.away = "1", True
        time.sleep(4)  # away for longer than one request's retries
        assert not waiting.done(), waiting.exception()
        assert not following.done(), following.exception()
        gateway.away = False
        assert waiting.result(timeout=60).state == "stopped"
        printed = following.result(timeout=60)
    assert printed == "".join(f"line {i}\n" for i in range(30))
    assert len(told_waiting) == 1 and told_waiting[0].last_status == 503, told_waiting
    assert len(told_following) == 1, told_following  # told once when it began to wait for the server


def test_a_workload_that_exits_while_the_server_is_down_has_its_run_end_at_its_exit(
    platform: Platform,
) -> None:
    """Audit T1, end to end: the server is stopped while a 2-s workload runs and stays down well past its
    exit; the agent's report when it is back says how long ago the workload exited, so the run (where
    billing stops) lasts the workload's 2 s, not until the server heard of it."""
    outage_s = 6.0
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "2"]))
        wait_for_state(api, rental.id, "running")
    platform.stop_server()
    time.sleep(outage_s)
    platform.start_server()
    with platform.tenant() as api:
        wait_for_state(api, rental.id, "stopped")
        (run,) = api.rental_runs(rental.id)
    assert run.started_at is not None and run.ended_at is not None
    ran_s = (run.ended_at - run.started_at).total_seconds()
    assert 2.0 <= ran_s < 2.0 + outage_s / 2, f"the run lasted {ran_s:.1f} s"


def test_an_on_demand_rental_preempts_a_spot_one_with_notice_then_runs(platform: Platform) -> None:
    with platform.tenant() as api:
        spots, od, victim = _spot_noticed_for_on_demand(api)
        assert victim.preempted_by == od.id and victim.notice_deadline is not None
        deadline = victim.notice_deadline.timestamp()

        running = wait_for_state(api, od.id, "running", timeout_s=NOTICE_S + 10)
        assert running.allocation[0].node == victim.allocation[0].node
        ended = wait_for_state(api, victim.id, "preempted", timeout_s=5)
        assert not ended.allocation
        wait_until(lambda: api.logs(victim.id).done, 10, "the victim's log is complete")
        lines = api.logs(victim.id).data.splitlines()
        (term,) = [line for line in lines if line.startswith("TERM")]
        assert term.startswith("TERM notice=True")
        assert float(term.rsplit("=", 1)[1]) < deadline  # SIGTERM and the notice file came before it
        last_alive = max(float(line.rsplit("=", 1)[1]) for line in lines if line.startswith("alive"))
        # it ran on after SIGTERM until the deadline (the notice is 3 s), and was killed at it (an agent step
        # + slack for a loaded machine: the margins are not the point, SIGTERM-time or never would be)
        assert deadline - 1.0 < last_alive < deadline + HEARTBEAT_S + 3.0
        (run,) = api.rental_runs(victim.id)
        assert run.state == "stopped"
        for rental_id in spots:
            if rental_id != victim.id:
                assert api.rental(rental_id).state == "running"


def test_a_notice_withdrawn_before_its_deadline_leaves_the_spot_workload_running(platform: Platform) -> None:
    """The preemptor is stopped while its victim has notice: the server withdraws the notice, the victim is
    `running` again, and its agent does not kill the workload at the old deadline."""
    with platform.tenant() as api:
        spots, od, victim = _spot_noticed_for_on_demand(api)
        assert victim.notice_deadline is not None
        deadline = victim.notice_deadline.timestamp()
        noticed = lambda: "TERM notice=True" in api.logs(victim.id).data  # noqa: E731
        wait_until(noticed, NOTICE_S, "the agent gave the workload its notice")
        api.stop(od.id)

        back = wait_for_state(api, victim.id, "running", timeout_s=NOTICE_S)
        assert back.preempted_by is None and back.notice_deadline is None
        assert any(e.reason == "notice_withdrawn" for e in back.events)
        time.sleep(max(deadline - time.time(), 0) + HEARTBEAT_S + 2.0)
        assert api.rental(victim.id).state == "running"
        (run,) = api.rental_runs(victim.id)
        assert run.state == "running"
        lines = api.logs(victim.id).data.splitlines()
        last_alive = max(float(line.rsplit("=", 1)[1]) for line in lines if line.startswith("alive"))
        assert last_alive > deadline + HEARTBEAT_S  # noticed, it ran on past the deadline
        for rental_id in spots:
            api.stop(rental_id)


# an elastic workload: says its GPUs when it starts, the notice file once it appears, and any SIGTERM
TELLS_ITS_GPUS = """
import json, os, signal, time
signal.signal(signal.SIGTERM, lambda *_: print(f"TERM at={time.time()}", flush=True))
print(f"started gpus={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
said = False
while True:
    path = os.environ["SUANLI_NOTICE_FILE"]
    if not said and os.path.exists(path):
        notice = json.load(open(path))
        print(f"notice {notice['reason']} keeps={notice.get('keeps_gpus')}", flush=True)
        said = True
    time.sleep(0.1)
"""


def test_an_elastic_spot_rental_is_trimmed_for_on_demand_and_runs_on_with_fewer_gpus(
    platform: Platform,
) -> None:
    """Elastic spot rentals (2 GPUs, down to 1) fill the three nodes; an on-demand rental of one GPU trims
    one of them: the notice file says so and no SIGTERM comes with it; at the deadline on-demand runs on the
    GPU given back and the victim's workload restarts on the one it kept."""
    with platform.tenant() as api:
        command = [sys.executable, "-c", TELLS_ITS_GPUS]
        spots = [
            api.create_rental(
                RentalCreateRequest(gpus=2, min_gpus=1, tier="spot", command=command)  # type: ignore[arg-type]
            ).id
            for _ in NODES
        ]
        for rental_id in spots:
            wait_for_state(api, rental_id, "running")
        wait_until(lambda: all("started" in api.logs(r).data for r in spots), 10, "spot workloads started")
        od = api.create_rental(RentalCreateRequest(gpus=1, command=["sleep", "300"]))
        wait_until(lambda: api.rental(od.id).pending_reason == "preempting", 10, "preemption notice")
        (victim,) = [api.rental(r) for r in spots if api.rental(r).state == "preempting"]
        assert victim.notice_keeps_gpus == 1 and victim.notice_deadline is not None
        wait_until(lambda: "notice trimmed keeps=1" in api.logs(victim.id).data, NOTICE_S, "the trim notice")

        running = wait_for_state(api, od.id, "running", timeout_s=NOTICE_S + 10)
        node = victim.allocation[0].node
        assert running.allocation[0].node == node

        def restarted_on_one() -> bool:
            started = [line for line in api.logs(victim.id).data.splitlines() if line.startswith("started")]
            return len(started) == 2 and "," not in started[1]

        wait_until(restarted_on_one, 10, "the victim's workload restarted on the GPU it kept")
        trimmed = api.rental(victim.id)
        assert trimmed.state == "running" and trimmed.allocation[0].node == node
        assert len(trimmed.allocation[0].slices) == 1
        kept = {s.gpu_index for s in trimmed.allocation[0].slices}
        assert kept.isdisjoint(s.gpu_index for s in running.allocation[0].slices)
        deadline = victim.notice_deadline.timestamp()
        terms = [line for line in api.logs(victim.id).data.splitlines() if line.startswith("TERM")]
        # the notice signals nothing; the restart on the kept GPU stops the old run, after the deadline
        assert all(float(line.rsplit("=", 1)[1]) >= deadline for line in terms), (terms, deadline)
        for rental_id in spots:
            api.stop(rental_id)
        api.stop(od.id)


def test_a_preempted_rental_that_checkpoints_saves_goes_back_to_the_queue_and_resumes(
    platform: Platform, tmp_path: Path
) -> None:
    """A spot rental on every node, each counting and saving its count on SIGTERM (its notice); one is
    preempted by an on-demand rental, saves, and goes back to the queue rather than ending; when another
    node frees up it is placed again there and resumes from its count: a run on each node."""
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)  # the workload may run as a user of its own
    with platform.tenant() as api:
        spots, od, victim = _spot_noticed_for_on_demand(
            api, SAVES_ON_SIGTERM, "counting from 0", checkpoints=True, env={"STATE_DIR": str(state)}
        )
        wait_for_state(api, od.id, "running", timeout_s=NOTICE_S + 10)
        back = wait_for_state(api, victim.id, "pending", timeout_s=5)
        assert not back.allocation and [e.reason for e in back.events if e.kind == "requeued"] == [
            "preempted"
        ]
        saved = int((state / victim.id).read_text())
        assert saved > 0

        other = next(r for r in spots if r != victim.id)
        freed = api.rental(other).allocation[0].node
        api.stop(other)  # a node frees: the victim is placed again there, and resumes
        resumed = wait_for_state(api, victim.id, "running", timeout_s=15)
        assert resumed.allocation[0].node == freed != victim.allocation[0].node
        wait_until(lambda: f"counting from {saved}" in api.logs(victim.id).data, 10, "the resumed count")
        runs = {run.node: run for run in api.rental_runs(victim.id)}
        assert runs[victim.allocation[0].node].ended_at is not None and runs[freed].ended_at is None
        api.stop(od.id)
        for rental_id in spots:
            api.stop(rental_id)


def test_a_rental_that_checkpoints_placed_again_on_its_own_node_resumes_there_with_a_run_of_its_own(
    platform: Platform, tmp_path: Path
) -> None:
    """As above, but the preemptor is stopped instead: the victim is placed again on the node it left, its
    agent starts it anew there (the second placement), it resumes from its count, its output goes on after
    the first run's, and the node has a run per placement."""
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    with platform.tenant() as api:
        spots, od, victim = _spot_noticed_for_on_demand(
            api, SAVES_ON_SIGTERM, "counting from 0", checkpoints=True, env={"STATE_DIR": str(state)}
        )
        wait_for_state(api, od.id, "running", timeout_s=NOTICE_S + 10)
        wait_for_state(api, victim.id, "pending", timeout_s=5)
        saved = int((state / victim.id).read_text())
        api.stop(od.id)  # its node frees: the victim goes back there
        resumed = wait_for_state(api, victim.id, "running", timeout_s=15)
        node = victim.allocation[0].node
        assert resumed.allocation[0].node == node
        wait_until(lambda: f"counting from {saved}" in api.logs(victim.id).data, 10, "the resumed count")
        output = api.logs(victim.id).data
        assert output.index("counting from 0") < output.index(f"counting from {saved}")
        runs = [(run.node, run.placement, run.ended_at is None) for run in api.rental_runs(victim.id)]
        assert runs == [(node, 1, False), (node, 2, True)]
        for rental_id in spots:
            api.stop(rental_id)


# --- helpers -----------------------------------------------------------------------------------------


def _spot_noticed_for_on_demand(
    api: Client, workload: str = TRAPS_SIGTERM, started: str = "started", **spot: object
):
    """A spot rental on every node (with `spot`'s fields), each running `workload` (by default one that
    traps SIGTERM) until it prints `started`, then an on-demand rental that preempts one of them: (the spot
    rental ids, the on-demand rental, the victim under notice)."""
    spot_cmd = [sys.executable, "-c", workload]
    spots = [
        api.create_rental(RentalCreateRequest(gpus=2, tier="spot", command=spot_cmd, **spot)).id  # type: ignore[arg-type]
        for _ in NODES
    ]
    for rental_id in spots:
        wait_for_state(api, rental_id, "running")
    wait_until(lambda: all(started in api.logs(r).data for r in spots), 10, "spot workloads started")
    od = api.create_rental(RentalCreateRequest(gpus=2, command=["sleep", "300"]))
    wait_until(lambda: api.rental(od.id).pending_reason == "preempting", 10, "preemption notice")
    (victim,) = [api.rental(r) for r in spots if api.rental(r).state == "preempting"]
    return spots, od, victim


def wait_for_state(api: Client, rental_id: str, state: str, timeout_s: float = 15):
    deadline = time.monotonic() + timeout_s
    while True:
        rental = api.rental(rental_id)
        if rental.state == state:
            return rental
        if time.monotonic() > deadline:
            pytest.fail(f"{rental_id} is {rental.state}, not {state}: {rental.events}")
        time.sleep(0.1)


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _free_port() -> int:
    return free_port()


def _alive(pgid: int) -> bool:
    return group_alive(pgid)


def _kill_workloads(base: Path) -> None:
    for record in base.glob("agents/*/rentals/*/workload.json"):
        pgid = json.loads(record.read_text())["pgid"]
        if _alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


# prints its place among the rental's nodes, then each node count its nodes file shows, until stopped
FOLLOWS_NODES = """
import json, os, time
e = os.environ
print(f"rank={e['SUANLI_NODE_RANK']} of {e['SUANLI_NNODES']} nodes={e['SUANLI_NODES']} "
      f"master={e['SUANLI_MASTER_ADDR']} gpus={e['SUANLI_GPUS_PER_NODE']}", flush=True)
seen = None
while True:
    nodes = json.load(open(e["SUANLI_NODES_FILE"]))
    if nodes["nodes"] != seen:
        seen = nodes["nodes"]
        print(f"rank {nodes['node_rank']} sees {','.join(seen)}", flush=True)
    time.sleep(0.1)
"""


def test_a_running_rental_resized_to_more_nodes_starts_on_the_new_node_and_keeps_running_on_its_own(
    platform: Platform,
) -> None:
    """A 2-node rental runs a workload that knows its rank and nodes; resized to 3 nodes, the third node's
    agent starts it there as rank 2 of 3, while the first two keep theirs (one run each, none restarted) and
    see the third node appear in their nodes file."""
    with platform.tenant() as api:
        code = [sys.executable, "-c", FOLLOWS_NODES]
        rental = api.create_rental(RentalCreateRequest(gpus=2, nodes=2, command=code))
        running = wait_for_state(api, rental.id, "running")
        first = [host(a.node) for a in running.allocation]
        wait_until(lambda: len(api.rental_runs(rental.id)) == 2, 10, "two runs")
        wait_until(lambda: api.logs(rental.id).data.count(" sees ") == 2, 10, "both ranks started")
        lines = api.logs(rental.id).data.splitlines()
        for rank in (0, 1):
            started = f"rank={rank} of 2 nodes={','.join(first)} master={first[0]} gpus=2"
            assert started in lines and f"rank {rank} sees {','.join(first)}" in lines, lines
        resized = api.resize(rental.id, nodes=3)
        assert resized.state == "running"
        wait_until(lambda: len(api.rental(rental.id).allocation) == 3, 10, "the third node")
        wait_until(lambda: len(api.rental_runs(rental.id)) == 3, 10, "three runs")
        runs = api.rental_runs(rental.id)
        all_three = [host(a.node) for a in api.rental(rental.id).allocation]
        assert all_three[:2] == first and set(all_three) == {host(n) for n in NODES}
        assert all(r.state == "running" for r in runs), runs
        wait_until(lambda: api.logs(rental.id).data.count(" sees ") == 5, 10, "every rank sees three nodes")
        lines = api.logs(rental.id).data.splitlines()
        assert f"rank=2 of 3 nodes={','.join(all_three)} master={first[0]} gpus=2" in lines, lines
        assert all(f"rank {rank} sees {','.join(all_three)}" in lines for rank in (0, 1, 2)), lines
        assert sum(line.startswith("rank=") for line in lines) == 3  # nobody restarted
        api.stop(rental.id)
        wait_for_state(api, rental.id, "stopped")


# prints the devices it sees, then keeps running until stopped
PRINTS_DEVICES = """
import os, time
print("CVD=" + os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_running_rental_resized_to_more_or_fewer_gpus_restarts_on_its_node_with_them(
    platform: Platform,
) -> None:
    """A 1-GPU rental resized to 2 GPUs gets its node's other GPU and its agent restarts the workload with
    both; resized back to 1 it restarts with one. It stays on its node, running, with one run there."""
    with platform.tenant() as api:
        code = [sys.executable, "-c", PRINTS_DEVICES]
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=code))
        running = wait_for_state(api, rental.id, "running")
        (node,) = {a.node for a in running.allocation}
        wait_until(lambda: api.logs(rental.id).data.count("CVD=") == 1, 10, "the first start")
        assert api.resize(rental.id, gpus=2).state == "running"
        wait_until(lambda: api.logs(rental.id).data.count("CVD=") == 2, 10, "a restart with 2 GPUs")
        both = ",".join(declared_gpu_uuid(node, i) for i in range(2))
        assert api.logs(rental.id).data.splitlines()[-1] == f"CVD={both}"
        grown = api.rental(rental.id)
        assert grown.state == "running" and [(a.node, len(a.slices)) for a in grown.allocation] == [(node, 2)]
        api.resize(rental.id, gpus=1)
        wait_until(lambda: api.logs(rental.id).data.count("CVD=") == 3, 10, "a restart with 1 GPU")
        (kept,) = api.rental(rental.id).allocation[0].slices
        assert api.logs(rental.id).data.splitlines()[-1] == f"CVD={declared_gpu_uuid(node, kept.gpu_index)}"
        (run,) = api.rental_runs(rental.id)
        assert run.node == node and run.state == "running"
        api.stop(rental.id)
        wait_for_state(api, rental.id, "stopped")


def test_a_rental_resized_while_its_agent_was_away_restarts_on_its_new_gpus_when_the_agent_returns(
    tmp_path: Path,
) -> None:
    """The agent dies (SIGKILL; its workload runs on), the rental goes from 1 GPU to 2, and a new agent
    process starts. It must not adopt the old workload, which sees only the old GPU: it restarts it with
    both. (The node is given 50 missed heartbeats, so it is not marked down meanwhile.)"""
    with (
        running_platform(tmp_path, FLEET, ("gpu-01",), missed_heartbeats=50) as platform,
        platform.tenant() as api,
    ):
        rental = api.create_rental(
            RentalCreateRequest(gpus=1, command=[sys.executable, "-c", PRINTS_DEVICES])
        )
        wait_for_state(api, rental.id, "running")
        wait_until(lambda: api.logs(rental.id).data.count("CVD=") == 1, 10, "the first start")
        record = tmp_path / "agents" / "gpu-01" / "rentals" / rental.id / "workload.json"
        first = json.loads(record.read_text())["pgid"]
        agent = platform.agents.pop("gpu-01")
        agent.kill()
        agent.wait()
        api.resize(rental.id, gpus=2)
        wait_until(lambda: len(api.rental(rental.id).allocation[0].slices) == 2, 10, "the GPU change")
        with Client(platform.url, ADMIN_KEY) as admin:
            platform.start_agent("gpu-01", admin.create_join_token("gpu-01").token)
        wait_until(lambda: api.logs(rental.id).data.count("CVD=") == 2, 15, "a restart on both GPUs")
        both = ",".join(declared_gpu_uuid("gpu-01", i) for i in range(2))
        assert api.logs(rental.id).data.splitlines()[-1] == f"CVD={both}"
        assert not _alive(first) and json.loads(record.read_text())["pgid"] != first
        assert api.rental(rental.id).state == "running"


def test_a_workload_that_succeeds_while_its_agent_is_away_is_reported_succeeded_when_the_agent_returns(
    tmp_path: Path,
) -> None:
    """The agent dies (SIGKILL), its workload exits 0 meanwhile, and a new agent process starts: the run
    ends `succeeded` with exit code 0, as the workload's supervisor recorded it (it was `failed`, exit code
    unknown). The node is given 50 missed heartbeats, so it is not marked down meanwhile."""
    waits_for_go = "import os, time\nwhile not os.path.exists('go'): time.sleep(0.05)\nprint('done')"
    with (
        running_platform(tmp_path, FLEET, ("gpu-01",), missed_heartbeats=50) as platform,
        platform.tenant() as api,
    ):
        rental = api.create_rental(RentalCreateRequest(gpus=1, command=[sys.executable, "-c", waits_for_go]))
        wait_for_state(api, rental.id, "running")
        rental_dir = tmp_path / "agents" / "gpu-01" / "rentals" / rental.id
        wait_until((rental_dir / "workload.json").exists, 10, "the workload's start")
        agent = platform.agents.pop("gpu-01")
        agent.kill()
        agent.wait()
        (rental_dir / "work" / "go").touch()
        pgid = json.loads((rental_dir / "workload.json").read_text())["pgid"]
        wait_until(lambda: not _alive(pgid), 10, "the workload's end")
        assert api.rental(rental.id).state == "running"  # nobody told the server yet
        with Client(platform.url, ADMIN_KEY) as admin:
            platform.start_agent("gpu-01", admin.create_join_token("gpu-01").token)
        wait_for_state(api, rental.id, "stopped")
        (run,) = api.rental_runs(rental.id)
        assert (run.state, run.exit_code) == ("succeeded", 0)


def test_a_node_released_by_a_shrink_ends_its_run_there_and_the_rental_runs_on(platform: Platform) -> None:
    """A 2-node rental shrunk to 1: the released node's agent kills its workload and its run there ends
    (`stopped`); the rental keeps running on the other node. Before, that run stayed `running` for ever."""
    with platform.tenant() as api:
        rental = api.create_rental(RentalCreateRequest(gpus=2, nodes=2, command=["sleep", "300"]))
        running = wait_for_state(api, rental.id, "running")
        kept, dropped = [a.node for a in running.allocation]
        wait_until(lambda: len(api.rental_runs(rental.id)) == 2, 10, "two runs")
        api.resize(rental.id, nodes=1)
        wait_until(
            lambda: (
                {r.node: r.state for r in api.rental_runs(rental.id)} == {kept: "running", dropped: "stopped"}
            ),
            10,
            "the released node's run to end",
        )
        (ended,) = [r for r in api.rental_runs(rental.id) if r.node == dropped]
        assert ended.ended_at is not None
        time.sleep(1)  # a few more heartbeats: the rental is not ended by that report
        assert api.rental(rental.id).state == "running"
        api.stop(rental.id)
        wait_for_state(api, rental.id, "stopped")
        assert {r.state for r in api.rental_runs(rental.id)} == {"stopped"}
