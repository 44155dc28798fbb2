"""A plan's window through the real app with a hand-moved clock (SQLite and PostgreSQL): a running rental's
rate follows the membership in force each second, from the plan's start, end or renewal (the meter loop's
pass re-prices it there)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from fastapi.testclient import TestClient

from conftest import ADMIN, charged, make_tenant, meter_pass_at, replayed, wait_for

H100 = {"gpu_model": "H100", "gpus": 1}
H100_ON_DEMAND = 2_990_000  # micros per hour
HALF_OFF = 1_495_000  # 50% off 2,990,000
TEN_OFF = 2_691_000  # 2,990,000 - 299,000
TWENTY_OFF = 2_392_000  # 2,990,000 - 598,000
EVE = datetime(2026, 12, 31, 22, 0, tzinfo=UTC)
MIDNIGHT = datetime(2027, 1, 1, tzinfo=UTC)


def _member(client: TestClient, name: str, *windows: tuple[int, datetime, datetime]) -> dict[str, str]:
    """A tenant with credit, on a membership of (discount_bp, start, end) for each window."""
    tenant_id, headers = make_tenant(client, name)
    credit = {"amount_micros": 1_000_000_000}
    assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
    for discount_bp, start, end in windows:
        plan = {"kind": "membership", "discount_bp": discount_bp, "fee_micros": 0}
        body = {**plan, "starts_at": start.isoformat(), "ends_at": end.isoformat()}
        made = client.post(f"/v1/tenants/{tenant_id}/plans", json=body, headers=ADMIN)
        assert made.status_code == 201, made.text
    return headers


@pytest.mark.parametrize(
    ("window", "expected_micros"),
    [
        ((EVE, EVE + timedelta(hours=1)), HALF_OFF + 2 * H100_ON_DEMAND),  # 7,475,000
        ((EVE + timedelta(hours=1), EVE + timedelta(days=30)), H100_ON_DEMAND + 2 * HALF_OFF),  # 5,980,000
    ],
    ids=["membership-ends-after-1h", "membership-starts-after-1h"],
)
def test_a_running_rental_pays_the_membership_discount_only_while_the_membership_is_in_force(
    database_url: str, window: tuple[datetime, datetime], expected_micros: int
) -> None:
    """A 3-h rental on 1 x H100 (2,990,000 per hour) from 22:00, its tenant on 50% off for one of those
    hours: it pays that hour at 1,495,000 and the two others at list. It kept the rate it was placed at for
    all 3 h (ended: 4,485,000; started: 8,970,000)."""
    with replayed(database_url, EVE) as (client, clock):
        headers = _member(client, "member", (5000, *window))
        rental = client.post("/v1/rentals", json=H100, headers=headers).json()
        wait_for(client, rental["id"], headers, "placed")
        for hour in (1, 2, 3):
            meter_pass_at(client, clock, EVE + timedelta(hours=hour))
        assert charged(client, rental["id"], headers) == expected_micros


def test_a_renewal_to_another_plan_at_midnight_re_prices_a_running_rental_there(database_url: str) -> None:
    """Plan A (10% off) ends at midnight where plan B (20% off) starts: a rental placed at 23:00 pays
    2,691,000 for the hour before and 2,392,000 for the hour after (5,083,000), and from midnight its quote
    names plan B. It kept plan A's rate past its end (5,382,000)."""
    start = MIDNIGHT - timedelta(hours=1)
    with replayed(database_url, start) as (client, clock):
        headers = _member(
            client, "renewing", (1000, EVE, MIDNIGHT), (2000, MIDNIGHT, MIDNIGHT + timedelta(days=365))
        )
        plans = sorted(client.get("/v1/plans", headers=headers).json(), key=lambda p: p["starts_at"])
        rental = client.post("/v1/rentals", json=H100, headers=headers).json()
        placed = wait_for(client, rental["id"], headers, "placed")
        assert placed["price_micros_per_hour"] == TEN_OFF
        meter_pass_at(client, clock, MIDNIGHT)
        meter_pass_at(client, clock, MIDNIGHT + timedelta(hours=1))
        body = client.get(f"/v1/rentals/{rental['id']}", headers=headers).json()
        assert body["price_micros_per_hour"] == TWENTY_OFF
        assert body["quote"]["discounts"] == [
            {"label": f"membership {plans[1]['id']}", "micros_per_hour": 598_000}
        ]
        assert charged(client, rental["id"], headers) == TEN_OFF + TWENTY_OFF


def test_a_membership_starting_next_month_posts_its_fee_once_when_it_starts(database_url: str) -> None:
    """Made on 2026-12-20 for 2027, a membership with a 120-unit fee takes nothing in December (cash, the
    December invoice and the month's spend keep clear of it); the meter loop's pass posts the fee once, at
    its start, on January's invoice. It was posted when it was made, on December's invoice and spend."""
    made_at = datetime(2026, 12, 20, 12, 0, tzinfo=UTC)
    with replayed(database_url, made_at) as (client, clock):
        year = (MIDNIGHT, MIDNIGHT + timedelta(days=365))
        tenant_id, headers = make_tenant(client, "future")
        credit = {"amount_micros": 1_000_000_000}
        assert client.post(f"/v1/tenants/{tenant_id}/credit", json=credit, headers=ADMIN).status_code == 201
        body = {"kind": "membership", "discount_bp": 1000, "fee_micros": 120_000_000}
        body |= {"starts_at": year[0].isoformat(), "ends_at": year[1].isoformat()}
        plan = client.post(f"/v1/tenants/{tenant_id}/plans", json=body, headers=ADMIN).json()
        client.app.state.services.meter.work()
        assert client.get("/v1/balance", headers=headers).json()["cash_micros"] == 1_000_000_000
        assert client.get("/v1/limits", headers=headers).json()["spent_month_micros"] == 0
        assert client.get("/v1/invoices/2026-12", headers=headers).json()["plan_lines"] == []

        meter_pass_at(client, clock, MIDNIGHT + timedelta(minutes=5))
        client.app.state.services.meter.work()  # a second pass posts nothing more
        fees = [t for t in client.get("/v1/ledger", headers=headers).json() if t["kind"] == "membership"]
        assert [(t["ref"], t["at_s"]) for t in fees] == [(plan["id"], int(MIDNIGHT.timestamp()))]
        assert client.get("/v1/balance", headers=headers).json()["cash_micros"] == 880_000_000
        (line,) = client.get("/v1/invoices/2027-01", headers=headers).json()["plan_lines"]
        assert line["amount_micros"] == 120_000_000 and line["ref"] == plan["id"]
        assert client.get("/v1/invoices/2026-12", headers=headers).json()["plan_lines"] == []


def test_a_plan_given_no_end_runs_a_calendar_year(database_url: str) -> None:
    """A membership from 2028-01-01 with no end runs to 2029-01-01 (it ended 2028-12-31: 365 days)."""
    with replayed(database_url, datetime(2027, 12, 15, 12, 0, tzinfo=UTC)) as (client, _):
        tenant_id, _ = make_tenant(client, "leap")
        body = {"kind": "membership", "discount_bp": 1000, "starts_at": "2028-01-01T00:00:00Z"}
        made = client.post(f"/v1/tenants/{tenant_id}/plans", json=body, headers=ADMIN)
        assert made.status_code == 201, made.text
        assert made.json()["ends_at"] == "2029-01-01T00:00:00Z"


NOON = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("window", "rates"),
    [
        ((NOON, NOON + timedelta(hours=1)), [(HALF_OFF, True), (H100_ON_DEMAND, False)]),
        ((NOON + timedelta(hours=1), NOON + timedelta(days=30)), [(H100_ON_DEMAND, False), (HALF_OFF, True)]),
    ],
    ids=["membership-ends-after-1h", "membership-starts-after-1h"],
)
def test_an_invoice_names_the_plan_that_priced_each_rate_of_a_re_priced_rental(
    database_url: str, window: tuple[datetime, datetime], rates: list[tuple[int, bool]]
) -> None:
    """A 3-h rental on 1 x H100 from 12:00, its tenant on 50% off for 12:00-13:00 or from 13:00: its
    December invoice line (JSON and CSV) shows 12:00-13:00 and 13:00-15:00 each at the rate that priced it
    with that plan's discount, or none; its line's rate and discounts are its last segment's, its amount what
    the ledger charged. The line named the rental's latest quote's plan (or none) for all 3 h."""
    with replayed(database_url, NOON) as (client, clock):
        headers = _member(client, "invoiced", (5000, *window))
        (plan,) = client.get("/v1/plans", headers=headers).json()
        discount = [{"label": f"membership {plan['id']}", "micros_per_hour": HALF_OFF}]
        rental = client.post("/v1/rentals", json=H100, headers=headers).json()
        wait_for(client, rental["id"], headers, "placed")
        for hour in (1, 2, 3):
            meter_pass_at(client, clock, NOON + timedelta(hours=hour))

        (line,) = client.get("/v1/invoices/2026-12", headers=headers).json()["lines"]
        edges = [NOON, NOON + timedelta(hours=1), NOON + timedelta(hours=3)]
        assert [
            (s["from_at"], s["to_at"], s["rate_micros_per_hour"], s["discounts"]) for s in line["segments"]
        ] == [
            (f"{lo:%Y-%m-%dT%H:%M:%SZ}", f"{hi:%Y-%m-%dT%H:%M:%SZ}", rate, discount if planned else [])
            for (lo, hi), (rate, planned) in zip(pairwise(edges), rates, strict=True)
        ]
        assert (line["rate_micros_per_hour"], line["discounts"]) == (
            rates[-1][0],
            discount if rates[-1][1] else [],
        )
        assert (
            line["amount_micros"] == rates[0][0] + 2 * rates[1][0] == charged(client, rental["id"], headers)
        )

        text = client.get("/v1/invoices/2026-12?format=csv", headers=headers).text
        rows = [r.split(",") for r in text.splitlines() if r.startswith("rental_segment,")]
        assert [(r[4], r[5]) for r in rows] == [
            (str(rate), f"membership {plan['id']}: {HALF_OFF}" if planned else "none")
            for rate, planned in rates
        ]
