"""Tenant limits through the real app (SQLite and PostgreSQL): admins set GPU quotas and spend caps, tenants
read theirs, bad input is a 4xx naming the field, and either server queue holds a rental past its quota."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conftest import (
    ADMIN,
    ADMIN_KEY,
    WAIT_S,
    SteppedClock,
    app_client,
    logged_in_as,
    scheduler_cycles,
    wait_for,
)
from suanli.cli import plan_commands, platform_commands
from suanli.cli.main import app


def test_admins_set_limits_and_tenants_read_theirs(client, tenant) -> None:
    tenant_id, headers = tenant("limited")
    body = {"gpu_quota": {"*": 16, "h100-sxm-80gb": 8}, "daily_cap_micros": 5_000_000, "fair_share_weight": 2}
    response = client.put(f"/v1/tenants/{tenant_id}/limits", json=body, headers=ADMIN)
    assert response.status_code == 200, response.text
    mine = client.get("/v1/limits", headers=headers).json()
    assert mine == {
        "tenant_id": tenant_id,
        "gpu_quota": {"*": 16, "H100-SXM-80GB": 8},  # catalogue names
        "daily_cap_micros": 5_000_000,
        "monthly_cap_micros": None,
        "budget_daily_micros": None,
        "budget_monthly_micros": None,
        "budget_stops_running": False,
        "spent_today_micros": 0,
        "spent_month_micros": 0,
        "fair_share_weight": 2.0,
        "fair_share_usage_gpu_hours": 0.0,  # the default greedy queue keeps no fair-share usage
        "fair_share_as_of": None,
    }
    assert client.get(f"/v1/limits?tenant={tenant_id}", headers=ADMIN).json()["gpu_quota"]["*"] == 16
    refused = client.put(f"/v1/tenants/{tenant_id}/limits", json=body, headers=headers)
    assert refused.status_code == 403
    for bad, status, field in (
        ({"gpu_quota": {"X900": 8}}, 400, "gpu_quota"),  # no such model or family
        ({"gpu_quota": {"*": -1}}, 400, "gpu_quota"),
        ({"daily_cap_micros": -5}, 422, "daily_cap_micros"),
        ({"fair_share_weight": 0}, 422, "fair_share_weight"),
        ({"fair_share_weight": 0.0001}, 422, "fair_share_weight"),
    ):
        response = client.put(f"/v1/tenants/{tenant_id}/limits", json=bad, headers=ADMIN)
        assert response.status_code == status, response.text
        assert field in response.text
    assert client.put("/v1/tenants/ten_nobody/limits", json={}, headers=ADMIN).status_code == 404
    assert client.get("/v1/limits", headers=headers).json()["gpu_quota"] == {"*": 16, "H100-SXM-80GB": 8}


@pytest.mark.parametrize("queue", ["greedy", "backfill"])
def test_a_rental_past_its_quota_waits(database_url: str, queue: str) -> None:
    with app_client(database_url, queue=queue) as client:
        tenant_id, headers = _funded_tenant(client, "q")
        limits = client.put(f"/v1/tenants/{tenant_id}/limits", json={"gpu_quota": {"*": 8}}, headers=ADMIN)
        assert limits.status_code == 200, limits.text
        spec = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "max_duration_s": 3600}
        first = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        assert wait_for(client, first, headers, "placed")["state"] == "placed"
        second = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        held = wait_for(client, second, headers, "placed", reason="quota")
        assert held["state"] == "pending" and held["pending_reason"] == "quota"


def test_a_rental_larger_than_a_quota_on_its_own_is_refused_not_left_waiting(database_url: str) -> None:
    """It could never start while the quota stands: create and dry run get 400 naming the field to lower
    (nodes when one node's GPUs are within it), and nothing is created."""
    with app_client(database_url) as client:
        tenant_id, headers = _funded_tenant(client, "small")
        quota = {"gpu_quota": {"*": 12, "H100": 4}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        for body, field, says in (
            ({"gpu_model": "H100", "gpus": 8}, "gpus", "asks 8 GPUs, more than the tenant's H100 quota of 4"),
            (
                {"gpu_model": "L40S", "gpus": 4, "nodes": 4},
                "nodes",
                "asks 16 GPUs, more than the tenant's GPU",
            ),
        ):
            for path in ("/v1/rentals", "/v1/rentals/dry-run"):
                refused = client.post(path, json=body, headers=headers)
                assert refused.status_code == 400 and refused.json()["error"]["field"] == field, refused.text
                message = refused.json()["error"]["message"]
                assert message.startswith(says) and message.endswith(
                    "an operator can raise it (suanli admin limits)"
                )
        assert client.get("/v1/rentals", headers=headers).json() == []
        within = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 4}, headers=headers)
        assert within.status_code == 201, within.text
        # a model's quota, for a rental naming the family: every H100 of the fleet is that model, so it could
        # never start (it was created, and waited for ever)
        models = {"gpu_quota": {"*": 16, "H100-SXM-80GB": 8}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=models, headers=ADMIN).status_code == 200
        family = client.post(
            "/v1/rentals", json={"gpu_model": "H100", "gpus": 4, "nodes": 3}, headers=headers
        )
        assert family.status_code == 400 and family.json()["error"]["field"] == "nodes", family.text
        assert "H100-SXM-80GB quota of 8" in family.json()["error"]["message"]
        anywhere = client.post("/v1/rentals", json={"gpus": 4, "nodes": 3}, headers=headers)  # other models
        assert anywhere.status_code == 201, anywhere.text
        # past `*` and one model's quota, on any model: the message names `*`, the one that binds everywhere
        both = {"gpu_quota": {"*": 3, "H100-SXM-80GB": 2}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=both, headers=ADMIN).status_code == 200
        binding = client.post("/v1/rentals/dry-run", json={"gpus": 4}, headers=headers)
        assert binding.status_code == 400, binding.text
        assert binding.json()["error"]["message"].startswith(
            "asks 4 GPUs, more than the tenant's GPU quota of 3"
        )


def test_cli_sets_and_shows_limits(client, tenant, monkeypatch) -> None:
    tenant_id, headers = tenant("cli-limited")

    runner, env = CliRunner(), {"COLUMNS": "200"}
    monkeypatch.setattr(plan_commands, "logged_in", logged_in_as(client, ADMIN_KEY))
    command = ["admin", "limits", tenant_id, "--quota", "*=16", "--quota", "L40S=4", "--daily", "12.5"]
    command += ["--quota", "a100=2", "--weight", "0.5"]  # a100: the family (A100-40GB and A100-80GB)
    done = runner.invoke(app, command, env=env)
    assert done.exit_code == 0 and "*: 16, A100: 2, L40S: 4" in done.output, done.output
    assert "12.5000" in done.output
    bad = runner.invoke(app, ["admin", "limits", tenant_id, "--quota", "L40S"], env=env)
    assert bad.exit_code == 2 and "--quota" in bad.output
    unknown = runner.invoke(app, ["admin", "limits", tenant_id, "--quota", "X900=2"], env=env)
    assert unknown.exit_code == 1 and "unknown GPU model or family 'X900'" in unknown.output, unknown.output
    monkeypatch.setattr(plan_commands, "logged_in", logged_in_as(client, headers["Authorization"].split()[1]))
    mine = runner.invoke(app, ["limits", "--json"], env=env)
    assert mine.exit_code == 0 and '"daily_cap_micros": 12500000' in mine.output, mine.output
    assert '"fair_share_weight": 0.5' in mine.output


def test_a_limits_patch_changes_only_what_it_names(client, tenant) -> None:
    """PATCH is a merge: a weight alone keeps the quotas and caps, null removes one quota or cap, and the
    tenant's own budget stays through both."""
    tenant_id, headers = tenant("patched")
    url = f"/v1/tenants/{tenant_id}/limits"
    full = {
        "gpu_quota": {"*": 16, "L40S": 4},
        "daily_cap_micros": 50_000_000,
        "monthly_cap_micros": 900_000_000,
    }
    assert client.put(url, json=full, headers=ADMIN).status_code == 200
    assert client.put("/v1/budget", json={"daily_micros": 7_000_000}, headers=headers).status_code == 200

    weighted = client.patch(url, json={"fair_share_weight": 2.5}, headers=ADMIN)
    assert weighted.status_code == 200, weighted.text
    body = weighted.json()
    assert body["gpu_quota"] == {"*": 16, "L40S": 4} and body["fair_share_weight"] == 2.5
    assert (body["daily_cap_micros"], body["monthly_cap_micros"]) == (50_000_000, 900_000_000)
    assert body["budget_daily_micros"] == 7_000_000

    change = {"gpu_quota": {"l40s": None, "H100": 8}, "daily_cap_micros": None}
    patched = client.patch(url, json=change, headers=ADMIN).json()
    assert patched["gpu_quota"] == {"*": 16, "H100": 8}
    assert (patched["daily_cap_micros"], patched["monthly_cap_micros"]) == (None, 900_000_000)
    assert patched["fair_share_weight"] == 2.5 and patched["budget_daily_micros"] == 7_000_000

    refusals = [
        (
            {"fair_share_weight": None},
            "fair_share_weight: a number from 0.001 to 1000 (1 is the default), not null",
        ),
        ({"fair_share_weight": 1e-300}, "greater than or equal to 0.001"),  # all but infinite against 1
        ({"gpu_quota": None}, "gpu_quota: null would remove every quota"),
        ({"fair_share_weight": 0}, "fair_share_weight"),
        ({"gpu_quota": {"X900": 2}}, "unknown GPU model or family 'X900'"),
        ({"gpu_quota": {"H100": -1}}, "0 to"),
        ({"daily_cap_micros": -5}, "daily_cap_micros"),
    ]
    for bad, message in refusals:
        refused = client.patch(url, json=bad, headers=ADMIN)
        assert refused.status_code in (400, 422) and message in refused.text, (bad, refused.text)
    assert client.get(f"/v1/limits?tenant={tenant_id}", headers=ADMIN).json()["gpu_quota"] == {
        "*": 16,
        "H100": 8,
    }
    assert client.patch(url, json={"fair_share_weight": 2}, headers=headers).status_code == 403
    assert client.patch("/v1/tenants/nobody/limits", json={}, headers=ADMIN).status_code == 404


def test_cli_admin_limits_changes_only_the_options_given(client, tenant, monkeypatch) -> None:
    """`--weight` alone keeps the quotas and caps; GROUP=none and `--daily none` remove one; `--replace`
    sets the whole of them as before."""
    tenant_id, _ = tenant("cli-patched")
    runner, env = CliRunner(), {"COLUMNS": "200"}
    monkeypatch.setattr(plan_commands, "logged_in", logged_in_as(client, ADMIN_KEY))

    def limits_after(*options: str) -> dict:
        done = runner.invoke(app, ["admin", "limits", tenant_id, *options, "--json"], env=env)
        assert done.exit_code == 0, done.output
        return json.loads(done.output)

    limits_after("--quota", "*=16", "--quota", "L40S=4", "--daily", "12.5", "--monthly", "300")
    weighted = limits_after("--weight", "3")
    assert weighted["gpu_quota"] == {"*": 16, "L40S": 4} and weighted["daily_cap_micros"] == 12_500_000
    assert weighted["fair_share_weight"] == 3
    removed = limits_after("--quota", "L40S=none", "--daily", "none")
    assert removed["gpu_quota"] == {"*": 16} and removed["daily_cap_micros"] is None
    assert removed["monthly_cap_micros"] == 300_000_000 and removed["fair_share_weight"] == 3
    assert limits_after() == removed  # nothing given: shows them
    replaced = limits_after("--replace", "--quota", "H100=8")
    assert replaced["gpu_quota"] == {"H100": 8} and replaced["monthly_cap_micros"] is None
    assert replaced["fair_share_weight"] == 1
    bad = runner.invoke(app, ["admin", "limits", tenant_id, "--quota", "L40S=lots"], env=env)
    assert bad.exit_code == 2 and "--quota" in bad.output
    cap = runner.invoke(app, ["admin", "limits", tenant_id, "--daily", "twelve"], env=env)
    assert cap.exit_code == 2 and "--daily" in cap.output


def test_a_family_quota_counts_every_model_of_the_family(database_url: str) -> None:
    """`H100: 8` holds all H100 models together: 8 GPUs of H100-SXM-80GB, then a rental for any H100 waits."""
    with app_client(database_url) as client:
        tenant_id, headers = _funded_tenant(client, "fam")
        quota = {"gpu_quota": {"h100": 8, "L40S": 2}}
        limits = client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN)
        assert limits.status_code == 200 and limits.json()["gpu_quota"] == {"H100": 8, "L40S": 2}, limits.text
        model = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "max_duration_s": 3600}
        first = client.post("/v1/rentals", json=model, headers=headers).json()["id"]
        assert wait_for(client, first, headers, "placed")["state"] == "placed"
        family = {"gpu_model": "H100", "gpus": 1, "max_duration_s": 3600}
        second = client.post("/v1/rentals", json=family, headers=headers).json()["id"]
        held = wait_for(client, second, headers, "placed", reason="quota")
        assert held["state"] == "pending" and held["pending_reason"] == "quota"
        other = {"gpu_model": "L40S", "gpus": 2, "max_duration_s": 3600}  # another family's quota is its own
        third = client.post("/v1/rentals", json=other, headers=headers).json()["id"]
        assert wait_for(client, third, headers, "placed")["state"] == "placed"


def _funded_tenant(client: TestClient, name: str) -> tuple[str, dict[str, str]]:
    """A new tenant with a key and a credit large enough for any test rental."""
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    return tenant_id, {"Authorization": f"Bearer {secret['secret']}"}


def test_tenants_read_their_fair_share_usage(database_url: str) -> None:
    """GET /v1/limits shows the tenant's decayed GPU-hours as the backfill queue's leader last saved them
    (tests/store/test_repositories.py checks the leader's saving)."""
    from datetime import UTC, datetime

    with app_client(database_url, queue="backfill") as client:
        tenant_id, headers = _funded_tenant(client, "fair")
        fresh = client.get("/v1/limits", headers=headers).json()
        assert fresh["fair_share_usage_gpu_hours"] == 0.0
        services = client.app.state.services  # type: ignore[attr-defined]
        with services.limits.uow() as uow:
            uow.terms.save_fair_share({tenant_id: 8 * 3600.0}, datetime(2030, 1, 1, tzinfo=UTC))
            uow.commit()
        mine = client.get("/v1/limits", headers=headers).json()
        assert mine["fair_share_usage_gpu_hours"] == 8.0 and mine["fair_share_as_of"].startswith("2030-01-01")


def test_a_tenants_own_budget_holds_its_rentals_and_the_operators_limits_stay(client, tenant) -> None:
    """The tenant sets a monthly budget of 1 unit; an H100 rental with no declared end (it burns to the end of
    the month) waits with reason spend_cap naming the budget; removing the budget lets it start. The admin's
    quota and the tenant's budget are set apart: neither replaces the other."""
    tenant_id, headers = _funded_tenant(client, "thrifty")
    client.put(f"/v1/tenants/{tenant_id}/limits", json={"gpu_quota": {"*": 16}}, headers=ADMIN)
    set_budget = client.put("/v1/budget", json={"monthly_micros": 1_000_000}, headers=headers)
    assert set_budget.status_code == 200, set_budget.text
    mine = set_budget.json()
    assert (mine["budget_daily_micros"], mine["budget_monthly_micros"]) == (None, 1_000_000)
    assert mine["gpu_quota"] == {"*": 16}  # the operator's quota stays
    rental = client.post(
        "/v1/rentals", json={"gpu_model": "H100-SXM-80GB", "gpus": 1}, headers=headers
    ).json()
    held = wait_for(client, rental["id"], headers, "placed", reason="spend_cap")
    assert held["pending_reason"] == "spend_cap", held
    assert "own monthly budget 1.0000," in held["events"][-1]["message"], held["events"]
    again = client.put(f"/v1/tenants/{tenant_id}/limits", json={"gpu_quota": {"*": 8}}, headers=ADMIN).json()
    assert again["budget_monthly_micros"] == 1_000_000  # the admin's change keeps the tenant's budget
    cleared = client.put("/v1/budget", json={}, headers=headers).json()
    assert cleared["budget_monthly_micros"] is None and cleared["gpu_quota"] == {"*": 8}
    assert wait_for(client, rental["id"], headers, "placed")["state"] == "placed"

    other_id, other = tenant("nosy")
    assert client.put(f"/v1/budget?tenant={tenant_id}", json={}, headers=other).status_code == 404
    bad = client.put("/v1/budget", json={"daily_micros": -1}, headers=headers)
    assert bad.status_code == 422 and "daily_micros" in bad.text
    by_admin = client.put(f"/v1/budget?tenant={other_id}", json={"daily_micros": 5}, headers=ADMIN).json()
    assert by_admin["tenant_id"] == other_id and by_admin["budget_daily_micros"] == 5


def test_budget_alerts_at_80_and_100_percent_once_and_a_spent_budget_stops_running_rentals(
    database_url: str,
) -> None:
    """An H100 rental of 10 minutes (about 0.498 units) under a monthly budget of 0.6: the meter's charge at
    8 minutes (66%) sends nothing, at 9.5 minutes (79%) nothing, at 9.9 minutes (82%) one `budget` event;
    checking again sends no second one. The tenant lowers the budget to 0.45 and asks for running rentals to
    stop: the next check sends the 100% event and stops the rental, and the budget shows what was spent."""
    from datetime import datetime, timedelta

    with app_client(database_url, meter_interval_s=3600) as client:
        services = client.app.state.services
        services.meter.after = ()  # the test runs the alerts at its own instants
        tenant_id, headers = _funded_tenant(client, "alerted")
        budget = client.put("/v1/budget", json={"monthly_micros": 600_000}, headers=headers)
        assert budget.status_code == 200, budget.text
        spec = {"gpu_model": "H100-SXM-80GB", "gpus": 1, "max_duration_s": 600}
        rental_id = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        placed = wait_for(client, rental_id, headers, "placed")
        placed_at = datetime.fromisoformat(placed["time_limit_at"]) - timedelta(seconds=600)

        def at(seconds: float) -> dict[str, list[str]]:
            moment = placed_at + timedelta(seconds=seconds)
            services.billing.meter(moment)
            return services.budget_alerts.check(moment)

        def budget_events() -> list[str]:
            events = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()["events"]
            return [e["message"] for e in events if e["kind"] == "budget"]

        assert at(480) == {} and at(570) == {} and budget_events() == []
        sent = at(594)
        assert list(sent) == [tenant_id] and budget_events() == sent[tenant_id]
        assert sent[tenant_id][0].startswith("80% of the own monthly budget used: ")
        assert at(594) == {} and len(budget_events()) == 1  # once per threshold and month
        # for each amount: raised out of reach then set back, the budget's 80% comes again (it never did)
        assert client.put("/v1/budget", json={"monthly_micros": 700_000}, headers=headers).status_code == 200
        assert services.budget_alerts.check(placed_at + timedelta(seconds=594)) == {}
        assert client.put("/v1/budget", json={"monthly_micros": 600_000}, headers=headers).status_code == 200
        again = services.budget_alerts.check(placed_at + timedelta(seconds=594))
        assert (
            again[tenant_id][0].startswith("80% of the own monthly budget used: ")
            and len(budget_events()) == 2
        )
        lowered = client.put(
            "/v1/budget", json={"monthly_micros": 450_000, "stop_running": True}, headers=headers
        ).json()
        assert lowered["budget_stops_running"] is True and lowered["spent_month_micros"] > 450_000
        assert lowered["spent_month_micros"] == lowered["spent_today_micros"]  # all charged today
        stopped = services.budget_alerts.check(placed_at + timedelta(seconds=595))
        assert stopped[tenant_id][0].startswith("100% of the own monthly budget used: "), stopped
        assert "the budget stops running rentals" in stopped[tenant_id][1]
        shown = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        assert shown["state"] == "stopped" and len(budget_events()) == 3, shown["events"]
        assert "own monthly budget is spent" in shown["events"][-1]["message"]

        refused = client.put("/v1/budget", json={"stop_running": True}, headers=headers)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "stop_running"


def test_cli_budget_sets_and_clears_a_tenants_own_budget(client, tenant, monkeypatch) -> None:
    _, headers = tenant("cli-budget")
    monkeypatch.setattr(plan_commands, "logged_in", logged_in_as(client, headers["Authorization"].split()[1]))
    runner, env = CliRunner(), {"COLUMNS": "200"}
    done = runner.invoke(app, ["budget", "--monthly", "250", "--daily", "20.5"], env=env)
    assert done.exit_code == 0 and "own monthly budget" in done.output, done.output
    assert "250.0000" in done.output and "20.5000" in done.output
    shown = runner.invoke(app, ["limits", "--json"], env=env)
    assert '"budget_monthly_micros": 250000000' in shown.output, shown.output
    shown = runner.invoke(app, ["budget"], env=env)  # nothing to set: what is spent against it
    assert shown.exit_code == 0 and "own monthly budget" in shown.output and "0%" in shown.output
    assert "budget event" in " ".join(shown.output.split()), shown.output
    refused = runner.invoke(app, ["budget", "--clear", "--daily", "3"], env=env)
    assert refused.exit_code == 2 and "--clear removes the budget" in refused.output, refused.output
    # an option changes only itself: --stop-running alone keeps both amounts, --daily none removes one
    stopping = runner.invoke(app, ["budget", "--stop-running", "--json"], env=env)
    assert stopping.exit_code == 0, stopping.output
    kept = json.loads(stopping.output)
    assert (kept["budget_daily_micros"], kept["budget_monthly_micros"]) == (20_500_000, 250_000_000)
    assert kept["budget_stops_running"] is True
    shown = runner.invoke(app, ["budget"], env=env)
    assert "running rentals stop once the budget is spent" in " ".join(shown.output.split())
    removed = json.loads(runner.invoke(app, ["budget", "--daily", "none", "--json"], env=env).output)
    assert (removed["budget_daily_micros"], removed["budget_monthly_micros"]) == (None, 250_000_000)
    assert removed["budget_stops_running"] is True
    kept_running = json.loads(runner.invoke(app, ["budget", "--keep-running", "--json"], env=env).output)
    assert (
        kept_running["budget_stops_running"] is False and kept_running["budget_monthly_micros"] == 250_000_000
    )
    bad = runner.invoke(app, ["budget", "--daily", "lots"], env=env)
    assert bad.exit_code == 2 and "--daily" in bad.output
    cleared = runner.invoke(app, ["budget", "--clear", "--json"], env=env)
    assert cleared.exit_code == 0 and '"budget_monthly_micros": null' in cleared.output
    alone = runner.invoke(app, ["budget", "--stop-running"], env=env)  # no budget left to spend
    assert alone.exit_code != 0 and "--stop-running" in alone.output, alone.output
    assert "give a daily or monthly budget" in " ".join(alone.output.split()), alone.output


def test_a_budget_patch_changes_only_what_it_names(client, tenant) -> None:
    """PATCH /v1/budget is a JSON merge patch: a daily budget alone keeps the monthly one and stop_running,
    null removes one; stop_running with no budget left, or null, is refused naming the field."""
    _, headers = tenant("patching")
    both = {"daily_micros": 5_000_000, "monthly_micros": 90_000_000, "stop_running": True}
    assert client.put("/v1/budget", json=both, headers=headers).status_code == 200
    patch = {**headers, "Content-Type": "application/merge-patch+json"}
    daily = client.patch("/v1/budget", content=json.dumps({"daily_micros": 7_000_000}), headers=patch).json()
    assert (daily["budget_daily_micros"], daily["budget_monthly_micros"]) == (7_000_000, 90_000_000)
    assert daily["budget_stops_running"] is True
    gone = client.patch("/v1/budget", content=json.dumps({"monthly_micros": None}), headers=patch).json()
    assert (gone["budget_daily_micros"], gone["budget_monthly_micros"]) == (7_000_000, None)
    for body, field in (
        ({"daily_micros": None}, "stop_running"),  # stops running with no budget left
        ({"stop_running": None}, "stop_running"),
        ({"daily_micros": -1}, "daily_micros"),
    ):
        refused = client.patch("/v1/budget", content=json.dumps(body), headers=patch)
        assert refused.status_code in (400, 422), refused.text
        assert refused.json()["error"]["field"] == field, refused.text
    unchanged = client.get("/v1/limits", headers=headers).json()
    assert (unchanged["budget_daily_micros"], unchanged["budget_stops_running"]) == (7_000_000, True)


def test_a_compute_future_counts_as_spent_and_is_refused_past_the_own_budget(client: TestClient) -> None:
    """What `suanli budget` calls spent is what the invoice adds up: a contract's prepaid price counts, and
    signing one that would take the spend past the tenant's own budget is refused, charging nothing."""
    from datetime import UTC, datetime, timedelta

    _, headers = _funded_tenant(client, "futures")
    start = (datetime.now(UTC) + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    window = {"gpu_model": "H100-SXM-80GB", "count": 1, "region": "cn-north"}
    window |= {"starts_at": start.isoformat(), "ends_at": (start + timedelta(hours=1)).isoformat()}
    first = client.post("/v1/contracts", json=window, headers=headers)
    assert first.status_code == 201, first.text
    price = first.json()["price_micros"]
    limits = client.get("/v1/limits", headers=headers).json()
    assert limits["spent_today_micros"] == limits["spent_month_micros"] == price > 0
    month = datetime.now(UTC).strftime("%Y-%m")
    assert client.get(f"/v1/invoices/{month}", headers=headers).json()["total_micros"] == price

    budget = client.put("/v1/budget", json={"monthly_micros": price + price // 2}, headers=headers)
    assert budget.status_code == 200, budget.text
    balance = client.get("/v1/balance", headers=headers).json()
    later = window | {"starts_at": (start + timedelta(hours=1)).isoformat()}
    later["ends_at"] = (start + timedelta(hours=2)).isoformat()
    refused = client.post("/v1/contracts", json=later, headers=headers)
    assert refused.status_code == 409, refused.text
    assert "past the own monthly budget of" in refused.json()["error"]["message"]
    assert (refused.json()["error"]["code"], refused.json()["error"]["field"]) == (
        "over_spend_limit",
        "count",
    )
    quoted = client.post("/v1/contracts/quote", json=later, headers=headers)  # it said payable: true
    assert quoted.status_code == 409 and quoted.json()["error"] == refused.json()["error"], quoted.text
    assert client.get("/v1/balance", headers=headers).json() == balance
    assert len(client.get("/v1/contracts", headers=headers).json()) == 1
    assert client.put("/v1/budget", json={}, headers=headers).status_code == 200  # no budget: it signs
    assert client.post("/v1/contracts", json=later, headers=headers).status_code == 201


def test_a_model_quota_holds_whatever_the_rental_names(database_url: str) -> None:
    """`H100-SXM-80GB: 8` counts the GPUs a rental runs on, not the name it gave: once 8 are in use, a rental
    naming the H100 family (only that model in this fleet) waits for the quota, and one naming no model runs
    on another model."""
    with app_client(database_url, queue="backfill") as client:
        tenant_id, headers = _funded_tenant(client, "anyname")
        quota = {"gpu_quota": {"H100-SXM-80GB": 8}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        model = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "max_duration_s": 3600}
        first = client.post("/v1/rentals", json=model, headers=headers).json()["id"]
        assert wait_for(client, first, headers, "placed")["state"] == "placed"
        family = {"gpu_model": "H100", "gpus": 8, "max_duration_s": 3600}
        second = client.post("/v1/rentals", json=family, headers=headers).json()["id"]
        held = wait_for(client, second, headers, "placed", reason="quota")
        assert held["state"] == "pending" and held["pending_reason"] == "quota", held
        assert "H100-SXM-80GB quota 8 GPUs, 8 in use, asks 8" in held["events"][-1]["message"]
        anywhere = {"gpus": 8, "max_duration_s": 3600}
        third = client.post("/v1/rentals", json=anywhere, headers=headers).json()["id"]
        placed = wait_for(client, third, headers, "placed")
        assert placed["state"] == "placed" and placed["quote"]["model"] != "H100-SXM-80GB", placed


def _capped_with_one_h200(client: TestClient, clock: SteppedClock, name: str) -> tuple[str, dict, str]:
    """A funded tenant whose daily spend cap lets one H200 GPU run till midnight but not two, with one
    running: (tenant id, its headers, that rental's id)."""
    tenant_id, headers = _funded_tenant(client, name)
    now = clock.now()
    hours_left = (
        now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now
    ) / timedelta(hours=1)
    cap = {"daily_cap_micros": int(2_990_000 * hours_left * 1.5)}  # one H200 fits, two do not
    assert client.put(f"/v1/tenants/{tenant_id}/limits", json=cap, headers=ADMIN).status_code == 200
    one = client.post("/v1/rentals", json={"gpu_model": "H200", "gpus": 1}, headers=headers).json()["id"]
    assert wait_for(client, one, headers, "placed")["state"] == "placed"
    return tenant_id, headers, one


def test_a_growth_a_spend_cap_holds_back_says_so_once_not_every_cycle(database_url: str) -> None:
    """The cap's message holds money that moves each cycle (spent so far, what the growth adds till
    midnight); the growth's `growing` event was written again whenever it moved, thousands a day."""
    clock = SteppedClock().clear_of_midnight()
    with app_client(database_url, clock=clock) as client:
        _, headers, one = _capped_with_one_h200(client, clock, "capped-growth")
        assert client.patch(f"/v1/rentals/{one}", json={"gpus": 2}, headers=headers).status_code == 200
        for _ in range(6):
            clock.step_to(clock.now() + timedelta(seconds=5))
            scheduler_cycles(client)
        body = client.get(f"/v1/rentals/{one}", headers=headers).json()
        growing = [e for e in body["events"] if e["kind"] == "growing"]
        assert len(growing) == 1 and growing[0]["reason"] == "spend_cap", growing
        assert len(body["allocation"][0]["slices"]) == 1


@pytest.mark.parametrize("queue", ["greedy", "backfill"])
def test_a_quota_message_reads_the_gpus_in_use_now_without_another_event(
    database_url: str, queue: str, monkeypatch
) -> None:
    """A rental waiting on its quota said the GPUs in use when it began to wait, for good: the message was
    written only with the reason. Now another rental of its tenant ending rewrites it at the next cycle (the
    API and `suanli show` read it), and its `pending` events stay one (written when the reason became
    `quota`)."""
    with app_client(database_url, queue=queue) as client:
        tenant_id, headers = _funded_tenant(client, "recount")
        quota = {"gpu_quota": {"*": 10}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        running = []
        for gpus in (8, 2):
            spec = {"gpu_model": "H100-SXM-80GB", "gpus": gpus, "max_duration_s": 3600}
            rental_id = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
            assert wait_for(client, rental_id, headers, "placed")["state"] == "placed"
            running.append(rental_id)
        spec = {"gpu_model": "H100-SXM-80GB", "gpus": 4, "max_duration_s": 3600}
        waiting = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        held = wait_for(client, waiting, headers, "placed", reason="quota")
        assert "GPU quota 10 GPUs, 10 in use, asks 4" in (held.get("pending_message") or ""), held
        assert client.post(f"/v1/rentals/{running[1]}/stop", headers=headers).json()["state"] == "stopped"
        scheduler_cycles(client)
        body = client.get(f"/v1/rentals/{waiting}", headers=headers).json()
        assert body["state"] == "pending" and body["pending_reason"] == "quota", body
        assert "GPU quota 10 GPUs, 8 in use, asks 4" in (body.get("pending_message") or ""), body
        assert [e["reason"] for e in body["events"] if e["kind"] == "pending"] == ["quota"], body["events"]
        key = headers["Authorization"].removeprefix("Bearer ")
        monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, key))
        shown = CliRunner().invoke(app, ["show", waiting], env={"COLUMNS": "200"})
        assert shown.exit_code == 0 and "waiting: " in shown.output, shown.output
        assert "GPU quota 10 GPUs, 8 in use, asks 4" in shown.output, shown.output


def test_a_spend_cap_message_follows_the_money_with_one_pending_event(database_url: str) -> None:
    """A spend cap's figures move every cycle (what the running rental and this one add till midnight): the
    message follows them, and the rental's `pending` event is still written once, not each cycle."""
    clock = SteppedClock().clear_of_midnight()
    with app_client(database_url, clock=clock) as client:
        _, headers, _ = _capped_with_one_h200(client, clock, "capped-wait")
        two = client.post("/v1/rentals", json={"gpu_model": "H200", "gpus": 1}, headers=headers).json()["id"]
        assert wait_for(client, two, headers, "placed", reason="spend_cap")["pending_reason"] == "spend_cap"
        said = set()
        for _ in range(4):
            clock.step_to(clock.now() + timedelta(seconds=60))
            scheduler_cycles(client)
            said.add(client.get(f"/v1/rentals/{two}", headers=headers).json().get("pending_message"))
        body = client.get(f"/v1/rentals/{two}", headers=headers).json()
        assert body["state"] == "pending" and len(said) == 4 and "daily" in body["pending_message"], said
        assert [e["reason"] for e in body["events"] if e["kind"] == "pending"] == ["spend_cap"], body[
            "events"
        ]


def test_a_spend_cap_counts_what_a_running_rental_ran_up_since_the_meter_last_posted(
    database_url: str,
) -> None:
    """A cap counted the ledger's charges and each running rental's cost from now on, so the time since the
    meter last posted (its interval, and a live rental is posted only to its nodes' last heartbeat) was in
    neither, and a cap could be passed by that much. Here the meter does not run for half an hour: the
    tenant's spend reads the half hour its rental ran, and a second rental that fits the cap only without it
    waits with reason spend_cap."""
    clock = SteppedClock().clear_of_midnight()
    with app_client(database_url, clock=clock, meter_interval_s=86_400) as client:
        tenant_id, headers = _funded_tenant(client, "unposted")
        spec = {"gpu_model": "H200", "gpus": 1}
        one = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        rate = wait_for(client, one, headers, "placed")["price_micros_per_hour"]
        clock.step_to(clock.now() + timedelta(minutes=30))
        spent = client.get("/v1/limits", headers=headers).json()["spent_today_micros"]
        assert rate // 2 <= spent <= rate // 2 + rate // 600, (spent, rate)  # 30 min, within 6 s of clock
        now = clock.now()
        hours_left = (
            now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now
        ) / timedelta(hours=1)
        cap = {
            "daily_cap_micros": int(rate * (2 * hours_left + 0.25))
        }  # both till midnight, not the half hour
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=cap, headers=ADMIN).status_code == 200
        scheduler_cycles(client, 1)  # a cycle that read the limits before the cap does not see `two`
        two = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        held = wait_for(client, two, headers, "placed", reason="spend_cap")
        assert held["state"] == "pending" and held["pending_reason"] == "spend_cap", held
        assert client.post(f"/v1/rentals/{one}/stop", headers=headers).json()["state"] == "stopped"
        assert wait_for(client, two, headers, "placed")["state"] == "placed"


def test_a_transfer_past_the_buyers_spend_cap_is_refused_charging_no_one(client: TestClient) -> None:
    """An admin transfers a priced contract to a tenant whose daily cap its remaining value would pass: 409
    `over_spend_limit` naming `to_tenant_id`, nothing charged, the contract still the seller's; without the
    cap it moves. A contract for a model the region lacks names `gpu_model`; an ended one's end is a date."""
    from datetime import UTC, datetime, timedelta

    _, seller = _funded_tenant(client, "seller")
    buyer_id, buyer = _funded_tenant(client, "buyer")
    start = (datetime.now(UTC) + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    window = {"gpu_model": "H100-SXM-80GB", "count": 1, "region": "cn-north"}
    window |= {"starts_at": start.isoformat(), "ends_at": (start + timedelta(hours=1)).isoformat()}
    contract = client.post("/v1/contracts", json=window, headers=seller).json()
    cap = {"daily_cap_micros": contract["price_micros"] - 1}
    assert client.put(f"/v1/tenants/{buyer_id}/limits", json=cap, headers=ADMIN).status_code == 200
    balances = [client.get("/v1/balance", headers=h).json() for h in (seller, buyer)]
    moved = client.post(
        f"/v1/contracts/{contract['id']}/transfer", json={"to_tenant_id": buyer_id}, headers=ADMIN
    )
    assert moved.status_code == 409, moved.text
    assert (moved.json()["error"]["code"], moved.json()["error"]["field"]) == (
        "over_spend_limit",
        "to_tenant_id",
    )
    assert "daily spend cap" in moved.json()["error"]["message"]
    assert [client.get("/v1/balance", headers=h).json() for h in (seller, buyer)] == balances
    assert [c["id"] for c in client.get("/v1/contracts", headers=seller).json()] == [contract["id"]]
    assert client.put(f"/v1/tenants/{buyer_id}/limits", json={}, headers=ADMIN).status_code == 200
    moved = client.post(
        f"/v1/contracts/{contract['id']}/transfer", json={"to_tenant_id": buyer_id}, headers=ADMIN
    )
    assert moved.status_code == 200, moved.text
    lacking = client.post("/v1/contracts/quote", json=window | {"region": "eu-west"}, headers=buyer)
    assert lacking.status_code == 409 and lacking.json()["error"]["field"] == "gpu_model", lacking.text


def test_an_elastic_rental_grows_within_a_spend_cap_its_full_size_fits(database_url: str) -> None:
    """An H200 rental of 2 GPUs down to 1, declared 1 h at its full size, starts on the one GPU free (2 h at
    that size): 5.98 committed under a 7.00 daily cap. When the other GPU frees it grows: its limit comes
    back to an hour away, so it commits no more. It was held by the cap, its added GPU charged as another
    rental to the stretched limit ("this rental adds 5.9800")."""
    clock = SteppedClock()
    tomorrow = clock.now() + timedelta(days=1)
    clock.step_to(tomorrow.replace(hour=6, minute=0, second=0, microsecond=0))  # all of it inside one day
    with app_client(database_url, clock=clock) as client:
        tenant_id, headers = _funded_tenant(client, "elastic-capped")
        _, other = _funded_tenant(client, "other")
        h200 = {"gpu_model": "H200", "max_duration_s": 3600}
        seven = client.post("/v1/rentals", json={**h200, "gpus": 7}, headers=other).json()["id"]
        assert wait_for(client, seven, other, "placed")["state"] == "placed"
        cap = {"daily_cap_micros": 7_000_000}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=cap, headers=ADMIN).status_code == 200
        body = {**h200, "gpus": 2, "min_gpus": 1}
        elastic = client.post("/v1/rentals", json=body, headers=headers).json()["id"]
        placed = wait_for(client, elastic, headers, "placed")
        assert len(placed["allocation"][0]["slices"]) == 1, placed
        assert client.post(f"/v1/rentals/{seven}/stop", headers=other).status_code == 200
        scheduler_cycles(client)
        deadline = clock.now() + timedelta(seconds=WAIT_S)
        while clock.now() < deadline:
            grown = client.get(f"/v1/rentals/{elastic}", headers=headers).json()
            if len(grown["allocation"][0]["slices"]) == 2:
                break
            scheduler_cycles(client)
        assert len(grown["allocation"][0]["slices"]) == 2, [e["message"] for e in grown["events"]]
        limit = datetime.fromisoformat(grown["time_limit_at"])
        assert limit - clock.now() < timedelta(hours=1), grown


def test_an_elastic_rental_held_back_gets_one_pending_event_and_keeps_its_reason(database_url: str) -> None:
    """An elastic rental (8 GPUs, at least 2) under a 4-GPU quota, in a pool another tenant's contract
    holds: the cycle tried it at each size, and each said why it waited (quota at 8, the hold at its least
    size); every one wrote a `pending` event, several a cycle, and its reason flipped between the two cycle
    after cycle. Now: one event, for its least size's reason, however many cycles."""
    from datetime import UTC

    with app_client(database_url) as client:
        _, holder = _funded_tenant(client, "holds-h200")
        start = datetime.now(UTC)
        window = {"gpu_model": "H200-141GB", "count": 8, "region": "eu-west"}
        body = {**window, "starts_at": start.isoformat(), "ends_at": (start + timedelta(hours=1)).isoformat()}
        assert client.post("/v1/contracts", json=body, headers=holder).status_code == 201
        tenant_id, headers = _funded_tenant(client, "elastic-h200")
        quota = {"gpu_quota": {"H200": 4}}
        assert client.put(f"/v1/tenants/{tenant_id}/limits", json=quota, headers=ADMIN).status_code == 200
        spec = {"gpu_model": "H200", "gpus": 8, "min_gpus": 2, "regions": ["eu-west"]}
        rental_id = client.post("/v1/rentals", json=spec, headers=headers).json()["id"]
        wait_for(client, rental_id, headers, "placed", reason="contract_hold")
        scheduler_cycles(client, 5)
        body = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        pending = [e for e in body["events"] if e["kind"] == "pending"]
        assert [e["reason"] for e in pending] == ["contract_hold"], pending
        assert body["pending_reason"] == "contract_hold", body
