"""Spend over midnight through the real app with a hand-moved clock (SQLite and PostgreSQL): the seconds a
rental ran before midnight count toward that day and month, whether the meter has posted them or not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conftest import ADMIN, make_tenant, meter_pass_at, replayed, wait_for

H100_ON_DEMAND = 2_990_000  # micros per hour
MIDNIGHT = datetime(2027, 1, 1, tzinfo=UTC)


def test_usage_before_midnight_the_meter_posts_late_counts_toward_the_day_it_was_run_up_in(
    database_url: str,
) -> None:
    """A tenant with its own daily budget of 4.00 that stops running rentals rents 1 x H100 (2.99 per hour)
    at 22:45 on Dec 31; the meter passes at 23:00, then not until 01:00 (a gap over midnight). On Jan 1 it
    has run up 2.99 (one hour): its spend today and this month say so before the pass and after it, and the
    budget leaves the rental running. The meter posts the hour before midnight on Dec 31 (dated 23:59:59)
    and the hour after on Jan 1, so each invoice holds its own seconds. The whole backlog counted as Jan 1's
    spend (5.98 of 4.00), the budget stopped the rental, and January's invoice held 2 h for 1 h of use."""
    placed_at = MIDNIGHT - timedelta(hours=1, minutes=15)
    with replayed(database_url, placed_at) as (client, clock):
        tenant_id, headers = make_tenant(client, "night")
        credit = {"amount_micros": 1_000_000_000}
        assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
        budget = {"daily_micros": 4_000_000, "stop_running": True}
        assert client.put("/v1/budget", json=budget, headers=headers).status_code == 200
        rental = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 1}, headers=headers).json()
        wait_for(client, rental["id"], headers, "placed")
        meter_pass_at(client, clock, MIDNIGHT - timedelta(hours=1))  # 15 min: 747,500

        one_am = MIDNIGHT + timedelta(hours=1)
        clock.advance(one_am - clock.now())  # the meter is down over midnight
        spent = client.get("/v1/limits", headers=headers).json()
        assert (spent["spent_today_micros"], spent["spent_month_micros"]) == (H100_ON_DEMAND, H100_ON_DEMAND)
        client.app.state.services.meter.work()
        spent = client.get("/v1/limits", headers=headers).json()
        assert (spent["spent_today_micros"], spent["spent_month_micros"]) == (H100_ON_DEMAND, H100_ON_DEMAND)
        body = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
        assert body["state"] == "placed", body["events"]

        charges = [t for t in client.get("/v1/ledger", headers=headers).json() if t["kind"] == "charge"]
        last_second = int(MIDNIGHT.timestamp()) - 1
        assert [t["at_s"] for t in charges] == [
            int((MIDNIGHT - timedelta(hours=1)).timestamp()),
            last_second,
            int(one_am.timestamp()),
        ]
        december = client.get("/v1/invoices/2026-12", headers=headers).json()
        january = client.get("/v1/invoices/2027-01", headers=headers).json()
        assert december["total_micros"] == 747_500 + H100_ON_DEMAND  # 22:45 to midnight: 1 h 15 min
        assert january["total_micros"] == H100_ON_DEMAND  # midnight to 01:00
