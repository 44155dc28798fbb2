"""The API end to end on SQLite and PostgreSQL: tenant isolation, idempotency, errors that name the field."""

from __future__ import annotations

import json
import re
import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from typer.testing import CliRunner

from conftest import ADMIN, FLEET, logged_in_as, wait_for
from suanli.app.booking import SHARE_UNIT_MILLI
from suanli.app.tenants import MAX_LIVE_KEYS
from suanli.cli import platform_commands
from suanli.cli.main import app

CONTRACT = {
    "gpu_model": "H100-SXM-80GB",
    "count": 8,
    "region": "cn-north",
    "starts_at": "2030-01-01T00:00:00Z",
    "ends_at": "2030-02-01T00:00:00Z",
}


def test_a_rental_is_placed_priced_and_stopped(client: TestClient, tenant) -> None:
    _, alice = tenant("alice")
    rental = client.post(
        "/v1/rentals", json={"gpu_model": "H100", "gpus": 8, "nodes": 2}, headers=alice
    ).json()
    placed = wait_for(client, rental["id"], alice, "placed")
    assert placed["state"] == "placed"
    assert len(placed["allocation"]) == 2 and placed["price_micros_per_hour"] == 16 * 2_990_000
    assert [e["kind"] for e in placed["events"]] == ["created", "placed"]
    # a model the fleet has none of is refused, not left waiting for ever
    absent = client.post("/v1/rentals", json={"gpu_model": "B200", "gpus": 1}, headers=alice)
    assert absent.status_code == 400 and absent.json()["error"]["field"] == "gpu_model", absent.text
    stopped = client.post(f"/v1/rentals/{rental['id']}/stop", headers=alice).json()
    assert stopped["state"] == "stopped" and stopped["events"][-1]["kind"] == "stopped"
    metrics = client.get("/metrics").text
    assert "suanli_gpus" in metrics and "suanli_decision_seconds_count" in metrics


def test_another_tenant_sees_and_changes_nothing(client: TestClient, tenant) -> None:
    alice_id, alice = tenant("alice")
    bob_id, bob = tenant("bob")
    rental = client.post("/v1/rentals", json={"gpus": 1}, headers=alice).json()
    wait_for(client, rental["id"], alice, "placed")
    contract = client.post("/v1/contracts", json=CONTRACT, headers=alice).json()
    key = client.post(f"/v1/tenants/{alice_id}/keys", json={"label": "second"}, headers=alice).json()
    before = {
        "rental": client.get(f"/v1/rentals/{rental['id']}", headers=alice).json(),
        "contract": client.get(f"/v1/contracts/{contract['id']}", headers=alice).json(),
        "keys": client.get(f"/v1/tenants/{alice_id}/keys", headers=alice).json(),
    }
    rid, cid, kid = rental["id"], contract["id"], key["id"]
    attempts = [
        ("GET", f"/v1/rentals/{rid}", None, 404),
        ("POST", f"/v1/rentals/{rid}/stop", None, 404),
        ("PATCH", f"/v1/rentals/{rid}", {"nodes": 1}, 404),
        ("GET", f"/v1/contracts/{cid}", None, 404),
        ("POST", f"/v1/contracts/{cid}/transfer", {"to_tenant_id": bob_id}, 404),
        ("GET", f"/v1/tenants/{alice_id}", None, 404),
        ("GET", f"/v1/tenants/{alice_id}/keys", None, 404),
        ("POST", f"/v1/tenants/{alice_id}/keys", {"label": "steal"}, 404),
        ("DELETE", f"/v1/tenants/{alice_id}/keys/{kid}", None, 404),
        ("POST", "/v1/contracts", {**CONTRACT, "tenant_id": alice_id}, 403),
        ("POST", "/v1/tenants", {"name": "mallory", "role": "admin"}, 403),
        ("PUT", "/v1/fleet", None, 403),
        ("GET", "/v1/nodes", None, 403),
        ("POST", "/v1/nodes/h100-a-01/drain", None, 403),
        ("POST", "/v1/nodes/h100-a-01/undrain", None, 403),
    ]
    secrets = {alice_id, rid, cid, kid}
    for method, path, body, status in attempts:
        response = client.request(method, path, json=body, headers=bob)
        assert response.status_code == status, (method, path, response.text)
        assert set(response.json()) == {"error"}
        assert not any(s in response.json()["error"]["message"] for s in secrets - {rid, cid, alice_id}), path
    for path in ("/v1/rentals", "/v1/contracts", "/v1/tenants"):
        listed = client.get(path, headers=bob).json()
        assert all(alice_id not in str(item) and rid not in str(item) for item in listed), path
    assert client.get("/v1/me", headers=bob).json()["tenant"]["id"] == bob_id
    after = {
        "rental": client.get(f"/v1/rentals/{rid}", headers=alice).json(),
        "contract": client.get(f"/v1/contracts/{cid}", headers=alice).json(),
        "keys": client.get(f"/v1/tenants/{alice_id}/keys", headers=alice).json(),
    }
    # the meter may have charged the rental meanwhile: that is the meter's, not bob's doing
    assert after["rental"].pop("charged_micros") >= before["rental"].pop("charged_micros")
    assert after == before
    # admin sees all
    assert client.get(f"/v1/rentals/{rid}", headers=ADMIN).status_code == 200


def test_the_same_idempotency_key_returns_the_same_rental(client: TestClient, tenant) -> None:
    _, alice = tenant("alice")
    _, bob = tenant("bob")
    body = {"gpu_model": "A100-80GB", "mig_profile": "3g.40gb"}
    first = client.post("/v1/rentals", json=body, headers={**alice, "Idempotency-Key": "job-7"})
    again = client.post("/v1/rentals", json=body, headers={**alice, "Idempotency-Key": "job-7"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert len(client.get("/v1/rentals", headers=alice).json()) == 1
    other = client.post(
        "/v1/rentals", json={**body, "nodes": 2}, headers={**alice, "Idempotency-Key": "job-7"}
    )
    assert other.status_code == 409 and other.json()["error"]["field"] == "Idempotency-Key"
    bobs = client.post("/v1/rentals", json=body, headers={**bob, "Idempotency-Key": "job-7"})
    assert bobs.status_code == 201 and bobs.json()["id"] != first.json()["id"]
    renamed = client.post(  # a name is part of the request: another one under the same key is a clash
        "/v1/rentals", json={**body, "name": "eval-2"}, headers={**alice, "Idempotency-Key": "job-7"}
    )
    assert renamed.status_code == 409


def test_a_rental_keeps_the_name_it_was_given(client: TestClient, tenant) -> None:
    _, headers = tenant("namer")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"], "name": "llama-eval.v2_1"}
    created = client.post("/v1/rentals", json=body, headers=headers).json()
    assert created["request"]["name"] == "llama-eval.v2_1"
    listed = client.get("/v1/rentals", headers=headers).json()
    assert [(r["id"], r["request"]["name"]) for r in listed] == [(created["id"], "llama-eval.v2_1")]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/rentals", {"gpus": "eight"}, "gpus"),
        ("/v1/rentals", {"gpus": 100}, "gpus"),
        ("/v1/rentals", {"tier": "gold"}, "tier"),
        ("/v1/rentals", {"gpu_model": "H900"}, "gpu_model"),
        ("/v1/rentals", {"share_milli": 255}, "share_milli"),
        ("/v1/rentals", {"mig_profile": "3g.40gb", "share_milli": 200}, "share_milli"),
        ("/v1/rentals", {"gpu_model": "A100-80GB", "mig_profile": "9g.99gb"}, "mig_profile"),
        ("/v1/rentals", {"bid_micros_per_gpu_hour": 5}, "bid_micros_per_gpu_hour"),
        ("/v1/rentals", {"surprise": 1}, "surprise"),
        ("/v1/rentals", {"name": "my job"}, "name"),
        ("/v1/rentals", {"name": "x" * 65}, "name"),
        ("/v1/rentals", {"regions": ["cn-north", "mars"]}, "regions"),  # a typo would wait forever
        ("/v1/contracts", {**CONTRACT, "ends_at": "2029-01-01T00:00:00Z"}, "ends_at"),
        ("/v1/contracts", {**CONTRACT, "region": "mars"}, "region"),
        ("/v1/contracts", {**CONTRACT, "starts_at": "2020-01-01T00:00:00Z"}, "starts_at"),  # hours over
        ("/v1/contracts", {**CONTRACT, "count": 10_000}, "count"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_input_is_4xx_and_names_the_field(client: TestClient, tenant, path, body, field) -> None:
    _, alice = tenant("alice")
    response = client.post(path, json=body, headers=alice)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["field"] == field


def test_the_openapi_schema_says_a_share_is_a_multiple_of_ten_milli(client: TestClient) -> None:
    """It said any integer 1..999, and the API refused all but multiples of 10: clients built from the
    schema sent shares the server refused."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    (share, _null) = schemas["RentalCreateRequest"]["properties"]["share_milli"]["anyOf"]
    assert (share["multipleOf"], share["minimum"], share["maximum"]) == (SHARE_UNIT_MILLI, 10, 990)


def test_every_operation_in_the_openapi_document_says_what_it_does(client: TestClient) -> None:
    """24 of 71 operations (offers, resize, stop, bid, transfer, /v1/me, the agents' routes...) had no
    description: a reader of /docs or a client generated from the schema saw only a name."""
    paths = client.get("/openapi.json").json()["paths"]
    bare = [
        f"{method.upper()} {path}"
        for path, operations in paths.items()
        for method, operation in operations.items()
        if not operation.get("description", "").strip()
    ]
    assert bare == []


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v1/rentals", "RentalResponse"),
        ("/v1/contracts", "ContractResponse"),
        ("/v1/contract-offers/{offer_id}/accept", "ContractResponse"),
    ],
)
def test_an_idempotent_post_documents_both_the_first_answer_and_the_replay(
    client: TestClient, path: str, model: str
) -> None:
    """A retry with the same Idempotency-Key (or a second accept) answers 200, the first 201; the document
    listed one of them, so clients generated from it took the other for an error."""
    operation = client.get("/openapi.json").json()["paths"][path]["post"]
    for status in ("200", "201"):
        schema = operation["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{model}"}, (status, operation["responses"])


@pytest.mark.parametrize("path", ["/v1/rentals", "/v1/rentals/dry-run"])
@pytest.mark.parametrize("share_milli", [5, 15, 995, 999])
def test_a_share_that_is_no_multiple_of_ten_milli_is_refused_naming_the_field(
    client: TestClient, tenant, path: str, share_milli: int
) -> None:
    _, alice = tenant("alice")
    body = {"gpu_model": "L40S", "gpus": 0, "share_milli": share_milli}
    refused = client.post(path, json=body, headers=alice)
    assert refused.status_code in (400, 422), refused.text
    error = refused.json()["error"]
    assert error["field"] == "share_milli" and "a multiple of 10 milli (1% of a GPU)" in error["message"]
    assert client.post(path, json={**body, "share_milli": 990}, headers=alice).status_code in (200, 201)


@pytest.mark.parametrize("path", ["/v1/rentals", "/v1/rentals/dry-run"])
@pytest.mark.parametrize(
    "body", [{"gpus": 1}, {"mig_profile": "1g.10gb", "gpu_model": "A100-80GB"}], ids=["whole", "mig"]
)
def test_share_memory_without_a_share_is_refused_naming_the_field(
    client: TestClient, tenant, path: str, body: dict
) -> None:
    """It was stored and ignored: a whole GPU (or a MIG instance) with no memory limit, and no word."""
    _, alice = tenant("alice")
    refused = client.post(path, json={"gpu_model": "L40S", **body, "share_memory_mib": 4096}, headers=alice)
    assert refused.status_code in (400, 422), refused.text
    error = refused.json()["error"]
    assert error["field"] == "share_memory_mib" and "only with a share" in error["message"]
    assert client.get("/v1/rentals", headers=alice).json() == []


@pytest.mark.parametrize("path", ["/v1/rentals", "/v1/rentals/dry-run"])
@pytest.mark.parametrize(
    ("model", "maker", "memory_mib"), [("MI300X", "AMD", 0), ("Ascend-910B", "Huawei", 8192)]
)
def test_a_share_of_a_gpu_other_than_nvidia_is_refused_saying_shares_need_nvidia(
    client: TestClient, tenant, path: str, model: str, maker: str, memory_mib: int
) -> None:
    """The refusal was the generic "no GPU in the fleet matches the selector and shape"."""
    _, alice = tenant("alice")
    body = {"gpu_model": model, "gpus": 0, "share_milli": 500, "share_memory_mib": memory_mib}
    refused = client.post(path, json=body, headers=alice)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == "share_milli"
    assert f"limited with NVIDIA MPS; {model} is made by {maker}" in error["message"]


@pytest.mark.parametrize("number", ["nan", "inf"])
@pytest.mark.parametrize("field", ["pue", "grid_gco2_per_kwh"])
def test_a_fleet_with_a_number_that_is_not_finite_is_refused_naming_the_field(
    client: TestClient, field: str, number: str
) -> None:
    """A NaN PUE was taken ("at least 1" is false for no NaN) and every invoice in its region then had null
    energy totals, which its own schema refuses (`suanli invoice` failed)."""
    toml = re.sub(rf"(?m)^{field} = .*$", f"{field} = {number}", FLEET, count=1)
    refused = client.put("/v1/fleet", content=toml, headers={**ADMIN, "Content-Type": "application/toml"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert f"regions.cn-north.{field}" in error["message"] and "finite" in error["message"], error


UNISOLATABLE_FLEET = """
[regions.cn-north]
jurisdiction = "CN"
grid_gco2_per_kwh = 581
pue = 1.3

[[nodes]]
name = "l40s-1"
topology = "cn-north/z1/pod-a/leaf-01"
cpu_milli = 64000
memory_mib = 262144
gpus = {{ model = "L40S", count = 4 }}

[[nodes]]
name = "odd-1"
topology = "cn-north/z1/pod-a/leaf-02"
cpu_milli = 64000
memory_mib = 262144
gpus = {{ model = "{model}", count = 4 }}
"""


@pytest.mark.parametrize(("model", "maker"), [("BR100", "Biren"), ("G1", "an undisclosed vendor")])
def test_a_fleet_node_whose_devices_no_agent_can_isolate_is_refused_naming_the_model(
    client: TestClient, model: str, maker: str
) -> None:
    """A BR100 node was accepted, offered and priced, and every rental there failed at the agent (no variable
    limits which Biren devices a workload sees) and paid its 60-s minimum."""
    toml = UNISOLATABLE_FLEET.format(model=model)
    refused = client.put("/v1/fleet", content=toml, headers={**ADMIN, "Content-Type": "application/toml"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == "gpus.model"
    assert "node 'odd-1'" in error["message"] and f"{model} is made by {maker}" in error["message"]
    assert "isolate" in error["message"]
    offers = client.get("/v1/offers", headers=ADMIN).json()
    assert model not in {o["gpu_model"] for o in offers}


def test_offer_queries_filter_and_point_at_bad_tokens(client: TestClient, tenant) -> None:
    _, alice = tenant("alice")
    offers = client.get(
        "/v1/offers", params={"q": "gpu=H100 count>=8 region=cn tier=spot interconnect=ib"}, headers=alice
    )
    assert offers.status_code == 200
    assert [(o["gpu_model"], o["tier"], o["free_gpus"]) for o in offers.json()] == [
        ("H100-SXM-80GB", "spot", 64)
    ]
    assert client.get("/v1/offers", params={"q": "price<0.01"}, headers=alice).json() == []
    bad = client.get("/v1/offers", params={"q": "gpu=H100 count>=eight"}, headers=alice)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "q"
    assert "column 10" in bad.json()["error"]["message"] and "count>=eight" in bad.json()["error"]["message"]
    typo = client.get("/v1/offers", params={"q": "tier=spot gpu=H10"}, headers=alice)
    assert typo.status_code == 400 and typo.json()["error"]["field"] == "q"
    assert typo.json()["error"]["message"] == (
        "column 11, 'gpu=H10': no GPU in this fleet is H10; it has A100-40GB, A100-80GB, Ascend-910B, "
        "H100-SXM-80GB, H200-141GB, L40S"
    )
    mars = client.get("/v1/offers", params={"q": "region=mars"}, headers=alice).json()["error"]["message"]
    assert mars.startswith("column 1, 'region=mars': no region or jurisdiction mars in this fleet; it has ")
    assert client.get("/v1/offers", params={"q": "gpu!=H10"}, headers=alice).json()  # != names no typo


def test_drain_keeps_new_rentals_off_a_node(client: TestClient, tenant) -> None:
    _, alice = tenant("alice")
    nodes = [n["name"] for n in client.get("/v1/nodes", headers=ADMIN).json() if n["gpu_model"] == "L40S"]
    for name in nodes:
        assert client.post(f"/v1/nodes/{name}/drain", headers=ADMIN).json()["schedulable"] is False
    rental = client.post("/v1/rentals", json={"gpu_model": "L40S", "gpus": 1}, headers=alice).json()
    assert wait_for(client, rental["id"], alice, "placed", "no_capacity")["pending_reason"] == "no_capacity"
    client.post(f"/v1/nodes/{nodes[0]}/undrain", headers=ADMIN)
    assert wait_for(client, rental["id"], alice, "placed")["allocation"][0]["node"] == nodes[0]


def test_unauthenticated_and_revoked_keys_get_401(client: TestClient, tenant) -> None:
    alice_id, alice = tenant("alice")
    assert client.get("/v1/me").status_code == 401
    key_id = client.get("/v1/me", headers=alice).json()["key_id"]
    client.delete(f"/v1/tenants/{alice_id}/keys/{key_id}", headers=ADMIN)
    response = client.get("/v1/me", headers=alice)
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"


def test_offers_show_room_for_shares_where_no_whole_gpu_is_left(client: TestClient, tenant) -> None:
    """Sixteen L40S shares of 0.75 with 32 GiB take every GPU of the four shared nodes: the whole-GPU row
    says 0 free, the share row says all 16 GPUs still have room, for at most 0.25 and 16 GiB each, and a
    0.25 share is placed."""
    _, alice = tenant("alice")

    def rows(query: str) -> list[tuple[bool, int, int, int | None, int | None]]:
        found = client.get("/v1/offers", params={"q": f"gpu=L40S tier=on_demand {query}"}, headers=alice)
        assert found.status_code == 200, found.text
        return [
            (
                o["shares"],
                o["free_gpus"],
                o["max_gpus_per_node"],
                o["largest_share_milli"],
                o["share_memory_mib"],
            )
            for o in found.json()
        ]

    assert rows("") == [(False, 16, 4, None, None), (True, 16, 4, 990, 48 * 1024)]
    body = {"gpu_model": "L40S", "share_milli": 750, "share_memory_mib": 32 * 1024}
    ids = [client.post("/v1/rentals", json=body, headers=alice).json()["id"] for _ in range(16)]
    for rental_id in ids:
        assert wait_for(client, rental_id, alice, "placed")["state"] == "placed"
    assert rows("") == [(False, 0, 0, None, None), (True, 16, 4, 250, 16 * 1024)]
    assert rows("profile=share") == [(True, 16, 4, 250, 16 * 1024)]
    assert rows("profile=whole") == [(False, 0, 0, None, None)]
    too_big = {**body, "share_milli": 250, "share_memory_mib": 17 * 1024}  # more memory than any GPU has
    held = client.post("/v1/rentals", json=too_big, headers=alice).json()["id"]
    fits = {**too_big, "share_memory_mib": 8 * 1024}
    last = client.post("/v1/rentals", json=fits, headers=alice).json()["id"]
    assert wait_for(client, last, alice, "placed")["state"] == "placed"
    assert client.get(f"/v1/rentals/{held}", headers=alice).json()["state"] == "pending"
    assert rows("profile=share") == [(True, 15, 4, 250, 16 * 1024)]


def test_a_shares_offer_on_a_free_gpu_offers_a_share_the_api_takes(client: TestClient, tenant) -> None:
    """A wholly free GPU has room for the largest share there is (0.99: a whole GPU is rented as a count),
    and renting the offer's own largest share is accepted."""
    _, alice = tenant("alice")
    found = client.get("/v1/offers", params={"q": "gpu=L40S tier=on_demand profile=share"}, headers=alice)
    [offer] = found.json()
    assert offer["largest_share_milli"] == 990
    body = {"gpu_model": "L40S", "share_milli": offer["largest_share_milli"]}
    assert client.post("/v1/rentals", json=body, headers=alice).status_code == 201


def test_rentals_are_listed_by_state_and_an_unknown_state_is_named(client: TestClient, tenant) -> None:
    _, headers = tenant("lister")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
    kept = client.post("/v1/rentals", json=body, headers=headers).json()
    stopped = client.post("/v1/rentals", json=body, headers=headers).json()
    wait_for(client, kept["id"], headers, "placed")
    client.post(f"/v1/rentals/{stopped['id']}/stop", headers=headers)

    def listed(query: str) -> list[str]:
        response = client.get(f"/v1/rentals{query}", headers=headers)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()]

    assert listed("") == [stopped["id"], kept["id"]]  # newest first
    assert listed("?state=stopped") == [stopped["id"]]
    assert listed("?state=placed&state=running") == [kept["id"]]
    assert listed("?state=failed") == []
    assert listed("?limit=1") == [stopped["id"]]  # the newest
    assert listed("?limit=1&state=placed&state=running") == [kept["id"]]
    refused = client.get("/v1/rentals?state=sleeping", headers=headers)
    assert 400 <= refused.status_code < 500 and "state" in refused.text
    for bad in ("0", "1001", "x"):
        refused = client.get(f"/v1/rentals?limit={bad}", headers=headers)
        assert refused.status_code == 422 and "limit" in refused.text, bad


def test_ls_shows_the_newest_with_their_age_and_says_when_there_may_be_more(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, headers = tenant("ls-user")
    as_user = logged_in_as(client, headers["Authorization"].split()[1])
    monkeypatch.setattr(platform_commands, "logged_in", lambda options=None: as_user(options))
    runner, env = CliRunner(), {"COLUMNS": "200"}
    none = runner.invoke(app, ["ls", "--live"], env=env)  # an empty table alone said nothing
    assert none.exit_code == 0 and "no rentals of those states" in none.output, none.output
    unmatched = runner.invoke(app, ["offers", "gpu=H100", "price<0.01"], env=env)
    said = " ".join(unmatched.output.split())
    assert unmatched.exit_code == 0 and "no free capacity matches 'gpu=H100 price<0.01'" in said, said
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
    made = [client.post("/v1/rentals", json=body, headers=headers).json()["id"] for _ in range(3)]
    two = runner.invoke(app, ["ls", "-n", "2"], env=env)
    assert two.exit_code == 0, two.output
    assert made[2] in two.output and made[1] in two.output and made[0] not in two.output
    header = next(line for line in two.output.splitlines() if " id " in line)
    assert " age " in header and "the newest 2 shown; --limit N or --all for more" in two.output
    row = next(line for line in two.output.splitlines() if made[2] in line)
    assert row.split("│")[4].strip().endswith("s"), row  # created seconds ago
    on_failure = ["rent", "L40S:1", "--restart", "on-failure", "--json", "--", "x"]
    restarting = runner.invoke(app, on_failure, env=env)
    assert json.loads(restarting.output)["request"]["max_restarts"] == 3  # on-failure restarts by default
    made.append(json.loads(restarting.output)["id"])
    every = runner.invoke(app, ["ls"], env=env)
    assert all(rental in every.output for rental in made) and "--limit" not in every.output
    # an id is one path segment: a slash or a query in it names nothing, and an empty one is refused
    for odd in (f"{made[0]}/../{made[1]}", f"{made[0]}?x=1", ""):
        shown = runner.invoke(app, ["show", odd], env=env)
        assert shown.exit_code == 1 and "not_found" in shown.output, (odd, shown.output)
    bad = runner.invoke(app, ["ls", "--name", "a*b"], env=env)
    said = " ".join(bad.output.split())
    assert bad.exit_code == 1 and "error: --name: name: a name (letters, digits" in said, said


def test_rentals_are_listed_by_name_a_tenants_own_only(client: TestClient, tenant) -> None:
    _, alice = tenant("alice-names")
    _, bob = tenant("bob-names")
    body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
    sft = client.post("/v1/rentals", json={**body, "name": "llama-sft"}, headers=alice).json()
    client.post("/v1/rentals", json={**body, "name": "llama-eval"}, headers=alice)
    client.post("/v1/rentals", json=body, headers=alice)
    client.post("/v1/rentals", json={**body, "name": "llama-sft"}, headers=bob)  # same name, another tenant

    def named(query: str, headers: dict[str, str] = alice) -> list[str]:
        response = client.get(f"/v1/rentals{query}", headers=headers)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()]

    assert named("?name=llama-sft") == [sft["id"]]
    assert named("?name=llama") == []  # exactly, not a prefix
    assert named("?name=llama-sft&state=failed") == []
    assert len(named("?name=llama-sft", bob)) == 1 and named("?name=llama-sft", bob) != [sft["id"]]
    assert len(named("?name=llama-*")) == 2 and sft["id"] in named("?name=llama-*")  # a prefix, with the star
    assert named("?name=llama-sft*", bob) == named("?name=llama-sft", bob)
    for bad in ("x" * 66, "*", "llama*sft", "-llama*", "llama%25"):
        refused = client.get(f"/v1/rentals?name={bad}", headers=alice)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "name", bad
    assert refused.json()["error"]["message"].startswith("name: a name (letters, digits, '.', '_' and '-'")


def test_a_tenant_name_is_taken_once_whatever_its_case(client: TestClient, tenant) -> None:
    alice_id, _ = tenant("alice")
    again = client.post("/v1/tenants", json={"name": "Alice"}, headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["field"] == "name"
    assert (
        again.json()["error"]["message"] == f"a tenant named 'alice' exists ({alice_id}); pick another name"
    )
    names = [t["name"] for t in client.get("/v1/tenants", headers=ADMIN).json()]
    assert names.count("alice") == 1 and "Alice" not in names


def test_a_tenant_holds_at_most_so_many_live_keys_and_a_revoked_one_makes_room(
    client: TestClient, tenant
) -> None:
    """Keys were uncapped (an audit made 300 for one tenant, while webhooks are capped at 10): each is a
    credential to track and a row read on every miss of the key cache."""
    tenant_id, headers = tenant("key-hoarder")
    path = f"/v1/tenants/{tenant_id}/keys"
    live = len([k for k in client.get(path, headers=headers).json() if not k["revoked"]])
    made = [client.post(path, json={"label": f"k{i}"}, headers=headers) for i in range(MAX_LIVE_KEYS - live)]
    assert all(r.status_code == 201 for r in made)
    refused = client.post(path, json={"label": "one-too-many"}, headers=headers)
    assert (
        refused.status_code == 409
        and f"at most {MAX_LIVE_KEYS} live API keys" in refused.json()["error"]["message"]
    )
    assert client.delete(f"{path}/{made[0].json()['id']}", headers=headers).status_code == 200
    assert client.post(path, json={"label": "room-again"}, headers=headers).status_code == 201


def test_listing_rentals_reads_as_often_for_many_as_for_few(client: TestClient, tenant, monkeypatch) -> None:
    """`GET /v1/rentals` reads each part of its rentals (allocations, events, rates, charges) for the whole
    page at once: a constant number of statements, not several per rental (1,000 rentals took 1-3 s)."""
    _, headers = tenant("many")
    services = client.app.state.services
    listing, statements = threading.local(), []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if getattr(listing, "on", False):  # the list's own reads, not the scheduler's beside it
            statements.append(" ".join(statement.split())[:120])

    def counted(*args: object, **kwargs: object) -> object:
        listing.on = True
        try:
            return unwrapped(*args, **kwargs)
        finally:
            listing.on = False

    def reads() -> list[str]:
        statements.clear()
        answer = client.get("/v1/rentals", headers=headers)
        assert answer.status_code == 200, answer.text
        return list(statements)

    unwrapped = services.rentals.list
    monkeypatch.setattr(services.rentals, "list", counted)
    event.listen(services.engine, "before_cursor_execute", count)
    try:
        body = {"gpu_model": "L40S", "gpus": 1, "command": ["true"]}
        made = [client.post("/v1/rentals", json=body, headers=headers).json()["id"] for _ in range(2)]
        wait_for(client, made[-1], headers, "placed")
        client.post(f"/v1/rentals/{made[0]}/stop", headers=headers)
        services.billing.meter()  # its minimum charged: both reads read charges' postings
        few = reads()
        made += [client.post("/v1/rentals", json=body, headers=headers).json()["id"] for _ in range(4)]
        wait_for(client, made[-1], headers, "placed")
        assert len(client.get("/v1/rentals", headers=headers).json()) == 6
        many = reads()
        assert len(many) == len(few), (few, many)
    finally:
        event.remove(services.engine, "before_cursor_execute", count)
