"""`suanli server --workers 2` on PostgreSQL: one worker leads the scheduler; a rental created through the
other is placed at once (NOTIFY wakes the leader, although the scheduler's timer is set to a minute), and a
scrape of either worker shows the leader's gauges (Prometheus multiprocess mode)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import pytest
from server_process import ServerProcess, new_database
from websockets.exceptions import ConnectionClosed

from suanli.api.attach_relay import BUS_QUEUE_FRAMES
from suanli.client import Client
from suanli.wire.agent_schemas import HeartbeatRequest, WorkloadReportBody
from suanli.wire.schemas import RentalCreateRequest

ADMIN_KEY = "sk_workers_admin_key_0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()


@pytest.fixture
def server(postgres_server: str, tmp_path: Path):
    process = ServerProcess(
        new_database(postgres_server, "workers"),
        tmp_path / "server.log",
        ADMIN_KEY,
        {"SUANLI_SCHEDULER_INTERVAL_S": "60", "SUANLI_METER_INTERVAL_S": "60"},
        ("--workers", "2"),
    )
    process.start(timeout_s=60)
    yield process
    process.stop()


def _client_on(server: ServerProcess, leader: bool) -> httpx.Client:
    """A keep-alive client whose connection was accepted by the leading worker, or by the other one."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        client = httpx.Client(base_url=server.url, timeout=10)
        health = client.get("/healthz").json()
        if health["leader"] == leader:
            return client
        client.close()
    pytest.fail(f"no worker with leader={leader}: {server.log_tail()}")


def test_two_workers_share_one_scheduler_and_their_metrics(server: ServerProcess) -> None:
    # the leader takes the lock in its loop's first run, right after start-up
    leader = _client_on(server, leader=True)
    other = _client_on(server, leader=False)
    assert leader.get("/healthz").json()["pid"] != other.get("/healthz").json()["pid"]

    fleet = other.put("/v1/fleet", content=FLEET, headers={**ADMIN, "Content-Type": "application/toml"})
    assert fleet.status_code == 200, fleet.text
    tenant_id = other.post("/v1/tenants", json={"name": "w"}, headers=ADMIN).json()["id"]
    secret = other.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    credit = other.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    assert credit.status_code == 201, credit.text
    headers = {"Authorization": f"Bearer {secret}"}

    created = time.monotonic()
    spec = {"gpu_model": "H100-SXM-80GB", "gpus": 8}
    rental_id = other.post("/v1/rentals", json=spec, headers=headers).json()["id"]
    state = "pending"
    while state == "pending" and time.monotonic() - created < 20:
        time.sleep(0.05)
        state = other.get(f"/v1/rentals/{rental_id}", headers=headers).json()["state"]
    # placed by the leader within seconds: its timer alone would take up to a minute
    assert state == "placed" and time.monotonic() - created < 10, server.log_tail()

    for client in (leader, other):
        text = client.get("/metrics").text
        busy = next(line for line in text.splitlines() if line.startswith('suanli_gpus{state="busy"}'))
        assert float(busy.split()[-1]) >= 8.0, text
    leader.close()
    other.close()


# run by every interpreter started with it on PYTHONPATH: a spawned worker (uvicorn's workers are spawned)
# sleeps before anything else, as one starved of CPU on a loaded machine is slow to import the app
SLOW_WORKER_START = """
import sys, time
if sys.argv[-1] == "--multiprocessing-fork":
    time.sleep(6)
"""


def test_a_worker_slow_to_start_is_waited_for_not_killed(postgres_server: str, tmp_path: Path) -> None:
    """Each worker takes 6 s before it can answer uvicorn's health check. With uvicorn's default 5 s
    (as on a loaded machine, where importing the app took longer) each was killed as hung and replaced by
    another as slow, and the server never answered; now it is waited for."""
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "sitecustomize.py").write_text(SLOW_WORKER_START)
    path = os.pathsep.join(p for p in (str(tmp_path / "slow"), os.environ.get("PYTHONPATH")) if p)
    process = ServerProcess(
        new_database(postgres_server, "slow"),
        tmp_path / "server.log",
        ADMIN_KEY,
        {"PYTHONPATH": path, "SUANLI_SCHEDULER_INTERVAL_S": "60", "SUANLI_METER_INTERVAL_S": "60"},
        ("--workers", "2"),
    )
    process.start(timeout_s=40)
    try:
        assert "died" not in process.log_tail(), process.log_tail()
    finally:
        process.stop()


def test_the_workers_listening_socket_is_labelled_tcp() -> None:
    """So asyncio sets TCP_NODELAY on what it accepts: with uvicorn's own socket (protocol 0) every small
    response of a worker waited ~40 ms for the client's delayed ACK."""
    import socket

    from suanli.api.server import TcpConfig

    config = TcpConfig("suanli.api.server:app_from_environment", factory=True, host="127.0.0.1", port=0)
    sock = config.bind_socket()
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.get_inheritable()
        sock.listen()
        with socket.create_connection(sock.getsockname()):
            accepted, _ = sock.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP  # what asyncio checks before TCP_NODELAY
    finally:
        sock.close()


def test_a_worker_collects_young_garbage_less_often_and_keeps_the_older_ratios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker's app comes with `tune_gc` applied: at CPython's default a loaded server ran a full
    collection every second or two, 75-114 ms each, and every request in flight waited it out."""
    import gc

    from suanli.api.server import GC_YOUNG_THRESHOLD, app_from_environment

    monkeypatch.setenv("SUANLI_DATABASE_URL", f"sqlite:///{tmp_path / 'suanli.db'}")
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        app_from_environment()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_an_attached_command_relays_between_workers(server: ServerProcess) -> None:
    """`suanli exec -it` on two workers: the client's and the agent's WebSockets may reach different worker
    processes, so frames go through PostgreSQL (NOTIFY). Three sessions, each end on a connection of its
    own, with input, output and the end going both ways."""
    admin = httpx.Client(base_url=server.url, timeout=10, headers=ADMIN)
    assert (
        admin.put("/v1/fleet", content=FLEET, headers={"Content-Type": "application/toml"}).status_code == 200
    )
    tenant_id = admin.post("/v1/tenants", json={"name": "attach"}).json()["id"]
    secret = admin.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}).json()["secret"]
    admin.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12})
    tenant = Client(server.url, secret)
    rental = tenant.create_rental(RentalCreateRequest(gpu_model="H100-SXM-80GB", gpus=1))
    deadline = time.monotonic() + 30
    while (found := tenant.rental(rental.id)).state != "placed":
        assert time.monotonic() < deadline, found.state
        time.sleep(0.1)
    token = admin.post("/v1/join-tokens", json={"node": found.allocation[0].node}).json()["token"]
    registered = admin.post("/v1/agents/register", json={"token": token, "inventory": {"gpus": []}}).json()
    node = Client(server.url, registered["node_key"])
    node.heartbeat(HeartbeatRequest(workloads=[WorkloadReportBody(rental_id=rental.id, state="running")]))
    for turn in range(3):
        queued = tenant.exec(rental.id, ["bash"], stdin=True, tty=True)
        with tenant.attach_exec(rental.id, queued.id) as client_end:
            client_end.send(f"echo {turn}\r".encode())
            with node.attach_agent_exec(queued.id) as agent_end:
                assert agent_end.recv(timeout=10) == f"echo {turn}\r".encode()
                agent_end.send(f"{turn}\r\n".encode())
                assert client_end.recv(timeout=10) == f"{turn}\r\n".encode()
            with pytest.raises(ConnectionClosed):  # the agent's end went: the client's is closed
                client_end.recv(timeout=10)
    # more frames than the bus's window and than an inbox may hold, sent while the client waits before it
    # reads: each end acknowledges what its WebSocket took, so the agent's frames flow on, all in order
    lines = [f"line {n:05d}\n".encode() for n in range(BUS_QUEUE_FRAMES + 500)]
    queued = tenant.exec(rental.id, ["sh"], stdin=True)
    with (
        tenant.attach_exec(rental.id, queued.id) as client_end,
        node.attach_agent_exec(queued.id) as agent_end,
    ):
        printing = threading.Thread(target=lambda: [agent_end.send(line) for line in lines], daemon=True)
        printing.start()
        time.sleep(1.0)
        got = b""
        while len(got) < sum(map(len, lines)):
            got += client_end.recv(timeout=10)
        assert got == b"".join(lines)
        printing.join(timeout=10)
    tenant.close()
    node.close()
    admin.close()
