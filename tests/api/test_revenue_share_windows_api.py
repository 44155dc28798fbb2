"""A revenue-share plan's window through the real app with a hand-moved clock (SQLite and PostgreSQL): a
running rental's rate follows the plan's discount from its start or end, as a membership's does, alone or
under a compute future's coverage; the money is exact to the micro and the providers' part of each hour's
charge is their share of what the plan in force then priced."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from conftest import ADMIN, charged, h100_contract, make_tenant, meter_pass_at, replayed, wait_for
from suanli.domain.billing.money import BASIS_POINTS

H100_ON_DEMAND = 2_990_000  # micros per hour
TWENTY_OFF = 2_392_000  # 2,990,000 - 598,000
COMMISSION_BP = 1500  # the server's default
NOON = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)
FIRST_HOUR = (NOON, NOON + timedelta(hours=1))
FROM_THE_SECOND_HOUR = (NOON + timedelta(hours=1), NOON + timedelta(days=30))


def _sharer(client: TestClient, start: datetime, end: datetime) -> tuple[str, dict[str, str], str]:
    """A tenant with credit on a revenue-share plan (20% off, 5% of revenue) over [start, end): its id,
    auth headers and the plan's label."""
    tenant_id, headers = make_tenant(client, "sharer")
    credit = {"amount_micros": 10_000_000_000}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    body = {"kind": "revenue_share", "discount_bp": 2000, "revenue_share_bp": 500}
    body |= {"starts_at": start.isoformat(), "ends_at": end.isoformat()}
    made = client.post(f"/v1/tenants/{tenant_id}/plans", json=body, headers=ADMIN)
    assert made.status_code == 201, made.text
    return tenant_id, headers, f"revenue_share {made.json()['id']}"


def _provider_part(charged_micros: int) -> int:
    """The providers' part of a cumulative charge: floor of it less the platform's commission."""
    return charged_micros * (BASIS_POINTS - COMMISSION_BP) // BASIS_POINTS


def _payouts(client: TestClient, rental_id: str) -> int:
    """What `GET /v1/payouts` owes all providers for the rental."""
    return sum(
        line["amount_micros"]
        for provider in client.get("/v1/payouts", headers=ADMIN).json()
        for line in provider["lines"]
        if line["ref"] == rental_id
    )


@pytest.mark.parametrize(
    ("window", "hourly"),
    [
        (FIRST_HOUR, [TWENTY_OFF, H100_ON_DEMAND, H100_ON_DEMAND]),
        (FROM_THE_SECOND_HOUR, [H100_ON_DEMAND, TWENTY_OFF, TWENTY_OFF]),
    ],
    ids=["plan-ends-after-1h", "plan-starts-after-1h"],
)
def test_a_revenue_share_plan_re_prices_a_running_rental_at_its_start_and_end(
    database_url: str, window: tuple[datetime, datetime], hourly: list[int]
) -> None:
    """A 3-h on-demand rental of 1 x H100 from 12:00, its tenant on a revenue-share plan of 20% off for its
    first hour or from its second: each hour is charged at the rate of the plan in force then (or list),
    the providers get their part of each hour's charge (commission 15% of the cumulative charge, rounded
    down once), and the invoice names the plan on the hours it priced. The re-pricing and the payouts
    passed on the code before this test (they were there, untested); the invoice's part needs its
    per-segment plans."""
    with replayed(database_url, NOON) as (client, clock):
        _, headers, label = _sharer(client, *window)
        rental = client.post("/v1/rentals", json={"gpu_model": "H100", "gpus": 1}, headers=headers).json()
        assert wait_for(client, rental["id"], headers, "placed")["price_micros_per_hour"] == hourly[0]
        paid = 0
        for hour, rate in enumerate(hourly, start=1):
            meter_pass_at(client, clock, NOON + timedelta(hours=hour))
            paid += rate
            assert charged(client, rental["id"], headers) == paid
            assert _payouts(client, rental["id"]) == _provider_part(paid)
        body = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
        assert body["price_micros_per_hour"] == hourly[-1]
        (line,) = client.get("/v1/invoices/2026-12", headers=headers).json()["lines"]
        named = [[d["label"] for d in s["discounts"]] for s in line["segments"]]
        assert named == [[label] if rate == TWENTY_OFF else [] for rate in (hourly[0], hourly[-1])]
        assert line["amount_micros"] == sum(hourly)
        assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True


THREE_LISTED = 3 * H100_ON_DEMAND  # 8,970,000
THREE_OFF = 7_176_000  # 8,970,000 less 20% (1,794,000)


@pytest.mark.parametrize(
    ("window", "future_hours", "hourly"),
    [
        (FROM_THE_SECOND_HOUR, 6, [H100_ON_DEMAND, TWENTY_OFF, TWENTY_OFF]),
        (FIRST_HOUR, 6, [TWENTY_OFF, H100_ON_DEMAND, H100_ON_DEMAND]),
        (FROM_THE_SECOND_HOUR, 1, [H100_ON_DEMAND, THREE_OFF, THREE_OFF]),
        (FIRST_HOUR, 1, [TWENTY_OFF, THREE_LISTED, THREE_LISTED]),
    ],
    ids=["plan-starts", "plan-ends", "plan-starts-as-future-ends", "plan-and-future-end-together"],
)
def test_a_revenue_share_window_re_prices_a_rental_its_compute_future_partly_covers(
    database_url: str, window: tuple[datetime, datetime], future_hours: int, hourly: list[int]
) -> None:
    """A holder of a contract for 2 H100s from 11:59 rents 3 from 12:00 (2 covered: it pays the base less
    the plan's discount, less 2/3 of that); its revenue-share plan (20% off) starts or ends at 13:00, where
    its contract ends too or not: each hour is charged at what the plan and the coverage in force then
    price (2,990,000 covered at list, 2,392,000 covered at 20% off, 7,176,000 and 8,970,000 uncovered), the
    providers get 85% of the cumulative charge rounded down. This passes on the code before it was
    written."""
    with replayed(database_url, NOON) as (client, clock):
        _, headers, label = _sharer(client, *window)
        future = h100_contract(NOON - timedelta(minutes=1), future_hours + 1 / 60, 2)
        assert client.post("/v1/contracts", json=future, headers=headers).status_code == 201
        three = {"gpu_model": "H100-SXM-80GB", "gpus": 3, "regions": ["cn-north"]}
        rental = client.post("/v1/rentals", json=three, headers=headers).json()
        placed = wait_for(client, rental["id"], headers, "placed")
        assert (placed["price_micros_per_hour"], placed["quote"]["contract_covered_gpu_milli"]) == (
            hourly[0],
            2000,
        )
        paid = 0
        for hour, rate in enumerate(hourly, start=1):
            meter_pass_at(client, clock, NOON + timedelta(hours=hour))
            paid += rate
            assert charged(client, rental["id"], headers) == paid
            assert _payouts(client, rental["id"]) == _provider_part(paid)
        quote = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()["quote"]
        in_force = window == FROM_THE_SECOND_HOUR
        assert quote["discounts"] == ([{"label": label, "micros_per_hour": 1_794_000}] if in_force else [])
        assert quote["final_micros_per_hour"] == hourly[-1]
        assert client.get("/v1/ledger/verify", headers=ADMIN).json()["ok"] is True
