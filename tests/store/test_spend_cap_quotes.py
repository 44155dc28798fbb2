"""A pending rental's price under a spend cap, on SQLite and PostgreSQL: its quote without a contract's
coverage, 0 when the cycle claims a contract for it. The quote's coverage was the contracts open when it was
asked for: asked for inside a window and held (by a quota) past its end, it passed a cap at 0 and started at
23.92/h; asked for before a window opened, it stayed held by the cap inside it, though covered."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from conftest import T0, with_example_fleet
from suanli.app.limits import cycle_limits
from suanli.app.records import ContractRecord, Rental, RentalSpec
from suanli.app.rentals import to_request
from suanli.domain.catalog_data import CATALOG
from suanli.domain.plan import Reason
from suanli.domain.quotas import TenantLimits
from suanli.domain.request import Tier

RATE = 23_920_000  # 8 H100 on demand, micros per hour


def test_a_pending_rental_counts_at_its_uncovered_rate_unless_the_cycle_claims_a_contract_for_it(
    store,
) -> None:
    _, uow = store
    with_example_fleet(uow)
    spec = RentalSpec(gpu_model="H100", gpus=8, regions=("eu-west",))
    covered_when_asked = {"final_micros_per_hour": 0, "contract_coverage_micros_per_hour": RATE}
    rental = Rental("rnt_q", "ten_a", "pending", spec, T0, quote=covered_when_asked)
    capped = {"ten_a": TenantLimits(daily_cap_micros=1_000_000)}
    with uow() as u:
        limits = cycle_limits(u, CATALOG, capped, [rental], {}, T0.timestamp())
    request = to_request(rental)
    assert limits.price_micros_per_hour(request) == RATE
    held = limits.ledger([], T0.timestamp()).check(request)
    assert held is not None and held.reason is Reason.SPEND_CAP
    claimed = replace(request, tier=Tier.RESERVED)  # a contract open now covers all of it
    assert limits.price_micros_per_hour(claimed) == 0
    assert limits.ledger([], T0.timestamp()).check(claimed) is None
    asked_reserved = replace(
        rental, id="rnt_r", spec=replace(spec, tier="reserved"), quote={"final_micros_per_hour": RATE}
    )
    with uow() as u:
        limits = cycle_limits(u, CATALOG, capped, [asked_reserved], {}, T0.timestamp())
    assert limits.price_micros_per_hour(to_request(asked_reserved)) == RATE  # asked for so: no claim


def test_a_covered_rental_pays_its_uncovered_rate_from_its_tenants_first_contract_end(store) -> None:
    """What the caps count after coverage ends: a running covered rental's rate plus its coverage, a claimed
    pending one's uncovered rate, from the first end of its tenant's open contracts; nothing for a tenant
    with none open, or a rental not covered."""
    _, uow = store
    with_example_fleet(uow)
    opened, ends = T0 - timedelta(hours=1), T0 + timedelta(minutes=20)
    contracts = [
        ContractRecord("ctr_1", "ten_a", "H100-SXM-80GB", 8, "eu-west", opened, ends, opened),
        ContractRecord(
            "ctr_2", "ten_a", "H100-SXM-80GB", 8, "cn-north", opened, ends + timedelta(hours=5), opened
        ),
        ContractRecord(
            "ctr_3", "ten_b", "H100-SXM-80GB", 8, "eu-west", ends, ends + timedelta(hours=1), opened
        ),
    ]
    spec = RentalSpec(gpu_model="H100", gpus=8)
    pending = Rental("rnt_p", "ten_a", "pending", spec, T0, quote={"final_micros_per_hour": RATE})
    other = Rental("rnt_o", "ten_b", "pending", spec, T0, quote={"final_micros_per_hour": RATE})
    capped = {"ten_a": TenantLimits(daily_cap_micros=1), "ten_b": TenantLimits(daily_cap_micros=1)}
    with uow() as u:
        limits = cycle_limits(
            u, CATALOG, capped, [pending, other], {}, T0.timestamp(), {"rnt_live": RATE}, contracts
        )
    live = replace(to_request(pending), id="rnt_live")  # its rate 0 (not in `live` here), covered by RATE
    assert limits.rate_after(live) == (ends.timestamp(), RATE)
    claimed = replace(to_request(pending), tier=Tier.RESERVED)
    assert limits.rate_after(claimed) == (ends.timestamp(), RATE)
    assert limits.rate_after(to_request(pending)) is None  # not claimed: it pays its full rate already
    assert limits.rate_after(replace(to_request(other), tier=Tier.RESERVED)) is None  # no contract open
