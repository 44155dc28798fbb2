"""POST /v1/rentals/dry-run through the real app (SQLite and PostgreSQL): where a rental would start now and
at what rate, whom it would preempt, or why it would wait, with nothing created and the leader's snapshot
left as it was."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from conftest import (
    ADMIN,
    WAIT_S,
    SteppedClock,
    app_client,
    h100_contract,
    logged_in_as,
    make_tenant,
    register_agent,
    scheduler_cycles,
    wait_for,
)
from suanli.app.errors import RateLimited
from suanli.app.rate_limits import RateLimit
from suanli.domain.billing.money import charge_micros

H200 = {"gpu_model": "H200", "gpus": 8, "command": ["sleep", "600"]}  # the example fleet has one H200 node


def _layout(snapshot) -> str:
    return repr([(state.name, state.gpus) for state in snapshot.nodes])


def _dry_run(client: TestClient, body: dict, headers: dict[str, str]) -> dict:
    response = client.post("/v1/rentals/dry-run", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_dry_run_says_where_and_at_what_rate_and_creates_nothing(client: TestClient, tenant) -> None:
    _, headers = tenant("planner")
    trial = _dry_run(client, {**H200, "max_duration_s": 7200}, headers)
    assert trial["starts_now"] and trial["nodes"] == ["h200-01"], trial
    assert trial["pending_reason"] is None and trial["preempts"] == 0 and trial["rentals_waiting"] == 0
    assert trial["max_cost_micros"] == charge_micros(trial["price_micros_per_hour"], 7200)
    assert client.get("/v1/rentals", headers=headers).json() == []  # nothing made
    mig = {"gpu_model": "A100-80GB", "mig_profile": "3g.40gb", "command": ["true"]}
    scheduler = client.app.state.services.scheduler
    scheduler_cycles(client)
    before = _layout(scheduler.snapshot)
    mig_trial = _dry_run(client, mig, headers)  # lays out an instance in the trial, taken back after it
    assert mig_trial["starts_now"], mig_trial
    assert _layout(scheduler.snapshot) == before  # every GPU's free share and MIG layout as they were
    real_mig = client.post("/v1/rentals", json=mig, headers=headers).json()
    assert [
        a["node"] for a in wait_for(client, real_mig["id"], headers, "placed")["allocation"]
    ] == mig_trial["nodes"]
    real = client.post("/v1/rentals", json={**H200, "max_duration_s": 7200}, headers=headers).json()
    placed = wait_for(client, real["id"], headers, "placed")  # the trial left the H200s free
    assert [a["node"] for a in placed["allocation"]] == trial["nodes"]
    assert placed["price_micros_per_hour"] == trial["price_micros_per_hour"]
    assert trial["quote_micros_per_hour"] == real["quote"]["final_micros_per_hour"]

    busy = _dry_run(client, {**H200, "gpus": 1}, headers)
    assert not busy["starts_now"] and busy["nodes"] == [], busy
    assert busy["pending_reason"] == "no_capacity" and busy["message"], busy
    too_big = client.post("/v1/rentals/dry-run", json={**H200, "gpus": 9}, headers=headers)
    assert too_big.status_code == 400 and too_big.json()["error"]["field"] == "gpus", too_big.text


def test_a_dry_run_names_the_limit_that_would_hold_it_and_the_victims_it_would_preempt(
    client: TestClient, tenant
) -> None:
    spot_id, spot = tenant("spot")
    client.post(f"/v1/tenants/{spot_id}/credit", json={"amount_micros": 50_000_000}, headers=ADMIN)
    cheap = client.post("/v1/rentals", json={**H200, "tier": "spot"}, headers=spot).json()
    wait_for(client, cheap["id"], spot, "placed")

    _, urgent = tenant("urgent")
    preempting = _dry_run(client, H200, urgent)
    assert not preempting["starts_now"] and preempting["preempts"] == 1, preempting
    assert client.get(f"/v1/rentals/{cheap['id']}", headers=spot).json()["state"] == "placed"  # no notice

    # the holder of an open contract for the node's 8 H200s would preempt it too, and pay nothing there
    urgent_id = client.get("/v1/limits", headers=urgent).json()["tenant_id"]
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{urgent_id}/credit", json=credit, headers=ADMIN).status_code == 201
    now = datetime.now(UTC)
    window = {"starts_at": now.isoformat(), "ends_at": (now + timedelta(hours=1)).isoformat()}
    contract = {"gpu_model": "H200-141GB", "count": 8, "region": "eu-west", **window}
    assert client.post("/v1/contracts", json=contract, headers=urgent).status_code == 201, contract
    covered = _dry_run(client, H200, urgent)
    assert covered["preempts"] == 1 and covered["price_micros_per_hour"] == 0, covered
    assert covered["contract_covered_gpus"] == 8, covered

    quota = {"gpu_quota": {"*": 8}}
    assert client.put(f"/v1/tenants/{spot_id}/limits", json=quota, headers=ADMIN).status_code == 200
    held = _dry_run(client, {**H200, "gpu_model": "H100", "gpus": 1}, spot)
    assert held["pending_reason"] == "quota" and "quota 8 GPUs" in held["message"], held


def test_under_backfill_a_dry_run_waits_behind_the_blocked_head_unless_it_ends_before_its_start(
    database_url: str, monkeypatch
) -> None:
    """Half of the H200 node is rented for at most an hour. Asked for alone, the whole node would head the
    backfill queue, reserved for when that rental ends. Once a wide rental heads it so, one more GPU fits
    now, yet a rental that declares no duration waits behind the head (it never passes it), as does one that
    would still run at the head's start; one that ends before it starts now (backfill). Each answer is the
    cycle's: a rental created so waits or starts alike."""
    with app_client(database_url, queue="backfill") as client:
        tenant_id, headers = make_tenant(client, "backfiller")
        credit = {"amount_micros": 10**12}
        assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
        half = {**H200, "gpus": 4, "max_duration_s": 3600}
        first = client.post("/v1/rentals", json=half, headers=headers).json()
        placed = wait_for(client, first["id"], headers, "placed")
        (event,) = [e for e in placed["events"] if e["kind"] == "placed"]
        first_ends = datetime.fromisoformat(event["at"]) + timedelta(hours=1)

        heading = _dry_run(client, {**H200, "max_duration_s": 600}, headers)
        assert heading["pending_reason"] == "no_capacity" and heading["head_start_at"] is None, heading
        assert abs(datetime.fromisoformat(heading["expected_start_at"]) - first_ends) < timedelta(seconds=1)

        wide = client.post("/v1/rentals", json={**H200, "max_duration_s": 600}, headers=headers).json()["id"]
        deadline, url = time.monotonic() + WAIT_S, f"/v1/rentals/{wide}"
        while (head := client.get(url, headers=headers).json())["expected_start_at"] is None:
            assert time.monotonic() < deadline, head  # the cycle reserved its start
            time.sleep(0.02)
        head_start = datetime.fromisoformat(head["expected_start_at"])
        assert head["pending_reason"] == "no_capacity" and abs(head_start - first_ends) < timedelta(seconds=1)

        one = {**H200, "gpus": 1}

        endless = _dry_run(client, one, headers)
        assert not endless["starts_now"] and endless["pending_reason"] == "blocked_by_head", endless
        assert endless["message"] == "no declared duration: cannot backfill", endless
        shown = datetime.fromisoformat(endless["head_start_at"])
        assert abs(shown - head_start) < timedelta(seconds=1) and endless["expected_start_at"] is None
        assert endless["rentals_waiting"] == 1, endless

        short = _dry_run(client, {**one, "max_duration_s": 600}, headers)
        assert short["starts_now"] and short["nodes"] == ["h200-01"], short
        assert short["pending_reason"] is None and short["head_start_at"] is None

        long = _dry_run(client, {**one, "max_duration_s": 7200}, headers)
        assert not long["starts_now"] and long["pending_reason"] == "blocked_by_head", long
        assert "would delay the head's reserved start at" in long["message"], long
        assert abs(datetime.fromisoformat(long["head_start_at"]) - head_start) < timedelta(seconds=1)

        # the dry runs changed nothing: the head keeps its reservation, and the cycle agrees with them
        assert client.get(f"/v1/rentals/{wide}", headers=headers).json()["pending_reason"] == "no_capacity"
        made = client.post("/v1/rentals", json={**one, "max_duration_s": 7200}, headers=headers).json()
        assert wait_for(client, made["id"], headers, "placed", reason="blocked_by_head")["state"] == "pending"

        from typer.testing import CliRunner

        from suanli.cli import platform_commands
        from suanli.cli.main import app

        key = headers["Authorization"].split()[1]
        monkeypatch.setattr(platform_commands, "logged_in", logged_in_as(client, key))
        printed = CliRunner().invoke(
            app, ["rent", "H200:1", "--dry-run", "--", "true"], env={"COLUMNS": "200"}
        )
        assert printed.exit_code == 0, printed.output
        said = " ".join(printed.output.split())  # the console may fold long lines at its width
        assert said.startswith("would wait (blocked_by_head): no declared duration: cannot backfill"), said
        at = f"{head_start:%Y-%m-%d %H:%M} UTC"
        assert f"behind the head of the queue, whose capacity is reserved from {at}" in said, said
        assert "2 rentals are waiting; judged in the queue's order with them" in said, said


def _funded(client: TestClient, name: str) -> tuple[str, dict[str, str]]:
    """A new tenant with credit for any test rental: its id and auth headers."""
    tenant_id, headers = make_tenant(client, name)
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    return tenant_id, headers


def _placed(client: TestClient, body: dict, headers: dict[str, str]) -> tuple[dict, datetime]:
    """Rent `body` and wait until it is placed: the rental, and when it was placed."""
    created = client.post("/v1/rentals", json=body, headers=headers)
    assert created.status_code == 201, created.text
    placed = wait_for(client, created.json()["id"], headers, "placed")
    return placed, _last_event_at(placed, "placed")


def _last_event_at(rental: dict, kind: str) -> datetime:
    return datetime.fromisoformat([e for e in rental["events"] if e["kind"] == kind][-1]["at"])


def test_a_rental_being_stopped_frees_its_gpus_now_in_the_heads_reservation(database_url: str) -> None:
    """While a rental is `stopping` (its agent has not confirmed yet) its GPUs are about to free: the
    blocked head keeps its reserved start and a short rental still backfills, rather than the head's start
    becoming unbounded (the stopping rental was left out of the running ones while it still held GPUs)."""
    with app_client(database_url, queue="backfill") as client:
        _, headers = _funded(client, "stopper")
        _, first_at = _placed(client, {**H200, "gpus": 4, "max_duration_s": 3600}, headers)
        first_ends = first_at + timedelta(hours=1)
        second, _ = _placed(client, {**H200, "gpus": 2, "max_duration_s": 1800}, headers)
        wide = client.post("/v1/rentals", json={**H200, "max_duration_s": 600}, headers=headers).json()["id"]
        deadline, url = time.monotonic() + WAIT_S, f"/v1/rentals/{wide}"
        while client.get(url, headers=headers).json()["expected_start_at"] is None:
            assert time.monotonic() < deadline  # the cycle reserved its start
            time.sleep(0.02)

        agent = register_agent(client, "h200-01")
        report = {"workloads": [{"rental_id": second["id"], "state": "running"}]}
        assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200
        stopped = client.post(f"/v1/rentals/{second['id']}/stop", headers=headers).json()
        assert stopped["state"] == "stopping", stopped  # until its agent says it stopped
        scheduler_cycles(client, 2)
        head = client.get(url, headers=headers).json()
        assert head["expected_start_at"] is not None, head
        assert abs(datetime.fromisoformat(head["expected_start_at"]) - first_ends) < timedelta(seconds=1)
        short = _dry_run(client, {**H200, "gpus": 1, "max_duration_s": 600}, headers)
        assert short["starts_now"], short
        endless = _dry_run(client, {**H200, "gpus": 1}, headers)
        assert endless["message"] == "no declared duration: cannot backfill", endless
        # one held back by a limit, not the head, is not said to wait behind it
        other_id, other = _funded(client, "capped")
        cap = {"daily_cap_micros": 1}
        assert client.patch(f"/v1/tenants/{other_id}/limits", json=cap, headers=ADMIN).status_code == 200
        limited = _dry_run(client, {**H200, "gpus": 1, "max_duration_s": 600}, other)
        assert limited["pending_reason"] == "spend_cap" and limited["head_start_at"] is None, limited


def test_a_stop_its_agent_does_not_confirm_is_billed_no_further_and_frees_nothing_now(
    database_url: str,
) -> None:
    """An agent that never confirms a stop (hung, or a workload that will not die): the rental stays
    `stopping` and holds its GPUs. It was billed until the confirmation, for as long as the agent hung, and
    the blocked head counted on its GPUs freeing now, cycle after cycle. Past `STOP_CONFIRM_S` it is billed
    no further, and the head counts on its time limit instead."""
    clock = SteppedClock()
    # heartbeats 20 s apart on the stepped clock: a timeout (3 intervals) longer than that, or the reaper, run
    # between a step and the next heartbeat, marks the node down and ends the rental (one CI run in many)
    beats = {"agent_heartbeat_interval_s": 60.0}
    with app_client(database_url, clock=clock, queue="backfill", meter_interval_s=86_400, **beats) as client:
        _, headers = _funded(client, "hung")
        _, first_at = _placed(client, {**H200, "gpus": 4, "max_duration_s": 900}, headers)
        first_ends = first_at + timedelta(seconds=900)
        placed, second_at = _placed(client, {**H200, "gpus": 2, "max_duration_s": 1800}, headers)
        second, second_ends = placed["id"], second_at + timedelta(seconds=1800)
        wide = client.post("/v1/rentals", json={**H200, "max_duration_s": 600}, headers=headers).json()["id"]
        agent = register_agent(client, "h200-01")
        report = {"workloads": [{"rental_id": second, "state": "running"}]}
        assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200
        ran_from = clock.now()
        assert client.post(f"/v1/rentals/{second}/stop", headers=headers).json()["state"] == "stopping"
        asked = _last_event_at(client.get(f"/v1/rentals/{second}", headers=headers).json(), "stopping")
        scheduler_cycles(client, 2)
        head = client.get(f"/v1/rentals/{wide}", headers=headers).json()
        assert abs(datetime.fromisoformat(head["expected_start_at"]) - first_ends) < timedelta(seconds=1), (
            head
        )
        for _ in range(9):  # 180 s of heartbeats that still report it running: the stop is never confirmed
            clock.step_to(clock.now() + timedelta(seconds=20))
            assert client.post("/v1/agents/heartbeat", json=report, headers=agent).status_code == 200
        scheduler_cycles(client, 2)
        hung = client.get(f"/v1/rentals/{second}", headers=headers).json()
        assert hung["state"] == "stopping"
        (told,) = [e for e in hung["events"] if e["kind"] == "stop_overdue"]  # once, however many cycles
        assert "have not confirmed the stop" in told["message"] and "GPUs stay held" in told["message"]
        head = client.get(f"/v1/rentals/{wide}", headers=headers).json()
        assert abs(datetime.fromisoformat(head["expected_start_at"]) - second_ends) < timedelta(seconds=1), (
            head
        )
        client.app.state.services.billing.meter()
        charged = client.get(f"/v1/rentals/{second}", headers=headers).json()["charged_micros"]
        rate = placed["price_micros_per_hour"]
        billed_s = (asked - ran_from).total_seconds() + 120
        assert abs(charged - charge_micros(rate, round(billed_s))) <= charge_micros(rate, 2), (charged, rate)


def test_under_the_greedy_queue_a_dry_run_starts_where_it_fits_whatever_waits(
    client: TestClient, tenant
) -> None:
    """The greedy queue holds no one back for a rental that waits: with the whole H200 node asked for and 4
    of its GPUs rented, one more GPU starts now without declaring a duration; five wait for capacity."""
    tenant_id, headers = tenant("greedy")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    first = client.post("/v1/rentals", json={**H200, "gpus": 4}, headers=headers).json()
    wait_for(client, first["id"], headers, "placed")
    wide = client.post("/v1/rentals", json=H200, headers=headers).json()
    assert wait_for(client, wide["id"], headers, "placed", reason="no_capacity")["state"] == "pending"
    trial = _dry_run(client, {**H200, "gpus": 1}, headers)
    assert trial["starts_now"] and trial["nodes"] == ["h200-01"] and trial["rentals_waiting"] == 1, trial
    assert trial["head_start_at"] is None and trial["expected_start_at"] is None
    again = _dry_run(client, {**H200, "gpus": 5}, headers)
    assert again["pending_reason"] == "no_capacity" and again["head_start_at"] is None, again


def test_a_bad_dry_run_fails_as_creating_it_would(client: TestClient, tenant) -> None:
    _, headers = tenant("typo")
    for body in ({**H200, "gpu_model": "H900"}, {**H200, "tier": "spot", "bid_micros_per_gpu_hour": -1}):
        trial = client.post("/v1/rentals/dry-run", json=body, headers=headers)
        create = client.post("/v1/rentals", json=body, headers=headers)
        assert trial.status_code == create.status_code and trial.status_code in (400, 422), trial.text
        assert trial.json()["error"]["field"] == create.json()["error"]["field"]
    assert client.post("/v1/rentals/dry-run", json=H200).status_code == 401


def test_rent_dry_run_prints_what_would_happen_and_creates_nothing(
    client: TestClient, tenant, monkeypatch
) -> None:
    from typer.testing import CliRunner

    from suanli.cli import platform_commands
    from suanli.cli.main import app

    _, headers = tenant("cli")
    key = headers["Authorization"].split()[1]
    as_cli = logged_in_as(client, key)
    monkeypatch.setattr(platform_commands, "logged_in", lambda options=None: as_cli(options))
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    shown = runner.invoke(app, ["rent", "H200:8", "--max-duration", "2h", "--dry-run", "--", "true"], env=env)
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.output.split())  # the console may fold long lines at its width
    assert said.startswith("would start now on h200-01 at ") and "to its time limit)" in said, said
    assert said.endswith("dry run: nothing was created")
    too_many = runner.invoke(app, ["rent", "H200:9", "--dry-run", "--json"], env=env)
    assert too_many.exit_code == 1, too_many.output  # refused, as a rental of 9 would be: no node has 9
    said = " ".join(too_many.output.split())
    assert "SPEC (GPUs): no matching node has 9 GPUs (at most 8 on one node)" in said, said
    region = runner.invoke(app, ["rent", "H200:1", "--region", "mars", "--dry-run"], env=env)
    assert region.exit_code == 1, region.output  # refused, as a rental there would be: it never runs
    assert "no region mars in the fleet; its regions: ap-southeast" in " ".join(region.output.split())
    both = runner.invoke(app, ["rent", "H200:1", "--dry-run", "-f", "--", "true"], env=env)
    assert both.exit_code == 2 and "--dry-run creates nothing to --follow" in both.output
    assert client.get("/v1/rentals", headers=headers).json() == []


def test_a_rate_limit_counts_every_window_and_says_when_to_come_back() -> None:
    limit = RateLimit("2/second;3/minute", "dry runs")
    limit.hit("ten_a")
    limit.hit("ten_a")
    try:
        limit.hit("ten_a")
    except RateLimited as refused:
        assert refused.retry_after_s == 1 and "at most 2/second;3/minute" in refused.message
    else:
        raise AssertionError("a third hit in one second passed")
    limit.hit("ten_b")  # each key counts its own
    RateLimit("", "dry runs").hit("ten_a")  # no limit


def test_dry_runs_past_the_tenants_rate_get_429_with_retry_after(database_url: str) -> None:
    with app_client(database_url, dry_run_rate="2/minute") as client:
        tenant_id = client.post("/v1/tenants", json={"name": "eager"}, headers=ADMIN).json()["id"]
        key = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()[
            "secret"
        ]
        headers = {"Authorization": f"Bearer {key}"}
        for _ in range(2):
            assert client.post("/v1/rentals/dry-run", json=H200, headers=headers).status_code == 200
        refused = client.post("/v1/rentals/dry-run", json=H200, headers=headers)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert (
            client.post("/v1/rentals/dry-run", json=H200, headers=ADMIN).status_code == 200
        )  # its own count
        assert (
            client.post("/v1/rentals", json=H200, headers=headers).status_code == 201
        )  # renting is not limited


def test_a_family_is_quoted_at_a_model_the_fleet_has_not_the_dearest_of_the_catalogue(
    client: TestClient, tenant
) -> None:
    """`H100` names the family; the fleet has only H100-SXM-80GB, of which the tenant holds a contract for
    4. Its 8-GPU rental's creation quote (a waiting dry run's rate) was for the dearest H100 after
    coverage, H100-PCIe, which no node has, with nothing covered; it is the SXM's, 4 GPUs covered."""
    tenant_id, headers = tenant("family")
    funded = client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    assert funded.status_code == 201, funded.text
    body = h100_contract(datetime.now(UTC) - timedelta(minutes=1), hours=2, count=4)
    assert client.post("/v1/contracts", json=body, headers=headers).status_code == 201
    created = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 8}, headers=headers)
    assert created.status_code == 201, created.text
    quote = created.json()["quote"]
    assert quote["model"] == "H100-SXM-80GB" and quote["contract_covered_gpu_milli"] == 4000, quote


def test_a_gang_that_names_no_model_is_never_promised_or_placed_across_models(
    client: TestClient, tenant
) -> None:
    """cn-north has eight H100-SXM nodes and one Ascend node. With seven H100 nodes taken, one H100 and the
    Ascend are free: a two-node gang naming no model waits for two of one model (NCCL and HCCL ranks cannot
    form one communicator), in the dry run as in the cycle; nine nodes are refused, as no region has nine of
    one model. It had been promised and placed on the H100 and the Ascend."""
    tenant_id, headers = tenant("trainer")
    credit = {"amount_micros": 10**12}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    seven = {"gpu_model": "H100-SXM-80GB", "gpus": 8, "nodes": 7, "command": ["sleep", "600"]}
    busy = client.post("/v1/rentals", json=seven, headers=headers).json()
    assert wait_for(client, busy["id"], headers, "placed")["state"] == "placed"

    gang = {"gpus": 8, "nodes": 2, "regions": ["cn-north"], "command": ["sleep", "600"]}
    trial = _dry_run(client, gang, headers)
    assert not trial["starts_now"] and trial["nodes"] == [], trial
    assert trial["pending_reason"] == "gang_incomplete", trial
    waiting = client.post("/v1/rentals", json=gang, headers=headers).json()
    held = wait_for(client, waiting["id"], headers, "placed", reason="gang_incomplete")
    assert held["state"] == "pending" and held["pending_reason"] == "gang_incomplete", held

    nine = client.post("/v1/rentals/dry-run", json={**gang, "nodes": 9}, headers=headers)
    assert nine.status_code == 400 and nine.json()["error"]["field"] == "nodes", nine.text
    assert "of one GPU model in one region" in nine.json()["error"]["message"], nine.text
