"""SLA credits: a tenant's availability in a UTC month from the node outages that hit its rentals, the credit
tier it falls in, and the ledger postings of the credit.

Definitions (all integer epoch seconds, windows half-open):

* The window is the month `[start_s, end_s)`, cut at `now_s` when the month has not ended.
* An outage is a node out of service over `[started_s, ended_s)` (open while `ended_s` is None: up to the
  window's end). A node an operator cordoned for maintenance is not an outage (the caller records none).
* A rental's service interval `W` is its billable interval `[started_s, ended_s or window end)`.
* An outage *hits* a rental when it is on one of the rental's nodes and overlaps the rental's life with its
  end included: `outage.started_s <= rental end` and `outage end > rental.started_s`. The end is included
  because a rental lost to a node outage stops billing at the node's last heartbeat, which is exactly where
  the outage starts.
* The rental's down time `D` is the union over the outages that hit it of `[max(outage start, rental start),
  outage end)`: a rental on several nodes (a gang) is down in a second when any of its nodes is down, and
  a rental lost to an outage stays down until the node is back.
* In the window, a rental counts `total = |(W u D) n window|` seconds and `down = |D n window|` seconds.
  A tenant's availability is `1 - sum(down) / sum(total)` over its rentals; with no rental-seconds it is 1.
* Affected charges: the month's charges (charge transactions with `at_s` in the month) of the rentals with
  down time in the window.
* Tiers (`TIERS`): availability strictly below 99.9% -> 10% of the affected charges, below 99% -> 25%,
  below 95% -> 100%; the lowest tier reached applies. Compared exactly in integers
  (`up * 1_000_000 < threshold_ppm * total`); the credit is `bp_of(affected, bp)` (round half up), so it
  never exceeds the affected charges.
* Posting: platform revenue -> tenant cash under key `sla:{tenant}:{yyyy-mm}` (once per tenant and month),
  the memo naming the availability, the tier and the outage ids as evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from suanli.domain.billing.invoice import InvoiceLine, Month, charged_in
from suanli.domain.billing.ledger import AccountId, AccountKind, Posting, Transaction
from suanli.domain.billing.money import BASIS_POINTS, bp_of

PPM = 1_000_000


@dataclass(frozen=True, slots=True)
class SlaTier:
    """Availability strictly below `below_ppm` (parts per million) earns `credit_bp` of affected charges."""

    below_ppm: int
    credit_bp: int

    @property
    def label(self) -> str:
        return f"<{format_ppm(self.below_ppm)}%: {self.credit_bp / 100:g}%"


TIERS: tuple[SlaTier, ...] = (
    SlaTier(999_000, 1_000),
    SlaTier(990_000, 2_500),
    SlaTier(950_000, BASIS_POINTS),
)


@dataclass(frozen=True, slots=True)
class Outage:
    id: int
    node: str
    started_s: int
    ended_s: int | None = None  # None: still down
    cause: str = ""


@dataclass(frozen=True, slots=True)
class SlaRental:
    """One rental of the tenant: its billable interval and every node it held."""

    rental_id: str
    started_s: int
    ended_s: int | None
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class RentalAvailability:
    rental_id: str
    total_s: int
    down_s: int
    outage_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SlaReport:
    """A tenant's month: availability, the outages that hit it, affected charges and the credit they earn."""

    tenant_id: str
    month: Month
    total_s: int
    down_s: int
    rentals: tuple[RentalAvailability, ...]
    outages: tuple[Outage, ...]
    affected_micros: int
    tier: SlaTier | None
    credit_micros: int

    @property
    def up_s(self) -> int:
        return self.total_s - self.down_s

    @property
    def availability_ppm(self) -> int:
        """Availability in parts per million, floored (comparing it with a whole-ppm threshold is exact)."""
        return PPM if self.total_s == 0 else self.up_s * PPM // self.total_s

    @property
    def credit_bp(self) -> int:
        return 0 if self.tier is None else self.tier.credit_bp

    @property
    def key(self) -> str:
        return sla_key(self.tenant_id, self.month)

    @property
    def memo(self) -> str:
        evidence = ", ".join(f"#{o.id} on {o.node}" for o in self.outages) or "none"
        tier = "none" if self.tier is None else self.tier.label
        return (
            f"SLA {self.month}: availability {format_ppm(self.availability_ppm)}% "
            f"({self.down_s} s down of {self.total_s} s); tier {tier} of {self.affected_micros} micros "
            f"affected charges; outages {evidence}"
        )

    def postings(self) -> tuple[Posting, ...]:
        return sla_credit_postings(self.tenant_id, self.credit_micros)


def format_ppm(ppm: int) -> str:
    """Parts per million as a percentage with 4 decimals, truncated: 999_000 -> '99.9000'."""
    return f"{ppm // 10_000}.{ppm % 10_000:04d}"


def sla_key(tenant_id: str, month: Month) -> str:
    return f"sla:{tenant_id}:{month}"


def sla_credit_postings(tenant_id: str, amount_micros: int) -> tuple[Posting, ...]:
    """The credit: platform revenue down, tenant cash up."""
    return (
        Posting(AccountId.platform_revenue(), -amount_micros),
        Posting(AccountId.tenant_cash(tenant_id), amount_micros),
    )


def sla_credit_line(tx: Transaction) -> InvoiceLine:
    """A posted SLA credit as an invoice line: the credit as a negative amount, the memo as evidence."""
    credited = tx.amount_to(frozenset({AccountKind.TENANT_CASH}))
    return InvoiceLine(kind="sla_credit", ref=tx.key, description=tx.memo, amount_micros=-credited)


def tier_for(up_s: int, total_s: int, tiers: Sequence[SlaTier] = TIERS) -> SlaTier | None:
    """The tier of largest credit whose threshold the availability `up_s / total_s` is strictly below."""
    if total_s <= 0:
        return None
    reached = [t for t in tiers if up_s * PPM < t.below_ppm * total_s]
    return max(reached, key=lambda t: t.credit_bp, default=None)


def _union_length(intervals: Iterable[tuple[int, int]]) -> int:
    total, cursor = 0, None
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if cursor is None or start > cursor:
            total += end - start
            cursor = end
        elif end > cursor:
            total += end - cursor
            cursor = end
    return total


def _clip(start: int, end: int, lo: int, hi: int) -> tuple[int, int]:
    return max(start, lo), min(end, hi)


def hits(outage: Outage, rental: SlaRental) -> bool:
    """The outage is on one of the rental's nodes and overlaps its life, end included."""
    if outage.node not in rental.nodes:
        return False
    if rental.ended_s is not None and outage.started_s > rental.ended_s:
        return False
    return outage.ended_s is None or outage.ended_s > rental.started_s


def rental_availability(
    rental: SlaRental, outages: Sequence[Outage], start_s: int, end_s: int
) -> RentalAvailability:
    """The rental's total and down seconds in the window `[start_s, end_s)`, and the outages that hit it."""
    service = _clip(rental.started_s, end_s if rental.ended_s is None else rental.ended_s, start_s, end_s)
    hit = [o for o in outages if hits(o, rental)]
    down = [
        _clip(max(o.started_s, rental.started_s), end_s if o.ended_s is None else o.ended_s, start_s, end_s)
        for o in hit
    ]
    down_s = _union_length(down)
    total_s = _union_length([service, *down])
    ids = tuple(sorted(o.id for o, d in zip(hit, down, strict=True) if d[1] > d[0]))
    return RentalAvailability(rental.rental_id, total_s, down_s, ids)


def sla_report(
    tenant_id: str,
    month: Month,
    rentals: Sequence[SlaRental],
    outages: Sequence[Outage],
    charges: Mapping[str, Sequence[tuple[int, int]]],
    now_s: int,
    tiers: Sequence[SlaTier] = TIERS,
) -> SlaReport:
    """The tenant's availability in the month (up to `now_s`), the outages that hit it, and its credit.

    `charges` maps a rental id to its charge transactions as (at_s, micros charged)."""
    start_s, end_s = month.start_s, min(month.end_s, max(now_s, month.start_s))
    found = tuple(rental_availability(r, outages, start_s, end_s) for r in rentals)
    total_s = sum(r.total_s for r in found)
    down_s = sum(r.down_s for r in found)
    hit_ids = {i for r in found for i in r.outage_ids}
    affected = sum(
        charged_in(charges.get(r.rental_id, ()), month.start_s, month.end_s) for r in found if r.down_s > 0
    )
    affected = max(affected, 0)
    tier = tier_for(total_s - down_s, total_s, tiers) if down_s > 0 else None
    credit = 0 if tier is None else bp_of(affected, tier.credit_bp)
    by_id = {o.id: o for o in outages}
    return SlaReport(
        tenant_id,
        month,
        total_s,
        down_s,
        found,
        tuple(by_id[i] for i in sorted(hit_ids)),
        affected,
        tier,
        credit,
    )
