"""Elastic rentals through the real app (SQLite and PostgreSQL): a live multi-node rental resized to more
nodes grows in place, nearest its own nodes, and to fewer shrinks in place; its rate follows its nodes from
the resize on, and the meter charges each stretch at its own rate. Under both server queues."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from typer.testing import CliRunner

from conftest import (
    ADMIN,
    WAIT_S,
    app_client,
    charged,
    logged_in_as,
    register_agent,
    scheduler_cycles,
    wait_for,
)
from suanli.cli import platform_commands
from suanli.cli.main import app
from suanli.domain.billing.money import round_half_up, to_epoch_s

H100 = {"gpu_model": "H100-SXM-80GB", "gpus": 8}


def _until(client, rental_id: str, headers: dict, done) -> dict:
    """Poll the rental until `done(body)`, for 10 s at most."""
    deadline = time.monotonic() + WAIT_S
    while True:
        body = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.02)


def _tenant(client, name: str, gpu_quota: int | None = None) -> tuple[dict, str]:
    """A tenant with credit (and a GPU quota): its auth headers and id."""
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    key = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    if gpu_quota is not None:
        limits = {"gpu_quota": {"*": gpu_quota}}
        quota = client.put(f"/v1/tenants/{tenant_id}/limits", json=limits, headers=ADMIN)
        assert quota.status_code == 200, quota.text
    return {"Authorization": f"Bearer {key['secret']}"}, tenant_id


def _rate_history(body: dict) -> list[int]:
    return [change["rate_micros_per_hour"] for change in body["rate_changes"]]


@pytest.mark.parametrize("queue", ["greedy", "backfill"])
def test_a_live_rental_grows_and_shrinks_in_place_and_pays_for_its_nodes(
    database_url: str, queue: str
) -> None:
    with app_client(database_url, queue=queue, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "elastic")
        created = client.post("/v1/rentals", json={**H100, "nodes": 2}, headers=headers)
        assert created.status_code == 201, created.text
        rental_id = created.json()["id"]
        placed = wait_for(client, rental_id, headers, "placed")
        first_nodes = [a["node"] for a in placed["allocation"]]
        rate = placed["price_micros_per_hour"]

        grown = client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 3}, headers=headers)
        assert grown.status_code == 200, grown.text
        assert grown.json()["state"] == "placed"  # not re-queued: its two nodes keep running
        # the view is one snapshot: the new node and the new rate show together
        body = _until(client, rental_id, headers, lambda b: len(b["allocation"]) == 3)
        nodes = [a["node"] for a in body["allocation"]]
        assert body["state"] == "placed" and nodes[:2] == first_nodes and len(nodes) == 3
        leaf = {n.rsplit("-", 1)[0] for n in nodes}  # h100-a-* share a leaf: the third is their neighbour
        assert len(leaf) == 1, nodes
        assert body["price_micros_per_hour"] == rate * 3 // 2
        assert _rate_history(body) == [rate, rate * 3 // 2]

        shrunk = client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 1}, headers=headers).json()
        assert shrunk["state"] == "placed" and [a["node"] for a in shrunk["allocation"]] == nodes[:1]
        assert shrunk["price_micros_per_hour"] == rate * 3 // 2 // 3
        assert _rate_history(shrunk)[-1] == rate * 3 // 2 // 3

        # the meter charges each stretch at its rate, rounded once: no second at the wrong rate
        changes = [
            (to_epoch_s(datetime.fromisoformat(c["from_at"])), c["rate_micros_per_hour"])
            for c in shrunk["rate_changes"]
        ]
        later = datetime.fromisoformat(shrunk["rate_changes"][0]["from_at"]) + timedelta(hours=2)
        client.app.state.services.billing.meter(now=later)
        ends = [at for at, _ in changes[1:]] + [to_epoch_s(later)]
        expected = round_half_up(
            sum(r * (end - at) for (at, r), end in zip(changes, ends, strict=True)), 3600
        )
        assert charged(client, rental_id, headers) == expected


def test_a_rental_grows_only_within_its_tenants_gpu_quota(database_url: str) -> None:
    """A tenant with a quota of 24 GPUs holds a 2-node rental (16 H100s) and an 8-GPU one. Resized to 4 nodes
    (32 GPUs, past the quota on its own) it is refused; to 3 nodes it keeps its two, at its rate, with an
    event naming the quota; once the other rental stops it grows."""
    with app_client(database_url) as client:
        headers, _ = _tenant(client, "capped", gpu_quota=24)
        rental_id = client.post("/v1/rentals", json={**H100, "nodes": 2}, headers=headers).json()["id"]
        rate = wait_for(client, rental_id, headers, "placed")["price_micros_per_hour"]
        other = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
        wait_for(client, other, headers, "placed")

        past = client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 4}, headers=headers)
        assert past.status_code == 400 and past.json()["error"]["field"] == "nodes", past.text
        assert past.json()["error"]["message"].startswith(
            "asks 32 GPUs, more than the tenant's GPU quota of 24"
        )
        assert client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["request"]["nodes"] == 2

        client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 3}, headers=headers)
        body = _until(client, rental_id, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        (waiting,) = [e for e in body["events"] if e["kind"] == "growing"]
        assert waiting["reason"] == "quota" and "GPU quota 24 GPUs" in waiting["message"]
        assert len(body["allocation"]) == 2 and body["price_micros_per_hour"] == rate

        assert client.post(f"/v1/rentals/{other}/stop", headers=headers).status_code == 200
        grown = _until(client, rental_id, headers, lambda b: len(b["allocation"]) == 3 and b["rate_changes"])
        assert len(grown["allocation"]) == 3 and grown["price_micros_per_hour"] == rate * 3 // 2


@pytest.mark.parametrize("queue", ["greedy", "backfill"])
def test_a_live_rental_changes_its_gpu_count_in_place_when_its_node_has_them(
    database_url: str, queue: str
) -> None:
    """Two 4-GPU rentals share an 8-GPU node. One resized to 8 GPUs keeps its 4 (at its rate, an event says
    why) while the other holds the rest; once that one stops it takes them on the same node and pays
    double. Resized to 2 it gives 6 back at once and pays a quarter of that."""
    with app_client(database_url, queue=queue) as client:
        headers, _ = _tenant(client, "regpu")
        four = {**H100, "gpus": 4}
        first = client.post("/v1/rentals", json=four, headers=headers).json()["id"]
        placed = wait_for(client, first, headers, "placed")
        second = client.post("/v1/rentals", json=four, headers=headers).json()["id"]
        (node,) = [a["node"] for a in placed["allocation"]]
        assert [a["node"] for a in wait_for(client, second, headers, "placed")["allocation"]] == [node]
        rate = placed["price_micros_per_hour"]

        resized = client.patch(f"/v1/rentals/{first}", json={"gpus": 8}, headers=headers)
        assert resized.status_code == 200, resized.text
        body = _until(client, first, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        (waiting,) = [e for e in body["events"] if e["kind"] == "growing"]
        assert (
            waiting["message"]
            == f"waiting to have 8 GPUs per node (has 4): node {node} does not have 4 more GPUs free"
        )
        assert body["state"] == "placed" and body["price_micros_per_hour"] == rate
        assert [len(a["slices"]) for a in body["allocation"]] == [4]

        assert client.post(f"/v1/rentals/{second}/stop", headers=headers).status_code == 200
        grown = _until(client, first, headers, lambda b: len(b["allocation"][0]["slices"]) == 8)
        assert grown["state"] == "placed" and [a["node"] for a in grown["allocation"]] == [node]
        assert sorted(s["gpu_index"] for s in grown["allocation"][0]["slices"]) == list(range(8))
        assert grown["price_micros_per_hour"] == rate * 2 and _rate_history(grown) == [rate, rate * 2]

        shrunk = client.patch(f"/v1/rentals/{first}", json={"gpus": 2}, headers=headers).json()
        assert shrunk["request"]["gpus"] == 2
        body = _until(client, first, headers, lambda b: len(b["allocation"][0]["slices"]) == 2)
        assert body["state"] == "placed" and [a["node"] for a in body["allocation"]] == [node]
        assert body["price_micros_per_hour"] == rate * 2 * 2 // 8
        assert _rate_history(body) == [rate, rate * 2, rate * 2 * 2 // 8]
        third = client.post("/v1/rentals", json={**H100, "gpus": 6}, headers=headers).json()["id"]
        assert [a["node"] for a in wait_for(client, third, headers, "placed")["allocation"]] == [node]


def test_a_rental_gains_gpus_only_within_its_tenants_gpu_quota(database_url: str) -> None:
    """With a quota of 6 GPUs, a 4-GPU rental beside a 2-GPU one: resized to 8 GPUs (past the quota on its
    own) it is refused; to 6 it keeps its 4 with an event naming the quota."""
    with app_client(database_url) as client:
        headers, _ = _tenant(client, "capped", gpu_quota=6)
        rental_id = client.post("/v1/rentals", json={**H100, "gpus": 4}, headers=headers).json()["id"]
        rate = wait_for(client, rental_id, headers, "placed")["price_micros_per_hour"]
        other = client.post("/v1/rentals", json={**H100, "gpus": 2}, headers=headers).json()["id"]
        wait_for(client, other, headers, "placed")
        past = client.patch(f"/v1/rentals/{rental_id}", json={"gpus": 8}, headers=headers)
        assert past.status_code == 400 and past.json()["error"]["field"] == "gpus", past.text
        client.patch(f"/v1/rentals/{rental_id}", json={"gpus": 6}, headers=headers)
        body = _until(client, rental_id, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        (waiting,) = [e for e in body["events"] if e["kind"] == "growing"]
        assert waiting["reason"] == "quota" and "GPU quota 6 GPUs" in waiting["message"]
        assert [len(a["slices"]) for a in body["allocation"]] == [4] and body["price_micros_per_hour"] == rate


def test_more_gpus_are_taken_on_every_node_or_none_and_new_nodes_wait_for_them(database_url: str) -> None:
    """A 2-node, 4-GPU rental resized to 3 nodes of 8 GPUs while another rental holds the rest of one of
    its nodes: nothing changes (no node gets 8 while the other has 4, and no third node of 8 joins a gang of
    4s). Once the other stops, both nodes get 8 and then a third node of 8 joins; the rate follows."""
    with app_client(database_url) as client:
        headers, _ = _tenant(client, "gang")
        first = client.post("/v1/rentals", json={**H100, "gpus": 4, "nodes": 2}, headers=headers).json()["id"]
        placed = wait_for(client, first, headers, "placed")
        nodes = [a["node"] for a in placed["allocation"]]
        blocker = client.post("/v1/rentals", json={**H100, "gpus": 4}, headers=headers).json()["id"]
        (blocked,) = [a["node"] for a in wait_for(client, blocker, headers, "placed")["allocation"]]
        assert blocked in nodes
        rate = placed["price_micros_per_hour"]

        client.patch(f"/v1/rentals/{first}", json={"gpus": 8, "nodes": 3}, headers=headers)
        body = _until(client, first, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        (waiting,) = [e for e in body["events"] if e["kind"] == "growing"]
        assert (
            waiting["message"]
            == f"waiting to have 8 GPUs per node (has 4): node {blocked} does not have 4 more GPUs free"
        )
        scheduler_cycles(client)  # still as it was
        body = client.get(f"/v1/rentals/{first}", headers=headers).json()
        assert [(a["node"], len(a["slices"])) for a in body["allocation"]] == [(n, 4) for n in nodes]
        assert body["price_micros_per_hour"] == rate

        assert client.post(f"/v1/rentals/{blocker}/stop", headers=headers).status_code == 200
        grown = _until(client, first, headers, lambda b: len(b["allocation"]) == 3)
        assert [a["node"] for a in grown["allocation"]][:2] == nodes
        assert [len(a["slices"]) for a in grown["allocation"]] == [8, 8, 8]
        # both changes in one cycle, at one instant: one rate change, to 2 x 3 / 2 = 3 x its rate
        assert _rate_history(grown) == [rate, rate * 3] and grown["price_micros_per_hour"] == rate * 3


def test_a_live_mig_or_share_rental_keeps_its_shape_and_an_empty_resize_changes_nothing(
    database_url: str,
) -> None:
    """A live MIG slice or share cannot change its GPU count or its node count (400 naming the field, its
    spec unchanged); a resize that asks for what it has writes no event."""
    with app_client(database_url) as client:
        headers, _ = _tenant(client, "slices")
        mig = {"gpu_model": "A100-80GB", "mig_profile": "1g.10gb"}
        share = {"gpu_model": "L40S", "gpus": 0, "share_milli": 500}
        for shape in (mig, share):
            rental_id = client.post("/v1/rentals", json=shape, headers=headers).json()["id"]
            before = wait_for(client, rental_id, headers, "placed")
            for body, field in (({"nodes": 2}, "nodes"), ({"gpus": 2}, "gpus")):
                refused = client.patch(f"/v1/rentals/{rental_id}", json=body, headers=headers)
                assert refused.status_code == 400 and refused.json()["error"]["field"] == field, refused.text
            same = client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 1}, headers=headers)
            assert same.status_code == 200 and same.json()["request"] == before["request"]
            events = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["events"]
            assert not [e for e in events if e["kind"] == "resized"]


def test_a_stopping_or_ended_rental_is_not_resized(database_url: str) -> None:
    """409 naming `state` for a rental whose workload is being stopped, and for one that ended."""
    with app_client(database_url) as client:
        headers, _ = _tenant(client, "late")
        rental_id = client.post("/v1/rentals", json={**H100, "gpus": 2}, headers=headers).json()["id"]
        wait_for(client, rental_id, headers, "placed")
        with client.app.state.services.rentals.uow() as uow:  # as when its agent is stopping the workload
            uow.rentals.set_state(rental_id, "stopping", expect=("placed",), reason=None)
            uow.commit()
        refused = client.patch(f"/v1/rentals/{rental_id}", json={"gpus": 4}, headers=headers)
        assert refused.status_code == 409 and refused.json()["error"]["field"] == "state", refused.text
        with client.app.state.services.rentals.uow() as uow:
            uow.rentals.set_state(rental_id, "stopped", expect=("stopping",), reason=None)
            uow.rentals.release(rental_id, at=client.app.state.services.rentals.clock.now())
            uow.commit()
        ended = client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 2}, headers=headers)
        assert ended.status_code == 409 and "is stopped" in ended.json()["error"]["message"]
        assert client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["request"]["gpus"] == 2


def test_a_rental_naming_a_family_gains_gpus_only_within_the_quota_of_the_model_it_runs_on(
    database_url: str,
) -> None:
    """`H100-SXM-80GB: 6` counts the GPUs a rental runs on, whatever it named: a 4-GPU rental naming the H100
    family (only that model in this fleet) beside a 2-GPU one, resized to 6, keeps its 4."""
    with app_client(database_url) as client:
        headers, tenant_id = _tenant(client, "model-capped")
        quota = {"gpu_quota": {"H100-SXM-80GB": 6}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        family = {**H100, "gpu_model": "H100", "gpus": 4}
        rental_id = client.post("/v1/rentals", json=family, headers=headers).json()["id"]
        wait_for(client, rental_id, headers, "placed")
        other = client.post("/v1/rentals", json={**H100, "gpus": 2}, headers=headers).json()["id"]
        wait_for(client, other, headers, "placed")
        client.patch(f"/v1/rentals/{rental_id}", json={"gpus": 6}, headers=headers)
        body = _until(client, rental_id, headers, lambda b: any(e["kind"] == "growing" for e in b["events"]))
        (waiting,) = [e for e in body["events"] if e["kind"] == "growing"]
        assert waiting["reason"] == "quota" and "H100-SXM-80GB quota 6 GPUs" in waiting["message"], waiting
        assert [len(a["slices"]) for a in body["allocation"]] == [4]


def test_a_gang_grown_back_onto_a_node_it_left_runs_there_again(database_url: str) -> None:
    """A gang shrunk off a node (its run there ended) and grown back onto it: the node's run is open again,
    from the new workload's start, not still ended at the shrink while it runs (`suanli show`'s runs)."""
    with app_client(database_url, queue="backfill", prepaid=False) as client:
        headers, _ = _tenant(client, "regrown")
        created = client.post("/v1/rentals", json={**H100, "nodes": 2}, headers=headers).json()
        rental_id = created["id"]
        kept, left = (a["node"] for a in wait_for(client, rental_id, headers, "placed")["allocation"])
        agents = {node: register_agent(client, node) for node in (kept, left)}

        def beat(node: str, state: str, exit_code: int | None = None) -> None:
            workload = {"rental_id": rental_id, "state": state, "exit_code": exit_code}
            sent = client.post("/v1/agents/heartbeat", json={"workloads": [workload]}, headers=agents[node])
            assert sent.status_code == 200, sent.text

        def runs() -> dict[str, dict]:
            return {r["node"]: r for r in client.get(f"/v1/rentals/{rental_id}/runs", headers=headers).json()}

        beat(kept, "running")
        beat(left, "running")
        assert client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 1}, headers=headers).status_code == 200
        _until(client, rental_id, headers, lambda b: len(b["allocation"]) == 1)
        beat(left, "stopped", 143)  # its agent stopped the workload it no longer holds
        shrunk_at = runs()[left]["ended_at"]
        assert shrunk_at is not None
        others = [
            n["name"]
            for n in client.get("/v1/nodes", headers=ADMIN).json()
            if n["gpu_model"] == "H100-SXM-80GB" and n["name"] not in (kept, left)
        ]
        for name in others:  # the only H100 node free is the one it left
            assert client.post(f"/v1/nodes/{name}/drain", headers=ADMIN).status_code == 200
        assert client.patch(f"/v1/rentals/{rental_id}", json={"nodes": 2}, headers=headers).status_code == 200
        regrown = _until(client, rental_id, headers, lambda b: len(b["allocation"]) == 2)
        assert sorted(a["node"] for a in regrown["allocation"]) == sorted((kept, left)), regrown
        beat(left, "running")
        again = runs()[left]
        assert again["state"] == "running" and again["ended_at"] is None, again
        assert again["exit_code"] is None and again["started_at"] >= shrunk_at, again
        beat(left, "succeeded", 0)
        beat(kept, "succeeded", 0)
        assert client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["state"] == "stopped"
        assert runs()[left]["ended_at"] > shrunk_at


def test_a_rental_naming_no_model_grows_only_onto_the_model_it_runs_on(database_url: str) -> None:
    """cn-north has eight H100-SXM nodes and one Ascend. A rental naming no model placed on the Ascend while
    the H100s were busy, once they are free, is refused a second node (no region has two Ascend nodes), its
    node and rate as they were: it had grown onto an H100, billed at the Ascend's rate per GPU. A rental on an
    H100 grows onto another H100, and its rate doubles."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, _ = _tenant(client, "anywhere")
        filler = client.post("/v1/rentals", json={**H100, "nodes": 8}, headers=headers).json()["id"]
        assert wait_for(client, filler, headers, "placed")["state"] == "placed"
        anywhere = {"gpus": 8, "regions": ["cn-north"]}
        on_ascend = client.post("/v1/rentals", json=anywhere, headers=headers).json()["id"]
        placed = wait_for(client, on_ascend, headers, "placed")
        assert [a["node"] for a in placed["allocation"]] == ["ascend-01"], placed
        assert client.post(f"/v1/rentals/{filler}/stop", headers=headers).status_code == 200
        assert _until(client, filler, headers, lambda body: body["state"] == "stopped")["state"] == "stopped"

        more = client.patch(f"/v1/rentals/{on_ascend}", json={"nodes": 2}, headers=headers)
        assert more.status_code == 400 and more.json()["error"]["field"] == "nodes", more.text
        assert "at most 1 matching nodes of one GPU model" in more.json()["error"]["message"], more.text
        scheduler_cycles(client)
        after = client.get(f"/v1/rentals/{on_ascend}", headers=headers).json()
        assert [a["node"] for a in after["allocation"]] == ["ascend-01"], after
        assert after["price_micros_per_hour"] == placed["price_micros_per_hour"], after

        on_h100 = client.post("/v1/rentals", json=anywhere, headers=headers).json()["id"]
        first = wait_for(client, on_h100, headers, "placed")
        assert client.patch(f"/v1/rentals/{on_h100}", json={"nodes": 2}, headers=headers).status_code == 200
        grown = _until(client, on_h100, headers, lambda body: len(body["allocation"]) == 2)
        assert [a["node"].startswith("h100-") for a in grown["allocation"]] == [True, True], grown
        assert grown["price_micros_per_hour"] == 2 * first["price_micros_per_hour"], grown


def test_a_growth_past_the_quota_of_the_model_it_runs_on_is_refused_whatever_else_it_allows(
    database_url: str,
) -> None:
    """A rental naming no model runs on H100s, its tenant's quota 8 H100 GPUs and none on the Ascend it also
    allows: a second node is refused naming the quota. The check accepted it as the Ascend had room, and it
    then waited for ever, as it grows onto no other model than the one it runs on."""
    with app_client(database_url, meter_interval_s=3600, prepaid=False) as client:
        headers, tenant_id = _tenant(client, "capped")
        quota = {"gpu_quota": {"H100-SXM-80GB": 8}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        ascend = {"gpu_model": "Ascend-910B", "gpus": 8, "regions": ["cn-north"]}
        taken = client.post("/v1/rentals", json=ascend, headers=headers).json()["id"]
        assert wait_for(client, taken, headers, "placed")["state"] == "placed"  # so the next lands on H100s
        anywhere = client.post(
            "/v1/rentals", json={"gpus": 8, "regions": ["cn-north"]}, headers=headers
        ).json()
        placed = wait_for(client, anywhere["id"], headers, "placed")
        assert [a["node"].startswith("h100-") for a in placed["allocation"]] == [True], placed
        assert (
            client.post(f"/v1/rentals/{taken}/stop", headers=headers).status_code == 200
        )  # the Ascend frees

        more = client.patch(f"/v1/rentals/{anywhere['id']}", json={"nodes": 2}, headers=headers)
        assert more.status_code == 400, more.text
        error = more.json()["error"]
        assert error["field"] == "nodes" and "quota" in error["message"], error
        assert client.get(f"/v1/rentals/{anywhere['id']}", headers=headers).json()["request"]["nodes"] == 1


def test_a_resize_reply_says_the_shape_it_asks_is_pending_while_it_holds_the_old_one(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`PATCH` answers before the leader applies a new GPU count: its reply asked 4 GPUs per node but listed 8
    and their rate, with nothing saying so. It now says the resize is pending and what it holds; once the
    leader has applied it, the rental holds 4 at half the rate and nothing is pending."""
    with app_client(database_url, prepaid=False) as client:
        headers, _ = _tenant(client, "shrinker")
        rental_id = client.post("/v1/rentals", json=H100, headers=headers).json()["id"]
        placed = wait_for(client, rental_id, headers, "placed")
        assert placed["resize_pending"] is None, placed
        services = client.app.state.services  # type: ignore[attr-defined]
        services.loop.interval_s = 3600  # the leader's cycle comes when a test asks for it, after the reply
        scheduler_cycles(client)  # so the cycle under way is over, and the next waits for a signal
        monkeypatch.setattr(services.rentals, "signal", lambda **_: None)

        reply = client.patch(f"/v1/rentals/{rental_id}", json={"gpus": 4}, headers=headers).json()
        assert reply["request"]["gpus"] == 4 and len(reply["allocation"][0]["slices"]) == 8, reply
        assert reply["price_micros_per_hour"] == placed["price_micros_per_hour"], reply
        assert reply["resize_pending"] == {"nodes": 1, "gpus": 4, "held_nodes": 1, "held_gpus": 8}, reply
        monkeypatch.setattr(
            platform_commands, "logged_in", logged_in_as(client, headers["Authorization"][7:])
        )
        shown = CliRunner().invoke(app, ["show", rental_id], env={"COLUMNS": "200"})
        said = " ".join(shown.output.split())
        assert (
            "(resize pending: holds 8 GPU(s) x 1 node(s) at that rate until the scheduler applies it)" in said
        )

        scheduler_cycles(client)
        applied = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        assert len(applied["allocation"][0]["slices"]) == 4 and applied["resize_pending"] is None, applied
        assert applied["price_micros_per_hour"] == placed["price_micros_per_hour"] // 2, applied
