"""Two `suanli server` processes on one PostgreSQL database and a real `suanli agent` given both: when the
server it talks to is SIGKILLed, the agent heartbeats the other at once, so its node is not marked down and
its running rental is neither ended lost nor billed past a gap."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from server_process import SUANLI, ServerProcess, new_database

ADMIN_KEY = "sk_failover_admin_key_0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
FLEET = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"
NODE = "h200-01"
SETTINGS = {
    "SUANLI_SCHEDULER_INTERVAL_S": "0.2",
    "SUANLI_AGENT_HEARTBEAT_INTERVAL_S": "1",
    "SUANLI_AGENT_MISSED_HEARTBEATS": "3",  # down 3 s after its last heartbeat
}


def _until(done, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(what)
        time.sleep(0.1)


@pytest.fixture
def servers(postgres_server: str, tmp_path: Path):
    database = new_database(postgres_server, "failover")
    started = []
    for name in ("a", "b"):
        process = ServerProcess(database, tmp_path / f"server-{name}.log", ADMIN_KEY, SETTINGS)
        process.start(timeout_s=60)
        started.append(process)
    yield started
    for process in started:
        process.stop()


def test_an_agent_given_both_servers_keeps_its_node_up_when_one_is_killed(servers, tmp_path: Path) -> None:
    first, second = servers
    http = httpx.Client(base_url=second.url, timeout=10)
    assert http.put(
        "/v1/fleet", content=FLEET.read_text(), headers={**ADMIN, "Content-Type": "application/toml"}
    )
    tenant_id = http.post("/v1/tenants", json={"name": "f"}, headers=ADMIN).json()["id"]
    secret = http.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    assert http.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    tenant = {"Authorization": f"Bearer {secret}"}
    token = http.post("/v1/join-tokens", json={"node": NODE}, headers=ADMIN).json()["token"]
    args = [*SUANLI, "agent", "--server", first.url, "--server", second.url, "--declared", str(FLEET)]
    args += ["--node", NODE, "--work-dir", str(tmp_path / "agent"), "--grace", "1"]
    log = (tmp_path / "agent.log").open("ab")
    agent = subprocess.Popen(
        args, env={**os.environ, "SUANLI_JOIN_TOKEN": token}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        spec = {"gpu_model": "H200", "gpus": 1, "command": ["sleep", "300"]}
        rental_id = http.post("/v1/rentals", json=spec, headers=tenant).json()["id"]

        def state() -> str:
            return http.get(f"/v1/rentals/{rental_id}", headers=tenant).json()["state"]

        _until(
            lambda: state() == "running", 60, f"not running: {(tmp_path / 'agent.log').read_text()[-2000:]}"
        )
        first.kill9()  # the server the agent registered with and heartbeats
        time.sleep(10)  # more than three timeouts
        (node,) = [n for n in http.get("/v1/nodes", headers=ADMIN).json() if n["name"] == NODE]
        assert node["schedulable"], node  # not marked down (and so not cordoned)
        body = http.get(f"/v1/rentals/{rental_id}", headers=tenant).json()
        assert body["state"] == "running", body
        assert not [e for e in body["events"] if e["kind"] == "lost"], body["events"]
        assert "moving to server" in (tmp_path / "agent.log").read_text()
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        log.close()
