"""A rental the fleet could never run, even empty, is refused (400, naming the field to change) rather than
left pending for ever, at creation and at a resize, through the real app (SQLite and PostgreSQL); a refused
request creates or changes nothing. What the fleet file cannot tell (how a host's MIG is laid out now, which
hosts run images) is left to the scheduler."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import app_client, logged_in_as, make_tenant, wait_for
from suanli.cli import platform_commands
from suanli.cli.main import app

H100 = {"gpu_model": "H100-SXM-80GB", "gpus": 8}  # 8 such nodes, all in cn-north
H200 = {"gpu_model": "H200-141GB", "gpus": 8}  # h200-01, the fleet's one H200 node


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with app_client(database_url, prepaid=False) as c:
        yield c


def test_a_rental_no_node_could_ever_run_is_refused_naming_what_to_change(client: TestClient) -> None:
    _, headers = make_tenant(client, "acme")
    refused = {
        "gpus": ({**H100, "gpus": 9}, "no matching node has 9 GPUs (at most 8 on one node)"),
        "nodes": (
            {**H100, "nodes": 40},
            "at most 8 matching nodes of one GPU model in one region, even empty; 40 needed",
        ),
        "gpu_model": ({"gpu_model": "B200", "gpus": 1}, "no GPU in the fleet matches"),
        "jurisdictions": (
            {**H100, "jurisdictions": ["eu"]},
            "jurisdiction (eu); the fleet's others: CN, EU, SG",
        ),
        # the fleet's A100-40GBs are whole GPUs: none is in MIG mode, whatever a host's layout
        "mig_profile": (
            {"gpu_model": "A100-40GB", "gpus": 0, "mig_profile": "1g.5gb"},
            "no GPU in the fleet",
        ),
        # more memory than an L40S has, on the fleet's only shared GPUs
        "share_memory_mib": (
            {"gpu_model": "L40S", "gpus": 0, "share_milli": 500, "share_memory_mib": 60_000},
            "no GPU in the fleet",
        ),
    }
    for field, (body, message) in refused.items():
        response = client.post("/v1/rentals", json=body, headers=headers)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["field"] == field and message in response.json()["error"]["message"]
    assert client.get("/v1/rentals", headers=headers).json() == []
    # the fleet's widest gang, and an image rental although no agent has said its host runs images yet
    assert client.post("/v1/rentals", json={**H100, "nodes": 8}, headers=headers).status_code == 201
    image = client.post("/v1/rentals", json={**H200, "image": "pytorch"}, headers=headers)
    assert image.status_code == 201, image.text


def test_a_resize_no_node_could_run_is_refused_and_leaves_the_rental_as_it_was(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, headers = make_tenant(client, "acme")
    rental = client.post("/v1/rentals", json=H200, headers=headers).json()
    assert wait_for(client, rental["id"], headers, "placed")["state"] == "placed"
    wider = client.patch(f"/v1/rentals/{rental['id']}", json={"gpus": 9}, headers=headers)
    assert wider.status_code == 400 and wider.json()["error"]["field"] == "gpus", wider.text
    more = client.patch(f"/v1/rentals/{rental['id']}", json={"nodes": 2}, headers=headers)
    assert more.status_code == 400 and more.json()["error"]["field"] == "nodes", more.text
    after = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
    assert (after["request"]["gpus"], after["request"]["nodes"], after["state"]) == (8, 1, "placed")
    assert [e["kind"] for e in after["events"]] == ["created", "placed"]
    assert client.patch(f"/v1/rentals/{rental['id']}", json={"gpus": 4}, headers=headers).status_code == 200

    key = headers["Authorization"].split()[1]
    as_acme = logged_in_as(client, key)
    monkeypatch.setattr(platform_commands, "logged_in", lambda options=None: as_acme(options))
    said = CliRunner().invoke(app, ["resize", rental["id"], "--gpus", "9"], env={"COLUMNS": "200"})
    assert said.exit_code == 1, said.output
    assert "--gpus: no matching node has 9 GPUs (at most 8 on one node)" in " ".join(said.output.split())
