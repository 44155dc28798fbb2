"""Join tokens, node keys, heartbeats, state transitions, logs and the reaper, through the real app."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import (
    ADMIN,
    FLEET,
    AppTransport,
    FixedClock,
    charged,
    logged_in_as,
    register_agent,
    scheduler_cycles,
    wait_for,
)
from suanli.app.agents import next_state
from suanli.cli import admin_commands, platform_commands
from suanli.cli.main import app
from suanli.client import Client
from suanli.client.client import ServerUnreachable
from suanli.domain.billing.money import charge_micros


def test_the_sdk_knows_the_states_a_rental_ends_in() -> None:
    from suanli.app.records import END_STATES
    from suanli.wire.schemas import ENDED_STATES

    assert frozenset(END_STATES) == ENDED_STATES


@pytest.mark.parametrize(
    ("current", "reported", "expected"),
    [
        ("placed", "running", "running"),
        ("placed", "starting", "starting"),
        ("starting", "running", "running"),
        ("running", "succeeded", "stopped"),
        ("running", "failed", "failed"),
        ("stopping", "failed", "stopped"),
        ("stopping", "stopped", "stopped"),
        ("running", "running", None),
        ("stopped", "running", None),
        ("lost", "succeeded", None),
        ("pending", "running", None),
    ],
    ids=lambda v: str(v),
)
def test_transitions(current: str, reported: str, expected: str | None) -> None:
    assert next_state(current, reported) == expected


def test_join_tokens_are_single_use_for_operators_and_node_keys_authenticate(
    client: TestClient, tenant
) -> None:
    _, headers = tenant("acme")
    assert client.post("/v1/join-tokens", json={"node": "l40s-01"}, headers=headers).status_code == 403
    assert client.post("/v1/join-tokens", json={"node": "nope"}, headers=ADMIN).status_code == 404
    token = client.post("/v1/join-tokens", json={"node": "l40s-01"}, headers=ADMIN).json()["token"]
    assert client.post("/v1/agents/register", json={"token": token, "inventory": {}}).status_code == 200
    again = client.post("/v1/agents/register", json={"token": token, "inventory": {}})
    assert again.status_code == 401
    assert (
        client.post("/v1/agents/heartbeat", json={}, headers={"Authorization": "Bearer nk_x"}).status_code
        == 401
    )
    expired = client.post("/v1/join-tokens", json={"node": "l40s-01", "ttl_s": 0.001}, headers=ADMIN).json()
    time.sleep(0.01)
    assert (
        client.post("/v1/agents/register", json={"token": expired["token"], "inventory": {}}).status_code
        == 401
    )


def test_a_provider_makes_join_tokens_only_for_its_own_nodes(client: TestClient, tenant) -> None:
    """A token for another provider's node would let a provider register as that node, replacing its agent's
    key, and be sent the workloads (command, env) of the tenants running there."""
    provider_id = client.post(
        "/v1/tenants", json={"name": "lion-city-gpu", "role": "provider"}, headers=ADMIN
    ).json()["id"]
    made = client.post(f"/v1/tenants/{provider_id}/keys", json={"label": "p"}, headers=ADMIN)
    secret = made.json()["secret"]
    lion = {"Authorization": f"Bearer {secret}"}
    platform_node = client.post("/v1/join-tokens", json={"node": "h100-a-01"}, headers=lion)
    assert platform_node.status_code == 403, platform_node.text
    assert platform_node.json()["error"]["field"] == "node"
    own = client.post("/v1/join-tokens", json={"node": "l40s-01"}, headers=lion)
    assert own.status_code == 201, own.text
    assert client.post("/v1/join-tokens", json={"node": "h100-a-01"}, headers=ADMIN).status_code == 201


A100_40G_NODES = 'name = "a100-40g-{i}"\ncount_nodes = 2'
LION_A100 = 'memory_mib = 524288\nprovider = "lion-city-gpu"'


@pytest.mark.parametrize(
    "fleet",
    [
        FLEET.replace(A100_40G_NODES, 'name = "a100-40g-{i}"\ncount_nodes = 1'),
        FLEET.replace(LION_A100, 'memory_mib = 524288\nprovider = "other-gpu"'),
    ],
    ids=["node-removed", "provider-changed"],
)
def test_a_fleet_change_that_removes_or_reowns_a_node_revokes_its_agent_key_and_join_tokens(
    client: TestClient, fleet: str
) -> None:
    """The old owner's agent must not go on as the node and be sent the next owner's tenants' workloads."""
    assert fleet != FLEET
    node_headers = register_agent(client, "a100-40g-02")
    unspent = client.post("/v1/join-tokens", json={"node": "a100-40g-02"}, headers=ADMIN).json()["token"]
    kept_headers = register_agent(client, "l40s-01")
    put = client.put("/v1/fleet", content=fleet, headers={**ADMIN, "Content-Type": "application/toml"})
    assert put.status_code == 200, put.text
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node_headers)
    assert beat.status_code == 401, beat.text
    assert "revoked" in beat.json()["error"]["message"]
    again = client.post("/v1/agents/register", json={"token": unspent, "inventory": {}})
    assert again.status_code == 401, again.text
    assert client.post("/v1/agents/heartbeat", json={}, headers=kept_headers).status_code == 200


def test_a_second_agent_cannot_join_a_node_whose_agent_is_alive_until_it_is_marked_down(
    client: TestClient,
) -> None:
    """Two agents of one node would both run its rentals' workloads: a join waits for the first's end."""
    first = register_agent(client, "l40s-01")
    token = client.post("/v1/join-tokens", json={"node": "l40s-01"}, headers=ADMIN).json()["token"]
    refused = client.post("/v1/agents/register", json={"token": token, "inventory": {}})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["field"] == "token"
    assert "live agent" in refused.json()["error"]["message"]
    assert client.post("/v1/agents/heartbeat", json={}, headers=first).status_code == 200
    service = client.app.state.services.agents  # type: ignore[attr-defined]
    assert service.reap(service.clock.now() + timedelta(seconds=service.timeout_s + 1)) == ["l40s-01"]
    joined = client.post("/v1/agents/register", json={"token": token, "inventory": {}})  # kept unspent
    assert joined.status_code == 200, joined.text
    assert client.post("/v1/agents/heartbeat", json={}, headers=first).status_code == 401


def test_reports_move_the_rental_and_logs_are_tenant_scoped(client: TestClient, tenant) -> None:
    node_headers = register_agent(client, "l40s-01")
    _, owner = tenant("owner")
    _, other = tenant("other")
    body = {"gpu_model": "L40S", "gpus": 0, "share_milli": 500, "command": ["echo", "hi"], "regions": []}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    placed = wait_for(client, rental["id"], owner, "placed")
    node = placed["allocation"][0]["node"]
    node_headers = node_headers if node == "l40s-01" else register_agent(client, node)
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()
    assert [a["rental_id"] for a in beat["assignments"]] == [rental["id"]]
    assert beat["assignments"][0]["command"] == ["echo", "hi"]
    report = {"workloads": [{"rental_id": rental["id"], "state": "running"}]}
    client.post("/v1/agents/heartbeat", json=report, headers=node_headers)
    assert client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["state"] == "running"
    chunk = {"rental_id": rental["id"], "offset": 0, "data": "hi\n", "size_bytes": 3}
    assert client.post("/v1/agents/logs", json=chunk, headers=node_headers).json()["stored_bytes"] == 3
    assert (
        client.post("/v1/agents/logs", json=chunk, headers=node_headers).json()["stored_bytes"] == 3
    )  # dedup
    assert client.get(f"/v1/rentals/{rental['id']}/logs", headers=owner).json()["data"] == "hi\n"
    assert client.get(f"/v1/rentals/{rental['id']}/logs", headers=other).status_code == 404
    # a workload that prints a NUL byte: PostgreSQL stores no NUL, so it is kept as U+FFFD, one for one
    nul = {"rental_id": rental["id"], "offset": 3, "data": "a\x00b\n", "size_bytes": 4}
    assert client.post("/v1/agents/logs", json=nul, headers=node_headers).json()["stored_bytes"] == 7
    assert client.get(f"/v1/rentals/{rental['id']}/logs", headers=owner).json()["data"] == "hi\na\ufffdb\n"
    stop = client.post(f"/v1/rentals/{rental['id']}/stop", headers=owner).json()
    assert stop["state"] == "stopping"
    beat = client.post("/v1/agents/heartbeat", json={}, headers=node_headers).json()
    assert beat["assignments"][0]["action"] == "stop"
    report = {"workloads": [{"rental_id": rental["id"], "state": "stopped", "exit_code": 143}]}
    beat = client.post("/v1/agents/heartbeat", json=report, headers=node_headers).json()
    assert beat["assignments"] == []
    assert client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["state"] == "stopped"
    assert client.get(f"/v1/rentals/{rental['id']}/logs", headers=owner).json()["done"] is True


@pytest.mark.parametrize("second", ["succeeded", "failed"])
def test_a_gang_ends_when_every_node_has_succeeded_or_when_one_fails(
    client: TestClient, tenant, second: str
) -> None:
    """Rank 0 finishing first leaves the rental running on both nodes (rank 1 is not killed); it ends
    `stopped` when rank 1 succeeds too, or `failed` when rank 1 fails. A failure on any node ends it at
    once."""
    _, owner = tenant("owner")
    body = {"gpu_model": "H100", "gpus": 8, "nodes": 2, "command": ["train"], "regions": ["cn-north"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    placed = wait_for(client, rental["id"], owner, "placed")
    first, second_node = (a["node"] for a in placed["allocation"])
    agents = {node: register_agent(client, node) for node in (first, second_node)}

    def report(node: str, state: str, exit_code: int | None = None) -> list[str]:
        workload = {"rental_id": rental["id"], "state": state, "exit_code": exit_code}
        beat = client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=agents[node])
        assert beat.status_code == 200, beat.text
        return [a["rental_id"] for a in beat.json()["assignments"]]

    def state() -> str:
        return client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["state"]

    report(first, "running")
    report(second_node, "running")
    assert report(first, "succeeded", 0) == [rental["id"]]  # still held: rank 1 runs on
    assert state() == "running"
    assert report(first, "succeeded", 0) == [rental["id"]]  # the agent says so again each beat
    assert state() == "running"
    assert report(second_node, second, 0 if second == "succeeded" else 3) == []
    assert state() == ("stopped" if second == "succeeded" else "failed")
    runs = client.get(f"/v1/rentals/{rental['id']}/runs", headers=owner).json()
    assert sorted((r["state"], r["exit_code"]) for r in runs) == sorted(
        [("succeeded", 0), (second, 0 if second == "succeeded" else 3)]
    )

    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    first = wait_for(client, rental["id"], owner, "placed")["allocation"][0]["node"]
    if first not in agents:
        agents[first] = register_agent(client, first)
    report(first, "running")
    assert report(first, "failed", 1) == []  # one rank failing ends the gang: the other is killed
    assert state() == "failed"


def test_every_rank_of_a_gang_is_told_the_same_master_port_and_its_peers(client: TestClient, tenant) -> None:
    """The leader picked the gang's rendezvous port when it placed it; each node's assignment carries it,
    with the rank order, so torchrun on every rank meets on rank 0's host at one port."""
    _, owner = tenant("owner")
    body = {"gpu_model": "H100", "gpus": 8, "nodes": 2, "command": ["train"], "regions": ["cn-north"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    nodes = [a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"]]
    told = []
    for node in nodes:
        beat = client.post(
            "/v1/agents/heartbeat", json={"workloads": []}, headers=register_agent(client, node)
        )
        (assignment,) = beat.json()["assignments"]
        told.append((assignment["master_port"], assignment["peers"], assignment["node_rank"]))
    port = told[0][0]
    assert 20_000 <= port < 29_000
    assert told == [(port, nodes, 0), (port, nodes, 1)]


def test_a_gangs_output_is_read_whole_or_one_nodes_at_a_time(client: TestClient, tenant) -> None:
    """Two ranks' lines come in turn: the rental's log has them as they came, `node=` one rank's alone, and a
    node the rental never ran on is refused naming the field."""
    _, owner = tenant("owner")
    body = {"gpu_model": "H100", "gpus": 8, "nodes": 2, "command": ["train"], "regions": ["cn-north"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    first, second = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
    agents = {node: register_agent(client, node) for node in (first, second)}
    sent = {first: 0, second: 0}
    for node, line in ((first, "rank 0: step 1\n"), (second, "rank 1: step 1\n"), (first, "rank 0: done\n")):
        chunk = {"rental_id": rental["id"], "offset": sent[node], "data": line, "size_bytes": len(line)}
        sent[node] = client.post("/v1/agents/logs", json=chunk, headers=agents[node]).json()["stored_bytes"]

    def read(**params: str) -> dict:
        return client.get(f"/v1/rentals/{rental['id']}/logs", params=params, headers=owner).json()

    assert read()["data"] == "rank 0: step 1\nrank 1: step 1\nrank 0: done\n"
    assert read(node=first)["data"] == "rank 0: step 1\nrank 0: done\n"
    page = read(node=second, offset="8")
    assert (page["data"], page["next_offset"], page["done"]) == ("step 1\n", 15, False)
    refused = client.get(f"/v1/rentals/{rental['id']}/logs", params={"node": "h100-zz"}, headers=owner)
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "node"


def test_the_reaper_ends_rentals_of_a_silent_node_lost_at_the_last_heartbeat(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("owner")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["sleep", "9"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    node = wait_for(client, rental["id"], owner, "placed")["allocation"][0]["node"]
    headers = register_agent(client, node)
    client.post(
        "/v1/agents/heartbeat",
        json={"workloads": [{"rental_id": rental["id"], "state": "running"}]},
        headers=headers,
    )
    service = client.app.state.services.agents  # type: ignore[attr-defined]
    later = service.clock.now() + timedelta(seconds=service.timeout_s + 1)
    assert service.reap(later) == [node]
    lost = client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()
    assert lost["state"] == "lost"
    (run,) = client.get(f"/v1/rentals/{rental['id']}/runs", headers=owner).json()
    assert run["ended_at"] == run["last_heartbeat_at"]
    assert client.post("/v1/agents/heartbeat", json={}, headers=headers).json()["assignments"] == []


def test_a_failed_rank_restarts_the_gang_on_every_node_up_to_the_limit(client: TestClient, tenant) -> None:
    """Under on-failure, a rank's failure restarts the workload on both nodes (the attempt in every
    assignment goes up, with an event); the other rank's end of the earlier attempt is ignored; a failure
    with no restart left ends the rental `failed`."""
    _, owner = tenant("owner")
    body = {
        "gpu_model": "H100",
        "gpus": 8,
        "nodes": 2,
        "command": ["train"],
        "regions": ["cn-north"],
        "restart": "on-failure",
        "max_restarts": 1,
    }
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    first, second = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
    agents = {node: register_agent(client, node) for node in (first, second)}

    def report(node: str, state: str, attempt: int, exit_code: int | None = None) -> list[tuple[str, int]]:
        workload = {"rental_id": rental["id"], "state": state, "exit_code": exit_code, "attempt": attempt}
        beat = client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=agents[node])
        assert beat.status_code == 200, beat.text
        return [(a["rental_id"], a["attempt"]) for a in beat.json()["assignments"]]

    def view() -> dict:
        return client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()

    assert report(first, "running", 0) == [(rental["id"], 0)]
    report(second, "running", 0)
    assert report(second, "failed", 0, 7) == [(rental["id"], 1)]  # restarted, not ended
    assert view()["state"] == "running"
    restarted = [e for e in view()["events"] if e["kind"] == "restarted"]
    assert len(restarted) == 1 and "exit code 7" in restarted[0]["message"]
    assert "restarting it on all 2 nodes (1/1)" in restarted[0]["message"]
    runs = client.get(f"/v1/rentals/{rental['id']}/runs", headers=owner).json()
    assert {(r["state"], r["ended_at"]) for r in runs} == {("starting", None)}
    assert report(first, "failed", 0, 1) == [(rental["id"], 1)]  # rank 0 died with it: the same attempt
    assert (
        view()["state"] == "running" and len([e for e in view()["events"] if e["kind"] == "restarted"]) == 1
    )
    report(first, "running", 1)
    report(second, "running", 1)
    assert report(first, "failed", 1, 2) == []  # no restart left: the gang fails, the other rank is killed
    assert view()["state"] == "failed"


def test_a_run_whose_first_report_is_its_end_starts_when_the_agent_says_it_started(
    client: TestClient, tenant
) -> None:
    """A workload that ended between two heartbeats: its run starts `ran_s` before the report, not never;
    a start the agent puts before the rental's placement is taken as the placement."""
    _, owner = tenant("owner")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"], "regions": []}
    agents: dict[str, dict[str, str]] = {}  # one agent per node: a second join of a live node is refused
    for ran_s, placed_floor in ((0.5, False), (10 * 24 * 3600.0, True)):
        rental = client.post("/v1/rentals", json=body, headers=owner).json()
        placed = wait_for(client, rental["id"], owner, "placed")
        name = placed["allocation"][0]["node"]
        node = agents[name] if name in agents else agents.setdefault(name, register_agent(client, name))
        time.sleep(1.0)  # the workload started after its placement
        workload = {"rental_id": rental["id"], "state": "succeeded", "exit_code": 0, "ran_s": ran_s}
        assert (
            client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=node).status_code
            == 200
        )
        (run,) = client.get(f"/v1/rentals/{rental['id']}/runs", headers=owner).json()
        started, ended = (datetime.fromisoformat(run[k]) for k in ("started_at", "ended_at"))
        if placed_floor:
            placed_at = next(e["at"] for e in placed["events"] if e["kind"] == "placed")
            assert started == datetime.fromisoformat(placed_at)
        else:
            assert ended - started == timedelta(seconds=0.5)
    refused = {"rental_id": rental["id"], "state": "running", "ran_s": -1}
    answer = client.post("/v1/agents/heartbeat", json={"workloads": [refused]}, headers=node)
    assert answer.status_code == 422


def test_a_workload_that_exits_while_its_reports_cannot_reach_the_server_is_billed_to_its_exit(
    client: TestClient, tenant
) -> None:
    """Audit T1: a 90-s workload that exited 40 s into an outage (its reports could not reach the server):
    the report that finally arrives says how long ago it exited (`since_exit_s`), so its run, its end event
    and its charge stop at the exit, not at the report's arrival; a negative one is refused naming it."""
    _, owner = tenant("owner")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["train"], "regions": []}
    rental_id = client.post("/v1/rentals", json=body, headers=owner).json()["id"]
    placed = wait_for(client, rental_id, owner, "placed")
    node = register_agent(client, placed["allocation"][0]["node"])
    started = datetime.now(UTC) + timedelta(seconds=1)  # the workload started after its placement

    def beat(after_s: float, **workload: object) -> None:
        client.app.state.services.agents.clock = FixedClock(started + timedelta(seconds=after_s))
        report = {"rental_id": rental_id, "ran_s": after_s, **workload}
        answer = client.post("/v1/agents/heartbeat", json={"workloads": [report]}, headers=node)
        assert answer.status_code == 200, answer.text

    beat(0, state="running")
    beat(80, state="running")  # its last heartbeat before the outage
    beat(130, state="succeeded", exit_code=0, since_exit_s=40)  # it exited at 90 s; the server was down

    (run,) = client.get(f"/v1/rentals/{rental_id}/runs", headers=owner).json()
    assert datetime.fromisoformat(run["started_at"]) == started
    assert datetime.fromisoformat(run["ended_at"]) == started + timedelta(seconds=90)
    view = client.get(f"/v1/rentals/{rental_id}", headers=owner).json()
    assert view["state"] == "stopped"
    assert datetime.fromisoformat(view["events"][-1]["at"]) == started + timedelta(seconds=90)
    client.app.state.services.billing.meter(now=started + timedelta(minutes=10))
    assert charged(client, rental_id, owner) == charge_micros(view["price_micros_per_hour"], 90)
    early = {"rental_id": rental_id, "state": "succeeded", "ran_s": 1, "since_exit_s": -1}
    refused = client.post("/v1/agents/heartbeat", json={"workloads": [early]}, headers=node)
    assert refused.status_code == 422 and "since_exit_s" in refused.text


def test_an_exit_reported_before_the_run_started_ends_it_at_its_start_and_an_older_agent_at_the_report(
    client: TestClient, tenant
) -> None:
    """`since_exit_s` longer than the run (a skewed report) ends the run at its start, never before it; an
    agent that does not send it (an older release) has its run end when its report arrives, as before."""
    _, owner = tenant("owner")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["train"], "regions": []}
    agents: dict[str, dict[str, str]] = {}
    for since_exit_s, run_s in ((500.0, 0), (None, 30)):
        rental_id = client.post("/v1/rentals", json=body, headers=owner).json()["id"]
        name = wait_for(client, rental_id, owner, "placed")["allocation"][0]["node"]
        node = agents[name] if name in agents else agents.setdefault(name, register_agent(client, name))
        started = datetime.now(UTC) + timedelta(seconds=1)
        workload = {"rental_id": rental_id, "state": "succeeded", "exit_code": 0, "ran_s": 30.0}
        if since_exit_s is not None:
            workload["since_exit_s"] = since_exit_s
        client.app.state.services.agents.clock = FixedClock(started + timedelta(seconds=30))
        answer = client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=node)
        assert answer.status_code == 200, answer.text
        (run,) = client.get(f"/v1/rentals/{rental_id}/runs", headers=owner).json()
        ran = datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])
        assert ran == timedelta(seconds=run_s)


def test_the_end_of_the_output_is_read_with_tail(client: TestClient, tenant) -> None:
    """`tail=N`: the last N characters, the answer's offset where they start; of one node's too; a tail
    outside 1..1 MiB is refused naming it."""
    _, owner = tenant("owner")
    body = {"gpu_model": "H100", "gpus": 8, "nodes": 2, "command": ["train"], "regions": ["cn-north"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    first, second = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
    agents = {node: register_agent(client, node) for node in (first, second)}
    for node, offset, text in ((first, 0, "a1\na2\n"), (second, 0, "b1\n"), (first, 6, "a3\n")):
        chunk = {"rental_id": rental["id"], "offset": offset, "data": text, "size_bytes": len(text)}
        assert client.post("/v1/agents/logs", json=chunk, headers=agents[node]).status_code == 200

    def read(**params: str) -> dict:
        answer = client.get(f"/v1/rentals/{rental['id']}/logs", params=params, headers=owner)
        assert answer.status_code == 200, answer.text
        return answer.json()

    whole = read(tail="6")
    assert (whole["offset"], whole["data"], whole["next_offset"]) == (6, "b1\na3\n", 12)
    assert read(tail="100")["data"] == "a1\na2\nb1\na3\n"
    mine = read(tail="6", node=first)
    assert (mine["offset"], mine["data"]) == (3, "a2\na3\n")
    for bad in ("0", str((1 << 20) + 1)):
        refused = client.get(f"/v1/rentals/{rental['id']}/logs", params={"tail": bad}, headers=owner)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "tail"


def test_a_one_node_rental_restarted_by_its_agent_gets_a_restarted_event_per_report(
    client: TestClient, tenant
) -> None:
    """On one node the agent restarts a failed workload itself (on-failure) and counts it in its reports:
    each count that went up is one `restarted` event (two restarts between beats: one event for both), a
    report repeated says nothing new, the assignment tells the count back (a new agent process counts on
    from it, so max_restarts holds across it) and a lower count forgets nothing, and the assignment's
    attempt stays 0 (the gang's count is for multi-node rentals)."""
    _, owner = tenant("owner")
    body = {"gpu_model": "H200-141GB", "gpus": 8, "command": ["train"], "restart": "on-failure"}
    body["max_restarts"] = 5
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    (node,) = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
    agent = register_agent(client, node)

    def report(restarts: int, failed_exit_code: int | None = None) -> list[int]:
        workload = {
            "rental_id": rental["id"],
            "state": "running",
            "restarts": restarts,
            "failed_exit_code": failed_exit_code,
        }
        beat = client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=agent)
        assert beat.status_code == 200, beat.text
        (assigned,) = beat.json()["assignments"]
        assert assigned["restarts"] == max(restarts, told[0]), assigned  # what the agent counts on from
        told[0] = assigned["restarts"]
        return [assigned["attempt"]]

    told = [0]

    def restarted() -> list[str]:
        events = client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["events"]
        return [e["message"] for e in events if e["kind"] == "restarted"]

    assert report(0) == [0] and restarted() == []
    assert report(1, 3) == [0]
    assert restarted() == [f"on {node}: workload failed with exit code 3; restarted it there (1/5)"]
    report(1, 3)
    assert len(restarted()) == 1
    report(3, 137)
    twice = f"on {node}: workload failed with exit code 137; restarted it there 2 times (3/5)"
    assert restarted()[-1] == twice
    report(0)  # an agent that did not count on from its assignment: its lower count forgets nothing
    assert len(restarted()) == 2
    assert report(4, 4) == [0] and len(restarted()) == 3
    assert restarted()[-1] == f"on {node}: workload failed with exit code 4; restarted it there (4/5)"
    (run,) = client.get(f"/v1/rentals/{rental['id']}/runs", headers=owner).json()
    assert run["restarts"] == 4
    assert client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["state"] == "running"


def test_a_rentals_gpus_show_their_last_readings_to_its_tenant_only(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GET /v1/rentals/{id}/gpus`: each GPU the rental holds with the last utilization, memory and power
    its agent sent (none for a GPU the beat did not read), only to its tenant, and nothing once it ended;
    `suanli show` prints them."""
    _, owner = tenant("owner")
    _, other = tenant("other")
    rental = client.post("/v1/rentals", json={"gpu_model": "H200-141GB", "gpus": 8}, headers=owner).json()
    (node,) = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
    url = f"/v1/rentals/{rental['id']}/gpus"
    assert [g["read_at"] for g in client.get(url, headers=owner).json()] == [None] * 8  # no beat yet
    agent = register_agent(client, node)
    telemetry = [{"index": i, "utilization_pct": 90 + i, "memory_used_mib": 1000 * i} for i in range(7)]
    telemetry[6]["power_w"] = 600.5
    telemetry.append({"index": 7})  # listed with nothing read (a host without NVML sends such)
    beat = client.post("/v1/agents/heartbeat", json={"telemetry": telemetry}, headers=agent)
    assert beat.status_code == 200, beat.text
    shown = client.get(url, headers=owner).json()
    assert [(g["gpu_index"], g["utilization_pct"], g["memory_used_mib"]) for g in shown[:2]] == [
        (0, 90, 0),
        (1, 91, 1000),
    ]
    assert all(g["whole_gpu"] and g["milli"] == 1000 and g["node"] == node for g in shown)
    assert shown[6]["power_w"] == 600.5 and shown[6]["read_at"] is not None
    assert (shown[7]["utilization_pct"], shown[7]["read_at"]) == (None, None)  # nothing read of GPU 7
    assert client.get(url, headers=other).status_code == 404

    monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, owner["Authorization"][7:]))
    said = CliRunner().invoke(app, ["show", rental["id"]], env={"COLUMNS": "200"})
    assert said.exit_code == 0, said.output
    gpus = said.output[said.output.index("GPUs") :]  # after the allocation's table
    row = next(line for line in gpus.splitlines() if "│ 6 " in line)
    assert "96%" in row and "6,000" in row and "600" in row, said.output
    assert row.count("█") == 1, row  # the last hour's utilization: this minute's 96%

    client.post(f"/v1/rentals/{rental['id']}/stop", headers=owner)
    assert client.get(url, headers=owner).json() == []
    share = {"gpu_model": "L40S", "gpus": 0, "share_milli": 500}
    half = client.post("/v1/rentals", json=share, headers=owner).json()
    wait_for(client, half["id"], owner, "placed")
    (part,) = client.get(f"/v1/rentals/{half['id']}/gpus", headers=owner).json()
    assert (part["milli"], part["whole_gpu"]) == (500, False)  # it would read its whole GPU


def test_a_failed_gangs_output_is_done_once_the_killed_rank_has_said_it_ended(
    client: TestClient, tenant
) -> None:
    """Rank 1 fails and the rental ends `failed` at once; rank 0, killed because of it, ships its last line
    and says it stopped at its agent's next beat. Until then the output is not `done`, so `rent -f` does not
    end before that line; a node whose agent stays silent past the timeout does not hold it for ever."""
    _, owner = tenant("owner")
    body = {"gpu_model": "H100", "gpus": 8, "nodes": 2, "command": ["train"], "regions": ["cn-north"]}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    first, second = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
    agents = {node: register_agent(client, node) for node in (first, second)}

    def beat(node: str, state: str, exit_code: int | None = None, line: str = "") -> None:
        if line:
            chunk = {"rental_id": rental["id"], "offset": 0, "data": line, "size_bytes": len(line)}
            client.post("/v1/agents/logs", json=chunk, headers=agents[node])
        workload = {"rental_id": rental["id"], "state": state, "exit_code": exit_code}
        client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=agents[node])

    def logs() -> dict:
        return client.get(f"/v1/rentals/{rental['id']}/logs", headers=owner).json()

    beat(first, "running")
    beat(second, "failed", 7, "rank 1: boom\n")
    assert client.get(f"/v1/rentals/{rental['id']}", headers=owner).json()["state"] == "failed"
    assert logs()["done"] is False  # rank 0 has not said it ended
    beat(first, "stopped", None, "rank 0: last words\n")
    page = logs()
    assert (page["data"], page["done"]) == ("rank 1: boom\nrank 0: last words\n", True)

    silent = client.app.state.services.agents
    shifted = silent.clock
    try:
        rental = client.post("/v1/rentals", json=body, headers=owner).json()
        first, second = (a["node"] for a in wait_for(client, rental["id"], owner, "placed")["allocation"])
        for node in (first, second):
            if node not in agents:
                agents[node] = register_agent(client, node)
        beat(first, "running")
        beat(second, "failed", 7)
        assert logs()["done"] is False
        later = datetime.now(UTC) + timedelta(seconds=silent.timeout_s + 1)
        silent.clock = FixedClock(later)  # rank 0's agent said nothing since
        assert logs()["done"] is True
    finally:
        silent.clock = shifted


def test_an_operators_drain_of_a_down_node_outlasts_its_agents_return_and_an_undrain_waits_for_it(
    client: TestClient,
) -> None:
    """A drain of a node the reaper had cordoned was undone when its agent came back (a rental was placed
    on it at once); an undrain of a down node made it schedulable with no agent, and a rental placed there
    stayed `placed`, billed, for ever."""
    node = "l40s-01"
    headers = register_agent(client, node)
    service = client.app.state.services.agents  # type: ignore[attr-defined]

    def schedulable() -> bool:
        (view,) = [n for n in client.get("/v1/nodes", headers=ADMIN).json() if n["name"] == node]
        return view["schedulable"]

    def goes_down() -> None:
        assert service.reap(service.clock.now() + timedelta(seconds=service.timeout_s + 1)) == [node]
        assert not schedulable()

    goes_down()
    assert client.post(f"/v1/nodes/{node}/drain", headers=ADMIN).status_code == 200
    assert client.post("/v1/agents/heartbeat", json={}, headers=headers).status_code == 200  # it is back
    assert not schedulable()  # the operator's drain holds
    assert client.post(f"/v1/nodes/{node}/undrain", headers=ADMIN).status_code == 200
    assert schedulable()
    goes_down()
    assert client.post(f"/v1/nodes/{node}/undrain", headers=ADMIN).status_code == 200
    assert not schedulable()  # no agent: no placements until it comes back
    assert client.post("/v1/agents/heartbeat", json={}, headers=headers).status_code == 200
    assert schedulable()


class _Outage(httpx.BaseTransport):
    """The network to the app, down for the next `failing` requests (a server restarting)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner, self.failing = inner, 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.failing:
            self.failing -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return self.inner.handle_request(request)


def test_following_output_rides_out_a_server_that_does_not_answer_for_a_while(client, tenant) -> None:
    """`logs -f` (and `rent -f`) ended with "cannot reach the server" at a restart of a few seconds, though
    the rental and its output lived on; a follow now waits for the server and goes on where it was, and
    gives up only past its reconnect time."""
    node_headers = register_agent(client, "l40s-01")
    _, owner = tenant("follower")
    body = {"gpu_model": "L40S", "gpus": 0, "share_milli": 500, "command": ["echo", "hi"], "regions": []}
    rental = client.post("/v1/rentals", json=body, headers=owner).json()
    node = wait_for(client, rental["id"], owner, "placed")["allocation"][0]["node"]
    node_headers = node_headers if node == "l40s-01" else register_agent(client, node)
    client.post("/v1/agents/heartbeat", json={}, headers=node_headers)
    running = {"workloads": [{"rental_id": rental["id"], "state": "running"}]}
    client.post("/v1/agents/heartbeat", json=running, headers=node_headers)

    def ship(offset: int, data: str) -> None:
        chunk = {"rental_id": rental["id"], "offset": offset, "data": data, "size_bytes": len(data)}
        assert client.post("/v1/agents/logs", json=chunk, headers=node_headers).status_code == 200

    ship(0, "a\n")
    network = _Outage(AppTransport(client))
    told: list[ServerUnreachable] = []
    with Client("http://testserver", owner["Authorization"][7:], transport=network, retries=1) as sdk:
        pieces = sdk.output(rental["id"], poll_s=0.01, on_unreachable=told.append)
        assert next(pieces) == "a\n"
        network.failing = 5
        ship(2, "b\n")
        assert next(pieces) == "b\n" and len(told) == 1 and network.failing == 0
        network.failing = 10**6
        gone = sdk.output(rental["id"], offset=4, poll_s=0.01, reconnect_s=0.05)
        with pytest.raises(ServerUnreachable):
            next(gone)


def _host(model: str, count: int) -> dict:
    """A registration inventory of `count` GPUs of `model`, as a probe reports it."""
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model_name": model, "memory_mib": 81920} for i in range(count)]
    return {"hostname": "host", "gpus": gpus}


def test_a_node_whose_host_has_other_gpus_than_the_fleet_says_is_out_of_scheduling_until_they_match(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host with 2 GPUs joined as an 8x H100 node silently and stayed schedulable: rentals of more GPUs
    failed there ("host has no GPU 2"), and a host of another model ran rentals billed as the fleet's."""
    _, alice = tenant("alice")
    node = "h200-01"  # the fleet's only H200 node: 8x H200-141GB

    def shown() -> dict:
        (view,) = [n for n in client.get("/v1/nodes", headers=ADMIN).json() if n["name"] == node]
        return view

    token = client.post("/v1/join-tokens", json={"node": node}, headers=ADMIN).json()["token"]
    joined = client.post("/v1/agents/register", json={"token": token, "inventory": _host("H200-141GB", 2)})
    assert joined.status_code == 200, joined.text
    headers = {"Authorization": f"Bearer {joined.json()['node_key']}"}
    view = shown()
    assert not view["schedulable"]
    assert view["gpu_mismatch"] == "its host reports 2x H200-141GB; the fleet declares 8x H200-141GB"
    monkeypatch.setattr(admin_commands, "logged_in", logged_in_as(client, ADMIN["Authorization"][7:]))
    listed = CliRunner().invoke(app, ["admin", "nodes"], env={"COLUMNS": "300"})
    assert "no: its host reports 2x H200-141GB" in listed.output, listed.output
    rental = client.post("/v1/rentals", json={"gpu_model": "H200", "gpus": 4}, headers=alice).json()["id"]
    scheduler_cycles(client)
    assert client.get(f"/v1/rentals/{rental}", headers=alice).json()["state"] == "pending"

    matching = {"gpu_models": ["H200-141GB"] * 8}
    assert client.post("/v1/agents/heartbeat", json=matching, headers=headers).status_code == 200
    assert (shown()["schedulable"], shown()["gpu_mismatch"]) == (True, None)
    assert wait_for(client, rental, alice, "placed")["state"] == "placed"

    other = {"gpu_models": ["H100-SXM-80GB"] * 8}
    assert client.post("/v1/agents/heartbeat", json=other, headers=headers).status_code == 200
    assert (shown()["schedulable"], shown()["gpu_mismatch"]) == (
        False,
        "its host reports 8x H100-SXM-80GB; the fleet declares 8x H200-141GB",
    )
    assert client.post("/v1/agents/heartbeat", json={}, headers=headers).status_code == 200  # unsaid: kept
    assert not shown()["schedulable"]
    assert client.post("/v1/agents/heartbeat", json=matching, headers=headers).status_code == 200
    assert shown()["schedulable"]


def test_an_operators_drain_outlasts_a_gpu_mismatch_that_clears(client: TestClient) -> None:
    """Only the cordon the mismatch made is lifted when the host's GPUs match again, not an operator's."""
    node = "h200-01"
    token = client.post("/v1/join-tokens", json={"node": node}, headers=ADMIN).json()["token"]
    joined = client.post("/v1/agents/register", json={"token": token, "inventory": _host("H200-141GB", 7)})
    headers = {"Authorization": f"Bearer {joined.json()['node_key']}"}
    assert client.post(f"/v1/nodes/{node}/drain", headers=ADMIN).status_code == 200
    matching = {"gpu_models": ["H200-141GB"] * 8}
    assert client.post("/v1/agents/heartbeat", json=matching, headers=headers).status_code == 200
    (view,) = [n for n in client.get("/v1/nodes", headers=ADMIN).json() if n["name"] == node]
    assert (view["schedulable"], view["gpu_mismatch"]) == (False, None)
