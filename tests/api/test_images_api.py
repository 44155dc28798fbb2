"""A rental names the container image its workload runs in: a catalogue key or an image reference, checked,
stored, shown, and sent to the agent. SQLite and PostgreSQL through the real app."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from conftest import ADMIN, register_agent, wait_for
from suanli.app.records import RentalSpec
from suanli.app.rentals import spec_fingerprint

DIGEST = "sha256:" + "0123456789abcdef" * 4


def _rent(client: TestClient, headers: dict[str, str], key: str | None = None, **body: object):
    extra = {"Idempotency-Key": key} if key else {}
    return client.post("/v1/rentals", json={"gpus": 1, **body}, headers={**headers, **extra})


def test_a_rentals_image_is_stored_and_shown_in_its_view_and_the_list(client: TestClient, tenant) -> None:
    _, headers = tenant("acme")
    created = _rent(client, headers, image="pytorch", command=["python", "train.py"])
    assert created.status_code == 201, created.text
    plain = _rent(client, headers).json()
    rental_id = created.json()["id"]
    assert created.json()["request"]["image"] == "pytorch"
    assert client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["request"]["image"] == "pytorch"
    listed = {r["id"]: r["request"]["image"] for r in client.get("/v1/rentals", headers=headers).json()}
    assert listed == {rental_id: "pytorch", plain["id"]: None}


@pytest.mark.parametrize(
    "image",
    [
        "pytorch:2.5.1",
        "vllm",
        "ghcr.io/acme/trainer:1.2",
        "Registry.Example.com:5000/team/trainer_v2__x--y.z",  # a registry host may have capitals
        f"localhost:5000/team/app@{DIGEST}",
        f"nvcr.io/nvidia/pytorch:24.10-py3@{DIGEST}",
        "[::1]:5000/app",
    ],
)
def test_catalogue_keys_and_image_references_are_accepted(client: TestClient, tenant, image: str) -> None:
    _, headers = tenant("acme")
    created = _rent(client, headers, image=image)
    assert created.status_code == 201, created.text
    assert created.json()["request"]["image"] == image


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("pytorch 2.5.1", "whitespace or control characters"),
        ("pytorch\n", "whitespace or control characters"),
        ("py\x00torch", "NUL character"),  # refused by every request model, before the image check
        ("a" * 256, "at most 255"),
        ("PyTorch", "repository names are lowercase"),
        ("ghcr.io/Acme/trainer:1.2", "did you mean 'ghcr.io/acme/trainer:1.2'"),
        ("", "empty"),
        ("pytorch:", "not an image reference"),
        ("-pytorch", "not an image reference"),
        ("ghcr.io//trainer", "not an image reference"),
        ("trainer@sha256:abc", "not an image reference"),
        ("trainer:" + "t" * 129, "not an image reference"),
    ],
    ids=["space", "newline", "nul", "long", "upper", "upper-path", "empty", "no-tag", "dash", "slashes",
         "short-digest", "long-tag"],
)  # fmt: skip
def test_an_image_that_is_not_a_reference_is_a_422_naming_image(
    client: TestClient, tenant, image: str, says: str
) -> None:
    _, headers = tenant("acme")
    refused = _rent(client, headers, image=image)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "image" and says in error["message"], error
    assert client.get("/v1/rentals", headers=headers).json() == []


def test_a_catalogue_framework_at_a_version_it_does_not_list_is_refused_with_the_versions_it_has(
    client: TestClient, tenant
) -> None:
    """`pytorch:0.0.1` is a valid reference (Docker Hub's library/pytorch), but `pytorch` is a catalogue key:
    running some other image than the tenant meant is worse than saying which versions there are."""
    _, headers = tenant("acme")
    refused = _rent(client, headers, image="pytorch:0.0.1")
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == "image"
    assert "no pytorch 0.0.1; its versions: 2.5.1, 2.4.1" in error["message"], error


def test_the_image_is_part_of_what_a_retry_must_repeat(client: TestClient, tenant) -> None:
    _, headers = tenant("acme")
    first = _rent(client, headers, "k-1", image="pytorch")
    again = _rent(client, headers, "k-1", image="pytorch")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert _rent(client, headers, "k-1", image="vllm").status_code == 409


def test_a_rental_without_an_image_keeps_the_fingerprint_it_had_before_images_existed() -> None:
    """The digest below is what the code before `image` (and `name`) computed for this spec: a client that
    retries such a rental with its key after the upgrade gets it back (200), not a 409."""
    spec = RentalSpec(
        gpu_model="H100",
        gpus=2,
        command=("python", "train.py"),
        env={"A": "1"},
        labels={"k": "v"},
        regions=("cn-north",),
    )
    assert spec_fingerprint(spec) == "1cb6caa0ce5bcedccd3a36ac0e1faa7cccc3ee62adf9439308c87c0855f1e028"
    assert spec_fingerprint(replace(spec, checkpoints=True)) != spec_fingerprint(spec)  # set, it counts


def test_the_agents_assignment_carries_the_image(client: TestClient, tenant) -> None:
    _, headers = tenant("acme")
    created = _rent(client, headers, gpu_model="L40S", image="vllm:0.6.3").json()
    node = wait_for(client, created["id"], headers, "placed")["allocation"][0]["node"]
    token = client.post("/v1/join-tokens", json={"node": node}, headers=ADMIN).json()["token"]
    node_key = client.post("/v1/agents/register", json={"token": token, "inventory": {}}).json()["node_key"]
    beat = client.post("/v1/agents/heartbeat", json={}, headers={"Authorization": f"Bearer {node_key}"})
    (sent,) = beat.json()["assignments"]
    assert (sent["rental_id"], sent["image"], sent["command"]) == (created["id"], "vllm:0.6.3", [])


def test_an_image_rental_is_kept_off_a_node_whose_agent_runs_host_processes(
    client: TestClient, tenant
) -> None:
    _, headers = tenant("acme")
    agent = register_agent(client, "h200-01")  # the fleet's only H200 node
    said = client.post("/v1/agents/heartbeat", json={"runs_images": False}, headers=agent)
    assert said.status_code == 200, said.text
    image = _rent(client, headers, gpu_model="H200-141GB", image="pytorch").json()
    waiting = wait_for(client, image["id"], headers, "placed", reason="constraints")
    assert waiting["state"] == "pending" and waiting["pending_reason"] == "constraints"
    assert any("only nodes whose agent runs containers" in e["message"] for e in waiting["events"])
    plain = _rent(client, headers, gpu_model="H200-141GB").json()
    assert wait_for(client, plain["id"], headers, "placed")["allocation"][0]["node"] == "h200-01"
    assert client.get(f"/v1/rentals/{image['id']}", headers=headers).json()["state"] == "pending"
    # a beat that does not say leaves what was said; one that says it runs images lets the rental in
    loop = client.app.state.services.loop
    runs = loop.runs
    client.post("/v1/agents/heartbeat", json={}, headers=agent)
    deadline = time.monotonic() + 10
    while loop.runs < runs + 2 and time.monotonic() < deadline:  # a whole scheduler run after the beat
        loop.signal()
        time.sleep(0.02)
    still = client.get(f"/v1/rentals/{image['id']}", headers=headers).json()
    assert (still["state"], still["pending_reason"]) == ("pending", "constraints")
    client.post("/v1/agents/heartbeat", json={"runs_images": True}, headers=agent)
    assert wait_for(client, image["id"], headers, "placed")["allocation"][0]["node"] == "h200-01"
