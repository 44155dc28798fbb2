"""Hostile input gets a 4xx naming the field, never a 500, and never stalls the scheduler."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from conftest import ADMIN, FLEET, app_client, running_share, wait_for
from suanli.api.errors import error_response
from suanli.config import Settings
from suanli.store.rows import RentalExecRow, RentalRow
from suanli.wire import agent_schemas, billing_schemas, plan_schemas, schemas
from suanli.wire.schemas import EXEC_STRING_MAX_BYTES, MAX_DURATION_S, WireModel

JSON, TOML = {"Content-Type": "application/json"}, {"Content-Type": "application/toml"}
FAR = "9999-12-31T23:00:00-12:00"  # valid ISO 8601, but past year 9999 in UTC


def _funded(client: TestClient) -> tuple[str, dict[str, str]]:
    tenant_id = client.post("/v1/tenants", json={"name": "h"}, headers=ADMIN).json()["id"]
    keys = f"/v1/tenants/{tenant_id}/keys"
    secret = client.post(keys, json={"label": "t"}, headers=ADMIN).json()["secret"]
    credit = client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    assert credit.status_code == 201
    return tenant_id, {"Authorization": f"Bearer {secret}"}


def _client_4xx(client: TestClient, method: str, url: str, field: str, **kw) -> None:
    client_no_raise = TestClient(client.app, raise_server_exceptions=False)
    response = client_no_raise.request(method, url, **kw)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert field in response.text


@pytest.mark.parametrize("month", ["9999-12", "２０２６-12", "٢٠٢٦-١٢"])  # the last month; non-ASCII digits
def test_last_representable_month_is_a_4xx(client, month) -> None:
    _, headers = _funded(client)
    _client_4xx(client, "GET", f"/v1/invoices/{month}", "month", headers=headers)
    _client_4xx(client, "GET", f"/v1/sla/{month}", "month", headers=headers)
    _client_4xx(client, "POST", f"/v1/admin/sla/{month}", "month", headers=ADMIN)


def test_datetimes_past_year_9999_in_utc_are_a_4xx(client) -> None:
    tenant_id, headers = _funded(client)
    contract = {
        "gpu_model": "H100-SXM-80GB",
        "count": 1,
        "region": "cn-north",
        "starts_at": "2030-01-01T00:00:00Z",
        "ends_at": FAR,
    }
    _client_4xx(client, "POST", "/v1/contracts", "ends_at", json=contract, headers=headers)
    plan = {"kind": "revenue_share", "starts_at": "2031-01-01T00:00:00Z", "ends_at": FAR}
    _client_4xx(client, "POST", f"/v1/tenants/{tenant_id}/plans", "ends_at", json=plan, headers=ADMIN)
    plan = {"kind": "membership", "starts_at": "9999-12-01T00:00:00Z"}  # default end: a year later
    _client_4xx(client, "POST", f"/v1/tenants/{tenant_id}/plans", "starts_at", json=plan, headers=ADMIN)
    credit = {"amount_micros": 5, "grant": True, "expires_at": FAR}
    _client_4xx(client, "POST", f"/v1/tenants/{tenant_id}/credit", "expires_at", json=credit, headers=ADMIN)
    price = [
        {
            "gpu_model": "H100-SXM-80GB",
            "tier": "on_demand",
            "price_micros_per_gpu_hour": 1,
            "effective_from": FAR,
        }
    ]
    _client_4xx(client, "PUT", "/v1/prices", "effective_from", json=price, headers=ADMIN)


@pytest.mark.parametrize("queue", ["backfill", "conservative"])
def test_a_huge_max_duration_is_refused_and_the_longest_allowed_does_not_stall_the_queue(
    database_url: str, queue: str
) -> None:
    """A declared run time beyond ten years is a 4xx naming it (10**12 s put the head's start past the year
    9999 and failed every cycle, for every tenant); one of ten years leaves the queue working."""
    with app_client(database_url, queue=queue) as client:
        _, headers = _funded(client)
        hog = {"gpu_model": "L40S", "gpus": 4, "nodes": 4, "max_duration_s": 10**12}
        _client_4xx(client, "POST", "/v1/rentals", "max_duration_s", json=hog, headers=headers)
        longest = client.post("/v1/rentals", json={**hog, "max_duration_s": MAX_DURATION_S}, headers=headers)
        assert wait_for(client, longest.json()["id"], headers, "placed")["state"] == "placed"
        blocked = {"gpu_model": "L40S", "gpus": 1, "max_duration_s": 60}
        assert client.post("/v1/rentals", json=blocked, headers=headers).status_code == 201
        other = {"gpu_model": "H100", "gpus": 1, "max_duration_s": 60}
        other_id = client.post("/v1/rentals", json=other, headers=headers).json()["id"]
        assert wait_for(client, other_id, headers, "placed")["state"] == "placed"


def _agent_on_rental(client: TestClient) -> tuple[str, dict[str, str], int]:
    _, headers = _funded(client)
    body = {"gpu_model": "L40S", "gpus": 1, "max_duration_s": 3600}
    rental = client.post("/v1/rentals", json=body, headers=headers).json()
    placed = wait_for(client, rental["id"], headers, "placed")
    node, gpu = placed["allocation"][0]["node"], placed["allocation"][0]["slices"][0]["gpu_index"]
    token = client.post("/v1/join-tokens", json={"node": node}, headers=ADMIN).json()["token"]
    registered = client.post("/v1/agents/register", json={"token": token, "inventory": {"gpus": []}})
    key = registered.json()["node_key"]
    return rental["id"], {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, gpu


@pytest.mark.parametrize("power", ["NaN", "Infinity", "1e308"])
def test_non_finite_or_absurd_power_is_refused(client, power: str) -> None:
    """NaN failed the heartbeat (500); Infinity and 1e308 were stored as the run's energy for good."""
    rental_id, node, gpu = _agent_on_rental(client)
    workloads = f'[{{"rental_id": "{rental_id}", "state": "running"}}]'

    def beat(watts: str) -> str:
        return f'{{"workloads": {workloads}, "telemetry": [{{"index": {gpu}, "power_w": {watts}}}]}}'

    assert client.post("/v1/agents/heartbeat", content=beat("300"), headers=node).status_code == 200
    _client_4xx(client, "POST", "/v1/agents/heartbeat", "power_w", content=beat(power), headers=node)


def test_a_huge_exit_code_or_a_log_size_that_is_not_the_chunks_is_a_4xx(client) -> None:
    """Both failed (500: too large for the database); a size unlike the chunk's left the log stuck."""
    rental_id, node, _ = _agent_on_rental(client)
    failed = f'{{"rental_id": "{rental_id}", "state": "failed", "exit_code": 9223372036854775813}}'
    beat = f'{{"workloads": [{failed}]}}'
    _client_4xx(client, "POST", "/v1/agents/heartbeat", "exit_code", content=beat, headers=node)
    for size in (2**63 + 5, 2**62, 5):
        chunk = {"rental_id": rental_id, "offset": 0, "data": "x", "size_bytes": size}
        _client_4xx(client, "POST", "/v1/agents/logs", "size_bytes", json=chunk, headers=node)
    chunk = {"rental_id": rental_id, "offset": 0, "data": "x", "size_bytes": 1}
    assert client.post("/v1/agents/logs", json=chunk, headers=node).json()["stored_bytes"] == 1


def test_a_tenants_fleet_put_is_refused_before_its_body_is_read_and_an_admins_is_capped(client) -> None:
    _, headers = _funded(client)
    chunks_read: list[int] = []

    def body(chunk_count: int):
        for index in range(chunk_count):
            chunks_read.append(index)
            yield b"#" * (1024 * 1024)

    refused = client.put("/v1/fleet", content=body(32), headers=headers)
    assert refused.status_code == 403, refused.text
    assert chunks_read == []
    anonymous = client.put("/v1/fleet", content=body(32))
    assert anonymous.status_code == 401, anonymous.text
    assert chunks_read == []

    streamed = client.put("/v1/fleet", content=body(32), headers=ADMIN)
    assert streamed.status_code == 413, streamed.text
    assert "8 MiB" in streamed.json()["error"]["message"]
    declared = client.put(
        "/v1/fleet", content=b"#" * (9 * 1024 * 1024), headers={**ADMIN, "Content-Type": "application/toml"}
    )
    assert declared.status_code == 413, declared.text
    assert client.get("/v1/nodes", headers=ADMIN).status_code == 200


@pytest.mark.parametrize(
    "env",
    [{"CUDA_VISIBLE_DEVICES": "0"}, {"SUANLI_NODE_RANK": "0"}, {"1BAD": "x"}, {"A": "nul\0byte"}],
    ids=["devices", "reserved-prefix", "bad-name", "nul"],
)
def test_an_env_the_agent_would_refuse_is_refused_at_creation_naming_env(client, env) -> None:
    """Not a rental that fails on its node later: a 400 naming `env`, and nothing stored."""
    _, headers = _funded(client)
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"], "env": env}
    response = client.post("/v1/rentals", json=body, headers=headers)
    assert response.status_code in (400, 422), response.text  # 422: a NUL, refused with the request's shape
    assert response.json()["error"]["field"] == "env"
    assert client.get("/v1/rentals", headers=headers).json() == []


def test_true_or_false_is_never_read_as_a_number_and_changes_nothing(client) -> None:
    """Pydantic's lax mode reads `true` as 1: a 1-micro credit, a 1-micro price, a quota of 1."""
    tenant_id, headers = _funded(client)
    balance = client.get("/v1/balance", headers=headers).json()
    prices = client.get("/v1/prices").json()
    for method, url, body, field, auth in (
        ("POST", f"/v1/tenants/{tenant_id}/credit", {"amount_micros": True}, "amount_micros", ADMIN),
        ("PUT", "/v1/budget", {"daily_micros": True}, "daily_micros", headers),
        ("PUT", f"/v1/tenants/{tenant_id}/limits", {"gpu_quota": {"H100": True}}, "gpu_quota", ADMIN),
        ("POST", "/v1/rentals", {"gpus": True}, "gpus", headers),
        (
            "PUT",
            "/v1/prices",
            [{"gpu_model": "L4", "tier": "on_demand", "price_micros_per_gpu_hour": False}],
            "price_micros_per_gpu_hour",
            ADMIN,
        ),
    ):
        refused = client.request(method, url, json=body, headers=auth)
        assert refused.status_code == 422, (url, refused.text)
        error = refused.json()["error"]
        assert error["field"].endswith(field) and "not true or false" in error["message"], error
    assert client.get("/v1/balance", headers=headers).json() == balance
    assert client.get("/v1/prices").json() == prices
    assert client.get("/v1/rentals", headers=headers).json() == []
    assert client.get("/v1/limits", headers=headers).json()["gpu_quota"] == {}
    assert client.get("/v1/limits", headers=headers).json()["budget_daily_micros"] is None
    stop_running = client.put("/v1/budget", json={"daily_micros": 10, "stop_running": True}, headers=headers)
    assert stop_running.status_code == 200, stop_running.text  # a bool field still takes one


def test_a_nul_character_is_refused_anywhere_a_client_sends_text(client) -> None:
    """PostgreSQL stores no NUL (U+0000) in text or JSON, nor compares text with one: a 4xx, never a 500."""
    _, headers = _funded(client)
    unsafe = TestClient(client.app, raise_server_exceptions=False)
    for method, url, kw in (
        ("GET", "/v1/rentals/rnt_%00", {}),
        ("GET", "/v1/payouts?provider=%00", {}),
        ("GET", "/v1/rentals?name=a%00", {}),
        ("POST", "/v1/rentals", {"json": {"gpus": 1, "command": ["echo", "\x00"]}}),
        ("POST", "/v1/rentals", {"json": {"gpus": 1, "labels": {"team\x00": "a"}}}),
        ("POST", "/v1/tenants", {"json": {"name": "a\x00b"}}),
        (
            "POST",
            "/v1/rentals",
            {"json": {"gpus": 1, "\x00": None}},
        ),  # the refusal quotes the name: a 500 once
    ):
        answer = unsafe.request(
            method, url, headers=ADMIN if "payouts" in url or "tenants" in url else headers, **kw
        )
        assert 400 <= answer.status_code < 500, (url, answer.status_code, answer.text)
        assert "NUL" in answer.json()["error"]["message"] or answer.status_code == 422, answer.text
    assert client.get("/v1/rentals", headers=headers).json() == []


def test_a_window_shorter_than_a_second_is_a_4xx_naming_ends_at_not_a_500(client) -> None:
    """Windows are held and priced in whole seconds: a contract (quoted, signed or offered) or a maintenance
    window of half a second was a 500 (a zero-second price) or was stored; now each is a 400 on `ends_at`."""
    from datetime import UTC, datetime, timedelta

    start = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    window = {"starts_at": start.isoformat(), "ends_at": (start + timedelta(seconds=0.5)).isoformat()}
    tenant_id = client.post("/v1/tenants", json={"name": "subsecond"}, headers=ADMIN).json()["id"]
    contract = {
        "gpu_model": "H100-SXM-80GB",
        "count": 1,
        "region": "cn-north",
        "tenant_id": tenant_id,
        **window,
    }
    for path, body in (
        ("/v1/contracts/quote", contract),
        ("/v1/contracts", contract),
        ("/v1/contract-offers", {**contract, "price_micros": 1}),
        ("/v1/fleet/maintenance", {"node": "h100-a-01", "reason": "firmware", **window}),
    ):
        refused = client.post(path, json=body, headers=ADMIN)
        assert refused.status_code == 400, (path, refused.text)
        assert "ends_at" in refused.text and "whole seconds" in refused.text, (path, refused.text)
    assert client.get("/v1/fleet/maintenance", headers=ADMIN).json() == []


def test_a_share_or_mig_instance_with_a_gpu_count_is_refused_naming_gpus(client) -> None:
    """One share or MIG instance per node: `gpus: 2` with one was stored and ignored (it ran one share)."""
    tenant_id = client.post("/v1/tenants", json={"name": "shapes"}, headers=ADMIN).json()["id"]
    key = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    headers = {"Authorization": f"Bearer {key}"}
    for body, says in (
        ({"gpu_model": "L40S", "share_milli": 500, "gpus": 2}, "one share of a GPU per node"),
        ({"gpu_model": "A100-80GB", "mig_profile": "1g.10gb", "gpus": 3}, "one MIG instance per node"),
    ):
        refused = client.post("/v1/rentals", json=body, headers=headers)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "gpus", refused.text
        assert says in refused.json()["error"]["message"]
    assert client.get("/v1/rentals", headers=headers).json() == []
    for body in (
        {"gpu_model": "L40S", "share_milli": 500},
        {"gpu_model": "L40S", "share_milli": 500, "gpus": 0},
    ):
        assert client.post("/v1/rentals", json=body, headers=headers).status_code == 201


def test_a_rental_of_no_gpu_is_refused_naming_gpus(client) -> None:
    """`gpus: 0` with no MIG profile or share held no GPU and ran on GPU hosts at 0/h (8 nodes at once)."""
    tenant_id = client.post("/v1/tenants", json={"name": "cpu-only"}, headers=ADMIN).json()["id"]
    key = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    headers = {"Authorization": f"Bearer {key}"}
    for path in ("/v1/rentals", "/v1/rentals/dry-run"):
        for body in ({"gpu_model": "H100", "gpus": 0, "nodes": 8}, {"gpus": 0, "cpu_milli": 4000}):
            refused = client.post(path, json=body, headers=headers)
            assert refused.status_code == 400 and refused.json()["error"]["field"] == "gpus", refused.text
            assert "CPU-only rentals are not offered" in refused.json()["error"]["message"]
    assert client.get("/v1/rentals", headers=headers).json() == []


def test_a_body_that_is_not_json_is_refused_naming_the_body_not_a_character_offset(client) -> None:
    """The error read `{"field": "0", "message": "0: JSON decode error"}`: the offset passed for a field."""
    refused = client.post(
        "/v1/tenants", content=b"{name: x}", headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "body" and "not valid JSON at character 1" in error["message"], error


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read_or_the_key_checked(
    database_url: str,
) -> None:
    """Every route parsed any body whole, before the key was checked: one unauthenticated 84 MiB request
    held the event loop 17.7 s and 600 MiB. Now SUANLI_MAX_BODY_BYTES answers 413 first: on the declared
    Content-Length, and on the bytes counted for a streamed (chunked) body."""
    assert Settings().max_body_bytes == 4 * 1024 * 1024
    with app_client(database_url, max_body_bytes=64 * 1024) as client:
        _, headers = _funded(client)

        def body(chunk_count: int):  # a generator: sent chunked, with no Content-Length
            for _ in range(chunk_count):
                yield b" " * (16 * 1024)

        declared = client.post("/v1/rentals", content=b" " * (65 * 1024), headers=JSON)  # no key
        assert declared.status_code == 413, declared.text
        assert declared.json()["error"]["code"] == "too_large"
        assert "65536 bytes" in declared.json()["error"]["message"]
        streamed = client.post("/v1/rentals", content=body(64), headers={**headers, **JSON})
        assert streamed.status_code == 413, streamed.text
        assert streamed.json()["error"]["code"] == "too_large"
        fleet = client.put(  # the fleet file keeps its own, larger limit (8 MiB)
            "/v1/fleet", content=FLEET + "\n" + "#" * (128 * 1024), headers={**ADMIN, **TOML}
        )
        assert fleet.status_code == 200, fleet.text
        small = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
        assert client.post("/v1/rentals", json=small, headers=headers).status_code == 201


LONE_SURROGATE = "\ud800"  # JSON's escape of half a UTF-16 pair: no UTF-8 encodes it, no answer could send it


def _as_json(body: object) -> dict[str, object]:
    """Request arguments carrying `body` as JSON with its non-ASCII text escaped (a lone surrogate too)."""
    return {"content": json.dumps(body), "headers": {"Content-Type": "application/json"}}


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/v1/rentals", {"gpus": 1, "command": ["sh", "-c", f"echo {LONE_SURROGATE}"]}, "command"),
        ("/v1/rentals", {"gpus": 1, "env": {"A": LONE_SURROGATE}}, "env"),
        ("/v1/rentals", {"gpus": 1, "regions": [LONE_SURROGATE]}, "regions"),
        ("/v1/rentals", {"gpus": 1, "labels": {"team": LONE_SURROGATE}}, "labels"),
        ("/v1/rentals", {"gpus": 1, "image": LONE_SURROGATE}, "image"),
        ("/v1/rentals/dry-run", {"gpus": 1, "regions": [LONE_SURROGATE]}, "regions"),
    ],
    ids=["command", "env", "regions", "labels", "image", "dry-run-regions"],
)
def test_text_that_utf8_cannot_encode_is_a_422_naming_the_field_and_nothing_is_stored(
    client, url: str, body: dict, field: str
) -> None:
    """A lone surrogate was stored, and every answer that carried it was a 500 from then on."""
    _, headers = _funded(client)
    arguments = _as_json(body)
    refused = client.post(url, content=arguments["content"], headers={**headers, **arguments["headers"]})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == field, refused.text
    assert client.get("/v1/rentals", headers=headers).json() == []


def test_an_exec_command_that_utf8_cannot_encode_is_a_422_naming_command(client) -> None:
    _, owner = _funded(client)
    rental_id, _ = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    arguments = _as_json({"command": ["echo", LONE_SURROGATE]})
    refused = client.post(url, content=arguments["content"], headers={**owner, **arguments["headers"]})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "command", refused.text
    assert client.get(url, headers=owner).json() == []


def test_a_stored_lone_surrogate_from_before_the_check_breaks_no_heartbeat_nor_listing(client) -> None:
    """Rows stored before the check still reach the node's heartbeat: its answer escapes the text, so one
    tenant's rental never cuts a node (and every other rental on it) off the server."""
    _, owner = _funded(client)
    rental_id, node_headers = running_share(client, owner)
    exec_id = client.post(f"/v1/rentals/{rental_id}/execs", json={"command": ["true"]}, headers=owner).json()[
        "id"
    ]
    with Session(client.app.state.services.engine) as session, session.begin():
        spec = session.get(RentalRow, rental_id).spec
        bad = {**spec, "command": ["echo", LONE_SURROGATE], "env": {"A": LONE_SURROGATE}}
        session.execute(update(RentalRow).where(RentalRow.id == rental_id).values(spec=bad))
        session.execute(
            update(RentalExecRow).where(RentalExecRow.id == exec_id).values(command=["echo", LONE_SURROGATE])
        )
    report = {"workloads": [{"rental_id": rental_id, "state": "running"}]}
    beat = client.post("/v1/agents/heartbeat", json=report, headers=node_headers)
    assert beat.status_code == 200, beat.text
    (assignment,) = [a for a in beat.json()["assignments"] if a["rental_id"] == rental_id]
    assert assignment["command"] == ["echo", "\\ud800"] and assignment["env"] == {"A": "\\ud800"}
    assert [e["command"] for e in beat.json()["execs"]] == [["echo", "\\ud800"]]
    assert client.get("/v1/rentals", headers=owner).status_code == 200
    assert client.get(f"/v1/rentals/{rental_id}/execs", headers=owner).status_code == 200


def test_an_error_that_quotes_a_lone_surrogate_is_still_answered() -> None:
    """A refusal that quoted the text it refused ("no region \ud800") failed as a 500 in the error handler."""
    answer = error_response(400, "invalid", f"no region {LONE_SURROGATE} in the fleet", "regions")
    assert json.loads(answer.body)["error"]["message"] == "no region \ufffd in the fleet"


def test_a_url_cannot_carry_a_lone_surrogate(client) -> None:
    """Its bytes (ED A0 80) are not UTF-8: a path or query reads them as U+FFFD, never as a surrogate."""
    _, headers = _funded(client)
    by_name = client.get("/v1/rentals?name=%ED%A0%80", headers=headers)
    assert by_name.status_code in (200, 422) and "\\ud800" not in by_name.text, by_name.text
    missing = client.get("/v1/rentals/rnt_%ED%A0%80", headers=headers)
    assert missing.status_code == 404 and "\ufffd" in missing.json()["error"]["message"], missing.text


def test_every_request_body_refuses_lone_surrogates(client) -> None:
    """A body model that is not a `RequestModel` would store one escaped, not refuse it naming the field."""
    wire_models = {
        name: model
        for module in (schemas, agent_schemas, billing_schemas, plan_schemas)
        for name, model in vars(module).items()
        if isinstance(model, type) and issubclass(model, WireModel)
    }
    operations = [op for item in client.get("/openapi.json").json()["paths"].values() for op in item.values()]
    bodies = [
        schema.get("$ref") or schema["items"]["$ref"]
        for op in operations
        for media in op.get("requestBody", {}).get("content", {}).values()
        if (schema := media["schema"]).get("type") != "string"
    ]
    assert len(bodies) > 25
    assert [ref for ref in bodies if not wire_models[ref.rsplit("/", 1)[1]].refuses_lone_surrogates] == []


ARGUMENT_MAX = "x" * EXEC_STRING_MAX_BYTES  # the longest argument execve takes (131,072 bytes with its NUL)


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        ({"command": ["echo", ARGUMENT_MAX + "x"]}, "command", "131,071 bytes"),
        ({"command": ["echo", "é" * 65_536]}, "command", "131,071 bytes"),  # 131,072 bytes in UTF-8
        ({"command": ["true"], "env": {"A": ARGUMENT_MAX[2:] + "x"}}, "env", "131,071 bytes"),  # A=...
        ({"command": ["echo"] + [ARGUMENT_MAX] * 8}, "command", "1,048,576 bytes"),
        (
            {"command": ["echo"] + [ARGUMENT_MAX] * 4, "env": {f"V{n}": ARGUMENT_MAX[3:] for n in range(4)}},
            "env",
            "1,048,576 bytes",
        ),
    ],
    ids=["argument", "argument-utf8", "env-entry", "command-total", "command-and-env-total"],
)
def test_a_command_or_env_that_execve_would_refuse_is_a_422_naming_the_field_and_the_limit(
    client, body: dict, field: str, limit: str
) -> None:
    """Linux's execve refuses one argument or `NAME=value` over 128 KiB and all of them past ARG_MAX (E2BIG):
    such a rental was accepted and placed, failed on its node, and paid its 60-s minimum."""
    _, headers = _funded(client)
    refused = client.post("/v1/rentals", json={"gpu_model": "L40S", "gpus": 1, **body}, headers=headers)
    assert refused.status_code == 422, refused.text[:300]
    error = refused.json()["error"]
    assert error["field"] == field and limit in error["message"], error
    assert client.get("/v1/rentals", headers=headers).json() == []
    longest = {
        "gpu_model": "L40S",
        "gpus": 1,
        "command": ["echo", ARGUMENT_MAX],
        "env": {"A": ARGUMENT_MAX[2:]},
    }
    assert client.post("/v1/rentals", json=longest, headers=headers).status_code == 201


def test_an_exec_command_that_execve_would_refuse_is_a_422_naming_command(client) -> None:
    _, owner = _funded(client)
    rental_id, _ = running_share(client, owner)
    url = f"/v1/rentals/{rental_id}/execs"
    refused = client.post(url, json={"command": ["echo", ARGUMENT_MAX + "x"]}, headers=owner)
    assert refused.status_code == 422, refused.text[:300]
    assert refused.json()["error"]["field"] == "command" and "131,071 bytes" in refused.text
    assert client.get(url, headers=owner).json() == []


def test_an_exec_command_that_execve_would_refuse_with_its_rentals_env_is_refused_naming_the_limit(
    client,
) -> None:
    """The agent runs an exec with its rental's env too: a command of 4 x 128 KiB, under execve's 1 MiB
    alone, with a rental env of 4 x 128 KiB takes 1,048,581 bytes, and its node's execve failed with E2BIG
    after the server had queued it. Now it is refused naming the limit; 3 x 128 KiB fits (917,509)."""
    _, owner = _funded(client)
    env = {f"V{n}": ARGUMENT_MAX[3:] for n in range(4)}  # V0=...: 131,072 bytes each with its NUL
    rental_id, _ = running_share(client, owner, env=env)
    url = f"/v1/rentals/{rental_id}/execs"
    refused = client.post(url, json={"command": ["echo"] + [ARGUMENT_MAX] * 4}, headers=owner)
    assert refused.status_code == 400, refused.text[:300]
    error = refused.json()["error"]
    assert error["field"] == "command", error
    assert "1,048,581 bytes" in error["message"] and "at most 1,048,576 bytes" in error["message"], error
    assert "env" in error["message"], error
    assert client.get(url, headers=owner).json() == []
    fits = client.post(url, json={"command": ["echo"] + [ARGUMENT_MAX] * 3}, headers=owner)
    assert fits.status_code == 201, fits.text[:300]
