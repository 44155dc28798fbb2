"""`suanli rent -f` against the real app (SQLite and PostgreSQL), its agent a thread that reports as a node's
would: the CLI's exit status is the workload's, also when a stop ended it."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import WAIT_S, logged_in_as, register_agent, wait_for
from suanli.cli.main import app

NAME = "cut-short"


def test_rent_follow_exits_with_the_sigterm_status_of_a_workload_its_stop_killed_and_says_who_stopped_it(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rental stopped while it runs ends `stopped`, its workload killed by SIGTERM (exit code 143): a CI
    step following it must not pass as green, so `rent -f` exits 143 (README: 128 + N for signal N) and its
    last line says the stop was requested."""
    from suanli.cli import follow, platform_commands

    _, owner = tenant("ci")
    monkeypatch.setattr(follow, "POLL_S", 0.02)
    monkeypatch.setattr(
        platform_commands, "logged_in", logged_in_as(client, owner["Authorization"].split()[1])
    )
    agent = threading.Thread(target=_run_then_stop_with_sigterm, args=(client, owner), daemon=True)
    agent.start()
    done = CliRunner().invoke(app, ["rent", "-f", "L40S:0.5", "--name", NAME, "--", "sleep", "600"])
    agent.join(WAIT_S)
    last = done.output.strip().splitlines()[-1]
    assert done.exit_code == 143, done.output
    assert ": stopped (stop requested by API" in last and "exit code 143" in last, last


def _run_then_stop_with_sigterm(client: TestClient, owner: dict[str, str]) -> None:
    """The node's agent starts the rental `NAME` once placed; its tenant stops it (from another shell); the
    agent's SIGTERM ends the workload with 143."""
    rental_id = _named_when_made(client, owner)
    node = wait_for(client, rental_id, owner, "placed")["allocation"][0]["node"]
    node_headers = register_agent(client, node)
    running = {"workloads": [{"rental_id": rental_id, "state": "running"}]}
    client.post("/v1/agents/heartbeat", json=running, headers=node_headers)
    client.post(f"/v1/rentals/{rental_id}/stop", headers=owner)
    killed = {"workloads": [{"rental_id": rental_id, "state": "stopped", "exit_code": 143}]}
    client.post("/v1/agents/heartbeat", json=killed, headers=node_headers)


def _named_when_made(client: TestClient, owner: dict[str, str]) -> str:
    """The id of the rental `NAME` once the CLI has made it."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = client.get("/v1/rentals", params={"name": NAME}, headers=owner).json()
        if found:
            return found[0]["id"]
        time.sleep(0.02)
    raise AssertionError(f"no rental {NAME} was made")
