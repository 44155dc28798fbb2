"""Commands inside a running rental (`suanli exec`), through the real app with a hand-driven agent: queued
until the node's agent takes it from its heartbeat, then its exit code and output; refused unless the
rental runs; lost when the rental ends first or the agent never answers."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import ADMIN, SHARE, AppTransport, logged_in_as, register_agent, running_share
from suanli.app.execs import ANSWER_GRACE_S
from suanli.cli import exec_commands
from suanli.cli.main import app
from suanli.client import Client


def test_a_command_goes_to_the_nodes_agent_and_its_exit_code_and_output_come_back(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("exec-owner")
    _, other = tenant("exec-other")
    stopped = client.post("/v1/rentals", json=SHARE, headers=owner).json()
    client.post(f"/v1/rentals/{stopped['id']}/stop", headers=owner)
    refused = client.post(f"/v1/rentals/{stopped['id']}/execs", json={"command": ["ls"]}, headers=owner)
    assert refused.status_code == 409 and "running rental only" in refused.json()["error"]["message"]

    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    created = client.post(url, json={"command": ["nvidia-smi", "-L"], "timeout_s": 30}, headers=owner)
    assert created.status_code == 201, created.text
    queued = created.json()
    assert queued["state"] == "queued" and queued["command"] == ["nvidia-smi", "-L"]
    assert client.post(url, json={"command": ["ls"]}, headers=other).status_code == 404
    assert client.get(f"{url}/{queued['id']}", headers=other).status_code == 404

    beat = client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()
    assert [(e["id"], e["command"], e["timeout_s"]) for e in beat["execs"]] == [
        (queued["id"], ["nvidia-smi", "-L"], 30)
    ]
    report = f"/v1/agents/execs/{queued['id']}"
    assert client.post(report, json={"state": "running"}, headers=node_headers).json()["state"] == "running"
    assert client.get(f"{url}/{queued['id']}", headers=owner).json()["state"] == "running"
    ended = {"state": "exited", "exit_code": 3, "output": "GPU 0: L40S (UUID: GPU-1)\n"}
    assert client.post(report, json=ended, headers=node_headers).json()["exit_code"] == 3
    again = client.post(report, json={"state": "running"}, headers=node_headers).json()
    assert again["state"] == "exited"  # a late or retried report never reopens it
    shown = client.get(f"{url}/{queued['id']}", headers=owner).json()
    assert (shown["state"], shown["exit_code"], shown["output"]) == ("exited", 3, ended["output"])
    assert client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()["execs"] == []
    assert [e["id"] for e in client.get(url, headers=owner).json()] == [queued["id"]]

    other_node = register_agent(client, "h100-a-01")  # the share runs on an L40S node
    stolen = client.post(report, json={"state": "failed"}, headers=other_node)
    assert stolen.status_code == 404  # another node's agent cannot answer for it

    for bad, field in (
        ({"command": []}, "command"),
        ({"command": ["ls"], "timeout_s": 0}, "timeout_s"),
        ({"command": ["ls"], "node_rank": 1}, "node_rank"),
        ({"command": [""]}, "command"),
    ):
        response = client.post(url, json=bad, headers=owner)
        assert response.status_code in (400, 422) and field in response.text, response.text


def test_a_command_is_lost_when_its_rental_ends_or_its_agent_never_answers(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("exec-lost")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    silent = client.post(url, json={"command": ["true"], "timeout_s": 1}, headers=owner).json()
    execs = client.app.state.services.execs
    clock = execs.clock
    later = clock.now() + timedelta(seconds=1 + ANSWER_GRACE_S + 1)
    execs.clock = type("Later", (), {"now": staticmethod(lambda: later)})()  # past its timeout and grace
    try:
        lost = client.get(f"{url}/{silent['id']}", headers=owner).json()
    finally:
        execs.clock = clock
    assert lost["state"] == "lost" and "no answer from node" in lost["message"], lost

    pending = client.post(url, json={"command": ["sleep", "5"]}, headers=owner).json()
    client.post(f"/v1/rentals/{rental_id}/stop", headers=owner)
    report = {"workloads": [{"rental_id": rental_id, "state": "stopped", "exit_code": 143}]}
    client.post("/v1/agents/heartbeat", json=report, headers=node_headers)
    ended = client.get(f"{url}/{pending['id']}", headers=owner).json()
    assert ended["state"] == "lost" and "the rental ended (stopped)" in ended["message"], ended
    assert client.get(url, headers=ADMIN).status_code == 200  # an admin reads any rental's


def test_cli_exec_prints_the_output_and_exits_with_the_commands_code(client: TestClient, tenant) -> None:
    """`suanli exec` queues the command, waits for it, prints its output and exits with its exit code; the
    agent's side is answered by a thread standing in for it."""
    import threading

    _, owner = tenant("exec-cli")
    rental_id, node_headers = running_share(client, owner)
    stop = threading.Event()

    def agent() -> None:
        while not stop.is_set():
            for found in client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()["execs"]:
                body = {"state": "exited", "exit_code": 7, "output": f"ran {' '.join(found['command'])}\n"}
                client.post(f"/v1/agents/execs/{found['id']}", json=body, headers=node_headers)
            stop.wait(0.05)

    key = owner["Authorization"].split()[1]
    original = exec_commands.logged_in
    exec_commands.logged_in = logged_in_as(client, key)
    worker = threading.Thread(target=agent, daemon=True)
    worker.start()
    try:
        done = CliRunner().invoke(app, ["exec", rental_id, "--", "nvidia-smi", "-L"])
        assert done.exit_code == 7 and "ran nvidia-smi -L" in done.output, done.output
        missing = CliRunner().invoke(app, ["exec", rental_id])
        assert missing.exit_code == 2 and "give the command" in missing.output, missing.output
    finally:
        stop.set()
        worker.join(5)
        exec_commands.logged_in = original


def test_renting_with_no_command_says_the_gpus_are_held_and_how_to_run_in_them(
    client: TestClient, tenant, monkeypatch
) -> None:
    from suanli.cli import platform_commands

    _, owner = tenant("holder")
    key = owner["Authorization"].split()[1]
    monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, key))
    done = CliRunner().invoke(app, ["rent", "L40S:0.5"], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert "no command, so its GPUs are held until `suanli stop rnt_" in said, said
    assert "`suanli exec rnt_" in said


def test_output_sent_as_a_command_runs_is_shown_as_it_comes_once_each_and_gaps_are_said(
    client: TestClient, tenant
) -> None:
    """The agent sends what the command printed since its last report, with where it starts: the server
    adds each piece once (a retried or overlapping one adds only what is new), keeps only what follows a
    gap (marked truncated), and the SDK hands each new piece to `on_output` as it polls, the gap's size
    with the piece after it, then the rest with the end. Here the agent's reports are sent from
    `on_output` itself, one per poll."""
    _, owner = tenant("exec-stream")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    exec_id = client.post(url, json={"command": ["train"]}, headers=owner).json()["id"]

    def send(state: str, output: str, start: int, **more) -> None:
        body = {"state": state, "output": output, "output_from_chars": start, **more}
        answer = client.post(f"/v1/agents/execs/{exec_id}", json=body, headers=node_headers)
        assert answer.status_code == 200, answer.text

    send("running", "epoch 1\n", 0)
    send("running", "epoch 1\n", 0)  # retried: nothing twice
    shown = client.get(f"{url}/{exec_id}", headers=owner).json()
    assert (shown["state"], shown["output"], shown["output_chars"]) == ("running", "epoch 1\n", 8)
    next_reports = [
        lambda: send("running", "1\nepoch 2\n", 6),  # overlaps what the server has by two characters
        lambda: send("running", "epoch 9\n", 40),  # characters 16 to 40 never reached the server
        lambda: send("exited", "done\n", 48, exit_code=0),
    ]
    pieces: list[tuple[str, int]] = []

    def on_output(text: str, skipped: int) -> None:
        pieces.append((text, skipped))
        if next_reports:
            next_reports.pop(0)()

    with Client("http://testserver", owner["Authorization"][7:], transport=AppTransport(client)) as sdk:
        ended = sdk.wait_exec(rental_id, exec_id, poll_s=0.01, on_output=on_output)
    assert pieces == [("epoch 1\n", 0), ("epoch 2\n", 0), ("epoch 9\n", 24), ("done\n", 0)]
    assert (ended.state, ended.exit_code, ended.output_chars) == ("exited", 0, 53)
    assert (ended.output, ended.output_truncated) == ("epoch 9\ndone\n", True)


def test_cli_exec_interrupted_detaches_and_says_where_the_command_goes_on(
    client: TestClient, tenant, monkeypatch
) -> None:
    """Ctrl-C while `suanli exec` waits leaves the command running on the node (it was queued there), says
    so with how to find it, and exits 130 as an interrupted shell command does; the command is still there."""
    _, owner = tenant("exec-detach")
    rental_id, _ = running_share(client, owner)
    key = owner["Authorization"].split()[1]
    monkeypatch.setattr(exec_commands, "logged_in", logged_in_as(client, key))

    def interrupted(self: Client, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "wait_exec", interrupted)
    done = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["exec", rental_id, "--", "sleep", "600"])
    assert done.exit_code == 130, done.output
    said = " ".join(done.output.split())
    listed = client.get(f"/v1/rentals/{rental_id}/execs", headers=owner).json()
    assert [e["command"] for e in listed] == [["sleep", "600"]] and listed[0]["state"] == "queued"
    assert (
        f"(detached: {listed[0]['id']} runs on until it ends or its --timeout; `suanli execs {rental_id}`)"
        in said
    )
