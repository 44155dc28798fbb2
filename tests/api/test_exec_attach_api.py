"""Attached commands (`suanli exec -it`), through the real app: the tenant's client and the node's agent each
open a WebSocket and the server relays input, output and the terminal's size between them; refusals close
with 4000 + the HTTP status; an agent with no client is sent away, and a command that ended before its agent
came tells its client why; a command that ended before its client came keeps its output for it; a browser's
key comes as a subprotocol."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect
from typer.testing import CliRunner

from conftest import ADMIN, logged_in_as, register_agent, running_share
from suanli.api import exec_attach
from suanli.app import execs
from suanli.cli import exec_commands
from suanli.cli.main import app


def _closed_with(connect, code: int) -> str:
    """The reason of a WebSocket the server closes at once with `code`."""
    with connect() as socket, pytest.raises(WebSocketDisconnect) as closed:
        socket.receive_bytes()
    assert closed.value.code == code, closed.value
    return closed.value.reason


def test_input_output_and_size_are_relayed_between_the_client_and_the_agent(client: TestClient, tenant):
    _, owner = tenant("attach-owner")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    body = {"command": ["bash"], "stdin": True, "tty": True, "timeout_s": 7200}
    created = client.post(url, json=body, headers=owner)
    assert created.status_code == 201, created.text
    exec_id = created.json()["id"]
    assert created.json()["stdin"] is True and created.json()["tty"] is True
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()
    assert [(e["id"], e["stdin"], e["tty"]) for e in beat["execs"]] == [(exec_id, True, True)]

    with client.websocket_connect(f"{url}/{exec_id}/attach", headers=owner) as tenant_end:
        tenant_end.send_bytes(b"echo hi\r")  # typed before the agent came: it waits for it
        tenant_end.send_text(json.dumps({"rows": 40, "cols": 120}))
        agent_url = f"/v1/agents/execs/{exec_id}/attach"
        with client.websocket_connect(agent_url, headers=node_headers) as agent_end:
            assert agent_end.receive_bytes() == b"echo hi\r"
            assert json.loads(agent_end.receive_text()) == {"rows": 40, "cols": 120}
            agent_end.send_bytes(b"hi\r\n$ ")
            assert tenant_end.receive_bytes() == b"hi\r\n$ "
            second = client.websocket_connect(f"{url}/{exec_id}/attach", headers=owner)
            assert "already" in _closed_with(lambda: second, 4409)
        with pytest.raises(WebSocketDisconnect):  # the agent went (the command ended): the client is closed
            tenant_end.receive_bytes()


def test_refusals_close_with_the_status_and_say_why(client: TestClient, tenant):
    _, owner = tenant("attach-refused")
    _, other = tenant("attach-other")
    rental_id, _ = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    plain = client.post(url, json={"command": ["ls"]}, headers=owner).json()["id"]
    attached = client.post(url, json={"command": ["sh"], "stdin": True}, headers=owner).json()["id"]
    assert "not started attached" in _closed_with(
        lambda: client.websocket_connect(f"{url}/{plain}/attach", headers=owner), 4409
    )
    _closed_with(lambda: client.websocket_connect(f"{url}/{attached}/attach", headers=other), 4404)
    _closed_with(lambda: client.websocket_connect(f"{url}/{attached}/attach"), 4401)
    other_node = register_agent(client, "h100-a-01")
    _closed_with(
        lambda: client.websocket_connect(f"/v1/agents/execs/{attached}/attach", headers=other_node), 4404
    )

    tty_alone = client.post(url, json={"command": ["sh"], "tty": True}, headers=owner)
    assert tty_alone.status_code == 400 and tty_alone.json()["error"]["field"] == "tty"
    for not_apart in ({"stdin": True, "tty": True}, {}):  # a terminal has one output; a plain exec keeps one
        refused = client.post(
            url, json={"command": ["sh"], "separate_stderr": True, **not_apart}, headers=owner
        )
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "separate_stderr"
    apart = client.post(url, json={"command": ["sh"], "stdin": True, "separate_stderr": True}, headers=owner)
    assert apart.status_code == 201 and apart.json()["separate_stderr"] is True
    too_long = client.post(url, json={"command": ["sh"], "timeout_s": 7200}, headers=owner)
    assert too_long.status_code == 400 and "1 to 3600" in too_long.json()["error"]["message"]


def test_an_agent_with_no_client_is_sent_away(client: TestClient, tenant, monkeypatch):
    monkeypatch.setattr(exec_attach, "ATTACH_WAIT_S", 0.2)
    _, owner = tenant("attach-alone")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    exec_id = client.post(url, json={"command": ["sh"], "stdin": True}, headers=owner).json()["id"]
    reason = _closed_with(
        lambda: client.websocket_connect(f"/v1/agents/execs/{exec_id}/attach", headers=node_headers), 4408
    )
    assert "no client attached" in reason


def test_a_command_that_failed_before_its_agent_came_tells_its_client(
    client: TestClient, tenant, monkeypatch
):
    monkeypatch.setattr(exec_attach, "LATE_AGENT_S", 0.1)
    _, owner = tenant("attach-failed")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    exec_id = client.post(url, json={"command": ["nope"], "stdin": True}, headers=owner).json()["id"]
    with client.websocket_connect(f"{url}/{exec_id}/attach", headers=owner) as tenant_end:
        failed = {"state": "failed", "exit_code": 127, "message": "cannot run 'nope'"}
        client.post(f"/v1/agents/execs/{exec_id}", json=failed, headers=node_headers)
        with pytest.raises(WebSocketDisconnect) as closed:
            tenant_end.receive_bytes()
    assert closed.value.code == 4410 and "cannot run 'nope'" in closed.value.reason


def test_a_port_forward_goes_to_the_nodes_agent_with_its_port(client: TestClient, tenant, monkeypatch):
    _, owner = tenant("forward-owner")
    _, other = tenant("forward-other")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/forwards"
    created = client.post(url, json={"port": 8888}, headers=owner)
    assert created.status_code == 201, created.text
    forward = created.json()
    assert (forward["port"], forward["command"], forward["stdin"], forward["timeout_s"]) == (
        8888,
        [],
        True,
        28800,
    )
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()
    assert [(e["id"], e["port"], e["command"]) for e in beat["execs"]] == [(forward["id"], 8888, [])]
    assert client.post(url, json={"port": 8888}, headers=other).status_code == 404
    for bad, field in (
        ({"port": 0}, "port"),
        ({"port": 65536}, "port"),
        ({"port": 80, "node_rank": 1}, "node_rank"),
    ):
        response = client.post(url, json=bad, headers=owner)
        assert response.status_code in (400, 422) and field in response.text, response.text
    client.post(
        f"/v1/rentals/{rental_id}/execs",
        json={"command": ["bash"], "stdin": True, "tty": True},
        headers=owner,
    )
    monkeypatch.setattr(exec_commands, "logged_in", logged_in_as(client, owner["Authorization"][7:]))
    listed = CliRunner().invoke(app, ["execs", rental_id], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "port-forward :8888" in listed.output and "-it bash" in listed.output, listed.output
    client.post(f"/v1/rentals/{rental_id}/stop", headers=owner)
    ended = client.post(url, json={"port": 8888}, headers=owner)
    assert ended.status_code == 409 and "a port forward reaches a running rental only" in ended.text


def test_a_browser_sends_its_key_as_a_subprotocol_and_is_answered_with_suanli_v1(client: TestClient, tenant):
    """A browser's WebSocket has no Authorization header: the console's terminal offers `suanli.v1` and
    `bearer.KEY`; the server takes the key from there and answers with `suanli.v1` (else the browser drops
    the socket); a wrong key is refused as in a header."""
    _, owner = tenant("attach-browser")
    key = owner["Authorization"].removeprefix("Bearer ")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    body = {"command": ["bash"], "stdin": True, "tty": True}
    exec_id = client.post(url, json=body, headers=owner).json()["id"]
    client.post("/v1/agents/heartbeat", json={}, headers=node_headers)
    offered = ["suanli.v1", f"bearer.{key}"]
    with client.websocket_connect(f"{url}/{exec_id}/attach", subprotocols=offered) as browser:
        assert browser.accepted_subprotocol == "suanli.v1"
        with client.websocket_connect(f"/v1/agents/execs/{exec_id}/attach", headers=node_headers) as agent:
            browser.send_bytes(b"ls\r")
            assert agent.receive_bytes() == b"ls\r"
    wrong = ["suanli.v1", "bearer.sk_not_a_key_of_this_server"]
    _closed_with(lambda: client.websocket_connect(f"{url}/{exec_id}/attach", subprotocols=wrong), 4401)


def test_a_command_that_ended_before_its_client_came_keeps_its_output_for_it(
    client: TestClient, tenant, monkeypatch
):
    """`suanli cp RENTAL:notes.txt .` runs `tar -c` on the node, which can end before the client's WebSocket
    is up: the agent's end waits for the client with what it sent, and the client reads all of it."""
    _, owner = tenant("attach-late")
    rental_id, node_headers = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    exec_id = client.post(url, json={"command": ["tar", "-c"], "stdin": True}, headers=owner).json()["id"]
    archive = [b"first block ", b"last block"]
    sent = threading.Event()

    def agent() -> None:  # its end is closed once the command ended; the server holds what it sent
        with client.websocket_connect(f"/v1/agents/execs/{exec_id}/attach", headers=node_headers) as end:
            for block in archive:
                end.send_bytes(block)
            sent.set()

    agent_thread = threading.Thread(target=agent)
    agent_thread.start()
    assert sent.wait(timeout=10)
    exited = {"state": "exited", "exit_code": 0}
    assert client.post(f"/v1/agents/execs/{exec_id}", json=exited, headers=node_headers).status_code == 200
    assert client.get(f"{url}/{exec_id}", headers=owner).json()["state"] == "exited"

    with client.websocket_connect(f"{url}/{exec_id}/attach", headers=owner) as tenant_end:
        assert [tenant_end.receive_bytes() for _ in archive] == archive
        with pytest.raises(WebSocketDisconnect) as closed:
            tenant_end.receive_bytes()
    assert closed.value.code == 1000
    agent_thread.join(timeout=10)
    assert not agent_thread.is_alive()

    monkeypatch.setattr(execs, "LATE_CLIENT_S", 0.0)  # once its output can no longer wait, it is refused
    assert "has ended (exited)" in _closed_with(
        lambda: client.websocket_connect(f"{url}/{exec_id}/attach", headers=owner), 4409
    )


@pytest.mark.parametrize(
    "opened",
    [("execs", {"command": ["sh"], "stdin": True}), ("forwards", {"port": 8888})],
    ids=["shell", "port-forward"],
)
def test_revoking_a_key_ends_the_sessions_it_opened_within_seconds(
    client: TestClient, tenant, opened: tuple[str, dict]
):
    """An attached shell and a port forward kept relaying (up to 8 h) after their key was revoked and REST
    calls with it got 401: the key was checked once, when the socket was admitted."""
    tenant_id, owner = tenant("revoked-midstream")
    rental_id, node_headers = running_share(client, owner)
    keys = f"/v1/tenants/{tenant_id}/keys"
    leaked = client.post(keys, json={"label": "leaked"}, headers=ADMIN).json()
    with_leaked = {"Authorization": f"Bearer {leaked['secret']}"}
    kind, body = opened
    exec_id = client.post(f"/v1/rentals/{rental_id}/{kind}", json=body, headers=with_leaked).json()["id"]
    attach = f"/v1/rentals/{rental_id}/execs/{exec_id}/attach"
    with (
        client.websocket_connect(attach, headers=with_leaked) as tenant_end,
        client.websocket_connect(f"/v1/agents/execs/{exec_id}/attach", headers=node_headers) as agent_end,
    ):
        agent_end.send_bytes(b"before")
        assert tenant_end.receive_bytes() == b"before"
        assert client.delete(f"{keys}/{leaked['id']}", headers=ADMIN).status_code == 200
        assert client.get("/v1/me", headers=with_leaked).status_code == 401
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the agent's output still reaches it until it is closed
            agent_end.send_bytes(b"after")
            message = tenant_end.receive()
            if message["type"] == "websocket.close":
                break
            time.sleep(0.2)
        assert message["type"] == "websocket.close", "still relaying 10 s after its key was revoked"
        assert message["code"] == 4401 and "revoked" in message["reason"], message
        assert agent_end.receive()["type"] == "websocket.close"  # its agent ends the command
    assert time.monotonic() < deadline
