"""A forced drain or maintenance window through the real app (SQLite and PostgreSQL) says which signed
contracts it leaves short and by how much: holder, pool, window, and the GPUs contracted against those in
service at the pool's worst instant; `suanli admin drain --force` prints them (a table, and in --json)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from typer.testing import CliRunner

from conftest import ADMIN, ADMIN_KEY, FLEET, h100_contract, logged_in_as
from suanli.cli import admin_commands, maintenance_commands
from suanli.cli.main import app

WEEK = timedelta(days=7)


def _sign(client: TestClient, headers: dict[str, str], start: datetime, hours: float, count: int) -> dict:
    """Sign `count` of cn-north's 64 H100s over [start, start + hours) for the tenant of `headers`."""
    signed = client.post("/v1/contracts", json=h100_contract(start, hours, count), headers=headers)
    assert signed.status_code == 201, signed.text
    return signed.json()


def _forced_window(client: TestClient, node: str, start: datetime) -> Response:
    """Schedule a half-hour maintenance window on `node` from `start`, forced past the contracts."""
    body = {
        "node": node,
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(minutes=30)).isoformat(),
        "force": True,
    }
    return client.post("/v1/fleet/maintenance", json=body, headers=ADMIN)


def _next_hour(after: timedelta) -> datetime:
    return (datetime.now(UTC) + after).replace(minute=0, second=0, microsecond=0)


def test_a_forced_drain_answers_each_contract_it_leaves_short_and_by_how_much(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]]
) -> None:
    """acme holds 60 H100s for an hour a week from now, beta 4 from its half hour for two hours: 64 of 64.
    Draining h100-a-01 (8) leaves 56: refused naming both; forced, each is listed, at the instant beta's
    starts (64 contracted, 8 short), not acme's start (60, 4 short). Undrained and drained again unforced,
    it is refused as before."""
    acme_id, acme = tenant("acme")
    beta_id, beta = tenant("beta")
    start = _next_hour(WEEK)
    first = _sign(client, acme, start, 1, 60)
    second = _sign(client, beta, start + timedelta(minutes=30), 2, 4)
    refused = client.post("/v1/nodes/h100-a-01/drain", headers=ADMIN)
    message = refused.json()["error"]["message"]
    assert refused.status_code == 409 and f"contract(s) {first['id']}, {second['id']} short" in message
    forced = client.post("/v1/nodes/h100-a-01/drain", params={"force": "true"}, headers=ADMIN)
    assert forced.status_code == 200, forced.text
    drained = forced.json()
    assert drained["schedulable"] is False and drained["name"] == "h100-a-01"
    assert drained["short_contracts"] == [first["id"], second["id"]]
    worst = (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    for shown, held, holder in zip(drained["shortfalls"], (first, second), (acme_id, beta_id), strict=True):
        assert shown == {
            "contract_id": held["id"],
            "tenant_id": holder,
            "gpu_model": "H100-SXM-80GB",
            "region": "cn-north",
            "count": held["count"],
            "starts_at": held["starts_at"],
            "ends_at": held["ends_at"],
            "short_at": worst,
            "contracted_gpus": 64,
            "in_service_gpus": 56,
            "short_gpus": 8,
        }
    assert client.post("/v1/nodes/h100-a-01/undrain", headers=ADMIN).status_code == 200
    assert client.post("/v1/nodes/h100-a-01/drain", headers=ADMIN).status_code == 409


def test_an_unforced_drain_that_leaves_no_contract_short_lists_none(client: TestClient) -> None:
    drained = client.post("/v1/nodes/h200-01/drain", headers=ADMIN)
    assert drained.status_code == 200, drained.text
    assert drained.json()["short_contracts"] == [] and drained.json()["shortfalls"] == []


def test_a_forced_window_answers_how_short_it_leaves_a_contract(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]]
) -> None:
    """60 of 64 H100s contracted; a window on h100-a-01 inside it leaves 56 in service, 4 short."""
    acme_id, acme = tenant("acme")
    start = _next_hour(WEEK)
    held = _sign(client, acme, start, 2, 60)
    window_start = start + timedelta(minutes=30)
    forced = _forced_window(client, "h100-a-01", window_start)
    assert forced.status_code == 201, forced.text
    [shown] = forced.json()["shortfalls"]
    assert forced.json()["short_contracts"] == [held["id"]]
    assert (shown["contract_id"], shown["tenant_id"], shown["count"]) == (held["id"], acme_id, 60)
    assert datetime.fromisoformat(shown["short_at"]) == window_start
    assert (shown["contracted_gpus"], shown["in_service_gpus"], shown["short_gpus"]) == (60, 56, 4)


def test_cli_admin_drain_force_prints_the_contracts_left_short(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It printed only `drained NODE`; now the contracts left short too, as a table and in --json."""
    acme_id, acme = tenant("acme")
    held = _sign(client, acme, _next_hour(WEEK), 1, 60)
    monkeypatch.setattr(admin_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    runner, env = CliRunner(), {"COLUMNS": "240"}
    forced = runner.invoke(app, ["admin", "drain", "h100-a-01", "--force"], env=env)
    assert forced.exit_code == 0, forced.output
    assert "drained h100-a-01" in forced.output
    assert f"forced: contracts left short of GPUs: {held['id']}" in forced.output
    row = next(line for line in forced.output.splitlines() if held["id"] in line and "│" in line)
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[:4] == [held["id"], acme_id, "H100-SXM-80GB", "cn-north"]
    assert cells[5:9] == ["60", "60", "56", "4"], row
    quiet = runner.invoke(app, ["admin", "drain", "h200-01"], env=env)
    assert quiet.exit_code == 0 and quiet.output.strip() == "drained h200-01"
    assert runner.invoke(app, ["admin", "undrain", "h100-a-01"]).exit_code == 0
    refused = runner.invoke(app, ["admin", "drain", "h100-a-01"], env=env)
    assert refused.exit_code != 0 and "NODE: draining h100-a-01 would leave" in refused.output, refused.output
    assert "(field node)" not in refused.output
    as_json = runner.invoke(app, ["admin", "drain", "h100-a-01", "--force", "--json"])
    assert as_json.exit_code == 0, as_json.output
    [shown] = json.loads(as_json.output)["shortfalls"]
    assert (shown["contract_id"], shown["short_gpus"]) == (held["id"], 4)


def test_cli_admin_maintenance_add_force_prints_the_contracts_left_short(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, acme = tenant("acme")
    start = _next_hour(WEEK)
    held = _sign(client, acme, start, 2, 60)
    monkeypatch.setattr(maintenance_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    window = ["--from", f"{start:%Y-%m-%dT%H:%M}", "--until", f"{start + timedelta(hours=1):%Y-%m-%dT%H:%M}"]
    forced = CliRunner().invoke(
        app, ["admin", "maintenance", "add", "h100-a-01", *window, "--force"], env={"COLUMNS": "240"}
    )
    assert forced.exit_code == 0, forced.output
    assert f"forced: contracts left short of GPUs: {held['id']}" in forced.output
    row = next(line for line in forced.output.splitlines() if held["id"] in line and "│" in line)
    assert [cell.strip() for cell in row.strip("│").split("│")][5:9] == ["60", "60", "56", "4"], row


def test_a_drain_that_deepens_a_shortfall_a_forced_window_made_is_refused_and_listed(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]]
) -> None:
    """60 of 64 H100s contracted; a forced window on h100-a-01 leaves it 4 short for half an hour. Draining
    h100-a-02 then takes 8 more (12 short in the window, 4 outside it): it was let through unforced, since the
    contract was short already somewhere; now it is refused, and forced it is listed at the window's start."""
    _, acme = tenant("acme")
    start = _next_hour(WEEK)
    held = _sign(client, acme, start, 2, 60)
    window_start = start + timedelta(minutes=30)
    assert _forced_window(client, "h100-a-01", window_start).status_code == 201
    refused = client.post("/v1/nodes/h100-a-02/drain", headers=ADMIN)
    assert refused.status_code == 409 and held["id"] in refused.json()["error"]["message"], refused.text
    forced = client.post("/v1/nodes/h100-a-02/drain", params={"force": "true"}, headers=ADMIN)
    assert forced.status_code == 200, forced.text
    [shown] = forced.json()["shortfalls"]
    assert datetime.fromisoformat(shown["short_at"]) == window_start
    assert (shown["contracted_gpus"], shown["in_service_gpus"], shown["short_gpus"]) == (60, 48, 12)
    again = client.post("/v1/nodes/h100-a-03/drain", params={"force": "true"}, headers=ADMIN)
    assert [s["short_gpus"] for s in again.json()["shortfalls"]] == [20]  # each drain takes more: listed


def _with_h100_b(nodes: int) -> str:
    """The example fleet with `nodes` of its four h100-b nodes (8 H100s each, cn-north)."""
    four = 'name = "h100-b-{i}"\ncount_nodes = 4'
    assert four in FLEET
    return FLEET.replace(four, f'name = "h100-b-{{i}}"\ncount_nodes = {nodes}')


def _put_fleet(client: TestClient, text: str, force: bool = False) -> Response:
    headers = {**ADMIN, "Content-Type": "application/toml"}
    return client.put("/v1/fleet", content=text, params={"force": "true"} if force else None, headers=headers)


def test_a_fleet_put_that_leaves_a_contract_short_is_refused_and_forced_lists_it(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]]
) -> None:
    """60 of 64 H100s contracted; a fleet with one h100-b node fewer (56) is refused naming the contract, and
    forced its answer lists it (60 contracted, 56 in service), as a forced drain's does; it said nothing."""
    acme_id, acme = tenant("acme")
    start = _next_hour(WEEK)
    held = _sign(client, acme, start, 2, 60)
    refused = _put_fleet(client, _with_h100_b(3))
    assert refused.status_code == 409, refused.text
    assert f"contract(s) {held['id']} short" in refused.json()["error"]["message"]
    forced = _put_fleet(client, _with_h100_b(3), force=True)
    assert forced.status_code == 200, forced.text
    assert forced.json()["short_contracts"] == [held["id"]] and forced.json()["nodes"] == 19
    [shown] = forced.json()["shortfalls"]
    assert (shown["contract_id"], shown["tenant_id"]) == (held["id"], acme_id)
    assert datetime.fromisoformat(shown["short_at"]) == start
    assert (shown["contracted_gpus"], shown["in_service_gpus"], shown["short_gpus"]) == (60, 56, 4)
    restored = _put_fleet(client, FLEET)
    assert restored.status_code == 200 and restored.json()["shortfalls"] == [], restored.text


def test_a_fleet_put_that_deepens_a_shortfall_a_forced_window_made_is_refused(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]]
) -> None:
    """60 of 64 contracted; a forced window on h100-a-01 leaves it 4 short for half an hour. A fleet with one
    h100-b node fewer takes 8 more (12 short in the window): it was let through unforced, since the check
    compared which contracts were short before and after, and this one was short already somewhere."""
    _, acme = tenant("acme")
    start = _next_hour(WEEK)
    held = _sign(client, acme, start, 2, 60)
    window_start = start + timedelta(minutes=30)
    assert _forced_window(client, "h100-a-01", window_start).status_code == 201
    refused = _put_fleet(client, _with_h100_b(3))
    assert refused.status_code == 409 and held["id"] in refused.json()["error"]["message"], refused.text
    forced = _put_fleet(client, _with_h100_b(3), force=True)
    assert forced.status_code == 200, forced.text
    [shown] = forced.json()["shortfalls"]
    assert datetime.fromisoformat(shown["short_at"]) == window_start
    assert (shown["contracted_gpus"], shown["in_service_gpus"], shown["short_gpus"]) == (60, 48, 12)


def test_cli_admin_fleet_put_force_prints_the_contracts_left_short(
    client: TestClient, tenant: Callable[[str], tuple[str, dict[str, str]]], monkeypatch, tmp_path
) -> None:
    _, acme = tenant("acme")
    held = _sign(client, acme, _next_hour(WEEK), 2, 60)
    monkeypatch.setattr(admin_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    path = tmp_path / "fleet.toml"
    path.write_text(_with_h100_b(3))
    runner = CliRunner()
    refused = runner.invoke(app, ["admin", "fleet-put", str(path)], env={"COLUMNS": "200"})
    assert refused.exit_code != 0 and held["id"] in refused.output, refused.output
    forced = runner.invoke(app, ["admin", "fleet-put", str(path), "--force"], env={"COLUMNS": "200"})
    assert forced.exit_code == 0, forced.output
    assert f"forced: contracts left short of GPUs: {held['id']}" in forced.output, forced.output
    assert "pool short by" in forced.output
    assert _put_fleet(client, FLEET).status_code == 200  # the same fleet again takes nothing more
    as_json = runner.invoke(app, ["admin", "fleet-put", str(path), "--force", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["short_contracts"] == [held["id"]]
